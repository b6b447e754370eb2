"""Datasets, transforms and deterministic batching.

Datasets hand out uint8 images (C, H, W) and int labels; ``Batches`` turns them into float batches
scaled as the official code does, (x - 127.5) / 127.5, reproducibly from (seed, epoch, step)::

    from vitkit.data import BatchOptions, Batches, fashion_mnist

    options = BatchOptions(batch_size=256, train=True, seed=0, crop_padding=2, flip=True)
    train = Batches(fashion_mnist("train"), options)
    for images, labels in train.epoch(0):  # images (256, 1, 28, 28) float32, labels (256,) int64
        ...
"""

from __future__ import annotations

from .arrays import ArrayDataset
from .decoded import UnreadableImageWarning
from .loader import Batches, BatchOptions
from .sources.cifar import cifar
from .sources.fashion_mnist import fashion_mnist, read_idx
from .sources.folder import FolderLayout, ImageFolderDataset, folder_layout, verify_image_folder
from .sources.lists import ListImages
from .sources.synthetic import synthetic
from .splits import balanced_subset, split_holdout, subset
from .transforms import (
    Preprocess,
    center_resize,
    inception_crop,
    pil_to_tensor,
    preprocess_for_inference,
    rand_augment,
    random_crop_flip,
    resize,
    to_float,
)

__all__ = [
    "ArrayDataset",
    "BatchOptions",
    "Batches",
    "FolderLayout",
    "ImageFolderDataset",
    "ListImages",
    "Preprocess",
    "UnreadableImageWarning",
    "balanced_subset",
    "center_resize",
    "cifar",
    "fashion_mnist",
    "folder_layout",
    "inception_crop",
    "pil_to_tensor",
    "preprocess_for_inference",
    "rand_augment",
    "random_crop_flip",
    "read_idx",
    "resize",
    "split_holdout",
    "subset",
    "synthetic",
    "to_float",
    "verify_image_folder",
]
