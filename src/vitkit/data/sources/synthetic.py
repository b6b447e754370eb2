"""Synthetic labelled images for tests and smoke runs: deterministic, and learnable in a few steps.

Each class is a smooth random pattern (a 4x4 grid of random colours, upsampled bilinearly); each
example is its class pattern plus Gaussian pixel noise. A nearest-pattern rule classifies them
almost perfectly, so a tiny model's loss falls within a few steps, while the noise keeps the task
from being a lookup of identical images.

A draw of at most ``HELD_PIXELS`` pixel values is made at once and held (``synthetic``: the draw
every run made before larger ones were made on demand, so that those runs resume on the same
pixels). A larger draw (a preset's 1,000 classes at 224 px: 40,000 images, 6 GB as uint8 and
several times that in float32 while drawn) makes each image when it is read, its noise drawn
from (seed, index) (``SyntheticImages``), so that its memory does not grow with the images.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ...config import DataConfig, ModelConfig, image_size_of, size_hw
from ...errors import ConfigError
from ..arrays import ArrayDataset, as_indices, renumbering
from ..contract import Images, ReadAs
from ..listing import Listing

# The most pixel values (N * C * H * W) drawn at once and held: 64 MiB as uint8, about 1 GiB of
# float32 while drawn; every synthetic run of the tests is far below it.
HELD_PIXELS = 2**26


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
    (H = W) or (H, W), drawn at once and held.

    Labels cycle 0, 1, ..., num_classes - 1, so every prefix of the dataset is class-balanced.
    ``noise`` is the pixel noise's standard deviation, in uint8 levels.
    """
    H, W = _checked(num_classes, per_class, image_size, channels)
    g = torch.Generator().manual_seed(seed)
    patterns = _patterns(_colours(num_classes, channels, g), (H, W))  # (K, C, H, W)
    labels = torch.arange(num_classes * per_class) % num_classes  # (N,)
    pixels = patterns[labels] + noise * torch.randn(
        len(labels), channels, H, W, generator=g
    )  # (N, C, H, W)
    return ArrayDataset(
        images=pixels.round().clamp(0, 255).to(torch.uint8),
        labels=labels,
        classes=_names(num_classes),
    )


def synthetic_images(
    *,
    num_classes: int,
    per_class: int,
    image_size: int | tuple[int, int],
    channels: int,
    seed: int,
    noise: float = 32.0,
) -> ArrayDataset | SyntheticImages:
    """``synthetic``'s images: held when they hold at most ``HELD_PIXELS`` pixel values, else
    made on demand (``SyntheticImages``: the same class patterns and labels, other noise)."""
    H, W = _checked(num_classes, per_class, image_size, channels)
    n = num_classes * per_class
    if n * channels * H * W <= HELD_PIXELS:
        return synthetic(
            num_classes=num_classes,
            per_class=per_class,
            image_size=(H, W),
            channels=channels,
            seed=seed,
            noise=noise,
        )
    rows = torch.arange(n)  # (N,)
    return SyntheticImages(
        coarse=_colours(num_classes, channels, torch.Generator().manual_seed(seed)),
        image_size=(H, W),
        seed=seed,
        noise=noise,
        rows=rows,
        labels=rows % num_classes,
        classes=_names(num_classes),
    )


def listing(cfg: DataConfig, model: ModelConfig | None, seed: int) -> Listing:
    """``synthetic``: one draw of the model's classes at its size and channels (unless told
    others), both splits sharing the class patterns: 32 + 8 images per class."""
    drawn: dict[int, ArrayDataset | SyntheticImages] = {}  # by channels: both splits' draw

    def made() -> ModelConfig:
        assert model is not None  # a run's or an evaluation's: names alone are listed without
        return model

    def read(split: str, channels: int | None, verify: bool) -> Images:
        k, c = made().num_classes, made().in_chans if channels is None else channels
        if c not in drawn:
            size = made().image_size
            drawn[c] = synthetic_images(
                num_classes=k, per_class=40, image_size=size, channels=c, seed=seed
            )
        cut = 32 * k  # labels cycle through the classes: every prefix is balanced
        return drawn[c].subset(torch.arange(cut) if split == "train" else torch.arange(cut, 40 * k))

    def sizes() -> tuple[int, int, str]:
        return made().num_classes, 32 * made().num_classes, "made"

    found = Listing(cfg.dataset, ("train", "test"), read, "synthetic {}".format, auto="test")
    found.stated, found.sizes = (lambda *_: []), sizes  # nothing read to speak of
    return found


class SyntheticImages:
    """Synthetic images made when read: item ``i`` is (uint8 (C, H, W), label), image ``rows[i]``
    of the draw, its class pattern (``coarse``, (K, C, 4, 4), upsampled) plus noise of std
    ``noise`` drawn from (seed, row). Labels cycle through the classes as ``synthetic``'s;
    ``subset`` and ``in_class_order`` are views that make the same images."""

    read_as: ReadAs = "made"
    skipped: tuple[tuple[str, str], ...] = ()

    def __init__(
        self,
        *,
        coarse: Tensor,
        image_size: tuple[int, int],
        seed: int,
        noise: float,
        rows: Tensor,
        labels: Tensor,
        classes: list[str],
    ) -> None:
        self.coarse = coarse
        self.image_size = image_size
        self.seed = seed
        self.noise = noise
        self.rows = rows  # (n,) int64: this dataset's index -> image of the draw
        self.labels = labels  # (n,) int64
        self.classes = classes

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def channels(self) -> int:
        return self.coarse.shape[1]

    def __getitem__(self, index: int) -> tuple[Tensor, int]:
        row = int(self.rows[index])
        k = row % len(self.coarse)  # the class whose pattern it is, whatever its label's order
        pattern = _patterns(self.coarse[k : k + 1], self.image_size)[0]  # (C, H, W)
        g = torch.Generator().manual_seed(_image_seed(self.seed, row))
        pixels = pattern + self.noise * torch.randn(pattern.shape, generator=g)  # (C, H, W)
        return pixels.round().clamp(0, 255).to(torch.uint8), int(self.labels[index])

    def subset(self, indices: Tensor | Sequence[int]) -> SyntheticImages:
        """The examples at ``indices``, in that order (a view: no image is made)."""
        idx = as_indices(indices, len(self))
        return self._with(rows=self.rows[idx], labels=self.labels[idx], classes=self.classes)

    def in_class_order(self, order: Sequence[str]) -> SyntheticImages:
        """The same examples with their classes in the order ``order`` (the same names), labels
        renumbered to it."""
        labels = renumbering(self.classes, order)[self.labels]  # (n,)
        return self._with(rows=self.rows, labels=labels, classes=list(order))

    def _with(self, *, rows: Tensor, labels: Tensor, classes: list[str]) -> SyntheticImages:
        return SyntheticImages(
            coarse=self.coarse,
            image_size=self.image_size,
            seed=self.seed,
            noise=self.noise,
            rows=rows,
            labels=labels,
            classes=classes,
        )


def _checked(
    num_classes: int, per_class: int, image_size: int | tuple[int, int], channels: int
) -> tuple[int, int]:
    """(H, W) of ``image_size``; a ``ConfigError`` for a count that is not a positive integer."""
    for name, value in (
        ("num_classes", num_classes),
        ("per_class", per_class),
        ("channels", channels),
    ):
        if not isinstance(value, int) or value < 1:
            raise ConfigError(f"{name}={value!r} is not valid: expected a positive integer")
    return size_hw(image_size_of(image_size))


def _colours(num_classes: int, channels: int, g: torch.Generator) -> Tensor:
    """(K, C, 4, 4): the colours of each class's pattern, the first draw of ``g``."""
    return torch.rand(num_classes, channels, 4, 4, generator=g)


def _patterns(coarse: Tensor, size: tuple[int, int]) -> Tensor:
    """(K, C, H, W) class patterns in uint8 levels from their (K, C, 4, 4) colours."""
    return 255 * F.interpolate(coarse, size=size, mode="bilinear", align_corners=False)


def _image_seed(seed: int, row: int) -> int:
    """A well-mixed 63-bit seed for image ``row`` of the draw of ``seed`` (numpy's
    ``SeedSequence`` hashing, as the loader's ``derive_seed``)."""
    state = np.random.SeedSequence([seed, row]).generate_state(2, dtype=np.uint32)
    return (int(state[0]) << 31) ^ int(state[1])


def _names(num_classes: int) -> list[str]:
    return [f"class_{k}" for k in range(num_classes)]
