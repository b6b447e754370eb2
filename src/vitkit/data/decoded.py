"""What every container of images does with the encoded bytes its source hands it: decode them
upright in the container's mode (``codec``), whole or crop-first, and replace an image that fails
to decode by the next one that decodes, deterministically, with its own label; the warnings and
the limit (``max_bad_fraction``) of images skipped or replaced.

A container (``ImageFolderDataset``, ``EncodedImages``) says how many images it holds and gives
image ``index``'s name, label and bytes (``name_of``, ``label_of``, ``encoded``);
``DecodedImages`` does the rest.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor

from ..errors import DataError
from .codec import DECODE_ERRORS, decode, decode_crop

_NAMED_BAD = 5  # unreadable files an error names; the rest are counted


class UnreadableImageWarning(UserWarning):
    """An image file was skipped because PIL cannot read it."""


def skip_unreadable(
    bad: Sequence[tuple[object, str]],
    total: int,
    where: object,
    max_bad_fraction: float,
    *,
    stacklevel: int,
) -> None:
    """Warn once per unreadable image (``bad``: (what, why) of each, in order) of the ``total``
    in ``where``, or raise a ``DataError`` naming the first few when they are more than
    ``max_bad_fraction`` of them. ``stacklevel``: the warnings' frame, counted from the caller."""
    if len(bad) > max_bad_fraction * total:
        named = ", ".join(f"{what} ({why})" for what, why in bad[:_NAMED_BAD])
        more = f" and {len(bad) - _NAMED_BAD} more" if len(bad) > _NAMED_BAD else ""
        raise DataError(
            f"{len(bad)} of {total} images in {where} are unreadable, more than "
            f"max_bad_fraction={max_bad_fraction} allows: {named}{more}"
        )
    for count, (what, why) in enumerate(bad, 1):
        warnings.warn(
            f"skipping unreadable image {what} ({why}); {count} skipped so far in {where}",
            UnreadableImageWarning,
            stacklevel=stacklevel + 1,
        )


def count_decode_failure(
    failed: set[Any],
    key: object,
    error: Exception | str,
    *,
    total: int,
    where: object,
    max_bad_fraction: float,
    replaced_by: str = "the next readable image",
    stacklevel: int,
) -> None:
    """An image that passed the listing's check failed to decode when read: counted once
    however often it is read again (``failed``: the keys seen so far, updated), a warning, or a
    ``DataError`` when the failures are more than ``max_bad_fraction`` of the ``total`` images in
    ``where``. ``stacklevel``: the warning's frame, counted from the caller."""
    if key in failed:
        return
    failed.add(key)
    why = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    if len(failed) > max_bad_fraction * total:
        raise DataError(
            f"{len(failed)} of {total} images in {where} failed to decode, more than "
            f"max_bad_fraction={max_bad_fraction} allows; last: {key} ({why})"
        )
    warnings.warn(
        f"image {key} failed to decode ({why}); using {replaced_by} in its place "
        f"({len(failed)} so far in {where})",
        UnreadableImageWarning,
        stacklevel=stacklevel + 1,
    )


class DecodedImages:
    """Images read by index as encoded bytes and decoded; items (uint8 (C, H, W), label).

    Subclasses set ``mode`` ('RGB' or 'L'), ``max_bad_fraction`` and ``_failed`` (an empty set),
    and define ``where`` (the split as messages name it), ``__len__``, ``name_of``, ``label_of``
    and ``encoded``."""

    mode: str
    max_bad_fraction: float
    _failed: set[str]  # the images that passed the check but failed to decode

    @property
    def where(self) -> str:
        raise NotImplementedError

    def __len__(self) -> int:
        raise NotImplementedError

    def name_of(self, index: int) -> str:
        """Image ``index`` as messages name it (its path, its shard and key, its row)."""
        raise NotImplementedError

    def label_of(self, index: int) -> int:
        raise NotImplementedError

    def encoded(self, index: int) -> bytes:
        """Image ``index``'s encoded bytes; ``OSError`` when they cannot be read."""
        raise NotImplementedError

    def __getitem__(self, index: int) -> tuple[Tensor, int]:
        """Image ``index`` (uint8 (C, H, W), upright, a view of channels-last memory where no
        turn swapped its axes) and its label; if it fails to decode, the next one that decodes,
        with its own label."""
        return self._first_readable(index, lambda data: decode(data, self.mode))

    def inception_crop(
        self,
        index: int,
        size: int | tuple[int, int],
        *,
        area: tuple[float, float] = (0.05, 1.0),
        ratio: tuple[float, float] = (3 / 4, 4 / 3),
        generator: torch.Generator,
    ) -> tuple[Tensor, int]:
        """Image ``index`` inception-cropped to ``size`` (uint8 (C, S_h, S_w)) and its label: what
        ``transforms.inception_crop(self[index][0], size, ...)`` gives with the same generator,
        which it leaves in the same state, but with the box drawn before decoding, so that a
        large JPEG is decoded at a reduced size when the box allows it (``codec.decode_crop``).
        An image that fails to decode is replaced as ``__getitem__`` replaces it, the
        replacement's box drawn from the generator as it was before the failure."""
        state = generator.get_state()

        def crop(data: bytes) -> Tensor:
            generator.set_state(state)  # a replacement draws what a decoded-first image would
            return decode_crop(data, self.mode, size, area=area, ratio=ratio, generator=generator)

        return self._first_readable(index, crop)

    def _first_readable(self, index: int, read: Callable[[bytes], Tensor]) -> tuple[Tensor, int]:
        """``read`` of image ``index``'s bytes and its label, or of the next image that
        decodes."""
        n = len(self)
        if not -n <= index < n:
            raise IndexError(f"index {index} is out of range for {n} images")
        for step in range(n):
            at = (index + step) % n
            try:
                return read(self.encoded(at)), self.label_of(at)
            except DECODE_ERRORS as e:
                count_decode_failure(
                    self._failed,
                    self.name_of(at),
                    e,
                    total=n,
                    where=self.where,
                    max_bad_fraction=self.max_bad_fraction,
                    stacklevel=3,
                )
        raise DataError(f"no image in {self.where} can be decoded")
