"""Images in class folders, ``root/<split>/<class>/<image>``, decoded lazily with PIL.

The layout of ImageNet-style releases and of torchvision's ``ImageFolder``: one folder per class
(sorted names give the label order), images anywhere below it with a ``.jpg``, ``.jpeg``, ``.png``,
``.webp`` or ``.bmp`` suffix in any case. Hidden files and folders (``.DS_Store``, macOS ``._x.jpg``
shadows) are ignored.

Unreadable images. We check every file once, at construction (``verify=True``): PIL opens it and
runs ``verify()``, which parses the header (and, for PNG, every chunk's CRC) without decoding the
pixels. That costs one read of each file, about 0.1 ms for a small image: seconds for ten thousand
images, minutes for ImageNet's 1.28 million; pass ``verify=False`` to skip it. A bad file is
dropped from the index with a warning naming it, so indices stay fixed for the life of the dataset
(the loader's determinism depends on that); more than ``max_bad_fraction`` of the split bad is an
error. ``verify()`` cannot see a truncated JPEG (only a full decode can), so an image that still
fails when it is decoded is replaced, deterministically, by the next image that decodes, with a
warning; those count against ``max_bad_fraction`` too.
"""

from __future__ import annotations

import copy
import os
import struct
import warnings
import zlib
from collections.abc import Sequence
from pathlib import Path

import torch
from PIL import Image
from torch import Tensor

from ..errors import ConfigError, DataError, MissingFileError
from .arrays import as_indices
from .transforms import pil_to_tensor

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".bmp")

# What PIL raises for a file that is not a readable image.
_DECODE_ERRORS = (
    OSError,
    SyntaxError,
    ValueError,
    EOFError,
    struct.error,
    zlib.error,
    Image.DecompressionBombError,
)


class UnreadableImageWarning(UserWarning):
    """An image file was skipped because PIL cannot read it."""


def _visible(name: str) -> bool:
    return not name.startswith(".")


def _class_names(split_dir: Path) -> list[str]:
    return sorted(d.name for d in split_dir.iterdir() if d.is_dir() and _visible(d.name))


def _image_files(folder: Path) -> list[Path]:
    found = []
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=True):
        dirnames[:] = [d for d in dirnames if _visible(d)]
        found += [
            Path(dirpath, f)
            for f in filenames
            if _visible(f) and os.path.splitext(f)[1].lower() in IMAGE_SUFFIXES
        ]
    return sorted(found)


def check_image(path: Path) -> str | None:
    """Why PIL cannot read ``path`` (header and, for PNG, chunk CRCs), or None when it can."""
    try:
        with Image.open(path) as image:
            image.verify()
    except _DECODE_ERRORS as e:
        return f"{type(e).__name__}: {e}"
    return None


class ImageFolderDataset:
    """``root/<split>/<class>/*.{jpg,jpeg,png,webp,bmp}``; items are (uint8 (C, H, W), label).

    Every image is converted to ``mode``: ``'RGB'`` (C=3) or ``'L'`` (C=1). Images keep their own
    size; the loader resizes them. A split other than ``'train'`` must have the same class folders as
    ``root/train`` when that exists, so labels mean the same thing in both.
    """

    def __init__(
        self,
        root: str | os.PathLike,
        split: str = "train",
        *,
        mode: str = "RGB",
        verify: bool = True,
        max_bad_fraction: float = 0.01,
    ) -> None:
        if mode not in ("RGB", "L"):
            raise ConfigError(f"mode={mode!r} is not valid: expected 'RGB' or 'L'")
        if not 0.0 <= max_bad_fraction < 1.0:
            raise ConfigError(
                f"max_bad_fraction={max_bad_fraction!r} is not valid: expected a number in [0, 1)"
            )
        self.root = Path(root)
        self.split_dir = self.root / split
        self.mode = mode
        self.max_bad_fraction = max_bad_fraction
        if not self.split_dir.is_dir():
            found = _class_names(self.root) if self.root.is_dir() else []
            raise MissingFileError(
                f"split folder {self.split_dir} not found (expected {self.root}/{split}/<class>/"
                f"<image>); {self.root} holds {found or 'no folders'}"
            )
        self.classes = _class_names(self.split_dir)
        if not self.classes:
            raise DataError(f"{self.split_dir} holds no class folders, expected <class>/<image>")
        train_dir = self.root / "train"
        if split != "train" and train_dir.is_dir():
            train_classes = _class_names(train_dir)
            if self.classes != train_classes:
                raise DataError(
                    f"the class folders of {self.split_dir} and {train_dir} differ: only in "
                    f"{split}: {sorted(set(self.classes) - set(train_classes))}, only in train: "
                    f"{sorted(set(train_classes) - set(self.classes))}"
                )
        samples: list[tuple[Path, int]] = []
        for label, name in enumerate(self.classes):
            files = _image_files(self.split_dir / name)
            if not files:
                raise DataError(
                    f"class folder {self.split_dir / name} holds no images "
                    f"(expected files ending in {', '.join(IMAGE_SUFFIXES)})"
                )
            samples += [(path, label) for path in files]
        self.samples = self._drop_unreadable(samples) if verify else samples
        self.labels = torch.tensor([label for _, label in self.samples], dtype=torch.int64)
        self._failed: set[Path] = set()  # images that passed the check but failed to decode

    def _drop_unreadable(self, samples: list[tuple[Path, int]]) -> list[tuple[Path, int]]:
        bad = [(path, why) for path, _ in samples if (why := check_image(path)) is not None]
        if len(bad) > self.max_bad_fraction * len(samples):
            raise DataError(
                f"{len(bad)} of {len(samples)} images in {self.split_dir} are unreadable, more "
                f"than max_bad_fraction={self.max_bad_fraction} allows; first: {bad[0][0]} "
                f"({bad[0][1]})"
            )
        for count, (path, why) in enumerate(bad, 1):
            warnings.warn(
                f"skipping unreadable image {path} ({why}); {count} skipped so far in "
                f"{self.split_dir}",
                UnreadableImageWarning,
                stacklevel=3,
            )
        dropped = {path for path, _ in bad}
        kept = [(path, label) for path, label in samples if path not in dropped]
        missing = sorted({self.classes[k] for _, k in samples} - {self.classes[k] for _, k in kept})
        if missing:
            raise DataError(
                f"no readable image left in class folder(s) {missing} of {self.split_dir}"
            )
        return kept

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[Tensor, int]:
        """Image ``index`` (uint8 (C, H, W)) and its label; if it fails to decode, the next one that
        decodes, with its own label (see the module docstring)."""
        n = len(self.samples)
        if not -n <= index < n:
            raise IndexError(f"index {index} is out of range for {n} images")
        for step in range(n):
            path, label = self.samples[(index + step) % n]
            try:
                return self.load(path), label
            except _DECODE_ERRORS as e:
                self._decode_failed(path, e)
        raise DataError(f"no image in {self.split_dir} can be decoded")

    def load(self, path: Path) -> Tensor:
        """One image file as uint8 (C, H, W) in this dataset's mode."""
        with Image.open(path) as image:
            return pil_to_tensor(image, self.mode)

    def _decode_failed(self, path: Path, error: Exception) -> None:
        if path in self._failed:
            return
        self._failed.add(path)
        if len(self._failed) > self.max_bad_fraction * len(self.samples):
            raise DataError(
                f"{len(self._failed)} of {len(self.samples)} images in {self.split_dir} failed to "
                f"decode, more than max_bad_fraction={self.max_bad_fraction} allows; last: {path} "
                f"({type(error).__name__}: {error})"
            )
        warnings.warn(
            f"image {path} failed to decode ({type(error).__name__}: {error}); using the next "
            f"readable image in its place ({len(self._failed)} so far in {self.split_dir})",
            UnreadableImageWarning,
            stacklevel=3,
        )

    def subset(self, indices: Tensor | Sequence[int]) -> ImageFolderDataset:
        """The images at ``indices``, in that order, with the same classes and settings."""
        idx = as_indices(indices, len(self)).tolist()
        out = copy.copy(self)
        out.samples = [self.samples[i] for i in idx]
        out.labels = self.labels[idx]
        out._failed = set()
        return out
