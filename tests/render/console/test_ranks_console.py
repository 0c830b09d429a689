"""The per layer × rank table: golden output at two widths, numbers from the Run."""

from __future__ import annotations

import io

import torch
from rich.console import Console

from layerprof.capture.platform.clocks import FakeClock
from layerprof.capture.recording.recorder import Recorder
from layerprof.pivot.records import Meta
from layerprof.render.console.ranks import print_layers_across_ranks
from layerprof.trace.distributed.ranks import merge_profiles
from tests.support import zoo_models as zoo
from tests.support.golden_files import check_golden


def profile(scale: int, rank: int):
    clock = FakeClock(scale=scale)
    model = zoo.Containers(clock)
    with Recorder(model, clock=clock) as rec:
        for _ in range(3):
            model(torch.zeros(2, 3))
    meta = Meta(model="Containers", torch="2.x", iters=3, created="fixed", extra={"rank": rank})
    return rec.profile(meta=meta)


def run():
    profiles = [profile(10_000 + 1_000 * r, r) for r in (2, 0, 1)]
    return merge_profiles("job", ["c.json", "a.json", "b.json"], profiles)


def render(width: int) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system=None, force_terminal=False)
    print_layers_across_ranks(run(), console, top=10)
    return buf.getvalue()


def test_layer_rank_table_golden_wide() -> None:
    check_golden("ranks_layers_120.txt", render(120))


def test_layer_rank_table_golden_narrow() -> None:
    text = render(64)
    check_golden("ranks_layers_64.txt", text)
    assert "hidden columns" in text


def test_rows_follow_every_rank() -> None:
    r = run()
    assert r.rank_source == "the profile's meta rank"
    assert [p.rank for p in r.ranks] == [0, 1, 2]
    for row in r.layer_ranks:
        times = [ns for _, ns in row.ns_by_rank]
        assert row.slowest_rank == 2  # the slowest fake clock
        assert (row.min_ns, row.max_ns) == (min(times), max(times))
        assert row.min_ns < row.median_ns < row.max_ns


def test_median_step_says_forward_for_live_rank_profiles() -> None:
    """Issue 22.8: for rank profiles (report) the per-rank median is the clean forward's
    latency, for traces (analyze) a whole ProfilerStep: the label says which."""
    from dataclasses import replace

    from layerprof.pivot.sections.distributed import RankLateness, Stragglers
    from layerprof.render.console.ranks import print_ranks

    live = [
        replace(
            profile(10_000, r),
            meta=Meta(model="Containers", source="layerprof.run", extra={"rank": r}),
            latency_ns=(1_000_000 + r, 1_100_000, 1_050_000),
        )
        for r in (0, 1)
    ]
    merged = merge_profiles("job", ["a.json", "b.json"], live)
    lateness = tuple(
        RankLateness(r, 4, 0, 2, 10, 5, None, None, 0, round(live[r].latency.median))  # type: ignore[union-attr]
        for r in (0, 1)
    )
    merged = replace(merged, stragglers=Stragglers(4, lateness, (), None, 5, 50))
    assert merged.step_word == "forward"
    buf = io.StringIO()
    print_ranks(merged, Console(file=buf, width=160, color_system=None), top=10)
    text = buf.getvalue()
    assert "median forward ms" in text and "median step" not in text
    traces = [replace(p, meta=replace(p.meta, source="trace")) for p in live]
    assert merge_profiles("job", ["a.json", "b.json"], traces).step_word == "step"
