"""Models and factories that misbehave, for --arch tests.hostile_models:NAME."""

from __future__ import annotations

import sys

import torch
from torch import nn


class Stop(BaseException):
    """A BaseException that is neither Exception nor KeyboardInterrupt."""


def exits_zero() -> nn.Module:
    """A factory that ends the process 'successfully' (argparse in a model script)."""
    sys.exit(0)


def exits_three() -> nn.Module:
    raise SystemExit(3)


def stops() -> nn.Module:
    raise Stop("told to stop")


class ExitsInForward(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            sys.exit(0)
        return self.fc(x)


class Child(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x)


class Looping(nn.Module):
    """A child that keeps a reference to its parent: the module tree has a loop."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(Child(), Child())
        self.encoder[1].owner = self  # registered as a submodule

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.encoder(x)


class Tied(nn.Module):
    """One module in two places (tied layers): shared, not a loop."""

    def __init__(self) -> None:
        super().__init__()
        self.a = Child()
        self.b = self.a

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.a(x))
