"""Data parallelism through torchrun (gloo, CPU): the same mathematics on 1 or 2 processes.

A 2-process run with global batch 2b (b per process) must log the losses of a 1-process run with
batch 2b, step for step within fp32 tolerance, for DDP and for FSDP, and checkpoints must move
both ways between one process and sharded processes. The run keeps augmentation on (it is drawn
per global batch, then sliced), accumulation, clipping and EMA, and dropout at 0 (each process
draws its own dropout masks). The runs are pinned to the CPU (gloo): on a machine with one GPU,
``auto`` would put both processes' work on CUDA devices it does not have.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from helpers import stopped_copy
from vitkit.data import Batches, BatchOptions, synthetic
from vitkit.train.loop import TIMING_KEYS

RUN = [
    "train", "--recipe", "smoke", "--no-progress", "--set", "train.device=cpu",  # gloo on CPUs
    "--set", "train.duration=8st", "--set", "train.log_every=1st", "--set", "train.accum_steps=2",
    "--set", "train.save_every=2st", "--set", "train.keep_last=4", "--set", "train.eval_every=4st",
    "--set", "train.ema=0.9",
    "--set", "optim.grad_clip=1.0", "--set", "data.crop_padding=1", "--set", "data.flip=True",
    "--set", "model.dropout_rate=0.0",
]  # fmt: skip
FSDP = ["--set", "train.parallel='fsdp'"]

RANK_EXIT = Path(__file__).with_name("rank_exit.py")  # runs vitkit in a process torchrun starts


def vitkit(*args: str, torchrun: int = 0) -> None:
    """``python -m vitkit ARGS``, or the same under ``torchrun --standalone`` with the end of every
    process watched (``rank_exit.py``): each ran its exit functions, and none began to shut its
    interpreter down while a gloo thread was alive, which at times aborted a finished process
    (issue 43)."""
    launcher = ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={torchrun}"]
    program = [str(RANK_EXIT)] if torchrun else ["-m", "vitkit"]
    command = [sys.executable, *(launcher if torchrun else []), *program, *args]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    if torchrun:
        ended = re.findall(r"^rank (\d+): exit functions ran$", proc.stderr, flags=re.M)
        assert sorted(ended) == [str(r) for r in range(torchrun)], proc.stderr[-3000:]
        alive = [line for line in proc.stderr.splitlines() if "gloo threads alive as" in line]
        assert not alive, alive


def records(run_dir: Path) -> list[dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [
        {k: v for k, v in json.loads(line).items() if k not in (*TIMING_KEYS, "split")}
        for line in lines
    ]


def assert_same_run(got: Path, expected: Path) -> None:
    a, b = records(got), records(expected)
    assert [r["step"] for r in a] == [r["step"] for r in b] and len(a) == 10  # 8 steps, 2 evals
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        for key in x:  # losses and accuracies to fp32 tolerance
            assert x[key] == pytest.approx(y[key], rel=1e-5, abs=1e-7), (x["step"], key, x, y)


def assert_same_weights(got: Path, expected: Path, *, muon: bool = False) -> None:
    """The final checkpoints' weights agree, but for the attention's key biases: softmax ignores
    them, so their gradient is rounding noise that Adam scales up to full-size steps.

    Adam's weights agree to fp32 tolerance. Muon's matrices (``muon=True``) agree to what its bf16
    Newton–Schulz iterations can promise: the gradients of 1 and 2 processes are summed in
    another order, so they differ in their last fp32 bits, and each step's orthogonalised update
    O (entries at most its largest singular value, 1.2: ``orthogonalize``) may then round to the
    neighbouring bf16 value, one ulp = 2^-7 of an entry. Each step scales O by lr x 0.2 x
    sqrt(max(rows, columns)), so the weights may differ by the sum over steps of
    lr x 0.2 x sqrt(max(rows, columns)) x 1.2 x 2^-7 (1.6e-4 to 3.2e-4 here; measured: 9e-6 to 4e-5
    on an Intel Xeon without AMX)."""
    a, b = (
        load_file(d / "checkpoints" / "step_00000008" / "model.safetensors")
        for d in (got, expected)
    )
    lr_sum = sum(r["lr"] for r in records(expected) if "lr" in r)  # one record per step
    assert a.keys() == b.keys()
    for name in a:
        if name.endswith("attn.qkv.bias"):
            D = a[name].shape[0] // 3
            a[name][D : 2 * D] = b[name][D : 2 * D] = 0
        if muon and name.startswith("blocks.") and a[name].ndim == 2:
            bound = lr_sum * 0.2 * max(a[name].shape) ** 0.5 * 1.2 * 2**-7
            torch.testing.assert_close(a[name], b[name], rtol=0, atol=bound, msg=name)
        else:
            torch.testing.assert_close(a[name], b[name], rtol=1e-4, atol=1e-6, msg=name)


@pytest.fixture(scope="module")
def one_process(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("one")
    vitkit(*RUN, "--run-dir", str(run_dir))
    return run_dir


@pytest.mark.distributed
def test_ddp_on_two_processes_equals_one(one_process: Path, tmp_path: Path) -> None:
    vitkit(*RUN, "--run-dir", str(tmp_path), "--nproc", "2")  # vitkit's own way into torchrun
    assert_same_run(tmp_path, one_process)
    assert_same_weights(tmp_path, one_process)
    # each process's predictions gathered: the same confusion cells as one process's
    table = [(d / "confusion.csv").read_text() for d in (tmp_path, one_process)]
    assert table[0] == table[1] and table[0].count("\n") > 1


def assert_resumed(run_dir: Path, source: Path, step: int) -> None:
    """``run_dir`` continued ``source`` after ``step``: the log lines up to it are the copied ones,
    images/s included (a run that started over would have logged its own timings)."""
    lines = [(run_dir / "metrics.jsonl").read_text(), (source / "metrics.jsonl").read_text()]
    kept = [[ln for ln in text.splitlines() if json.loads(ln)["step"] <= step] for text in lines]
    assert kept[0] == kept[1] and kept[0]


@pytest.mark.distributed
def test_fsdp_on_two_processes_equals_one_and_checkpoints_move_both_ways(
    one_process: Path, tmp_path: Path
) -> None:
    # The 1-process run's checkpoint at step 4, resumed by 2 FSDP processes (sharded on load):
    # steps 5-8 as the 1-process run logged them.
    sharded = stopped_copy(one_process, tmp_path / "fsdp", step=4)
    vitkit(*RUN, *FSDP, "--run-dir", str(sharded), torchrun=2)
    assert_resumed(sharded, one_process, step=4)
    assert_same_run(sharded, one_process)
    assert_same_weights(sharded, one_process)  # gathered from the shards into our format

    # The sharded run's checkpoint at step 6, resumed by one process (the same command, no
    # torchrun): steps 7-8 as before.
    resumed = stopped_copy(sharded, tmp_path / "resumed", step=6)
    vitkit(*RUN, *FSDP, "--run-dir", str(resumed))
    assert_resumed(resumed, sharded, step=6)
    assert_same_run(resumed, one_process)


@pytest.mark.distributed
def test_muon_checkpoints_move_between_one_process_and_ddp(tmp_path: Path) -> None:
    # Muon with AdamW saves one optimizer state however many processes train: the 1-process
    # run's step 4 resumed by 2 DDP processes, their step 6 by one process, all as one run.
    muon = [*RUN, "--set", "optim.name='muon'", "--set", "optim.momentum=0.95"]
    one = tmp_path / "one"
    vitkit(*muon, "--run-dir", str(one))
    ddp = stopped_copy(one, tmp_path / "ddp", step=4)
    vitkit(*muon, "--run-dir", str(ddp), torchrun=2)
    assert_resumed(ddp, one, step=4)
    assert_same_run(ddp, one)
    assert_same_weights(ddp, one, muon=True)
    back = stopped_copy(ddp, tmp_path / "back", step=6)
    vitkit(*muon, "--run-dir", str(back))
    assert_resumed(back, ddp, step=6)
    assert_same_run(back, one)


def test_process_parts_make_up_the_one_process_batches() -> None:
    # Augmented training batches (in memory and per sample) and evaluation batches whose last
    # one leaves process 1 of 2 nothing: the parts, concatenated, are the 1-process batches.
    data = synthetic(num_classes=3, per_class=7, image_size=8, channels=1)

    class PerSample:  # not an ArrayDataset: the DataLoader path
        def __len__(self) -> int:
            return len(data)

        def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
            return data.images[i], int(data.labels[i])

    def batches(dataset, shard=(0, 1), **kw) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return list(
            Batches(dataset, BatchOptions(seed=5, image_size=8, shard=shard, **kw)).epoch(1)
        )

    for dataset in (data, PerSample()):
        for kw in (
            {"batch_size": 6, "train": True, "crop_padding": 2, "flip": True},
            {"batch_size": 4, "train": False},  # 21 = 5 x 4 + 1
        ):
            whole = batches(dataset, **kw)
            parts = [batches(dataset, (r, 2), **kw) for r in range(2)]
            assert len(parts[0]) == len(parts[1]) == len(whole)  # the same number of steps
            for (x, y), (x0, y0), (x1, y1) in zip(whole, *parts, strict=True):
                assert torch.equal(torch.cat([x0, x1]), x) and torch.equal(torch.cat([y0, y1]), y)
        # evaluation's last batch (1 image): one process gets an empty part, still a batch
        assert sorted(part[-1][0].shape[0] for part in parts) == [0, 1]
    with pytest.raises(ValueError, match="does not split evenly across 4 processes"):
        Batches(data, BatchOptions(batch_size=6, train=True, shard=(0, 4)))


@pytest.mark.distributed
@pytest.mark.slow
def test_sigterm_to_one_process_stops_both_within_the_grace(tmp_path: Path) -> None:
    """SIGTERM to one of two processes: they agree on it at their next agreement (at most ~10 s
    of steps later, never at every step), both save the same checkpoint and stop, well inside
    the 30 s that torchrun and SLURM give before SIGKILL."""
    import signal
    import time

    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
        "-m", "vitkit", "train", "--recipe", "smoke", "--no-progress", "--set", "train.device=cpu",
        "--set", "train.duration=100000st", "--set", "train.log_every=100000st",
        "--set", "train.eval_every=100000st", "--set", "train.save_every=100000st",
        "--run-dir", str(tmp_path),
    ]  # fmt: skip
    log = tmp_path / "stderr.txt"
    with open(log, "w") as stderr:  # a file, not a pipe: nothing waits on a reader
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr, text=True)
    deadline = time.monotonic() + 300
    while not (tmp_path / "config.json").is_file():  # written as the steps start
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)
    # both processes in their steps: each has its SIGTERM handler (the loop's stop requests); one
    # signalled before it (preparing its data, on loaded cores) died of it, with nothing to save
    pids: list[int] = []
    while len(pids) != 2 or not all(map(_catches_sigterm, pids)):
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
        workers = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True)
        pids = [int(p) for p in workers.stdout.split()]
        time.sleep(0.05)
    time.sleep(3)  # well into the steps, whose log and save steps all lie past the end
    signalled = time.monotonic()
    import os

    os.kill(pids[1], signal.SIGTERM)  # one process only: the other learns it from the agreement
    proc.wait(timeout=60)
    took = time.monotonic() - signalled
    err = log.read_text()
    assert took < 30, f"{took:.1f} s from SIGTERM to the end"
    stopped = sorted(set(re.findall(r"stopped by signal 15 after step (\d+)", err)))
    assert len(stopped) == 1, err[-2000:]  # both processes stopped after the same step
    step = int(stopped[0])
    assert (tmp_path / "checkpoints" / f"step_{step:08d}" / "state.pt").is_file()
    assert 1 <= step < 100000


def _catches_sigterm(pid: int) -> bool:
    """Whether process ``pid`` has a handler of its own for SIGTERM (its SigCgt mask; False once
    it has ended)."""
    import signal

    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    (caught,) = [line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")]
    return bool(int(caught, 16) >> (signal.SIGTERM - 1) & 1)


@pytest.mark.distributed
@pytest.mark.slow
def test_sigterm_to_the_process_group_of_nproc_saves_and_ends_in_one_line(tmp_path: Path) -> None:
    """``vitkit train --nproc 2`` signalled as a job (SLURM, ``timeout``, ``kill -- -PGID``):
    torchrun's agent and both processes get SIGTERM; the processes save the same step and stop,
    and the agent's ``SignalException`` is one line and exit status 143, not a traceback and 1."""
    import os
    import signal
    import time

    command = [
        sys.executable, "-m", "vitkit", "train", "--nproc", "2", "--recipe", "smoke",
        "--no-progress", "--set", "train.device=cpu", "--set", "train.duration=100000st",
        "--set", "train.log_every=2st", "--set", "train.eval_every=100000st",
        "--set", "train.save_every=100000st", "--run-dir", str(tmp_path),
    ]  # fmt: skip
    log = tmp_path / "stderr.txt"
    with open(log, "w") as stderr:  # a file, not a pipe: nothing waits on a reader
        proc = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True
        )
    deadline = time.monotonic() + 300
    while not (tmp_path / "metrics.jsonl").is_file():  # written at the first log step
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    err = log.read_text()
    assert "Traceback" not in err, err[-3000:]
    assert "torchrun: stopped by signal 15, passed on to its processes" in err
    (step,) = map(int, re.findall(r"stopped by signal 15 after step (\d+); checkpoint saved", err))
    assert (tmp_path / "checkpoints" / f"step_{step:08d}" / "state.pt").is_file()
