"""Checkpoints of a training run: written atomically, resumed exactly.

A run directory holds::

    .lock                        held by the process that trains in it (rundir.py)
    config.json                  the resolved RunConfig
    metrics.jsonl                one JSON object per logged step / evaluation
    checkpoints/step_00001200/   model.safetensors + config.json (our format) + state.pt
    best/                        the weights with the best validation accuracy so far (our format)
    skipped_images.txt           the image files skipped as unreadable, and why (if any)

``state.pt`` holds ``TrainState``'s fields: the optimizer, the EMA weights, the objective's own
weights (masked patch prediction), the step, the best score, the log window's running sums, the
run's time so far, the global RNG state (dropout), with the GPU's when the run computes on
CUDA, and whether the step's evaluation is still due (a stop request dropped it); it is read with
``torch.load(weights_only=True)``. Every tensor is written from the CPU, so a checkpoint does
not depend on the device that wrote it. The data position needs no storage: batch order and
augmentation are functions of (seed, epoch, batch). A checkpoint directory is written under a
temporary name and renamed, so a run killed at any moment leaves either the previous checkpoint
or the new one, never half of one.
"""

from __future__ import annotations

import json
import pickle
import re
import shutil
import zipfile
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, TypedDict

import torch
from torch import Tensor, nn

from ..compat import upgrade_state
from ..config import ModelConfig
from ..config.run import PLACEMENT
from ..errors import UserFileError
from ..files import atomic_directory, atomic_write, remove_partial_directories
from ..io.checkpoint import (
    CONFIG_FILE,
    WEIGHTS_FILE,
    CheckpointError,
    check_finite,
    check_unchanged,
    read_json,
    read_our_config,
    read_ours,
    save_torch,
    write_ours,
)
from ..io.metadata import WeightsMeta
from . import distributed
from .metrics_log import METRICS_FILE, read_records

STATE_FILE = "state.pt"
SKIPPED_FILE = "skipped_images.txt"  # the image files a run skipped, and why
CHECKPOINTS = "checkpoints"


@dataclass(frozen=True)
class LiveRun:
    """The objects of a running training whose state a checkpoint keeps besides the model's
    weights (``model.safetensors``)."""

    objective: nn.Module  # the model with its objective: what the optimizer's state is keyed by
    optimizer: Any  # torch.optim.Optimizer or MuonWithAdamW
    ema: nn.Module | None
    mpp: nn.Module | None  # masked patch prediction's mask embedding and head
    device: torch.device
    scaler: Any = None  # fp16's torch.amp.GradScaler


class WindowSums(TypedDict):
    """The log window's running sums (``_Window`` in loop.py), as checkpoints keep them, with
    ``seconds``, its training time so far."""

    loss: float
    accuracy: float
    n: int
    images: int
    seconds: float


@dataclass
class TrainState:
    """Everything a resumed run needs besides the model's weights: ``state.pt``, whose keys are
    these fields, in this order (what an earlier vitkit did not write is filled in by
    vitkit.compat). ``capture`` and ``restore`` are the only places that read and write the live
    run's objects."""

    step: int
    best: float
    optimizer: dict[str, Any]
    ema: dict[str, Tensor] | None
    rng: Tensor
    window: WindowSums  # the running sums of the log window, so resumed logs match
    objective: dict[str, Tensor] | None  # masked patch prediction's mask embedding and head
    cuda_rng: Tensor | None  # the GPU's RNG (dropout, masks) when the run computes on CUDA
    seconds: float  # the run's time so far, summed over the processes that resumed it
    scaler: dict[str, Any] | None  # fp16's gradient scaler (scale, growth tracker)
    # the evaluation due at ``step`` is not done: a stop request dropped it, the resumed run does it
    eval_due: bool

    @classmethod
    def capture(
        cls,
        run: LiveRun,
        *,
        step: int,
        best: float,
        window: WindowSums,
        seconds: float,
        eval_due: bool = False,
    ) -> TrainState:
        """The state of ``run`` after ``step`` steps and ``seconds`` of its time (every process
        gathers its shards); ``eval_due``: saved without the evaluation due at ``step``."""
        return cls(
            step=step,
            best=best,
            optimizer=distributed.optimizer_state(run.objective, run.optimizer),
            ema=distributed.model_state(run.ema) if run.ema is not None else None,
            rng=torch.get_rng_state(),
            window=window,
            objective=distributed.model_state(run.mpp) if run.mpp is not None else None,
            cuda_rng=torch.cuda.get_rng_state(run.device) if run.device.type == "cuda" else None,
            seconds=seconds,
            scaler=run.scaler.state_dict() if run.scaler is not None else None,
            eval_due=eval_due,
        )

    def restore(self, run: LiveRun) -> None:
        """Load this state into ``run``'s optimizer, EMA and objective, and set the global RNG;
        ``step``, ``best`` and ``window`` are the caller's to take."""
        if run.mpp is not None and self.objective is None:  # a file we read, not an invariant
            raise CheckpointError(
                "this run predicts masked patches but its checkpoint holds no mask embedding "
                "and head (objective): it was written by a classification run"
            )
        distributed.load_optimizer_state(run.objective, run.optimizer, self.optimizer)
        if run.ema is not None and self.ema is not None:
            distributed.load_model_state(run.ema, self.ema)
        if run.mpp is not None and self.objective is not None:
            distributed.load_model_state(run.mpp, self.objective)
        if run.scaler is not None and self.scaler is not None:
            run.scaler.load_state_dict(self.scaler)
        torch.set_rng_state(self.rng)
        if run.device.type == "cuda" and self.cuda_rng is not None:  # none from a CPU run
            torch.cuda.set_rng_state(self.cuda_rng, run.device)

    def write(self, path: Path) -> None:
        """Write ``state.pt`` atomically, every tensor from the CPU."""
        payload = {f.name: getattr(self, f.name) for f in fields(self)}
        atomic_write(path, lambda p: save_torch(_on_cpu(payload), p))

    @classmethod
    def read(cls, path: Path) -> TrainState:
        """Read ``state.pt`` with ``torch.load(weights_only=True)``; a damaged file (one
        ``check_unchanged`` cannot tell: written before config.json recorded digests) or a
        tensor in it that is not finite is a ``CheckpointError`` naming it."""
        try:
            payload = torch.load(_exists(path), map_location="cpu", weights_only=True)
        except (RuntimeError, OSError, EOFError, zipfile.BadZipFile, pickle.UnpicklingError) as e:
            raise CheckpointError(
                f"cannot read {path} (damaged or truncated?): "
                f"{(str(e).splitlines() or [type(e).__name__])[0]}"
            ) from None
        check_finite(_tensors(payload), path)
        try:
            payload = upgrade_state(payload)
            missing = [f.name for f in fields(cls) if f.name not in payload]
            if missing:
                raise KeyError(", ".join(missing))
            state = cls(**{f.name: payload[f.name] for f in fields(cls)})
            state.step, state.best = int(state.step), float(state.best)
            state.seconds, state.eval_due = float(state.seconds), bool(state.eval_due)
        except (KeyError, TypeError, ValueError) as e:
            raise CheckpointError(f"{path} is not a vitkit training state: {e}") from None
        return state


def _tensors(value: Any, name: str = "") -> dict[str, Any]:
    """Every tensor in ``value`` (nested dicts and lists: optimizer state) by a dotted name."""
    if isinstance(value, Tensor):
        return {name: value}
    if not isinstance(value, (dict, list, tuple)):
        return {}
    items = value.items() if isinstance(value, dict) else enumerate(value)
    return {k: t for key, v in items for k, t in _tensors(v, f"{name}.{key}".strip(".")).items()}


def _step_dir(run_dir: Path, step: int) -> Path:
    return run_dir / CHECKPOINTS / f"step_{step:08d}"


def as_written(checkpoint: Path) -> Path:
    """``checkpoint``, or for a missing ``.../step_20`` the directory ``step_00000020`` as it is
    written (the step in 8 digits, so that they sort by name)."""
    step = re.fullmatch(r"step_(\d{1,8})", checkpoint.name)
    if step is None or checkpoint.exists():
        return checkpoint
    return checkpoint.with_name(f"step_{int(step[1]):08d}")


def checkpoints(run_dir: Path) -> list[Path]:
    """Complete checkpoints of a run, oldest first (temporary directories are not listed)."""
    root = run_dir / CHECKPOINTS
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith("step_"))


@dataclass(frozen=True)
class RunRecord:
    """What a run directory records for the run that continues it, read once before the run
    (``read``): its ``config.json`` as read, its newest checkpoint, and the class names, in
    label order, of the checkpoint the run resumes from."""

    run_dir: Path
    config: dict[str, Any] | None  # config.json as read; None: the directory records no run
    last: Path | None  # the directory's newest checkpoint
    resume_from: Path | None  # --resume: another run's checkpoint, for a directory with none
    # what ``checkpoint`` records; None when it records none or cannot be read (resuming says why)
    class_names: list[str] | None

    @property
    def checkpoint(self) -> Path | None:
        """The checkpoint the run resumes from: the directory's newest, else ``resume_from``
        (None: a new run)."""
        return self.last if self.last is not None else self.resume_from

    def before_newest(self) -> Path | None:
        """The directory's checkpoint before its newest (None: it holds fewer than two): what a
        run continues from once a damaged newest one is deleted."""
        found = checkpoints(self.run_dir)
        return found[-2] if len(found) > 1 and found[-1] == self.last else None

    def as_now(self) -> RunRecord:
        """The record with the directory's newest checkpoint as it is now, the rest as read: a
        checkpoint a process killed mid-save left aside may be back (``remove_partial_writes``)."""
        found = checkpoints(self.run_dir)
        newest = found[-1] if found else None
        if newest == self.last:
            return self
        names = _class_names(newest if newest is not None else self.resume_from)
        return replace(self, last=newest, class_names=names)

    @classmethod
    def read(cls, run_dir: Path, resume_from: str | Path | None = None) -> RunRecord:
        """The record of ``run_dir`` (which may not exist yet), for a run that would continue
        ``resume_from`` where the directory holds no checkpoint of its own; a ``UserFileError``
        where one of the run's names is taken by the other kind (``check_layout``)."""
        check_layout(run_dir)
        config = recorded_config(run_dir)
        last = checkpoints(run_dir)
        newest = last[-1] if last else None
        given = None if resume_from is None else as_written(Path(resume_from))
        return cls(
            run_dir=run_dir,
            config=config,
            last=newest,
            resume_from=given,
            class_names=_class_names(newest if newest is not None else given),
        )


def _class_names(checkpoint: Path | None) -> list[str] | None:
    """The class names, in label order, that ``checkpoint`` records (None: no checkpoint, or
    it records none, or it cannot be read)."""
    if checkpoint is None:
        return None
    try:
        names = read_json(checkpoint / CONFIG_FILE).get("class_names")
    except (CheckpointError, OSError):
        return None
    return [str(name) for name in names] if isinstance(names, list) else None


def save_checkpoint(
    run_dir: Path,
    cfg: ModelConfig,
    weights: dict[str, Tensor],
    state: TrainState,
    *,
    meta: WeightsMeta,
    keep_last: int,
) -> Path:
    """Write ``checkpoints/step_N`` (the model ``cfg`` with ``weights``, and ``state``)
    atomically, then drop all but the ``keep_last`` newest."""
    final = _step_dir(run_dir, state.step)  # may exist: a re-save (SIGTERM after a save)
    with atomic_directory(final) as tmp:
        state.write(tmp / STATE_FILE)
        write_ours(cfg, weights, tmp, meta, beside=[STATE_FILE])  # config.json records both
    for old in checkpoints(run_dir)[:-keep_last]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def _on_cpu(value: Any) -> Any:
    """``value`` with every tensor in it (nested dicts and lists: optimizer state) on the CPU;
    tensors there already are not copied."""
    if isinstance(value, Tensor):
        return value.cpu()
    if isinstance(value, dict):
        return {k: _on_cpu(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_on_cpu(v) for v in value)
    return value


def load_checkpoint(path: Path, cfg: ModelConfig) -> tuple[dict[str, Tensor], TrainState]:
    """The model weights and the training state of checkpoint ``path``, whose model must be
    ``cfg``. The caller loads them (into a sharded model or not)."""
    saved, weights, _ = read_ours(path, own_run=True)
    if saved != cfg:
        raise CheckpointError(f"{path} holds a different model than this run's config")
    check_unchanged(path, STATE_FILE)
    state = TrainState.read(path / STATE_FILE)
    return weights, state


def training_checkpoint(path: str | Path, config: dict[str, Any]) -> Path:
    """``path`` if it is a checkpoint this run (``config``) can continue from: model, config and
    ``state.pt``, written by a run of the same config (``config_differences``); a
    ``CheckpointError`` saying what it is otherwise."""
    path = Path(path)
    if not (path / STATE_FILE).is_file():
        found = "not found" if not path.exists() else "has no state.pt"
        raise CheckpointError(
            f"{path} {found}: expected a checkpoint written by vitkit train "
            f"(RUN_DIR/{CHECKPOINTS}/step_00000020, with {STATE_FILE}); best/ holds weights only, "
            "use --init-from to start from them"
        )
    _, meta = read_our_config(path, own_run=True)  # its weights are read once, at the resume
    _exists(path / WEIGHTS_FILE)
    if meta.run is None:
        raise CheckpointError(f"{path} records no run config: it cannot be continued exactly")
    refuse_changes(
        config_differences(meta.run.to_dict(), config, source=path / "config.json"),
        str(path),
        "continue it with that run's command, or start from its weights with --init-from",
    )
    return path


def _exists(path: Path) -> Path:
    if not path.is_file():
        raise CheckpointError(f"{path} is missing: the checkpoint is incomplete")
    return path


def remove_partial_writes(run_dir: Path) -> None:
    """Finish or undo, then delete, what a process killed while saving left
    (``atomic_directory``'s temporaries: ``files.remove_partial_directories``)."""
    for parent in (run_dir, run_dir / CHECKPOINTS):
        if parent.is_dir():
            remove_partial_directories(parent)


def save_best(
    run_dir: Path, cfg: ModelConfig, weights: dict[str, Tensor], meta: WeightsMeta
) -> Path:
    """Write the weights with the best test accuracy so far to ``best/``, atomically."""
    best = run_dir / "best"
    with atomic_directory(best) as tmp:
        write_ours(cfg, weights, tmp, meta)
    return best


def config_differences(
    saved: Any, config: dict[str, Any], *, source: Path
) -> dict[str, tuple[Any, Any]]:
    """The dotted keys in which the run config ``saved`` (read from ``source``) differs from
    ``config``, with (saved, new) values. Read through ``RunConfig``, so that keys added since
    (with defaults) and renamed ones are no difference; the keys in ``PLACEMENT`` may differ, and
    a data folder written relative (before data specs) is the same as its absolute form."""
    from ..config import ConfigError, RunConfig, normalise_data

    try:
        old = RunConfig.from_dict(saved).to_dict()
    except ConfigError as e:
        raise CheckpointError(f"{source} is not a vitkit run config: {e}") from None
    for dotted in PLACEMENT:
        section, name = dotted.split(".")
        old[section][name] = config[section][name]
    new = {**config, "data": {**config["data"]}}
    for data in (old["data"], new["data"]):
        data["dataset"] = normalise_data(data["dataset"])
    changed = {
        f"{section}.{k}": (old.get(section, {}).get(k), new[section].get(k))
        for section in new
        if isinstance(new[section], dict)
        for k in sorted(set(new[section]) | set(old.get(section, {})))
        if new[section].get(k) != old.get(section, {}).get(k)
    }
    return changed or {k: (old.get(k), new.get(k)) for k in new if new.get(k) != old.get(k)}


def refuse_changes(changed: dict[str, tuple[Any, Any]], what: str, remedy: str) -> None:
    """One line refusing to continue ``what`` (a run directory, a checkpoint) under another
    config: the keys that differ with their recorded and new values (only the keys were named),
    and the precision's by name, a change a user makes by moving to another machine rather than
    by asking for it."""
    from ..config import ConfigError

    if not changed:
        return
    precision = changed.get("train.precision")
    if precision is not None:
        raise ConfigError(
            f"{what} computes in {precision[0]}, this run would in {precision[1]}, which would not "
            f"continue it exactly: add --set train.precision={precision[0]}, or {remedy}"
        )
    listed = [f"{key} {_shown(a)} recorded, {_shown(b)} now" for key, (a, b) in changed.items()]
    more = f"; {len(listed) - 4} more keys" if len(listed) > 4 else ""
    raise ConfigError(
        f"{what} holds a run with a different config ({'; '.join(listed[:4])}{more}): {remedy}"
    )


def _shown(value: Any) -> str:
    """A config value as a message shows it: its repr, cut to a line's share."""
    from ..config.keys import shown

    return shown(repr(value), 40)


# What a run directory holds, by kind (the loop writes them; report.py and metrics_log.py read
# metrics.jsonl): each a file, or a folder
RUN_FILES = ("config.json", METRICS_FILE, SKIPPED_FILE)
RUN_FOLDERS = (CHECKPOINTS, "best")


def check_layout(run_dir: Path) -> None:
    """A ``UserFileError`` before anything runs where a name a run writes in ``run_dir`` is
    taken by the other kind: a folder named config.json, a file named checkpoints (the
    first failed at the start with a traceback, the second at the first save)."""
    for names, kind, wanted in [
        (RUN_FILES, Path.is_file, "a file"),
        (RUN_FOLDERS, Path.is_dir, "a folder"),
    ]:
        for name in names:
            path = run_dir / name
            if path.exists() and not kind(path):
                raise UserFileError(
                    f"{path}: expected {wanted}, the run's own {name}; move it, or choose "
                    "another --run-dir"
                )


def recorded_config(run_dir: Path) -> dict[str, Any] | None:
    """The run config ``run_dir`` records (its ``config.json``, as read), None if it holds none."""
    path = run_dir / "config.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{path} is not a vitkit run config: {e}") from None


def recorded_precision(saved: dict[str, Any]) -> str | None:
    """The precision a recorded run config computes in (None where it cannot be read as one:
    ``check_run_dir`` says why)."""
    from ..config import ConfigError, RunConfig

    try:
        return RunConfig.from_dict(saved).train.precision
    except (ConfigError, TypeError):
        return None


def check_run_dir(
    run_dir: Path, config: dict[str, Any], *, recorded: dict[str, Any] | None, write: bool = True
) -> None:
    """A run directory belongs to one config: refuse to continue a different run in it (see
    ``config_differences``), and record the config there if ``write`` (one process of a
    data-parallel run writes). ``recorded``: its ``config.json`` as read (``RunRecord``), None
    when it holds none."""
    path = run_dir / "config.json"
    if recorded is not None:
        refuse_changes(
            config_differences(recorded, config, source=path),
            str(run_dir),
            "use another --run-dir, or delete that directory to start over",
        )
    elif write:
        atomic_write(path, lambda p: p.write_text(json.dumps(config, indent=2) + "\n"))


def truncate_metrics(path: Path, step: int, *, evaluated: bool = True) -> None:
    """Drop log lines after ``step``, so a resumed run's log equals an uninterrupted one's; and
    the evaluations of ``step`` when its checkpoint was saved without them (not ``evaluated``):
    the resumed run does them again, and a process killed after doing so, before its next
    checkpoint, has logged them once already."""
    if not path.is_file():
        return
    kept = [
        line
        for line, record in read_records(path)  # a line torn by a kill mid-write goes
        if record["step"] < step
        or (record["step"] == step and (evaluated or "split" not in record))
    ]
    atomic_write(path, lambda p: p.write_text("".join(f"{line}\n" for line in kept)))
