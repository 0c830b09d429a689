"""The HTML report of real producer output: every number on the page is the typed value.

Each test renders what a producer made (``layerprof.profile`` in hooks and ops
mode, ``analyze`` of traces torch.profiler wrote, ``diff`` of two profiles, the
HTA GPU traces when present) and reads the page's tables back. Safety, size and
writing are in test_html_safety.py; the browser in test_html_browser.py.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

import pytest

from layerprof import codec, sinks
from layerprof.analysis.diagnose import diagnose, diagnose_run
from layerprof.analysis.diff import diff
from layerprof.analysis.gate import gate as gate_of
from layerprof.cli import main
from layerprof.errors import UsageError
from layerprof.pivot.change import Change, judgement
from layerprof.pivot.profile import Profile, Run
from layerprof.render.html import Section, render_html
from layerprof.render.html import sections as registry
from layerprof.render.html.charts import BarSeries, bars
from layerprof.render.html.profile import phase_ops
from layerprof.render.html.subject import Subject
from tests.support.html_subjects import (
    assert_times,
    chart_data,
    cpu_run,
    hooks_profile,
    hostile_profile,
    number,
    one_rank_run,
    ops_profile,
    section_ids,
    slow_diff,
    tables,
    trace_dir,
)
from tests.support.paths import DATA
from tests.support.readback import assert_percent, assert_shows, read_shapes

RELEASE = DATA / "release-0.1.0"

# ---------------------------------------------------------------- a profile, hooks mode


def test_hooks_profile_layer_table_is_the_typed_rows() -> None:
    prof = hooks_profile()
    page = render_html(prof)
    rows = prof.rows()
    table = tables(page)["lp-layers"]
    assert [c.text for c in table.column("Layer")] == [r.path or "(root)" for r in rows]
    assert [c.text for c in table.column("Type")] == [r.type for r in rows]
    assert_shows([c.text for c in table.column("Calls")], [r.calls for r in rows])
    assert_times(table, "Total (", [r.total_ns for r in rows])
    assert_times(table, "Self (", [r.self_ns for r in rows])
    shares = table.column("% of forward")
    assert_percent([c.text for c in shares], [r.share for r in rows])
    assert [number(c) for c in shares] == [r.share for r in rows]
    assert [read_shapes(c.text) for c in table.column("Input shapes")] == [
        [list(s) for s in r.input_shapes or ()] for r in rows
    ]
    assert [number(c) for c in table.column("Params")] == [r.params for r in rows]
    assert [number(c) for c in table.column("FLOPs")] == [r.flops for r in rows]
    assert [number(c) for c in table.column("Output")] == [r.output_bytes for r in rows]
    # a CPU profile has no device or backward columns (absent, not zero)
    assert not any(h.startswith(("Device", "Backward", "Host")) for h in table.headers)
    # hover: the self time's confidence interval, the measured totals' spread
    row = next(r for r in rows if r.path == "blocks.1.0")
    i = [r.path for r in rows].index("blocks.1.0")
    assert row.self_summary is not None and row.total is not None
    assert "95% CI of the median" in str(table.column(table.find("Self ("))[i].tip)
    assert f"(n={row.total.n})" in str(table.column(table.find("Total ("))[i].tip)


def test_hooks_profile_sections_latency_and_charts() -> None:
    prof = hooks_profile()
    page = render_html(prof)
    assert section_ids(page)[:6] == ["latency", "hierarchy", "layers", "top", "compute", "findings"]
    assert "<title>Net — layerprof</title>" in page
    assert prof.latency is not None and prof.latency_ns is not None
    assert prof.latency.ci_low is not None and prof.latency.ci_high is not None
    data = chart_data(page)
    lat = data["lp-lat"]
    assert lat["kind"] == "latency"
    assert lat["samples_ms"] == [v / 1e6 for v in prof.latency_ns.tolist() or ()]
    assert lat["median_ms"] == prof.latency.median / 1e6
    assert lat["first_ms"] == (prof.first_ns or 0) / 1e6
    # the tree: one block per layer, every child inside its parent
    tree = data["lp-hier"]
    assert len(tree["ids"]) == len(prof.rows())
    size = dict(zip(tree["ids"], tree["values"], strict=True))
    inside: dict[str, float] = {}
    for node, parent in zip(tree["ids"], tree["parents"], strict=True):
        if parent:
            inside[parent] = inside.get(parent, 0.0) + size[node]
    assert all(total <= size[p] * (1 + 1e-9) for p, total in inside.items())
    assert "1 · Sequential" in tree["labels"]  # ModuleList items say what they are
    top = data["lp-top-layers"]
    ranked = sorted((r for r in prof.rows() if r.self_ns > 0), key=lambda r: -r.self_ns)[:20]
    assert top["series"][0]["values"] == [r.self_ns / 1e6 for r in ranked]


def test_findings_are_the_diagnosis() -> None:
    prof = hooks_profile()
    page = render_html(prof)
    found = diagnose(prof)
    assert page.count('<div class="finding ') == len(found)
    for f in found:  # escaped as the page escapes text ('<0.1% of peak' in a roofline title)
        assert html.escape(f.title) in page
    assert "No findings" in render_html(prof, findings=())
    assert 'id="findings"' in page


# ---------------------------------------------------------------- a profile, ops mode


def test_ops_profile_operator_tables_are_the_typed_ops() -> None:
    prof = ops_profile()
    page = render_html(prof)
    ops = sorted(phase_ops(prof.ops), key=lambda o: -o.self_ns)
    table = tables(page)["lp-ops"]
    names = [c.text for c in table.column("Operator")]
    assert names == [o.name + (" [backward]" if o.phase == "backward" else "") for o in ops]
    assert any(n.endswith("[backward]") for n in names)
    assert_times(table, "Self (", [o.self_ns for o in ops])
    assert_times(table, "Total (", [o.total_ns for o in ops])
    assert_shows([c.text for c in table.column("Calls")], [o.calls for o in ops])
    # one block per layer that ran operators directly, busiest first
    layers = {o.layer for o in prof.ops}
    assert page.count('<details class="layer-ops">') == len(layers)
    per_layer = tables(page)["lp-layer-ops-0"]
    busiest = max(layers, key=lambda la: sum(o.self_ns for o in prof.ops if o.layer == la))
    mine = sorted((o for o in prof.ops if o.layer == busiest), key=lambda o: -o.self_ns)
    assert_times(per_layer, "Self (", [o.self_ns for o in mine])


def test_ops_profile_backward_columns() -> None:
    prof = ops_profile()
    rows = prof.rows()
    assert any(r.backward_total_ns is not None for r in rows)
    table = tables(render_html(prof))["lp-layers"]
    assert_times(table, "Backward total (", [r.backward_total_ns for r in rows])
    assert_times(table, "Backward self (", [r.backward_self_ns for r in rows])


# ---------------------------------------------------------------- an analyzed trace


def test_one_rank_trace_shows_step_time_and_trace_sections() -> None:
    run = one_rank_run()
    p = run.rank()
    page = render_html(run)
    ids = section_ids(page)
    assert "Step time" in page and "Inference latency" not in page
    assert {"latency", "steps", "gpu", "memory", "annotations", "findings", "notes"} <= set(ids)
    assert "ranks" not in ids and "rank-ops" not in ids  # one rank: nothing side by side
    assert "No GPU activity in this trace (CPU only)." in page
    assert p.trace.steps is not None and p.latency is not None
    steps = tables(page)["lp-trace-steps"]
    assert "Rank" not in steps.headers
    assert [c.text for c in steps.column("Steps")] == [str(len(p.trace.steps.steps))]
    assert_times(steps, "Median (", [p.latency.median])
    assert_times(steps, "CI low (", [p.latency.ci_low])
    assert steps.column("Step definition")[0].text == p.trace.steps.definition
    assert p.trace.memory is not None
    memory = tables(page)["lp-trace-memory"]
    assert_shows(
        [c.text for c in memory.column("Peak allocated")],
        [d.peak_allocated for d in p.trace.memory.devices],
    )
    allocs = tables(page)["lp-trace-memory-ops"]
    assert [c.text for c in allocs.column("Operator")] == [a.op for a in p.trace.memory.top_ops]
    ann = tables(page)["lp-trace-annotations"]
    ranked = sorted(p.trace.annotations, key=lambda a: -a.total_ns)[:50]
    assert [c.text for c in ann.column("Annotation")] == [a.path for a in ranked]
    assert_times(ann, "Total (", [a.total_ns for a in ranked])
    chart = chart_data(page)["lp-steps"]
    assert chart["series"][0]["ms"] == [s.dur_ns / 1e6 for s in p.trace.steps.steps]
    assert page.count('<div class="finding ') == len(diagnose_run(run))
    assert p.trace.source is not None
    details = dict(re.findall(r"<dt>(.*?)</dt><dd>(.*?)</dd>", page))
    assert_shows([details["events"]], [p.trace.source.events])
    assert details["layers from"] == p.trace.source.module_source
    assert f"<span>rank from</span>{run.rank_source}" in page


def test_two_rank_trace_compares_ranks() -> None:
    run = cpu_run()
    assert len(run.ranks) == 2 and run.cross is not None
    page = render_html(run)
    t = tables(page)
    assert {"ranks", "steps", "rank-ops"} <= set(section_ids(page))
    ranks = t["lp-ranks"]
    assert_times(ranks, "Median step (", [line.median_step_ns for line in run.cross.ranks])
    steps = t["lp-trace-steps"]
    assert [c.text for c in steps.column("Rank")] == ["rank 0", "rank 1"]
    per_step = t["lp-rank-steps"]
    assert_times(per_step, "rank 1 (", [dict(s.ns_by_rank).get(1) for s in run.cross.steps])
    ops = t["lp-trace-ops"]
    assert {c.text for c in ops.column("Rank")} == {"rank 0", "rank 1"}
    assert "shown" in page and "rank 0 of 2" in page
    assert [s["name"] for s in chart_data(page)["lp-steps"]["series"]] == ["rank 0", "rank 1"]


def test_hta_gpu_traces(hta_dir: Path) -> None:
    """Real GPU traces: devices, kernels, memcpy, launches, per rank and side by side."""
    from layerprof.trace import analyze

    run = analyze(hta_dir / "trace_filter")
    page = render_html(run)
    t = tables(page)
    devices = [(p, d) for p in run.ranks for d in p.trace.devices]
    assert devices
    gpu = t["lp-trace-devices"]
    assert_times(gpu, "Busy (", [d.busy_in_window_ns for _, d in devices])
    assert_percent([c.text for c in gpu.column("Utilization")], [d.utilization for _, d in devices])
    kernels = t["lp-trace-kernels"]
    expect = [k for p in run.ranks for k in sorted(p.trace.kernels, key=lambda k: -k.total_ns)[:50]]
    names = kernels.column("Kernel")  # long C++ signatures cut in the middle, whole on hover
    assert [c.tip or c.text for c in names] == [k.name for k in expect]
    for cell, k in zip(names, expect, strict=True):  # a long name keeps both ends, 160 at most
        if len(k.name) <= 160:
            assert cell.text == k.name
        else:
            head, tail = cell.text.split("…")
            assert len(cell.text) == 160 and k.name.startswith(head) and k.name.endswith(tail)
    assert any(c.tip for c in names)
    assert_times(kernels, "Total (", [k.total_ns for k in expect])
    assert_times(kernels, "Mean (", [k.mean_ns for k in expect])
    launches = [p.trace.launches for p in run.ranks if p.trace.launches is not None]
    assert_times(t["lp-trace-launch"], "Synchronize (", [x.sync_ns for x in launches])
    memcpy = [m for p in run.ranks for m in p.trace.memcpy]
    assert [c.text for c in t["lp-trace-memcpy"].column("Kind")] == [m.kind for m in memcpy]
    kinds = chart_data(page)["lp-kernels"]
    assert kinds["kind"] == "bars" and len(kinds["labels"]) <= 20
    assert 'id="ranks"' in page
    one = analyze(next((hta_dir / "ns_resolution_trace").glob("*.json.gz")))
    assert "lp-trace-devices" in tables(render_html(one))


# ---------------------------------------------------------------- a diff


def test_diff_tables_are_the_typed_changes() -> None:
    d = slow_diff()
    page = render_html(d)
    t = tables(page)
    assert {"diff", "diff-layers"} <= set(section_ids(page))
    assert "findings" not in section_ids(page)
    layers = sorted(d.layers, key=lambda r: (-abs(r.change.delta_ns), r.label))
    table = t["lp-diff-layers-table"]
    assert [c.text for c in table.column("Layer")] == [r.label for r in layers]
    assert_shows(
        [c.text for c in table.column("Δ (ms)")], [r.change.delta_ns for r in layers], per=1e6
    )
    assert [number(c) for c in table.column("Δ (ms)")] == [r.change.delta_ns for r in layers]
    assert_shows(
        [c.text for c in table.column("Base (ms)")], [r.change.base_ns for r in layers], per=1e6
    )
    assert_change_pct([c.text for c in table.column("Δ %")], [r.change for r in layers])
    assert_change_pct([c.text for c in table.column("Total Δ %")], [r.total for r in layers])
    # the layer made slower moved most
    assert layers[0].path == "2" and layers[0].change.delta_ns > 1_500_000
    chart = chart_data(page)["lp-diff-layers"]
    assert chart["labels"][0] == "2"
    assert chart["series"][0]["values"][0] == layers[0].change.delta_ns / 1e6
    assert d.headline().split(";")[0] in page
    assert d.latency is not None
    assert d.latency.delta_pct is not None
    assert f"{abs(d.latency.delta_pct):.1f} %" in page


def test_diff_gate_and_status_badges() -> None:
    d = slow_diff()
    gate = gate_of(d, 5.0, "layers")
    page = render_html(d, gate=gate)
    if gate.failed:
        assert "FAIL: regression beyond noise above 5 %" in page
        for reason in gate.reasons:
            assert reason.split(" (")[0] in page
    else:
        assert html.escape(gate.message) in page  # the page escapes its quotes
    slow = next(r for r in d.layers if r.path == "2")
    table = tables(page)["lp-diff-layers-table"]
    row = [c.text for c in table.column("Layer")].index(slow.label)
    status = table.column("Status")[row]
    assert status.text == judgement(slow.change)  # the wording every renderer uses
    assert "judged by" in str(status.tip)


def test_diff_of_traces_has_steps_ops_and_kernels_tables(hta_dir: Path) -> None:
    from layerprof.trace import analyze

    base = analyze(hta_dir / "trace_compare" / "base").rank()
    new = analyze(hta_dir / "trace_compare" / "test").rank()
    d = diff(base, new)
    assert d.kernels and d.ops
    t = tables(render_html(d))
    kernels = sorted(d.kernels, key=lambda r: (-abs(r.change.delta_ns), r.label))
    shown = t["lp-diff-kernels"].column("Kernel")
    assert [c.tip or c.text for c in shown] == [k.name for k in kernels]
    ops = sorted(d.ops, key=lambda r: (-abs(r.change.delta_ns), r.label))
    assert_shows(
        [c.text for c in t["lp-diff-ops"].column("New (ms)")],
        [o.change.new_ns for o in ops],
        per=1e6,
    )
    if d.steps:
        assert len(t["lp-diff-steps"].rows) == len(d.steps)


def test_diff_of_different_models_says_so() -> None:
    d = diff(hooks_profile(), hostile_profile())
    assert not d.comparable and d.reason
    page = render_html(d)
    assert f"Not comparable: {d.reason}".replace("'", "&#x27;") in page
    assert 'class="verdict bad"' in page


def test_diff_of_two_cpu_traces_has_steps() -> None:
    run = cpu_run()
    d = diff(run.ranks[0], run.ranks[1])
    assert d.steps
    steps = tables(render_html(d))["lp-diff-steps"]
    assert [c.text for c in steps.column("Step")] == [s.label for s in d.steps]
    assert [number(c) for c in steps.column("New (ms)")] == [s.change.new_ns for s in d.steps]


# ---------------------------------------------------------------- saved files and the CLI


@pytest.mark.parametrize("name", sorted(p.name for p in RELEASE.glob("*.json.gz")))
def test_report_html_of_saved_release_files(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``report FILE --html`` for profiles, analyses and diffs written by layerprof 0.1.0."""
    out = tmp_path / "r.html"
    assert main(["report", str(RELEASE / name), "-q", "--html", str(out)]) == 0
    page = out.read_text(encoding="utf-8")
    saved = codec.load(RELEASE / name)
    if isinstance(saved, Profile | Run):
        p = saved if isinstance(saved, Profile) else saved.rank()
        rows = p.rows()
        assert_times(tables(page)["lp-layers"], "Self (", [r.self_ns for r in rows])
    else:
        assert len(tables(page)["lp-diff-layers-table"].rows) == len(saved.layers)


def test_report_html_of_files_saved_now(tmp_path: Path) -> None:
    """A saved profile, run and diff re-render with the same tables as the live objects."""
    for name, obj in (
        ("p.json", hooks_profile()),
        ("a.json", cpu_run()),
        ("d.json", slow_diff()),
    ):
        saved = tmp_path / name
        obj.save(saved)
        out = tmp_path / (name + ".html")
        assert main(["report", str(saved), "-q", "--html", str(out)]) == 0
        again = tables(out.read_text(encoding="utf-8"))
        live = tables(render_html(obj))
        key = "lp-diff-layers-table" if name == "d.json" else "lp-layers"
        assert again[key].column("Layer") == live[key].column("Layer")
        times = "Δ (ms)" if name == "d.json" else again[key].find("Self (")
        assert [c.text for c in again[key].column(times)] == [
            c.text for c in live[key].column(times)
        ]


def test_cli_analyze_and_diff_write_html(tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    run = cpu_run()
    run.ranks[0].save(a)
    run.ranks[1].save(b)
    page = tmp_path / "t.html"
    assert main(["analyze", str(trace_dir()), "-q", "--html", str(page)]) == 0
    assert 'id="ranks"' in page.read_text(encoding="utf-8")
    out = tmp_path / "d.html"
    code = main(["diff", str(a), str(b), "--html", str(out), "--fail-above", "5%"])
    # the two ranks' timings are whatever the machine gave: the page shows the CLI's gate
    gate = gate_of(diff(Profile.load(a), Profile.load(b)), 5.0)
    assert code == (1 if gate.failed else 0)
    text = out.read_text(encoding="utf-8")
    assert 'id="diff"' in text
    if gate.failed:
        assert "FAIL: regression beyond noise above 5 %" in text
    else:
        assert "pass: no regression beyond noise above 5 %" in text


# ---------------------------------------------------------------- the renderer and the plug point


def test_html_renderer_takes_the_three_pivot_types() -> None:
    for obj in (hooks_profile(), cpu_run(), slow_diff()):
        text = sinks.render(obj, "html")
        assert isinstance(text, str) and text.startswith("<!DOCTYPE html>")
    with pytest.raises(UsageError, match="cannot show a dict"):
        sinks.render({"schema": "layerprof.profile/2"}, "html")
    with pytest.raises(UsageError, match="cannot show a dict"):
        render_html({})  # type: ignore[arg-type]


def test_a_new_section_plugs_in(monkeypatch: pytest.MonkeyPatch) -> None:
    """What another analysis does: one function in SECTIONS, its chart drawn by kind."""

    def flops_section(s: Subject) -> Section | None:
        p = s.profile
        if p is None:
            return None
        rows = [r for r in p.rows() if r.flops]
        chart = bars("FLOPs", [r.path for r in rows], [BarSeries("flops", tuple(float(r.flops or 0) for r in rows))], axis="FLOPs")  # fmt: skip
        return Section(
            "flops", "FLOPs", '<div id="lp-flops"></div>', "per layer", {"lp-flops": chart}
        )

    before = registry.SECTIONS
    monkeypatch.setattr(registry, "SECTIONS", (*before, flops_section))
    page = render_html(hooks_profile())
    assert section_ids(page)[-1] == "flops" and '<a href="#flops">FLOPs</a>' in page
    assert chart_data(page)["lp-flops"]["kind"] == "bars"
    assert render_html(slow_diff()).count('id="flops"') == 0

    def clash(s: Subject) -> Section | None:
        return Section("clash", "Clash", "", charts={"lp-flops": bars("x", [], [], axis="")})

    monkeypatch.setattr(registry, "SECTIONS", (*before, flops_section, clash))
    with pytest.raises(ValueError, match="lp-flops"):
        render_html(hooks_profile())


def assert_change_pct(texts: list[str], changes: list[Change | None]) -> None:
    """A change shows as ``new``/``gone`` or its signed percentage, read back."""
    for text, change in zip(texts, changes, strict=True):
        assert change is not None
        if change.status in ("added", "removed"):
            assert text == {"added": "new", "removed": "gone"}[change.status]
        else:
            assert_shows([text], [change.delta_pct])
