"""A run decided once, before it trains: ``PreparedRun``, which ``loop.train_prepared`` takes.

Preparing a run decides and reads, each once, under the run directory's lock: this process's
device (``distributed.resolve_device``: a GPU becomes the current CUDA device); the run
directory's record (``state.RunRecord``: its config.json, the checkpoint the run resumes from
and the class order that checkpoint records); the values the config leaves to the machine
(``runtime.machine.decide``; a run of ``auto`` precision keeps the precision its directory
records, decided when it started); a new run's bounds (``check_new``), before any data is read;
and the data, in the class order the run resumes with. The command line prepares its run with
``compose.prepare`` (which also takes the classes and channels from the data); the Python API's
``train(run, run_dir)`` with ``prepare``, the config as given.

No torch import at the top: ``compose`` builds on ``PreparedRun`` before a command imports
torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..config import RunConfig, replace
from ..config.dicts import check_new
from .rundir import RunLock

if TYPE_CHECKING:
    import torch

    from ..data.run_data import RunData
    from .state import RunRecord


@dataclass(frozen=True, kw_only=True)
class PreparedRun:
    """A run ready to train: what ``train_prepared`` takes, every decision made."""

    run: RunConfig  # decided for this machine: no auto precision, the workers set
    data: RunData  # in the class order the run resumes with
    device: torch.device  # this process's
    record: RunRecord  # the run directory's: config.json, the checkpoint to resume, its classes
    lock: RunLock  # the run directory's, held by the caller while the run trains
    # why the precision is what it is, for the banner; None where the command said it already
    precision_why: str | None = None

    @property
    def run_dir(self) -> Path:
        return self.record.run_dir


def prepare(
    run: RunConfig, run_dir: Path, *, lock: RunLock, resume_from: str | Path | None = None
) -> PreparedRun:
    """The run ``run`` (the config as given) in ``run_dir``, continuing ``resume_from`` (another
    run's checkpoint) where the directory holds no checkpoint; ``lock``: the directory's, held
    by the caller. Everything it decides is decided here (see the module docstring)."""
    from ..data.run_data import build_data
    from . import distributed
    from .state import RunRecord

    device = distributed.resolve_device(run.train.device)  # before anything is read: fails fast
    record = RunRecord.read(run_dir, resume_from)
    run, why = _decided_on(run, device, record)
    check_new(run, record.config)  # a new run's bounds, before any data is read
    # a resumed run's classes in the order it trained with, before a holdout is drawn
    data = build_data(
        run.data,
        run.model,
        seed=run.train.seed,
        in_chans=run.model.in_chans,
        class_order=record.class_names,
    )
    return PreparedRun(
        run=run, data=data, device=device, record=record, lock=lock, precision_why=why
    )


def _decided_on(
    run: RunConfig, device: torch.device, record: RunRecord
) -> tuple[RunConfig, str | None]:
    """``run`` with the values it leaves to the machine decided for ``device``
    (``runtime.machine.decide``), and why its precision is what it is (None: the config says
    it); a run of ``auto`` precision whose directory records one keeps it: a resume elsewhere
    cannot change its arithmetic."""
    from ..model.flops import count_flops
    from ..runtime import machine
    from .state import recorded_precision

    why = None
    kept = recorded_precision(record.config) if record.config is not None else None
    if run.train.precision == "auto" and kept is not None:  # decided when the run started
        run = replace(run, {"train.precision": kept})
        why = f"recorded in {record.run_dir / 'config.json'}"
    decided = machine.decide(run, device, image_flops=count_flops(run.model))
    run = replace(run, {key: value for key, (value, _) in decided.items()}) if decided else run
    return run, decided.get("train.precision", (None, why))[1]
