"""Time since the process started, the clock of time-to-accuracy: it counts from process start,
evaluation passes included."""

from __future__ import annotations

import os
import time
from pathlib import Path

_IMPORTED = time.monotonic()  # the fallback's origin, where /proc is missing


def process_seconds() -> float:
    """Seconds since this process started (Linux: the kernel's start time of the process, so the
    interpreter's start-up and imports count; jemalloc's re-execution keeps the process). Elsewhere:
    since this module was imported."""
    try:
        stat = Path("/proc/self/stat").read_text()
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except OSError:
        return time.monotonic() - _IMPORTED
    # the command name (field 2) may hold spaces: count fields after its closing parenthesis
    start_ticks = int(stat[stat.rindex(")") + 2 :].split()[19])  # field 22, starttime
    return uptime - start_ticks / os.sysconf("SC_CLK_TCK")
