"""CIFAR-10 and CIFAR-100 (Krizhevsky 2009) from the original binary release [P §4.1, PAPER.md A4].

Binary format (https://www.cs.toronto.edu/~kriz/cifar.html): fixed-size records, each the label
byte(s) then 3072 pixel bytes, the red, green and blue 32x32 planes in row-major order, i.e.
already (C, H, W). CIFAR-10 (``cifar-10-batches-bin/``): ``data_batch_{1..5}.bin`` and
``test_batch.bin``, one label byte, class names in ``batches.meta.txt``. CIFAR-100
(``cifar-100-binary/``): ``train.bin`` and ``test.bin``, a coarse then a fine label byte (we use the
fine label, as the paper does), names in ``fine_label_names.txt``.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch

from ...config import DataConfig, ModelConfig
from ...errors import ConfigError, DataError, MissingFileError
from ..arrays import ArrayDataset
from ..bounds import long_class_name, text_lines
from ..listing import Listing, held
from .paths import find_files, search_dirs

_PIXELS = 3 * 32 * 32

_LAYOUT = {
    # num_classes: (folder, {split: files}, class-name file, label bytes per record)
    10: (
        "cifar-10-batches-bin",
        {"train": [f"data_batch_{i}.bin" for i in range(1, 6)], "test": ["test_batch.bin"]},
        "batches.meta.txt",
        1,
    ),
    100: (
        "cifar-100-binary",
        {"train": ["train.bin"], "test": ["test.bin"]},
        "fine_label_names.txt",
        2,
    ),
}

_URL = {
    10: "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz",
    100: "https://www.cs.toronto.edu/~kriz/cifar-100-binary.tar.gz",
}


def read_records(path: Path, label_bytes: int, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """One binary batch file: uint8 images (N, 3, 32, 32) and labels (N,) (the last label byte)."""
    record = label_bytes + _PIXELS
    raw = np.fromfile(path, dtype=np.uint8)
    if raw.size == 0 or raw.size % record:
        raise DataError(
            f"{path}: expected a whole number of {record}-byte records "
            f"({label_bytes} label byte(s) + {_PIXELS} pixels), found {raw.size} bytes"
        )
    rows = raw.reshape(-1, record)  # (N, record)
    labels = rows[:, label_bytes - 1]  # (N,)
    if labels.max() >= num_classes:
        raise DataError(
            f"{path}: expected labels in [0, {num_classes}), found {int(labels.max())} "
            f"(is this CIFAR-{num_classes}?)"
        )
    return rows[:, label_bytes:].reshape(-1, 3, 32, 32), labels


def cifar(
    split: str, data_dir: str | os.PathLike | None = None, *, num_classes: int = 10
) -> ArrayDataset:
    """CIFAR-10 or CIFAR-100 ``'train'`` (50,000) or ``'test'`` (10,000): uint8 (N, 3, 32, 32).

    ``data_dir`` is the extracted folder (``cifar-10-batches-bin``/``cifar-100-binary``) or its
    parent; without it, ``$VITKIT_DATA/<that folder>``.
    """
    if num_classes not in _LAYOUT:
        raise ConfigError(f"num_classes={num_classes!r} is not valid: expected 10 or 100")
    folder, splits, names_file, label_bytes = _LAYOUT[num_classes]
    if split not in splits:
        raise ConfigError(f"split={split!r} is not valid: expected 'train' or 'test'")
    dirs = search_dirs(folder, data_dir)
    paths = find_files(dirs, [*splits[split], names_file])
    if paths is None:
        searched = (
            ", ".join(str(d) for d in dirs) or f"(no folder: give --data cifar{num_classes}:DIR)"
        )
        raise MissingFileError(
            f"CIFAR-{num_classes} {split} files ({', '.join(splits[split])}, {names_file}) not found "
            f"in {searched}; download {_URL[num_classes]}, extract it into DIR and give --data "
            f"cifar{num_classes}:DIR"
        )
    *batch_paths, names_path = paths
    lines = text_lines(names_path, f"{num_classes} class names, one a line")
    classes = [line.strip() for line in lines if line.strip()]
    problem = long_class_name(classes)
    if problem is not None:
        raise DataError(f"{names_path}: {problem}")
    if len(classes) != num_classes:
        raise DataError(
            f"{names_path}: expected {num_classes} class names, one a line, found {len(classes)}"
        )
    parts = [read_records(p, label_bytes, num_classes) for p in batch_paths]
    images = np.concatenate([im for im, _ in parts])  # (N, 3, 32, 32)
    labels = np.concatenate([lb for _, lb in parts])  # (N,)
    return ArrayDataset(
        images=torch.from_numpy(images), labels=torch.from_numpy(labels).long(), classes=classes
    )


def listing(cfg: DataConfig, model: ModelConfig | None, seed: int) -> Listing:
    """``cifar10[:DIR]`` or ``cifar100[:DIR]``: colour, 50,000 training images."""
    classes = int(cfg.source.kind[5:])
    path = cfg.source.path
    size = (50_000, classes)
    return held(cfg, lambda split: cifar(split, path, num_classes=classes), channels=3, size=size)
