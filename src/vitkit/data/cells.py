"""The encoded image in a cell of a table: a Hugging Face ``Image`` feature's ``{"bytes",
"path"}`` or raw bytes, read by the ``hf:`` datasets (hf.py) and their parquet streams
(stream.py) alike."""

from __future__ import annotations

from typing import Any

from ..errors import DataError


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
