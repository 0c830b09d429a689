"""The calibrated correction on a real recording (issue 14.2): each call loses its own
wrapper's inside cost and, from its self time, the leak of each direct child call.

One Recorder run of a blocks model (the shape of benchmarks/accuracy.py's small
model) reduced twice from the same event log, with and without a correction, so
the difference is exact arithmetic on real measured times; calibrate() itself is
checked on its own parts. How close the corrected numbers come to an
uninstrumented truth is a timing question: benchmarks/accuracy.py prints it.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from layerprof import Recorder
from layerprof.capture.recording.calibration import calibrate
from layerprof.capture.recording.layertimes import Correction


class Leaf(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + 1)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = Leaf(), Leaf()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.a(x * 2)
        return self.b(self.a(x) - 1)  # a: two calls per forward


class Blocks(nn.Module):
    def __init__(self, n: int = 4) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


#: direct child calls per forward of each called layer (a ModuleList is never called)
CHILD_CALLS = {"": 4, **{f"blocks.{i}": 3 for i in range(4)}}


def test_each_call_loses_its_inside_and_each_child_call_its_leak() -> None:
    model = Blocks()
    rec = Recorder(model, record_shapes=False)
    with rec, torch.inference_mode():
        for _ in range(6):
            model(torch.ones(8))
    inside, leak = 40, 70  # ns: far below any real layer's self time, so never clipped
    raw = rec.profile(correct=False)
    rec.correction = Correction(per_call_ns=inside + leak, inside_ns=inside)
    fixed = rec.profile()
    assert fixed.overhead is not None and fixed.overhead.corrected
    for path, s in raw.samples.items():
        c = fixed.samples[path]
        if not s.calls:
            continue
        own_calls = 2 if path.endswith(".a") else 1
        want = own_calls * inside + CHILD_CALLS.get(path, 0) * leak
        np.testing.assert_array_equal(s.self_ns.values - c.self_ns.values, want, err_msg=path)
    for node in fixed.tree():  # totals rebuilt bottom-up: the invariant stays exact
        node.self_check(tolerance_ns=0)
    # the root's total loses every call's whole cost except the leak of its own call
    calls = 1 + 4 * (1 + 2 + 1)  # root, then per block: itself, a twice, b
    lost = raw.samples[""].total_ns.values - fixed.samples[""].total_ns.values
    np.testing.assert_array_equal(lost, calls * (inside + leak) - leak)


def test_calibration_splits_inside_and_leak() -> None:
    c = calibrate("cpu", children=10, repeats=16)
    assert c.inside_ns >= 0 and c.leak_ns >= 0
    assert c.per_call_ns == pytest.approx(c.inside_ns + c.leak_ns)
    assert c.per_call_ns < 1_000_000  # a wrapper costs microseconds, not milliseconds
