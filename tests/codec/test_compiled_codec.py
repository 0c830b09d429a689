"""A compiled profile, built from a hand-written trace (no compiling): JSON both ways,
the console's compiled summary and marks (golden), and the findings."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from rich.console import Console

from layerprof.analysis.diagnose import diagnose
from layerprof.capture.compiled.samples import (
    RunFacts,
    bucket_infos,
    build_section,
    layer_samples,
)
from layerprof.errors import ProfileFormatError
from layerprof.pivot.profile import Profile
from layerprof.pivot.records import LayerInfo, Meta
from layerprof.pivot.sections.compiled import GraphBreak, Recompile
from layerprof.render.console.profile import print_profile
from layerprof.trace.compiled import attribute_compiled
from tests.support.compiled_events import PATHS, TYPES, cpu_forward, record, tables
from tests.support.golden_files import check_golden


def compiled_profile(scale: int = 1, **facts: Any) -> Profile:
    """Two hand-written compiled forwards of 100 µs (times ``scale``)."""
    events = [
        {**e, "ts": e["ts"] * scale, "dur": e["dur"] * scale}
        for e in cpu_forward(1000) + cpu_forward(2000)
    ]
    att = attribute_compiled(tables(events), [record()], PATHS)
    infos = [LayerInfo(path="", type="Net", parent=None)]
    infos += [
        LayerInfo(path=p, type=t, parent=p.rsplit(".", 1)[0] if "." in p else "")
        for p, t in TYPES.items()
        if p
    ]
    layers = (*infos, *bucket_infos())
    calls = {p: 1.0 for p in TYPES if p != "blocks"}
    run = RunFacts(
        torch="2.13.0", mode="default", dynamic=None, split="cost", regions=("",),
        recompiled=False, compile_ns=2_500_000_000, frames={"0/0": "forward (net.py:10)"},
        breaks=(), recompiles=(), calls=calls,
    )  # fmt: skip
    section = build_section(att, RunFacts(**{**run.__dict__, **facts}))
    return Profile(
        meta=Meta(model="Net", torch="2.13.0", created="fixed", warmup=1, iters=2),
        layers=layers,
        samples=layer_samples(att, layers, calls),
        latency_ns=(95_000 * scale, 96_000 * scale),
        first_ns=2_600_000_000,
        compiled=section,
    )


def test_json_round_trip() -> None:
    prof = compiled_profile(
        breaks=(GraphBreak("Call to `torch._dynamo.graph_break()`", 2),),
        recompiles=(Recompile("0/1", "forward (net.py:10)", "size mismatch at index 0"),),
    )
    data = json.loads(json.dumps(prof.to_dict(samples=True)))
    body = data["compiled"]
    assert body["coverage"]["forward_ms"] == pytest.approx(0.1)
    assert body["coverage"]["attributed_share"] == pytest.approx(0.75)
    assert body["graphs"][0]["key"] == "k1" and body["graph_breaks"][0]["count"] == 2
    back = Profile.from_dict(data)
    assert back.compiled == prof.compiled
    assert [r.path for r in back.rows()] == [r.path for r in prof.rows()]


def test_profiles_without_the_section_have_no_key_and_load() -> None:
    prof = compiled_profile()
    data = prof.to_dict()
    del data["compiled"]
    assert Profile.from_dict(data).compiled is None
    plain = Profile(meta=Meta(model="m"))
    assert "compiled" not in plain.to_dict()


@pytest.mark.parametrize(
    ("key", "value", "where"),
    [
        ("split", "most", "profile.compiled.split"),
        ("coverage", None, "profile.compiled.coverage: missing"),
        ("compile_ms", "soon", "profile.compiled.compile_ms"),
        ("dynamic", "yes", "profile.compiled.dynamic"),
    ],
)
def test_malformed_sections_name_the_field(key: str, value: Any, where: str) -> None:
    data = compiled_profile().to_dict()
    data["compiled"][key] = value
    with pytest.raises(ProfileFormatError) as err:
        Profile.from_dict(data)
    assert where in str(err.value)


def test_a_kernel_with_a_bad_phase_is_refused() -> None:
    data = compiled_profile().to_dict()
    data["compiled"]["kernels"][0]["phase"] = "sideways"
    with pytest.raises(ProfileFormatError, match=r"kernels\[0\]\.phase"):
        Profile.from_dict(data)


def render(prof: Profile, width: int) -> str:
    buf = io.StringIO()
    print_profile(prof, console=Console(file=buf, width=width, color_system=None))
    return buf.getvalue()


def test_console_summary_golden() -> None:
    prof = compiled_profile(
        breaks=(GraphBreak("Call to `torch._dynamo.graph_break()`", 1),),
        recompiles=(Recompile("0/1", "forward (net.py:10)", "size mismatch at index 0"),),
    )
    check_golden("console_compiled_100.txt", render(prof, 100))
    check_golden("console_compiled_80.txt", render(prof, 80))


def test_rows_add_up_and_estimates_are_marked() -> None:
    prof = compiled_profile()
    text = render(prof, 120)
    assert "ln *" in text and "fc *" not in text and "act *" not in text
    root = prof.tree()[0]
    root.self_check(tolerance_ns=1e-6)
    assert root.row.total_ns == pytest.approx(100_000)


def test_findings_skip_the_buckets_and_speak_of_the_overhead() -> None:
    # 1 ms forwards: fc's 300 µs and the 250 µs of wrapper overhead are both beyond
    # the bottleneck rule's floor; only the layer may be called a bottleneck
    findings = diagnose(compiled_profile(scale=10))
    assert all("<compiled" not in (f.layer or "") for f in findings)
    assert all("<outside" not in f.title for f in findings)
    titles = [f.title for f in findings]
    assert "fc (Linear) is the bottleneck" in titles
    # the cold call is the compile, said as such (not "lazy initialisation")
    assert "the first call compiled the model (2,500.000 ms)" in titles
    assert not any(t.startswith("the first call is") for t in titles)
    # 25 of 100 µs is wrapper overhead: at the threshold, not beyond it
    assert not any("outside kernels" in t for t in titles)
    assert "many kernels fuse several layers" not in titles


def test_html_has_the_compiled_card_and_the_estimate_column() -> None:
    prof = compiled_profile(
        breaks=(GraphBreak("<script>alert(1)</script> break", 1),),
    )
    page = prof.render("html")
    assert isinstance(page, str)
    assert 'id="compiled"' in page and "Compiled (torch.compile)" in page
    assert "% estimated" in page and "graph_0_cpp_fused_gelu_view_1" in page
    assert "ln 75.0%, (root) 25.0%" in page
    assert "<script>alert(1)</script> break" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt; break" in page
    plain = Profile(meta=Meta(model="m"), latency_ns=(1, 2))
    plain_page = plain.render("html")
    assert isinstance(plain_page, str) and 'id="compiled"' not in plain_page
