"""What a profile brings into a history: its environment, latency, layers with their
spread, a generate's and a training loop's figures, and a --repeat's processes."""

from __future__ import annotations

from dataclasses import replace

from layerprof.history.ingest import entries, environment, parse_when
from layerprof.pivot.sections.generation import Generation, Phase, PhaseLayer
from layerprof.pivot.sections.loop import LoopStep, TrainingLoop
from layerprof.pivot.sections.repeats import Repeats, RunMedians
from tests.support.history_runs import ENV, MS, Shape, profile, self_times


def test_one_profile_is_one_run_with_its_layers_and_latency() -> None:
    times = self_times(Shape(runs=1), 0)[0]
    (run,) = entries(profile(times), commit="abc", when_ns=5, branch="main", source="p.json")
    assert run.env == ENV == environment(profile(times))
    assert (run.commit, run.when_ns, run.branch, run.source) == ("abc", 5, "main", "p.json")
    assert [(f.name, f.median_ns, f.n) for f in run.figures] == [
        ("latency", sum(times.values()), 5)
    ]
    assert run.latency_samples_ns == (sum(times.values()),) * 5
    by_path = {x.path: x for x in run.layers}
    assert by_path["block1"].self_ns == times["block1"]
    assert by_path[""].total_ns == sum(times.values())  # the root's total: the whole tree
    assert by_path["block1"].self_spread_ns == 0  # every iteration alike


def test_a_generate_and_a_training_loop_bring_their_figures() -> None:
    prof = profile(self_times(Shape(runs=1), 0)[0])
    prof = replace(
        prof,
        generation=Generation(
            new_tokens=4,
            prompt_tokens=8,
            batch=1,
            generates=3,
            ttft_ns=[3 * MS, 3 * MS, 4 * MS],
            itl_ns=[MS] * 9,
            generate_ns=[6 * MS] * 3,
            phases=(
                Phase("prefill", 3, 8, (PhaseLayer("", 2.5 * MS, 0.1 * MS),)),
                Phase("decode", 9, 1, (PhaseLayer("", 0.8 * MS, 0.1 * MS),)),
            ),
        ),
    )
    steps = tuple(LoopStep(i, i * 10 * MS, 10 * MS, MS, 3 * MS, 4 * MS, MS, MS) for i in range(4))
    prof = replace(prof, loop=TrainingLoop(steps=steps))
    (run,) = entries(prof, commit="abc", when_ns=0, branch=None, source=None)
    got = {f.name: f.median_ns for f in run.figures}
    assert got["generate.ttft"] == 3 * MS and got["generate.itl"] == MS
    assert got["phase.prefill"] == 2.5 * MS and got["phase.decode"] == 0.8 * MS
    assert got["loop.step"] == 10 * MS and got["loop.backward"] == 4 * MS
    assert got["loop.data_wait"] == MS


def test_a_repeat_profile_is_one_run_per_process() -> None:
    prof = profile(self_times(Shape(runs=1), 0)[0])
    prof = replace(
        prof,
        repeats=Repeats(
            tuple(
                RunMedians(
                    latency_ns=10 * MS + k,
                    self_ns={"": MS, "a": 2 * MS, "a.b": 3 * MS},
                    ttft_ns=MS,
                    phase_self_ns={"decode": {"": 1, "a": 2}},
                )
                for k in range(3)
            )
        ),
    )
    runs = entries(prof, commit="abc", when_ns=0, branch=None, source=None)
    assert [r.process for r in runs] == [0, 1, 2]
    totals = {x.path: x.total_ns for x in runs[0].layers}
    assert totals == {"": 6 * MS, "a": 5 * MS, "a.b": 3 * MS}
    assert {f.name: f.median_ns for f in runs[2].figures} == {
        "latency": 10 * MS + 2,
        "generate.ttft": MS,
        "phase.decode": 3,
    }


def test_times_are_read_as_iso_or_epoch_seconds() -> None:
    assert parse_when("1970-01-01T00:00:01Z") == 1_000_000_000
    assert parse_when("1970-01-01T01:00:00+01:00") == 0
    assert parse_when("1970-01-01 00:00:02") == 2_000_000_000  # naive: UTC
    assert parse_when("1.5") == 1_500_000_000
    assert parse_when("fixed") is None
