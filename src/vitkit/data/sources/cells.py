r"""What a sample of a dataset holds, read from untrusted files: the encoded image in a cell of a
table (a Hugging Face ``Image`` feature's ``{"bytes", "path"}`` or raw bytes, read by the ``hf:``
datasets, hf.py, and their parquet streams, stream.py, alike: ``CellReader``, within the bounds of
data/bounds.py), and a label.

Labels are class indices as the data gives them, never renumbered (an ImageNet subset keeps its
indices), so the number of classes follows from the largest: one label is enough to size a list
of class names. A label at or above ``MAX_LABEL`` is refused (in one line naming where it is)
before anything is sized by it: a ``.cls`` of 999999999999 in a 10 KB shard would otherwise
make a list of 10^12 names. A label written as text is ASCII digits only (``\d`` would take
Arabic-Indic digits, which ``int`` reads as the same number).

Class names found as text (a folder's class folders, a label column of names) are put in label
order by ``class_order``: by name, or by number when every name is a number (their length is
bounded by ``bounds.long_class_name``)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import DataError
from ...files import TooLargeError
from ..bounds import (
    MAX_IMAGE_BYTES,
    path_problem,
    read_image_file,
    resolves_inside,
    shown,
    too_large,
)

# Labels are class indices below this: ImageNet-21k's 21,843 classes fit 48 times over.
MAX_LABEL = 2**20
_DIGITS = re.compile(r"[0-9]+")


def label_from_text(text: str, where: str) -> int:
    """The class index ``text`` (a ``.cls`` member's) writes: ASCII digits, below
    ``MAX_LABEL``; a ``DataError`` naming ``where`` otherwise."""
    if not _DIGITS.fullmatch(text):
        raise DataError(f"{where} holds {text[:40]!r}: expected the label, an integer >= 0 as text")
    if int(text) >= MAX_LABEL:
        raise DataError(
            f"{where} holds the label {text[:40]}: expected a class index below {MAX_LABEL:,}"
        )
    return int(text)


def class_order(names: Iterable[str]) -> list[str]:
    """Class names in label order: by number when every name is ASCII digits (ImageNet-v2's
    class folders ``0`` .. ``999`` are the ImageNet classes by index, and by name ``10`` would
    come before ``2``), else by name."""
    ordered = sorted(names)
    if ordered and all(_DIGITS.fullmatch(name) for name in ordered):
        return sorted(ordered, key=lambda name: (int(name), name))  # "01" beside "1": both kept
    return ordered


def by_number_note(classes: list[str]) -> str | None:
    """What a run or an evaluation says of ``classes`` (``class_order``'s) when they are in
    order by number and by name they would not be; None otherwise."""
    if classes == sorted(classes) or not all(_DIGITS.fullmatch(name) for name in classes):
        return None
    shown = ", ".join(classes[:3])
    return (
        f"classes: every class name is a number, so label k is the k-th by number ({shown}, "
        f"..., {classes[-1]}), not by name ({', '.join(sorted(classes)[:3])}, ...)"
    )


def check_labels(labels: np.ndarray, where: str) -> None:
    """Integer class indices all below ``MAX_LABEL``, or a ``DataError`` naming ``where`` and the
    largest (negative ones are the caller's: -1 is a Hugging Face "no label")."""
    if len(labels) and int(labels.max()) >= MAX_LABEL:
        raise DataError(
            f"{where} holds the label {int(labels.max())}: expected class indices below "
            f"{MAX_LABEL:,}"
        )


@dataclass(frozen=True)
class CellReader:
    """How the encoded image in a table's cell is read: bytes as they are; a path (an ``Image``
    feature's ``{"bytes": None, "path": ...}``) from a file under ``root``, the dataset's own
    folder, by a relative path without '..' (or any path when ``any_path``:
    ``data.image_paths=any``), a regular file only (never a device, a FIFO or a directory:
    ``/dev/zero`` would fill the memory); at most ``max_bytes`` either way
    (``data.max_image_bytes``). A dataset is data: it must not make vitkit read the machine's
    files. A refused or unreadable cell is an ``OSError`` (the image is unreadable, skipped and
    named as any other), a cell that holds no image at all a ``DataError``."""

    root: Path | None  # None: a dataset with no folder of its own (the Hub's)
    any_path: bool = False
    max_bytes: int = MAX_IMAGE_BYTES

    def __call__(self, value: Any, where: str) -> bytes:
        if isinstance(value, dict) and value.get("bytes"):
            value = value["bytes"]
        if isinstance(value, bytes | bytearray | memoryview):
            if len(value) > self.max_bytes:
                raise OSError(f"{len(value):,} bytes, {too_large(self.max_bytes)}")
            return bytes(value)
        if isinstance(value, dict) and isinstance(value.get("path"), str) and value["path"]:
            return self._read(value["path"])
        raise DataError(
            f"{where} holds {type(value).__name__} {str(value)[:40]!r}: expected an image (an "
            "Image feature or encoded bytes; data.image_column names the column)"
        )

    def _read(self, stored: str) -> bytes:
        """The file a cell names (relative paths from ``root``); ``OSError`` when it is refused
        or unreadable, which makes the image unreadable (named by the caller)."""
        problem = path_problem(stored)
        if problem is not None:
            raise OSError(f"the cell stores {problem}: {shown(stored)}")
        path = Path(stored)
        if not path.is_absolute() and self.root is not None:
            path = self.root / path
        if not self.any_path and (self.root is None or not resolves_inside(stored, self.root)):
            raise OSError(
                f"the cell stores the path {shown(stored)}, not inside the dataset's folder "
                f"({self.root or 'it has none'}): read it only with data.image_paths=any"
            )
        try:  # unreadable, as a missing file is
            return read_image_file(path, self.max_bytes)
        except TooLargeError as e:
            raise OSError(f"the cell's file {shown(stored)} is {e}") from None
