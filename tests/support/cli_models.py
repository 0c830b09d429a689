"""Models the CLI tests load with --arch tests.support.cli_models:NAME."""

from __future__ import annotations

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, width: int = 8) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, width)
        self.block2 = nn.Sequential(nn.ReLU(), nn.Linear(width, 3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block2(self.fc1(x))


class TwoInputs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(100, 8)
        self.fc = nn.Linear(8, 2)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.fc(self.embed(ids) * mask.unsqueeze(-1))


def not_a_module() -> int:
    return 3


def tiny_gpt2() -> torch.nn.Module:
    """A 2-layer GPT-2 from a config (no weights downloaded): run --generate's subject."""
    import transformers

    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=64)
    return transformers.GPT2LMHeadModel(config).eval()
