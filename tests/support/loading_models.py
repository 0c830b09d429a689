"""Small models for the loading tests, importable as ``tests.support.loading_models:<name>``.

Each is named for the loading case it covers.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn


class TinyNet(nn.Module):
    """Two linears with a buffer-carrying norm between: parameters and buffers."""

    def __init__(self, width: int = 4, hidden: int = 8) -> None:
        super().__init__()
        self.fc1 = nn.Linear(width, hidden)
        self.norm = nn.BatchNorm1d(hidden)
        self.fc2 = nn.Linear(hidden, 2)

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(self.norm(self.fc1(x)).relu())


class WideNet(nn.Module):
    """Many layers, so that a key mismatch lists more than five keys."""

    def __init__(self, depth: int = 8) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(depth))

    def forward(self, x: Tensor) -> Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


class HasModuleChild(nn.Module):
    """A submodule literally named ``module``: its prefix must not be stripped."""

    def __init__(self) -> None:
        super().__init__()
        self.module = nn.Linear(3, 3)

    def forward(self, x: Tensor) -> Tensor:
        return self.module(x)


def make_net(hidden: int = 8) -> nn.Module:
    """A factory function rather than a class."""
    return TinyNet(hidden=hidden)


def not_a_module() -> dict[str, Any]:
    """An --arch callable that returns something other than an nn.Module."""
    return {"oops": 1}


class Exploding(nn.Module):
    """A constructor that raises."""

    def __init__(self) -> None:
        super().__init__()
        raise ValueError("depth must be positive")


NOT_CALLABLE = 42
