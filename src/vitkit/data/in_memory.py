"""A folder's training images decoded once and kept in memory (``decode_into_memory``): every
epoch after crops them from there, not from their files. A run of a few thousand photos of a few
hundred pixels is otherwise bound by decoding them again each epoch to make crops of 32 px.

Each image is resized to a fixed size, twice the model's resolution on each side (enough pixels
for the random-resized crop: its smallest box is 5% of the image), its aspect ratio not kept, as
evaluation resizes (``transforms.resize``); a large JPEG is decoded at 1/2 to 1/8 of its size
first where that keeps the fixed size (``DecodedImages.resized``). The result is an
``ArrayDataset``: batches stay a function of (seed, epoch, index), so a run resumes exactly.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.utils.data import Dataset

from ..runtime.stops import data_loader
from .arrays import ArrayDataset
from .decoded import DecodedImages, Raised, ReadItem, collate_read, counted, read_item


class _Resized(Dataset):
    """Item i: image i of ``images`` resized to ``size`` (uint8 (C, S_h, S_w)) and its label."""

    def __init__(self, images: DecodedImages, size: tuple[int, int]) -> None:
        self.images, self.size = images, size

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> ReadItem | Raised:
        return read_item(lambda: self.images.resized(index, self.size), self.images)


def decode_into_memory(
    images: DecodedImages, size: tuple[int, int], *, workers: int
) -> ArrayDataset:
    """Every image of ``images`` (a split read by index, decoded when read), resized to ``size``
    (H, W), in one ``ArrayDataset``; decoded by ``workers`` processes (0: this one). An image
    that fails to decode is replaced as reading it replaces it (``DecodedImages``), once."""
    count = len(images)
    loader = data_loader(
        _Resized(images, size), batch_size=64, num_workers=workers, collate_fn=collate_read
    )
    kept: Tensor | None = None
    labels = torch.empty(count, dtype=torch.int64)
    start = 0
    for read in loader:
        batch, batch_labels = counted(read, images)  # (B, C, S_h, S_w) uint8, (B,) int64
        if kept is None:  # allocated once the channels are known
            kept = torch.empty((count, *batch.shape[1:]), dtype=torch.uint8)
        kept[start : start + len(batch)] = batch
        labels[start : start + len(batch)] = batch_labels
        start += len(batch)
    assert kept is not None and start == count  # a split has images (run_data checks)
    return ArrayDataset(images=kept, labels=labels, classes=list(images.classes))
