"""Patch embedding [P §3.1 Eq. 1]: cut the image into P x P patches and project each to D.

Shapes: B batch, C channels, P patch, D hidden, (gh, gw) patch grid, N = gh * gw.

As in the official code, the linear projection E is a conv with kernel = stride = P and VALID
padding. A hybrid first runs the BiT ResNet and embeds patches of its feature map (1x1 for the
paper's hybrids, "one pixel" [P §3.1]).
"""

from __future__ import annotations

from torch import Tensor, nn

from ..config import ModelConfig
from ..errors import ConfigError
from .layers import lecun_normal_
from .resnet import ResNetBackbone


class PatchEmbed(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.backbone = ResNetBackbone(cfg.resnet, cfg.in_chans) if cfg.resnet is not None else None
        cin = self.backbone.out_channels if self.backbone is not None else cfg.in_chans
        self.proj = nn.Conv2d(cin, cfg.hidden_size, cfg.patch_size, stride=cfg.patch_size)
        self.patch_size = cfg.patch_size
        self.stride = cfg.total_stride

    def reset_parameters(self) -> None:
        if self.backbone is not None:
            self.backbone.reset_parameters()
        lecun_normal_(self.proj.weight)
        assert self.proj.bias is not None  # built with one
        nn.init.zeros_(self.proj.bias)

    def grid(self, height: int, width: int) -> tuple[int, int]:
        """The patch grid of an image, or a clear error if the image does not tile into patches."""
        if height % self.stride or width % self.stride:
            raise ConfigError(
                f"image size {height}x{width} is not a multiple of the model's patch stride "
                f"{self.stride}: resize or crop the images to a multiple of {self.stride}"
            )
        return height // self.stride, width // self.stride

    def forward(self, x: Tensor) -> Tensor:
        if self.backbone is not None:
            x = self.backbone(x)  # (B, C', H/s, W/s)
        x = self.proj(x)  # (B, D, gh, gw)
        return x.flatten(2).transpose(1, 2)  # (B, N, D)
