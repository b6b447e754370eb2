"""The JSON record of a sweep, or of one run: read back only when it is of the protocol's
``Shape`` (``mismatch`` says where it is not), written whole and atomically (``Record``,
``write_json``), so a kill at any point leaves the last one.
"""

from __future__ import annotations

import json
import reprlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

from ..errors import UserFileError
from ..files import atomic_write


@dataclass(frozen=True)
class Entries:
    """A JSON object of any keys, each value of ``shape``."""

    shape: Shape


# What a record must hold: a type (float: any number; int: a whole number; neither takes true or
# false), a tuple (one of its shapes), a list of one shape (a list of such values), a dict (an
# object with these keys, each of its shape; a key ending in '?' may be missing; other keys may
# be there), or ``Entries``. Only what a protocol reads back is required, so that a record
# written by an earlier version still resumes.
Shape: TypeAlias = type | tuple["Shape", ...] | list["Shape"] | dict[str, "Shape"] | Entries
NULL = type(None)
_KINDS = {
    dict: "an object",
    list: "a list",
    str: "text",
    bool: "true or false",
    int: "a whole number",
    float: "a number",
    NULL: "null",
}
# What deleting a record does, as its error says: a run not recorded is run again, and a
# finished one is only evaluated again (train/loop.py).
RERUN = "delete it to re-run its runs (a finished run is only evaluated again)"


def mismatch(value: Any, shape: Shape, where: str = "") -> str | None:
    """Where the JSON ``value`` is not of ``shape`` and what is expected there (for a tuple,
    what its last shape expects), or None."""
    if isinstance(shape, tuple):
        found = [mismatch(value, option, where) for option in shape]
        return None if None in found else found[-1]
    at = f"at {where}: " if where else ""
    kind = _KINDS.get(type(value), type(value).__name__)
    if isinstance(shape, Entries | dict) and not isinstance(value, dict):
        return f"{at}expected an object, found {kind}"
    if isinstance(shape, Entries):
        entries = ((f"{where}[{reprlib.repr(k)}]", v, shape.shape) for k, v in value.items())
    elif isinstance(shape, dict):
        for key in shape:
            if not key.endswith("?") and key not in value:
                return f"{at}no {key!r}"
        entries = (
            (f"{where}[{name!r}]", value[name], inner)
            for key, inner in shape.items()
            if (name := key.removesuffix("?")) in value
        )
    elif isinstance(shape, list):
        if not isinstance(value, list):
            return f"{at}expected a list, found {kind}"
        entries = ((f"{where}[{i}]", v, shape[0]) for i, v in enumerate(value))
    else:
        numbers = (int, float) if shape is float else shape
        if isinstance(value, numbers) and not (isinstance(value, bool) and shape is not bool):
            return None
        return f"{at}expected {_KINDS.get(shape, shape.__name__)}, found {kind}"
    return next((m for w, v, s in entries if (m := mismatch(v, s, w)) is not None), None)


class Record:
    """The JSON record of a sweep (or of one run) at ``path``: an object of ``shape``, read if
    the file exists (else empty), written whole and atomically by ``save``. A file that is not
    JSON or not of ``shape`` is a ``UserFileError`` naming it and the way out, ``fix``."""

    def __init__(self, path: Path, shape: Shape, fix: str = RERUN) -> None:
        self.path = path
        self.data: dict[str, Any] = {}
        if not (path.exists() or path.is_symlink()):
            return
        wrong: str | None
        try:
            if not path.is_file():
                raise ValueError("not a file")
            data = json.loads(path.read_text())
        except RecursionError:  # nested deeper than the parser goes
            data, wrong = None, "nested too deeply"
        except ValueError as e:  # not JSON, or not UTF-8
            data, wrong = None, str(e)
        else:
            wrong = mismatch(data, shape)
        if wrong is not None:
            raise UserFileError(f"{path} is not a record vitkit wrote ({wrong}): {fix}")
        self.data = data

    def save(self) -> None:
        write_json(self.path, self.data)


def write_json(path: Path, data: Any) -> None:
    """``data`` as the JSON file ``path``, written whole and atomically."""
    text = json.dumps(data, indent=2) + "\n"
    atomic_write(path, lambda p: p.write_text(text))
