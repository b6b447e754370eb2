"""In-memory image datasets: uint8 images (N, C, H, W) with int64 labels (N,).

Every vitkit dataset hands out images as stored, uint8 in [0, 255]; the float scaling the models
take, (x - 127.5) / 127.5 as in the official input pipeline [VJ input_pipeline.py], happens once per
batch in the loader (``transforms.to_float``). Keeping uint8 until then is 4x less memory and
copying: Fashion-MNIST's 60k training images are 47 MB.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from ..errors import DataError
from .contract import ReadAs


def as_indices(indices: Tensor | Sequence[int], length: int) -> Tensor:
    """``indices`` as a 1-D int64 tensor, checked against a dataset of ``length`` examples."""
    idx = torch.as_tensor(indices, dtype=torch.int64)
    if idx.ndim != 1:
        raise DataError(f"indices must be 1-D, found shape {tuple(idx.shape)}")
    if idx.numel() and (idx.min() < 0 or idx.max() >= length):
        raise DataError(
            f"indices must lie in [0, {length}), found values from {int(idx.min())} to {int(idx.max())}"
        )
    return idx


def renumbering(classes: Sequence[str], order: Sequence[str]) -> Tensor:
    """int64 (K,): each label of ``classes`` as a label of ``order``, the same names in another
    order (a ``DataError`` when they are not)."""
    position = {name: k for k, name in enumerate(order)}
    if len(position) != len(order) or sorted(classes) != sorted(order):
        raise DataError(
            f"cannot put the {len(classes)} classes {list(classes)[:3]}... in the order "
            f"{list(order)[:3]}...: expected the same class names"
        )
    return torch.tensor([position[name] for name in classes], dtype=torch.int64)


@dataclass
class ArrayDataset:
    """Images and labels held in memory (Fashion-MNIST, CIFAR, synthetic data).

    ``images`` is uint8 (N, C, H, W), ``labels`` int64 (N,) with values in ``[0, len(classes))``.
    """

    read_as: ClassVar[ReadAs] = "memory"
    skipped: ClassVar[tuple[tuple[str, str], ...]] = ()  # nothing to verify
    images: Tensor
    labels: Tensor
    classes: list[str]

    def __post_init__(self) -> None:
        if self.images.dtype != torch.uint8 or self.images.ndim != 4:
            raise DataError(
                "images must be a uint8 tensor (N, C, H, W), "
                f"found {self.images.dtype} of shape {tuple(self.images.shape)}"
            )
        if self.labels.dtype != torch.int64 or self.labels.shape != self.images.shape[:1]:
            raise DataError(
                f"labels must be an int64 tensor ({self.images.shape[0]},) to match the images, "
                f"found {self.labels.dtype} of shape {tuple(self.labels.shape)}"
            )
        if not self.classes:
            raise DataError("classes must name at least one class, found an empty list")
        if self.labels.numel() and (
            self.labels.min() < 0 or self.labels.max() >= len(self.classes)
        ):
            raise DataError(
                f"labels must lie in [0, {len(self.classes)}) for {len(self.classes)} classes, "
                f"found values from {int(self.labels.min())} to {int(self.labels.max())}"
            )

    def __len__(self) -> int:
        return self.images.shape[0]

    @property
    def channels(self) -> int:
        return self.images.shape[1]

    def __getitem__(self, index: int) -> tuple[Tensor, int]:
        """One example: a uint8 image (C, H, W) and its label."""
        return self.images[index], int(self.labels[index])

    def with_channels(self, channels: int) -> ArrayDataset:
        """The same examples with ``channels`` channels (``transforms.to_channels``: grey to RGB
        by repetition, RGB to grey by PIL's luma), for a model that takes the other kind."""
        from .transforms import to_channels

        images = to_channels(self.images, channels).contiguous()  # (N, channels, H, W)
        return ArrayDataset(images=images, labels=self.labels, classes=list(self.classes))

    def in_class_order(self, order: Sequence[str]) -> ArrayDataset:
        """The same examples with their classes in the order ``order`` (the same names),
        labels renumbered to it."""
        labels = renumbering(self.classes, order)[self.labels]  # (N,)
        return ArrayDataset(images=self.images, labels=labels, classes=list(order))

    def subset(self, indices: Tensor | Sequence[int]) -> ArrayDataset:
        """The examples at ``indices`` (copied), in that order, with the same class list."""
        idx = as_indices(indices, len(self))
        return ArrayDataset(
            images=self.images.index_select(0, idx),
            labels=self.labels.index_select(0, idx),
            classes=list(self.classes),
        )
