"""Stop requests: SIGTERM/SIGINT turned into a flag that training checks at a step's end and a
protocol before each run (``stop_requests``, ``stop_if_requested``, ``StoppedError``).

Contract: a stop request is honoured where the loop can save (train/loop.py; the processes of a
torchrun job agree on it there), never in the middle of a step; a second Ctrl-C interrupts at
once, a second SIGTERM does not.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch.distributed as dist


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
    run's last step check, or between runs, is seen by the protocol's next check.

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
        # once for a torchrun job, not once a process: rank 0 asked of torch.distributed at the
        # signal, as train/distributed.py's is_main does (the flag may open before the group)
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
