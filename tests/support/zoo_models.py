"""Tiny models, each named for the edge case it covers.

Models that take a FakeClock advance it in their forward, so a Recorder with
the same clock sees exact, known times: ``work`` ns of self time per call.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from layerprof.capture.platform.clocks import FakeClock


class Work(nn.Module):
    """A leaf that 'takes' ``ns`` nanoseconds on the fake clock."""

    def __init__(self, clock: FakeClock, ns: int) -> None:
        super().__init__()
        self.clock = clock
        self.ns = ns

    def forward(self, x: Any) -> Any:
        self.clock.advance(self.ns)
        return x


class Nested(nn.Module):
    """root(10) -> [a(5) -> [a1(100), a2(200)], b(50)]: known totals and self times."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.clock = clock
        self.a = _Pair(clock, 5, 100, 200)
        self.b = Work(clock, 50)

    def forward(self, x: Any) -> Any:
        self.clock.advance(10)
        return self.b(self.a(x))


class _Pair(nn.Module):
    def __init__(self, clock: FakeClock, own: int, first: int, second: int) -> None:
        super().__init__()
        self.clock = clock
        self.own = own
        self.a1 = Work(clock, first)
        self.a2 = Work(clock, second)

    def forward(self, x: Any) -> Any:
        self.clock.advance(self.own)
        return self.a2(self.a1(x))


class Reused(nn.Module):
    """One child called twice per forward."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.shared = Work(clock, 30)
        self.other = Work(clock, 7)

    def forward(self, x: Any) -> Any:
        return self.shared(self.other(self.shared(x)))


class Recursive(nn.Module):
    """Calls itself ``depth`` times; each level does 10 ns and calls ``leaf`` (3 ns)."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.clock = clock
        self.leaf = Work(clock, 3)

    def forward(self, x: Any, depth: int = 3) -> Any:
        self.clock.advance(10)
        x = self.leaf(x)
        return self(x, depth - 1) if depth > 1 else x


class Containers(nn.Module):
    """ModuleList and ModuleDict (never called themselves) holding called layers."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Work(clock, 10 * (i + 1)) for i in range(3))
        self.heads = nn.ModuleDict({"cls": Work(clock, 4), "box": Work(clock, 6)})

    def forward(self, x: Any) -> Any:
        for block in self.blocks:
            x = block(x)
        return {name: head(x) for name, head in self.heads.items()}


class Raises(nn.Module):
    """The second layer raises a shape error."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.block2 = nn.Sequential(nn.ReLU(), nn.Linear(5, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block2(self.fc1(x))


class Fallback(nn.Module):
    """Tries ``risky`` (which raises inside its child ``block2.1``) and, when it raises,
    runs ``safe`` (40 ns on ``clock``): an error caught inside the forward."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__()
        self.risky = Raises()
        self.safe = Work(clock, 40)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        try:
            return self.risky(x)
        except RuntimeError:
            return self.safe(x)


class Functional(nn.Module):
    """Functional ops (softmax, matmul) inside forward count as the parent's self time."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.fc(x)
        return torch.softmax(y @ y.transpose(-1, -2), dim=-1) @ y


class KwargsDictOut(nn.Module):
    """Keyword arguments in, a dict with a tuple out."""

    def __init__(self) -> None:
        super().__init__()
        self.enc = nn.Linear(8, 8)
        self.dec = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor, *, mask: torch.Tensor | None = None) -> dict[str, Any]:
        h = self.enc(x)
        if mask is not None:
            h = h * mask
        return {"logits": self.dec(h), "pair": (h, h.sum())}


class InPlace(nn.Module):
    """In-place activations and adds."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.act = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.act(self.fc(x))
        y.add_(1.0)
        return y


class Tied(nn.Module):
    """Embedding and output projection share one weight (counted once)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(50, 8)
        self.out = nn.Linear(8, 50, bias=False)
        self.out.weight = self.embed.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.out(self.embed(ids))


class ToyLM(nn.Module):
    """A token-id model (an embedding and a head): what the generate phase tagger reads."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(64, 16)
        self.head = nn.Linear(16, 64)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.embed(ids))
        return out
