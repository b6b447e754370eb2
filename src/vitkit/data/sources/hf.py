"""Hugging Face datasets: ``hf:PATH`` (a ``save_to_disk`` folder, a folder of parquet files, a
``.parquet`` file or a glob of them) and ``hf:NAME`` (a dataset on the Hub).

Splits: the dataset's ``train``, ``validation`` (or ``valid``, ``val``, ``dev``) and ``test``
are vitkit's train, val and test; others are ignored, and ``train`` is required. A val or test
split whose labels are all -1 (published unlabelled, as the Hub's imagenet-1k test) is left out
with a warning. A single ``Dataset`` (one split, a parquet file or a glob) is ``train`` alone.
Columns: ``data.image_column`` (default ``image``: an ``Image`` feature, as bytes or a path, or
raw encoded bytes) and ``data.label_column`` (default ``label``). Class names: a ``ClassLabel``'s
names; integers are named by their numbers ("0" to the largest label); strings are the names,
in a folder's order (``cells.class_order``). A split with random access is a ``RowSource`` of
``decoded.DecodedImages`` (verified, decoded and replaced as a folder's images, never decoded by
``datasets``), each row keyed by its stored file path; ``data.streaming`` reads parquet row
groups instead (``stream.py``).
"""

from __future__ import annotations

import dataclasses
import functools
import glob
import hashlib
import logging
import os
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...config import DataConfig, ModelConfig, hf_is_local
from ...errors import ConfigError, DataError, MissingExtraError, MissingFileError, VitkitError
from ..bounds import long_class_name
from ..codec import MAX_IMAGE_PIXELS
from ..contract import Images, SourceState
from ..decoded import MAX_BAD_FRACTION, DecodedImages, ReadOptions
from ..listing import Listing, reading_of
from ..verify import Level
from .cells import CellReader, by_number_note, check_labels, class_order

# The dataset's split names that are vitkit's train, val and test.
HF_SPLITS = {
    "train": "train",
    "validation": "val",
    "valid": "val",
    "val": "val",
    "dev": "val",
    "test": "test",
}
_READ_ROWS = 256  # rows read at a time while verifying


# Why ``datasets``: it reads all three forms and the Hub's with one rule for their splits; it
# converts parquet once to memory-mapped Arrow files (``HF_DATASETS_CACHE``), after which row i is
# a lookup, not a scan, so a batch stays a function of (seed, epoch, step); and it runs no code
# from a dataset (since version 4 it refuses loading scripts). Its pyarrow reads the streams.
def require_datasets() -> Any:
    """The ``datasets`` module, or the error that says which extra installs it."""
    try:
        import datasets
    except ImportError:
        raise MissingExtraError("hf: data", "data", "datasets") from None
    return datasets


def _saved(path: Path) -> bool:
    """Whether ``path`` is a ``save_to_disk`` folder (a DatasetDict's, or one Dataset's)."""
    return (path / "dataset_dict.json").is_file() or (path / "state.json").is_file()


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"


@dataclass
class HFSource:
    """What ``hf:PATH`` or ``hf:NAME`` holds: its splits by vitkit's names (``datasets.Dataset``
    each, or for a stream its parquet files), their labels as class indices, the class names,
    whether the dataset named its splits (False: one ``Dataset``, called train), how a cell is
    read, and the pixels an image may have (``data.max_image_pixels``)."""

    spec: str
    tables: dict[str, Any]  # split -> datasets.Dataset, or list of parquet files (streaming)
    classes: list[str]
    named: bool
    image_column: str
    label_column: str
    cells: CellReader  # how an image cell is read
    labels: dict[str, np.ndarray] = field(default_factory=dict)  # split -> int64 (n,)
    label_names: dict[str, int] | None = None  # a string label column: name -> class index
    max_pixels: int = MAX_IMAGE_PIXELS
    shuffle_buffer: int = 1000  # the rows of a stream's training windows (data.shuffle_buffer)

    @property
    def splits(self) -> tuple[str, ...]:
        return tuple(s for s in ("train", "val", "test") if s in self.tables)

    def dataset(
        self,
        split: str,
        *,
        mode: str | None,
        verify: Level = "full",
        max_bad_fraction: float = MAX_BAD_FRACTION,
        verify_workers: int | None = None,
        verify_cache: bool = True,
    ) -> Any:
        """Split ``split`` as a dataset: ``HFImages`` (random access; the options are
        ``ImageFolderDataset``'s), or ``ParquetStream``."""
        if split not in self.tables:
            raise DataError(f"{self.spec} has no {split} split: it has {', '.join(self.splits)}")
        name = f"{self.spec} {split} split"
        if isinstance(self.tables[split], list):
            from .parquet import ParquetStream

            return ParquetStream(
                self.tables[split],
                name=name,
                classes=self.classes,
                image_column=self.image_column,
                label_column=self.label_column,
                label_names=self.label_names,
                cells=self.cells,
                mode=mode or "RGB",  # a stream is not read ahead to decide (stream.py)
                max_bad_fraction=max_bad_fraction,
                max_pixels=self.max_pixels,
                shuffle_buffer=self.shuffle_buffer,
            )
        options = ReadOptions(
            mode,
            verify,
            max_bad_fraction,
            verify_workers,
            verify_cache,
            max_image_bytes=self.cells.max_bytes,  # what the cells read (RowSource's)
            max_image_pixels=self.max_pixels,
        )
        return HFImages(
            self.tables[split],
            self.labels[split],
            name=name,
            classes=self.classes,
            image_column=self.image_column,
            cells=self.cells,
            options=options,
        )


def _load(path: str, datasets: Any) -> Any:
    """``path`` as ``datasets`` reads it: a Dataset or a DatasetDict (see the module docstring)."""
    if not hf_is_local(path):
        return datasets.load_dataset(path)
    local = Path(path).expanduser()
    if local.is_dir() and _saved(local):
        return datasets.load_from_disk(str(local))
    if local.is_dir():
        return datasets.load_dataset(str(local))
    return datasets.load_dataset("parquet", data_files=_files(path), split="train")


@contextmanager
def _quiet() -> Iterator[None]:
    """``datasets``' logger silent for the block: what it logs of a file it cannot read
    ("Failed to read file ...") came before the one line vitkit says of it."""
    logger = logging.getLogger("datasets")  # the library's root logger: all of its modules
    level = logger.level
    logger.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        logger.setLevel(level)


def _damaged_parquet(path: str) -> str | None:
    """The first parquet file of a local ``hf:path`` whose footer pyarrow cannot read, and why:
    ``datasets``' ``DatasetGenerationError`` names no file."""
    import pyarrow.parquet as pq

    if not hf_is_local(path):
        return None
    local = Path(path).expanduser()
    files = sorted(map(str, local.rglob("*.parquet"))) if local.is_dir() else _files(path)
    for file in files:
        try:
            pq.read_metadata(file)
        except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError
            return f"{file} is not a readable parquet file ({_first_line(e)})"
    return None


def _files(pattern: str) -> list[str]:
    """The parquet files of a file or glob, sorted; an error when there are none."""
    found = sorted(glob.glob(os.path.expanduser(pattern)))
    if not found:
        raise MissingFileError(
            f"hf:{pattern} matches no file (expected a save_to_disk folder, a folder of parquet "
            "files, a .parquet file or a glob of them)"
        )
    return found


def _stream_files(path: str, datasets: Any) -> dict[str, list[str]]:
    """The parquet files of every split of ``path`` by the dataset's split names (streaming)."""
    local = Path(path).expanduser()
    if hf_is_local(path) and not local.is_dir():
        return {"train": _files(path)}
    if hf_is_local(path) and _saved(local):
        raise ConfigError(
            f"data.streaming=True but hf:{path} is a save_to_disk folder (Arrow files, read with "
            "random access): expected parquet files, or data.streaming=False"
        )
    builder = datasets.load_dataset_builder(str(local) if hf_is_local(path) else path)
    if builder.name != "parquet":
        raise DataError(
            f"data.streaming=True reads parquet files, and hf:{path} holds {builder.name} data: "
            "expected parquet, or data.streaming=False"
        )
    return {
        str(split): sorted(map(str, files)) for split, files in builder.config.data_files.items()
    }


def _by_vitkit_split(found: Mapping[str, Any], spec: str) -> dict[str, Any]:
    """The dataset's splits under vitkit's names (train, val, test)."""
    out: dict[str, Any] = {}
    names: dict[str, str] = {}
    for name, table in found.items():
        ours = HF_SPLITS.get(str(name).lower())
        if ours is None:
            continue
        if ours in out:
            raise DataError(
                f"{spec} has the splits {names[ours]!r} and {name!r}, both {ours}: expected one"
            )
        out[ours], names[ours] = table, str(name)
    if "train" not in out:
        raise DataError(
            f"{spec} has the splits {sorted(map(str, found))} and no train split: expected "
            "train (and validation or test beside it)"
        )
    return out


def _cell_reader(path: str, cfg: DataConfig) -> CellReader:
    """How ``hf:path``'s image cells are read: a path in one is taken relative to the dataset's
    own folder (``path`` itself, or the folder of its parquet files), which a dataset on the Hub
    does not have."""
    local = Path(path).expanduser()
    root = (local if local.is_dir() else local.parent) if hf_is_local(path) else None
    return CellReader(root, cfg.image_paths == "any", cfg.max_image_bytes)


def open_hf(cfg: DataConfig) -> HFSource:
    """Open ``cfg``'s ``hf:`` dataset: its splits, labels and class names (see the module
    docstring) as ``data.image_column``, ``label_column``, ``streaming``, ``image_paths``,
    ``max_image_bytes`` and ``max_image_pixels`` say; errors of the Hub, of a file and of a
    missing column are one line."""
    path, image_column, label_column = cfg.source.path, cfg.image_column, cfg.label_column
    assert cfg.source.kind == "hf" and path is not None
    datasets = require_datasets()
    spec = f"hf:{path}"
    cells = _cell_reader(path, cfg)
    try:
        with _quiet():
            if cfg.streaming:
                found = _open_stream(path, spec, datasets, image_column, label_column, cells)
                return dataclasses.replace(
                    found, max_pixels=cfg.max_image_pixels, shuffle_buffer=cfg.shuffle_buffer
                )
            loaded = _load(path, datasets)
    except VitkitError:
        raise
    except (OSError, ValueError) as e:  # the Hub's, a file's, datasets' own
        raise DataError(f"{spec} cannot be read: {_first_line(e)}") from None
    except datasets.exceptions.DatasetGenerationError as e:  # a file of a folder or a glob
        why = _damaged_parquet(path) or _first_line(e.__cause__ or e)
        raise DataError(f"{spec} cannot be read: {why}") from None
    named = isinstance(loaded, Mapping)
    tables = _by_vitkit_split(loaded if named else {"train": loaded}, spec)
    for split, table in tables.items():
        _check_columns(spec, split, list(table.column_names), image_column, label_column)
        feature = table.features[image_column]
        if isinstance(feature, datasets.Image):
            tables[split] = table.cast_column(image_column, datasets.Image(decode=False))
        elif getattr(feature, "dtype", None) != "binary":
            raise DataError(
                f"{spec} {split} split: column {image_column!r} holds {feature}: expected images "
                "(an Image feature or encoded bytes; data.image_column names the column)"
            )
    train_feature = tables["train"].features[label_column]
    columns = {
        s: t.data.column(label_column).to_numpy(zero_copy_only=False) for s, t in tables.items()
    }
    for split in _unlabelled(spec, columns):
        del tables[split], columns[split]
    names = getattr(train_feature, "names", None)  # a ClassLabel's
    classes, labels, label_names = _classes(spec, columns, names)
    return HFSource(
        spec=spec,
        tables=tables,
        classes=classes,
        named=named,
        image_column=image_column,
        label_column=label_column,
        labels=labels,
        label_names=label_names,
        cells=cells,
        max_pixels=cfg.max_image_pixels,
    )


def listing(cfg: DataConfig, model: ModelConfig | None, seed: int) -> Listing:
    """``hf:PATH`` or ``hf:NAME``: its splits (one ``Dataset`` is train), with random access or,
    with ``data.streaming``, as streams."""
    hf = open_hf(cfg)

    def read(split: str, channels: int | None, verify: bool) -> Images:
        how = reading_of(cfg, channels, verify)  # the cells' bounds are the source's (open_hf)
        return hf.dataset(
            split, mode=how["mode"], verify=how["verify"], max_bad_fraction=cfg.max_bad_fraction
        )

    found = Listing(hf.spec, hf.splits, read, "{} split".format, hf.named)
    if hf.label_names is not None:  # classes named by a label column of text
        found.notes = [n for n in [by_number_note(hf.classes)] if n]
    if cfg.streaming:  # not read ahead
        found.stated = _stream_notes
    return found


def _stream_notes(train: Images, model: ModelConfig, seed: int, decided: bool) -> list[str]:
    said = f"{train.channels} channels: a stream is read as RGB unless model.in_chans=1"
    return [said] if decided else []


def _open_stream(
    path: str, spec: str, datasets: Any, image_column: str, label_column: str, cells: CellReader
) -> HFSource:
    """A streamed ``hf:path``: each split's parquet files; the labels of every split read (the
    label column alone) only when no ``ClassLabel`` names the classes."""
    import pyarrow.parquet as pq

    from .parquet import open_parquet

    found = _stream_files(path, datasets)
    files = _by_vitkit_split(found, spec)
    schema = pq.ParquetFile(open_parquet(files["train"][0])).schema_arrow
    _check_columns(spec, "train", schema.names, image_column, label_column)
    features = datasets.Features.from_arrow_schema(schema)
    names = getattr(features[label_column], "names", None)
    columns: dict[str, np.ndarray] = {}
    if names is None:  # the classes are what the labels are: read the label column
        for split, paths in files.items():
            parts = [
                pq.read_table(open_parquet(p), columns=[label_column])
                .column(0)
                .to_numpy(zero_copy_only=False)
                for p in paths
            ]
            columns[split] = np.concatenate(parts)
    else:  # a ClassLabel names the classes: only whether val and test hold labels is read
        for split, paths in files.items():
            if split != "train":
                read = [pq.read_table(open_parquet(p), columns=[label_column]) for p in paths]
                columns[split] = np.concatenate(
                    [t.column(0).to_numpy(zero_copy_only=False) for t in read]
                )
    for split in _unlabelled(spec, columns):
        del files[split], columns[split]
    classes, _, label_names = _classes(spec, columns, names)
    return HFSource(
        spec=spec,
        tables=files,
        classes=classes,
        named=not hf_is_local(path) or Path(path).expanduser().is_dir(),
        image_column=image_column,
        label_column=label_column,
        label_names=label_names,
        cells=cells,
    )


def _unlabelled(spec: str, columns: Mapping[str, np.ndarray]) -> list[str]:
    """The val and test splits whose labels are all -1 (a ClassLabel's "no label", e.g. the
    Hub's imagenet-1k test split): left out, with a warning, as if absent."""
    found = [
        split
        for split, labels in columns.items()
        if split != "train" and len(labels) and labels.dtype.kind in "iu" and (labels < 0).all()
    ]
    for split in found:
        warnings.warn(
            f"{spec}: every label of its {split} split is -1 (no labels): that split is left out",
            stacklevel=3,
        )
    return found


def _check_columns(
    spec: str, split: str, columns: Sequence[str], image_column: str, label_column: str
) -> None:
    for column, key in ((image_column, "data.image_column"), (label_column, "data.label_column")):
        if column not in columns:
            raise DataError(
                f"{spec} {split} split has no column {column!r} ({key}): its columns are "
                f"{', '.join(columns)}"
            )


def _classes(
    spec: str, columns: Mapping[str, np.ndarray], names: list[str] | None
) -> tuple[list[str], dict[str, np.ndarray], dict[str, int] | None]:
    """(class names, each split's labels as class indices, the index of each name when the
    labels are names), by the module docstring's rule; ``names``: a ClassLabel's. A name longer
    than ``bounds.MAX_CLASS_NAME`` characters is an error (a checkpoint would record it)."""
    if names is not None:
        _check_names(spec, list(names))
        return list(names), {s: c.astype(np.int64) for s, c in columns.items()}, None
    values = list(columns.values())
    if all(c.dtype.kind in "iu" for c in values):
        for split, c in columns.items():
            check_labels(c, f"{spec}'s {split} split")
        largest = max(int(c.max()) for c in values if len(c))
        return (
            [str(k) for k in range(largest + 1)],
            {s: c.astype(np.int64) for s, c in columns.items()},
            None,
        )
    if all(c.dtype.kind in "OUS" for c in values):
        classes = class_order({str(v) for c in values for v in c.tolist()})
        _check_names(spec, classes)
        index = {name: k for k, name in enumerate(classes)}
        labels = {
            s: np.array([index[str(v)] for v in c.tolist()], dtype=np.int64)
            for s, c in columns.items()
        }
        return classes, labels, index
    kinds = sorted({str(c.dtype) for c in values})
    raise DataError(
        f"{spec}: the label column holds {', '.join(kinds)}: expected a ClassLabel, integers "
        "from 0 or class names (data.label_column names the column)"
    )


def _check_names(spec: str, classes: list[str]) -> None:
    problem = long_class_name(classes)
    if problem is not None:
        raise DataError(f"{spec}: {problem}")


class RowSource:
    """The rows of one split of a Hugging Face dataset: ``table`` (a ``datasets.Dataset``, its
    image column not decoded by ``datasets``) and the class index of every row."""

    def __init__(
        self,
        table: Any,
        labels: np.ndarray,
        *,
        where: str,
        classes: list[str],
        image_column: str,
        cells: CellReader,
    ) -> None:
        self.where = where
        self.classes = classes
        self.labels = labels
        self._column = image_column
        self._cells = cells
        self._table = table.select_columns([image_column])
        # One row's cell straight from the Arrow column costs 3 us, through datasets' row
        # formatting 12-15 (benchmarks/RESULTS.md): the column is read directly where
        # the table maps rows to itself (no select or shuffle's indices, which open_hf never
        # makes; a table that has them is read through datasets)
        direct = getattr(table, "_indices", None) is None
        self._arrow = self._table.data.column(image_column) if direct else None

    def name(self, record: int) -> str:
        return f"{self.where} row {record}"

    def key(self, record: int) -> str | None:
        return self._paths[record]

    @functools.cached_property
    def _paths(self) -> list[str | None]:
        """Every row's stored file path, an ``Image`` feature's ``path`` (None where a row
        stores none, and for a column of bytes alone), read from that field alone."""
        field = f"{self._column}.path"
        flat = self._table.flatten()  # struct<bytes, path> -> two columns, no image read
        if field not in flat.column_names:
            return [None] * len(self.labels)
        return flat.select_columns([field]).with_format("arrow")[:].column(0).to_pylist()

    def read(self, record: int) -> bytes:
        if self._arrow is not None:
            cell = self._arrow[record].as_py()  # {"bytes", "path"} of an Image, or bytes
        else:
            cell = self._table[record][self._column]
        return self._cells(cell, self.name(record))

    def read_all(self, records: Sequence[int]) -> Iterator[bytes | OSError]:
        for start in range(0, len(records), _READ_ROWS):
            chunk = list(records[start : start + _READ_ROWS])
            cells = self._table[chunk][self._column]
            for record, cell in zip(chunk, cells, strict=True):
                try:
                    yield self._cells(cell, self.name(record))
                except OSError as e:  # a path that cannot be read: an unreadable image
                    yield e

    def state(self) -> SourceState | None:
        """Keyed by the table's fingerprint, its Arrow files' sizes and modification times and
        what a cell may read (``CellReader``'s settings); None for a table held in memory
        (nothing on disk says its state). Images stored as paths to files are keyed by the rows
        that name them, not by those files."""
        files = [str(f["filename"]) for f in self._table.cache_files]
        if not files:
            return None
        cells = self._cells  # what a cell may read decides what is readable
        h = hashlib.sha256(
            f"{self._table._fingerprint}\0{cells.root}\0{cells.any_path}\0{cells.max_bytes}".encode()
        )
        for file in files:
            st = os.stat(file)
            h.update(f"\0{file}\0{st.st_size}\0{st.st_mtime_ns}".encode())
        identity = "\n".join([self.where, *files])
        return SourceState(identity, self.where.replace("hf:", "hf-"), h.hexdigest())


class HFImages(DecodedImages):
    """One split of a Hugging Face dataset, by index: items (uint8 (C, H, W), label).

    ``table`` is the ``datasets.Dataset`` (its image column not decoded by ``datasets``);
    ``labels`` the class index of every row. ``options`` are ``ImageFolderDataset``'s: the
    container is the same (``decoded.DecodedImages``), verification parallel and cached alike."""

    source: RowSource

    def __init__(
        self,
        table: Any,
        labels: np.ndarray,
        *,
        name: str,
        classes: list[str],
        image_column: str,
        cells: CellReader,
        options: ReadOptions,
    ) -> None:
        source = RowSource(
            table, labels, where=name, classes=classes, image_column=image_column, cells=cells
        )
        super().__init__(source, options)
