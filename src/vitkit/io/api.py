"""``vitkit.load`` and ``vitkit.save``: one entry point for every format we read and write; and
``vitkit.read_image``, an image file as a loaded model's checkpoint preprocesses it.

Formats are recognised from what the source is, never from a guess about its contents' values
(a registry name, ``PRESET@TAG``, is pretrained weights: ``io/pretrained.py``):
a vitkit ``VisionTransformer``, a timm or transformers module, a state dict (timm layout, or
official arrays), or a path — our directory (``config.json`` with ``"format": "vitkit"``) or its
``model.safetensors``, a Hugging Face ``save_pretrained`` directory (``"model_type": "vit"``), an official / big_vision
``.npz``, a ``.safetensors`` file or a tensor-only ``.pth``/``.pt``/``.bin``. ``save`` writes
ours, a Hugging Face directory, or an official vit_jax ``.npz``. What the checkpoint records
besides the weights (class names, preprocessing: ``WeightsMeta``) stays with the model ``load``
built and is what ``save`` writes unless told otherwise (``loaded_meta``), so a loaded model
fine-tuned and saved keeps its class names.
"""

from __future__ import annotations

import dataclasses
import os
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

import numpy as np
from torch import Tensor, nn

from ..config import ModelConfig, Posemb, image_size_of, size_hw
from ..config.keys import require_count
from ..errors import ConfigError, MissingFileError, UserFileError
from ..model import ResNetClassifier, VisionTransformer
from .checkpoint import (
    CONFIG_FILE,
    WEIGHTS_FILE,
    CheckpointError,
    build_loaded,
    is_ours,
    read_json,
    read_ours,
    read_safetensors,
    read_torch,
    write_ours,
)

if TYPE_CHECKING:
    from ..data.transforms import Preprocess
    from .metadata import WeightsMeta

Source = str | os.PathLike | nn.Module | Mapping[str, Any]
_TORCH_SUFFIXES = (".pth", ".pt", ".bin")
# What ``load`` read with each model it built, for ``save`` to write back (``loaded_meta``): the
# checkpoint's ``WeightsMeta``, the model's config then, and the head its class names belong to.
# Kept here, not on the model: the model files hold architecture only.
_LOADED: weakref.WeakKeyDictionary[nn.Module, tuple[WeightsMeta, ModelConfig, nn.Module]] = (
    weakref.WeakKeyDictionary()
)


def _read_state(
    state: Mapping[str, Any], *, num_heads: int | None, posemb: str | None, source: str
) -> tuple[ModelConfig, dict[str, Tensor]]:
    """A state dict of any layout we know, recognised by its keys."""
    from .formats.hf import looks_like_hf_state
    from .formats.timm import looks_like_timm_state, read_timm

    if state and all(isinstance(v, np.ndarray) for v in state.values()):
        from .formats.official import read_official

        return read_official(state, posemb=posemb)
    if looks_like_timm_state(state):
        return read_timm(state, num_heads=num_heads)
    if looks_like_hf_state(state):
        raise CheckpointError(
            f"{source} is a Hugging Face ViT state dict without its config: load the directory "
            "written by save_pretrained (it holds config.json) instead"
        )
    sample = ", ".join(list(state)[:4])
    raise CheckpointError(
        f"{source}: unrecognised state dict (first keys: {sample}); expected timm's ViT layout "
        "(patch_embed.proj.weight, ...), official .npz arrays, or a Hugging Face directory"
    )


def _read_path(
    path: Path, *, num_heads: int | None, posemb: str | None
) -> tuple[ModelConfig, dict[str, Tensor], WeightsMeta]:
    from .metadata import WeightsMeta

    if not path.exists():
        raise MissingFileError(f"checkpoint not found: {path}")
    if path.is_dir():
        if is_ours(path):
            return read_ours(path)
        config = path / "config.json"
        if config.is_file() and read_json(config).get("model_type") is not None:
            from .formats.hf import read_hf_dir

            return read_hf_dir(path)
        raise CheckpointError(
            f"{path} is a directory but not a checkpoint: expected config.json with "
            '"format": "vitkit" (ours) or "model_type": "vit" (Hugging Face)'
        )
    if path.name == WEIGHTS_FILE and is_ours(path.parent):
        # our directory's weights: read the directory, whose config.json holds what a state dict
        # cannot (pooling, eps, a non-square grid, class names, preprocessing)
        return read_ours(path.parent)
    suffix = path.suffix.lower()
    if suffix == ".npz":  # official arrays, their names and shapes checked before they are read
        from .formats.official import read_official_file

        cfg, state = read_official_file(path, posemb=posemb)  # arrays only: no metadata
    elif suffix == ".safetensors":
        cfg, state = _read_state(
            read_safetensors(path), num_heads=num_heads, posemb=posemb, source=str(path)
        )
    elif suffix in _TORCH_SUFFIXES:
        cfg, state = _read_state(
            read_torch(path), num_heads=num_heads, posemb=posemb, source=str(path)
        )
    else:
        raise CheckpointError(
            f"{path}: unknown checkpoint type {suffix or '(no suffix)'!r}; expected a directory, "
            ".npz, .safetensors, .pth, .pt or .bin"
        )
    return cfg, state, WeightsMeta()


def read(
    source: Source, *, num_heads: int | None = None, posemb: str | None = None
) -> tuple[ModelConfig, dict[str, Tensor], WeightsMeta]:
    """The config, state dict (vitkit layout) and what travels with the weights a checkpoint
    holds (``io.metadata.WeightsMeta``: what a file records, checked against the model where it
    is read; none for a module or a state dict). ``num_heads`` and ``posemb`` are for the
    checkpoints that do not record them; one that records another value is refused, not
    silently kept."""
    if posemb is not None and posemb not in get_args(Posemb):
        raise ConfigError(f"posemb={posemb!r}: expected one of {', '.join(get_args(Posemb))}")
    if num_heads is not None:
        require_count("num_heads", num_heads)
    cfg, state, meta = _read(source, num_heads=num_heads, posemb=posemb)
    if num_heads is not None and cfg.num_heads != num_heads:
        raise ConfigError(
            f"num_heads={num_heads} but the checkpoint records {cfg.num_heads} heads: the option "
            "is for checkpoints that do not record them; leave it out"
        )
    if posemb is not None and cfg.posemb != posemb:
        raise ConfigError(
            f"posemb={posemb!r} but the checkpoint's position embedding is {cfg.posemb!r}: the "
            "option is for big_vision checkpoints that store none; leave it out"
        )
    return cfg, state, meta


def _read(
    source: Source, *, num_heads: int | None, posemb: str | None
) -> tuple[ModelConfig, dict[str, Tensor], WeightsMeta]:
    """``read`` for each kind of source, the options unchecked."""
    from .metadata import WeightsMeta

    if isinstance(source, VisionTransformer):
        return source.cfg, dict(source.state_dict()), WeightsMeta()
    if isinstance(source, nn.Module):
        origin = type(source).__module__.split(".")[0]
        if origin == "timm":
            from .formats.timm import read_timm_module

            return (*read_timm_module(source), WeightsMeta())
        if origin == "transformers":
            from .formats.hf import read_hf_module

            return (*read_hf_module(source), WeightsMeta())
        raise CheckpointError(
            f"cannot load from a {type(source).__module__}.{type(source).__name__}: expected a "
            "vitkit, timm or transformers ViT"
        )
    if isinstance(source, Mapping):
        state_dict = _read_state(source, num_heads=num_heads, posemb=posemb, source="state dict")
        return (*state_dict, WeightsMeta())
    if isinstance(source, (str, os.PathLike)):
        from .pretrained import is_pretrained_name, read_pretrained

        if is_pretrained_name(str(source)):  # an existing path of that spelling wins
            return read_pretrained(str(source))
        return _read_path(Path(source), num_heads=num_heads, posemb=posemb)
    raise TypeError(
        f"cannot load from {type(source).__name__}: expected a path, module or state dict"
    )


def weights_digest(checkpoint: str | os.PathLike) -> str:
    """What identifies the weights a checkpoint path holds, for a record of results computed
    from them (a transfer's, a VTAB-1k evaluation's) to tell another checkpoint written at the
    same path: the sha256 of its weights file (our directory's or a Hugging Face one's
    ``model.safetensors``, else ``pytorch_model.bin``; a file itself), first 16 hex digits; a
    registry name (``PRESET@TAG``) is its own identity. Empty where there is no such file
    (reading the checkpoint says what is wrong)."""
    from ..files import sha256_of
    from .pretrained import is_pretrained_name

    if is_pretrained_name(str(checkpoint)):
        return str(checkpoint)
    path = Path(checkpoint)
    if path.is_dir():
        path = next(
            (path / n for n in (WEIGHTS_FILE, "pytorch_model.bin") if (path / n).is_file()), path
        )
    return f"sha256:{sha256_of(path)[:16]}" if path.is_file() else ""


def load(
    source: Source,
    *,
    image_size: int | tuple[int, int] | None = None,
    num_heads: int | None = None,
    posemb: Posemb | None = None,
) -> VisionTransformer | ResNetClassifier:
    """Build the model a checkpoint implies and load its weights strictly; returns it in eval mode.

    Args:
        source: a path (our directory or its ``model.safetensors``, a Hugging Face directory,
            ``.npz``, ``.safetensors``, ``.pth``/``.pt``/``.bin``), a state dict, or a vitkit /
            timm / transformers model.
        image_size: resize the position embeddings to this resolution, an int or (height,
            width) (2D bilinear interpolation of the grid with corners aligned, height and width
            separately, as the official ``scipy.ndimage.zoom(order=1)``).
        num_heads: the number of heads, for state dicts that do not record it (timm's fused qkv)
            and match no preset.
        posemb: for big_vision checkpoints that store no position embedding ('sincos2d' default).
    """
    model, _ = load_with_meta(source, image_size=image_size, num_heads=num_heads, posemb=posemb)
    return model


def load_with_meta(
    source: Source,
    *,
    image_size: int | tuple[int, int] | None = None,
    num_heads: int | None = None,
    posemb: Posemb | None = None,
) -> tuple[VisionTransformer | ResNetClassifier, WeightsMeta]:
    """``load``'s model and what travels with its weights (``read``'s ``WeightsMeta``), from one
    read of the checkpoint. With ``image_size``, a recorded ``preprocess`` takes the model's new
    image size, since that is what the model now takes."""
    cfg, state, meta = read(source, num_heads=num_heads, posemb=posemb)
    name = str(source) if isinstance(source, (str, os.PathLike)) else "checkpoint"
    # a ViT, or the ResNet baseline (arch='resnet') from our format; built once the weights fit
    model = build_loaded(cfg, state, source=name)
    if image_size is not None and isinstance(model, VisionTransformer):
        h, w = size_hw(image_size_of(image_size))
        stride = cfg.total_stride
        if h % stride or w % stride:
            raise ConfigError(
                f"image_size={image_size!r} is not a multiple of the model's patch stride "
                f"{stride}: expected each side (height, width) divisible by it"
            )
        too_large = dataclasses.replace(cfg, image_size=(h, w)).why_not_new()
        if too_large is not None:  # before the position embeddings are resized to it
            raise ConfigError(f"image_size={image_size!r} is not valid: {too_large[1]}")
        if (h, w) != cfg.image_hw:
            model.resize_pos_embed((h // stride, w // stride))
            if meta.preprocess is not None:
                resized = dataclasses.replace(meta.preprocess, image_size=model.cfg.image_size)
                meta = dataclasses.replace(meta, preprocess=resized)
    _LOADED[model] = (meta, model.cfg, model.head)
    return model.eval(), meta


def loaded_meta(model: VisionTransformer | ResNetClassifier) -> WeightsMeta:
    """What the checkpoint ``model`` was loaded from records (``load``), as far as it is still true
    of the model: the class names and wnids while it has the head it was loaded with
    (``reset_head`` attaches another, for other classes), the weights' source, and the
    preprocessing at the model's image size now (``resize_pos_embed`` changes it). Not the
    training run, which the weights may since have left. None of them for a model ``load`` did
    not build."""
    from .metadata import WeightsMeta

    found = _LOADED.get(model)
    if found is None:
        return WeightsMeta()
    meta, cfg, head = found
    if model.head is not head:  # reset_head: a new head, whose classes are not the recorded ones
        meta = dataclasses.replace(meta, class_names=None, wnids=None)
    preprocess = meta.preprocess
    if preprocess is not None and model.cfg.image_size != cfg.image_size:
        preprocess = dataclasses.replace(preprocess, image_size=model.cfg.image_size)
    return dataclasses.replace(meta, preprocess=preprocess, run=None)


def read_image(
    path: str | os.PathLike, model: VisionTransformer | ResNetClassifier | Preprocess
) -> Tensor:
    """An image file as ``model`` takes it: a float tensor (1, C, H, W), decoded upright (as its
    EXIF orientation says) and preprocessed as the checkpoint ``model`` was loaded from records
    (``loaded_meta``), else as the official code does at the model's resolution; or as a given
    ``Preprocess``. A file that is not a readable image, or is larger than vitkit reads, is a
    ``VitkitError`` naming it, as ``vitkit predict`` says it."""
    from ..data.image_file import read_image as read_file
    from ..data.transforms import Preprocess
    from .metadata import default_preprocess

    if isinstance(model, Preprocess):
        return read_file(path, model)
    if not isinstance(model, (VisionTransformer, ResNetClassifier)):  # an AttributeError inside
        raise ConfigError(
            f"read_image(path, {type(model).__name__}): expected the model the image is for "
            "(from vitkit.load or vitkit.create_model) or a Preprocess"
        )
    cfg = model.cfg
    preprocess = loaded_meta(model).preprocess or default_preprocess(cfg)
    if preprocess is None:
        raise ConfigError(
            f"a model of {cfg.in_chans} input channels takes no image file (1 or 3 channels): "
            "give its Preprocess"
        )
    return read_file(path, preprocess)


def _check_replaceable(directory: Path, format: str) -> None:
    """A ``UserFileError`` when ``directory`` holds a ``config.json`` that is not a ``format``
    checkpoint's (a run directory's, another program's): writing would replace it. A new or
    empty directory, or a checkpoint of the same format, is written into."""
    config = directory / CONFIG_FILE
    if not config.is_file():
        return
    if format == "vitkit":
        same = is_ours(directory)
    else:  # an HF config names its model_type
        try:
            same = "model_type" in read_json(config)
        except (CheckpointError, OSError):
            same = False
    if not same:
        raise UserFileError(
            f"{directory} holds a config.json that is not a {format} checkpoint's (a run "
            f"directory's, or another program's), which writing would replace: expected a new "
            f"directory or a {format} checkpoint"
        )
    if format == "vitkit" and _records_a_run(config):
        raise UserFileError(
            f"{directory} is a training run's checkpoint: its config.json records the run, which "
            "resuming and `vitkit eval` read and writing would drop: expected a new directory or "
            "a checkpoint that vitkit.save or `vitkit convert` wrote"
        )


def _records_a_run(config: Path) -> bool:
    """Whether our checkpoint's ``config`` records the run that trained it (``vitkit train``'s
    checkpoints and best/ do; ``save`` and ``convert`` write none)."""
    try:
        return read_json(config).get("run") is not None
    except (CheckpointError, OSError):
        return False


def save(
    model: VisionTransformer | ResNetClassifier,
    path: str | os.PathLike,
    *,
    format: Literal["vitkit", "hf", "official"] = "vitkit",
    class_names: Sequence[str] | None = None,
    wnids: Sequence[str] | None = None,
    pretrained: str | None = None,
    preprocess: Preprocess | None = None,
) -> Path:
    """Write ``model`` to the directory ``path``: our format (``model.safetensors`` +
    ``config.json``), or a Hugging Face ``save_pretrained`` directory with ``format='hf'``; or,
    with ``format='official'``, to the file ``path`` (``.npz``) in the official vit_jax layout
    that Google's code and timm's ``.npz`` loader read (io/formats/official.py: what it cannot
    hold is refused, and a model with exact GELU is written with a warning, as Google's code
    computes the tanh GELU).

    ``class_names`` (one per class), ``wnids`` (where the classes are WordNet synsets, as
    ImageNet's: each one's id), ``pretrained`` (the registry name of the weights' source) and
    ``preprocess`` (how an image file becomes the model's input) travel with the weights: in our
    format as ``config.json``'s keys of those names (``preprocess`` as ``Preprocess.to_dict()``),
    as training checkpoints store them; in Hugging Face's as ``id2label`` / ``label2id``, the
    config's ``wnids`` and ``pretrained``, and ``preprocessor_config.json`` (io/formats/hf.py).
    Each one not given is what the checkpoint a model ``load`` built records, as far as it is
    still true of the model (``loaded_meta``: class names and wnids, together, only while it has
    the head it was loaded with); ``class_names=[]`` writes none. Without ``preprocess``
    from either, our format records none (the official preprocessing at the model's resolution
    is assumed on reading) and Hugging Face's gets that one written out. The official format
    holds arrays only: it gets none of them, with a warning when there are any.
    """
    from .metadata import WeightsMeta, check_preprocess, checked_metadata

    if not isinstance(model, (VisionTransformer, ResNetClassifier)):
        raise TypeError(f"save expects a vitkit model, got {type(model).__name__}")
    if not isinstance(path, (str, os.PathLike)):  # pathlib's TypeError from inside
        raise ConfigError(f"save(model, {type(path).__name__}): expected a path to write to")
    loaded = loaded_meta(model)
    if class_names is None and wnids is None:  # a pair: given names have no recorded wnids
        class_names, wnids = loaded.class_names, loaded.wnids
    pretrained = loaded.pretrained if pretrained is None else pretrained
    preprocess = loaded.preprocess if preprocess is None else preprocess
    recorded = checked_metadata(
        model.cfg, class_names=class_names, wnids=wnids, pretrained=pretrained
    )
    if format in ("vitkit", "hf"):
        _check_replaceable(Path(path), format)
    if format == "vitkit":
        if preprocess is not None:
            checked = check_preprocess(preprocess, model.cfg)
            recorded = dataclasses.replace(recorded, preprocess=checked)
        return write_ours(model.cfg, model.state_dict(), path, recorded)
    if format == "hf":
        from .formats.hf import write_hf

        if not isinstance(model, VisionTransformer):
            raise ConfigError(
                "format='hf' holds Vision Transformers only; save a ResNet as 'vitkit'"
            )

        return write_hf(
            model,
            path,
            class_names=recorded.class_names,
            wnids=recorded.wnids,
            pretrained=recorded.pretrained,
            preprocess=preprocess,
        )
    if format == "official":
        import warnings

        from .formats.official import write_official

        out = write_official(model, path)
        if recorded != WeightsMeta() or preprocess is not None:
            warnings.warn(  # the command line shows it as one line
                "the official format holds arrays only: class names, wnids, the source and "
                f"preprocessing are not written to {out}",
                stacklevel=2,
            )
        return out
    raise ConfigError(f"format={format!r} is not known: expected 'vitkit', 'hf' or 'official'")
