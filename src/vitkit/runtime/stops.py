"""Stop requests: SIGTERM/SIGINT turned into a flag that training checks at a step's end and a
protocol before each run (``stop_requests``, ``stop_if_requested``, ``StoppedError``), and the
loader workers that leave them to the main process (``data_loader``). A request is honoured where
the loop can save (train/loop.py, where a torchrun job's processes agree on it)."""

from __future__ import annotations

import atexit
import functools
import multiprocessing
import os
import signal
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection
from typing import Any

import torch.distributed as dist
from torch.utils.data import DataLoader


class StoppedError(Exception):
    """SIGTERM/SIGINT arrived: a checkpoint was saved (or a protocol stopped between its runs),
    the run can be resumed. ``when``: what the message says after "stopped by signal N"."""

    def __init__(self, signum: int, when: str) -> None:
        super().__init__(f"stopped by signal {signum} {when}")
        self.signum = signum


# The flag of the stop requests open in this process (``stop_requests``), if any.
_open: dict[str, int] | None = None


@contextmanager
def stop_requests() -> Iterator[dict[str, int]]:
    """Turn SIGTERM/SIGINT into a flag, the signal's number (0: none), which the loop checks
    after each step and between an evaluation's batches (then it saves), and a protocol before
    each run (``stop_if_requested``); the first of them says so at once, on rank 0. Opened
    inside another (a run of a protocol), it is the outer one's: a signal that lands after a
    run's last step check, or between runs, is seen by the protocol's next check; a protocol
    opens one for all its runs as its decorator (``@stop_requests()``).

    A second Ctrl-C is someone who will not wait for that check (a slow step, data being read):
    the handlers in place before are put back and it interrupts at once (``KeyboardInterrupt``;
    the last checkpoint stays whole). A second SIGTERM does not: torchrun sends one to its
    workers after the process group's own."""
    global _open
    if _open is not None:
        yield _open
        return
    flag = {"signal": 0}
    interrupted = False

    def handler(signum: int, _frame: Any) -> None:
        nonlocal interrupted
        said = None
        if signum == signal.SIGINT:
            if interrupted:
                restore()
                raise KeyboardInterrupt
            interrupted, said = True, _SECOND_CTRL_C
        elif not flag["signal"]:  # torchrun repeats the group's SIGTERM: said once
            said = _SIGTERM
        # once a job: rank 0, read from torch.distributed at the signal as train's is_main reads
        # it (runtime is below train; a flag opened around a protocol predates its process group)
        if said and not (dist.is_available() and dist.is_initialized() and dist.get_rank()):
            os.write(2, said.encode())  # not print: it may be the call interrupted
        flag["signal"] = signum

    def restore() -> None:
        for s, h in previous.items():
            signal.signal(s, h)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    _open = flag
    try:
        yield flag
    finally:
        _open = None
        restore()


# What the first request says at once: the stop itself comes at the step's end, or at the next
# batch of an evaluation, which it drops.
_STOPPING = "stopping after the current step, saving it (an evaluation under way is dropped)"
_SECOND_CTRL_C = f"\nvitkit: {_STOPPING}; Ctrl-C again to stop now\n"
_SIGTERM = f"\nvitkit: SIGTERM: {_STOPPING}\n"


def stop_if_requested(before: str) -> None:
    """A ``StoppedError`` if the stop requests open have seen a signal (``before``: what it
    stops before)."""
    if _open is not None and _open["signal"]:
        raise StoppedError(_open["signal"], f"before {before}")


def data_loader(dataset: Any, **options: Any) -> DataLoader:
    """torch's ``DataLoader`` of ``dataset`` with ``options``, whose workers (if any) leave a stop
    request sent to the job's whole process group (Ctrl-C's SIGINT; SIGTERM from ``kill --
    -PGID``, ``timeout``, SLURM, systemd) to the main process: it finishes its step, saves, then
    ends its workers, which must serve it until then, however they were started (fork,
    forkserver, spawn).

    torch's worker loop installs its own SIGTERM handler before ``worker_init_fn`` runs (nothing
    is inherited): it exits quietly on a SIGTERM from the worker's parent and dies on any other,
    so the group's SIGTERM used to kill the workers and the main process failed at its next
    batch, unsaved. Who sent a signal cannot be read from Python where other threads may take it
    (a BLAS library's, started by the import of torch in a forkserver or spawned worker), so the
    main process says when a SIGTERM is its own instead: as it exits (``_exiting``:
    multiprocessing terminates the workers it did not shut down), and once the loader is
    released (torch terminates the workers that did not end when told to, which happens when
    the loader goes in a collection of garbage that closed its queues first). Before either, a
    SIGTERM is ignored. A main process killed outright leaves its workers as torch does (its
    worker loop stops when its parent is gone)."""
    if not options.get("num_workers"):
        return DataLoader(dataset, **options)
    released, release = multiprocessing.Pipe(duplex=False)
    start = functools.partial(_leave_stops_to_the_main_process, _exiting(), released)
    loader = DataLoader(dataset, worker_init_fn=start, **options)
    # a weak reference's callback runs before the loader's iterator shuts its workers down, both
    # when the last reference goes and when the garbage collector frees a cycle holding them
    weakref.finalize(loader, _say, release)
    return loader


def _leave_stops_to_the_main_process(
    exiting: Connection, released: Connection, _worker: int
) -> None:
    """In a loader worker (``data_loader``): SIGINT ignored; SIGTERM ignored until the main
    process has written to ``exiting`` or ``released``."""

    def on_sigterm(_signum: int, _frame: Any) -> None:
        if exiting.poll() or released.poll():  # the main process is done with this worker
            os._exit(0)  # quietly, as torch's handler does: a failure would be reported

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, on_sigterm)


def _say(writer: Connection) -> None:
    writer.send_bytes(b"x")
    writer.close()


_exit_pipe: tuple[int, Connection] | None = None  # the process that made it, its read end


def _exiting() -> Connection:
    """The read end of a pipe that this process writes to as it exits, before multiprocessing
    terminates the workers left (an ``atexit`` function registered after multiprocessing's
    runs before it); made once per process, and handed to each worker (pickled for a
    forkserver or spawned one)."""
    global _exit_pipe
    if _exit_pipe is None or _exit_pipe[0] != os.getpid():  # none yet, or a forked parent's
        reader, writer = multiprocessing.Pipe(duplex=False)
        atexit.register(_say_exiting, os.getpid(), writer)
        _exit_pipe = os.getpid(), reader
    return _exit_pipe[1]


def _say_exiting(pid: int, writer: Connection) -> None:
    if os.getpid() == pid:  # not in a process forked from this one (it inherits the function)
        _say(writer)
