"""Typed configuration: the model's vocabulary is the paper's and the official code's.

Configs are frozen, keyword-only dataclasses. ``__post_init__`` validates every field and raises a
``ValueError`` naming the field, the value and what is allowed. Overrides (from ``--set`` or keyword
arguments) are strict: an unknown key is an error with the closest valid name. This module never
imports torch, so the CLI can validate before paying for that import.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

Classifier = Literal["token", "gap"]
Posemb = Literal["learn", "sincos2d", "none"]
Activation = Literal["gelu", "gelu_tanh"]


class ConfigError(ValueError):
    """A configuration value or key a user gave is not valid."""


def _check(cond: bool, name: str, value: Any, allowed: str) -> None:
    if not cond:
        raise ConfigError(f"{name}={value!r} is not valid: expected {allowed}")


def _positive_int(name: str, value: Any) -> None:
    _check(
        isinstance(value, int) and not isinstance(value, bool) and value > 0,
        name,
        value,
        "a positive integer",
    )


def _rate(name: str, value: Any) -> None:
    _check(
        isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 <= value < 1.0,
        name,
        value,
        "a number in [0, 1)",
    )


@dataclass(frozen=True, kw_only=True)
class ResNetConfig:
    """The BiT ResNet stem of a hybrid model [P §3.1 "Hybrid Architecture", PAPER.md A2].

    ``num_layers`` holds the number of bottleneck units per stage; ``()`` keeps only the root
    (7x7/2 conv, GroupNorm, ReLU, 3x3/2 max-pool), as in the official R+ViT-Ti/16.
    """

    num_layers: tuple[int, ...]
    width_factor: int = 1

    def __post_init__(self) -> None:
        _check(
            isinstance(self.num_layers, tuple)
            and all(
                isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in self.num_layers
            ),
            "resnet.num_layers",
            self.num_layers,
            "a tuple of positive integers (units per stage), e.g. (3, 4, 9)",
        )
        _positive_int("resnet.width_factor", self.width_factor)

    @property
    def stride(self) -> int:
        """Total downsampling of the backbone: root conv 2 x max-pool 2 x 2 per later stage."""
        return 4 * 2 ** max(len(self.num_layers) - 1, 0)

    @property
    def out_channels(self) -> int:
        width = 64 * self.width_factor
        if not self.num_layers:
            return width
        return width * 2 ** (len(self.num_layers) - 1) * 4


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """A Vision Transformer, pure or hybrid [P §3.1, Table 1; DESIGN.md "Configuration"].

    ``num_classes=0`` means no head: the model returns pooled (pre-logits) features, as in timm.
    ``representation_size`` adds the pre-training "pre-logits" layer (dense + tanh).
    """

    image_size: int
    patch_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    mlp_dim: int
    num_classes: int = 1000
    in_chans: int = 3
    classifier: Classifier = "token"
    representation_size: int | None = None
    dropout_rate: float = 0.0
    attention_dropout_rate: float = 0.0
    drop_path_rate: float = 0.0
    posemb: Posemb = "learn"
    act: Activation = "gelu"
    layer_norm_eps: float = 1e-6
    head_bias_init: float = 0.0
    resnet: ResNetConfig | None = None

    def __post_init__(self) -> None:
        for name in (
            "image_size",
            "patch_size",
            "hidden_size",
            "num_layers",
            "num_heads",
            "mlp_dim",
        ):
            _positive_int(name, getattr(self, name))
        for name in ("num_classes",):
            value = getattr(self, name)
            _check(
                isinstance(value, int) and not isinstance(value, bool) and value >= 0,
                name,
                value,
                "an integer >= 0 (0 = no head)",
            )
        _positive_int("in_chans", self.in_chans)
        _check(
            self.hidden_size % self.num_heads == 0,
            "num_heads",
            self.num_heads,
            f"a divisor of hidden_size={self.hidden_size}",
        )
        _check(
            self.classifier in ("token", "gap"), "classifier", self.classifier, "'token' or 'gap'"
        )
        _check(
            self.posemb in ("learn", "sincos2d", "none"),
            "posemb",
            self.posemb,
            "'learn', 'sincos2d' or 'none'",
        )
        if self.posemb == "sincos2d":
            _check(
                self.hidden_size % 4 == 0,
                "hidden_size",
                self.hidden_size,
                "a multiple of 4 for posemb='sincos2d'",
            )
        _check(self.act in ("gelu", "gelu_tanh"), "act", self.act, "'gelu' or 'gelu_tanh'")
        if self.representation_size is not None:
            _positive_int("representation_size", self.representation_size)
        for name in ("dropout_rate", "attention_dropout_rate", "drop_path_rate"):
            _rate(name, getattr(self, name))
        _check(
            isinstance(self.layer_norm_eps, float) and self.layer_norm_eps > 0,
            "layer_norm_eps",
            self.layer_norm_eps,
            "a positive float",
        )
        _check(
            isinstance(self.head_bias_init, (int, float))
            and not isinstance(self.head_bias_init, bool),
            "head_bias_init",
            self.head_bias_init,
            "a number",
        )
        _check(
            self.resnet is None or isinstance(self.resnet, ResNetConfig),
            "resnet",
            self.resnet,
            "None or a ResNetConfig",
        )
        stride = self.total_stride
        _check(
            self.image_size % stride == 0,
            "image_size",
            self.image_size,
            f"a multiple of the total stride {stride} (patch_size"
            + (" x ResNet stride" if self.resnet else "")
            + ")",
        )

    @property
    def total_stride(self) -> int:
        """Pixels per token side: the patch size, times the backbone stride for a hybrid."""
        return self.patch_size * (self.resnet.stride if self.resnet else 1)

    @property
    def grid_size(self) -> int:
        """Tokens per side of the patch grid at ``image_size``."""
        return self.image_size // self.total_stride

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def num_prefix_tokens(self) -> int:
        return 1 if self.classifier == "token" else 0

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModelConfig:
        return from_dict(cls, data)


C = TypeVar("C")


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


def _closest(name: str, options: list[str]) -> str:
    match = difflib.get_close_matches(name, options, n=1, cutoff=0.5)
    return f" (did you mean {match[0]!r}?)" if match else ""


def _field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _nested_class(hint: Any) -> type | None:
    """The dataclass inside ``X | None``, if the field holds one."""
    args = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    for arg in args:
        if dataclasses.is_dataclass(arg):
            return arg  # type: ignore[return-value]
    return None


def from_dict(cls: type[C], data: Mapping[str, Any], *, where: str = "") -> C:
    """Build a config dataclass from a dict, strictly: unknown keys are errors."""
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"{where or cls.__name__}: expected a mapping, found {type(data).__name__}"
        )
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    hints = _field_types(cls)
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key not in names:
            raise ConfigError(
                f"unknown config key {where}{key!r}{_closest(key, names)}; valid keys: {', '.join(names)}"
            )
        nested = _nested_class(hints[key])
        if nested is not None and isinstance(value, Mapping):
            value = from_dict(nested, value, where=f"{where}{key}.")
        elif isinstance(value, list):
            value = tuple(value)
        kwargs[key] = value
    missing = [
        f.name
        for f in dataclasses.fields(cls)  # type: ignore[arg-type]
        if f.name not in kwargs
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ConfigError(f"{where or cls.__name__}: missing required keys {missing}")
    try:
        return cls(**kwargs)
    except TypeError as e:  # a value of the wrong type that validation did not catch
        raise ConfigError(f"{where or cls.__name__}: {e}") from None


def replace(cfg: C, overrides: Mapping[str, Any]) -> C:
    """A copy of ``cfg`` with dotted-key overrides applied (``{"resnet.width_factor": 2}``).

    Unknown keys raise ``ConfigError`` with the closest valid name; values are re-validated.
    """
    data = to_dict(cfg)
    for dotted, value in overrides.items():
        node = data
        parts = dotted.split(".")
        for i, part in enumerate(parts):
            if not isinstance(node, dict) or part not in node:
                options = list(node) if isinstance(node, dict) else []
                prefix = ".".join(parts[:i])
                where = f" under {prefix!r}" if prefix else ""
                raise ConfigError(f"unknown config key {dotted!r}{where}{_closest(part, options)}")
            if i == len(parts) - 1:
                node[part] = to_dict(value) if dataclasses.is_dataclass(value) else value
            else:
                if node[part] is None:
                    raise ConfigError(f"cannot set {dotted!r}: {'.'.join(parts[: i + 1])} is None")
                node = node[part]
    return from_dict(type(cfg), data)


def parse_set(items: list[str]) -> dict[str, Any]:
    """Parse ``--set key=value`` items; values are Python literals, else plain strings."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects key=value, found {item!r}")
        try:
            value = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            value = raw
        out[key.strip()] = value
    return out


__all__ = [
    "Activation",
    "Classifier",
    "ConfigError",
    "ModelConfig",
    "Posemb",
    "ResNetConfig",
    "from_dict",
    "parse_set",
    "replace",
    "to_dict",
]
