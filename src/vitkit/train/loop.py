"""The one training loop: supervised pre-training and fine-tuning [P §4.1, App. B.1].

Read top to bottom: a run prepared once (``compose.prepare``: its device, its run directory's
record, its data), build its batches, model and optimizer; resume from the run directory's last
checkpoint if there is one (else ``init_from``: pre-trained weights with a new zero head and
resized position embeddings); then for each optimizer step: the learning rate, ``accum_steps``
micro-batches of forward/backward, global-norm clipping, the update, EMA, and whatever the cadence
says is due (log, evaluate, save). Only the objective differs between pre-training, fine-tuning
and masked patch prediction. Its parts live beside it: ``inputs.py`` (data, batches, cadence),
``parts.py`` (model, EMA, objective, optimizer, the checkpoint resumed), ``evaluator.py``
(evaluations, best weights), ``metrics_log.py``; ``train_prepared`` builds them, ``_Trainer``
runs them.

Contract: evaluations on the validation split keep the best weights in ``best/``; a test split is
evaluated once, at the end, with them. A run stopped at any moment and restarted continues step
for step (batches are functions of (seed, epoch, batch); the RNG is checkpointed). A stop request
is honoured at a step's end and between an evaluation's batches: that evaluation is dropped, its
step saved without it (``TrainState.eval_due``), and the resumed run does it first. Under
torchrun ``train.batch_size`` is the global batch, each process takes its part, losses and
evaluations are averaged, and rank 0 alone writes; the RNG is reseeded from (seed, rank, step) at
every step.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..config import RunConfig
from ..config.train import parse_seconds
from ..data import Preprocess
from ..data.bounds import printable
from ..data.device import on_device
from ..data.loader import derive_seed
from ..errors import VitkitError
from ..eval.metrics import Evaluation
from ..files import atomic_write
from ..io.checkpoint import CheckpointError
from ..io.metadata import WeightsMeta
from ..runtime.clock import process_seconds
from ..runtime.stops import StoppedError, stop_requests
from . import distributed, precision
from .banner import banner
from .erasing import random_erase
from .evaluator import Evaluator
from .inputs import Inputs, read_inputs
from .metrics_log import METRICS_FILE, MetricsLog
from .optim import learning_rate, set_learning_rate
from .overfit import Overfitting
from .parts import Parts, build_parts, checkpoint_to_resume
from .prepare import PreparedRun
from .report import write_report
from .state import (
    SKIPPED_FILE,
    TrainState,
    WindowSums,
    check_run_dir,
    remove_partial_writes,
    save_checkpoint,
    truncate_metrics,
)

log = logging.getLogger(__name__)

# The keys of a metrics.jsonl record that are clocks, not results (they differ between two runs of
# the same computation): images/s of the log window; ``time_s``, seconds since this process
# started (time to accuracy counts from there; a resumed run's clock starts at its restart); and
# ``run_s``, the run's own time, summed over the processes that resumed it.
TIMING_KEYS = ("images_per_s", "time_s", "run_s")


class DivergedError(VitkitError):
    """The loss became NaN or infinite: a setting to change (learning rate, clipping)."""


@dataclass
class _Window:
    """Running sums between two log lines. The loss and accuracy of this process's micro-batches
    add up on the device (``device_sums``: no host read per step) and are read at log and save
    steps only, averaged over processes then; ``loss`` and ``accuracy`` hold what a checkpoint
    carried over (already averaged). Saved with checkpoints so that a resumed run's log lines
    equal an uninterrupted run's, with ``seconds`` (the window's training time so far), so that
    its images/s counts only the images trained since the window's clock started."""

    loss: float = 0.0
    accuracy: float = 0.0
    n: int = 0
    images: int = 0
    t: float = field(default_factory=time.perf_counter)
    device_sums: Tensor | None = None  # (2,) float64: this process's loss and accuracy sums

    @classmethod
    def resumed(cls, sums: WindowSums) -> _Window:
        """The window a checkpoint saved (``compat.upgrade_state`` fills an older one's)."""
        window = cls(loss=sums["loss"], accuracy=sums["accuracy"], n=sums["n"])
        window.images, window.t = sums["images"], time.perf_counter() - sums["seconds"]
        return window

    def add(self, loss: Tensor, accuracy: Tensor, share: int) -> None:
        """A micro-batch's loss and accuracy, one ``share``-th of its step, on the device."""
        both = torch.stack([loss.detach(), accuracy.detach()]).double() / share  # (2,)
        self.device_sums = both if self.device_sums is None else self.device_sums + both

    def totals(self) -> tuple[float, float]:
        """The window's loss and accuracy sums, averaged over processes (a host read, and a
        collective under torchrun: at log and save steps only)."""
        if self.device_sums is None:
            return self.loss, self.accuracy
        loss, accuracy = distributed.all_mean(self.device_sums).tolist()
        return self.loss + loss, self.accuracy + accuracy

    def sums(self) -> WindowSums:
        loss, accuracy = self.totals()
        return {
            "loss": loss,
            "accuracy": accuracy,
            "n": self.n,
            "images": self.images,
            "seconds": time.perf_counter() - self.t,
        }


class _Agreement:
    """When the processes of a torchrun job agree on a stop request (SIGTERM to one of them
    stops them all): a collective read by the host, so not at every step, but at every log and
    save step and at least every ``AGREE_EVERY_S`` seconds of training; the next agreement's step
    comes from the slowest process's time per step, so every process agrees at the same steps.
    A single process only looks at its own flag, at every step, which costs nothing. An
    evaluation's batches are counted as steps by one of their own (``_between_batches``)."""

    def __init__(self, step: int) -> None:
        self.next, self.since, self.t = step + 1, step, time.perf_counter()

    def stop(
        self, step: int, signal_number: int, *, now: bool, spent: bool = False
    ) -> tuple[int, bool]:
        """The signal any process has seen (0: none), and whether any has spent the run's time
        budget, agreed at this ``step`` when it is time."""
        if not distributed.is_distributed():
            return signal_number, spent
        if not now and step < self.next:
            return 0, False
        took = (time.perf_counter() - self.t) / max(step - self.since, 1)  # seconds a step
        seen, slowest, over = distributed.all_max_many([float(signal_number), took, float(spent)])
        self.next = step + max(1, int(AGREE_EVERY_S / max(slowest, 1e-9)))
        self.since, self.t = step, time.perf_counter()
        return int(seen), bool(over)


# How often, at least, the processes of a job agree on a stop request: SIGTERM's grace before
# SIGKILL is typically 30 s under torchrun and SLURM, and a checkpoint must fit in it.
AGREE_EVERY_S = 10.0


class _EvaluationStoppedError(Exception):
    """A stop request agreed between an evaluation's batches (``signum``: its signal)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _between_batches(stop: dict[str, int]) -> Callable[[], None]:
    """What an evaluation calls between two of its batches: ``_EvaluationStoppedError`` once the
    processes agree on a stop request (``stop``: ``stop_requests``' flag). An evaluation is as
    long as thousands of steps, and a stop that waited for its end outlived SIGTERM's grace;
    every process calls it at the same batches (the batches are split across them, the few-shot
    passes are whole in each), so all drop it at the same one and none waits in a collective."""
    agreement, batch = _Agreement(0), 0

    def between() -> None:
        nonlocal batch
        batch += 1
        signum, _ = agreement.stop(batch, stop["signal"], now=False)
        if signum:
            raise _EvaluationStoppedError(signum)

    return between


@dataclass(frozen=True)
class RunResult:
    """What a finished run reports: its final evaluation, on ``split`` ("test": the best weights
    on the test split apart from the validation split; "val": the last evaluation, where there is
    no such split), and the best validation accuracy, whose weights are in ``best/``."""

    split: str
    evaluation: Evaluation
    best: float
    ended_early: str | None = None  # why training ended before train.duration, in words


def train_prepared(prepared: PreparedRun, *, progress: bool = True) -> RunResult:
    """Train (or resume) the run ``prepared`` (``compose.prepare``: ``vitkit.fit`` and the
    commands), inside the block of its lock, which is taken here where the run directory is
    made."""
    run, run_dir, device = prepared.run, prepared.run_dir, prepared.device
    record = prepared.record
    tc = run.train
    torch.manual_seed(tc.seed)  # the same initial weights in every process
    rank, world, main = distributed.rank(), distributed.world_size(), distributed.is_main()

    # ---- data: every process walks the same global batches and keeps its part of each
    inputs = read_inputs(
        run, prepared.data, device=device, shard=(rank, world), recorded=record.config
    )
    data, cadence, classes = inputs.data, inputs.cadence, inputs.data.classes
    precision.configure(tc.precision, device)
    autocast = precision.autocast_dtype(tc.precision)
    run_dir.mkdir(parents=True, exist_ok=True)  # only once the run is known to be valid
    # before anything in it is read or changed (a run started at once stops here)
    prepared.lock.take()
    # every process checks: all fail alike
    check_run_dir(run_dir, run.to_dict(), write=main, recorded=record.config)
    if main:
        remove_partial_writes(run_dir)
        write_skipped(run_dir, data.skipped)
    # the newest checkpoint as it is now, in every process once the main one is done: one a
    # process killed mid-save left aside is back in place, and may be the newest (the record
    # was read before the lock, to compose the run)
    distributed.barrier()
    record = record.as_now()

    # ---- model, objective, optimizer; resume or initialise
    resume = checkpoint_to_resume(record, run)
    pretrained = resume is None and run.init_from is not None
    parts = build_parts(run, device, autocast=autocast, pretrained=pretrained)
    step, best, window, earlier_s, eval_due = 0, -1.0, _Window(), -prepared.started_s, False
    if resume is not None:
        try:
            state = parts.resume(resume)
        except CheckpointError as e:
            before = record.before_newest() if resume == record.last else None
            if before is None:
                raise
            raise CheckpointError(  # nothing is deleted for the user: it may be a copy to redo
                f"{e}; to continue from {before.name} instead, delete {resume}"
            ) from None
        step, best, window = state.step, state.best, _Window.resumed(state.window)
        eval_due = state.eval_due
        if not (run_dir / "best").is_dir():  # a checkpoint moved alone (--resume, a copy)
            best = -1.0  # the next evaluation writes best/, which the end of the run reads
        earlier_s = state.seconds - process_seconds()  # the run's clock goes on from there
    if main:
        truncate_metrics(run_dir / METRICS_FILE, step, evaluated=not eval_due)
        for line in banner(
            run,
            data,
            parts.model,
            device=device,
            cadence=cadence,
            run_dir=run_dir,
            step=step,
            precision_why=prepared.precision_why,
        ):
            log.info(line)
    meta = WeightsMeta(
        # what the head's outputs are, as reading checks: not an mpp run's head, sized apart
        class_names=tuple(classes) if len(classes) == run.model.num_classes else None,
        preprocess=Preprocess(image_size=run.model.image_size, in_chans=run.model.in_chans),
        run=run,
    )

    metrics = MetricsLog(run_dir, main=main, earlier_s=earlier_s)
    logged = run_dir / METRICS_FILE
    overfitting = Overfitting.from_log(logged, step, inputs.split, evaluated=not eval_due)
    evaluate = Evaluator(run, run_dir, parts, inputs, meta, best=best)
    trainer = _Trainer(run, run_dir, inputs, parts, evaluate, metrics, meta, autocast, overfitting)
    step, result = trainer.loop(step, window, progress=progress and main, eval_due=eval_due)
    return trainer.finish(step, result)


@dataclass
class _Trainer:
    """The loop over a run's built and resumed parts (``train_prepared`` builds them), and its end."""

    run: RunConfig  # with its precision and workers resolved
    run_dir: Path
    inputs: Inputs
    parts: Parts
    evaluate: Evaluator
    metrics: MetricsLog
    meta: WeightsMeta  # what checkpoints and best/ are written with
    autocast: torch.dtype | None
    overfitting: Overfitting
    ended_early: str | None = None  # why training ended before train.duration, in words

    def loop(
        self, step: int, window: _Window, *, progress: bool, eval_due: bool = False
    ) -> tuple[int, Evaluation | None]:
        """Train from ``step`` (with the log ``window`` so far) to the end; the last step and
        the last evaluation (None: none was due). ``eval_due``: ``step``'s evaluation first (a
        stop request dropped it). ``StoppedError`` after a stop request; ``train.time_budget``
        and ``train.early_stop`` end it sooner, as its end (``ended_early`` says why)."""
        run, tc, cadence, parts = self.run, self.run.train, self.inputs.cadence, self.parts
        device, rank, world = parts.live.device, distributed.rank(), distributed.world_size()
        # micro-batches across epochs, on the device: each moved there while the previous computes
        batches = on_device(self.inputs.train_batches.stream(step * tc.accum_steps), device)
        bar = _progress(cadence.total_steps, step, enabled=progress)
        if distributed.is_distributed():
            bar.write(
                f"{world} processes ({tc.parallel} on {device.type}): global batch "
                f"{tc.batch_size * tc.accum_steps} = {world} x {tc.batch_size // world} per process x {tc.accum_steps} accumulation steps"
            )
        result: Evaluation | None = None
        budget = None if tc.time_budget is None else parse_seconds(tc.time_budget)
        estimate = _Estimate(step, cadence.total_steps, tc.time_budget)
        # the first step whose loss was not finite (-1: none), kept on the device: read when the
        # host reads anyway (log and save steps, the end), never between
        diverged = torch.full((), -1, dtype=torch.int64, device=device)
        agreement = _Agreement(step)
        parts.step_fn.train()
        # closed however the loop ends: an error's traceback keeps this frame, and a stream
        # freed only with it (by the garbage collector) would keep its loader's workers waiting
        with closing(batches), stop_requests() as stop:
            if eval_due:  # the checkpoint resumed was saved without it
                result = self.evaluation(step, window, bar, stop)
            if budget is not None and self.spent(budget, agree=True):  # in an earlier process
                self.ended_early = _budget_spent(tc.time_budget, step, cadence.total_steps)
            elif tc.early_stop and self.overfitting.said:  # ended there in an earlier process
                self.ended_early = f"ended early at step {step:,} (train.early_stop)"
            if self.ended_early is not None:
                bar.close()
                return step, result
            while step < cadence.total_steps:
                if distributed.is_distributed():  # each process its own dropout, mixing, erasing
                    torch.manual_seed(derive_seed(tc.seed, rank, step))
                lr = learning_rate(
                    step,
                    cfg=run.optim,
                    total_steps=cadence.total_steps,
                    warmup_steps=cadence.warmup_steps,
                )
                diverged = self.train_step(step, lr, batches, window, diverged)
                step += 1
                window.n += 1
                bar.update(1)
                spent = budget is not None and self.spent(budget)
                due = cadence.log(step) or cadence.save(step)
                # one's signal stops all, one's spent budget ends all
                stopping, spent = agreement.stop(step, stop["signal"], now=due, spent=spent)
                if due or stopping or spent or cadence.eval(step):
                    _check_finite(diverged)  # never a log line, evaluation or checkpoint of NaNs

                if cadence.log(step) or spent:
                    elapsed = time.perf_counter() - window.t
                    loss_sum, accuracy_sum = window.totals()
                    record = {
                        "step": step,
                        "epoch": step / self.inputs.steps_per_epoch,
                        "lr": lr,
                        "loss": loss_sum / window.n,
                        "accuracy": accuracy_sum / window.n,
                        "images_per_s": window.images / max(elapsed, 1e-9),
                    }
                    self.metrics.write(record)
                    self.overfitting.trained(record["loss"])
                    minutes = self.metrics.run_seconds() / 60
                    bar.log(record, total=cadence.total_steps, minutes=minutes)
                    window = _Window()
                if cadence.eval(step) or spent:
                    result = self.evaluation(step, window, bar, stop)
                if spent and step < cadence.total_steps:
                    self.ended_early = _budget_spent(tc.time_budget, step, cadence.total_steps)
                ending = self.ended_early is not None and step < cadence.total_steps
                if cadence.save(step) or stopping or ending:
                    self.save(step, window)
                if stopping and step < cadence.total_steps:
                    bar.close()
                    raise StoppedError(stopping, f"after step {step}; checkpoint saved")
                if ending:  # as at the end: then tested with the best weights
                    bar.write(f"{self.ended_early}: checkpoint saved")
                    break
                said = estimate.after(step, self.metrics.run_seconds)  # read once, if said
                if said:
                    bar.write(said)
        bar.close()
        return step, result

    def spent(self, budget: float, *, agree: bool = False) -> bool:
        """Whether the run's time (``run_s``) has reached ``budget`` seconds; ``agree``: in any
        process (a collective under torchrun)."""
        over = self.metrics.run_seconds() >= budget
        if agree and distributed.is_distributed():
            return bool(distributed.all_max_many([float(over)])[0])
        return over

    def evaluation(
        self, step: int, window: _Window, bar: _NoBar, stop: dict[str, int]
    ) -> Evaluation:
        """The evaluation due after ``step``: logged, said, its weights kept if the best yet.
        A stop request agreed between its batches drops it: ``step`` is saved without it, the
        resumed run does it first (``StoppedError``)."""
        parts, split = self.parts, self.inputs.split
        what = "masked-patch colour accuracy" if parts.mpp is not None else "accuracy"
        started, dropped = time.perf_counter(), 0
        try:
            result = self.evaluate(
                parts.averaged,
                self.inputs.evaluation,
                self.inputs.data.val,
                between=_between_batches(stop),
            )
        except _EvaluationStoppedError as e:
            dropped = e.signum
        window.t += time.perf_counter() - started  # images/s counts training only
        if dropped:
            self.save(step, window, eval_due=True)
            bar.close()
            why = "checkpoint saved, its evaluation dropped (resuming does it)"
            raise StoppedError(dropped, f"after step {step}; {why}")
        self.metrics.write({"step": step, "split": split, **result.scalars()})
        one_view = result.accuracy_one_view
        bar.write(
            f"step {step}: {split} {what} {result.accuracy:.4f}"
            + ("" if one_view is None else f" (with its mirror; {one_view:.4f} without)")
            + f" ({self.metrics.run_seconds() / 60:.1f} min)"
        )
        self.evaluate.keep_if_best(result, parts.averaged)
        early_stop = self.run.train.early_stop
        if self.overfitting.evaluated(step, result.loss, result.accuracy):  # said once
            bar.write(f"vitkit: {self.overfitting.message(split, early_stop=early_stop)}")
            if early_stop:
                self.ended_early = f"ended early at step {step:,} (train.early_stop)"
        return result

    def save(self, step: int, window: _Window, *, eval_due: bool = False) -> None:
        """The checkpoint of ``step`` (every process gathers, rank 0 writes); ``eval_due``: saved
        without the evaluation due at ``step``."""
        parts = self.parts
        weights = distributed.model_state(parts.model)
        state = TrainState.capture(
            parts.live,
            step=step,
            best=self.evaluate.best,
            window=window.sums(),
            seconds=self.metrics.run_seconds(),
            eval_due=eval_due,
        )
        if distributed.is_main():
            save_checkpoint(
                self.run_dir,
                parts.model.cfg,
                weights,
                state,
                meta=self.meta,
                keep_last=self.run.train.keep_last,
            )
        distributed.barrier()  # no process stops (or exits) before the checkpoint is whole

    def train_step(
        self,
        step: int,
        lr: float,
        batches: Iterator[tuple[Tensor, Tensor]],
        window: _Window,
        diverged: Tensor,
    ) -> Tensor:
        """One optimizer step at learning rate ``lr``: ``train.accum_steps`` micro-batches of
        forward/backward (their losses and accuracies added to ``window``), global-norm clipping,
        the update, EMA. Returns ``diverged`` (the first step whose loss was not finite, -1:
        none), updated on the device."""
        tc, dc, parts, autocast = self.run.train, self.run.data, self.parts, self.autocast
        optimizer, scaler, step_fn = parts.live.optimizer, parts.live.scaler, parts.step_fn
        device, world = parts.live.device, distributed.world_size()
        set_learning_rate(optimizer, lr)
        for micro in range(tc.accum_steps):
            images, labels = next(batches)
            if dc.random_erase:  # on the scaled batch, before mixing
                images = random_erase(images, prob=dc.random_erase, max_count=dc.random_erase_count)
            # gradients are averaged over processes on the last micro-batch only (DDP)
            with distributed.no_sync(step_fn, micro < tc.accum_steps - 1):
                with torch.autocast(device.type, dtype=autocast, enabled=autocast is not None):
                    out = step_fn(images, labels)
                loss = out["loss"] / tc.accum_steps
                (loss if scaler is None else scaler.scale(loss)).backward()
            window.add(out["loss"], out["accuracy"], tc.accum_steps)
            window.images += labels.shape[0] * world
            finite = torch.isfinite(out["loss"].detach())
            diverged = torch.where(finite | (diverged >= 0), diverged, step + 1)
        if scaler is not None:
            scaler.unscale_(optimizer)  # the clipping below sees the true gradients
        if self.run.optim.grad_clip:
            torch.nn.utils.clip_grad_norm_(parts.trained, self.run.optim.grad_clip)
        if scaler is None:
            optimizer.step()
        else:
            scaler.step(optimizer)  # skipped when the scaled gradients overflowed
            scaler.update()
        optimizer.zero_grad(set_to_none=True)
        if parts.average is not None:
            parts.average.update(step)
        return diverged

    def finish(self, step: int, result: Evaluation | None) -> RunResult:
        """The run's result, evaluated with the best weights on a test split apart from the
        validation split, and its report."""
        data, split, averaged = self.inputs.data, self.inputs.split, self.parts.averaged
        if result is None:  # the run was already complete: evaluate its final weights
            result = self.evaluate(averaged, self.inputs.evaluation, data.val)
        finished = RunResult(split, result, self.evaluate.best, self.ended_early)
        if not (self.run_dir / "best").is_dir():  # a finished checkpoint moved alone (--resume)
            log.info("no best/ in %s: the final weights are kept as the best", self.run_dir)
            self.evaluate.save_best(averaged)
        if self.inputs.final_test is not None:  # the test split, once, with the chosen weights
            assert data.test is not None  # final_test is its batches
            tested = self.evaluate.best_model(self.parts.live.device)
            tests = self.evaluate(tested, self.inputs.final_test, data.test)
            finished = RunResult("test", tests, self.evaluate.best, self.ended_early)
            if not self.metrics.logged(step, "test"):  # a finished run re-evaluated: logged once
                self.metrics.write({"step": step, "split": "test", **tests.scalars()})
        if distributed.is_main():
            write_report(self.run_dir, finished.evaluation, finished.split, data.classes)
        return finished


def write_skipped(run_dir: Path, skipped: list[tuple[str, str]]) -> None:
    """``skipped_images.txt``: every image file the run skipped, and why, one per line, each
    as ``printable`` writes it (a newline or a byte that is not UTF-8 in a file's name was a
    second line, or a ``UnicodeEncodeError`` before the run began)."""
    if skipped:
        text = "".join(f"{printable(path)}\t{printable(why)}\n" for path, why in skipped)
        atomic_write(run_dir / SKIPPED_FILE, lambda p: p.write_text(text, encoding="utf-8"))


def _check_finite(diverged: Tensor) -> None:
    """Raise ``DivergedError`` if any process saw a loss that was not finite (a host read and,
    under torchrun, a collective: called at the same steps in every process)."""
    first = int(distributed.all_max_many([float(diverged.item())])[0])
    if first >= 0:
        raise DivergedError(
            f"the loss was not finite at step {first}: the run diverged (lower optim.lr, or set "
            "optim.grad_clip)"
        )


def _budget_spent(budget: str | None, step: int, total: int) -> str:
    return (
        f"train.time_budget={budget} spent after step {step:,} of {total:,} (a larger budget "
        "continues it)"
    )


def _minutes(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.1f} min"


class _Estimate:
    """The run's time left, said once its steps are measured: from the end of this process's
    first step (which compiles, and warms the loader) over ``ESTIMATE_STEPS`` steps or
    ``ESTIMATE_AFTER_S`` seconds, whichever comes first."""

    def __init__(self, step: int, total: int, budget: str | None) -> None:
        self.first, self.total, self.budget = step + 1, total, budget
        self.t: float | None = None  # when the first step ended
        self.said = False

    def after(self, step: int, run_seconds: Callable[[], float]) -> str | None:
        """The line to say after ``step`` (``run_seconds``: the run's clock, read then), once;
        else None."""
        now = time.perf_counter()
        if self.said or step < self.first:
            return None
        if self.t is None:
            self.t = now
            return None
        measured, took = step - self.first, now - self.t
        if measured < ESTIMATE_STEPS and (took < ESTIMATE_AFTER_S or measured < 2):
            return None
        self.said = True
        per_step = took / measured
        left = self.total - step
        line = (
            f"estimate: {_minutes(left * per_step)} for the {left:,} steps left, at "
            f"{per_step:.3g} s a step (steps {self.first + 1:,}-{step:,}; evaluations apart)"
        )
        budget = None if self.budget is None else parse_seconds(self.budget)
        run_s = run_seconds() if budget is not None else 0.0  # /proc reads: not every step
        if budget is not None and run_s + left * per_step > budget:
            near = step + max(0, int((budget - run_s) / per_step))
            line += f"; train.time_budget={self.budget} ends it near step {near:,}"
        return line


ESTIMATE_STEPS = 20  # steps measured for the estimate, or
ESTIMATE_AFTER_S = 20.0  # seconds of them, whichever comes first


class _NoBar:
    """Without a progress bar: one line per log window, and the evaluations, to the log."""

    def update(self, n: int) -> None: ...

    def write(self, text: str) -> None:
        log.info(text)

    def log(self, record: dict[str, Any], *, total: int, minutes: float) -> None:
        log.info(
            f"step {record['step']}/{total} (epoch {record['epoch']:.2f}): loss "
            f"{record['loss']:.4f}, accuracy {record['accuracy']:.4f}, lr {record['lr']:.3g}, "
            f"{record['images_per_s']:.0f} images/s ({minutes:.1f} min)"
        )

    def close(self) -> None: ...


class _Bar(_NoBar):
    """A tqdm progress bar; each log window's figures go to its postfix."""

    def __init__(self, total: int, initial: int) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=total, initial=initial, unit="step", dynamic_ncols=True)

    def update(self, n: int) -> None:
        self.bar.update(n)

    def write(self, text: str) -> None:
        self.bar.write(text)

    def log(self, record: dict[str, Any], *, total: int, minutes: float) -> None:
        self.bar.set_postfix(
            loss=f"{record['loss']:.3f}",
            acc=f"{record['accuracy']:.3f}",
            img_s=f"{record['images_per_s']:.0f}",
        )

    def close(self) -> None:
        self.bar.close()


def _progress(total: int, initial: int, *, enabled: bool) -> _NoBar:
    return _Bar(total, initial) if enabled else _NoBar()
