"""The one image container: whatever its source (a folder, tar shards, a Hugging Face table), a
split's images are read by index as encoded bytes and decoded here.

A source (``contract.ImageSource``) numbers its images 0..n-1 (records) and gives each one's label,
name and encoded bytes, and its state (the verification cache's key). ``DecodedImages`` does the
rest, the same way for every source: verification at construction (``verify.verify_source``),
which drops an unreadable image from the index with a warning (listed in ``skipped``, indices
fixed for the life of the dataset, as the loader's determinism needs); the channels, given
(``mode``) or decided by verification (1 when every image is greyscale, else 3); decoding
(``codec``: upright, whole or inception-cropped before decoding), where an image that fails to
decode (a truncated JPEG) is replaced, deterministically, by the next one that decodes, with its
label and a warning; and views (a subset of records; the classes in another order). An image of
more than ``max_image_bytes`` (read by its source) or ``max_image_pixels`` (its header's size,
refused before decoding) is unreadable. More than ``max_bad_fraction`` unreadable is an error. Items are (uint8 (C, H, W), int label), at the
images' own sizes (the loader resizes them).
"""

from __future__ import annotations

import copy
import functools
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, TypedDict, TypeVar, cast

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import get_worker_info

from ..config import DataConfig
from ..config.keys import default_of
from ..errors import ConfigError, DataError, VitkitError
from .arrays import as_indices, renumbering
from .bounds import MAX_IMAGE_BYTES
from .codec import DECODE_ERRORS, MAX_IMAGE_PIXELS, decode, decode_crop, decode_resized
from .contract import ImageSource, ReadAs, SourceState
from .transforms import INCEPTION_AREA, INCEPTION_RATIO, channels_of, check_mode
from .verify import LEVELS, Findings, Level, verify_source

# data.max_bad_fraction's default, for the containers built outside a run's config
MAX_BAD_FRACTION: float = default_of(DataConfig, "max_bad_fraction")
_NAMED_BAD = 5  # unreadable files an error names; the rest are counted
_Images = TypeVar("_Images", bound="DecodedImages")


class UnreadableImageWarning(UserWarning):
    """An image file was skipped because PIL cannot read it."""


class Reading(TypedDict, total=False):
    """``ReadOptions``' fields as the keyword arguments of a container's constructor
    (``ImageFolderDataset(root, verify="header")``): their defaults are ``ReadOptions``'."""

    mode: str | None
    verify: Level
    max_bad_fraction: float
    verify_workers: int | None
    verify_cache: bool
    max_image_bytes: int
    max_image_pixels: int


@dataclass(frozen=True)
class ReadOptions:
    """How a container reads its source: the channels (``mode``: 'RGB', 'L', or None to decide
    them while verifying), how much of every image is checked at construction (``verify``, the
    config key ``data.verify``), the share of unreadable images tolerated, the verification
    pass's processes and cache (``vitkit.data.verify``), and the bytes and pixels an image may
    have (the config keys of those names; more is unreadable)."""

    mode: str | None = "RGB"
    verify: Level = "full"
    max_bad_fraction: float = MAX_BAD_FRACTION
    verify_workers: int | None = None  # None: every core this process may use; 0 or 1: serial
    verify_cache: bool = True
    max_image_bytes: int = MAX_IMAGE_BYTES
    max_image_pixels: int = MAX_IMAGE_PIXELS

    def __post_init__(self) -> None:
        check_mode(self.mode, undecided=True)
        if self.verify not in LEVELS:
            raise ConfigError(
                f"verify={self.verify!r} is not valid: expected one of "
                f"{', '.join(map(repr, LEVELS))}"
            )
        if self.mode is None and self.verify == "none":
            raise ConfigError(
                "mode=None decides the channels while verifying every image: expected "
                "verify='full' or 'header', or mode='RGB' or 'L' with verify='none'"
            )
        if not 0.0 <= self.max_bad_fraction < 1.0:
            raise ConfigError(
                f"max_bad_fraction={self.max_bad_fraction!r} is not valid: expected a number in "
                "[0, 1)"
            )
        workers = self.verify_workers
        if workers is not None and (type(workers) is not int or workers < 0):
            raise ConfigError(
                f"verify_workers={workers!r} is not valid: expected None or an integer >= 0"
            )
        for name in ("max_image_bytes", "max_image_pixels"):
            bound = getattr(self, name)
            if type(bound) is not int or bound < 1:
                raise ConfigError(f"{name}={bound!r} is not valid: expected an integer >= 1")


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
    failed: set[str],
    key: str,
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


class Raised(NamedTuple):
    """A vitkit error a loader worker met reading an item, handed to the main process as the
    item (``collate_read``) for it to raise: torch raises a worker's error again as "Caught
    DataError in DataLoader worker process 0.", its message in a traceback below that line."""

    error: VitkitError
    failures: list[tuple[str, str]]  # met before it: counted first, as without workers


# what read_item hands over: an image (C, S_h, S_w), its label, the failures met reading it
ReadItem = tuple[Tensor, int, list[tuple[str, str]]]


def read_item(read: Callable[[], tuple[Tensor, int]], images: object) -> ReadItem | Raised:
    """``read()``'s (image, label) and the images' decoding failures met reading it, in a loader
    worker (``take_failures``: none in the main process, which counted them already); or the
    vitkit error it raised, as a ``Raised``, there (here it is raised)."""
    try:
        image, label = read()
    except VitkitError as e:
        if get_worker_info() is None:
            raise
        return Raised(e, _taken(images))
    return image, label, _taken(images)


def _taken(images: object) -> list[tuple[str, str]]:
    take = getattr(images, "take_failures", None)  # a DecodedImages's; none from others
    return [] if take is None else take()


def collate_read(items: list[ReadItem | Raised]) -> tuple[Tensor, Tensor, list] | Raised:
    """``read_item``'s items as uint8 images (B, C, S_h, S_w), labels (B,) and every failure,
    or the first ``Raised`` among them."""
    for item in items:
        if isinstance(item, Raised):
            return item
    done = cast(list[ReadItem], items)
    images = torch.stack([image for image, _, _ in done])
    labels = torch.tensor([label for _, label, _ in done], dtype=torch.int64)
    return images, labels, [failure for _, _, failures in done for failure in failures]


def counted(batch: tuple[Tensor, Tensor, list] | Raised, images: object) -> tuple[Tensor, Tensor]:
    """A ``collate_read`` batch in the main process: its failures counted against the images'
    ``max_bad_fraction`` (``count_failures``), a ``Raised`` raised; its images and labels."""
    failures = batch.failures if isinstance(batch, Raised) else batch[2]
    if failures:  # a worker's error comes after the failures it met, as without workers
        cast(DecodedImages, images).count_failures(failures, stacklevel=3)
    if isinstance(batch, Raised):
        raise batch.error
    return batch[0], batch[1]


def _channels(mode: str) -> str:
    return "1 channel" if mode == "L" else "3 channels"


class DecodedImages:
    """One split's images from ``source``, verified and decoded as ``options`` say (the module
    docstring); items (uint8 (C, H, W), label).

    ``mode``, ``channels`` and ``channels_reason`` (one line, for the log) hold the channels
    given or decided; ``skipped`` lists (name, why) of the images verification dropped;
    ``verified_from`` is the cache entry used (read or written), None without one, and
    ``verified_cached`` whether it was read rather than computed. ``rows`` maps this dataset's
    indices to the source's records, so ``subset`` is a view that shares the source."""

    read_as: ReadAs = "decoded"

    def __init__(self, source: ImageSource, options: ReadOptions) -> None:
        labels = torch.as_tensor(np.asarray(source.labels, dtype=np.int64))  # (n,)
        classes = list(source.classes)
        if len(labels) == 0:
            raise DataError(f"{source.where} holds no images")
        if labels.min() < 0 or labels.max() >= len(classes):
            raise DataError(
                f"the labels of {source.where} must lie in [0, {len(classes)}) for its "
                f"{len(classes)} classes, found values from {int(labels.min())} to "
                f"{int(labels.max())}"
            )
        self.source = source
        self.classes = classes
        self.max_bad_fraction = options.max_bad_fraction
        self.max_pixels = options.max_image_pixels
        self.verify = options.verify
        self.skipped: list[tuple[str, str]] = []
        self.verified_from: Path | None = None
        self.verified_cached = False
        rows = np.arange(len(labels), dtype=np.int64)
        decided: tuple[str, str] | None = None
        if options.verify != "none":
            rows, decided = self._verify(labels, options)
        if options.mode is not None:
            decided = options.mode, f"{_channels(options.mode)}: mode={options.mode!r} was given"
        assert decided is not None  # mode=None without verify is refused by ReadOptions
        self.mode, self.channels_reason = decided
        self.channels = channels_of(self.mode)
        self.rows = rows  # this dataset's index -> record
        self.labels = labels[torch.from_numpy(rows)]  # (len(self),)
        self._failed: set[str] = set()  # images that passed the check but failed to decode
        self._pending: list[tuple[str, str]] = []  # a loader worker's failures (take_failures)

    def _verify(
        self, labels: Tensor, options: ReadOptions
    ) -> tuple[np.ndarray, tuple[str, str] | None]:
        """Check every image (or read what a pass found from the cache): the readable records
        and, when the channels are to be decided, (the mode they call for, why); the unreadable
        ones go to ``skipped``, with a warning each."""
        decide = options.mode is None
        found = verify_source(
            self.source,
            self.state if options.verify_cache else None,
            level=options.verify,
            decide=decide,
            workers=options.verify_workers,
            max_pixels=self.max_pixels,
        )
        self.verified_from, self.verified_cached = found.cache, found.hit
        where = self.source.where
        self.skipped = [(self.source.name(r), why) for r, _, why in found.skipped]
        skip_unreadable(self.skipped, len(labels), where, self.max_bad_fraction, stacklevel=4)
        kept = np.setdiff1d(
            np.arange(len(labels), dtype=np.int64),
            np.array([r for r, _, _ in found.skipped], dtype=np.int64),
        )
        missing = sorted(
            {self.classes[k] for k in labels.unique().tolist()}
            - {self.classes[k] for k in labels[torch.from_numpy(kept)].unique().tolist()}
        )
        if missing:
            raise DataError(f"no readable image left in class(es) {missing} of {where}")
        return kept, (self._decision(found, len(kept)) if decide else None)

    def _decision(self, found: Findings, kept: int) -> tuple[str, str]:
        """(the mode a deciding pass calls for, why)."""
        if found.colour is not None:
            record, image_mode = found.colour
            why = f"{self.source.name(record)} is in colour (mode {image_mode})"
            if found.level == "header":
                why = (
                    f"{self.source.name(record)} has mode {image_mode} (verify='header' reads "
                    "the modes only: a grey image stored in colour counts as colour)"
                )
            return "RGB", f"{_channels('RGB')}: {why}"
        kinds = ", ".join(f"{n:,} in mode {kind}" for kind, n in found.grey.items())
        why = f"all {kept:,} images in {self.source.where} are greyscale ({kinds})"
        return "L", f"{_channels('L')}: {why}"

    @functools.cached_property
    def state(self) -> SourceState | None:
        """The source's state when first asked (what its caches key on; None: not cached)."""
        return self.source.state()

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def where(self) -> str:
        return self.source.where

    def name_of(self, index: int) -> str:
        """Image ``index`` as messages name it (its path, its shard and key, its row)."""
        return self.source.name(int(self.rows[index]))

    def key_of(self, index: int) -> str | None:
        """Image ``index``'s own name in its source (``ImageSource.key``: a folder's file, a
        shard's key, a table's stored path; None when the source stores none)."""
        return self.source.key(int(self.rows[index]))

    def label_of(self, index: int) -> int:
        return int(self.labels[index])

    def encoded(self, index: int) -> bytes:
        """Image ``index``'s encoded bytes; ``OSError`` when they cannot be read."""
        return self.source.read(int(self.rows[index]))

    def subset(self: _Images, indices: Tensor | Sequence[int]) -> _Images:
        """The images at ``indices``, in that order, with the same classes and settings."""
        idx = as_indices(indices, len(self))
        out = copy.copy(self)
        out.rows = self.rows[idx.numpy()]
        out.labels = self.labels[idx]
        out._failed, out._pending = set(), []
        return out

    def in_class_order(self: _Images, order: Sequence[str]) -> _Images:
        """The same images with their classes in the order ``order`` (the same names), labels
        renumbered to it: a view that shares the source."""
        out = copy.copy(self)
        out.labels = renumbering(self.classes, order)[self.labels]  # (len(self),)
        out.classes = list(order)
        out._failed, out._pending = set(), []
        return out

    def __getitem__(self, index: int) -> tuple[Tensor, int]:
        """Image ``index`` (uint8 (C, H, W), upright, a view of channels-last memory where no
        turn swapped its axes) and its label; if it fails to decode, the next one that decodes,
        with its own label."""
        return self._first_readable(
            index, lambda data: decode(data, self.mode, max_pixels=self.max_pixels)
        )

    def resized(self, index: int, size: tuple[int, int]) -> tuple[Tensor, int]:
        """Image ``index`` resized to ``size`` (H, W; uint8 (C, S_h, S_w)) and its label: close to
        ``transforms.resize(self[index][0], size)``, a large JPEG decoded at a reduced size
        (``codec.decode_resized``). An image that fails to decode is replaced as ``__getitem__``
        replaces it."""
        return self._first_readable(
            index, lambda data: decode_resized(data, self.mode, size, max_pixels=self.max_pixels)
        )

    def inception_crop(
        self,
        index: int,
        size: int | tuple[int, int],
        *,
        area: tuple[float, float] = INCEPTION_AREA,
        ratio: tuple[float, float] = INCEPTION_RATIO,
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
            return decode_crop(
                data,
                self.mode,
                size,
                area=area,
                ratio=ratio,
                generator=generator,
                max_pixels=self.max_pixels,
            )

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
                failure = (self.name_of(at), f"{type(e).__name__}: {e}")
                if get_worker_info() is not None:  # each worker would count apart, per loader
                    self._pending.append(failure)
                else:
                    self.count_failures([failure], stacklevel=4)
        raise DataError(f"no image in {self.where} can be decoded")

    def take_failures(self) -> list[tuple[str, str]]:
        """The (name, why) of the images that failed to decode in this loader worker since the
        last call: its item hands them to the main process, which counts them
        (``count_failures``) against ``max_bad_fraction`` over every worker and epoch."""
        failures, self._pending = self._pending, []
        return failures

    def count_failures(self, failures: Sequence[tuple[str, str]], *, stacklevel: int = 2) -> None:
        """Count ``failures`` ((name, why) of images that failed to decode), each image once
        (``count_decode_failure``): a warning each, or the ``DataError`` past the bound."""
        for name, why in failures:
            count_decode_failure(
                self._failed,
                name,
                why,
                total=len(self),
                where=self.where,
                max_bad_fraction=self.max_bad_fraction,
                stacklevel=stacklevel + 1,
            )
