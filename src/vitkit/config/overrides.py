"""``--set key=value``: the text of a setting read by its key's type (``parse``), the items split
and gathered per section (``split_set``, ``parse_set``), and applied to a config (``replace``,
``field_hint``). No
torch import here.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from typing import Any, Literal

from ..errors import ConfigError
from .dicts import from_dict, nested_class
from .keys import (
    FALSE_WORDS,
    NONE_WORDS,
    TRUE_WORDS,
    Key,
    Kind,
    WrongTypeError,
    check_one,
    closest,
    fields_of,
    hints,
    shown,
    spec_of,
    split_annotated,
    to_dict,
    union_members,
    wanted,
)


def parse(hint: Any, text: str, *, name: str, spec: Key | None) -> Any:
    """The value of ``--set name=text`` for a field typed ``hint``, checked; a ``ConfigError``
    naming the key, the text and what is allowed when it is not one."""
    members = union_members(hint)
    if text.strip().lower() in NONE_WORDS and type(None) in members:
        return None  # before a str member could take the word
    for member in members:
        try:
            return check_one(member, _parse_one(member, text.strip()), spec)
        except WrongTypeError:
            continue
    why = wanted(hint, spec, _unquote(text.strip()))
    raise ConfigError(f"{name}={shown(text)} is not valid: {why}")


def _unquote(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    return text


def _parse_one(hint: Any, text: str) -> Any:
    base, extras = split_annotated(hint)
    lower = text.lower()
    if base is type(None):
        if lower in NONE_WORDS:
            return None
        raise WrongTypeError
    if typing.get_origin(base) is Literal:
        allowed = typing.get_args(base)
        word = _unquote(text)
        if word in allowed:
            return word
        matches = [v for v in allowed if isinstance(v, str) and v.lower() == word.lower()]
        if len(matches) == 1:
            return matches[0]
        raise WrongTypeError
    if typing.get_origin(base) is tuple:
        inner = text[1:-1] if len(text) >= 2 and text[0] + text[-1] in ("()", "[]") else text
        args = typing.get_args(base)
        numbers = all(split_annotated(a)[0] in (int, float) for a in args if a is not Ellipsis)
        # '24x48': a (height, width) pair; an 'x' in a string (a path) is no separator
        sep = "x" if numbers and "," not in inner and "x" in lower else ","
        spelled = inner.lower() if sep == "x" else inner
        pieces = [p.strip() for p in spelled.split(sep)] if inner.strip() else []
        if pieces and pieces[-1] == "":  # "(5,)"
            pieces.pop()
        if not pieces and lower not in ("()", "[]", ""):
            raise WrongTypeError
        item_types = [args[0]] * len(pieces) if args[-1] is Ellipsis else list(args)
        if len(item_types) != len(pieces):
            raise WrongTypeError
        return tuple(_parse_one(t, p) for t, p in zip(item_types, pieces, strict=True))
    if base is bool:
        if lower in TRUE_WORDS:
            return True
        if lower in FALSE_WORDS:
            return False
        raise WrongTypeError
    if base is int:
        try:
            return int(text.replace("_", ""))
        except ValueError:
            raise WrongTypeError from None
    if base is float:
        try:
            return float(text.replace("_", ""))
        except ValueError:
            raise WrongTypeError from None
    if base is str:
        word = _unquote(text)
        kind = next((e for e in extras if isinstance(e, Kind)), None)
        if kind is None or kind.entered is None or kind.why_not(word) is not None:
            return word  # (a string its kind refuses is refused by ``check_one``)
        return kind.entered(word)
    raise WrongTypeError  # a section: set its keys one by one


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
