"""A split as parquet files, read row group by row group: the source side of ``data.streaming``
(``ParquetStream``: the footers' row counts, the class names, one row group's rows at a time);
stream.py batches it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from torch import Tensor

from ...errors import DataError
from ..codec import MAX_IMAGE_PIXELS
from ..contract import ReadAs
from ..decoded import MAX_BAD_FRACTION
from ..transforms import channels_of, check_mode
from .cells import CellReader


def open_parquet(path: str) -> Any:
    """What ``pyarrow.parquet.ParquetFile`` reads: a local path as it is, a URL (``hf://...``,
    as the Hub's files are listed) through fsspec."""
    if "://" not in path:
        return path
    import fsspec

    return fsspec.open(path, "rb").open()


@dataclass(frozen=True)
class Row:
    """One row of a stream: its image cell, class index, and name for messages."""

    image: Any  # an Image feature's {"bytes", "path"}, or bytes
    label: int
    name: str


class ParquetStream:
    """One split as parquet files read in row groups (see the module docstring).

    ``len()`` is the number of rows (from the footers); ``classes`` the class names;
    ``label_names`` maps a string label to its class (None: the labels are class indices).
    ``shuffle_buffer`` is the size of the training windows. Few-shot evaluation, holdouts and
    class-balanced subsets need random access: ``labels`` and ``split[i]`` say it has none.
    """

    read_as: ReadAs = "stream"

    def __init__(
        self,
        files: Sequence[str],
        *,
        name: str,
        classes: list[str],
        image_column: str,
        label_column: str,
        label_names: dict[str, int] | None,
        cells: CellReader,
        mode: str,
        max_bad_fraction: float = MAX_BAD_FRACTION,
        shuffle_buffer: int = 1000,
        max_pixels: int = MAX_IMAGE_PIXELS,
    ) -> None:
        import pyarrow.parquet as pq

        check_mode(mode)
        self.files = list(files)
        self.name = name
        self.classes = classes
        self.mode = mode
        self.channels = channels_of(mode)
        self.image_column = image_column
        self.label_column = label_column
        self.label_names = label_names
        self.cells = cells
        self.max_pixels = max_pixels
        self.max_bad_fraction = max_bad_fraction
        self.shuffle_buffer = shuffle_buffer
        self.skipped: list[tuple[str, str]] = []  # nothing is verified ahead
        self._open: tuple[int, Any] | None = None  # the file last read: (its number, its reader)
        groups, sizes = [], []
        for f, path in enumerate(self.files):
            source = open_parquet(path)
            meta = pq.ParquetFile(source).metadata  # the footer only
            if not isinstance(source, str):
                source.close()
            for g in range(meta.num_row_groups):
                groups.append((f, g))
                sizes.append(meta.row_group(g).num_rows)
        self.groups = groups  # (file, row group) of every row group, in file order
        self.group_rows = np.array(sizes, dtype=np.int64)  # (G,)
        if int(self.group_rows.sum()) == 0:
            raise DataError(f"{name} holds no rows")

    def __len__(self) -> int:
        return int(self.group_rows.sum())

    @property
    def labels(self) -> Tensor:
        raise self._no_random_access()

    def __getitem__(self, index: int) -> tuple[Tensor, int]:
        raise self._no_random_access()

    def _no_random_access(self) -> DataError:
        return DataError(
            f"{self.name} is streamed (data.streaming=True): it has no labels to choose images "
            "by (few-shot, inspect, a holdout, data.per_class); read it with random access "
            "(data.streaming=False, or --data hf:PATH)"
        )

    def in_class_order(self, order: Sequence[str]) -> ParquetStream:
        raise DataError(
            f"{self.name} is streamed, and its classes cannot be put in the order "
            f"{list(order)[:3]}...: expected data.streaming=False"
        )

    def read_group(self, group: int) -> list[Row]:
        """The rows of row group ``group`` (an index into ``groups``), in file order."""
        import pyarrow.parquet as pq

        f, g = self.groups[group]
        path = self.files[f]
        if self._open is None or self._open[0] != f:  # evaluation reads a file group by group
            self._open = f, pq.ParquetFile(open_parquet(path))
        # One thread: pyarrow's pool cost 58 us of CPU a row (42 KB JPEGs, 2 cores) against 4 on
        # the calling thread, taken from the workers that decode (benchmarks/RESULTS.md)
        table = self._open[1].read_row_group(
            g, columns=[self.image_column, self.label_column], use_threads=False
        )
        images = table.column(self.image_column).to_pylist()
        labels = table.column(self.label_column).to_pylist()
        first = int(self.group_rows[self.groups.index((f, 0)) : group].sum())  # its row in the file
        rows = []
        for i, (image, label) in enumerate(zip(images, labels, strict=True)):
            where = f"{path} row {first + i}"
            rows.append(Row(image, self._class_of(label, where), where))
        return rows

    def _class_of(self, label: Any, where: str) -> int:
        k = self.label_names.get(str(label)) if self.label_names is not None else label
        if not isinstance(k, int) or not 0 <= k < len(self.classes):
            raise DataError(
                f"{where}: label {label!r} is not one of the {len(self.classes)} classes of "
                f"{self.name}"
            )
        return k
