"""Models for the FLOP tests, each with its analytic count written out.

Conventions (docs/flops.md): one multiply-accumulate is 2 FLOPs and bias adds
are not counted ("tensor" FLOPs); elementwise ops are counted apart: 1 per
output element for activations and arithmetic, softmax 5, layer norm 5 (with
affine), batch norm from running stats 2, attention scaling + softmax 6 per
score; a causal mask halves the attention products and scores.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from tests.support.real_models import BasicBlock, GPTBlock


@dataclass(frozen=True)
class Analytic:
    tensor: int
    elementwise: int

    @property
    def total(self) -> int:
        return self.tensor + self.elementwise


def attention(b: int, heads: int, t: int, s: int, d: int, causal: bool) -> Analytic:
    """QK^T and PV for model width ``d`` (heads x head_dim), and scale+softmax per score."""
    tensor = 2 * b * t * s * d * 2
    scores = b * heads * t * s
    if causal:
        tensor, scores = tensor // 2, scores // 2
    return Analytic(tensor, 6 * scores)


class SdpaNet(nn.Module):
    """qkv projection, ``F.scaled_dot_product_attention``, output projection."""

    def __init__(self, dim: int = 64, heads: int = 4, causal: bool = False) -> None:
        super().__init__()
        self.heads, self.causal = heads, causal
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, d // self.heads).unbind(2)
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))

    @staticmethod
    def analytic(b: int, t: int, d: int, heads: int, causal: bool) -> Analytic:
        n = b * t
        attn = attention(b, heads, t, t, d, causal)
        return Analytic(2 * n * d * 3 * d + attn.tensor + 2 * n * d * d, attn.elementwise)


class MhaNet(nn.Module):
    """``nn.MultiheadAttention`` as self-attention (its fused fast path in inference)."""

    def __init__(self, dim: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.attn(x, x, x, need_weights=False)[0]

    @staticmethod
    def analytic(b: int, t: int, d: int, heads: int) -> Analytic:
        n = b * t
        attn = attention(b, heads, t, t, d, False)
        return Analytic(2 * n * d * 3 * d + attn.tensor + 2 * n * d * d, attn.elementwise)


def encoder_layer_analytic(b: int, t: int, d: int, heads: int, ffn: int) -> Analytic:
    """nn.TransformerEncoderLayer (post-norm, relu): attention block, FFN, two layer
    norms (5 per element), the activation and two residual sums."""
    mha = MhaNet.analytic(b, t, d, heads)
    n = b * t
    tensor = mha.tensor + 2 * n * d * ffn * 2
    elementwise = mha.elementwise + 2 * 5 * n * d + n * ffn + 2 * n * d
    return Analytic(tensor, elementwise)


class RnnNet(nn.Module):
    """An LSTM / GRU / RNN over a batch-first sequence, then a linear head on every step."""

    def __init__(self, kind: str = "LSTM", inp: int = 32, hidden: int = 48, layers: int = 2,
                 bidirectional: bool = True, proj: int = 0) -> None:  # fmt: skip
        super().__init__()
        extra = {"proj_size": proj} if proj else {}
        self.rnn = getattr(nn, kind)(
            inp, hidden, layers, batch_first=True, bidirectional=bidirectional, **extra
        )
        dirs = 2 if bidirectional else 1
        self.head = nn.Linear(dirs * (proj or hidden), 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.rnn(x)[0])

    @staticmethod
    def analytic(kind: str, b: int, t: int, inp: int, hidden: int, layers: int,
                 bidirectional: bool, proj: int = 0) -> Analytic:  # fmt: skip
        """Per step and item, per layer and direction: every gate's input and hidden
        products (gates x hidden x (input + hidden out)), an LSTM projection; gate
        arithmetic per hidden unit: LSTM 13, GRU 10, RNN 2."""
        gates, arith = {"LSTM": (4, 13), "GRU": (3, 10), "RNN": (1, 2)}[kind]
        dirs = 2 if bidirectional else 1
        out = proj or hidden
        tokens = b * t
        macs = 0
        for layer in range(layers):
            width = inp if layer == 0 else dirs * out
            macs += dirs * (gates * hidden * (width + out) + (proj * hidden if proj else 0))
        tensor = 2 * tokens * macs + 2 * tokens * dirs * out * 8  # + the head
        return Analytic(tensor, tokens * layers * dirs * arith * hidden)


def gpt_block_analytic(b: int, t: int, d: int, heads: int) -> Analytic:
    """GPT-2 block: c_attn (d -> 3d), causal attention, c_proj, MLP (d -> 4d -> d, GELU);
    two layer norms (5 per element), GELU (1 per element), two residual sums."""
    n = b * t
    attn = attention(b, heads, t, t, d, True)
    tensor = 2 * n * d * 3 * d + attn.tensor + 2 * n * d * d + 2 * n * d * 4 * d * 2
    elementwise = attn.elementwise + 2 * 5 * n * d + n * 4 * d + 2 * n * d
    return Analytic(tensor, elementwise)


def gpt_block(d: int = 64, heads: int = 4) -> nn.Module:
    return GPTBlock(d, heads, mha=False)


class ResNetStage(nn.Module):
    """Two torchvision BasicBlocks, the first downsampling (stride 2, 1x1 conv shortcut)."""

    def __init__(self, c_in: int = 16, c_out: int = 32) -> None:
        super().__init__()
        self.block1 = BasicBlock(c_in, c_out, 2)
        self.block2 = BasicBlock(c_out, c_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block2(self.block1(x))

    @staticmethod
    def analytic(b: int, c_in: int, c_out: int, h: int, w: int) -> Analytic:
        """conv k x k: 2 x N x C_out x H_out x W_out x C_in x k²; batch norm from running
        stats 2 per element; ReLU 1; the residual sum 1."""
        ho, wo = h // 2, w // 2
        out = b * c_out * ho * wo

        def conv(cin: int, k: int) -> int:
            return 2 * b * c_out * ho * wo * cin * k * k

        block1 = conv(c_in, 3) + conv(c_out, 3) + conv(c_in, 1)
        block2 = 2 * conv(c_out, 3)
        # per block: bn1, relu, bn2, sum, relu (+ the shortcut's bn in block 1)
        elementwise = 2 * (2 * out + out + 2 * out + out + out) + 2 * out
        return Analytic(block1 + block2, elementwise)
