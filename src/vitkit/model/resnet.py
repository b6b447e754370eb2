"""The BiT ResNet backbone of the hybrid models [P §3.1 "Hybrid", §4.1; vit_jax models_resnet.py].

Shapes: B batch, C channels, H x W feature map.

As in the official code (and unlike a torchvision ResNet): every conv is weight-standardised
(w - mean) / (std + 1e-5) over (in, kh, kw); BatchNorm is GroupNorm(32 groups, eps 1e-6);
padding is TensorFlow's 'SAME' (asymmetric for stride 2, extra pixel at the bottom/right), also
for the root max-pool; units are post-activation bottlenecks whose last GroupNorm scale starts at
zero; a projection shortcut (1x1 StdConv + GN) appears where shape or stride changes.
"""

from __future__ import annotations

import dataclasses
import math

import torch.nn.functional as F
from torch import Tensor, nn

from ..config import ModelConfig, ResNetConfig
from ..errors import ConfigError
from .heads import new_head
from .layers import lecun_normal_


def same_padding(size: int, kernel: int, stride: int) -> tuple[int, int]:
    """TensorFlow 'SAME' padding for one axis: (before, after), the odd pixel after."""
    total = max((math.ceil(size / stride) - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


def pad_same(x: Tensor, kernel: int, stride: int, value: float = 0.0) -> Tensor:
    top, bottom = same_padding(x.shape[-2], kernel, stride)
    left, right = same_padding(x.shape[-1], kernel, stride)
    if top or bottom or left or right:
        x = F.pad(x, (left, right, top, bottom), value=value)
    return x


class StdConv2d(nn.Conv2d):
    """Weight-standardised conv with 'SAME' padding and no bias."""

    eps = 1e-5  # added to the std, as jnp: w / (std + eps), not sqrt(var + eps)

    def __init__(self, cin: int, cout: int, kernel: int, stride: int = 1) -> None:
        super().__init__(cin, cout, kernel, stride=stride, padding=0, bias=False)

    def standardized_weight(self) -> Tensor:
        w = self.weight
        mean = w.mean(dim=(1, 2, 3), keepdim=True)
        std = w.std(dim=(1, 2, 3), keepdim=True, unbiased=False)
        return (w - mean) / (std + self.eps)

    def forward(self, x: Tensor) -> Tensor:
        x = pad_same(x, self.kernel_size[0], self.stride[0])
        return F.conv2d(x, self.standardized_weight(), None, self.stride)


def group_norm(channels: int) -> nn.GroupNorm:
    return nn.GroupNorm(32, channels, eps=1e-6)  # flax nn.GroupNorm defaults


class Downsample(nn.Module):
    """Projection shortcut: 1x1 StdConv (with the unit's stride) + GroupNorm."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv = StdConv2d(cin, cout, 1, stride)
        self.norm = group_norm(cout)

    def forward(self, x: Tensor) -> Tensor:
        return self.norm(self.conv(x))


class Bottleneck(nn.Module):
    """Residual unit: 1x1 -> 3x3 (strided) -> 1x1 (x4 channels), GN after each, ReLU after the sum."""

    def __init__(self, cin: int, width: int, stride: int) -> None:
        super().__init__()
        cout = 4 * width
        self.downsample = Downsample(cin, cout, stride) if (cin != cout or stride != 1) else None
        self.conv1 = StdConv2d(cin, width, 1)
        self.norm1 = group_norm(width)
        self.conv2 = StdConv2d(width, width, 3, stride)
        self.norm2 = group_norm(width)
        self.conv3 = StdConv2d(width, cout, 1)
        self.norm3 = group_norm(cout)

    def forward(self, x: Tensor) -> Tensor:
        shortcut = x if self.downsample is None else self.downsample(x)  # (B, 4W, H/s, W/s)
        y = F.relu(self.norm1(self.conv1(x)))  # (B, W, H, W)
        y = F.relu(self.norm2(self.conv2(y)))  # (B, W, H/s, W/s)
        y = self.norm3(self.conv3(y))  # (B, 4W, H/s, W/s)
        return F.relu(shortcut + y)


class Stage(nn.Module):
    def __init__(self, cin: int, width: int, depth: int, stride: int) -> None:
        super().__init__()
        self.blocks = nn.Sequential(
            *(
                Bottleneck(cin if i == 0 else 4 * width, width, stride if i == 0 else 1)
                for i in range(depth)
            )
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.blocks(x)


class Stem(nn.Module):
    """Root: StdConv 7x7/2 -> GroupNorm -> ReLU -> max-pool 3x3/2 'SAME'."""

    def __init__(self, in_chans: int, width: int) -> None:
        super().__init__()
        self.conv = StdConv2d(in_chans, width, 7, 2)
        self.norm = group_norm(width)

    def forward(self, x: Tensor) -> Tensor:
        x = F.relu(self.norm(self.conv(x)))  # (B, W, H/2, W/2)
        x = pad_same(x, 3, 2, value=float("-inf"))
        return F.max_pool2d(x, 3, 2)  # (B, W, H/4, W/4)


class ResNetBackbone(nn.Module):
    """BiT ResNet (GN + WS) whose output feature map feeds the ViT's patch embedding."""

    def __init__(self, cfg: ResNetConfig, in_chans: int) -> None:
        super().__init__()
        width = cfg.width  # int(64 * width_factor), as vit_jax
        self.stem = Stem(in_chans, width)
        stages = []
        cin = width
        for i, depth in enumerate(cfg.num_layers):
            stage_width = width * 2**i
            stages.append(Stage(cin, stage_width, depth, 1 if i == 0 else 2))
            cin = 4 * stage_width
        self.stages = nn.Sequential(*stages)
        self.out_channels = cfg.out_channels
        self.stride = cfg.stride

    def reset_parameters(self) -> None:
        for m in self.modules():
            if isinstance(m, StdConv2d):
                lecun_normal_(m.weight)
            elif isinstance(m, nn.GroupNorm):
                m.reset_parameters()
        for m in self.modules():
            if isinstance(m, Bottleneck):
                nn.init.zeros_(m.norm3.weight)  # each unit starts as the identity (official init)

    def forward(self, x: Tensor) -> Tensor:
        return self.stages(self.stem(x))  # (B, C_out, H/stride, W/stride)


class ResNetClassifier(nn.Module):
    """The paper's CNN baseline in miniature (``arch='resnet'``): the hybrid's BiT backbone, global
    average pooling and a zero-initialised linear head [P §4.1 "Model variants", BiT].

    Its bottleneck units end in a ReLU, so the pooled features are post-activation, as the hybrid's
    patch embedding sees them. The ViT's method names where they apply, so the training loop,
    evaluation and few-shot take it unchanged.
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        if cfg.resnet is None or cfg.arch != "resnet":
            raise ConfigError(
                "ResNetClassifier takes a ModelConfig with arch='resnet' and a resnet"
            )
        self.cfg = cfg
        self.backbone = ResNetBackbone(cfg.resnet, cfg.in_chans)
        self.head = new_head(cfg.resnet.out_channels, cfg.num_classes, cfg.head_bias_init)
        if not any(p.is_meta for p in self.parameters()):
            self.backbone.reset_parameters()

    def reset_head(self, num_classes: int, representation_size: int | None = None) -> None:
        """Fine-tuning surgery, as the ViT's: a new zero-initialised head for ``num_classes``."""
        if representation_size is not None:
            raise ConfigError("a ResNet baseline has no pre-logits layer (representation_size)")
        device = next(self.parameters()).device
        assert self.cfg.resnet is not None  # checked in __init__
        self.head = new_head(self.cfg.resnet.out_channels, num_classes).to(device)
        self.cfg = dataclasses.replace(self.cfg, num_classes=num_classes)

    def forward_features(self, images: Tensor) -> Tensor:
        return self.backbone(images)  # (B, C_out, H/stride, W/stride)

    def forward(self, images: Tensor) -> Tensor:
        return self.head(self.forward_features(images).mean(dim=(2, 3)))  # (B, K)

    def intermediates(self, images: Tensor, *, attention: bool = False) -> dict[str, Tensor]:
        """``features`` (B, C, h, w), ``pooled`` = ``pre_logits`` (B, C), ``logits`` (B, K)."""
        if attention:
            raise ConfigError("a ResNet has no attention weights to inspect")
        out = {"features": self.forward_features(images)}
        out["pooled"] = out["pre_logits"] = out["features"].mean(dim=(2, 3))
        if self.cfg.num_classes:
            out["logits"] = self.head(out["pooled"])
        return out

    def no_weight_decay(self) -> set[str]:
        return {name for name, p in self.named_parameters() if p.ndim <= 1}

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())
