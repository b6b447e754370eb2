r"""What a sample of a dataset holds, read from untrusted files: the encoded image in a cell of a
table (a Hugging Face ``Image`` feature's ``{"bytes", "path"}`` or raw bytes, read by the ``hf:``
datasets, hf.py, and their parquet streams, stream.py, alike) and a label.

Labels are class indices as the data gives them, never renumbered (an ImageNet subset keeps its
indices), so the number of classes follows from the largest: one label is enough to size a list
of class names. A label at or above ``MAX_LABEL`` is refused (in one line naming where it is)
before anything is sized by it: a ``.cls`` of 999999999999 in a 10 KB shard would otherwise
make a list of 10^12 names. A label written as text is ASCII digits only (``\d`` would take
Arabic-Indic digits, which ``int`` reads as the same number)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ..errors import DataError

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


def check_labels(labels: np.ndarray, where: str) -> None:
    """Integer class indices all below ``MAX_LABEL``, or a ``DataError`` naming ``where`` and the
    largest (negative ones are the caller's: -1 is a Hugging Face "no label")."""
    if len(labels) and int(labels.max()) >= MAX_LABEL:
        raise DataError(
            f"{where} holds the label {int(labels.max())}: expected class indices below "
            f"{MAX_LABEL:,}"
        )


def image_bytes(value: Any, where: str) -> bytes:
    """The encoded image in a cell of an image column: an ``Image`` feature's ``{"bytes",
    "path"}`` (the file read when only the path is stored) or the bytes themselves. Raises
    ``OSError`` for a path that cannot be read (an unreadable image) and ``DataError`` for a
    cell that holds no image at all."""
    if isinstance(value, dict):
        if value.get("bytes"):
            return bytes(value["bytes"])
        if value.get("path"):
            with open(value["path"], "rb") as f:
                return f.read()
    elif isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    raise DataError(
        f"{where} holds {type(value).__name__} {str(value)[:40]!r}: expected an image (an Image "
        "feature or encoded bytes; data.image_column names the column)"
    )
