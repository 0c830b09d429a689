"""Built-in example models for ``layerprof demo`` (weights are random, nothing is downloaded)."""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn


class _ConvBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(c_out)
        self.act = nn.ReLU(inplace=True)
        self.pool = nn.MaxPool2d(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(self.act(self.bn(self.conv(x))))


class SmallCNN(nn.Module):
    """A VGG-style image classifier: 3 conv blocks and a 2-layer head."""

    def __init__(self, num_classes: int = 10, width: int = 16) -> None:
        super().__init__()
        self.features = nn.Sequential(
            _ConvBlock(3, width), _ConvBlock(width, 2 * width), _ConvBlock(2 * width, 4 * width)
        )
        self.head = nn.Sequential(
            nn.Flatten(), nn.Linear(4 * width * 4 * 4, 64), nn.ReLU(), nn.Linear(64, num_classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


class SelfAttention(nn.Module):
    """Multi-head attention written out, so softmax and matmuls are functional ops."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(d // self.heads)
        y = att.softmax(dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, t, d))


class _EncoderLayer(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = SelfAttention(dim, heads)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TinyTransformer(nn.Module):
    """A pre-norm transformer encoder over token ids with a classification head."""

    def __init__(self, vocab: int = 1000, dim: int = 64, heads: int = 4, depth: int = 2) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.layers = nn.ModuleList(_EncoderLayer(dim, heads) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 2)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x)
        return self.head(self.norm(x).mean(dim=1))


DEMOS: dict[str, tuple[type[nn.Module], list[str]]] = {
    "cnn": (SmallCNN, ["8x3x32x32"]),
    "transformer": (TinyTransformer, ["8x64:int64[0,1000)"]),
}


def build(name: str, **kwargs: Any) -> nn.Module:
    torch.manual_seed(0)
    return DEMOS[name][0](**kwargs)
