"""Models and factories that misbehave, for --arch tests.support.hostile_models:NAME."""

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


class _Quoted(nn.Module):
    """Module paths with double quotes: torch's exported trace leaves them unescaped."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleDict({'say "hi"': nn.Linear(4, 4), 'end"': nn.ReLU()})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks['end"'](self.blocks['say "hi"'](x))


def quoted() -> nn.Module:
    return _Quoted()


class _Doubler(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


def newline_names() -> nn.Module:
    """Module names with a newline (a forged report line), a CR and a bidi override,
    and a class name with a newline."""
    odd = type("Odd\nClass", (_Doubler,), {})
    model = nn.Sequential()
    model.add_module("a\nlayerprof: all ranks OK", nn.Sequential(nn.Linear(4, 4), nn.ReLU()))
    model.add_module("b\rc", odd())
    model.add_module("d\u202ee", nn.Linear(4, 4))
    return model


def exits_with_escape() -> nn.Module:
    """A SystemExit whose message would clear the screen if printed raw."""
    raise SystemExit("bye\x1b[2J\u202e")
