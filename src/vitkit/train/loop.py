"""The one training loop: supervised pre-training and fine-tuning [P §4.1, App. B.1].

Read top to bottom: build data, model and optimizer; resume from the run directory's last
checkpoint if there is one (else ``init_from``: pre-trained weights with a new zero head and
resized position embeddings); then for each optimizer step: learning rate from the schedule,
``accum_steps`` micro-batches of forward/backward, global-norm clipping, the update, EMA, and
whatever the cadence says is due (log, evaluate, save). The objective is the only thing that
differs between pre-training, fine-tuning and masked patch prediction (whose mask embedding and
head are trained and checkpointed with the run but never saved into the model's weights).

Exact resume: batch order and augmentation are functions of (seed, epoch, batch), the global RNG
(dropout) is saved with the checkpoint, so a run stopped at any moment and restarted continues
step for step as if it had never stopped.
"""

from __future__ import annotations

import copy
import json
import logging
import math
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..config import RunConfig
from ..data import Batches, Preprocess
from ..model import build_model
from .cadence import Cadence
from .data import build_datasets, ordered_batches
from .objectives import MaskedPatchPrediction, classification, evaluate_mpp
from .optim import build_optimizer, learning_rate, set_learning_rate
from .report import write_report
from .state import (
    TrainState,
    check_run_dir,
    checkpoints,
    load_checkpoint,
    remove_partial_writes,
    save_best,
    save_checkpoint,
    truncate_metrics,
)

log = logging.getLogger(__name__)


class StoppedError(Exception):
    """SIGTERM/SIGINT arrived: a checkpoint was saved, the run can be resumed."""

    def __init__(self, signum: int, step: int) -> None:
        super().__init__(f"stopped by signal {signum} after step {step}; checkpoint saved")
        self.signum = signum


class DivergedError(ValueError):
    """The loss became NaN or infinite."""


@dataclass
class _Window:
    """Running sums between two log lines. The sums are saved with checkpoints (a resumed run's
    log lines equal an uninterrupted run's); the clock is not."""

    loss: float = 0.0
    accuracy: float = 0.0
    n: int = 0
    images: int = 0
    t: float = field(default_factory=time.perf_counter)

    def sums(self) -> dict[str, float]:
        return {"loss": self.loss, "accuracy": self.accuracy, "n": self.n, "images": self.images}


@contextmanager
def _stop_requests() -> Iterator[dict[str, int]]:
    """Turn SIGTERM/SIGINT into a flag the loop checks after each step (then it saves)."""
    flag = {"signal": 0}

    def handler(signum: int, _frame: Any) -> None:
        flag["signal"] = signum

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield flag
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def _ema_update(ema: nn.Module, model: nn.Module, decay: float, step: int) -> None:
    """Polyak averaging; the decay ramps up as (1 + step) / (10 + step) (TensorFlow's
    ``num_updates`` rule), so early averages are not dominated by the random initial weights."""
    decay = min(decay, (1 + step) / (10 + step))
    with torch.no_grad():
        for e, p in zip(ema.state_dict().values(), model.state_dict().values(), strict=True):
            if e.dtype.is_floating_point:
                e.mul_(decay).add_(p.detach(), alpha=1 - decay)


def init_from_pretrained(run: RunConfig) -> nn.Module:
    """Pre-trained weights for fine-tuning [P App. B.1.1]: drop the whole head (pre-logits too),
    attach a zero-initialised one, and 2D-interpolate the position embeddings to the new grid."""
    from ..io.api import load
    from ..io.checkpoint import load_state_dict_strict

    assert run.init_from is not None
    model = load(
        run.init_from,
        image_size=run.model.image_size,
        num_heads=run.model.num_heads,
        posemb=run.model.posemb,
    )
    model.reset_head(run.model.num_classes, run.model.representation_size)
    fresh = build_model(run.model)  # this run's dropout etc., the pre-trained weights
    load_state_dict_strict(fresh, model.state_dict(), source=run.init_from)
    return fresh


def train(run: RunConfig, run_dir: str | Path, *, progress: bool = True) -> dict[str, Any]:
    """Train (or resume) the run in ``run_dir``; returns the final evaluation."""
    run_dir = Path(run_dir)
    tc = run.train
    torch.manual_seed(tc.seed)

    # ---- data
    train_set, test_set, classes = build_datasets(run.data, run.model, seed=tc.seed)
    if tc.objective == "classification" and len(classes) != run.model.num_classes:
        raise ValueError(
            f"model.num_classes={run.model.num_classes} but the dataset has {len(classes)} classes"
        )
    train_batches = Batches(
        train_set,
        batch_size=tc.batch_size,
        train=True,
        seed=tc.seed,
        crop_padding=run.data.crop_padding,
        flip=run.data.flip,
        inception_crop=run.data.inception_crop,
        rand_augment=run.data.rand_augment,
        image_size=run.model.image_size,
        num_workers=run.data.num_workers,
    )
    evaluation = ordered_batches(
        test_set, run.model, batch_size=max(tc.batch_size, 256), num_workers=run.data.num_workers
    )
    steps_per_epoch = train_batches.steps_per_epoch // tc.accum_steps
    if steps_per_epoch < 1:
        raise ValueError(
            f"an epoch has {train_batches.steps_per_epoch} batches of {tc.batch_size}, fewer than "
            f"train.accum_steps={tc.accum_steps}"
        )
    cadence = Cadence.from_config(tc, steps_per_epoch, run.optim.warmup)
    if tc.fewshot:
        from ..eval.fewshot import check_shots

        check_shots(train_set, tc.fewshot)
    run_dir.mkdir(parents=True, exist_ok=True)  # only once the run is known to be valid
    check_run_dir(run_dir, run.to_dict())
    remove_partial_writes(run_dir)

    # ---- model, optimizer; resume or initialise
    last = checkpoints(run_dir)
    model = build_model(run.model) if last or not run.init_from else init_from_pretrained(run)
    objective = MaskedPatchPrediction(run.model) if tc.objective == "mpp" else None
    optimizer = build_optimizer(model, run.optim, objective)
    trained = list(model.parameters()) + (list(objective.parameters()) if objective else [])
    ema = copy.deepcopy(model).eval() if tc.ema else None
    averaged = ema if ema is not None else model  # what is evaluated and kept as best
    step, best, window = 0, -1.0, _Window()
    if last:
        state = load_checkpoint(last[-1], model)
        optimizer.load_state_dict(state.optimizer)
        if ema is not None and state.ema is not None:
            ema.load_state_dict(state.ema)
        if objective is not None:
            objective.load_state_dict(state.objective)
        torch.set_rng_state(state.rng)
        step, best = state.step, state.best
        window = _Window(**state.window)
        log.info("resumed %s at step %d", last[-1], step)
    truncate_metrics(run_dir / "metrics.jsonl", step)
    forward = torch.compile(model) if tc.compile else model
    preprocess = Preprocess(image_size=run.model.image_size, in_chans=run.model.in_chans)
    extra = {"class_names": classes, "preprocess": preprocess.to_dict(), "run": run.to_dict()}

    def evaluate_now() -> dict[str, Any]:
        from ..eval.fewshot import fewshot_model
        from ..eval.metrics import evaluate

        if objective is None:
            result = evaluate(averaged, evaluation.epoch(0), len(classes), bf16=tc.bf16)
        else:  # the colour accuracy of the chosen patches, the same patches every time
            result = evaluate_mpp(averaged, objective, evaluation.epoch(0), seed=tc.seed)
        if tc.fewshot:
            result["fewshot"] = fewshot_model(
                averaged,
                train_set,
                test_set,
                shots=tc.fewshot,
                seeds=3,
                image_size=run.model.image_size,
                bf16=tc.bf16,
            )
        return result

    board = _tensorboard(run_dir)

    def write(record: dict[str, Any]) -> None:
        with open(run_dir / "metrics.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")
        if board is not None:
            prefix = record.get("split", "train")
            for key, value in record.items():
                if isinstance(value, float):
                    board.add_scalar(f"{prefix}/{key}", value, record["step"])

    # ---- the loop
    batches = train_batches.stream(step * tc.accum_steps)  # micro-batches, across epochs
    bar = _progress(cadence.total_steps, step, enabled=progress)
    result: dict[str, Any] = {}
    model.train()
    with _stop_requests() as stop:
        while step < cadence.total_steps:
            lr = learning_rate(
                step,
                cfg=run.optim,
                total_steps=cadence.total_steps,
                warmup_steps=cadence.warmup_steps,
            )
            set_learning_rate(optimizer, lr)
            for _ in range(tc.accum_steps):
                images, labels = next(batches)
                with torch.autocast("cpu", dtype=torch.bfloat16, enabled=tc.bf16):
                    if objective is None:
                        out = classification(
                            forward,
                            images,
                            labels,
                            label_smoothing=tc.label_smoothing,
                            mixup=tc.mixup,
                        )
                    else:
                        out = objective(model, images)
                (out["loss"] / tc.accum_steps).backward()
                window.loss += out["loss"].item() / tc.accum_steps
                window.accuracy += out["accuracy"].item() / tc.accum_steps
                window.images += labels.numel()
            if not math.isfinite(window.loss):
                raise DivergedError(
                    f"the loss is {window.loss} at step {step + 1}: the run diverged "
                    "(lower optim.lr, or set optim.grad_clip)"
                )
            if run.optim.grad_clip:
                torch.nn.utils.clip_grad_norm_(trained, run.optim.grad_clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if ema is not None:
                _ema_update(ema, model, tc.ema, step)
            step += 1
            window.n += 1
            bar.update(1)

            if cadence.log(step):
                elapsed = time.perf_counter() - window.t
                record = {
                    "step": step,
                    "epoch": step / steps_per_epoch,
                    "lr": lr,
                    "loss": window.loss / window.n,
                    "accuracy": window.accuracy / window.n,
                    "images_per_s": window.images / max(elapsed, 1e-9),
                }
                write(record)
                bar.set_postfix(
                    loss=f"{record['loss']:.3f}",
                    acc=f"{record['accuracy']:.3f}",
                    img_s=f"{record['images_per_s']:.0f}",
                )
                window = _Window()
            if cadence.eval(step):
                started = time.perf_counter()
                result = evaluate_now()
                window.t += time.perf_counter() - started  # images/s counts training only
                write({"step": step, "split": "test", **_scalars(result)})
                what = "masked-patch colour accuracy" if objective is not None else "accuracy"
                bar.write(f"step {step}: test {what} {result['accuracy']:.4f}")
                if result["accuracy"] > best:
                    best = result["accuracy"]
                    save_best(run_dir, averaged, extra)
            if cadence.save(step) or stop["signal"]:
                state = TrainState(
                    step=step,
                    best=best,
                    optimizer=optimizer.state_dict(),
                    ema=ema.state_dict() if ema is not None else None,
                    rng=torch.get_rng_state(),
                    window=window.sums(),
                    objective=objective.state_dict() if objective is not None else None,
                )
                save_checkpoint(run_dir, model, state, extra=extra, keep_last=tc.keep_last)
            if stop["signal"] and step < cadence.total_steps:
                bar.close()
                raise StoppedError(stop["signal"], step)
    bar.close()
    if not result:  # the run was already complete: evaluate its final weights
        result = evaluate_now()
    write_report(run_dir, result, classes)
    return result


def _scalars(result: dict[str, Any]) -> dict[str, float]:
    """The numbers of an evaluation that go to metrics.jsonl: loss, accuracy, top5 (when
    classifying) and ``fewshot_<k>shot`` (mean over seeds) when few-shot evaluation is on."""
    out = {k: result[k] for k in ("loss", "accuracy", "top5") if k in result}
    for shots, acc in result.get("fewshot", {}).items():
        out[f"fewshot_{shots}shot"] = acc["mean"]
    return out


def _tensorboard(run_dir: Path) -> Any:
    """A TensorBoard writer when tensorboard is installed (it is optional), else None."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        return None
    return SummaryWriter(str(run_dir / "tensorboard"))


class _NoBar:
    def update(self, n: int) -> None: ...
    def set_postfix(self, **kw: Any) -> None: ...
    def write(self, text: str) -> None:
        log.info(text)

    def close(self) -> None: ...


def _progress(total: int, initial: int, *, enabled: bool) -> Any:
    if not enabled:
        return _NoBar()
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True)
