"""The run directory's lock (train/rundir.py): one run at a time in a directory, named in one line
while it holds it; a killed run holds nothing; forked children do not keep it; a file system that
cannot lock runs without it; a .lock that is a directory is one line."""

from __future__ import annotations

import errno
import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import deterministic_metrics, vitkit_train
from vitkit import fit
from vitkit.recipes import get_recipe


def _holder(run_dir: Path) -> int | None:
    """The pid written in the run directory's lock file, if any yet."""
    try:
        return json.loads((run_dir / ".lock").read_text())["pid"]
    except (OSError, ValueError):
        return None


def test_a_second_run_in_a_run_directory_is_refused_and_a_killed_runs_lock_is_not(
    tmp_path: Path,
) -> None:
    """A run holds its directory from its start: a second command in it (started while the first
    is frozen by SIGSTOP, so that it certainly holds it) exits 2 with one line naming the first's
    pid (0.3-0.5 s here, before torch is imported or the data read), and writes nothing; once the
    first is killed (SIGKILL), the same command runs. Both used to run, resuming from each
    other's checkpoints mid-run with their logs interleaved."""
    command = ["--recipe", "smoke", "--set", "train.device=cpu", "--set", "train.duration=4st",
               "--no-progress", "--run-dir", str(tmp_path)]  # fmt: skip
    first = vitkit_train(*command)
    deadline = time.monotonic() + 60
    while _holder(tmp_path) != first.pid:
        assert first.poll() is None and time.monotonic() < deadline, first.stderr.read()
        time.sleep(0.005)
    first.send_signal(signal.SIGSTOP)
    try:
        second = subprocess.run(
            [sys.executable, "-m", "vitkit", "train", *command],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert second.returncode == 2
        assert re.fullmatch(
            rf"vitkit train: error: run directory {re.escape(str(tmp_path))} is in use by process "
            rf"{first.pid} on \S+ \(started [0-9-]+ [0-9:]+\): wait for that run to end \(or "
            r"stop it\), or use another --run-dir\n",
            second.stderr,
        ), second.stderr
        assert os.listdir(tmp_path) == [".lock"]
    finally:
        first.kill()  # SIGKILL: the kernel releases its lock
        first.communicate()
    third = subprocess.run(
        [sys.executable, "-m", "vitkit", "train", *command],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert third.returncode == 0, third.stderr
    assert [r["step"] for r in deterministic_metrics(tmp_path)] == [2, 4, 4]  # its log alone


# Takes the lock of run directory argv[1], forks a child that outlives it (as a data loader's
# worker may, for a moment, its killed parent), prints both pids, and waits.
_HOLD = """
import os, sys, time
from pathlib import Path
from vitkit.train.rundir import RunLock
with RunLock(Path(sys.argv[1])):
    ready, said = os.pipe()
    child = os.fork()
    if child == 0:  # its fork hooks have run (the lock's copy closed) when fork() returns here
        os.write(said, b"1")
        time.sleep(60)
        os._exit(0)
    os.read(ready, 1)  # under load the child may run later than this process: wait for it
    print(os.getpid(), child, flush=True)
    time.sleep(60)
"""


def test_the_loop_takes_the_lock_and_forked_children_do_not_keep_it(tmp_path: Path) -> None:
    """``vitkit.fit()`` (the API, not only the command line) refuses a run directory another
    process holds, before it reads or writes anything there; the lock ends with its holder, though
    a child it forked (a data loader's worker inherits its descriptors) still runs."""
    from vitkit.errors import UserFileError
    from vitkit.train.rundir import RunLock

    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    pid, child = map(int, holder.stdout.readline().split())
    try:
        with pytest.raises(UserFileError, match=rf"is in use by process {pid} on "):
            fit(get_recipe("smoke"), run_dir=tmp_path, progress=False)
        assert os.listdir(tmp_path) == [".lock"]
        holder.kill()
        holder.wait()
        os.kill(child, 0)  # the forked child still runs
        with RunLock(tmp_path):  # and the lock is free
            assert _holder(tmp_path) == os.getpid()
    finally:
        holder.kill()
        os.kill(child, signal.SIGKILL)


def test_a_file_system_that_does_not_lock_runs_without_the_lock(
    tmp_path: Path, monkeypatch, caplog
) -> None:
    """Where ``flock`` is not supported (Lustre mounted without ``-o flock``: ENOSYS; NFS
    without its lock daemon: ENOLCK) a run goes on as before the lock, with a warning. There is
    no such file system here: ``flock`` fails as it does there."""
    import fcntl

    from vitkit.train.rundir import RunLock

    def unsupported(fd: int, operation: int) -> None:
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))

    monkeypatch.setattr(fcntl, "flock", unsupported)
    with caplog.at_level(logging.WARNING), RunLock(tmp_path):
        assert _holder(tmp_path) == os.getpid()
    assert f"{tmp_path / '.lock'}: this file system does not lock files" in caplog.text


def test_a_lock_file_that_is_a_directory_is_one_line(tmp_path: Path, capsys) -> None:
    """A directory at the lock's name cannot be locked: one line naming it, nothing run."""
    from vitkit.cli import main

    (tmp_path / ".lock").mkdir()
    assert main(["train", "--recipe", "smoke", "--run-dir", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        f"vitkit train: error: {tmp_path / '.lock'} is a directory, expected a run's lock file\n"
    )
    assert os.listdir(tmp_path) == [".lock"]
