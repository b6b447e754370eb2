"""Streams: parquet files read row group by row group (``data.streaming``), in batches that are
still a function of (seed, epoch, step).

Nothing is converted or copied first; memory holds one window of rows. With no random access
(row i is a read of its whole row group), ``StreamBatches`` orders the stream by row groups:

- training, epoch e: every file's row groups in an order drawn from (seed, e), cut into windows
  of consecutive row groups of at least ``shuffle_buffer`` rows, each window's rows in an order
  drawn from (seed, e, window); batch b is rows b*B .. (b+1)*B - 1, the rest of an epoch dropped;
- evaluation: files, row groups and rows in order, the last partial batch kept.

The footers give every row group's size, so a resumed run re-reads only the window its step is in
and goes on exactly as a run that never stopped. Every process (torchrun) reads the stream and
decodes its contiguous part of each batch, as ``Batches`` does. Images are RGB unless
``model.in_chans=1`` (nothing is read ahead); one that fails to decode (or has more than
``data.max_image_pixels`` pixels) is replaced by the next one of its batch that decodes, with a
warning; more than ``max_bad_fraction`` failing is an error.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import Dataset

from ..config import size_hw
from ..errors import ConfigError, DataError
from ..runtime.stops import data_loader
from .codec import DECODE_ERRORS, decode, decode_crop
from .decoded import count_decode_failure
from .loader import Augment, Batches, BatchOptions, generator
from .sources.cells import CellReader
from .sources.parquet import ParquetStream, Row
from .transforms import channels_of, resize, to_float

# Stream names for the random draws (the loader's are 0-3: they never meet these).
_GROUPS, _WINDOW, _SAMPLE, _LOADER = 10, 11, 12, 13


def _as_is(item: Any) -> Any:
    return item


@dataclass(frozen=True)
class _Batch:
    """One batch of an epoch: its rows with their positions in the epoch, and the slice of them
    that is this process's part."""

    epoch: int
    rows: list[tuple[int, Row]]
    part: slice


class _DecodeParts(Dataset):
    """A work item of the DataLoader: one process's part of one batch, (epoch, rows with their
    positions) -> (uint8 images (b, C, S_h, S_w), zero where one failed to decode; whether each
    decoded (b,); labels (b,); [(row, why) of each failure]). The main process replaces the
    failures (``StreamBatches._replace``), with what only the whole batch can say."""

    def __init__(
        self,
        mode: str,
        cells: CellReader,
        image_size: int | tuple[int, int],
        augment: Augment | None,
        seed: int,
        max_pixels: int,
    ) -> None:
        self.mode = mode
        self.cells = cells
        self.max_pixels = max_pixels
        self.image_size = image_size
        self.augment = augment
        self.seed = seed

    def image(self, row: Row, epoch: int, position: int) -> Tensor:
        """``row``'s image, decoded and augmented as at ``position`` of ``epoch``: uint8
        (C, S_h, S_w); ``DECODE_ERRORS`` when it does not decode. The inception crop is drawn
        before decoding, as ``DecodedImages.inception_crop`` draws it (the same draws, so a large
        JPEG is decoded at a reduced size when its box allows)."""
        data, bound = self.cells(row.image, row.name), self.max_pixels
        if self.augment is None:
            return resize(decode(data, self.mode, max_pixels=bound), self.image_size)
        g = generator(self.seed, _SAMPLE, epoch, position)
        if self.augment.inception_crop:
            # (C, S_h, S_w)
            image = decode_crop(data, self.mode, self.image_size, generator=g, max_pixels=bound)
            return self.augment.after_crop(image[None], g)[0]
        return self.augment(decode(data, self.mode, max_pixels=bound)[None], g)[0]

    def __getitem__(
        self, key: tuple[int, list[tuple[int, Row]]]
    ) -> tuple[Tensor, Tensor, Tensor, list[tuple[str, str]]]:
        epoch, part = key
        (h, w), c = size_hw(self.image_size), channels_of(self.mode)
        images = torch.zeros(len(part), c, h, w, dtype=torch.uint8)  # (b, C, S_h, S_w)
        decoded = torch.zeros(len(part), dtype=torch.bool)
        failures = []
        for i, (position, row) in enumerate(part):
            try:
                images[i] = self.image(row, epoch, position)
                decoded[i] = True
            except DECODE_ERRORS as e:
                failures.append((row.name, f"{type(e).__name__}: {e}"))
        labels = torch.tensor([row.label for _, row in part], dtype=torch.int64)
        return images, decoded, labels, failures


class StreamBatches(Batches):
    """``Batches`` over a ``ParquetStream``: the same options, batches and resume contract (a
    batch is a function of (seed, epoch, step)), the order the module docstring describes."""

    def __init__(self, dataset: ParquetStream, options: BatchOptions) -> None:
        if options.aug_repeats > 1:  # an image's copies would have to share its window
            raise ConfigError(
                f"aug_repeats={options.aug_repeats} is not valid for a stream: expected 1 "
                "(repeated augmentation needs random access: data.streaming=false)"
            )
        self.source = dataset
        self._take(options, len(dataset), type(dataset).__name__, in_memory=False)
        self._failed: set[str] = set()  # the rows that failed, each counted once however often read

    def _windows(self, epoch: int) -> list[list[int]]:
        """The row groups of each window of ``epoch``, in order."""
        count = len(self.source.group_rows)
        if not self.options.train:
            return [[g] for g in range(count)]
        drawn = generator(self.options.seed, _GROUPS, epoch)
        order = torch.randperm(count, generator=drawn).tolist()
        windows: list[list[int]] = [[]]
        rows = 0
        for g in order:
            if rows >= self.source.shuffle_buffer:
                windows.append([])
                rows = 0
            windows[-1].append(g)
            rows += int(self.source.group_rows[g])
        return windows

    def _window_order(self, epoch: int, w: int, rows: int) -> Tensor:
        if not self.options.train:
            return torch.arange(rows)
        return torch.randperm(rows, generator=generator(self.options.seed, _WINDOW, epoch, w))

    def order(self, epoch: int) -> Tensor:
        """The stream's rows of ``epoch`` in the order they are served, numbered as the files
        hold them (N,): the same numbers whatever was read before."""
        starts = np.concatenate([[0], np.cumsum(self.source.group_rows)[:-1]])
        out = []
        for w, groups in enumerate(self._windows(epoch)):
            rows = torch.cat(
                [torch.arange(starts[g], starts[g] + self.source.group_rows[g]) for g in groups]
            )
            out.append(rows[self._window_order(epoch, w, len(rows))])
        return torch.cat(out)

    def _rows(self, epoch: int, first: int) -> Iterator[Row]:
        """The rows of ``epoch`` from position ``first`` on: the windows before it are not read."""
        at = 0
        for w, groups in enumerate(self._windows(epoch)):
            size = int(self.source.group_rows[groups].sum())
            if at + size <= first:
                at += size
                continue
            rows = [row for g in groups for row in self.source.read_group(g)]
            for i in self._window_order(epoch, w, size)[max(0, first - at) :].tolist():
                yield rows[i]
            at += size

    def epoch(self, epoch: int, start: int = 0) -> Iterator[tuple[Tensor, Tensor]]:
        """Batches ``start``, ..., ``steps_per_epoch - 1`` of ``epoch``."""
        self._check_epoch(epoch, start)
        return self._load_stream(self._parts(epoch, start), epoch)

    def stream(self, start_step: int = 0) -> Iterator[tuple[Tensor, Tensor]]:
        """Batches from global step ``start_step`` on, epoch after epoch, through one
        ``DataLoader`` (its workers live as long as the stream)."""
        epoch, start = divmod(start_step, self.steps_per_epoch)

        def parts() -> Iterator[_Batch]:
            yield from self._parts(epoch, start)
            for later in itertools.count(epoch + 1):
                yield from self._parts(later, 0)

        return self._load_stream(parts(), epoch)

    def _parts(self, epoch: int, start: int) -> Iterator[_Batch]:
        """Batches ``start``, ... of ``epoch``: their rows with their positions, and this
        process's part of each."""
        B, n = self.options.batch_size, len(self.source)
        end = self.steps_per_epoch * B if self.drop_last else n
        rows = self._rows(epoch, start * B)
        for b in range(start, self.steps_per_epoch):
            span = range(b * B, min((b + 1) * B, end))
            batch = [(position, next(rows)) for position in span]
            # every process reads every row's bytes (the page cache serves later readers; from
            # the Hub each downloads the stream) so that a batch does not depend on the number of
            # processes, and a resume with another number of them needs nothing
            yield _Batch(epoch, batch, self._part(len(batch)))

    def _load_stream(
        self, batches: Iterator[_Batch], epoch: int
    ) -> Iterator[tuple[Tensor, Tensor]]:
        """This process's part of ``batches``, decoded, in order (``epoch``, the first one's,
        seeds the workers)."""
        options, source = self.options, self.source
        assert options.image_size is not None  # Batches requires it of any dataset but arrays
        size, seed = options.image_size, options.seed
        decoder = _DecodeParts(
            source.mode, source.cells, size, self.augment, seed, source.max_pixels
        )
        sent: collections.deque[_Batch] = collections.deque()  # handed out, not yet back

        def parts() -> Iterator[tuple[int, list[tuple[int, Row]]]]:
            for batch in batches:
                sent.append(batch)
                yield batch.epoch, batch.rows[batch.part]

        loader = data_loader(
            decoder,
            sampler=parts(),
            batch_size=None,
            num_workers=options.num_workers,
            collate_fn=_as_is,
            pin_memory=options.pin_memory,
            generator=generator(options.seed, _LOADER, epoch),
        )
        for images, decoded, labels, failures in loader:  # in the order handed out
            batch = sent.popleft()
            self._count(failures)
            if not decoded.all():
                images, labels = self._replace(decoder, batch, images, decoded, labels)
            yield (images if options.uint8 else to_float(images)), labels

    def _replace(
        self,
        decoder: _DecodeParts,
        batch: _Batch,
        images: Tensor,
        decoded: Tensor,
        labels: Tensor,
    ) -> tuple[Tensor, Tensor]:
        """The part ``images`` (b, C, S_h, S_w) with each image that failed replaced by the next
        image of the whole batch (wrapping round) that decodes, and its label: whichever
        process's part that is, so the batch is the same for any number of processes. An image of
        another part is decoded here, as its process decodes it (failures are rare). Where no
        image of the batch decodes (a batch of one), an evaluation leaves the image out, counted
        as failed already; training refuses the batch."""
        images, labels = images.clone(), labels.clone()
        first, n = batch.part.start, len(batch.rows)
        kept = torch.ones(len(labels), dtype=torch.bool)
        for slot in (~decoded).nonzero().flatten().tolist():
            for k in range(1, n):
                j = (first + slot + k) % n  # in the whole batch
                if batch.part.start <= j < batch.part.stop:
                    if decoded[j - first]:
                        images[slot], labels[slot] = images[j - first], labels[j - first]
                        break
                    continue
                position, row = batch.rows[j]
                try:
                    images[slot] = decoder.image(row, batch.epoch, position)
                except DECODE_ERRORS:
                    continue  # its own process counts it
                labels[slot] = row.label
                break
            else:
                if not self.options.train:  # an evaluation's (a last batch of one): left out
                    kept[slot] = False
                    continue
                name = batch.rows[first + slot][1].name
                raise DataError(f"no image of a batch of {self.source.name} decodes; first: {name}")
        return images[kept], labels[kept]

    def _count(self, failures: list[tuple[str, str]]) -> None:
        for where, why in failures:  # a row read again (another epoch, evaluation) counts once
            count_decode_failure(
                self._failed,
                where,
                why,
                total=len(self.source),
                where=self.source.name,
                max_bad_fraction=self.source.max_bad_fraction,
                replaced_by="the next readable image of its batch",
                stacklevel=3,
            )
