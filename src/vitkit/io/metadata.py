"""What a checkpoint says about using its model besides the weights: class names and preprocessing.

Every format that holds them (ours, Hugging Face, ONNX) checks them against the model here, the same
way, before writing anything: one class name per output, all distinct; a ``Preprocess`` with the
model's channels and, for a format whose model takes one image size only, its image size. A model
saved without a ``Preprocess`` is taken to want the official one at its own resolution (as
``vitkit predict`` assumes for a checkpoint that records none). Class names read from a checkpoint
are checked the same way (``recorded_class_names``), so no verb meets a number or a short list.
"""

from __future__ import annotations

import reprlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..config import ModelConfig, image_size_of
from ..errors import CheckpointError, ConfigError

if TYPE_CHECKING:  # imported where used: reading class names needs no torchvision
    from ..data.transforms import Preprocess


def checked_class_names(class_names: Sequence[str] | None, cfg: ModelConfig) -> list[str] | None:
    """``class_names`` as a list, or None when there are none; one per class, all distinct."""
    if not class_names:
        return None
    names = [str(name) for name in class_names]
    if len(names) != cfg.num_classes:
        raise ConfigError(
            f"{len(names)} class_names for a model with num_classes={cfg.num_classes}: "
            "expected one name per class"
        )
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ConfigError(f"class_names must be distinct, found {repeated} more than once")
    return names


def recorded_class_names(value: Any, cfg: ModelConfig, *, source: str) -> list[str] | None:
    """The ``class_names`` a checkpoint's metadata records (``value``, as JSON gives it; None when
    it records none), checked as ``checked_class_names`` checks what is written, each a string;
    a ``CheckpointError`` naming ``source`` (the file) otherwise."""
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        raise CheckpointError(
            f"{source}: class_names: expected a list of {cfg.num_classes} strings (one per "
            f"class), found {reprlib.repr(value)}"
        )
    try:
        return checked_class_names(value, cfg)
    except ConfigError as e:
        raise CheckpointError(f"{source}: {e}") from None


def default_preprocess(cfg: ModelConfig) -> Preprocess | None:
    """The official preprocessing at the model's resolution; None for a model whose channels are
    not an image file's (1 or 3), which no ``Preprocess`` describes."""
    from ..data.transforms import Preprocess

    if cfg.in_chans not in (1, 3):
        return None
    return Preprocess(image_size=cfg.image_size, in_chans=cfg.in_chans)


def check_preprocess(
    preprocess: Preprocess, cfg: ModelConfig, *, fixed_size: str | None = None
) -> Preprocess:
    """``preprocess``, checked against the model: the same channels, and with ``fixed_size`` (the
    format whose model takes its own image size only, for the message) the same image size."""
    from ..data.transforms import Preprocess

    if not isinstance(preprocess, Preprocess):
        raise TypeError(f"preprocess must be a vitkit Preprocess, got {type(preprocess).__name__}")
    if preprocess.in_chans != cfg.in_chans:
        raise ConfigError(
            f"preprocess in_chans={preprocess.in_chans} for a model with in_chans={cfg.in_chans}: "
            "expected the model's channels"
        )
    if fixed_size is not None and preprocess.image_size != image_size_of(cfg.image_size):
        raise ConfigError(
            f"preprocess image_size={preprocess.image_size!r} for a model of image_size="
            f"{cfg.image_size!r}: {fixed_size} takes images of the model's size only"
        )
    return preprocess


def fitted_preprocess(
    preprocess: Preprocess | None, cfg: ModelConfig, *, fixed_size: str | None = None
) -> Preprocess | None:
    """``preprocess`` checked against the model (``check_preprocess``), or when None
    ``default_preprocess``."""
    if preprocess is None:
        return default_preprocess(cfg)
    return check_preprocess(preprocess, cfg, fixed_size=fixed_size)
