"""The cores this process may run on: what a pool of processes is sized by (verification's
pass, the loader's decoding workers)."""

from __future__ import annotations

import os


def usable_cores() -> int:
    """The cores this process may run on (its affinity where the platform says it, else every
    core of the machine)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1
