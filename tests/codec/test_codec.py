"""The JSON codec: old files load, round trips keep numbers, bad fields fail with their name."""

from __future__ import annotations

import copy
import gzip
import re
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layerprof import codec
from layerprof.analysis.diff import diff
from layerprof.errors import ProfileFormatError
from layerprof.pivot.diff import Diff
from layerprof.pivot.profile import Profile, Run
from tests.support.paths import DATA
from tests.support.profiles import fake_profile

RELEASE = DATA / "release-0.1.0"


def old(name: str) -> Any:
    return orjson.loads(gzip.decompress((RELEASE / f"{name}.json.gz").read_bytes()))


def test_profile_1_from_hooks_mode_loads() -> None:
    data = old("p_hooks")
    prof = codec.profile_from_dict(data, source="p_hooks.json")
    assert prof.meta.model.startswith("demo cnn")
    assert prof.latency_ns is not None and prof.latency_ns.n == 8
    assert prof.overhead is not None and prof.overhead.corrected
    by_path = {d["path"]: d for d in data["layers"]}
    for row in prof.rows():
        written = by_path[row.path]
        assert row.self_ns == pytest.approx(written["self_ms"] * 1e6, abs=1)
        assert row.total_ns == pytest.approx(written["total_ms"] * 1e6, abs=1)
    for root in prof.tree():
        root.self_check(tolerance_ns=1e-3)


def test_profile_1_from_ops_mode_with_backward_loads() -> None:
    prof = codec.profile_from_dict(old("p_ops"), source="p_ops.json")
    phases = {o.phase for o in prof.ops}
    assert phases == {"forward", "backward"}
    assert any(o.input_shapes for o in prof.ops)
    assert any(r.backward_total_ns for r in prof.rows())


def test_trace_1_documents_load_as_runs() -> None:
    cpu = codec.run_from_dict(old("a_cpu"), source="a_cpu.json")
    assert len(cpu.ranks) == 1 and [n.kind for n in cpu.notes] == ["legacy-trace"]
    assert cpu.notes[0].data == {"source": "a_cpu.json"}
    rank = cpu.rank()
    assert rank.trace.steps is not None and rank.latency_ns is not None
    assert rank.layers and rank.ops
    gpu = codec.run_from_dict(old("a_gpu"), source="a_gpu.json")
    g = gpu.rank()
    assert g.trace.source is not None and g.trace.source.has_device
    assert g.trace.devices and g.trace.kernels and g.trace.launches is not None
    assert g.meta.dtype == ""  # a trace says nothing about the dtype


def test_diff_1_loads_and_renders_again() -> None:
    data = old("d")
    d = codec.diff_from_dict(data, source="d.json")
    assert isinstance(d, Diff) and d.base_meta.model.startswith("demo cnn")
    again = codec.to_dict(d)
    assert again["schema"] == "layerprof.diff/1"
    assert {r["path"] for r in again["layers"]} == {r["path"] for r in data["layers"]}


def test_saved_files_are_sniffed_by_schema(tmp_path: Path) -> None:
    prof = fake_profile()
    assert isinstance(codec.load(prof.save(tmp_path / "p.json")), Profile)
    d = diff(prof, prof)
    assert isinstance(codec.load(d.save(tmp_path / "d.json")), Diff)
    run = Run(path="x", ranks=(prof,))
    assert isinstance(codec.load(run.save(tmp_path / "r.json")), Run)
    # each kind loads itself and refuses the others with a one-line error
    assert Run.load(tmp_path / "r.json").rank().meta == prof.meta
    assert Diff.load(tmp_path / "d.json").headline() == d.headline()
    with pytest.raises(ProfileFormatError, match=r"d\.json holds a Diff, not a Profile"):
        Profile.load(tmp_path / "d.json")


def test_samples_only_when_asked(tmp_path: Path) -> None:
    prof = fake_profile()
    small = orjson.loads(prof.save(tmp_path / "s.json").read_bytes())
    full = orjson.loads(prof.save(tmp_path / "f.json", samples=True).read_bytes())
    assert all("samples" not in layer for layer in small["layers"])
    assert all("series" in layer for layer in small["layers"] if layer["calls"])
    assert any("samples" in layer for layer in full["layers"])
    # latency samples are always kept: one number per iteration
    assert small["latency_ms"]["samples"]
    back = Profile.load(tmp_path / "s.json")
    for a, b in zip(prof.rows(), back.rows(), strict=True):
        assert a.self_ns == pytest.approx(b.self_ns, abs=1e-3)
        assert (a.total is None) == (b.total is None)
        if a.total is not None and b.total is not None:
            assert a.total.ci_low == pytest.approx(b.total.ci_low, abs=1e-3)


def test_summary_only_profiles_still_diff(tmp_path: Path) -> None:
    prof = fake_profile()
    back = Profile.load(prof.save(tmp_path / "s.json"))
    d = diff(back, back)
    assert d.verdict == "same"
    assert any("saved summaries" in w for w in d.warnings)
    assert {r.change.basis for r in d.layers if r.status == "same"} <= {"summary", "threshold"}


# ---- malformed documents: one error that names the field -----------------------------

BAD_VALUES = [None, True, "x", -1, 1e300, [], {}, [1, "a"], {"a": 1}]


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value[:3]):
            out += _paths(v, (*prefix, i))
    return out


def _set(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    doc = copy.deepcopy(doc)
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return doc


DOCS = {
    "profile": fake_profile().to_dict(samples=True),
    "trace1": old("a_gpu"),
    "diff": old("d"),
}
FIELDS = [(name, p) for name, doc in DOCS.items() for p in _paths(doc) if p[0] != "schema"]


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(FIELDS), st.sampled_from(BAD_VALUES))
def test_any_field_with_any_wrong_value_loads_or_fails_cleanly(
    field: tuple[str, tuple[Any, ...]], value: Any
) -> None:
    name, path = field
    doc = _set(DOCS[name], path, value)
    try:
        loaded = codec.from_dict(doc, source="f.json")
    except ProfileFormatError as exc:
        message = str(exc)
        assert message.startswith("f.json: ") and "\n" not in message
        return
    # a document that loaded must render: every number it holds is usable
    codec.to_dict(loaded)
    if isinstance(loaded, Profile):
        loaded.rows()


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"layers": [{"path": 1}]}, "profile.layers[0].path"),
        ({"ops": [{"name": "x", "calls": "3"}]}, "profile.ops[0].calls"),
        ({"latency_ms": {"median": "1", "n": 3}}, "profile.latency_ms"),
        ({"meta": {"model": "m", "threads": 1.5}}, "profile.meta.threads"),
    ],
)
def test_errors_name_the_field(patch: dict[str, Any], field: str) -> None:
    data = {**fake_profile().to_dict(), **patch}
    with pytest.raises(ProfileFormatError, match="^" + re.escape(f"f.json: {field}")):
        codec.from_dict(data, source="f.json")


def test_unknown_schema_lists_the_known_ones() -> None:
    with pytest.raises(ProfileFormatError, match="unknown schema") as info:
        codec.from_dict({"schema": "layerprof.profile/99"}, source="f.json")
    assert info.value.hint is not None and "layerprof.profile/2" in info.value.hint


def test_trace_sections_are_read_through_the_trace(tmp_path: Path) -> None:
    """The trace-only sections live in one ``TraceSections`` value, read as
    ``profile.trace.kinds``; a live profile holds an empty one, ``with_trace`` gives a
    copy, and a save keeps both."""
    from layerprof.pivot.profile import NO_TRACE, TraceSections
    from layerprof.pivot.sections.trace import KindRow

    live = fake_profile()
    assert live.trace == NO_TRACE and live.trace.kernels == () and live.trace.steps is None
    kinds = (KindRow("compute", 3, 1_000),)
    traced = live.with_trace(kinds=kinds)
    assert traced.trace == TraceSections(kinds=kinds) and traced.trace.kinds == kinds
    assert live.trace == NO_TRACE  # with_trace copies
    assert traced.with_trace(kinds=()) == live  # emptied: one form for no trace
    for p in (live, traced):
        path = tmp_path / "p.json"
        p.save(path)
        again = Profile.load(path)
        assert again.trace == p.trace and again.trace.kinds == p.trace.kinds
