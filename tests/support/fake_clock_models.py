"""Layers of known cost on a fake clock, forward and backward: exact training-loop
arithmetic without timing anything real."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from layerprof.capture.platform.clocks import FakeClock


class FakeSpin(torch.autograd.Function):
    """Advances a fake clock by known amounts in forward and backward."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, clock: FakeClock, fwd: int, bwd: int) -> torch.Tensor:  # type: ignore[override]
        clock.advance(fwd)
        ctx.clock, ctx.bwd = clock, bwd
        return x * 1.0

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:  # type: ignore[override]
        ctx.clock.advance(ctx.bwd)
        return grad, None, None, None


class FakeSpinLayer(nn.Module):
    """A layer whose forward costs ``forward_ns`` and backward ``backward_ns`` on ``clock``."""

    def __init__(self, clock: FakeClock, forward_ns: int, backward_ns: int) -> None:
        super().__init__()
        self.clock, self.fwd, self.bwd = clock, forward_ns, backward_ns
        self.w = nn.Parameter(torch.ones(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return FakeSpin.apply(x * self.w, self.clock, self.fwd, self.bwd)
