"""The pictures the tests of shards, Hugging Face datasets and streams share: three classes, each
its brightest channel, as PNGs and JPEGs (conftest.py's ``photos``, ``shards`` and ``hf_data``
fixtures build the folders, the tar shards and the tables from them)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from PIL import Image

import vitkit
from vitkit.data import ImageFolderDataset

# A tiny ViT at 16 px (4x4 patches of 4), so every run takes seconds.
TINY = ("--model", "ViT-mu/16", "--set", "model.image_size=16", "--set", "model.patch_size=4")


CLASSES = ("blue", "green", "red")


SIZES = {"train": 10, "val": 3, "test": 3}  # images per class


def pixels(k: int, seed: int) -> np.ndarray:
    """A 12x14 RGB picture whose class ``k`` is its brightest channel, with noise."""
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 90, (12, 14, 3))
    pixels[..., 2 - k] += 150  # blue, green, red
    return pixels.astype(np.uint8)


def rows(folder: ImageFolderDataset) -> dict[str, list]:
    """A split as a datasets table: the files' bytes as an Image feature, ClassLabel labels."""
    return {
        "image": [{"bytes": path.read_bytes(), "path": None} for path, _ in folder.samples],
        "label": [label for _, label in folder.samples],
    }


def same_weights(a: Path, b: Path) -> None:
    x, y = (vitkit.load(d).state_dict() for d in (a, b))
    assert x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x)


def save_image(path: Path, seed: int) -> Path:
    """An 8x8 colour-noise PNG (a few hundred bytes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.random.default_rng(seed).integers(0, 256, (8, 8, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)
    return path
