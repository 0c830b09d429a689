"""Small models shaped like the real ones users bring (torchvision ResNet, GPT-2,
an encoder over a ModuleList): in-place residual adds, ``ReLU(inplace=True)``,
ModuleLists, ``nn.TransformerEncoder`` with its fused fast path, tied weights.

Built from code (nothing is downloaded); used by the TorchScript, backward and
CLI tests. Every class is TorchScript-compatible, so each one is also tested
scripted and traced.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class ListEncoder(nn.Module):
    """A ModuleList of ``Sequential(Linear, ReLU)`` followed by a 2-layer TransformerEncoder."""

    def __init__(self, dim: int = 64, depth: int = 3, heads: int = 4) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(dim, dim), nn.ReLU()) for _ in range(depth)
        )
        layer = nn.TransformerEncoderLayer(dim, heads, 2 * dim, batch_first=True)
        self.enc = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.enc(x)


class BasicBlock(nn.Module):
    """torchvision's ResNet BasicBlock: ``out += identity`` and in-place ReLUs."""

    def __init__(self, c_in: int, c_out: int, stride: int = 1) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.downsample: nn.Module = (
            nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))
            if stride != 1 or c_in != c_out
            else nn.Identity()
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += identity
        return self.relu(out)


class ResNetish(nn.Module):
    """Stem, two stages of BasicBlocks (the second downsamples), pool, fc."""

    def __init__(self, width: int = 8, classes: int = 10) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = nn.Sequential(BasicBlock(width, width), BasicBlock(width, width))
        self.layer2 = nn.Sequential(
            BasicBlock(width, 2 * width, 2), BasicBlock(2 * width, 2 * width)
        )
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(2 * width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer2(self.layer1(x))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class InPlaceAdd(nn.Module):
    """``x.add_()`` on a layer's output inside forward, then an in-place activation."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(16, 16)
        self.act = nn.ReLU(inplace=True)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x)
        h.add_(1.0)
        return self.fc2(self.act(h))


class CausalSelfAttention(nn.Module):
    """GPT-2 style attention: one qkv projection, SDPA, an output projection."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(dim, 3 * dim)
        self.c_proj = nn.Linear(dim, dim)
        self.resid_dropout = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.c_attn(x).split(d, dim=2)
        q = q.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, d // self.heads).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(b, t, d)
        return self.resid_dropout(self.c_proj(y))


class MHA(nn.Module):
    """``nn.MultiheadAttention`` used as self-attention (the fused fast path in inference)."""

    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.inner = nn.MultiheadAttention(dim, heads, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.inner(x, x, x, need_weights=False)[0]


class MLP(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.c_fc = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.c_proj = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(self.act(self.c_fc(x)))


class GPTBlock(nn.Module):
    def __init__(self, dim: int, heads: int, mha: bool) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim)
        self.attn: nn.Module = MHA(dim, heads) if mha else CausalSelfAttention(dim, heads)
        self.ln_2 = nn.LayerNorm(dim)
        self.mlp = MLP(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class TinyGPT(nn.Module):
    """Token + position embeddings, a ModuleList of blocks, final norm, tied LM head.

    ``mha=True`` uses ``nn.MultiheadAttention`` (its fused fast path in
    inference), else a GPT-2 style attention over SDPA.
    """

    def __init__(
        self, vocab: int = 128, dim: int = 32, heads: int = 4, depth: int = 2, mha: bool = False
    ) -> None:
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(64, dim)
        self.drop = nn.Dropout(0.1)
        self.h = nn.ModuleList(GPTBlock(dim, heads, mha) for _ in range(depth))
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.drop(self.wte(ids) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x)) / math.sqrt(x.shape[-1])


class Stack(nn.Module):
    """One side of an encoder-decoder: token embedding (shared), a ModuleList of blocks."""

    def __init__(self, embed: nn.Embedding, dim: int, depth: int) -> None:
        super().__init__()
        self.embed_tokens = embed
        self.block = nn.ModuleList(
            nn.Sequential(nn.Linear(dim, dim), nn.ReLU()) for _ in range(depth)
        )
        self.final_layer_norm = nn.LayerNorm(dim)

    def forward(self, ids: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        x = self.embed_tokens(ids) + context
        for layer in self.block:
            x = layer(x)
        return self.final_layer_norm(x)


class EncoderDecoder(nn.Module):
    """T5's layout: one embedding shared by the encoder and the decoder stacks."""

    def __init__(self, vocab: int = 64, dim: int = 32, depth: int = 2) -> None:
        super().__init__()
        self.shared = nn.Embedding(vocab, dim)
        self.encoder = Stack(self.shared, dim, depth)
        self.decoder = Stack(self.shared, dim, depth)
        self.lm_head = nn.Linear(dim, vocab, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        memory = self.encoder(ids, torch.zeros(1))
        return self.lm_head(self.decoder(ids.flip(-1), memory))
