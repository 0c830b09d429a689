"""What a diff warns about: sides that cannot be compared, layers that barely overlap,
different settings, and too few runs for a between-run verdict."""

from __future__ import annotations

from layerprof.analysis.diffjudge import ALPHA
from layerprof.pivot.change import Evidence
from layerprof.pivot.profile import Profile
from layerprof.pivot.records import Meta
from layerprof.pivot.sections.repeats import Repeats

RUNS_ADVISED = 5
"""Fewer processes per side than this rarely reach p < ALPHA on a t-test."""


def runs_warnings(evidence: Evidence, base: Repeats | None, new: Repeats | None) -> list[str]:
    out = []
    if evidence == "single-run":
        one = [side for side, r in (("base", base), ("new", new)) if r is not None and r.n >= 2]
        if one:
            out.append(
                f"only the {one[0]} side has several runs: the comparison is judged as one run"
                " per side"
            )
        return out
    assert base is not None and new is not None
    if evidence == "repeats":
        out.append(
            "the two sides' processes were not interleaved: a drift of the machine between"
            " the two sessions that is larger than the spread inside each is not told apart"
            " from a change; layerprof diff --run interleaves them"
        )
    if min(base.n, new.n) < RUNS_ADVISED:
        out.append(
            f"{base.n} vs {new.n} runs: with fewer than {RUNS_ADVISED} per side a change"
            f" reaches p < {ALPHA:g} only when the runs agree very closely; use more rounds"
        )
    return out


def comparability(base: Profile, new: Profile) -> tuple[bool, str | None]:
    if not base.layers or not new.layers:
        return True, None
    b = {i.path: i.type for i in base.layers}
    n = {i.path: i.type for i in new.layers}
    same = {p for p in b if n.get(p) == b[p]}
    has_children = len(b) > 1 or len(n) > 1
    if same and (not has_children or same - {""}):
        return True, None
    return False, (
        f"no layer paths in common: base profiles {base.meta.model or '?'} ({len(b)} layers),"
        f" new profiles {new.meta.model or '?'} ({len(n)} layers); they look like different"
        " models, so a per-layer comparison would only list every layer as removed and added"
    )


def overlap_warning(base: Profile, new: Profile) -> list[str]:
    b = {i.path for i in base.layers}
    n = {i.path for i in new.layers}
    union = b | n
    if union and len(b & n) < 0.5 * len(union):
        return [f"only {len(b & n)} of {len(union)} layer paths are on both sides"]
    return []


_META_CHECKS: tuple[tuple[str, str], ...] = (
    ("device", "devices"),
    ("dtype", "dtypes"),
    ("torch", "torch versions"),
    ("mode", "modes"),
    ("grad", "autograd settings"),
    ("threads", "thread counts"),
    ("inputs", "inputs"),
    ("source", "sources"),
    ("host", "hosts"),
)


def meta_warnings(base: Meta, new: Meta) -> list[str]:
    out = []
    for attr, words in _META_CHECKS:
        a, b = getattr(base, attr), getattr(new, attr)
        # a side that does not know (a trace has no thread count) is not a difference
        if a == b or a is None or b is None or a in ("", ()) or b in ("", ()):
            continue
        if attr == "inputs":
            a, b = ", ".join(a) or "-", ", ".join(b) or "-"
        out.append(f"different {words}: base {a}, new {b}")
    return out
