"""Runs under one folder, each in its own run directory, with a JSON record of what each gave:
what makes a sweep resumable after a kill at any point.

A run recorded in the record is never run again; one not recorded is trained through the path
``vitkit train`` takes (``compose.read_data`` then ``train``), which resumes a half run from its
last checkpoint exactly and evaluates a finished one again (train/loop.py). The record is
rewritten whole after each run (``files.atomic_write``): a kill leaves the last one. The choice
among the runs is ``choose``: the highest accuracy; a tie goes to the smaller learning rate
(closer to the pre-trained weights, and what a coarser grid would have found first); a run that
diverged is never chosen.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..compose import Composed, read_data
from ..errors import ConfigError, UserFileError
from ..files import atomic_write


class Record:
    """The JSON record of a sweep at ``path``: a dict, read if the file exists, written whole
    and atomically by ``save``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.data: dict[str, Any] = {}
        if path.is_file():
            try:
                self.data = json.loads(path.read_text())
            except ValueError as e:
                raise UserFileError(f"{path}: not a sweep's record ({e})") from None

    def save(self) -> None:
        text = json.dumps(self.data, indent=2) + "\n"
        atomic_write(self.path, lambda p: p.write_text(text))


def train_run(composed: Composed, run_dir: Path, *, test: bool, progress: bool) -> dict[str, Any]:
    """Train (or resume, or evaluate again) the run ``composed`` in ``run_dir``; its final
    evaluation: ``split``, ``accuracy``, ``loss``, ``count`` (images), or ``diverged`` (the
    message) for a run whose loss stopped being finite. ``test=False``: the data's test split is
    left out, so a run that chooses (on its holdout) never sees it."""
    from ..train.loop import DivergedError, train

    composed, data = read_data(composed, run_dir)
    if not test:
        data = dataclasses.replace(data, test=None, test_name=None)
    try:
        result = train(composed.run, run_dir, progress=progress, data=data)
    except DivergedError as e:
        return {"diverged": str(e)}
    return {k: result[k] for k in ("split", "accuracy", "loss", "count")}


def choose(accuracies: Mapping[float, float | None]) -> float:
    """The learning rate of the highest accuracy (None: the run diverged); a tie goes to the
    smaller rate. A ``ConfigError`` when every run diverged."""
    finite = [(acc, -lr, lr) for lr, acc in accuracies.items() if acc is not None]
    if not finite:
        rates = ", ".join(f"{lr:g}" for lr in accuracies)
        raise ConfigError(f"every run of the sweep diverged (lr {rates}): give lower rates (--lrs)")
    return max(finite)[2]
