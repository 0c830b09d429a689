"""Models whose time depends on when they are called, to inject a disagreement between
the clean and the per-layer pass (what CPU contention does to one of them).

Importable with ``--arch tests.support.timing_models:SlowFirst`` from the repository root.
"""

from __future__ import annotations

import time

import torch
from torch import nn


class SlowFirst(nn.Module):
    """Sleeps ``sleep_ms`` in each of its first ``slow_calls`` forwards, then runs at
    full speed: with ``slow_calls = 1 + warmup + iters`` the whole clean pass is slow
    and the per-layer pass is not, as when another process held the CPU meanwhile."""

    def __init__(self, slow_calls: int = 8, sleep_ms: float = 5.0) -> None:
        super().__init__()
        self.slow_calls = slow_calls
        self.sleep_s = sleep_ms / 1000
        self.calls = 0
        self.fc1 = nn.Linear(16, 16)
        self.fc2 = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if self.calls <= self.slow_calls:
            time.sleep(self.sleep_s)
        return self.fc2(torch.relu(self.fc1(x)))
