"""Configs to and from the JSON of ``config.json`` and checkpoints: ``to_dict``, ``from_dict``
(checked as the command line is, the keys of earlier files upgraded first), what a run
recorded (``recorded_as``) and the bounds a new run keeps that a recorded one need not
(``check_new``). No torch import here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import ConfigError
from .keys import (
    Key,
    Kind,
    closest,
    describe,
    fields_of,
    hints,
    qualified,
    shown,
    spec_of,
    split_annotated,
    union_members,
)


def nested_class(hint: Any) -> type | None:
    """The config class of a section field (also inside ``X | None``), if it holds one."""
    for member in union_members(hint):
        base, _ = split_annotated(member)
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
    """The bounds a new run keeps (``Key.new_le``, ``Kind.why_not_new``, a section's
    ``why_not_new`` across its fields), and a checkpoint's model when read: a ``ConfigError``
    naming the first key of ``cfg`` beyond one, unless ``recorded`` (its run directory's
    config.json, as read) holds the same value, so that a run started before the bound existed
    continues as it began."""
    old = recorded_as(type(cfg), recorded)
    bounds = [(d, v, _why_not_new(h, s, v)) for d, v, h, s in _leaves(cfg)]
    for prefix, section in _sections(cfg):
        across = section.why_not_new()
        if across is not None:
            name, why = across
            bounds.append((prefix + name, getattr(section, name), why))
    for dotted, value, why in bounds:
        if why is None or (old is not None and _value_at(old, dotted) == value):
            continue
        # a section checked alone (a checkpoint's model) is named by its SECTION
        raise ConfigError(f"{qualified(cfg, dotted)}={shown(repr(value))} is not valid: {why}")


def _sections(cfg: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """(dotted prefix, section) of ``cfg`` and of every section below it."""
    out = [(prefix, cfg)]
    for f in fields_of(type(cfg)):
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value):
            out += _sections(value, f"{prefix}{f.name}.")
    return out


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
    for member in union_members(hint) if isinstance(value, str) else ():
        for kind in split_annotated(member)[1]:
            if isinstance(kind, Kind) and kind.why_not_new is not None:
                return kind.why_not_new(value)
    return None
