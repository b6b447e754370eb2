"""jemalloc for the ``vitkit`` command: the allocator PyTorch's own CPU launcher
(``torch.backends.xeon.run_cpu``) preloads, set up for vitkit's users without a launcher.

Why: glibc's ``malloc`` gives every large buffer (an activation of a ViT-B/16 batch is tens of MB)
back to the kernel when it is freed, so the next step page-faults the same memory in again; jemalloc
keeps freed pages for reuse. The gain is the process environment's, not vitkit's: timm gets it as
much under the same preload, and ``benchmarks/RESULTS.md`` measures it on both sides.

An allocator is chosen when a process starts, so the command re-executes itself once, unchanged,
with ``LD_PRELOAD`` naming jemalloc. Nothing happens when jemalloc is not installed (Debian:
``libjemalloc2``; ``make venv`` installs it), when it is already loaded, off Linux, or when
``VITKIT_JEMALLOC=0``.
"""

from __future__ import annotations

import ctypes.util
import os
import sys
from pathlib import Path

SWITCH_ENV = "VITKIT_JEMALLOC"
# Freed pages kept for reuse (decay never: -1), a background purging thread, huge pages for
# jemalloc's metadata. Not run_cpu's spelling of "never", ``dirty_decay_ms:9000000000`` with
# ``oversize_threshold:1``: under Debian's jemalloc 5.3 that made a ViT-Ti/16 training step 1.3x
# slower than glibc's malloc on an Intel Xeon, where these settings make it 1.1-1.2x faster
# (benchmarks/RESULTS.md, "End to end against timm").
MALLOC_CONF = "background_thread:true,metadata_thp:auto,dirty_decay_ms:-1,muzzy_decay_ms:-1"
_SEARCH = ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib")


def find_jemalloc() -> str | None:
    """The path of the shared jemalloc library, or None where it is not installed."""
    for folder in _SEARCH:
        path = Path(folder) / "libjemalloc.so.2"
        if path.exists():
            return str(path)
    name = ctypes.util.find_library("jemalloc")  # a bare soname: the dynamic loader finds it
    return name


def jemalloc_loaded() -> bool:
    """Whether jemalloc is this process's allocator (preloaded, or linked in)."""
    if "jemalloc" in os.environ.get("LD_PRELOAD", ""):
        return True
    return hasattr(ctypes.CDLL(None), "mallctl")


def preload_jemalloc() -> None:
    """Re-execute this process (the same interpreter and command line) with jemalloc preloaded,
    once; returns without doing anything where that does not apply (see the module docstring)."""
    if os.environ.get(SWITCH_ENV, "1") == "0" or not sys.platform.startswith("linux"):
        return
    if jemalloc_loaded():
        return
    library = find_jemalloc()
    if library is None:
        return
    env = dict(os.environ)
    env["LD_PRELOAD"] = " ".join(p for p in (library, env.get("LD_PRELOAD", "")) if p)
    env.setdefault("MALLOC_CONF", MALLOC_CONF)
    env[SWITCH_ENV] = "0"  # never twice, whatever the loader made of LD_PRELOAD
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, sys.orig_argv, env)
