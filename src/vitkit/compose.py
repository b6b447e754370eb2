"""From what a command asks for to a ``RunConfig``, and where each value came from.

``vitkit train --data SPEC --model PRESET [--recipe R] [--set key=value ...]``: the recipe gives
the hyperparameters (``scratch`` when none is named); ``--model`` replaces its model section with
a preset's architecture and resolution, keeping the recipe's regularisation; ``--data`` replaces
its dataset and keeps its augmentation; then every other ``--set`` applies. ``vitkit finetune
--init-from CKPT`` takes the checkpoint's architecture (and its data when no ``--data``).
Once the data is read (``adapt``), it decides the classes and channels unless set, and the
settings a recipe sizes by the number of training images; then the machine decides what the
config leaves to it (``decided_on``). Every value keeps its origin (``recipe scratch``,
``preset ViT-S/16``, ``--set``, ``data``, ``auto on cuda``, ...), which the run states.
``prepare`` is the one path from a command, or ``vitkit.fit``, to what ``train_prepared`` takes:
the run prepared once (train/prepare.py); a ``RunConfig`` given whole is composed by ``given``.
No torch import until then.
"""

from __future__ import annotations

import dataclasses
import glob
import hashlib
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from .config import (
    DATA_SPECS,
    DataConfig,
    ModelConfig,
    RunConfig,
    data_source,
    hf_is_local,
    normalise_data,
    parse_set,
    replace,
    to_dict,
)
from .config.dicts import check_new
from .config.model import FINETUNE_KEYS, REGULARISATION
from .config.overrides import split_set
from .config.run import PLACEMENT
from .errors import ConfigError, DataError, MissingFileError, VitkitError
from .presets import get_config, resolve_name
from .recipes import Recipe, find_recipe
from .train.prepare import PreparedRun

if TYPE_CHECKING:
    import torch

    from .data.run_data import RunData
    from .train.rundir import RunLock
    from .train.state import RunRecord

# The model keys the data decides unless they are set.
FROM_DATA = ("model.num_classes", "model.in_chans")


class DataBuilder(Protocol):
    """What reads a run's data from its config: ``data.run_data.build_data``, or a protocol's
    own staging of it (``vtab.stage_data``)."""

    def __call__(
        self, cfg: DataConfig, model: ModelConfig, *, seed: int, in_chans: int | None
    ) -> RunData: ...


@dataclass(frozen=True)
class Request:
    """What a ``vitkit train`` or ``vitkit finetune`` command asks for."""

    recipe: str | None = None
    model: str | None = None  # a preset name (--model)
    data: str | None = None  # a data spec (--data)
    sets: tuple[str, ...] = ()  # --set key=value, as typed
    objective: str | None = None  # --objective
    init_from: str | None = None  # finetune: the pre-trained checkpoint


@dataclass(frozen=True)
class Composed:
    """A run's config, its recipe, the origin of every value (dotted key -> 'recipe scratch',
    'preset ViT-S/16', '--set', ...) and the keys the user fixed (the data never changes them)."""

    run: RunConfig
    recipe: Recipe
    origin: dict[str, str]
    fixed: frozenset[str] = field(default_factory=frozenset)

    def with_values(self, values: Mapping[str, Any], origin: str) -> Composed:
        """This config with ``values`` (dotted keys) set, recorded as coming from ``origin``."""
        if not values:
            return self
        run = replace(self.run, values)
        given = {**self.origin, **dict.fromkeys(values, origin)}
        # a section set to none, or from none, changes the keys: each keeps its own origin, a
        # new one takes its section's
        keys = flat(run.to_dict())
        return dataclasses.replace(
            self,
            run=run,
            origin={k: given.get(k, given.get(k.rsplit(".", 1)[0], origin)) for k in keys},
        )


def _each_key(run: RunConfig, origin: Mapping[str, str], default: str) -> dict[str, str]:
    """The origin of every key of ``run``: its own, else its section's (a section set to a
    value, e.g. ``model.resnet``, is where its keys came from), else ``default``."""
    out = {}
    for key in flat(run.to_dict()):
        section = key.rsplit(".", 1)[0]
        out[key] = origin.get(key) or origin.get(section) or default
    return out


def flat(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A nested config dict as {dotted key: value}."""
    out: dict[str, Any] = {}
    for k, v in data.items():
        if isinstance(v, Mapping):
            out.update(flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def check_data_exists(spec: str) -> None:
    """A one-line error, before anything is imported, for a data folder that does not exist (a
    Hub dataset's name is looked up when the data is read)."""
    source = data_source(spec)
    if source.kind == "hf" and source.path is not None:
        path = os.path.expanduser(source.path)
        if hf_is_local(source.path) and not glob.glob(path):
            raise MissingFileError(
                f"data: hf:{source.path} not found (expected a save_to_disk folder, a folder of "
                "parquet files, a .parquet file or a glob of them; a Hub name has no leading "
                "'/', '.' or '~')"
            )
        return
    if source.path is not None and not Path(source.path).expanduser().is_dir():
        what = "image folder" if source.kind == "folder" else f"{source.kind} folder"
        raise MissingFileError(f"data: {what} {source.path} not found (expected {DATA_SPECS})")


def check_run_data_exists(run: RunConfig) -> None:
    """``check_data_exists`` for every data a run reads: ``data.dataset`` and each of
    ``train.fewshot_data``."""
    for spec in (run.data.dataset, *run.train.fewshot_data):
        check_data_exists(spec)


def _preset_or_data(
    sets: tuple[str, ...], flag: str | None, name: str
) -> tuple[str | None, list[str]]:
    """``--set NAME=X`` pulled out of ``sets`` (the same as the flag ``--NAME X``); the rest."""
    rest, chosen = [], flag
    for item in sets:
        key, text = split_set(item)
        if key != name:
            rest.append(item)
            continue
        if chosen is not None and chosen != text:
            raise ConfigError(f"--{name} {chosen} and --set {name}={text} disagree: give one")
        chosen = text
    return chosen, rest


def _model_section(run: RunConfig, model: ModelConfig) -> RunConfig:
    """``run`` with ``model``'s architecture and resolution and ``run``'s regularisation."""
    kept = {k: getattr(run.model, k) for k in REGULARISATION}
    return dataclasses.replace(run, model=dataclasses.replace(model, **kept))


def _model_origins(run: RunConfig, origin: str) -> dict[str, str]:
    """``origin`` for every model key but the regularisation (which stays the recipe's)."""
    keys = flat(run.model.to_dict(), "model.")
    return {k: origin for k in keys if k.split(".")[1] not in REGULARISATION}


def compose(
    request: Request,
    *,
    checkpoint: ModelConfig | None = None,
    checkpoint_data: str | None = None,
) -> Composed:
    """The run ``request`` asks for (see the module docstring). For fine-tuning, ``checkpoint``
    is the pre-trained model's config and ``checkpoint_data`` the data spec it records, if any."""
    finetuning = request.init_from is not None
    data_origin = "--data"
    model_name, sets = _preset_or_data(request.sets, request.model, "model")
    data_spec, sets = _preset_or_data(tuple(sets), request.data, "data")
    if request.recipe is None and data_spec is None and not finetuning:
        raise ConfigError(
            "say what to train on: --data DIR (a folder of class folders), or another spec "
            f"({DATA_SPECS}); or --recipe NAME (`vitkit train --help` lists them)"
        )
    recipe = find_recipe(request.recipe or ("finetune" if finetuning else "scratch"))
    run = recipe.build()
    origin = dict.fromkeys(flat(run.to_dict()), f"recipe {recipe.name}")

    if finetuning:
        assert checkpoint is not None  # the caller reads it
        if model_name is not None:
            raise ConfigError(
                f"--model {model_name}: fine-tuning keeps the checkpoint's architecture; set "
                f"{', '.join(f'model.{k}' for k in FINETUNE_KEYS)} to change what may change"
            )
        # the checkpoint's architecture and resolution, without its pre-logits; the classes are
        # the data's, and a named recipe's until the data is read (its synthetic images have
        # the model's)
        # a named recipe's resolution too, as fine-tuning took it before (finetune-paper: 384)
        named = {"num_classes": run.model.num_classes, "image_size": run.model.image_size}
        kept = named if request.recipe else {"num_classes": checkpoint.num_classes}
        pretrained = dataclasses.replace(checkpoint, representation_size=None, **kept)
        run = _model_section(run, pretrained)
        origin |= _model_origins(run, "checkpoint")
        origin["model.representation_size"] = "fine-tuning (the pre-logits are dropped)"
        if request.recipe:
            origin |= {f"model.{k}": f"recipe {recipe.name}" for k in named}
        if data_spec is None and request.recipe is None:  # the recipe's data, else the checkpoint's
            if checkpoint_data is None:
                raise ConfigError(
                    f"{request.init_from} records no training data: say what to fine-tune on "
                    f"with --data ({DATA_SPECS})"
                )
            data_spec, data_origin = checkpoint_data, "checkpoint"
    elif model_name is not None:
        preset = resolve_name(model_name)
        run = _model_section(run, get_config(preset))
        origin |= _model_origins(run, f"preset {preset}")
    if data_spec is not None:
        data = dataclasses.replace(run.data, dataset=normalise_data(data_spec))
        run = dataclasses.replace(run, data=data)
        origin["data.dataset"] = data_origin
    # every key of the run: a preset's hybrid section replaces a recipe's none
    composed = Composed(run, recipe, _each_key(run, origin, f"recipe {recipe.name}"))
    if request.init_from is not None:
        composed = composed.with_values({"init_from": request.init_from}, "--init-from")
    if request.objective == "mpp":  # self-supervised: no label smoothing, mixing or erasing
        off = {"train.label_smoothing": 0.0, "train.mixup": 0.0, "train.cutmix": 0.0}
        composed = composed.with_values(
            {"train.objective": "mpp", **off, "data.random_erase": 0.0}, "--objective mpp"
        )
    elif request.objective is not None:
        composed = composed.with_values({"train.objective": request.objective}, "--objective")

    overrides = parse_set(RunConfig, sets)  # a data spec as recorded (config.normalise_data)
    if finetuning:
        _check_finetune_keys(overrides, composed.run.model)
    fixed = set(overrides) | ({"model.in_chans"} if finetuning else set())  # the checkpoint's
    return dataclasses.replace(composed.with_values(overrides, "--set"), fixed=frozenset(fixed))


def given(run: RunConfig) -> Composed:
    """A ``RunConfig`` given whole (``vitkit.fit(run)``): every value in it is set, as a
    ``--set`` is: the data decides none of them (the loop checks its classes against the data's)
    and no recipe sizes any; only what it leaves to the machine is decided (``decided_on``), and
    an ``auto`` precision is kept from the run directory where it records one (``as_recorded``)."""
    keys = flat(run.to_dict())
    recipe = Recipe("given", "a RunConfig given whole", lambda: run)
    return Composed(run, recipe, dict.fromkeys(keys, "given"), frozenset(keys))


def _check_finetune_keys(overrides: Mapping[str, Any], model: ModelConfig) -> None:
    """Fine-tuning may change the head, the resolution and the regularisation; an architecture
    key may be set only to the checkpoint's own value."""
    for dotted, value in overrides.items():
        section, _, name = dotted.partition(".")
        if section != "model" or name in FINETUNE_KEYS:
            continue
        current = flat(to_dict(model)).get(name)
        if name == "representation_size" and value is not None:
            raise ConfigError(
                f"{dotted}={value!r}: fine-tuning replaces the checkpoint's head, pre-logits "
                "included, with one zero-initialised linear layer [P §3.1]; leave it unset"
            )
        if value != current and not (isinstance(current, list) and tuple(current) == value):
            raise ConfigError(
                f"{dotted}={value!r}: fine-tuning keeps the checkpoint's architecture "
                f"({name}={current!r}); only {', '.join(f'model.{k}' for k in FINETUNE_KEYS)} "
                "can change"
            )


def adapt(
    composed: Composed,
    *,
    num_classes: int,
    channels: int | None,
    train_size: int,
    world: int = 1,
) -> Composed:
    """The config once the data is read: its number of classes and channels (None: not known
    yet) where the user set none, and the settings the recipe sizes by the number of training
    images (a batch size a multiple of the ``world`` processes that split it)."""
    out = composed
    derived = {"model.num_classes": num_classes}
    if channels is not None:
        derived["model.in_chans"] = channels
    out = out.with_values({k: v for k, v in derived.items() if k not in out.fixed}, "data")
    if out.recipe.sized is not None:
        given = out.run.train.duration if "train.duration" in out.fixed else None
        pretrained = out.run.init_from is not None
        schedule, why = out.recipe.sized(train_size, given, pretrained)
        if "train.batch_size" in schedule:
            schedule["train.batch_size"] = max(world, schedule["train.batch_size"] // world * world)
        sized = {k: v for k, v in schedule.items() if k not in out.fixed}
        origin = f"recipe {out.recipe.name}, for {train_size:,} training images"
        if given is not None:
            origin = f"recipe {out.recipe.name}, for train.duration={given}"
        if why is not None:
            origin += f" ({why})"
        out = out.with_values(sized, origin)
    return out


# What a run directory's config.json keeps for the runs that continue it, unless the command
# sets it: decisions made once, by the data or the machine.
RECORDED = ("model.in_chans", "data.validation", "train.precision", "train.compile")


def as_recorded(composed: Composed, record: RunRecord) -> Composed:
    """A run directory that holds a run keeps the decisions its config records where the command
    sets none (``RECORDED``): its channels (greyscale or not, decided once; a folder was read as
    RGB before the data decided them), the split that validates it (files written before
    ``data.validation`` read as the rule of that time), its arithmetic and whether its step is
    compiled (``auto`` decided once, when it started: a resume does not decide again, and
    continues exactly). A new directory that continues another run's checkpoint (``--resume``)
    keeps what that run decided for what the command leaves ``auto``. ``record``: the run
    directory's, read once (``RunRecord``)."""
    given = flat(composed.run.to_dict())
    config, where = record.config, record.run_dir / "config.json"
    keys = [k for k in RECORDED if k not in composed.fixed or given[k] == "auto"]
    if config is None and record.resume_from is not None:
        config, where = _checkpoint_run(record.resume_from), record.resume_from / "config.json"
        keys = [k for k in RECORDED if given[k] == "auto"]
    if config is None:
        return composed
    try:
        saved = flat(RunConfig.from_dict(config).to_dict())
    except (ValueError, TypeError):
        return composed  # the loop refuses it, saying why (``check_run_dir``)
    keep = {k: saved[k] for k in keys}
    recorded = composed.with_values(keep, f"recorded in {where}")
    return dataclasses.replace(recorded, fixed=recorded.fixed | set(keep))


def _checkpoint_run(checkpoint: Path) -> dict[str, Any] | None:
    """The run config a checkpoint records, None where it records none or cannot be read (the
    resume refuses it, saying why: ``train.state.training_checkpoint``)."""
    from .io.checkpoint import read_our_config

    try:
        _, meta = read_our_config(checkpoint, own_run=True)
    except VitkitError:
        return None
    return None if meta.run is None else meta.run.to_dict()


def on_this_machine(composed: Composed) -> tuple[Composed, torch.device]:
    """The values ``composed`` leaves to the machine decided for this process's device
    (``decided_on``), and that device. Imports torch."""
    from .runtime import machine

    device = machine.this_device(composed.run.train.device)
    return decided_on(composed, device), device


def decided_on(composed: Composed, device: torch.device) -> Composed:
    """The values ``composed`` leaves to the machine (``runtime.machine.decide``: the precision
    of ``auto``, the workers of none), decided for ``device``, each with its origin."""
    from .model.flops import count_flops
    from .runtime import machine

    run = composed.run
    decided = machine.decide(run, device, image_flops=count_flops(run.model))
    for key, (value, origin) in decided.items():
        composed = composed.with_values({key: value}, origin)
    return composed


@dataclass(frozen=True, kw_only=True)
class ComposedRun(PreparedRun):
    """A command's run, prepared (``prepare``): what ``train_prepared`` takes, with the
    ``Composed`` its ``run`` is (the origin of every value, the recipe), which the command
    states."""

    composed: Composed


def prepare(
    composed: Composed,
    run_dir: Path,
    *,
    lock: RunLock,
    resume_from: str | Path | None = None,
    world: int = 1,
    build: DataBuilder | None = None,
) -> ComposedRun:
    """The run ``composed`` asks for in ``run_dir`` (continuing ``resume_from``, another run's
    checkpoint, where the directory holds none), prepared once: this process's device, the run
    directory's record (``as_recorded``), the data read by ``build`` (None: ``build_data``) in
    the class order the run resumes with, and the config ``adapt``-ed to it (``world``
    processes) and decided for the device (``decided_on``): what ``vitkit train``, ``vitkit
    transfer`` and ``vitkit vtab`` train. ``lock``: the run directory's, held by the caller.
    Imports torch (the data's readers)."""
    from .data.run_data import RESUMED, another_order, build_data
    from .train import distributed
    from .train.state import RunRecord

    device = distributed.resolve_device(composed.run.train.device)  # fails fast
    record = RunRecord.read(run_dir, resume_from)
    composed = as_recorded(composed, record)
    run = composed.run
    check_new(run, record.config)  # a new run's bounds, before any data is read
    fixed = "model.in_chans" in composed.fixed  # else the data's channels
    in_chans = run.model.in_chans if fixed else None
    order = record.class_names  # a resumed run's, which it trained with
    if build is None:  # put in that order before a holdout is drawn: the images the run saw
        data = build_data(
            run.data, run.model, seed=run.train.seed, in_chans=in_chans, class_order=order
        )
    else:  # a protocol's staging, its holdout as drawn
        data = build(run.data, run.model, seed=run.train.seed, in_chans=in_chans)
        if order is not None and another_order(order, data.classes):
            data = data.in_class_order(order, RESUMED)
    if run.train.objective == "classification" and len(data.classes) < 2:
        raise DataError(
            f"{run.data.dataset} holds {len(data.classes)} class "
            f"({', '.join(map(repr, data.classes))}): a classifier trains on at least 2, a "
            "folder of images per class"
        )
    composed = adapt(
        composed,
        num_classes=len(data.classes),
        channels=data.channels,
        train_size=len(data.train),
        world=world,
    )
    composed = decided_on(composed, device)
    from .runtime.machine import check_fits_memory

    check_fits_memory(composed.run.model, device)
    return ComposedRun(
        run=composed.run, data=data, device=device, record=record, lock=lock, composed=composed
    )


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def default_run_dir(request: Request, composed: Composed) -> Path:
    """``runs/<recipe>[-<model>][-<data>][-<hash>]``: named after what the command chose, with a
    short hash of its data's absolute path and its --set items as read, but those a resume may
    change (``PLACEMENT``): the same for the same command, and for one with a larger
    ``train.time_budget`` (so that running it again resumes)."""
    parts = [composed.recipe.name]
    if request.init_from is not None:  # runs/x/best -> x, ViT-B_16.npz -> ViT-B_16
        weights = Path(request.init_from)
        generic = weights.name == "best" or weights.name.startswith("step_")
        if "@" in request.init_from:  # pretrained weights by name: ViT-B/16@in21k
            parts.append(request.init_from)
        else:
            parts.append(weights.parent.name if generic else weights.stem)
    else:
        model_name, _ = _preset_or_data(request.sets, request.model, "model")
        if model_name is not None:
            parts.append(resolve_name(model_name))
    data_spec, sets = _preset_or_data(request.sets, request.data, "data")
    if data_spec is not None:
        source = data_source(data_spec)
        parts.append(
            Path(source.path).name if source.kind == "folder" and source.path else source.kind
        )
    name = "-".join(_slug(p) for p in parts if _slug(p))
    # the settings a resume may change (where the run computes, its time budget) name no run
    others = {
        k: v
        for k, v in parse_set(RunConfig, [s for s in sets if split_set(s)[0] != "model"]).items()
        if k not in PLACEMENT
    }
    if request.objective:
        others["objective"] = request.objective
    if data_spec is not None:  # two folders of one name are two runs
        others["data"] = normalise_data(data_spec)
    if others:  # the settings as read, not as typed: 'a=1' and 'a = 1' are one run
        text = json.dumps(others, sort_keys=True, default=str)
        name += "-" + hashlib.sha256(text.encode()).hexdigest()[:6]
    return Path("runs") / name
