"""vitkit: the Vision Transformer of Dosovitskiy et al., "An Image is Worth 16x16 Words" (ICLR 2021).

Public API::

    import vitkit
    model = vitkit.create_model("ViT-B/16", num_classes=10)
    vitkit.list_models("ViT-L/*")
    vitkit.fit(recipe="smoke", run_dir="runs/smoke")      # vitkit train, from Python
    model = vitkit.load("ViT-B_16.npz", image_size=384)   # official, big_vision, timm, HF, ours
    vitkit.save(model, "runs/b16")                        # model.safetensors + config.json
    model, meta = vitkit.load_with_meta("runs/b16")       # meta.class_names, meta.preprocess
    image = vitkit.read_image("shoe.jpg", model)          # (1, C, H, W), upright, as recorded
    fast = vitkit.optimize_for_inference(model)           # compiled, frozen weights, auto precision
    run = vitkit.Inference.open("runs/b16").prepare(batch=32)  # a checkpoint, engine decided

Submodules are imported lazily, so ``import vitkit`` does not import torch until a model is built.
It sets one thing for the whole process: glibc's malloc keeps freed memory for reuse, as the
``vitkit`` command's jemalloc does (``runtime.allocator.keep_freed_memory``; ``VITKIT_MALLOPT=0``
leaves glibc's defaults).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .config import (
    FINETUNE_KEYS,
    Activation,
    Classifier,
    ImageSize,
    ModelConfig,
    Objective,
    Posemb,
    ResNetConfig,
    RunConfig,
)
from .errors import ConfigError
from .presets import list_models
from .runtime.allocator import keep_freed_memory
from .version import __version__

# a library cannot preload jemalloc: without this, a plain process's forward passes page-fault
# their activations in again at every call (a third slower; benchmarks/allocator.py)
keep_freed_memory()

if TYPE_CHECKING:
    from pathlib import Path

    from .inference import Inference
    from .inference.compiled import optimize_for_inference
    from .io.api import load, load_with_meta, read_image, save
    from .model import ResNetClassifier, VisionTransformer
    from .train.loop import RunResult


class _Preset:
    """The type of ``PRESET``: one instance, named as the signature writes it."""

    def __repr__(self) -> str:
        return "PRESET"  # help() and inspect.signature show the name, not <object at 0x...>


# The default of an override whose None means something (representation_size=None removes the
# pre-logits layer): "leave the preset's (or the config's) value". Named, not object(), so the
# signature reads the same in the source, the reference page and help().
PRESET: Any = _Preset()


def create_model(
    name: str | ModelConfig,
    *,
    num_classes: int | None = None,
    image_size: ImageSize | None = None,
    img_size: ImageSize | None = None,
    patch_size: int | None = None,
    in_chans: int | None = None,
    classifier: Classifier | None = None,
    representation_size: int | None = PRESET,
    dropout_rate: float | None = None,
    attention_dropout_rate: float | None = None,
    drop_path_rate: float | None = None,
    posemb: Posemb | None = None,
    act: Activation | None = None,
    layer_norm_eps: float | None = None,
    pretrained: bool | str = False,
) -> VisionTransformer | ResNetClassifier:
    """Build a freshly initialised model (official initialisation) from a preset name or config.

    ``name`` is a preset (``ViT-B/16``), an alias (``vit_b16``, timm's ``vit_base_patch16_224``),
    any ``ViT-<size>/<patch>``, or a ``ModelConfig``: the model it describes, as timm's
    ``create_model`` builds whatever architecture it is named (a preset is a Vision Transformer;
    a config with ``arch='resnet'`` is the paper's ResNet baseline, as ``vitkit.load`` returns it
    from a checkpoint). Keyword arguments override the preset;
    ``num_classes=0`` builds a headless feature extractor; ``image_size`` may be (height, width).
    timm's spellings are accepted: ``img_size`` is ``image_size``, and ``patch_size`` replaces the
    preset's patch size (a hybrid's: the patch on the ResNet's feature map), so
    ``create_model("vit_base_patch16_224", img_size=32, patch_size=8)`` builds what timm builds.
    An override left at None keeps the preset's value; ``representation_size``, whose None
    removes the pre-logits layer, keeps it when left at its default, ``vitkit.PRESET``.

    ``pretrained``: the preset's published weights (``vitkit pretrained`` lists them), a tag
    (``"in21k"``, ``"augreg-in21k-in1k-384"``) or ``True`` for the preset's default (its
    ImageNet-21k pre-training; ``io.pretrained.DEFAULT_TAG``), downloaded once into the cache.
    With another ``num_classes`` the head is replaced, zero-initialised (the pre-logits dropped,
    as fine-tuning does); with another ``image_size`` the position embeddings are resized (2D,
    as the official code); dropout rates may be set; the architecture is the weights'.
    """
    from .config import replace
    from .config.dicts import check_new
    from .model import build_model
    from .presets import get_config

    if image_size is not None and img_size is not None:
        raise ConfigError(
            f"image_size={image_size!r} and img_size={img_size!r}: expected one of them "
            "(img_size is timm's spelling of image_size)"
        )
    if not isinstance(name, (str, ModelConfig)):
        raise ConfigError(
            f"name={name!r}: expected a preset's name (e.g. 'ViT-B/16', see vitkit.list_models) "
            "or a ModelConfig"
        )
    cfg = name if isinstance(name, ModelConfig) else get_config(name)
    given = {
        "num_classes": num_classes,
        "image_size": image_size if img_size is None else img_size,
        "patch_size": patch_size,
        "in_chans": in_chans,
        "classifier": classifier,
        "dropout_rate": dropout_rate,
        "attention_dropout_rate": attention_dropout_rate,
        "drop_path_rate": drop_path_rate,
        "posemb": posemb,
        "act": act,
        "layer_norm_eps": layer_norm_eps,
    }
    overrides: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
    if representation_size is not PRESET:
        overrides["representation_size"] = representation_size
    if pretrained is not False:
        if isinstance(name, ModelConfig):
            raise ConfigError("pretrained= needs a preset name, not a ModelConfig")
        return _pretrained(name, pretrained, overrides)
    if overrides:
        cfg = replace(cfg, overrides)
    check_new(cfg, None)  # a new run's bounds: 10^9 classes asked 768 GB of torch
    return build_model(cfg)


def _pretrained(name: str, tag: bool | str, overrides: dict[str, Any]) -> VisionTransformer:
    """``create_model(name, pretrained=tag, **overrides)``: the weights, adapted as timm does."""
    from .io.adapt import adapt_pretrained
    from .io.api import load
    from .io.pretrained import for_preset
    from .model import VisionTransformer

    fixed = sorted(k for k in overrides if k not in FINETUNE_KEYS)
    if fixed:
        raise ConfigError(
            f"{', '.join(fixed)}: pretrained weights fix the architecture; only "
            f"{', '.join(FINETUNE_KEYS)} can be given with pretrained="
        )
    entry = for_preset(name, tag)
    model = adapt_pretrained(load(entry.name), overrides, source=entry.name, as_published=True)
    assert isinstance(model, VisionTransformer)  # every registry entry is a ViT
    return model


def fit(
    run: RunConfig | None = None,
    *,
    run_dir: str | Path,
    recipe: str | None = None,
    model: str | None = None,
    data: str | None = None,
    sets: Sequence[str] = (),
    objective: Objective | None = None,
    resume_from: str | Path | None = None,
    progress: bool = True,
) -> RunResult:
    """Train (or resume, or evaluate again when finished) a run in ``run_dir`` by the path
    ``vitkit train`` takes (``compose``, ``compose.prepare``, ``train_prepared``); its final
    evaluation (``RunResult``: ``split``, ``evaluation.accuracy``, ...).

    The run is what the command's flags name: ``recipe`` (``--recipe``), ``model`` (a preset,
    ``--model``), ``data`` (a data spec, ``--data``), ``sets`` (``--set`` items,
    ``"key=value"``) and ``objective``; the data then decides the classes, the channels and
    what a recipe sizes by it, unless set. Or it is ``run``, a ``RunConfig`` given whole: every
    value in it is set, so the data decides none (``compose.given``). Either way the machine
    decides what the config leaves to it, and a run of ``auto`` precision keeps the one its
    directory records. ``resume_from``: another run's checkpoint (``checkpoints/step_N``) to
    continue where ``run_dir`` holds none. Under torchrun, every process calls it inside
    ``train.distributed.process_group``. A process that trains in ``run_dir`` already is a
    one-line error naming it, before the directory is read. The run's clock (metrics.jsonl's
    ``run_s``, ``train.time_budget``) starts at the call, where the command's starts with its
    process.
    """
    import dataclasses
    import reprlib
    from pathlib import Path

    from .compose import Request, check_run_data_exists, compose, given, prepare
    from .runtime.clock import process_seconds
    from .train import distributed
    from .train.loop import train_prepared
    from .train.rundir import RunLock

    if run is not None and not isinstance(run, RunConfig):  # a dict failed deep inside
        raise ConfigError(
            f"fit(run={reprlib.repr(run)}): expected a RunConfig (vitkit.config), or no run and "
            "the recipe, model, data and sets that compose one"
        )
    # one "key=value" would be read as one key per character, a dict as its keys; None, 5 and
    # a Path failed deep inside
    if isinstance(sets, (str, Mapping)) or not isinstance(sets, Iterable):
        raise ConfigError(
            f"sets={reprlib.repr(sets)}: expected a list of 'key=value' items"
            + (
                " (a dict: [f'{k}={v}' for k, v in sets.items()])"
                if isinstance(sets, Mapping)
                else ""
            )
        )
    sets = list(sets)
    wrong = next((item for item in sets if not isinstance(item, str)), None)
    if wrong is not None:
        raise ConfigError(f"sets: {reprlib.repr(wrong)} is not a 'key=value' item (a str)")
    flags = {"recipe": recipe, "model": model, "data": data, "objective": objective}
    for name, value in flags.items():
        if value is not None and not isinstance(value, str):
            raise ConfigError(f"{name}={reprlib.repr(value)}: expected a str, or None")
    if not isinstance(run_dir, (str, os.PathLike)):
        raise ConfigError(f"run_dir={reprlib.repr(run_dir)}: expected a folder's path")
    named = [k for k, v in flags.items() if v is not None] + (["sets"] if sets else [])
    if run is not None and named:
        raise ConfigError(
            f"fit(run, {', '.join(f'{k}=' for k in named)}): a RunConfig is the whole run; "
            "give it alone, or the recipe, model, data and sets that compose one"
        )
    if run is None:
        request = Request(
            recipe=recipe, model=model, data=data, sets=tuple(sets), objective=objective
        )
        composed = compose(request)
    else:
        composed = given(run)
    started_s = process_seconds()  # the run's clock starts here, not at the process's start
    check_run_data_exists(composed.run)  # a one-line error for a missing folder, as the command
    run_dir = Path(run_dir)
    with RunLock(run_dir, enabled=distributed.is_main()) as lock:
        prepared = prepare(
            composed,
            run_dir,
            lock=lock,
            resume_from=resume_from,
            world=distributed.world_size(),
        )
        prepared = dataclasses.replace(prepared, started_s=started_s)
        # the banner says why a precision left to vitkit is what it is (the command says it
        # with the run's other choices)
        if composed.run.train.precision == "auto":
            why = prepared.composed.origin["train.precision"]
            prepared = dataclasses.replace(prepared, precision_why=why)
        return train_prepared(prepared, progress=progress)


def __getattr__(name: str) -> Any:
    """``load``, ``load_with_meta``, ``read_image`` and ``save`` come from ``vitkit.io.api``,
    ``Inference`` and ``optimize_for_inference`` from ``vitkit.inference``, imported on first
    use."""
    if name in ("load", "load_with_meta", "read_image", "save"):
        from .io import api

        return getattr(api, name)
    if name == "Inference":
        from .inference import Inference

        return Inference
    if name == "optimize_for_inference":
        from .inference.compiled import optimize_for_inference

        return optimize_for_inference
    raise AttributeError(f"module 'vitkit' has no attribute {name!r}")


__all__ = [
    "PRESET",
    "Inference",
    "ModelConfig",
    "ResNetConfig",
    "__version__",
    "create_model",
    "fit",
    "list_models",
    "load",
    "load_with_meta",
    "optimize_for_inference",
    "read_image",
    "save",
]
