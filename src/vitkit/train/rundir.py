"""One training process at a time in a run directory: ``RunLock``, an exclusive ``flock`` on
``RUN_DIR/.lock`` taken without waiting and held until the run ends.

Two runs in one directory would each resume from the other's checkpoints mid-run, delete the
other's half-written ones and interleave their logs; the second is refused at once instead, in
one line naming the first (its pid, host and start are written in the lock file). The kernel
releases a ``flock`` when its process dies, so a killed run resumes at once; the lock file stays
(deleting it would let two processes lock two different files). Under torchrun rank 0 alone takes
it: one lock for the job, on which the other ranks do not block.

No torch here: the command line takes the lock before it imports torch and reads the data, so a
second run stops in a fraction of a second.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import socket
import time
from pathlib import Path
from typing import ClassVar

from ..errors import UserFileError

LOCK_FILE = ".lock"
# What flock says on a file system that does not lock files: the run goes on without the lock.
UNLOCKABLE = frozenset({errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOLCK})

log = logging.getLogger(__name__)

# The descriptors of the locks this process holds: a forked child closes its copies.
_DESCRIPTORS: set[int] = set()


def _close_in_child() -> None:
    """In a forked child (a data loader's worker): close the copies of this process's locks, so
    that a lock ends with the process that took it (a ``flock`` lasts until every descriptor of it
    is closed), not with the last of its workers. Closed, not unlocked: unlocking would free the
    parent's lock too."""
    for fd in _DESCRIPTORS:
        os.close(fd)
    _DESCRIPTORS.clear()


if hasattr(os, "register_at_fork"):  # not on Windows
    os.register_at_fork(after_in_child=_close_in_child)


def _try_lock(path: Path) -> int | None:
    """An exclusive ``flock`` on the file ``path`` (created if missing), without waiting: the open
    descriptor that holds it, or None if another process holds it. No lock where ``fcntl`` does
    not exist (Windows) or on a file system that does not lock files (a warning): the descriptor
    alone. ``OSError`` if ``path`` cannot be opened for writing (a read-only folder: the command
    line says so in one line); ``UserFileError`` if it is a symbolic link or a directory."""
    try:
        # O_NOFOLLOW: a link planted at the lock's name never makes us create or write a file
        # elsewhere
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o666)
    except OSError as e:
        found = {errno.ELOOP: "a symbolic link", errno.EISDIR: "a directory"}.get(e.errno or 0)
        if found is None:
            raise
        raise UserFileError(f"{path} is {found}, expected a run's lock file") from None
    try:
        import fcntl

        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except ImportError:
        pass
    except BlockingIOError:
        os.close(fd)
        return None
    except OSError as e:  # a file system that does not lock (Lustre without -o flock: ENOSYS)
        if e.errno not in UNLOCKABLE:
            os.close(fd)
            raise
        log.warning("%s: this file system does not lock files (%s); run one run at a time", path, e)
    _DESCRIPTORS.add(fd)
    return fd


class RunLock:
    """The lock of ``run_dir``, taken by this process if ``enabled`` (rank 0). Entering refuses a
    run directory that is a file (or inside one) and takes the lock if the directory exists;
    ``take`` takes it once the directory is made (``make`` makes it and takes it); leaving
    releases it if this object took it. Taking it again in the process that holds it does
    nothing: the command line takes it before it reads the data, and the loop, which the API
    calls too, where it makes the directory. ``flag``: the command's flag that names the
    directory, which the refusal of a directory in use names."""

    _held: ClassVar[dict[Path, int]] = {}  # this process's locks: run directory -> descriptor

    def __init__(self, run_dir: Path, *, enabled: bool = True, flag: str = "--run-dir") -> None:
        self.run_dir, self.enabled, self.flag = run_dir, enabled, flag
        self.key: Path | None = None  # while this object holds the lock it took

    def __enter__(self) -> RunLock:
        existing = next(p for p in (self.run_dir, *self.run_dir.parents) if p.exists())
        if not existing.is_dir():
            raise UserFileError(
                f"run directory {self.run_dir}: {existing} is a file, expected a directory"
            )
        if self.run_dir.is_dir():
            self.take()
        return self

    def make(self) -> None:
        """Make the run directory, or a ``UserFileError`` saying why it cannot be made (a
        folder this process may not write in, a file system that holds no folders), and take
        the lock."""
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UserFileError(
                f"run directory {self.run_dir} cannot be made ({e.strerror}): give another "
                f"{self.flag}"
            ) from None
        self.take()

    def take(self) -> None:
        """Hold the lock of the (existing) run directory, or raise ``UserFileError`` naming the
        process that holds it."""
        key = self.run_dir.resolve()
        if not self.enabled or key in self._held:
            return
        path = self.run_dir / LOCK_FILE
        fd = _try_lock(path)
        if fd is None:
            raise UserFileError(
                f"run directory {self.run_dir} is in use by {_holder(path)}: wait for that run "
                f"to end (or stop it), or use another {self.flag}"
            )
        self._held[key], self.key = fd, key
        holder = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        }
        with contextlib.suppress(OSError):  # a full disk: the lock holds without the holder's name
            os.ftruncate(fd, 0)
            os.write(fd, json.dumps(holder).encode())

    def __exit__(self, *exc: object) -> None:
        if self.key is None:
            return
        fd = self._held.pop(self.key)
        self.key = None
        if fd in _DESCRIPTORS:  # in a forked child, closed already
            _DESCRIPTORS.remove(fd)
            os.close(fd)  # the lock goes with it


def _holder(path: Path) -> str:
    """Who holds the lock file ``path``, as written in it."""
    try:
        who = json.loads(path.read_text())
        return f"process {who['pid']} on {who['host']} (started {who['started']})"
    except (OSError, ValueError, KeyError, TypeError):  # still being written, or not ours
        return "another process"
