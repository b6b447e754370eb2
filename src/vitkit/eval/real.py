"""ImageNet ReaL accuracy, the row "ImageNet ReaL" of the paper's Table 2 [P 4.2]: the 50,000
ImageNet validation images relabelled by Beyer et al. 2020 ("Are we done with ImageNet?"), each
with a set of ImageNet-1k classes. An image counts as correct when the top-1 prediction is in its
set; the 3,163 images whose set is empty (no label fits them) are left out, as the ReaL paper,
the ViT paper and timm's ``RealLabelsImagenet`` do.

The labels ship with vitkit (``imagenet_real_labels.json.gz``, its source beside it) and are
joined to a split's images by each image's own name in its source (``DecodedImages.key_of``: a
folder's file, a shard's key, a Hugging Face row's stored path): its last part, up to the first
dot, is ``ILSVRC2012_val_NNNNNNNN``, entry NNNNNNNN - 1 of the labels. So the validation set in
any order, or any part of it, is evaluated; an image named otherwise is an error naming it, and
so is a validation image found more than once (the same file in several class folders would
count several times). The
classes are ImageNet-1k's by index (wnids sorted: a folder of wnid class folders, ImageNet-v2's
numbered folders, the usual checkpoints' heads).
"""

from __future__ import annotations

import functools
import gzip
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np

from ..data.decoded import DecodedImages
from ..errors import DataError

LABELS_FILE = "imagenet_real_labels.json.gz"
ENTRIES = 50_000  # the ImageNet validation images, ILSVRC2012_val_00000001 .. _00050000
REAL_CLASSES = 1000  # ImageNet-1k's, by index
# The Hugging Face imagenet-1k's validation files add the synset: ILSVRC2012_val_00000001_n01751748
_STEM = re.compile(r"ILSVRC2012_val_([0-9]{8})(?:_n[0-9]{8})?")
_NAMED = 3  # names a join error shows


@functools.cache
def real_labels() -> tuple[tuple[int, ...], ...]:
    """The ReaL label set of every validation image, entry i for ``ILSVRC2012_val_{i+1:08d}``
    (empty: left out)."""
    packed = resources.files("vitkit.eval").joinpath(LABELS_FILE).read_bytes()
    labels = json.loads(gzip.decompress(packed))
    assert len(labels) == ENTRIES  # the file is ours: tests/test_real.py
    return tuple(tuple(int(k) for k in entry) for entry in labels)


def real_entry(key: str | None) -> int | None:
    """The entry of the ReaL labels for an image whose own name is ``key``: N - 1 when its last
    part (after the last ``/`` or ``\\``) up to the first dot is ``ILSVRC2012_val_NNNNNNNN``
    (or ``ILSVRC2012_val_NNNNNNNN_nSSSSSSSS``, with the synset, as the Hugging Face copy names
    them) with 1 <= N <= 50,000, whatever the extension; None otherwise."""
    if key is None:
        return None
    stem = re.split(r"[/\\]", key)[-1].partition(".")[0]
    found = _STEM.fullmatch(stem)
    if found is None or not 1 <= int(found[1]) <= ENTRIES:
        return None
    return int(found[1]) - 1


def real_entries(dataset: Any, what: str) -> np.ndarray:
    """The entry of the ReaL labels of every image of ``dataset`` (``what``: it, as messages
    name it), int64 (n,) in its order; a ``DataError`` in one line when its images are not
    named as the ImageNet validation set's files, have no names, or name one file twice."""
    if not isinstance(dataset, DecodedImages):  # images in memory, or a stream: no names
        raise DataError(
            f"ImageNet ReaL labels are joined to images by their file names, and {what} has "
            "none: expected the validation images as a folder, tar shards or a Hugging Face "
            "dataset read with random access (data.streaming=False)"
        )
    keys = [dataset.key_of(i) for i in range(len(dataset))]
    entries = [real_entry(key) for key in keys]
    unjoined = [i for i, entry in enumerate(entries) if entry is None]
    if unjoined:
        shown = ", ".join(f"{keys[i]!r}" for i in unjoined[:_NAMED])
        more = f" and {len(unjoined) - _NAMED:,} more" if len(unjoined) > _NAMED else ""
        raise DataError(
            f"ImageNet ReaL labels are joined to images by their file names, "
            f"ILSVRC2012_val_00000001 to ILSVRC2012_val_{ENTRIES:08d} (any extension), and "
            f"{len(unjoined):,} of the {len(keys):,} images of {what} are named otherwise: "
            f"{shown}{more}"
        )
    _check_once(keys, entries, what)
    return np.array(entries, dtype=np.int64)


def _check_once(keys: list[str | None], entries: list[int | None], what: str) -> None:
    """A ``DataError`` in one line when two images of ``what`` are the same validation image
    (the same entry): ReaL accuracy counts each of the 50,000 once."""
    first: dict[int | None, int] = {}
    again = []  # (the image, the first of its entry)
    for i, entry in enumerate(entries):
        if entry in first:
            again.append((i, first[entry]))
        else:
            first[entry] = i
    if not again:
        return
    shown = ", ".join(f"{keys[i]!r} repeats {keys[j]!r}" for i, j in again[:_NAMED])
    more = f" and {len(again) - _NAMED:,} more" if len(again) > _NAMED else ""
    raise DataError(
        f"ImageNet ReaL counts each validation image once, and {len(again):,} of the "
        f"{len(keys):,} images of {what} repeat one before them (the same ILSVRC2012_val "
        f"number): {shown}{more}; keep one copy of each"
    )


def real_entries_for(num_classes: int, dataset: Any, what: str, model: str) -> np.ndarray:
    """``real_entries`` of ``dataset`` for a model (``model``: as messages name it) of
    ``num_classes`` outputs; a ``DataError`` in one line unless they are ImageNet-1k's."""
    if num_classes != REAL_CLASSES:
        raise DataError(
            f"ImageNet ReaL labels are ImageNet-1k classes, and {model} has {num_classes} "
            f"outputs: expected {REAL_CLASSES}"
        )
    return real_entries(dataset, what)


@dataclass(frozen=True)
class RealAccuracy:
    """ReaL accuracy (nan when no image counts) over ``counted`` images; ``left_out`` images
    had an empty label set."""

    accuracy: float
    counted: int
    left_out: int


def real_accuracy(entries: Sequence[int] | np.ndarray, predictions: Any) -> RealAccuracy:
    """ReaL accuracy of the top-1 ``predictions`` (ImageNet-1k class indices: a sequence or a
    1-D tensor) of the images at ``entries`` of the labels (``real_entries``), in the same
    order."""
    labels = real_labels()
    predicted = [int(k) for k in predictions]
    if len(predicted) != len(entries):
        raise ValueError(f"{len(predicted)} predictions for {len(entries)} images")
    hits = counted = 0
    for entry, k in zip(entries, predicted, strict=True):
        real = labels[int(entry)]
        if real:
            counted += 1
            hits += k in real
    accuracy = hits / counted if counted else float("nan")
    return RealAccuracy(accuracy, counted, len(predicted) - counted)
