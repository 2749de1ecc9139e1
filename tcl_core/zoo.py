"""The model zoo that cost-model data is collected on, defined in code and exported to ONNX.

Written in plain PyTorch (no torchvision: it does not import beside this torch build) with
seeded weights, exported with `torch.onnx.export(dynamo=False)` (the dynamo exporter needs
onnxscript). Shapes are kept modest so one measurement takes milliseconds on 2 cores. `split`
says whether a model's tasks train the student or are held out to evaluate it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
from torch import nn


def _conv_bn(cin: int, cout: int, kernel: int, stride: int = 1, groups: int = 1) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)]


class _BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.body = nn.Sequential(*_conv_bn(cin, cout, 3, stride), nn.ReLU(), *_conv_bn(cout, cout, 3))
        self.shortcut = nn.Sequential(*_conv_bn(cin, cout, 1, stride)) if stride != 1 or cin != cout else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.body(x) + self.shortcut(x))


def resnet18(num_classes: int = 1000) -> nn.Module:
    """ResNet-18 (He et al.): stem, four stages of two basic blocks, pool, classifier."""
    layers: list[nn.Module] = [*_conv_bn(3, 64, 7, 2), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [_BasicBlock(cin, cout, stride), _BasicBlock(cout, cout, 1)]
        cin = cout
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, num_classes))


class _InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = cin * expand
        layers: list[nn.Module] = [] if expand == 1 else [*_conv_bn(cin, hidden, 1), nn.ReLU6()]
        layers += [*_conv_bn(hidden, hidden, 3, stride, groups=hidden), nn.ReLU6(), *_conv_bn(hidden, cout, 1)]
        self.body = nn.Sequential(*layers)
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x) if self.residual else self.body(x)


def mobilenet_v2(num_classes: int = 1000) -> nn.Module:
    """MobileNetV2 (Sandler et al.): inverted residuals with depthwise convolutions."""
    layers: list[nn.Module] = [*_conv_bn(3, 32, 3, 2), nn.ReLU6()]
    cin = 32
    for expand, cout, repeats, stride in ((1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                                          (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)):
        for i in range(repeats):
            layers.append(_InvertedResidual(cin, cout, stride if i == 0 else 1, expand))
            cin = cout
    layers += [*_conv_bn(cin, 1280, 1), nn.ReLU6(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(1280, num_classes)]
    return nn.Sequential(*layers)


def mobilenet_v1(num_classes: int = 1000, activation: type[nn.Module] = nn.ReLU) -> nn.Module:
    """MobileNetV1 (Howard et al.): depthwise-separable convolutions, so depthwise kernels are in training too.

    `activation` nn.ReLU6 is the paper's; the zoo's first MobileNetV1 used ReLU, so its kernels had
    no clip epilogue, which most convolutions of the held-out MobileNetV2 have (all but its
    linear-bottleneck projections).
    """
    layers: list[nn.Module] = [*_conv_bn(3, 32, 3, 2), activation()]
    cin = 32
    for cout, stride in ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2), *[(512, 1)] * 5,
                         (1024, 2), (1024, 1)):
        layers += [*_conv_bn(cin, cin, 3, stride, groups=cin), activation(), *_conv_bn(cin, cout, 1), activation()]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, num_classes)]
    return nn.Sequential(*layers)


class _EncoderLayer(nn.Module):
    """A post-norm transformer encoder layer written out, so the export is plain MatMul/Softmax ops."""

    def __init__(self, hidden: int, heads: int, ffn: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(hidden, 3 * hidden)
        self.proj = nn.Linear(hidden, hidden)
        self.norm1, self.norm2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.ffn = nn.Sequential(nn.Linear(hidden, ffn), nn.GELU(), nn.Linear(ffn, hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, hidden = x.shape                                       # (B, L, H)
        q, k, v = self.qkv(x).reshape(batch, length, 3, self.heads, hidden // self.heads).permute(2, 0, 3, 1, 4)
        attention = torch.softmax(q @ k.transpose(-1, -2) / (hidden // self.heads) ** 0.5, dim=-1)  # (B, h, L, L)
        context = (attention @ v).transpose(1, 2).reshape(batch, length, hidden)  # (B, L, H)
        x = self.norm1(x + self.proj(context))
        return self.norm2(x + self.ffn(x))


def bert_layer(hidden: int = 768, heads: int = 12, ffn: int = 3072) -> nn.Module:
    """One BERT-base encoder layer over token embeddings x[B, L, 768]."""
    return _EncoderLayer(hidden, heads, ffn)


class _VitBlock(nn.Module):
    def __init__(self, hidden: int, heads: int, patch: int) -> None:
        super().__init__()
        self.embed = nn.Conv2d(3, hidden, patch, patch)
        self.encoder = _EncoderLayer(hidden, heads, 4 * hidden)
        self.head = nn.Linear(hidden, 1000)

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        tokens = self.embed(image).flatten(2).transpose(1, 2)                # (B, patches, H)
        return self.head(self.encoder(tokens).mean(dim=1))                   # (B, 1000)


def vit_block(hidden: int = 384, heads: int = 6, patch: int = 16) -> nn.Module:
    """ViT-S/16 patch embedding, one encoder block, mean-pooled classifier."""
    return _VitBlock(hidden, heads, patch)


def mlp(width: int = 1024) -> nn.Module:
    """A three-layer perceptron on flat features."""
    return nn.Sequential(nn.Linear(512, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10))


class _ConvNextBlock(nn.Module):
    """Depthwise 7x7 -> LayerNorm over channels -> Linear 4x -> GELU -> Linear, residual (Liu et al.)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.depthwise = nn.Conv2d(channels, channels, 7, padding=3, groups=channels)
        self.norm = nn.LayerNorm(channels)
        self.mlp = nn.Sequential(nn.Linear(channels, 4 * channels), nn.GELU(), nn.Linear(4 * channels, channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.depthwise(x).permute(0, 2, 3, 1)                             # (B, H, W, C)
        return x + self.mlp(self.norm(y)).permute(0, 3, 1, 2)                 # (B, C, H, W)


class _ConvNext(nn.Module):
    def __init__(self, widths: tuple[int, ...], num_classes: int) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(3, widths[0], 4, 4)]
        for i, width in enumerate(widths):
            if i:
                layers.append(nn.Conv2d(widths[i - 1], width, 2, 2))
            layers += [_ConvNextBlock(width), _ConvNextBlock(width)]
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(widths[-1], num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).mean(dim=(2, 3)))                   # (B, classes)


def convnext_tiny(num_classes: int = 1000) -> nn.Module:
    """Two stages of ConvNeXt blocks: depthwise convolutions and transformer-style MLPs in one model."""
    return _ConvNext((64, 128), num_classes)


class _MBConv(nn.Module):
    """EfficientNet's inverted residual: SiLU, k x k depthwise, squeeze-and-excitation."""

    def __init__(self, cin: int, cout: int, kernel: int, stride: int, expand: int) -> None:
        super().__init__()
        hidden = cin * expand
        layers: list[nn.Module] = [] if expand == 1 else [*_conv_bn(cin, hidden, 1), nn.SiLU()]
        layers += [*_conv_bn(hidden, hidden, kernel, stride, groups=hidden), nn.SiLU()]
        self.expand_dw = nn.Sequential(*layers)
        squeezed = max(1, cin // 4)
        self.excite = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(hidden, squeezed, 1), nn.SiLU(),
                                    nn.Conv2d(squeezed, hidden, 1), nn.Sigmoid())
        self.project = nn.Sequential(*_conv_bn(hidden, cout, 1))
        self.residual = stride == 1 and cin == cout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.expand_dw(x)
        y = self.project(y * self.excite(y))
        return x + y if self.residual else y


def efficientnet_lite(num_classes: int = 1000) -> nn.Module:
    """The first stages of EfficientNet-B0 (Tan & Le): MBConv blocks with 3x3 and 5x5 depthwise kernels."""
    layers: list[nn.Module] = [*_conv_bn(3, 32, 3, 2), nn.SiLU()]
    cin = 32
    for expand, cout, kernel, stride in ((1, 16, 3, 1), (6, 24, 3, 2), (6, 24, 3, 1), (6, 40, 5, 2), (6, 40, 5, 1),
                                         (6, 80, 3, 2)):
        layers.append(_MBConv(cin, cout, kernel, stride, expand))
        cin = cout
    layers += [*_conv_bn(cin, 320, 1), nn.SiLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(320, num_classes)]
    return nn.Sequential(*layers)


class _DecoderLayer(nn.Module):
    """A pre-norm GPT decoder layer written out: causal self-attention and a 4x GELU MLP."""

    def __init__(self, hidden: int, heads: int, length: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
        self.qkv, self.proj = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
        self.mlp = nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(), nn.Linear(4 * hidden, hidden))
        self.register_buffer("mask", torch.full((length, length), float("-inf")).triu(1))  # (L, L)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, hidden = x.shape                                       # (B, L, H)
        q, k, v = self.qkv(self.norm1(x)).reshape(batch, length, 3, self.heads, hidden // self.heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-1, -2) / (hidden // self.heads) ** 0.5 + self.mask  # (B, h, L, L)
        context = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(batch, length, hidden)  # (B, L, H)
        x = x + self.proj(context)
        return x + self.mlp(self.norm2(x))


def gpt_block(hidden: int = 256, heads: int = 4, length: int = 128) -> nn.Module:
    """One GPT-style decoder layer over token embeddings x[B, 128, 256]."""
    return _DecoderLayer(hidden, heads, length)


@dataclass(frozen=True)
class ZooModel:
    name: str
    build: Callable[[], nn.Module]
    input_shape: tuple[int, ...]
    split: Literal["train", "eval"]


ZOO: dict[str, ZooModel] = {m.name: m for m in (
    ZooModel("resnet18", resnet18, (1, 3, 112, 112), "train"),
    ZooModel("bert_layer", bert_layer, (1, 64, 768), "train"),
    ZooModel("mlp", mlp, (16, 512), "train"),
    # 96 x 96, not 112: its depthwise layers then share no shapes with the held-out MobileNetV2's
    ZooModel("mobilenet_v1", mobilenet_v1, (1, 3, 96, 96), "train"),
    # Added later (rocketlake's data is the first to hold them): more kinds of kernel to learn from.
    # 128 x 128 keeps EfficientNet's depthwise shapes apart from the held-out MobileNetV2's.
    ZooModel("convnext_tiny", convnext_tiny, (1, 3, 96, 96), "train"),
    ZooModel("efficientnet_lite", efficientnet_lite, (1, 3, 128, 128), "train"),
    ZooModel("gpt_block", gpt_block, (1, 128, 256), "train"),
    # The paper's ReLU6 (clip) epilogues, as in the held-out MobileNetV2; at 128 x 128 no shape is
    # shared with it (112 x 112) or with the ReLU MobileNetV1 (96 x 96).
    ZooModel("mobilenet_v1_relu6", functools.partial(mobilenet_v1, activation=nn.ReLU6), (1, 3, 128, 128), "train"),
    ZooModel("mobilenet_v2", mobilenet_v2, (1, 3, 112, 112), "eval"),
    ZooModel("vit_block", vit_block, (1, 3, 112, 112), "eval"),
)}


def export_onnx(model: ZooModel, path: Path) -> Path:
    """Export `model` with seeded weights (eval mode: BatchNorm uses its running statistics)."""
    torch.manual_seed(0)
    network = model.build().eval()
    path.parent.mkdir(parents=True, exist_ok=True)
    with torch.no_grad():
        torch.onnx.export(network, (torch.randn(*model.input_shape),), str(path), input_names=["x"],
                          output_names=["y"], opset_version=17, dynamo=False)
    return path
