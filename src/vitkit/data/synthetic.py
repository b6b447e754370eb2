"""Synthetic labelled images for tests and smoke runs: deterministic, and learnable in a few steps.

Each class is a smooth random pattern (a 4x4 grid of random colours, upsampled bilinearly); each
example is its class pattern plus Gaussian pixel noise. A nearest-pattern rule classifies them
almost perfectly, so a tiny model's loss falls within a few steps, while the noise keeps the task
from being a lookup of identical images.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..config import image_size_of, size_hw
from ..errors import ConfigError
from .arrays import ArrayDataset


def synthetic(
    *,
    num_classes: int = 10,
    per_class: int = 16,
    image_size: int | tuple[int, int] = 32,
    channels: int = 3,
    seed: int = 0,
    noise: float = 32.0,
) -> ArrayDataset:
    """``num_classes * per_class`` uint8 images (N, channels, H, W), ``image_size`` being an int
    (H = W) or (H, W).

    Labels cycle 0, 1, ..., num_classes - 1, so every prefix of the dataset is class-balanced.
    ``noise`` is the pixel noise's standard deviation, in uint8 levels.
    """
    for name, value in (
        ("num_classes", num_classes),
        ("per_class", per_class),
        ("channels", channels),
    ):
        if not isinstance(value, int) or value < 1:
            raise ConfigError(f"{name}={value!r} is not valid: expected a positive integer")
    H, W = size_hw(image_size_of(image_size))
    g = torch.Generator().manual_seed(seed)
    coarse = torch.rand(num_classes, channels, 4, 4, generator=g)  # (K, C, 4, 4)
    patterns = 255 * F.interpolate(
        coarse, size=(H, W), mode="bilinear", align_corners=False
    )  # (K, C, H, W)
    labels = torch.arange(num_classes * per_class) % num_classes  # (N,)
    pixels = patterns[labels] + noise * torch.randn(
        len(labels), channels, H, W, generator=g
    )  # (N, C, H, W)
    return ArrayDataset(
        images=pixels.round().clamp(0, 255).to(torch.uint8),
        labels=labels,
        classes=[f"class_{k}" for k in range(num_classes)],
    )
