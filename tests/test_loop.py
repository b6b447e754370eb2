"""The loop at a GPU's pace: no host read between log steps, stop requests agreed on a cadence,
uint8 batches scaled on the device with workers that stay, and the precision a device wants."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

from helpers import bf16_from_any_size, logged_metrics
from vitkit import fit
from vitkit.config import ConfigError, RunConfig, replace
from vitkit.recipes import get_recipe

# Tensor methods that read a tensor's value on the host: on CUDA each one waits for the device.
HOST_READS = ("item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__")
# Who may read on the host, because the tensors they read live on the CPU whatever the device:
# data preparation (the loader, its workers) and the optimizers' step counters.
CPU_SIDE = ("vitkit.data", "torch.utils.data", "torch.optim")


def _counting(monkeypatch) -> Counter:
    """Count host reads made inside the training loop (``vitkit.train.loop`` on the stack), by
    the module and line that asked, leaving out ``CPU_SIDE``; and tensors made from host values
    on a device (``torch.tensor(x, device=...)``), a copy that CUDA waits for."""
    seen: Counter = Counter()

    def wrap(name: str):
        original = getattr(torch.Tensor, name)

        def read(self, *args, **kwargs):
            frame = sys._getframe(1)
            caller = frame.f_globals.get("__name__", "")
            if not caller.startswith(CPU_SIDE):
                where, f = f"{caller}:{frame.f_lineno}", frame
                while f is not None:
                    if f.f_globals.get("__name__") == "vitkit.train.loop":
                        seen[where] += 1
                        break
                    f = f.f_back
            return original(self, *args, **kwargs)

        return read

    for name in HOST_READS:
        monkeypatch.setattr(torch.Tensor, name, wrap(name))

    def copying(original):
        def make(*args, **kwargs):  # host values copied to the run's device: CUDA waits for it
            if kwargs.get("device") is not None:
                frame = sys._getframe(1)
                f = frame
                while f is not None:
                    if f.f_globals.get("__name__") == "vitkit.train.loop":
                        seen[f"{frame.f_globals.get('__name__', '')}:{frame.f_lineno}"] += 1
                        break
                    f = f.f_back
            return original(*args, **kwargs)

        return make

    for name in ("tensor", "as_tensor"):
        monkeypatch.setattr(torch, name, copying(getattr(torch, name)))
    return seen


def _quiet_run(device: str) -> RunConfig:
    """Classification with accumulation, clipping, EMA, mixup and CutMix (switched, not every
    batch) and random erasing, logging, evaluating and saving only at the last step."""
    return replace(
        get_recipe("smoke"),
        {
            "train.accum_steps": 2,
            "train.batch_size": 8,
            "train.ema": 0.9,
            "train.mixup": 0.2,
            "train.cutmix": 1.0,
            "train.mixup_prob": 0.9,
            "data.random_erase": 0.5,
            "data.random_erase_count": 2,
            "optim.grad_clip": 1.0,
            "train.log_every": "1000st",
            "train.eval_every": "1000st",
            "train.save_every": "1000st",
            "train.device": device,
        },
    )


def test_steps_that_do_not_log_read_nothing_on_the_host(tmp_path: Path, monkeypatch) -> None:
    """Classification with accumulation, clipping, EMA, mixing and erasing: a run of 8 steps
    reads on the host exactly what a run of 4 does, both logging, evaluating and saving at their
    last step only, so the 4 steps more read nothing and copy no host value to the device
    (mixup's parameter did, once per micro-batch, until the first run on a GPU showed it)."""
    run = _quiet_run("cpu")
    counts = []
    for steps in (4, 8):
        with monkeypatch.context() as m:
            seen = _counting(m)
            fit(
                replace(run, {"train.duration": f"{steps}st"}),
                run_dir=tmp_path / str(steps),
                progress=False,
            )
        counts.append(seen)
    assert counts[1] == counts[0], f"host reads in steps that do not log: {counts[1] - counts[0]}"
    assert sum(counts[0].values()) > 0  # the counting sees the reads of the last step


@pytest.mark.gpu
def test_no_step_synchronises_on_cuda(tmp_path: Path) -> None:
    """The same on CUDA, where it matters, through torch's own detector: every synchronising
    call warns; 8 steps warn as often as 4, and a failure names the lines that warned more."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    import collections
    import traceback
    import warnings

    import vitkit

    package = str(Path(vitkit.__file__).parent)
    run = _quiet_run("cuda")
    counts = []
    for steps in (4, 8):
        sites: collections.Counter[str] = collections.Counter()

        def seen(message, *args, sites=sites, **kwargs) -> None:
            if "synchroniz" in str(message):  # where vitkit called it from, innermost last
                frames = [f for f in traceback.extract_stack() if f.filename.startswith(package)]
                sites[" <- ".join(f"{Path(f.filename).name}:{f.lineno}" for f in frames[-3:])] += 1

        torch.cuda.set_sync_debug_mode("warn")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("always")
                warnings.showwarning = seen
                fit(
                    replace(run, {"train.duration": f"{steps}st"}),
                    run_dir=tmp_path / str(steps),
                    progress=False,
                )
        finally:
            torch.cuda.set_sync_debug_mode("default")
        counts.append(sites)
    more = {site: n - counts[0][site] for site, n in counts[1].items() if n > counts[0][site]}
    assert not more, f"synchronising calls in steps that do not log: {more}"
    assert sum(counts[0].values()) > 0  # the detector sees the reads of the last step


def test_a_second_ctrl_c_interrupts_at_once_and_a_second_sigterm_does_not(capfd) -> None:
    """The first Ctrl-C (or SIGTERM) is a flag the loop reads at a step's end, where it saves; a
    protocol's runs read it too (``stop_requests`` opened inside another is the outer one's).
    Either says so at once (a SIGTERM used to say nothing until the run stopped). A second
    Ctrl-C interrupts wherever the process is, with the handlers before put back. A second
    SIGTERM stays a flag, unsaid: torchrun sends one to its workers after the process group's."""
    import signal
    import threading

    from vitkit.runtime.stops import stop_requests

    def send(signum: int) -> None:  # to this thread: its handler runs before the next line
        signal.pthread_kill(threading.get_ident(), signum)

    before = signal.getsignal(signal.SIGINT)
    with stop_requests() as flag, stop_requests() as inner:
        assert inner is flag
        send(signal.SIGTERM)
        send(signal.SIGTERM)
        assert flag["signal"] == signal.SIGTERM
        assert capfd.readouterr().err == (  # once
            "\nvitkit: SIGTERM: stopping after the current step, saving it (an evaluation under "
            "way is dropped)\n"
        )
        send(signal.SIGINT)
        assert flag["signal"] == signal.SIGINT
        assert "Ctrl-C again to stop now" in capfd.readouterr().err
        with pytest.raises(KeyboardInterrupt):
            send(signal.SIGINT)
            raise AssertionError("not interrupted")
        assert signal.getsignal(signal.SIGINT) is before  # put back at once
    assert signal.getsignal(signal.SIGINT) is before


def test_stop_requests_are_agreed_on_a_cadence_of_seconds(monkeypatch) -> None:
    """Under torchrun the processes agree every ~10 s of steps (the slowest one's pace) and at
    every log or save step; alone, a process looks at its own flag at every step, for free."""
    from vitkit.train import distributed, loop

    agreement = loop._Agreement(0)
    assert agreement.stop(1, 15, now=False, spent=True) == (15, True)  # one process: at once
    calls: list[list[float]] = []
    monkeypatch.setattr(distributed, "is_distributed", lambda: True)

    def all_max_many(values: list[float]) -> list[float]:
        calls.append(values)
        return [values[0], 0.5, values[2]]  # the slowest process takes 0.5 s a step

    monkeypatch.setattr(distributed, "all_max_many", all_max_many)
    agreement = loop._Agreement(0)
    assert agreement.stop(1, 0, now=False) == (0, False) and len(calls) == 1  # the first agrees
    assert agreement.next == 1 + 20  # 10 s at 0.5 s a step
    seen = [agreement.stop(s, 15, now=False, spent=True) for s in range(2, 21)]
    assert seen == [(0, False)] * 19 and len(calls) == 1  # no collective in between
    assert agreement.stop(5, 15, now=True) == (15, False)  # a log or save step agrees when it comes
    assert agreement.stop(25, 15, now=False, spent=True) == (15, True) and len(calls) == 3
    assert loop.AGREE_EVERY_S == 10.0


def test_an_evaluation_agrees_on_a_stop_request_between_its_batches(monkeypatch) -> None:
    """Between an evaluation's batches a stop request drops it: alone, at the next batch; under
    torchrun where the processes agree, as between steps (at its first batch, then every ~10 s
    of the slowest one's batches), so that all drop it at the same batch and none is left in a
    collective. The first pass's batch is never checked before: there is nothing to drop."""
    from vitkit.eval.metrics import between_batches
    from vitkit.train import distributed, loop

    stop = {"signal": 0}
    served: list[int] = []

    def evaluation(batches: int) -> None:
        check = loop._between_batches(stop)
        served.clear()
        served.extend(between_batches(range(batches), check))

    evaluation(3)
    assert served == [0, 1, 2]
    stop["signal"] = 15  # alone: at the next batch
    with pytest.raises(loop._EvaluationStoppedError):
        evaluation(3)
    assert served == [0]  # dropped before its second batch
    calls: list[list[float]] = []
    monkeypatch.setattr(distributed, "is_distributed", lambda: True)

    def all_max_many(values: list[float]) -> list[float]:
        calls.append(values)
        return [15.0 if len(calls) > 1 else 0.0, 0.5, 0.0]  # another process's request, agreed late

    monkeypatch.setattr(distributed, "all_max_many", all_max_many)
    stop["signal"] = 0  # this process has none of its own
    batches = iter(between_batches(range(100), loop._between_batches(stop)))
    assert [next(batches) for _ in range(21)] == list(range(21))  # 10 s at 0.5 s a batch
    assert len(calls) == 1  # at the first check only
    with pytest.raises(loop._EvaluationStoppedError) as dropped:
        next(batches)
    assert dropped.value.signum == 15 and len(calls) == 2


def test_batches_are_uint8_scaled_on_the_device_as_before() -> None:
    from vitkit.data import Batches, BatchOptions, synthetic
    from vitkit.data.device import to_input

    data = synthetic(num_classes=4, per_class=8, image_size=16, channels=3, seed=0)
    kwargs = {"batch_size": 8, "train": True, "seed": 3, "flip": True, "crop_padding": 2}
    floats = list(Batches(data, BatchOptions(**kwargs)).epoch(0))
    raw = list(Batches(data, BatchOptions(uint8=True, **kwargs)).epoch(0))
    assert all(x.dtype == torch.uint8 for x, _ in raw)
    for (x, y), (u, v) in zip(floats, raw, strict=True):
        assert torch.equal(to_input(u, torch.device("cpu")), x) and torch.equal(y, v)


def test_workers_stay_for_the_whole_stream_and_every_evaluation(
    tmp_path: Path, monkeypatch
) -> None:
    """One DataLoader (and its workers) serves every epoch of a stream, another every
    evaluation; the batches are those of zero workers."""
    from PIL import Image

    from vitkit.data import Batches, BatchOptions, ImageFolderDataset
    from vitkit.runtime import stops

    for k in range(2):
        (tmp_path / "train" / f"c{k}").mkdir(parents=True)
        for i in range(6):
            Image.new("RGB", (12 + i, 10), (40 * k, 30 * i, 100)).save(
                tmp_path / "train" / f"c{k}" / f"{i}.png"
            )
    data = ImageFolderDataset(tmp_path, "train")
    made: list[int] = []

    class Counted(stops.DataLoader):
        def __init__(self, *args, **kwargs) -> None:
            made.append(kwargs["num_workers"])
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(stops, "DataLoader", Counted)
    train = {
        "batch_size": 4,
        "train": True,
        "seed": 1,
        "image_size": 8,
        "flip": True,
        "uint8": True,
    }
    with_workers, alone = (
        Batches(data, BatchOptions(num_workers=2, **train)),
        Batches(data, BatchOptions(num_workers=0, **train)),
    )
    stream, reference = with_workers.stream(1), alone.stream(1)
    for _ in range(3 * with_workers.steps_per_epoch):  # three epochs
        (x, y), (u, v) = next(stream), next(reference)
        assert torch.equal(x, u) and torch.equal(y, v)
    assert made == [2, 0]  # one loader each, whatever the epochs
    evaluation = Batches(data, BatchOptions(batch_size=5, train=False, image_size=8, num_workers=2))
    first, second = list(evaluation.epoch(0)), list(evaluation.epoch(0))
    assert all(torch.equal(a[0], b[0]) for a, b in zip(first, second, strict=True))
    assert made == [2, 0, 2]


def _one_worker(tmp_path: Path, monkeypatch, context: str) -> tuple:
    """Training batches of 16 images read by one loader worker started by ``context`` (not forked
    from the loop's handlers when "forkserver"), once it has served a batch: the batches' stream,
    the worker (a ``multiprocessing.Process``), the batches."""
    from PIL import Image

    from vitkit.data import Batches, BatchOptions, ImageFolderDataset
    from vitkit.runtime import stops

    for k in range(2):
        (tmp_path / "train" / f"c{k}").mkdir(parents=True)
        for i in range(4):
            Image.new("RGB", (10, 10), (90 * k, 40 * i, 50)).save(tmp_path / f"train/c{k}/{i}.png")

    class Started(stops.DataLoader):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, multiprocessing_context=context, **kwargs)

    monkeypatch.setattr(stops, "DataLoader", Started)
    data = ImageFolderDataset(tmp_path, "train")
    batches = Batches(
        data, BatchOptions(batch_size=2, train=True, seed=0, image_size=8, num_workers=1)
    )
    before = set(multiprocessing.active_children())
    stream = batches.stream(0)
    next(stream)
    (worker,) = set(multiprocessing.active_children()) - before
    return stream, worker, batches


def test_workers_leave_ctrl_c_to_the_main_process_however_started(
    tmp_path: Path, monkeypatch
) -> None:
    """A Ctrl-C reaches the whole process group: it must not kill the workers before the loop
    has saved its checkpoint, also when they are not forked from the loop's handlers."""
    import os
    import signal
    import time

    stream, worker, batches = _one_worker(tmp_path, monkeypatch, "forkserver")
    os.kill(worker.pid, signal.SIGINT)
    time.sleep(0.5)
    assert worker.is_alive()
    for _ in range(2 * batches.steps_per_epoch):  # the worker still serves
        next(stream)


@pytest.mark.parametrize("context", ["fork", "forkserver"])
def test_workers_outlive_a_sigterm_to_the_process_group(
    tmp_path: Path, monkeypatch, context: str
) -> None:
    """SIGTERM to the whole process group (SLURM, ``timeout``, ``kill -- -PGID``) is the main
    process's to handle too: the worker must serve until the loop has saved. torch's worker
    loop puts in place a SIGTERM handler of its own, which died of it."""
    import os
    import signal
    import time

    stream, worker, batches = _one_worker(tmp_path, monkeypatch, context)
    os.kill(worker.pid, signal.SIGTERM)
    time.sleep(0.5)
    assert worker.is_alive()
    for _ in range(2 * batches.steps_per_epoch):  # the worker still serves
        next(stream)


# Reads a folder with one persistent loader worker started by argv[2], keeps the loader alive
# in a global, and exits in an error: multiprocessing then terminates the worker with SIGTERM
# and waits for it.
_EXIT_WITH_A_WORKER = """
import sys
from vitkit.data import Batches, BatchOptions, ImageFolderDataset
from vitkit.runtime import stops

if __name__ == "__main__":
    class Started(stops.DataLoader):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, multiprocessing_context=sys.argv[2], **kwargs)

    stops.DataLoader = Started
    data = ImageFolderDataset(sys.argv[1], "train")
    options = BatchOptions(batch_size=2, train=True, seed=0, image_size=8, num_workers=1)
    KEPT = Batches(data, options).stream(0)
    next(KEPT)
    raise SystemExit(3)
"""


@pytest.mark.slow
def test_a_worker_left_at_exit_ends_with_its_main_process(tmp_path: Path) -> None:
    """A worker that ignores the group's SIGTERM must still end on the one multiprocessing sends
    as the main process exits (with the loader alive, as an error's traceback keeps it), also
    when it was not forked: the exit must not wait for it for ever."""
    import subprocess

    from PIL import Image

    for k in range(2):
        (tmp_path / "train" / f"c{k}").mkdir(parents=True)
        for i in range(2):
            Image.new("RGB", (10, 10), (90 * k, 40 * i, 50)).save(tmp_path / f"train/c{k}/{i}.png")
    done = subprocess.run(
        [sys.executable, "-c", _EXIT_WITH_A_WORKER, str(tmp_path), "forkserver"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 3, done.stderr
    assert "killed by signal" not in done.stderr, done.stderr


def test_the_workers_of_a_loader_freed_in_a_cycle_end_when_it_is_collected(
    tmp_path: Path, monkeypatch
) -> None:
    """A loader the garbage collector frees (held by a cycle: an error's traceback, a caller's
    objects) finds its queues closed before it shuts its workers down: they never get the word
    to end, and torch terminates them with a SIGTERM, which must end them then, not leave them
    until the main process exits."""
    import gc

    stream, worker, _ = _one_worker(tmp_path, monkeypatch, "fork")
    cycle: list = [stream]
    cycle.append(cycle)
    del stream, cycle
    gc.collect()
    assert not worker.is_alive()


def test_a_run_that_fails_ends_its_loader_workers_at_once(tmp_path: Path, monkeypatch) -> None:
    """However the training loop ends, its stream of batches is closed: an error's traceback
    (kept by whoever catches it) must not keep the loader's workers waiting."""
    from PIL import Image

    from vitkit.train.cadence import Cadence

    for k in range(2):
        (tmp_path / "data" / "train" / f"c{k}").mkdir(parents=True)
        for i in range(4):
            Image.new("RGB", (10, 10), (90 * k, 40 * i, 50)).save(
                tmp_path / "data" / "train" / f"c{k}" / f"{i}.png"
            )

    def failing(self: Cadence, step: int) -> bool:
        if step == 2:
            raise RuntimeError("a failure at step 2")
        return False

    monkeypatch.setattr(Cadence, "log", failing)
    run = replace(
        get_recipe("smoke"),
        {
            "data.dataset": str(tmp_path / "data"),
            "data.num_workers": 1,
            "model.num_classes": 2,
            "train.batch_size": 2,
            "train.device": "cpu",
            "train.duration": "4st",
        },
    )
    before = set(multiprocessing.active_children())
    with pytest.raises(RuntimeError, match="a failure at step 2") as failed:
        fit(run, run_dir=tmp_path / "run", progress=False)
    assert failed.traceback  # still held here
    assert set(multiprocessing.active_children()) == before


def test_loader_workers_divide_the_cores_among_the_processes(monkeypatch) -> None:
    import os

    from vitkit.runtime.machine import loader_workers

    monkeypatch.setattr(os, "sched_getaffinity", lambda _: set(range(16)))
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert loader_workers() == 15
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert loader_workers() == 3
    monkeypatch.setattr(os, "sched_getaffinity", lambda _: {0})
    assert loader_workers() == 0


def test_fit_prepares_its_run_once(tmp_path: Path, monkeypatch) -> None:
    """``vitkit.fit(run, run_dir=...)`` prepares the run (``compose.prepare``: its device, its run
    directory's record, its data) and trains it (``train_prepared``), taking nothing the caller
    read: a resumed run reads its config.json once, resolves its device once and reads its data
    once."""
    from helpers import count_preparation, stopped_copy

    run = replace(
        get_recipe("smoke"),
        {"train.device": "cpu", "data.num_workers": 0, "train.duration": "4st"},
    )
    run = replace(run, {"train.save_every": "2st", "train.eval_every": "4st"})
    fit(run, run_dir=tmp_path / "full", progress=False)
    resumed = stopped_copy(tmp_path / "full", tmp_path / "resumed", step=2)
    seen = count_preparation(monkeypatch)
    fit(run, run_dir=resumed, progress=False)
    assert (seen[resumed / "config.json"], seen["device"], seen["data"]) == (1, 1, 1)
    assert logged_metrics(resumed) == logged_metrics(tmp_path / "full")  # and it resumed exactly


def test_a_run_beyond_a_new_runs_bounds_is_refused_before_its_data_is_read(
    tmp_path: Path, monkeypatch
) -> None:
    """``fit`` without the command line (the Python API) keeps the bounds too, before it reads
    the data; a run directory that records the value keeps it."""
    import vitkit.data.run_data

    def no_data(*args: object, **kwargs: object) -> None:
        raise AssertionError("the data was read")

    monkeypatch.setattr(vitkit.data.run_data, "build_data", no_data)
    run = replace(get_recipe("smoke"), {"data.random_erase_count": 17, "train.device": "cpu"})
    with pytest.raises(ConfigError, match=r"random_erase_count=17 is not valid: .* in \[1, 16\]"):
        fit(run, run_dir=tmp_path, progress=False)
    (tmp_path / "config.json").write_text(json.dumps(run.to_dict()))
    with pytest.raises(AssertionError, match="the data was read"):
        fit(run, run_dir=tmp_path, progress=False)


def test_precision_is_resolved_recorded_and_kept_on_resume(tmp_path: Path) -> None:
    run = replace(get_recipe("smoke"), {"train.device": "cpu", "data.num_workers": 0})
    assert run.train.precision == "auto"
    fit(run, run_dir=tmp_path / "a", progress=False)
    saved = json.loads((tmp_path / "a" / "config.json").read_text())
    assert saved["train"]["precision"] == "fp32"  # auto, on a CPU
    assert saved["data"]["num_workers"] == 0
    with pytest.raises(ConfigError, match="computes in fp32, this run would in bf16") as info:
        fit(replace(run, {"train.precision": "bf16"}), run_dir=tmp_path / "a", progress=False)
    assert "--set train.precision=fp32" in str(info.value) and "\n" not in str(info.value)
    # another number of decoding workers is where the run computes, not what: it resumes
    fit(replace(run, {"data.num_workers": 1}), run_dir=tmp_path / "a", progress=False)


def test_auto_is_decided_once_when_a_run_starts(tmp_path: Path, monkeypatch) -> None:
    """A run of ``auto`` precision continues in the precision its directory records, whatever
    ``auto`` would decide now (here bf16: a CPU standing in for one with AVX512_BF16, the smoke
    model's batch counted as enough), and the banner says where it comes from; a new run
    decides, and says why."""

    run = replace(get_recipe("smoke"), {"train.device": "cpu", "data.num_workers": 0})
    fit(replace(run, {"train.duration": "4st"}), run_dir=tmp_path / "a", progress=False)
    bf16_from_any_size(monkeypatch)
    monkeypatch.setenv("VITKIT_CPU_BF16", "avx512_bf16")
    said: list[str] = []
    monkeypatch.setattr(logging.getLogger("vitkit.train.loop"), "info", said.append)
    # the finished run, evaluated again
    fit(replace(run, {"train.duration": "4st"}), run_dir=tmp_path / "a", progress=False)
    saved = json.loads((tmp_path / "a" / "config.json").read_text())
    assert saved["train"]["precision"] == "fp32"
    device = next(line for line in said if line.startswith("device"))
    assert f"fp32 (recorded in {tmp_path / 'a' / 'config.json'})" in device
    said.clear()
    fit(run, run_dir=tmp_path / "b", progress=False)
    assert json.loads((tmp_path / "b" / "config.json").read_text())["train"]["precision"] == "bf16"
    device = next(line for line in said if line.startswith("device"))
    assert "bf16 autocast (auto: this CPU has AVX512_BF16, and a forward pass" in device


@pytest.mark.slow
def test_fp16_scales_the_gradients_and_resumes_exactly(tmp_path: Path) -> None:
    """fp16 autocast with a gradient scaler (here on the CPU, where torch has both): its state
    travels with the checkpoints, so a resumed run logs what an uninterrupted one does."""
    from helpers import stopped_copy

    run = replace(
        get_recipe("smoke"),
        {
            "train.precision": "fp16",
            "train.device": "cpu",
            "train.log_every": "1st",
            "train.save_every": "2st",
            "train.keep_last": 4,
        },
    )
    fit(run, run_dir=tmp_path / "full", progress=False)
    state = torch.load(
        tmp_path / "full" / "checkpoints" / "step_00000008" / "state.pt", weights_only=True
    )
    assert state["scaler"]["scale"] > 0
    resumed = stopped_copy(tmp_path / "full", tmp_path / "resumed", step=4)
    (resumed / "metrics.jsonl").unlink()
    fit(run, run_dir=resumed, progress=False)
    assert logged_metrics(resumed) == [
        r for r in logged_metrics(tmp_path / "full") if r["step"] > 4
    ]


def test_repeated_augmentation_and_timms_ema_warmup_resume_exactly(tmp_path: Path) -> None:
    """data.aug_repeats=3 (each image three times an epoch, differently augmented) and timm's EMA
    warmup, stopped mid-epoch: the resumed run logs what an uninterrupted one does, into the next
    epoch (``BatchOptions.training`` takes data.aug_repeats: test_data.py)."""
    from helpers import stopped_copy

    keys = {"data.crop_padding": 2, "data.flip": True, "train.ema": 0.9}
    keys |= {"train.ema_warmup": "timm", "train.device": "cpu", "train.duration": "12st"}
    keys |= {"train.log_every": "1st", "train.save_every": "5st", "train.keep_last": 4}
    run = replace(get_recipe("smoke"), {**keys, "data.aug_repeats": 3})  # 8 steps an epoch
    fit(run, run_dir=tmp_path / "full", progress=False)
    resumed = stopped_copy(tmp_path / "full", tmp_path / "resumed", step=5)
    (resumed / "metrics.jsonl").unlink()
    fit(run, run_dir=resumed, progress=False)
    assert logged_metrics(resumed) == [
        r for r in logged_metrics(tmp_path / "full") if r["step"] > 5
    ]


def test_a_train_step_accumulates_updates_and_marks_divergence() -> None:
    """``train_step`` alone: ``accum_steps`` micro-batches into the window, one update of the
    weights, and the first step whose loss is not finite kept on the device (no host read)."""
    from vitkit.train import loop
    from vitkit.train.parts import build_parts

    run = replace(get_recipe("smoke"), {"train.accum_steps": 2, "optim.grad_clip": 1.0})
    parts = build_parts(run, torch.device("cpu"), autocast=None, pretrained=False)
    # train_step reads the run and its parts only
    trainer = loop._Trainer(run, Path(), None, parts, None, None, {}, None, None)
    images, labels = torch.rand(4, 3, 16, 16), torch.tensor([0, 1, 2, 3])
    before = [p.detach().clone() for p in parts.trained]
    window, none = loop._Window(), torch.tensor(-1)
    diverged = trainer.train_step(5, 1e-3, iter([(images, labels)] * 2), window, none)
    assert int(diverged) == -1 and window.images == 8 and window.device_sums is not None
    assert any(not torch.equal(b, p) for b, p in zip(before, parts.trained, strict=True))
    nan = torch.full_like(images, float("nan"))
    diverged = trainer.train_step(6, 1e-3, iter([(nan, labels)] * 2), window, diverged)
    assert int(diverged) == 7  # steps counted from 1: the 7th is the first that diverged


def test_a_time_budget_ends_the_run_saved_evaluated_and_tested(tmp_path: Path, caplog) -> None:
    """``train.time_budget`` ends a run at the first step past it on the run's clock (from
    ``fit``'s call; the command's from its process's start), as its end would: logged,
    evaluated, saved, then tested; the estimate said after the first steps names where. The same
    run again trains nothing (its budget was spent); a larger budget continues it."""
    import re

    sets = {
        "train.duration": "100000st",
        "train.time_budget": "8s",
        "train.device": "cpu",
        "data.num_workers": 0,
        "train.eval_every": "0st",
        "train.save_every": "0st",
    }
    run = replace(get_recipe("smoke"), sets)
    with caplog.at_level(logging.INFO, logger="vitkit.train.loop"):
        result = fit(run, run_dir=tmp_path, progress=False)
    said = caplog.text
    assert re.search(r"estimate: .* for the [\d,]+ steps left, at .* s a step \(steps 2-", said)
    assert "train.time_budget=8s ends it near step" in said
    ended = re.fullmatch(
        r"train.time_budget=8s spent after step ([\d,]+) of 100,000 \(a larger budget continues it\)",
        str(result.ended_early),
    )
    assert ended, result.ended_early
    step = int(ended[1].replace(",", ""))
    records = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r.get("split")] == [step]  # evaluated at its end only
    assert 8 <= records[-1]["run_s"] < 30
    checkpoints = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert checkpoints == [f"step_{step:08d}"]

    again = fit(run, run_dir=tmp_path, progress=False)
    assert again.ended_early == result.ended_early
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == checkpoints

    more = fit(replace(run, {"train.time_budget": "11s"}), run_dir=tmp_path, progress=False)
    later = re.findall(r"after step ([\d,]+)", str(more.ended_early))
    last = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])
    assert int(later[0].replace(",", "")) > step and last["run_s"] >= 11


def test_skipped_images_are_one_line_each_whatever_their_names(tmp_path: Path) -> None:
    """A skipped file whose name holds a byte that is not UTF-8 was a UnicodeEncodeError before
    the run began, and one with a newline two lines of skipped_images.txt: each is one line, as a
    terminal shows it, in UTF-8."""
    from vitkit.train.loop import write_skipped

    odd = os.fsdecode(b"bad\xff.jpg")  # as os.listdir gives it: a surrogate escape
    write_skipped(
        tmp_path, [(f"/p/{odd}", "UnidentifiedImageError: x"), ("/p/two\nlines.png", "y")]
    )
    lines = (tmp_path / "skipped_images.txt").read_bytes().decode("utf-8").splitlines()
    assert lines == ["/p/bad\\udcff.jpg\tUnidentifiedImageError: x", "/p/two\\nlines.png\ty"]
