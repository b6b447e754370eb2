"""The bounds on what untrusted data may make vitkit read or show, set once for every reader (a
folder's, a VTAB list's, a shard's, a table cell's, ``predict``'s) and for checkpoints.

Every image file is read through ``read_image_file``: a regular file of at most
``data.max_image_bytes``. A path that data names (a cell's, a list's line) is text of at most
``MAX_PATH`` characters without NUL (``path_problem``), and by default must resolve inside the
data's own folder, links followed (``resolves_inside``: ``data.image_paths=dataset``). A class
name is at most ``MAX_CLASS_NAME`` characters (``long_class_name``), in data and in checkpoints
alike. A text file data comes with (a list, a file of class names) is UTF-8 of at most
``MAX_TEXT_BYTES`` (``text_lines``). Messages show such text through ``shown``: escaped and cut, so a 10^7-character path is not
a 20 MB line; a terminal or a figure through ``printable``."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from ..config import DataConfig
from ..config.keys import default_of
from ..errors import DataError
from ..files import TooLargeError, read_regular

# The longest path data may name, in characters: Linux's PATH_MAX (4,096 bytes).
MAX_PATH = 4096
# The longest class name: ImageNet-21k's longest is 175 characters.
MAX_CLASS_NAME = 1000
# data.max_image_bytes's default: the bound of a reader without a run's config (predict, inspect)
MAX_IMAGE_BYTES: int = default_of(DataConfig, "max_image_bytes")
_SHOWN = 200  # characters of a path or a name a message shows
# The largest text file data comes with: VTAB-1k's longest lists hold tens of thousands of
# lines, a few MB; ImageNet-21k's 21,843 class names, half a MB
MAX_TEXT_BYTES = 64 * 2**20


def text_lines(path: Path, expected: str) -> list[str]:
    """The lines of the text file ``path``: UTF-8, a byte-order mark skipped; a ``DataError``
    naming the line of the first bytes that are not UTF-8, or the file's size when it is larger
    than ``MAX_TEXT_BYTES``, each saying the file was ``expected`` to hold."""
    try:
        data = read_regular(path, MAX_TEXT_BYTES)
    except TooLargeError:
        raise DataError(
            f"{path} holds more than {MAX_TEXT_BYTES:,} bytes: expected {expected}"
        ) from None
    try:
        return data.decode("utf-8-sig").splitlines()
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise DataError(
            f"{path}:{line}: the byte {data[e.start]:#04x} is not UTF-8: expected {expected} "
            "as UTF-8 text"
        ) from None


def shown(text: str, limit: int = _SHOWN) -> str:
    """``text`` as a message shows it: quoted with its non-printable characters escaped (a
    newline, an escape sequence, U+202E), its middle cut beyond ``limit`` characters."""
    if len(text) > limit:
        half = limit // 2
        return f"{text[:half]!r}...({len(text) - 2 * half:,} characters)...{text[-half:]!r}"
    return repr(text)


def printable(text: str) -> str:
    """``text`` (a name from a file) as a terminal or a figure may show it: its non-printable
    characters escaped as Python writes them (a newline as ``\\n``, an escape sequence's
    ``\\x1b``, U+202E, which turns the rest of a line around, as ``\\u202e``)."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def read_image_file(path: str | os.PathLike, max_bytes: int) -> bytes:
    """The encoded image in the file ``path``: a regular file of at most ``max_bytes``
    (``data.max_image_bytes``), else an ``OSError`` saying which (``TooLargeError`` for a larger
    one; the image is unreadable, skipped and named by its reader). Only ``max_bytes + 1`` bytes
    of a larger file are read."""
    try:
        return read_regular(path, max_bytes)
    except TooLargeError:
        raise TooLargeError(too_large(max_bytes)) from None


def too_large(max_bytes: int) -> str:
    """Why an image of more than ``max_bytes`` is unreadable."""
    return f"larger than data.max_image_bytes={max_bytes:,} allows"


def path_problem(stored: str) -> str | None:
    """What makes text unfit to be a path that data names: a NUL character, or more than
    ``MAX_PATH`` characters (None: nothing)."""
    if "\0" in stored:
        return "a NUL character in a path"
    if len(stored) > MAX_PATH:
        return f"a path of {len(stored):,} characters, more than {MAX_PATH:,}"
    return None


def resolves_inside(stored: str, root: Path, also: Sequence[Path] = ()) -> bool:
    """Whether ``stored``, a relative path without '..', names a file below ``root`` that
    resolves, links followed, inside ``root`` or one of ``also``: where data may make vitkit read
    (``data.image_paths=dataset``), so that a dataset cannot name the machine's own files."""
    path = Path(stored)
    if path.is_absolute() or ".." in path.parts:
        return False
    target = (root / path).resolve()
    return any(target.is_relative_to(folder.resolve()) for folder in (root, *also))


def long_class_name(names: Sequence[str]) -> str | None:
    """What is wrong when one of ``names`` is longer than ``MAX_CLASS_NAME`` characters (None:
    none is)."""
    for k, name in enumerate(names):
        if len(name) > MAX_CLASS_NAME:
            return (
                f"class {k}'s name has {len(name):,} characters ({shown(name, 40)}): expected at "
                f"most {MAX_CLASS_NAME:,}"
            )
    return None
