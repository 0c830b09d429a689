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


class FailsOnDecode(nn.Module):
    """Wraps a layer and raises on a one-token forward: a model whose own error comes
    from inside generate()'s decode steps."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[1] == 1:
            raise RuntimeError("mat1 and mat2 shapes cannot be multiplied (1x32 and 7x7)")
        out: torch.Tensor = self.inner(x)
        return out


def tiny_gpt2_failing_decode() -> torch.nn.Module:
    """tiny_gpt2 whose second block's MLP raises in every decode step (issue 43, item 9)."""
    model = tiny_gpt2()
    block = model.transformer.h[1]  # type: ignore[index]
    block.mlp = FailsOnDecode(block.mlp)
    return model
