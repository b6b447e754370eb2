"""What a checkpoint says about using its model besides the weights: class names, their WordNet
ids, the weights' source and preprocessing.

Every format that holds them (ours, Hugging Face, ONNX) checks them against the model here, the same
way, before writing anything (``checked_metadata``): one class name per output, all distinct, each
of at most ``cells.MAX_CLASS_NAME`` characters; where the classes are WordNet synsets (ImageNet's),
one wnid per output, all distinct; the source, the registry name of the weights a checkpoint was
converted from (``PRESET@TAG``), a string; a ``Preprocess`` with the model's channels and an image
size the model takes, each side a multiple of its patch stride and at most
``MAX_RESOLUTION_FACTOR`` times its own (for a format whose model takes one image size only, its
image size). A model saved without a ``Preprocess`` is taken to want the official one at its own
resolution (as ``vitkit predict`` assumes for a checkpoint that records none). What a checkpoint
records is checked the same way on reading (``recorded_metadata``, ``recorded_preprocess``), so no
verb meets a number, a short list, a name of megabytes or a resize to 10^6 pixels a side.
"""

from __future__ import annotations

import re
import reprlib
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..config import ModelConfig, image_size_of, size_hw
from ..data.sources.cells import long_class_name
from ..errors import CheckpointError, ConfigError

if TYPE_CHECKING:  # imported where used: reading class names needs no torchvision
    from ..data.transforms import Preprocess

WNID = re.compile(r"n\d{8}")  # a WordNet noun synset's id, as ImageNet names its classes
RECORDED = ("class_names", "wnids", "pretrained")  # the keys of ``checked_metadata``
# The most a checkpoint's preprocessing may resize images to, per side, as a multiple of its
# model's own resolution: what vitkit writes (training, the registry, ``load(image_size=)``)
# records the model's own, as fine-tuning at a higher resolution makes that the model's.
MAX_RESOLUTION_FACTOR = 4


def _one_per_class(
    values: Sequence[str] | None, cfg: ModelConfig, key: str, noun: str
) -> list[str] | None:
    """``values`` as a list of strings, or None when there are none; one per class, distinct."""
    if not values:
        return None
    items = [str(value) for value in values]
    if len(items) != cfg.num_classes:
        raise ConfigError(
            f"{len(items)} {key} for a model with num_classes={cfg.num_classes}: "
            f"expected one {noun} per class"
        )
    repeated = sorted(item for item, uses in Counter(items).items() if uses > 1)
    if repeated:
        raise ConfigError(f"{key} must be distinct, found {reprlib.repr(repeated)} more than once")
    return items


def checked_class_names(class_names: Sequence[str] | None, cfg: ModelConfig) -> list[str] | None:
    """``class_names`` as a list, or None when there are none; one per class, all distinct, each
    of at most ``cells.MAX_CLASS_NAME`` characters."""
    names = _one_per_class(class_names, cfg, "class_names", "name")
    problem = None if names is None else long_class_name(names)
    if problem is not None:
        raise ConfigError(f"class_names: {problem}")
    return names


def checked_wnids(wnids: Sequence[str] | None, cfg: ModelConfig) -> list[str] | None:
    """``wnids``, each class's WordNet synset id (``'n00004475'``), as a list, or None when there
    are none; one per class, all distinct."""
    items = _one_per_class(wnids, cfg, "wnids", "wnid")
    malformed = [wnid for wnid in items or () if not WNID.fullmatch(wnid)]
    if malformed:
        raise ConfigError(
            "wnids: expected WordNet synset ids ('n' and 8 digits, e.g. 'n00004475'), found "
            f"{reprlib.repr(malformed)}"
        )
    return items


def checked_metadata(
    cfg: ModelConfig,
    *,
    class_names: Sequence[str] | None = None,
    wnids: Sequence[str] | None = None,
    pretrained: str | None = None,
) -> dict[str, Any]:
    """What a format writes beside the weights about the classes and the weights' source, each
    checked (``checked_class_names``, ``checked_wnids``; ``pretrained`` a registry name): a dict
    of those given, under the keys ``RECORDED``."""
    if pretrained is not None and not (isinstance(pretrained, str) and pretrained):
        raise ConfigError(
            f"pretrained: expected the registry name of the weights' source (e.g. "
            f"'ViT-B/16@in21k'), found {reprlib.repr(pretrained)}"
        )
    found = {
        "class_names": checked_class_names(class_names, cfg),
        "wnids": checked_wnids(wnids, cfg),
        "pretrained": pretrained,
    }
    return {key: value for key, value in found.items() if value}


def recorded_metadata(meta: Mapping[str, Any], cfg: ModelConfig, *, source: str) -> dict[str, Any]:
    """The ``class_names``, ``wnids`` and ``pretrained`` a checkpoint's metadata ``meta`` records
    (as JSON gives them; those it records), checked as ``checked_metadata`` checks what is
    written, lists of strings; a ``CheckpointError`` naming ``source`` (the file) otherwise."""
    for key in ("class_names", "wnids"):
        value = meta.get(key)
        if value is not None and (
            not isinstance(value, list) or not all(isinstance(item, str) for item in value)
        ):
            raise CheckpointError(
                f"{source}: {key}: expected a list of {cfg.num_classes} strings (one per "
                f"class), found {reprlib.repr(value)}"
            )
    try:
        return checked_metadata(cfg, **{key: meta.get(key) for key in RECORDED})
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
    """``preprocess``, checked against the model: the same channels; an image size the model takes
    (each side a multiple of a ViT's patch stride) of at most ``MAX_RESOLUTION_FACTOR`` times the
    model's own a side; and with ``fixed_size`` (the format whose model takes its own image size
    only, for the message) the model's image size."""
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
    stride = cfg.total_stride if cfg.arch == "vit" else 1  # a ResNet pools any size
    sides = zip(size_hw(preprocess.image_size), cfg.image_hw, strict=True)
    if any(side % stride or side > MAX_RESOLUTION_FACTOR * own for side, own in sides):
        h, w = cfg.image_hw
        multiple = f"each side a multiple of the patch stride {stride}, " if stride > 1 else ""
        raise ConfigError(
            f"preprocess image_size={preprocess.image_size!r} for a model of image_size="
            f"{cfg.image_size!r}: expected {multiple}at most {MAX_RESOLUTION_FACTOR} times the "
            f"model's ({MAX_RESOLUTION_FACTOR * h} x {MAX_RESOLUTION_FACTOR * w})"
        )
    return preprocess


def recorded_preprocess(recorded: Any, cfg: ModelConfig, *, source: str) -> dict[str, Any]:
    """The ``preprocess`` a checkpoint's metadata records (``Preprocess.to_dict()``), checked as
    ``check_preprocess`` checks what is written; a ``CheckpointError`` naming ``source`` (the
    file) otherwise."""
    from ..data.transforms import Preprocess

    try:
        preprocess = Preprocess.from_dict(recorded)
    except ConfigError as e:
        raise CheckpointError(f"{source}: preprocess: {e}") from None
    try:
        return check_preprocess(preprocess, cfg).to_dict()
    except ConfigError as e:  # its message names preprocess
        raise CheckpointError(f"{source}: {e}") from None


def fitted_preprocess(
    preprocess: Preprocess | None, cfg: ModelConfig, *, fixed_size: str | None = None
) -> Preprocess | None:
    """``preprocess`` checked against the model (``check_preprocess``), or when None
    ``default_preprocess``."""
    if preprocess is None:
        return default_preprocess(cfg)
    return check_preprocess(preprocess, cfg, fixed_size=fixed_size)
