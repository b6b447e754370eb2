"""Runs under one folder, each in its own run directory, with a JSON record of what each gave:
what makes a sweep resumable after a kill at any point; the machinery of both protocols,
``vitkit transfer`` and ``vitkit vtab``.

A run recorded in a record (records.py) is never run again; one not recorded is trained through
the path ``vitkit train`` takes (``compose.prepare`` then ``train_prepared``: ``train_run``, with
the data read as the protocol stages it), which resumes a half run from its last checkpoint
exactly and evaluates a finished one again (train/loop.py). A record is rewritten whole after
each run; one of other settings is refused (``check_same``) rather than mixed with this
command's runs. The flags both protocols share are checked here: ``check_sets`` (a ``--set`` of what
a protocol decides) and ``check_rates`` (rates that would name one run). The choice among the
runs is ``choose``: the highest accuracy; a tie goes to the smaller learning rate (closer to the
pre-trained weights, and what a coarser grid would have found first); a run that diverged is
never chosen. A final run of ImageNet also measures ImageNet ReaL (``measure_real``:
eval/real.py's join and count) of the weights it reported on. A protocol's runs share one stop
request (runtime/stops.py's ``stop_requests``): SIGTERM/SIGINT stops a run at its next step,
saved, or, landing after a run's last step check, the protocol before its next run.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..compose import Composed, DataBuilder, prepare
from ..config import RunConfig
from ..config.overrides import split_set
from ..errors import ConfigError, DataError

if TYPE_CHECKING:
    import numpy as np
    import torch

    from ..data.run_data import RunData

log = logging.getLogger(__name__)


# Keys a record may lack, written before they were recorded: not a difference then. "weights"
# (io.api.weights_digest): a record of results named its checkpoint by path alone, and another
# checkpoint written there was given the first one's results.
ADDED_KEYS = frozenset({"weights"})


def check_same(recorded: Mapping[str, Any], given: Mapping[str, Any], held: str, flag: str) -> None:
    """A ``ConfigError`` when the settings a record holds (``recorded``; empty: a new record)
    are not ``given``: ``held`` says what holds them, then the keys that differ with both values
    and the way out (another ``flag``, or the same settings). A key of ``ADDED_KEYS`` that
    ``recorded`` lacks is no difference."""
    keys = given.keys() | recorded.keys()
    keys -= {k for k in ADDED_KEYS if k not in recorded}
    differ = sorted(k for k in keys if recorded.get(k) != given.get(k))
    if recorded and differ:
        both = "; ".join(f"{k} {recorded.get(k)!r}, now {given.get(k)!r}" for k in differ)
        raise ConfigError(
            f"{held} ({', '.join(differ)} differ: {both}): give another {flag}, or the same "
            "settings to resume it"
        )


def check_sets(sets: Iterable[str], decided: Mapping[str, str]) -> None:
    """A ``--set`` of a key a protocol decides (``decided``: each key and the flag, or what,
    that decides it) is refused, naming that flag: it would set every run alike while the
    protocol reports the settings it chose among."""
    for item in sets:
        key = split_set(item)[0]
        if key in decided:
            raise ConfigError(f"--set {item}: {key} is decided by {decided[key]}")


def rate_name(lr: float) -> str:
    """A learning rate as its run's folder and record name it: 6 significant digits."""
    return f"{lr:g}"


def check_rates(lrs: Iterable[float]) -> None:
    """``--lrs``: positive finite rates, no two of one name (``rate_name``): they would be one
    run, recorded for both (``transfer``: the second never trains)."""
    named: dict[str, float] = {}
    for lr in lrs:
        if not 0 < lr < math.inf:
            raise ConfigError(f"--lrs: {lr!r}: expected positive learning rates")
        name = rate_name(lr)
        if name in named:
            raise ConfigError(
                f"--lrs: {named[name]!r} and {lr!r} are one run (lr {name}: a run is named by 6 "
                "significant digits): give rates that differ in them, each once"
            )
        named[name] = lr


def train_run(
    composed: Composed,
    run_dir: Path,
    *,
    progress: bool,
    test: bool = True,
    real: bool = False,
    build: DataBuilder | None = None,
) -> tuple[dict[str, Any], RunData]:
    """Train (or resume, or evaluate again) the run ``composed`` in ``run_dir`` on the data
    ``build`` reads (None: ``build_data``); its final evaluation: ``split``, ``accuracy``,
    ``loss``, ``count`` (images), or ``diverged`` (the message) for a run whose loss stopped being
    finite; and the data it trained on. ``test=False``: the data's test split is left out, so a
    run that chooses (on its holdout) never sees it. ``real``: also ``real``, ImageNet ReaL
    accuracy of the same weights on the same split (``measure_real``). A ``StoppedError``
    before anything is read if a stop was requested (the protocol's ``stop_requests``)."""
    from ..runtime.stops import stop_if_requested
    from ..train import distributed
    from ..train.loop import DivergedError, train_prepared
    from ..train.rundir import RunLock

    stop_if_requested(f"the run in {run_dir} began; the runs before it are recorded")
    # held from before the run directory is read to the run's end
    with RunLock(run_dir, enabled=distributed.is_main()) as lock:
        prepared = prepare(composed, run_dir, lock=lock, build=build)
        if not test:
            data = dataclasses.replace(prepared.data, test=None, test_name=None)
            prepared = dataclasses.replace(prepared, data=data)
        run, data = prepared.run, prepared.data
        # the names are joined before training: a split that cannot be measured is said now
        joined = _joined(run, data, run_dir) if real else None
        try:
            result = train_prepared(prepared, progress=progress)
        except DivergedError as e:
            return {"diverged": str(e)}, data
    final = result.evaluation
    out = {
        "split": result.split,
        "accuracy": final.accuracy,
        "loss": final.loss,
        "count": final.count,
    }
    if isinstance(joined, str):
        out["real"] = {"not_measured": joined}
    elif joined is not None:
        out["real"] = measure_real(run, run_dir, _evaluated(data)[0], joined, prepared.device)
    return out, data


def _evaluated(data: RunData) -> tuple[Any, str]:
    """The split ``train`` reports at the end and its name: the test split apart from the
    validation split, else the validation split (data/run_data.py)."""
    if data.test is not None and not data.val_is_test:
        return data.test, str(data.test_name)
    return data.val, data.val_name


def _joined(run: RunConfig, data: RunData, run_dir: Path) -> np.ndarray | str:
    """The ReaL labels' entry of every image ``train`` will report on, or why there are none
    (one line: the model is not a 1000-class one, or the images are not named as ImageNet's
    validation files), which is logged at once."""
    from ..eval.real import real_entries_for

    images, name = _evaluated(data)
    try:
        return real_entries_for(run.model.num_classes, images, name, "the fine-tuned model")
    except DataError as e:
        log.warning("%s: ImageNet ReaL will not be measured: %s", run_dir, e)
        return str(e)


def measure_real(
    run: RunConfig, run_dir: Path, images: Any, entries: np.ndarray, device: torch.device
) -> dict:
    """ImageNet ReaL accuracy of the weights ``run_dir/best`` (those its final evaluation
    reported) on ``images`` (whose label entries are ``entries``), evaluated as the run
    evaluates (on its ``device``, with its precision, batch size and ``data.test_flip``):
    ``accuracy``, ``counted``, ``left_out`` (images with an empty label set)."""
    from ..data import BatchOptions
    from ..data.run_data import batches_of
    from ..eval.metrics import evaluate
    from ..eval.real import REAL_CLASSES, real_accuracy
    from ..io.api import load
    from ..train.precision import autocast_dtype

    model = load(run_dir / "best").to(device).eval()
    options = BatchOptions.evaluation(run.model, batch_size=run.train.batch_size)
    batches = batches_of(images, options)
    result = evaluate(
        model,
        batches.epoch(0),
        REAL_CLASSES,
        autocast=autocast_dtype(run.train.precision),  # the run's, decided (never auto)
        flip=run.data.test_flip,
        predictions=True,
    )
    assert result.predictions is not None  # asked for
    real = real_accuracy(entries, result.predictions)
    return {"accuracy": real.accuracy, "counted": real.counted, "left_out": real.left_out}


def choose(accuracies: Mapping[float, float | None]) -> float:
    """The learning rate of the highest accuracy (None: the run diverged); a tie goes to the
    smaller rate. A ``ConfigError`` when every run diverged."""
    finite = [(acc, -lr, lr) for lr, acc in accuracies.items() if acc is not None]
    if not finite:
        rates = ", ".join(f"{lr:g}" for lr in accuracies)
        raise ConfigError(f"every run of the sweep diverged (lr {rates}): give lower rates (--lrs)")
    return max(finite)[2]
