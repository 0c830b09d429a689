"""A Recorder over inputs that change (the last batch is smaller): forwards and shapes
are kept per input signature, shown in the console and the JSON, never merged."""

from __future__ import annotations

import contextlib
import io

import torch
from rich.console import Console
from torch import nn

from layerprof import Recorder
from layerprof.capture.platform.clocks import FakeClock
from layerprof.pivot.profile import Profile
from layerprof.render.console.profile import print_profile
from tests.support import zoo_models as zoo


def record_batches(*sizes: int) -> tuple[Recorder, Profile]:
    clock = FakeClock()
    model = nn.Sequential(zoo.Work(clock, 10), nn.Flatten(), zoo.Work(clock, 5))
    with Recorder(model, clock=clock) as rec:
        for b in sizes:
            model(torch.zeros(b, 4, 2))
    return rec, rec.profile()


def test_forwards_and_shapes_per_signature() -> None:
    rec, prof = record_batches(8, 8, 8, 3, 8)
    assert rec.iterations == 5
    sigs = {s.inputs: s for s in prof.signatures}
    assert set(sigs) == {("8x4x2",), ("3x4x2",)}
    assert sigs[("8x4x2",)].forwards == 4 and sigs[("3x4x2",)].forwards == 1
    assert sigs[("3x4x2",)].shapes["1"] == ([[3, 4, 2]], [3, 8])
    assert sigs[("8x4x2",)].shapes["1"] == ([[8, 4, 2]], [8, 8])
    # the table's shapes are the signature with the most forwards
    assert prof.row("1").output_shapes == [8, 8]
    assert prof.meta.iters == 5 and prof.meta.inputs == ("8x4x2",)
    assert len(prof.samples["0"].total_ns) == 5  # times over every forward


def test_keyword_inputs_are_part_of_the_signature() -> None:
    model = zoo.KwargsDictOut()
    with Recorder(model) as rec:
        model(torch.zeros(3, 8), mask=torch.ones(3, 8))
        model(torch.zeros(3, 8))
    inputs = sorted(s.inputs for s in rec.signatures())
    assert inputs == [("3x8",), ("3x8", "mask=3x8")]


def test_failed_forwards_are_not_counted() -> None:
    model = zoo.Raises()
    with Recorder(model) as rec:
        for x in (torch.zeros(2, 4), torch.zeros(2, 3)):
            with contextlib.suppress(RuntimeError):
                model(x)
    assert rec.iterations == 0
    assert rec.signatures() == ()


def test_signatures_in_console_and_json_round_trip(tmp_path) -> None:
    _, prof = record_batches(8, 8, 3)
    buf = io.StringIO()
    print_profile(prof, console=Console(file=buf, width=120, color_system=None))
    text = buf.getvalue()
    assert "inputs: 2 input signatures, 3 forwards recorded: 8x4x2 x2, 3x4x2 x1" in text
    assert "shapes in the table are those of 8x4x2" in text
    doc = prof.to_dict()
    assert [s["forwards"] for s in doc["signatures"]] == [2, 1]
    assert doc["signatures"][1]["shapes"]["1"] == {"in": [[3, 4, 2]], "out": [3, 8]}
    again = Profile.load(prof.save(tmp_path / "p.json"))
    assert again.signatures == prof.signatures


def test_one_signature_says_how_many_forwards() -> None:
    _, prof = record_batches(2, 2)
    buf = io.StringIO()
    print_profile(prof, console=Console(file=buf, width=120, color_system=None))
    assert "inputs 2x4x2  (2 forwards recorded)" in buf.getvalue()


def test_files_without_signatures_still_load() -> None:
    _, prof = record_batches(2)
    doc = prof.to_dict()
    del doc["signatures"]
    assert Profile.from_dict(doc).signatures == ()
