"""What every source of images (a folder, tar shards, a Hugging Face table) gives the one image
container (``decoded.DecodedImages``): its images numbered 0..n-1 (records), each one's label,
name (for messages), key (its own name in the source) and encoded bytes, and the state it is
in, which the verification cache keys on. And what every split gives the run that reads it
(``Images``), whatever holds it: the container, images in memory or made when read, a stream."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np
from torch import Tensor


@dataclass(frozen=True)
class SourceState:
    """What a source's verification is cached under: ``identity`` says which source it is (an
    absolute path, a dataset and split: the cache entry is named after it), ``name`` a short
    readable name for the entry's file, ``digest`` the state its images are in (a change of any
    image changes it)."""

    identity: str
    name: str
    digest: str


class ImageSource(Protocol):
    """Where a container's images come from: records 0..n-1, each an encoded image and a label."""

    @property
    def where(self) -> str:
        """The split as messages name it (its folder, its shards, its dataset and split)."""
        ...

    @property
    def classes(self) -> list[str]: ...

    @property
    def labels(self) -> np.ndarray:
        """The label of every record, int64 (n,)."""
        ...

    def name(self, record: int) -> str:
        """Record ``record`` as messages name it (its path, its shard and key, its row)."""
        ...

    def key(self, record: int) -> str | None:
        """Record ``record``'s own name, as its source gives it: a folder's file (its path
        below the split's folder), a shard's sample key, a table's stored file path (None: the
        source stores none, as a table of bytes alone). Facts kept by file name join on it
        (ImageNet ReaL's labels: ``eval.real``)."""
        ...

    def read(self, record: int) -> bytes:
        """Record ``record``'s encoded image; ``OSError`` when it cannot be read."""
        ...

    def read_all(self, records: Sequence[int]) -> Iterator[bytes | OSError]:
        """The encoded images of ``records`` in order, or the error reading one raised (a source
        may read them in bulk)."""
        ...

    def state(self) -> SourceState | None:
        """What the verification cache keys on (None: not cached)."""
        ...


# How a split's images are read: "memory", held as uint8 ``images`` (n, C, H, W), a batch gathered
# at once (arrays.ArrayDataset); "decoded" from their encoded bytes when read, so an inception crop
# is drawn before decoding (decoded.DecodedImages.inception_crop); "made" when read (synthetic);
# "stream", in the stream's own order, row group by row group (stream.StreamBatches): no index.
ReadAs = Literal["memory", "decoded", "made", "stream"]


class Images(Protocol):
    """A split as a run reads it: ``len()`` images of ``classes`` with ``channels`` channels,
    ``split[i]`` image i (uint8 (C, H, W)) and its label, ``labels`` all of them (int64 (n,)),
    ``skipped`` (name, why) of each image verification dropped; a stream raises a ``DataError``
    for ``split[i]``, ``labels`` and ``in_class_order`` (the same split, classes reordered)."""

    classes: list[str]

    @property
    def read_as(self) -> ReadAs: ...
    @property
    def channels(self) -> int: ...
    @property
    def skipped(self) -> Sequence[tuple[str, str]]: ...
    @property
    def labels(self) -> Tensor: ...
    def __len__(self) -> int: ...
    def __getitem__(self, index: int) -> tuple[Tensor, int]: ...
    def in_class_order(self, order: Sequence[str]) -> Images: ...
