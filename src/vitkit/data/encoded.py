"""Encoded images (JPEG, PNG, WebP, BMP bytes) read by index out of a container: the base of
tar shards (``shards.py``) and Hugging Face datasets (``hf.py``).

What ``ImageFolderDataset`` does for files, done for bytes, with the same rules (folder.py's
docstring says why each is so): every image is checked once at construction (PIL's
``verify()``: the header and, for PNG, every chunk's CRC), an unreadable one is dropped from the
index with a warning naming it and listed in ``skipped``, more than ``max_bad_fraction`` of the
split unreadable is an error; an image that passes the check but fails to decode is replaced,
deterministically, by the next one that decodes. ``mode=None`` decides the channels during the
same pass: 1 when every image is greyscale (a one-channel PIL mode, or R = G = B once decoded),
else 3. Items are (uint8 (C, H, W), int label); images keep their own size.

A subclass says how to read one record's bytes (``read``) and what to call it in messages
(``describe``); records are numbered 0..n-1 by the subclass, and ``rows`` maps this dataset's
indices to them, so ``subset`` is a view that shares the container.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import TypeVar

import numpy as np
import torch
from torch import Tensor

from ..errors import ConfigError, DataError
from .arrays import as_indices
from .codec import DECODE_ERRORS
from .decoded import DecodedImages, skip_unreadable
from .verify import grey_kind, verified_mode

_Images = TypeVar("_Images", bound="EncodedImages")


def _channels(mode: str) -> str:
    return "1 channel" if mode == "L" else "3 channels"


class EncodedImages(DecodedImages):
    """Images stored encoded in a container, read by index; items (uint8 (C, H, W), label).

    Subclasses set ``self.name`` (the split as messages call it), ``self.classes``, and call
    ``_index(labels, mode=..., verify=..., max_bad_fraction=...)`` with the label of every record
    once they can ``read`` them. ``mode``, ``channels`` and ``channels_reason`` hold what was
    given or decided, as ``ImageFolderDataset``'s do; ``skipped`` lists (record, why) dropped."""

    name: str
    classes: list[str]

    def read(self, record: int) -> bytes:
        """The encoded image of record ``record``."""
        raise NotImplementedError

    def describe(self, record: int) -> str:
        """Record ``record`` as a message names it (its shard and key, its row)."""
        raise NotImplementedError

    def read_all(self, records: Sequence[int]) -> Iterator[bytes | OSError]:
        """The encoded images of ``records`` in order, or the error that reading one raised (a
        subclass may read them in bulk)."""
        for record in records:
            try:
                yield self.read(record)
            except OSError as e:
                yield e

    def _index(
        self,
        labels: np.ndarray | Sequence[int],
        *,
        mode: str | None,
        verify: bool,
        max_bad_fraction: float,
    ) -> None:
        if mode not in ("RGB", "L", None):
            raise ConfigError(f"mode={mode!r} is not valid: expected 'RGB', 'L' or None")
        if mode is None and not verify:
            raise ConfigError(
                "mode=None decides the channels while verifying every image: expected verify=True, "
                "or mode='RGB' or 'L' with verify=False"
            )
        if not 0.0 <= max_bad_fraction < 1.0:
            raise ConfigError(
                f"max_bad_fraction={max_bad_fraction!r} is not valid: expected a number in [0, 1)"
            )
        all_labels = torch.as_tensor(np.asarray(labels, dtype=np.int64))
        if len(all_labels) == 0:
            raise DataError(f"{self.name} holds no images")
        if all_labels.min() < 0 or all_labels.max() >= len(self.classes):
            raise DataError(
                f"the labels of {self.name} must lie in [0, {len(self.classes)}) for its "
                f"{len(self.classes)} classes, found values from {int(all_labels.min())} to "
                f"{int(all_labels.max())}"
            )
        self.max_bad_fraction = max_bad_fraction
        self.skipped: list[tuple[str, str]] = []
        rows = np.arange(len(all_labels), dtype=np.int64)
        decided: tuple[str, str] | None = None
        if verify:
            rows, decided = self._verify(rows, all_labels, decide=mode is None)
        if mode is not None:
            decided = mode, f"{_channels(mode)}: mode={mode!r} was given"
        assert decided is not None  # mode=None without verify was refused above
        self.mode, self.channels_reason = decided
        self.channels = 1 if self.mode == "L" else 3
        self.rows = rows  # this dataset's index -> record
        self.labels = all_labels[torch.from_numpy(rows)]
        self._failed: set[str] = set()  # records that passed the check but failed to decode

    def _verify(
        self, rows: np.ndarray, labels: Tensor, *, decide: bool
    ) -> tuple[np.ndarray, tuple[str, str] | None]:
        """The readable records and, if ``decide``, (the mode they call for, why)."""
        grey: Counter[str] = Counter()  # how the images are grey, while no colour one is seen
        colour: tuple[int, str] | None = None
        bad: list[tuple[int, str]] = []
        for record, data in zip(rows.tolist(), self.read_all(rows.tolist()), strict=True):
            try:
                if isinstance(data, OSError):
                    raise data
                image_mode = verified_mode(data)
                if decide and colour is None:
                    kind = grey_kind(data, image_mode)
                    if kind is None:
                        colour = (record, image_mode)
                    else:
                        grey[kind] += 1
            except DECODE_ERRORS as e:
                bad.append((record, f"{type(e).__name__}: {e}"))
        self.skipped = [(self.describe(r), why) for r, why in bad]
        skip_unreadable(self.skipped, len(rows), self.name, self.max_bad_fraction, stacklevel=4)
        kept = np.setdiff1d(rows, np.array([r for r, _ in bad], dtype=np.int64))
        missing = sorted(
            {self.classes[k] for k in labels.tolist()}
            - {self.classes[k] for k in labels[torch.from_numpy(kept)].tolist()}
        )
        if missing:
            raise DataError(f"no readable image left in class(es) {missing} of {self.name}")
        if not decide:
            return kept, None
        if colour is not None:
            why = f"{self.describe(colour[0])} is in colour (mode {colour[1]})"
            return kept, ("RGB", f"{_channels('RGB')}: {why}")
        kinds = ", ".join(f"{n:,} in mode {kind}" for kind, n in sorted(grey.items()))
        why = f"all {len(kept):,} images in {self.name} are greyscale ({kinds})"
        return kept, ("L", f"{_channels('L')}: {why}")

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def where(self) -> str:
        return self.name

    def name_of(self, index: int) -> str:
        return self.describe(int(self.rows[index]))

    def label_of(self, index: int) -> int:
        return int(self.labels[index])

    def encoded(self, index: int) -> bytes:
        return self.read(int(self.rows[index]))

    def subset(self: _Images, indices: Tensor | Sequence[int]) -> _Images:
        """The images at ``indices``, in that order, with the same classes and settings."""
        idx = as_indices(indices, len(self))
        out = copy.copy(self)
        out.rows = self.rows[idx.numpy()]
        out.labels = self.labels[idx]
        out._failed = set()
        return out
