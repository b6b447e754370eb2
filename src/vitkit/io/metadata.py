"""What travels with a model's weights besides its config: class names, their WordNet ids, the
weights' source, preprocessing and the training run, as one typed record (``WeightsMeta``, timm's
``PretrainedCfg``), read by attribute.

Every format that holds them (ours, Hugging Face, ONNX) checks them against the model here, the same
way, before writing anything (``checked_metadata``): one class name per output, all distinct, each
of at most ``bounds.MAX_CLASS_NAME`` characters; where the classes are WordNet synsets (ImageNet's),
one wnid per output, all distinct; the source, the registry name of the weights a checkpoint was
converted from (``PRESET@TAG``), a string; a ``Preprocess`` with the model's channels and an image
size the model takes, each side a multiple of its patch stride and at most
``MAX_RESOLUTION_FACTOR`` times its own (for a format whose model takes one image size only, its
image size). A model saved without a ``Preprocess`` is taken to want the official one at its own
resolution (as ``vitkit predict`` assumes for a checkpoint that records none). What a checkpoint
records is checked the same way on reading (``WeightsMeta.from_dict``), so no verb meets a number,
a short list, a name of megabytes or a resize to 10^6 pixels a side; its run is read as a
``RunConfig`` (an earlier vitkit's upgraded by ``compat``).
"""

from __future__ import annotations

import dataclasses
import re
import reprlib
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..config import ModelConfig, RunConfig, image_size_of, size_hw
from ..data.bounds import long_class_name
from ..errors import CheckpointError, ConfigError

if TYPE_CHECKING:  # imported where used: reading class names needs no torchvision
    from ..data.transforms import Preprocess

WNID = re.compile(r"n\d{8}")  # a WordNet noun synset's id, as ImageNet names its classes
# The most a checkpoint's preprocessing may resize images to, per side, as a multiple of its
# model's own resolution: what vitkit writes (training, the registry, ``load(image_size=)``)
# records the model's own, as fine-tuning at a higher resolution makes that the model's.
MAX_RESOLUTION_FACTOR = 4
# How an image file is decoded before its ``Preprocess``, as every vitkit verb decodes it
# (data/codec.py): turned upright by its EXIF orientation tag, as PIL's ``ImageOps.exif_transpose``
# turns it. The formats whose preprocessing is the caller's say so beside it (ONNX, OpenVINO and
# Hugging Face's ``preprocessor_config.json``): a phone photo tagged "rotate 180" read without it
# is another picture to the model.
IMAGE_ORIENTATION = {"image_orientation": "exif_transpose"}


def _one_per_class(
    values: Sequence[str] | None, cfg: ModelConfig, key: str, noun: str
) -> list[str] | None:
    """``values`` as a list of strings, or None when there are none; one per class, distinct."""
    if isinstance(values, (str, bytes)):  # 'abcd' was read as four names, one a character
        raise ConfigError(
            f"{key}={reprlib.repr(values)}: expected a list of {noun}s, one per class"
        )
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
    of at most ``bounds.MAX_CLASS_NAME`` characters."""
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


@dataclass(frozen=True, kw_only=True)
class WeightsMeta:
    """What travels with a model's weights besides its config (timm's ``PretrainedCfg``), each
    entry None where none is recorded. In our format these are ``config.json``'s keys of the same
    names beside ``format``, ``version`` and ``model`` (``to_dict``, ``from_dict``); Hugging
    Face's and ONNX's formats hold them in their own ways (io/formats/hf.py, io/export.py)."""

    class_names: tuple[str, ...] | None = None  # one per output, as recorded
    wnids: tuple[str, ...] | None = None  # each class's WordNet synset id, where it is ImageNet's
    pretrained: str | None = None  # the registry name of the weights' source (``PRESET@TAG``)
    preprocess: Preprocess | None = None  # how an image file becomes the model's input
    run: RunConfig | None = None  # the run that trained the weights (``vitkit train``)

    @classmethod
    def from_dict(
        cls, recorded: Mapping[str, object], cfg: ModelConfig, *, source: str, file: str
    ) -> WeightsMeta:
        """What a checkpoint's metadata ``recorded`` (as JSON gives it: ``to_dict``'s form, or an
        earlier vitkit's) says about the model ``cfg``, checked as writing checks it
        (``checked_metadata``, ``check_preprocess``), the run read as a ``RunConfig``; keys of
        other entries are not read. A ``CheckpointError`` in one line otherwise, naming ``file``
        (the JSON that records the entries), or for the preprocessing ``source`` (the checkpoint
        as named: a Hugging Face directory holds it in another file)."""
        try:
            found = checked_metadata(
                cfg,
                class_names=_strings(recorded, "class_names", cfg, file=file),
                wnids=_strings(recorded, "wnids", cfg, file=file),
                pretrained=recorded.get("pretrained"),
            )
        except ConfigError as e:
            raise CheckpointError(f"{file}: {e}") from None
        preprocess, run = recorded.get("preprocess"), recorded.get("run")
        return dataclasses.replace(
            found,
            preprocess=None if preprocess is None else recorded_preprocess(preprocess, cfg, source),
            run=None if run is None else _recorded_run(run, file),
        )

    def to_dict(self) -> dict[str, object]:
        """The entries recorded, as ``config.json`` holds them (what ``from_dict`` reads)."""
        entries: dict[str, object] = {
            "class_names": None if self.class_names is None else list(self.class_names),
            "wnids": None if self.wnids is None else list(self.wnids),
            "pretrained": self.pretrained,
            "preprocess": None if self.preprocess is None else self.preprocess.to_dict(),
            "run": None if self.run is None else self.run.to_dict(),
        }
        return {key: value for key, value in entries.items() if value is not None}

    @property
    def trained_on(self) -> str | None:
        """The data spec the weights' run trained on; None where no run is recorded."""
        return None if self.run is None else self.run.data.dataset


def checked_metadata(
    cfg: ModelConfig,
    *,
    class_names: Sequence[str] | None = None,
    wnids: Sequence[str] | None = None,
    pretrained: object = None,
) -> WeightsMeta:
    """What a format writes beside the weights about the classes and the weights' source, each
    checked (``checked_class_names``, ``checked_wnids``; ``pretrained`` a registry name, whatever
    a file holds there); an empty list is none."""
    if pretrained is not None and not (isinstance(pretrained, str) and pretrained):
        raise ConfigError(
            f"pretrained: expected the registry name of the weights' source (e.g. "
            f"'ViT-B/16@in21k'), found {reprlib.repr(pretrained)}"
        )
    names, ids = checked_class_names(class_names, cfg), checked_wnids(wnids, cfg)
    return WeightsMeta(
        class_names=None if names is None else tuple(names),
        wnids=None if ids is None else tuple(ids),
        pretrained=pretrained if isinstance(pretrained, str) else None,
    )


def _strings(
    recorded: Mapping[str, object], key: str, cfg: ModelConfig, *, file: str
) -> list[str] | None:
    """The list of strings (one per class) ``recorded`` holds under ``key``, None if it holds
    none; a ``CheckpointError`` naming ``file`` if it holds something else."""
    value = recorded.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise CheckpointError(
            f"{file}: {key}: expected a list of {cfg.num_classes} strings (one per class), found "
            f"{reprlib.repr(value)}"
        )
    return value


def _recorded_run(recorded: object, file: str) -> RunConfig:
    """The run config a checkpoint records, as a ``RunConfig``; a ``CheckpointError`` naming
    ``file`` where it is not one."""
    try:
        return RunConfig.from_dict(recorded)  # type: ignore[arg-type]  # checked there
    except (ConfigError, TypeError) as e:
        raise CheckpointError(f"{file}: run: {e}") from None


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


def recorded_preprocess(recorded: object, cfg: ModelConfig, source: str) -> Preprocess:
    """The ``preprocess`` a checkpoint's metadata records (``Preprocess.to_dict()``), checked as
    ``check_preprocess`` checks what is written; a ``CheckpointError`` naming ``source`` (the
    checkpoint) otherwise."""
    from ..data.transforms import Preprocess

    try:
        preprocess = Preprocess.from_dict(recorded)  # type: ignore[arg-type]  # checked there
    except ConfigError as e:
        raise CheckpointError(f"{source}: preprocess: {e}") from None
    try:
        return check_preprocess(preprocess, cfg)
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
