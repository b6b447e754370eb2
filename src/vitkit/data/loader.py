"""Deterministic, resumable batches: what batch b of epoch e holds depends only on (seed, e, b).

Training order is a permutation drawn per epoch from (seed, epoch); augmentation draws from
(seed, epoch, b) per batch on the in-memory path, from (seed, epoch, i) per example on the
per-sample path. So ``epoch(e, start=b)`` yields what an uninterrupted ``epoch(e)`` yields from b
on, however many workers decode: a resumed run sees the same data (DESIGN.md "Training").

Two paths, one set of options (``BatchOptions``): an ``ArrayDataset`` (Fashion-MNIST, CIFAR,
synthetic) is gathered and augmented a whole batch at once in the main process; images read by
index (``DecodedImages``: a folder, tar shards, Hugging Face rows) go through a ``DataLoader``
whose workers decode and augment one image each, the inception crop drawn before decoding
(``codec.decode_crop``). Both crop (inception, or a resize to ``image_size``), then pad-crop and
flip at the output resolution. A batch is uint8 with ``uint8=True`` (scaled on the device by
``device.to_input``), else float32 already scaled. With ``shard=(rank, world)`` every process
walks the same batches and keeps its contiguous part of each: the union is the one-process batch.
Repeated augmentation (``aug_repeats``, ``repeated``) serves ceil(N/r) images r times an epoch,
copies drawn apart (their batch positions, or per sample copy k > 0 from (seed, epoch, i, k)).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from ..config import DataConfig, ModelConfig, TrainConfig, image_size_of, size_hw
from ..config.augment import AutoAugment, parse_auto_augment
from ..errors import ConfigError, DataError
from ..runtime.stops import data_loader
from . import autoaugment, transforms
from .arrays import ArrayDataset
from .contract import Images, ReadAs
from .decoded import DecodedImages, Raised, ReadItem, collate_read, counted, read_item
from .transforms import inception_crop, random_crop_flip, resize, to_float

# Stream names, so the permutation and the augmentation of one epoch never share random numbers.
_ORDER, _BATCH, _SAMPLE, _LOADER, _COPY = 0, 1, 2, 3, 4


def derive_seed(*keys: int) -> int:
    """A well-mixed 63-bit seed from non-negative integers (numpy's ``SeedSequence`` hashing)."""
    state = np.random.SeedSequence(list(keys)).generate_state(2, dtype=np.uint32)
    return (int(state[0]) << 31) ^ int(state[1])


def generator(*keys: int) -> torch.Generator:
    return torch.Generator().manual_seed(derive_seed(*keys))


def repeated(order: Tensor, repeats: int, batch_size: int) -> tuple[Tensor, Tensor]:
    """Repeated augmentation [DeiT's RASampler; Hoffer et al. 2020]: the first ceil(N/r) images
    of ``order`` (N,), each ``repeats`` = r times, N entries in all (the epoch keeps its length),
    and each entry's copy number (both (N,)). Entry e is copy e % r of ``order[e // r]``; within
    each batch of ``batch_size`` = B the entries are laid out copy-major (copy 0 of the batch's
    images, then copy 1, ...), so an image's copies in one batch sit at least floor(B/r) apart.
    A process keeps a contiguous part of B/world of every batch, so on ``world`` >= r processes
    every copy lands on a different process (as DeiT spreads them over GPUs); on fewer they share
    as evenly as the parts allow, and in one process its batch. With r not dividing B an image's
    copies may straddle two batches; a batch that ``drop_last`` leaves out may leave the last
    images fewer than r copies."""
    n = len(order)
    entries = torch.arange(n)
    copies = entries % repeats
    # sort by (batch, copy, entry): unique keys, below r * n**2 (int64 for any dataset)
    served = torch.argsort((entries // batch_size * repeats + copies) * n + entries)
    return order[served // repeats], copies[served]


@dataclass(frozen=True)
class Augment:
    """Training augmentation of uint8 images (B, C, H, W), one generator for the whole call."""

    image_size: int | tuple[int, int] | None  # (height, width), or an int for a square
    crop_padding: int
    flip: bool
    inception_crop: bool
    rand_augment: bool = False
    auto_augment: AutoAugment | None = None  # data.auto_augment, parsed

    def __call__(self, images: Tensor, g: torch.Generator) -> Tensor:
        if self.inception_crop:
            size = self.image_size or (images.shape[-2], images.shape[-1])
            crops = [inception_crop(im, size, generator=g) for im in images]  # B x (C, S_h, S_w)
            images = torch.stack(crops)  # (B, C, S_h, S_w)
        elif self.image_size is not None:
            images = resize(images, self.image_size)  # (B, C, S_h, S_w)
        return self.after_crop(images, g)

    def after_crop(self, images: Tensor, g: torch.Generator) -> Tensor:
        """What follows the inception crop or the resize: the padded crop, the flip, RandAugment
        or ``auto_augment`` (uint8 (B, C, S_h, S_w) at the output resolution)."""
        if self.crop_padding or self.flip:
            images = random_crop_flip(
                images, padding=self.crop_padding, flip=self.flip, generator=g
            )
        if self.rand_augment:  # RandAugment(2, 10), as big_vision's plain-ViT recipe
            images = torch.stack([transforms.rand_augment(im, generator=g) for im in images])
        if self.auto_augment is not None:
            images = autoaugment.auto_augment_each(images, self.auto_augment, generator=g)
        return images


class _Transformed(Dataset):
    """Per-sample path: item (epoch, index, copy) -> (uint8 (C, S_h, S_w), label), augmented
    from its own generator when training (``copy``: which of repeated augmentation's copies)."""

    def __init__(
        self,
        dataset: Images,
        seed: int,
        image_size: int | tuple[int, int],
        augment: Augment | None,
    ) -> None:
        self.dataset = dataset
        self.seed = seed
        self.image_size = image_size
        self.augment = augment

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: tuple[int, int, int]) -> ReadItem | Raised:
        """Item ``key`` with the decoding failures met reading it, or the error it raised in a
        worker (``decoded.read_item``): the main process counts and raises (``counted``)."""
        return read_item(lambda: self._item(key), self.dataset)

    def _item(self, key: tuple[int, int, int]) -> tuple[Tensor, int]:
        epoch, index, copy = key
        if self.augment is not None:
            # copy 0 draws as every copy did before repeated augmentation: old runs resume exactly
            keys = (_SAMPLE, epoch, index) if copy == 0 else (_COPY, epoch, index, copy)
            g = generator(self.seed, *keys)
            cropped = self._crop_first(index, g)
            if cropped is not None:
                return cropped
        image, label = self.dataset[index]  # (C, H, W) uint8, any H, W
        if self.augment is None:
            return resize(image, self.image_size), label
        return self.augment(image[None], g)[0], label

    def _crop_first(self, index: int, g: torch.Generator) -> tuple[Tensor, int] | None:
        """The inception crop drawn before decoding, for images read by index (a large JPEG is
        decoded at 1/2-1/8 of its size when the box allows), else None."""
        augment = self.augment
        if augment is None or not augment.inception_crop:
            return None
        if read_as(self.dataset) != "decoded":  # made whole, then cropped
            return None
        decoded = cast(DecodedImages, self.dataset)
        image, label = decoded.inception_crop(index, self.image_size, generator=g)
        return augment.after_crop(image[None], g)[0], label  # (C, S_h, S_w) uint8


def read_as(dataset: Images) -> ReadAs:
    """``dataset.read_as``; a dataset of ``len`` and indexing alone (torch's) is read by index."""
    return getattr(dataset, "read_as", "made")


@dataclass(frozen=True, kw_only=True)
class BatchOptions:
    """How a dataset is batched: the one set of options of ``Batches`` and ``StreamBatches``.

    ``train=True``: a fresh order each epoch, augmentation as asked, ``drop_last`` by default
    (every step sees a full batch). ``train=False``: dataset order, no augmentation, the last
    partial batch kept. ``image_size`` (an int, or (height, width)) is the output size: images
    are resized to it, or inception-cropped to it when training (required for datasets whose
    images vary in size); ``None`` keeps an ``ArrayDataset``'s own size. ``crop_padding`` is in
    output pixels (a padded random crop); the inception crop excludes it. ``num_workers``
    applies to the per-sample path only; ``uint8`` serves uint8 batches (``to_input`` scales
    them on the device), else float32 in [-1, 1]; ``pin_memory`` puts every batch in
    page-locked memory (for a GPU). ``shard=(rank, world)`` serves process ``rank``'s part of
    every batch (training batches must split evenly; the last evaluation batch may leave a
    process an empty part). ``drop_last=None``: the value of ``train``. ``aug_repeats=r`` > 1
    (training): each epoch serves about N/r images r times each, differently augmented
    (``repeated``).
    """

    batch_size: int
    train: bool
    seed: int = 0
    image_size: int | tuple[int, int] | None = None
    crop_padding: int = 0
    flip: bool = False
    inception_crop: bool = False
    rand_augment: bool = False
    aug_repeats: int = 1
    auto_augment: str | None = None  # data.auto_augment's syntax (config/augment.py)
    num_workers: int = 0
    drop_last: bool | None = None
    shard: tuple[int, int] = (0, 1)
    uint8: bool = False
    pin_memory: bool = False

    def __post_init__(self) -> None:
        batch_size, crop_padding, seed = self.batch_size, self.crop_padding, self.seed
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ConfigError(
                f"batch_size={batch_size!r} is not valid: expected a positive integer"
            )
        if not isinstance(seed, int) or seed < 0:
            raise ConfigError(f"seed={seed!r} is not valid: expected an integer >= 0")
        if self.image_size is not None:  # a square pair becomes its int
            object.__setattr__(self, "image_size", image_size_of(self.image_size))
        if not isinstance(crop_padding, int) or crop_padding < 0:
            raise ConfigError(
                f"crop_padding={crop_padding!r} is not valid: expected an integer >= 0"
            )
        if self.inception_crop and crop_padding:
            raise ConfigError(
                f"inception_crop=True and crop_padding={crop_padding}: choose one way of cropping"
            )
        if not self.train and self.augments:
            raise ConfigError(
                "augmentation (crop_padding, flip, inception_crop) is for training; "
                f"found it with train=False (crop_padding={crop_padding}, flip={self.flip}, "
                f"inception_crop={self.inception_crop})"
            )
        repeats = self.aug_repeats
        if not isinstance(repeats, int) or repeats < 1:
            raise ConfigError(f"aug_repeats={repeats!r} is not valid: expected an integer >= 1")
        if repeats > 1 and not self.train:
            raise ConfigError(
                f"aug_repeats={repeats} is for training (repeated augmentation); found it with "
                "train=False"
            )
        if self.auto_augment is not None:
            parse_auto_augment(self.auto_augment)
            if self.rand_augment:
                raise ConfigError(
                    f"rand_augment=True and auto_augment={self.auto_augment!r}: choose one"
                )
        rank, world = self.shard
        if not 0 <= rank < world:
            raise ConfigError(
                f"shard={self.shard!r} is not valid: expected (rank, world) with 0 <= rank < world"
            )
        if batch_size < world or (self.train and batch_size % world):
            raise ConfigError(
                f"batch_size={batch_size} does not split evenly across {world} processes: "
                f"train.batch_size is the global batch, expected a multiple of {world}"
                if self.train
                else f"batch_size={batch_size} does not split across {world} processes: "
                f"expected at least {world}"
            )

    @property
    def augments(self) -> bool:
        """Whether any augmentation is asked for."""
        return bool(
            self.crop_padding
            or self.flip
            or self.inception_crop
            or self.rand_augment
            or self.auto_augment
        )

    @classmethod
    def training(
        cls,
        train: TrainConfig,
        data: DataConfig,
        model: ModelConfig,
        *,
        shard: tuple[int, int] = (0, 1),
        pin_memory: bool = False,
    ) -> BatchOptions:
        """A run's training batches: ``train.batch_size`` (the global batch) and ``train.seed``;
        ``data``'s augmentation and decoding workers (decided: ``runtime.machine.decide``);
        at ``model.image_size``; uint8, scaled on the device (``to_input``)."""
        if data.num_workers is None:
            raise ValueError("data.num_workers is decided when the run starts (machine.decide)")
        return cls(
            batch_size=train.batch_size,
            train=True,
            seed=train.seed,
            image_size=model.image_size,
            crop_padding=data.crop_padding,
            flip=data.flip,
            inception_crop=data.inception_crop,
            rand_augment=data.rand_augment,
            aug_repeats=data.aug_repeats,
            auto_augment=data.auto_augment,
            num_workers=data.num_workers,
            shard=shard,
            uint8=True,
            pin_memory=pin_memory,
        )

    @classmethod
    def evaluation(
        cls,
        model: ModelConfig,
        *,
        batch_size: int,
        num_workers: int = 0,
        shard: tuple[int, int] = (0, 1),
        uint8: bool = False,
        pin_memory: bool = False,
    ) -> BatchOptions:
        """A split in order, unaugmented, at ``model.image_size``, the last partial batch kept."""
        return cls(
            batch_size=batch_size,
            train=False,
            image_size=model.image_size,
            num_workers=num_workers,
            shard=shard,
            uint8=uint8,
            pin_memory=pin_memory,
        )


class Batches:
    """Batches of (images (B, C, H, W), int64 labels (B,)) of ``dataset``, one epoch at a time,
    as ``options`` say (``BatchOptions``): float32 in [-1, 1], or uint8 with ``uint8=True``
    (``to_input`` scales them on the device). ``steps_per_epoch`` counts whole batches.
    """

    def __init__(self, dataset: Images, options: BatchOptions) -> None:
        self.dataset = dataset
        in_memory = read_as(dataset) == "memory"
        self._take(options, len(dataset), type(dataset).__name__, in_memory)

    def _take(self, options: BatchOptions, n: int, kind: str, in_memory: bool) -> None:
        """Batch ``n`` examples of a ``kind`` (its class, for messages) as ``options`` say, in
        memory or per sample; what a dataset of that size allows is checked here."""
        self.options = options
        self._evaluation: DataLoader | None = None  # kept: its workers serve every evaluation
        self.drop_last = options.train if options.drop_last is None else options.drop_last
        self.in_memory = in_memory
        if not in_memory and options.image_size is None:
            raise ConfigError(
                f"image_size is required for a {kind} (its images vary in size); found None"
            )
        if n == 0:
            raise DataError("the dataset is empty")
        if self.drop_last and options.batch_size > n:
            raise ConfigError(
                f"batch_size={options.batch_size} is larger than the dataset ({n} examples) and "
                "drop_last=True: an epoch would hold no batch"
            )
        B = options.batch_size
        self.steps_per_epoch = n // B if self.drop_last else math.ceil(n / B)
        self.augment = (
            Augment(
                options.image_size,
                options.crop_padding,
                options.flip,
                options.inception_crop,
                options.rand_augment,
                None if options.auto_augment is None else parse_auto_augment(options.auto_augment),
            )
            if options.train and (options.augments or options.image_size)
            else None
        )

    def __len__(self) -> int:
        return self.steps_per_epoch

    def order(self, epoch: int) -> Tensor:
        """The dataset indices of ``epoch`` in the order they are served (N,)."""
        return self._drawn(epoch)[0]

    def _drawn(self, epoch: int) -> tuple[Tensor, Tensor]:
        """``order(epoch)`` and each entry's copy number (both (N,); 0 without repeats)."""
        n = len(self.dataset)
        if not self.options.train:
            return torch.arange(n), torch.zeros(n, dtype=torch.int64)
        order = torch.randperm(n, generator=generator(self.options.seed, _ORDER, epoch))
        if self.options.aug_repeats == 1:
            return order, torch.zeros(n, dtype=torch.int64)
        return repeated(order, self.options.aug_repeats, self.options.batch_size)

    def epoch(self, epoch: int, start: int = 0) -> Iterator[tuple[Tensor, Tensor]]:
        """Batches ``start``, ..., ``steps_per_epoch - 1`` of ``epoch``."""
        self._check_epoch(epoch, start)
        if self.in_memory:
            spans = self._spans(epoch, start, self.steps_per_epoch)
            return (self._gather(span, epoch, b) for b, span in enumerate(spans, start))
        # an evaluation: its workers stay for the next one
        if not self.options.train and start == 0:
            if self._evaluation is None:
                self._evaluation = self._loader([self._keys(epoch, 0, self.steps_per_epoch)])
            return self._out(self._evaluation, self._empty_tail(epoch))
        return self._out(self._loader([self._keys(epoch, start, self.steps_per_epoch)]), 0)

    def _check_epoch(self, epoch: int, start: int) -> None:
        if not isinstance(epoch, int) or epoch < 0:
            raise ConfigError(f"epoch={epoch!r} is not valid: expected an integer >= 0")
        if not 0 <= start <= self.steps_per_epoch:
            raise ConfigError(
                f"start={start!r} is not valid: expected 0 <= start <= {self.steps_per_epoch} "
                "(steps per epoch)"
            )

    def _spans(self, epoch: int, start: int, stop: int) -> list[Tensor]:
        """The dataset indices of batches ``start``, ..., ``stop - 1`` of ``epoch``."""
        return self._cut(self.order(epoch), start, stop)

    def _cut(self, entries: Tensor, start: int, stop: int) -> list[Tensor]:
        """``entries`` (N,) of an epoch cut into its batches ``start``, ..., ``stop - 1``."""
        B = self.options.batch_size
        return [entries[b * B : (b + 1) * B] for b in range(start, stop)]

    def _part(self, n: int) -> slice:
        """This process's contiguous part of a batch of ``n``: parts differ by at most one."""
        rank, world = self.options.shard
        return slice(rank * n // world, (rank + 1) * n // world)

    def stream(self, start_step: int = 0) -> Iterator[tuple[Tensor, Tensor]]:
        """Batches from global step ``start_step`` on, epoch after epoch, without end. The
        per-sample path reads them through one ``DataLoader``, whose workers live as long as the
        stream."""
        epoch, start = divmod(start_step, self.steps_per_epoch)
        if self.in_memory:
            while True:
                yield from self.epoch(epoch, start)
                epoch, start = epoch + 1, 0
        yield from self._out(self._loader(self._epochs(epoch, start)), 0)

    def _epochs(self, epoch: int, start: int) -> Iterator[list[list[tuple[int, int, int]]]]:
        """This process's (epoch, index, copy) keys of every batch, from batch ``start`` of ``epoch``
        on, an epoch at a time (each epoch's permutation drawn when it is reached)."""
        while True:
            yield self._keys(epoch, start, self.steps_per_epoch)
            epoch, start = epoch + 1, 0

    def _keys(self, epoch: int, start: int, stop: int) -> list[list[tuple[int, int, int]]]:
        """This process's part of batches ``start``..``stop - 1`` of ``epoch``, as the keys
        ``_Transformed`` loads; the empty parts of a last evaluation batch are left out."""
        order, copies = (self._cut(t, start, stop) for t in self._drawn(epoch))
        keys = []
        for indices, copy in zip(order, copies, strict=True):
            part = self._part(len(indices))
            pairs = zip(indices[part].tolist(), copy[part].tolist(), strict=True)
            keys.append([(epoch, i, c) for i, c in pairs])
        return [part for part in keys if part]

    def _empty_tail(self, epoch: int) -> int:
        """How many batches of ``epoch`` leave this process nothing (only a last, partial
        evaluation batch can): it still gets an empty one, so that every process runs the same
        number of forward passes (FSDP)."""
        spans = self._spans(epoch, 0, self.steps_per_epoch)
        return sum(len(span[self._part(len(span))]) == 0 for span in spans)

    def _gather(self, indices: Tensor, epoch: int, b: int) -> tuple[Tensor, Tensor]:
        part = self._part(len(indices))
        if self.augment is None:  # no draws: gather this process's part only
            indices = indices[part]
        arrays = cast(ArrayDataset, self.dataset)  # the in-memory path
        images = arrays.images.index_select(0, indices)  # (B, C, H, W) uint8
        labels = arrays.labels.index_select(0, indices)  # (B,)
        if self.augment is not None:  # draws for the whole batch, then this process's part
            images = self.augment(images, generator(self.options.seed, _BATCH, epoch, b))[part]
            labels = labels[part]
        elif self.options.image_size is not None:
            images = resize(images, self.options.image_size)  # (B, C, S_h, S_w)
        images = images.contiguous() if self.options.uint8 else to_float(images)
        if self.options.pin_memory:
            images, labels = images.pin_memory(), labels.pin_memory()
        return images, labels

    def _loader(self, epochs: Any) -> DataLoader:
        """A ``DataLoader`` over batches of keys, ``epochs`` giving them an epoch at a time."""
        options = self.options
        assert options.image_size is not None  # checked in __init__
        return data_loader(
            _Transformed(self.dataset, options.seed, options.image_size, self.augment),
            batch_sampler=_Chained(epochs),
            num_workers=options.num_workers,
            collate_fn=collate_read,
            pin_memory=options.pin_memory,
            persistent_workers=options.num_workers > 0,
            # its own seed for worker seeding: never a draw from the global RNG (dropout's),
            # which would differ between a resumed and an uninterrupted run
            generator=generator(options.seed, _LOADER),
        )

    def _out(self, loader: DataLoader, empty: int) -> Iterator[tuple[Tensor, Tensor]]:
        """``loader``'s batches as this ``Batches`` serves them, and ``empty`` empty ones."""
        for batch in loader:
            images, labels = counted(batch, self.dataset)
            yield (images if self.options.uint8 else to_float(images)), labels
        if empty:
            assert self.options.image_size is not None  # checked in __init__
            (H, W), C = size_hw(self.options.image_size), self.dataset[0][0].shape[0]
            dtype = torch.uint8 if self.options.uint8 else torch.float32
            for _ in range(empty):
                yield torch.empty(0, C, H, W, dtype=dtype), torch.empty(0, dtype=torch.int64)


class _Chained:
    """A batch sampler over batches handed out an epoch at a time: ``epochs`` is a list of
    epochs (iterated again for every pass) or an endless iterator of them (one pass)."""

    def __init__(self, epochs: Any) -> None:
        self.epochs = epochs

    def __iter__(self) -> Iterator[list[tuple[int, int, int]]]:
        for batches in self.epochs:
            yield from batches
