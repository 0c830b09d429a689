"""Deep models with the module trees of real ones, at toy widths (fast on CPU).

``bert_like``: the qualified names of Hugging Face's BertForSequenceClassification
(``bert.encoder.layer.11.attention.self.query``), 12 layers, 7 tree levels.
``resnet50_like``: torchvision's ResNet-50 tree (bottlenecks 3-4-6-3 with
``downsample`` branches), 16 base channels instead of 64.
"""

from __future__ import annotations

import torch
from torch import nn


class BertSelfAttention(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.query = nn.Linear(dim, dim)
        self.key = nn.Linear(dim, dim)
        self.value = nn.Linear(dim, dim)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores = self.query(x) @ self.key(x).transpose(-1, -2) / x.shape[-1] ** 0.5
        out: torch.Tensor = self.dropout(scores.softmax(-1)) @ self.value(x)
        return out


class BertSelfOutput(nn.Module):
    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.dense = nn.Linear(hidden, dim)
        self.LayerNorm = nn.LayerNorm(dim)  # the name BERT checkpoints use
        self.dropout = nn.Dropout(0.1)

    def forward(self, h: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.LayerNorm(self.dropout(self.dense(h)) + x)
        return out


class BertAttention(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.self = BertSelfAttention(dim)
        self.output = BertSelfOutput(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.output(self.self(x), x)
        return out


class BertIntermediate(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.dense = nn.Linear(dim, 4 * dim)
        self.intermediate_act_fn = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.intermediate_act_fn(self.dense(x))
        return out


class BertLayer(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.attention = BertAttention(dim)
        self.intermediate = BertIntermediate(dim)
        self.output = BertSelfOutput(dim, 4 * dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.attention(x)
        out: torch.Tensor = self.output(self.intermediate(a), a)
        return out


class BertEncoder(nn.Module):
    def __init__(self, dim: int, layers: int) -> None:
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(dim) for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.layer:
            x = block(x)
        return x


class BertEmbeddings(nn.Module):
    def __init__(self, dim: int, vocab: int) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, dim)
        self.position_embeddings = nn.Embedding(512, dim)
        self.LayerNorm = nn.LayerNorm(dim)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = self.position_embeddings(torch.arange(ids.shape[1]))
        out: torch.Tensor = self.LayerNorm(self.word_embeddings(ids) + pos)
        return out


class BertModel(nn.Module):
    def __init__(self, dim: int, layers: int, vocab: int) -> None:
        super().__init__()
        self.embeddings = BertEmbeddings(dim, vocab)
        self.encoder = BertEncoder(dim, layers)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.encoder(self.embeddings(ids))
        return out


class BertForSequenceClassification(nn.Module):
    def __init__(self, dim: int = 32, layers: int = 12, vocab: int = 1000) -> None:
        super().__init__()
        self.bert = BertModel(dim, layers, vocab)
        self.classifier = nn.Linear(dim, 2)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.classifier(self.bert(ids)[:, 0])
        return out


class Bottleneck(nn.Module):
    def __init__(self, c_in: int, width: int, stride: int) -> None:
        super().__init__()
        c_out = 4 * width
        self.conv1 = nn.Conv2d(c_in, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, c_out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(c_out)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = (
            nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))
            if stride != 1 or c_in != c_out
            else None
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        identity = x if self.downsample is None else self.downsample(x)
        out += identity  # in-place residual add, as torchvision does
        result: torch.Tensor = self.relu(out)
        return result


class ResNet(nn.Module):
    def __init__(self, blocks: tuple[int, ...] = (3, 4, 6, 3), base: int = 16) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, base, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(base)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        c_in = base
        for i, n in enumerate(blocks):
            width = base * 2**i
            stages = []
            for j in range(n):
                stages.append(Bottleneck(c_in, width, 2 if j == 0 and i > 0 else 1))
                c_in = 4 * width
            self.add_module(f"layer{i + 1}", nn.Sequential(*stages))
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(c_in, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        for i in range(1, 5):
            x = getattr(self, f"layer{i}")(x)
        out: torch.Tensor = self.fc(torch.flatten(self.avgpool(x), 1))
        return out


def bert_like() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    return BertForSequenceClassification(), (torch.randint(0, 1000, (2, 16)),)


def resnet50_like() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    return ResNet(), (torch.randn(1, 3, 32, 32),)
