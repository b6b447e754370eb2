"""A run decided once, before it trains: ``PreparedRun``, which ``loop.train_prepared`` takes.

One function prepares it, ``compose.prepare`` (for the commands and ``vitkit.fit`` alike): under
the run directory's lock it decides and reads, each once, this process's device, the run
directory's record (``state.RunRecord``: its config.json, the checkpoint the run resumes from
and the class order that checkpoint records), a new run's bounds, the data in the class order
the run resumes with, and the values the config leaves to the data and the machine. The loop
below takes the result whole, and decides none of it again.

No torch import at the top: ``compose`` builds on ``PreparedRun`` before a command imports
torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..config import RunConfig
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
    # the process's time (``process_seconds``) when the run began, where its clock starts: 0 for
    # a command (its start-up counts), the call for ``vitkit.fit`` (not a notebook's age)
    started_s: float = 0.0

    @property
    def run_dir(self) -> Path:
        return self.record.run_dir
