"""Typed keys: one declaration per setting (``key(default, doc=..., ge=...)`` on a field of a
frozen, keyword-only ``Section`` dataclass) gives its type, bounds, default and documentation,
and everything else is derived from it: ``check`` validates a value (every ``Section`` runs it in
``__post_init__``, so recipes and the Python API are checked like the command line), ``parse``
reads the text of ``--set key=value`` by the field's type (true/false/yes/no/on/off/1/0, ``none``,
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
    them; ``why_not_new`` what a new run may not hold of a valid one (as ``Key.new_le``)."""

    name: str
    why_not: Callable[[str], str | None]
    expected: str
    why_not_new: Callable[[str], str | None] | None = None


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


# ------------------------------------------------------------------------ checking a value


def _members(hint: Any) -> tuple[Any, ...]:
    """The members of a union (``X | Y``, ``Optional[X]``), or the hint alone."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return typing.get_args(hint)
    return (hint,)


def _split_annotated(hint: Any) -> tuple[Any, list[Any]]:
    if typing.get_origin(hint) is Annotated:
        base, *extras = typing.get_args(hint)
        return base, extras
    return hint, []


class _WrongTypeError(Exception):
    """A value does not fit one member of a union (the caller tries the next)."""


def _check_one(hint: Any, value: Any, spec: Key | None) -> Any:
    base, extras = _split_annotated(hint)
    if base is type(None):
        if value is not None:
            raise _WrongTypeError
        return None
    origin = typing.get_origin(base)
    if origin is Literal:
        if not isinstance(value, str | int) or isinstance(value, bool):
            raise _WrongTypeError
        if value not in typing.get_args(base):
            raise _WrongTypeError
        return value
    if origin is tuple:
        if not isinstance(value, tuple | list):
            raise _WrongTypeError
        args = typing.get_args(base)
        if len(args) == 2 and args[1] is Ellipsis:
            items = [_check_one(args[0], v, spec) for v in value]
        else:
            if len(value) != len(args):
                raise _WrongTypeError
            items = [_check_one(a, v, spec) for a, v in zip(args, value, strict=True)]
        return tuple(items)
    if base is bool:
        if not isinstance(value, bool):
            raise _WrongTypeError
        return value
    if base is int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise _WrongTypeError
    elif base is float:
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise _WrongTypeError
        if not math.isfinite(value):
            raise _WrongTypeError
    elif base is str:
        if not isinstance(value, str):
            raise _WrongTypeError
        for kind in extras:
            if isinstance(kind, Kind) and kind.why_not(value) is not None:
                raise _WrongTypeError
        return value
    elif dataclasses.is_dataclass(base):
        if not isinstance(value, base):  # type: ignore[arg-type]  # base is a class here
            raise _WrongTypeError
        return value
    else:
        raise TypeError(f"config fields of type {base!r} are not supported")
    if spec is not None and not spec.admits(value):
        raise _WrongTypeError
    return value


def check(hint: Any, value: Any, *, name: str, spec: Key | None) -> Any:
    """``value`` if it is a valid value of a field typed ``hint`` (lists become tuples), else a
    ``ConfigError`` naming the key, the value and what is allowed."""
    if spec is not None and value in spec.earlier:
        return value
    for member in _members(hint):
        try:
            return _check_one(member, value, spec)
        except _WrongTypeError:
            continue
    raise ConfigError(f"{name}={shown(repr(value))} is not valid: {_wanted(hint, spec, value)}")


def shown(text: str, most: int = 200) -> str:
    """``text`` as a message shows it: whole up to ``most`` characters (a path), else its start
    and its length (a value of thousands of digits is one short line)."""
    if len(text) <= most:
        return text
    return f"{text[:100]}... ({len(text):,} characters)"


def _wanted(hint: Any, spec: Key | None, value: Any) -> str:
    """What a field wanted: a string kind's own reason when it has one, else what it admits."""
    for member in _members(hint):
        _, extras = _split_annotated(member)
        for kind in extras:
            if isinstance(kind, Kind) and isinstance(value, str) and kind.why_not(value):
                return str(kind.why_not(value))
    return f"expected {describe(hint, spec)}"


# ------------------------------------------------------------------ describing the allowed values


def describe(hint: Any, spec: Key | None = None) -> str:
    """What a field admits, in words: 'an integer >= 1', "'adam', 'sgd' or 'muon'", ..."""
    parts = [_describe_one(m, spec) for m in _members(hint)]
    none = "none" in parts
    parts = [p for p in parts if p != "none"]
    text = " or ".join(parts)
    return f"{text}, or none" if none else text


def _describe_one(hint: Any, spec: Key | None) -> str:
    base, extras = _split_annotated(hint)
    bounds = spec.bounds() if spec else ""
    if base is type(None):
        return "none"
    if typing.get_origin(base) is Literal:
        values = [repr(v) for v in typing.get_args(base)]
        return values[0] if len(values) == 1 else f"{', '.join(values[:-1])} or {values[-1]}"
    if typing.get_origin(base) is tuple:
        args = typing.get_args(base)
        if len(args) == 2 and args[1] is Ellipsis:
            kinds = [e for e in _split_annotated(args[0])[1] if isinstance(e, Kind)]
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
    base, extras = _split_annotated(hint)
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
    return " | ".join(_type_name(m) for m in _members(hint))


def explain(hint: Any, spec: Key | None) -> str:
    """A field's type and what it admits, for ``vitkit config``: 'int: an integer >= 1'; a
    Literal's values or a string kind's description say both at once."""
    allowed = describe(hint, spec)
    said = any(
        typing.get_origin(base) is Literal or any(isinstance(e, Kind) for e in extras)
        for base, extras in map(_split_annotated, _members(hint))
    )
    return allowed if said else f"{type_name(hint)}: {allowed}"


# ---------------------------------------------------------------------- reading --set text


def parse(hint: Any, text: str, *, name: str, spec: Key | None) -> Any:
    """The value of ``--set name=text`` for a field typed ``hint``, checked; a ``ConfigError``
    naming the key, the text and what is allowed when it is not one."""
    members = _members(hint)
    if text.strip().lower() in NONE_WORDS and type(None) in members:
        return None  # before a str member could take the word
    for member in members:
        try:
            return _check_one(member, _parse_one(member, text.strip()), spec)
        except _WrongTypeError:
            continue
    why = _wanted(hint, spec, _unquote(text.strip()))
    raise ConfigError(f"{name}={shown(text)} is not valid: {why}")


def _unquote(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def _parse_one(hint: Any, text: str) -> Any:
    base, _ = _split_annotated(hint)
    lower = text.lower()
    if base is type(None):
        if lower in NONE_WORDS:
            return None
        raise _WrongTypeError
    if typing.get_origin(base) is Literal:
        allowed = typing.get_args(base)
        word = _unquote(text)
        if word in allowed:
            return word
        matches = [v for v in allowed if isinstance(v, str) and v.lower() == word.lower()]
        if len(matches) == 1:
            return matches[0]
        raise _WrongTypeError
    if typing.get_origin(base) is tuple:
        inner = text[1:-1] if len(text) >= 2 and text[0] + text[-1] in ("()", "[]") else text
        args = typing.get_args(base)
        numbers = all(_split_annotated(a)[0] in (int, float) for a in args if a is not Ellipsis)
        # '24x48': a (height, width) pair; an 'x' in a string (a path) is no separator
        sep = "x" if numbers and "," not in inner and "x" in lower else ","
        spelled = inner.lower() if sep == "x" else inner
        pieces = [p.strip() for p in spelled.split(sep)] if inner.strip() else []
        if pieces and pieces[-1] == "":  # "(5,)"
            pieces.pop()
        if not pieces and lower not in ("()", "[]", ""):
            raise _WrongTypeError
        item_types = [args[0]] * len(pieces) if args[-1] is Ellipsis else list(args)
        if len(item_types) != len(pieces):
            raise _WrongTypeError
        return tuple(_parse_one(t, p) for t, p in zip(item_types, pieces, strict=True))
    if base is bool:
        if lower in TRUE_WORDS:
            return True
        if lower in FALSE_WORDS:
            return False
        raise _WrongTypeError
    if base is int:
        try:
            return int(text.replace("_", ""))
        except ValueError:
            raise _WrongTypeError from None
    if base is float:
        try:
            return float(text.replace("_", ""))
        except ValueError:
            raise _WrongTypeError from None
    if base is str:
        return _unquote(text)
    raise _WrongTypeError  # a section: set its keys one by one


# ------------------------------------------------------------------------- dicts and overrides


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


def nested_class(hint: Any) -> type | None:
    """The config class of a section field (also inside ``X | None``), if it holds one."""
    for member in _members(hint):
        base, _ = _split_annotated(member)
        if dataclasses.is_dataclass(base):
            return base  # type: ignore[return-value]  # is_dataclass narrows to the instance type too
    return None


def upgrade(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    """``data`` with the keys a section renamed folded into their current names."""
    renamed: Mapping[str, Callable[[dict[str, Any], Any], None]] = getattr(cls, "RENAMED", {})
    out = dict(data)
    for old, fold in renamed.items():
        if old in out:
            fold(out, out.pop(old))
    return out


def from_dict(cls: type[Any], data: Mapping[str, Any], *, where: str = "") -> Any:
    """Build a config dataclass from a dict (JSON), strictly: unknown keys are errors with the
    closest valid name; the renamed keys of earlier files are folded in first (``upgrade``)."""
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"{where or cls.__name__}: expected a mapping, found {type(data).__name__}"
        )
    data = upgrade(cls, data)
    names = [f.name for f in fields_of(cls)]
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        if name not in names:
            raise ConfigError(
                f"unknown config key {where + name!r}{closest(name, names)}; valid keys: "
                f"{', '.join(names)}"
            )
        nested = nested_class(hints(cls)[name])
        if nested is not None and isinstance(value, Mapping):
            value = from_dict(nested, value, where=f"{where}{name}.")
        kwargs[name] = value
    missing = [
        f.name
        for f in fields_of(cls)
        if f.name not in kwargs
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ConfigError(f"{where or cls.__name__}: missing required keys {missing}")
    return cls(**kwargs)


def recorded_as(cls: type, recorded: Mapping[str, Any] | None) -> Any | None:
    """``recorded`` (a run directory's config.json, as read) as a config ``cls``; None without
    one, or where it cannot be read as one (what reads the run directory says why)."""
    if recorded is None:
        return None
    try:
        return from_dict(cls, recorded)
    except (ValueError, TypeError):  # ConfigError is a ValueError
        return None


def check_new(cfg: Any, recorded: Mapping[str, Any] | None) -> None:
    """The bounds a new run keeps (``Key.new_le``, ``Kind.why_not_new``): a ``ConfigError``
    naming the first key of ``cfg`` beyond one, unless ``recorded`` (its run directory's
    config.json, as read) holds the same value, so that a run started before the bound existed
    continues as it began."""
    old = recorded_as(type(cfg), recorded)
    for dotted, value, hint, spec in _leaves(cfg):
        if old is not None and _value_at(old, dotted) == value:
            continue
        why = _why_not_new(hint, spec, value)
        if why is not None:
            raise ConfigError(f"{dotted}={shown(repr(value))} is not valid: {why}")


def _leaves(cfg: Any, prefix: str = "") -> list[tuple[str, Any, Any, Key | None]]:
    """(dotted key, value, annotation, ``Key``) of every value of ``cfg``, sections opened."""
    out = []
    for f in fields_of(type(cfg)):
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value):
            out += _leaves(value, f"{prefix}{f.name}.")
        else:
            out.append((f"{prefix}{f.name}", value, hints(type(cfg))[f.name], spec_of(f)))
    return out


def _value_at(cfg: Any, dotted: str) -> Any:
    for name in dotted.split("."):
        cfg = getattr(cfg, name, None)
    return cfg


def _why_not_new(hint: Any, spec: Key | None, value: Any) -> str | None:
    """What a new run may not hold of ``value``, a valid value of a field typed ``hint``."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if number and spec is not None and spec.new_le is not None and value > spec.new_le:
        return f"expected {describe(hint, spec)}"
    for member in _members(hint) if isinstance(value, str) else ():
        for kind in _split_annotated(member)[1]:
            if isinstance(kind, Kind) and kind.why_not_new is not None:
                return kind.why_not_new(value)
    return None


def field_hint(cls: type, dotted: str) -> tuple[Any, Key | None]:
    """The annotation and ``Key`` of a dotted key (``resnet.width_factor``) of config ``cls``; a
    ``ConfigError`` with the closest valid name for an unknown key."""
    parts = dotted.split(".")
    node: type | None = cls
    for i, part in enumerate(parts):
        assert node is not None
        by_name = {f.name: f for f in fields_of(node)}
        if part not in by_name:
            prefix = ".".join(parts[:i])
            where = f" under {prefix!r}" if prefix else ""
            raise ConfigError(
                f"unknown config key {dotted!r}{where}{closest(part, list(by_name))}; "
                f"`vitkit config` lists them all"
            )
        hint = hints(node)[part]
        if i == len(parts) - 1:
            return hint, spec_of(by_name[part])
        node = nested_class(hint)
        if node is None:
            raise ConfigError(f"{'.'.join(parts[: i + 1])} is a value, not a section: {dotted!r}")
    raise AssertionError("unreachable")


def replace(cfg: Any, overrides: Mapping[str, Any]) -> Any:
    """A copy of ``cfg`` with dotted-key overrides applied (``{"resnet.width_factor": 2}``).

    Values are Python values, checked by the field's type (text from ``--set`` goes through
    :func:`parse_set` first); unknown keys raise ``ConfigError`` with the closest valid name."""
    data = to_dict(cfg)
    for dotted, value in overrides.items():
        field_hint(type(cfg), dotted)  # the unknown-key error, with a suggestion
        node = data
        parts = dotted.split(".")
        for i, part in enumerate(parts[:-1]):
            if node.get(part) is None:
                raise ConfigError(f"cannot set {dotted!r}: {'.'.join(parts[: i + 1])} is None")
            node = node[part]
        node[parts[-1]] = to_dict(value) if dataclasses.is_dataclass(value) else value
    return from_dict(type(cfg), data)


def split_set(item: str) -> tuple[str, str]:
    """``'key=value'`` -> (key, value text)."""
    name, sep, text = item.partition("=")
    if not sep or not name.strip():
        raise ConfigError(f"--set expects key=value, found {item!r}")
    return name.strip(), text


def parse_set(cls: type, items: list[str]) -> dict[str, Any]:
    """``--set key=value`` items of config class ``cls`` -> {dotted key: typed value}, each value
    read by its field's type; an unknown key or a value of the wrong type is a ``ConfigError``."""
    out: dict[str, Any] = {}
    for item in items:
        name, text = split_set(item)
        hint, spec = field_hint(cls, name)
        out[name] = parse(hint, text, name=name, spec=spec)
    return out
