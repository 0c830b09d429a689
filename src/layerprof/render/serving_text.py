"""The words and rows of a serving trace's steps by phase (``Profile.serving``) that the
console and the HTML report share."""

from __future__ import annotations

from layerprof.pivot.sections.serving import DEVICE_CLOCK, Serving, ServingStep
from layerprof.stats import median
from layerprof.units import human_si, human_time

PHASE_HEADERS = ("phase", "steps", "median step", "tokens/step", "tokens/s",
                 "per prefill token", "per decode request", "KV positions")  # fmt: skip
# prefill's requests and tokens share a column, and FLOPs and FLOP/s carry their unit in
# the header: the table fits in 100 columns (it was 112 wide once FLOPs were counted)
STEP_HEADERS = ("step", "phase", "prefill req/tok", "decode req", "KV pos",
                "time", "tokens/s", "FLOPs", "FLOP/s", "FLOP cover")  # fmt: skip


def phase_rows(s: Serving) -> list[tuple[str, ...]]:
    """Per phase (first-seen order): its steps' medians."""
    out: list[tuple[str, ...]] = []
    for phase in dict.fromkeys(x.phase for x in s.steps):
        steps = s.of_phase(phase)
        rates = [r for r in (x.tokens_per_s for x in steps) if r is not None]
        out.append((
            phase, str(len(steps)),
            human_time(median([x.time_ns for x in steps])),
            f"{median([x.prefill.tokens + x.decode.tokens for x in steps]):,.0f}",
            f"{median(rates):,.0f}" if rates else "-",
            _med_time([x.ns_per_prefill_token for x in steps]),
            _med_time([x.ns_per_decode_request for x in steps]),
            f"{median([x.prefill.kv + x.decode.kv for x in steps]):,.0f}",
        ))  # fmt: skip
    return out


def _med_time(values: list[float | None]) -> str:
    known = [v for v in values if v is not None]
    return human_time(median(known)) if known else "-"


def step_rows(s: Serving, most: int) -> list[tuple[str, ...]]:
    """The first ``most`` steps, one row each (``#i`` names the step's place)."""
    return [_step(i, x) for i, x in enumerate(s.steps[:most])]


def _step(i: int, x: ServingStep) -> tuple[str, ...]:
    rate = x.tokens_per_s
    return (
        f"#{i}", x.phase, f"{x.prefill.requests:,}/{x.prefill.tokens:,}",
        f"{x.decode.requests:,}", f"{x.prefill.kv + x.decode.kv:,}", human_time(x.time_ns),
        f"{rate:,.0f}" if rate is not None else "-",
        human_si(x.flops, "").strip() if x.flops else "-",
        human_si(x.flop_rate, "").strip() if x.flop_rate else "-",
        f"{x.flop_coverage:.0%}" if x.flop_coverage is not None else "-",
    )  # fmt: skip


def layer_rows(s: Serving, most: int) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """Phases (headers) and the layers' self time per step of each phase, the heaviest
    (by their largest per-phase self time) first."""
    names = tuple(p.name for p in s.phases)
    paths: dict[str, float] = {}
    for p in s.phases:
        for x in p.layers:
            paths[x.path] = max(paths.get(x.path, 0.0), x.self_ns)
    heaviest = sorted(paths, key=lambda path: -paths[path])[:most]
    rows = []
    for path in heaviest:
        cells = []
        for p in s.phases:
            row = p.layer(path)
            cells.append(human_time(row.self_ns) if row is not None else "-")
        rows.append((path or "(model)", *cells))
    return names, rows


def layer_title(s: Serving) -> str:
    """The per-phase layer table's title, naming its clock."""
    if s.phase_clock == DEVICE_CLOCK:
        return (
            "layers' device self time per step of each phase (the kernels each layer"
            " launched, by the step that launched them)"
        )
    return "layers' host self time per step of each phase (no device ops in the trace)"


def summary_line(s: Serving) -> str:
    counts = ", ".join(f"{len(s.of_phase(p))} {p}" for p in dict.fromkeys(x.phase for x in s.steps))
    line = f"{len(s.steps)} annotated steps ({counts})"
    if s.ignored_count:
        line += f"; {s.ignored_count} annotations not read (see the notes)"
    return line
