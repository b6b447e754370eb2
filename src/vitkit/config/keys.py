"""Typed keys: one declaration per setting (``key(default, doc=..., ge=...)`` on a field of a
frozen, keyword-only ``Section`` dataclass) gives its type, bounds, default and documentation,
and everything else is derived from it: ``check`` validates a value (every ``Section`` runs it in
``__post_init__``, so recipes and the Python API are checked like the command line), ``parse``
(overrides.py) reads the text of ``--set key=value`` by the field's type (true/false/yes/no/on/off/1/0, ``none``,
``(5, 10)`` or ``5,10``, the closest spelling of a Literal's value), ``describe`` writes what is
allowed for errors and ``vitkit config``, ``default_of`` gives a declared default to code that
takes the value outside a config. Checks between fields stay in each class's ``__post_init__``.

Not pydantic or tyro: the configs are plain frozen dataclasses that the model, recipes and
checkpoints already use, errors must be one line in vitkit's words, and the command line must
check a setting before torch is imported. No torch import here.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

from ..errors import ConfigError

NONE_WORDS = ("none", "null")


TRUE_WORDS = ("true", "yes", "on", "1")


FALSE_WORDS = ("false", "no", "off", "0")


@dataclass(frozen=True)
class Key:
    """A setting's documentation and numeric bounds (applied to every number of a tuple too).

    ``new_le`` is an upper bound for a new run only (``check_new``): a run directory whose
    config.json records a larger value, written before the bound existed, keeps it. ``earlier``:
    values only the files of an earlier vitkit hold (vitkit.compat), valid but neither described
    nor read from ``--set``."""

    doc: str
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    new_le: float | None = None
    earlier: tuple[str, ...] = ()

    def admits(self, number: float) -> bool:
        return not (
            (self.ge is not None and number < self.ge)
            or (self.gt is not None and number <= self.gt)
            or (self.le is not None and number > self.le)
            or (self.lt is not None and number >= self.lt)
        )

    def bounds(self) -> str:
        """' >= 1', ' in [0, 1)', ... : the bounds as a suffix of a description."""
        low = ("[", self.ge) if self.ge is not None else ("(", self.gt)
        high = ("]", self.le) if self.le is not None else (")", self.lt)
        if high[1] is None:
            high = ("]", self.new_le)
        if low[1] is not None and high[1] is not None:
            return f" in {low[0]}{_num(low[1])}, {_num(high[1])}{high[0]}"
        if low[1] is not None:
            return f" {'>=' if low[0] == '[' else '>'} {_num(low[1])}"
        if high[1] is not None:
            return f" {'<=' if high[0] == ']' else '<'} {_num(high[1])}"
        return ""


def _num(x: float) -> str:
    return str(x) if isinstance(x, int) else f"{x:g}"  # an integer bound exactly (2**63 - 1)


@dataclass(frozen=True)
class Kind:
    """A string with a syntax of its own (a duration, a data source): ``Annotated[str, Kind]``.
    ``why_not`` says what is wrong with a string (None: it is one); ``expected`` describes
    them; ``why_not_new`` what a new run may not hold of a valid one (as ``Key.new_le``);
    ``entered`` a valid string given by ``--set`` as a run records it (None: as given)."""

    name: str
    why_not: Callable[[str], str | None]
    expected: str
    why_not_new: Callable[[str], str | None] | None = None
    entered: Callable[[str], str] | None = None


def refusal(parse: Callable[[str], object]) -> Callable[[str], str | None]:
    """A ``Kind.why_not`` from a parser of the syntax: what its ``ConfigError`` says of a string
    (None: it parses)."""

    def why_not(text: str) -> str | None:
        try:
            parse(text)
        except ConfigError as e:
            return str(e)
        return None

    return why_not


def key(
    default: Any = dataclasses.MISSING,
    *,
    doc: str,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
    lt: float | None = None,
    new_le: float | None = None,
    earlier: tuple[str, ...] = (),
) -> Any:
    """A config field: its default (none: the key is required), one line of documentation, and
    numeric bounds (``new_le``: for new runs; ``earlier``: old runs' values; ``Key``). Typed
    ``Any`` so that ``x: int = key(...)`` passes the type checker."""
    spec = Key(doc, ge, gt, le, lt, new_le, earlier)
    return dataclasses.field(default=default, metadata={"key": spec})


def default_of(section: type, name: str) -> Any:
    """The default a section declares for its key ``name`` (``key(default, ...)``): the one
    place a default is written, for code that takes the value outside a config."""
    field = {f.name: f for f in dataclasses.fields(section)}[name]
    if field.default is dataclasses.MISSING:
        raise KeyError(f"{section.__name__}.{name} has no default")
    return field.default


class Section:
    """Base of the config dataclasses: validates every field from its annotation on creation.

    ``SECTION`` prefixes the names in error messages (``train.batch_size``); ``RENAMED`` maps a
    key's old name to a function folding its old value into the current keys of a dict, so the
    files an earlier vitkit wrote keep loading (vitkit.compat; :func:`from_dict`)."""

    SECTION: ClassVar[str] = ""
    RENAMED: ClassVar[Mapping[str, Callable[[dict[str, Any], Any], None]]] = {}

    def __post_init__(self) -> None:
        for f in fields_of(type(self)):
            value = check(
                hints(type(self))[f.name],
                getattr(self, f.name),
                name=qualified(self, f.name),
                spec=spec_of(f),
            )
            object.__setattr__(self, f.name, value)  # frozen: normalised (lists become tuples)

    def why_not_new(self) -> tuple[str, str] | None:
        """A bound across this section's fields that a new run keeps (one field's alone is
        ``Key.new_le``), checked by ``check_new``: the field it names and why its value may not
        be; None where it may."""
        return None

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)


def qualified(section: Any, name: str) -> str:
    prefix = getattr(section, "SECTION", "")
    return f"{prefix}.{name}" if prefix else name


def spec_of(f: dataclasses.Field) -> Key | None:
    return f.metadata.get("key")


_HINTS: dict[type, dict[str, Any]] = {}


def hints(cls: type) -> dict[str, Any]:
    """The resolved annotations of a config class, ``Annotated`` metadata kept (cached)."""
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls, include_extras=True)
    return _HINTS[cls]


def fields_of(cls: type) -> list[dataclasses.Field]:
    return list(dataclasses.fields(cls))


def union_members(hint: Any) -> tuple[Any, ...]:
    """The members of a union (``X | Y``, ``Optional[X]``), or the hint alone."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return typing.get_args(hint)
    return (hint,)


def split_annotated(hint: Any) -> tuple[Any, list[Any]]:
    if typing.get_origin(hint) is Annotated:
        base, *extras = typing.get_args(hint)
        return base, extras
    return hint, []


class WrongTypeError(Exception):
    """A value does not fit one member of a union (the caller tries the next)."""


def check_one(hint: Any, value: Any, spec: Key | None) -> Any:
    base, extras = split_annotated(hint)
    if base is type(None):
        if value is not None:
            raise WrongTypeError
        return None
    origin = typing.get_origin(base)
    if origin is Literal:
        if not isinstance(value, str | int) or isinstance(value, bool):
            raise WrongTypeError
        if value not in typing.get_args(base):
            raise WrongTypeError
        return value
    if origin is tuple:
        if not isinstance(value, tuple | list):
            raise WrongTypeError
        args = typing.get_args(base)
        if len(args) == 2 and args[1] is Ellipsis:
            items = [check_one(args[0], v, spec) for v in value]
        else:
            if len(value) != len(args):
                raise WrongTypeError
            items = [check_one(a, v, spec) for a, v in zip(args, value, strict=True)]
        return tuple(items)
    if base is bool:
        if not isinstance(value, bool):
            raise WrongTypeError
        return value
    if base is int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise WrongTypeError
    elif base is float:
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise WrongTypeError
        if not math.isfinite(value):
            raise WrongTypeError
    elif base is str:
        if not isinstance(value, str):
            raise WrongTypeError
        for kind in extras:
            if isinstance(kind, Kind) and kind.why_not(value) is not None:
                raise WrongTypeError
        return value
    elif dataclasses.is_dataclass(base):
        if not isinstance(value, base):  # type: ignore[arg-type]  # base is a class here
            raise WrongTypeError
        return value
    else:
        raise TypeError(f"config fields of type {base!r} are not supported")
    if spec is not None and not spec.admits(value):
        raise WrongTypeError
    return value


def check(hint: Any, value: Any, *, name: str, spec: Key | None) -> Any:
    """``value`` if it is a valid value of a field typed ``hint`` (lists become tuples), else a
    ``ConfigError`` naming the key, the value and what is allowed."""
    if spec is not None and value in spec.earlier:
        return value
    for member in union_members(hint):
        try:
            return check_one(member, value, spec)
        except WrongTypeError:
            continue
    raise ConfigError(f"{name}={shown(repr(value))} is not valid: {wanted(hint, spec, value)}")


def require_count(name: str, value: Any) -> None:
    """A ``ConfigError`` naming the Python argument ``name`` unless ``value`` is a positive
    ``int`` (a bool, a float, a string or 0 failed deep inside, or was taken)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name}={value!r}: expected a positive whole number")


def shown(text: str, most: int = 200) -> str:
    """``text`` as a message shows it: whole up to ``most`` characters (a path), else its start
    and its length (a value of thousands of digits is one short line)."""
    if len(text) <= most:
        return text
    return f"{text[:100]}... ({len(text):,} characters)"


def wanted(hint: Any, spec: Key | None, value: Any) -> str:
    """What a field wanted: a string kind's own reason when it has one, else what it admits."""
    for member in union_members(hint):
        _, extras = split_annotated(member)
        for kind in extras:
            if isinstance(kind, Kind) and isinstance(value, str) and kind.why_not(value):
                return str(kind.why_not(value))
    return f"expected {describe(hint, spec)}"


def describe(hint: Any, spec: Key | None = None) -> str:
    """What a field admits, in words: 'an integer >= 1', "'adam', 'sgd' or 'muon'", ..."""
    parts = [_describe_one(m, spec) for m in union_members(hint)]
    none = "none" in parts
    parts = [p for p in parts if p != "none"]
    text = " or ".join(parts)
    return f"{text}, or none" if none else text


def _describe_one(hint: Any, spec: Key | None) -> str:
    base, extras = split_annotated(hint)
    bounds = spec.bounds() if spec else ""
    if base is type(None):
        return "none"
    if typing.get_origin(base) is Literal:
        values = [repr(v) for v in typing.get_args(base)]
        return values[0] if len(values) == 1 else f"{', '.join(values[:-1])} or {values[-1]}"
    if typing.get_origin(base) is tuple:
        args = typing.get_args(base)
        if len(args) == 2 and args[1] is Ellipsis:
            kinds = [e for e in split_annotated(args[0])[1] if isinstance(e, Kind)]
            if kinds:
                return f"a tuple of {kinds[0].name} specs, comma-separated ({kinds[0].expected})"
            return f"a tuple of {_plural(args[0])}{bounds}, e.g. (5, 10), or () for none"
        if len(set(args)) == 1:
            return (
                f"a pair of {_plural(args[0])}{bounds}"
                if len(args) == 2
                else (f"{len(args)} {_plural(args[0])}{bounds}")
            )
        return f"a ({', '.join(_type_name(a) for a in args)}) tuple{bounds}"
    for kind in extras:
        if isinstance(kind, Kind):
            return kind.expected
    words = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    if base in words:
        return words[base] + ("" if base in (bool, str) else bounds)
    return f"a {getattr(base, '__name__', base)}"


def _plural(hint: Any) -> str:
    return {int: "integers", float: "numbers", str: "strings", bool: "booleans"}.get(
        hint, str(hint)
    )


def _type_name(hint: Any) -> str:
    base, extras = split_annotated(hint)
    for kind in extras:
        if isinstance(kind, Kind):
            return kind.name
    if typing.get_origin(base) is Literal:
        return " | ".join(repr(v) for v in typing.get_args(base))
    if typing.get_origin(base) is tuple:
        args = typing.get_args(base)
        if len(args) == 2 and args[1] is Ellipsis:
            return f"tuple[{_type_name(args[0])}, ...]"
        return f"tuple[{', '.join(_type_name(a) for a in args)}]"
    if base is type(None):
        return "None"
    return getattr(base, "__name__", str(base))


def type_name(hint: Any) -> str:
    """The type of a field as ``vitkit config`` shows it: 'int', 'float | None', 'duration'."""
    return " | ".join(_type_name(m) for m in union_members(hint))


def explain(hint: Any, spec: Key | None) -> str:
    """A field's type and what it admits, for ``vitkit config``: 'int: an integer >= 1'; a
    Literal's values or a string kind's description say both at once."""
    allowed = describe(hint, spec)
    said = any(
        typing.get_origin(base) is Literal or any(isinstance(e, Kind) for e in extras)
        for base, extras in map(split_annotated, union_members(hint))
    )
    return allowed if said else f"{type_name(hint)}: {allowed}"


def to_dict(cfg: Any) -> dict[str, Any]:
    """A JSON-ready dict of a config (tuples become lists)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value):
            value = to_dict(value)
        elif isinstance(value, tuple):
            value = list(value)
        out[f.name] = value
    return out


def closest(name: str, options: list[str]) -> str:
    """' (did you mean 'x'?)' for the closest of ``options``, or ''."""
    match = difflib.get_close_matches(name, options, n=1, cutoff=0.5)
    return f" (did you mean {match[0]!r}?)" if match else ""
