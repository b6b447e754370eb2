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

Under an address-space limit (``ulimit -v``, Grid Engine's ``h_vmem``, ``RLIMIT_AS``) the
allocator is chosen to fit it: jemalloc keeps freed pages and reserves address space ahead (a
1-layer Fashion-MNIST run's peak 4.02 GB against glibc's 3.80), so it is not preloaded, and
glibc's per-thread arenas (each a 64 MB reservation) are capped at 2 (``fit_address_limit``):
under ``ulimit -v 3600000`` that run finishes where glibc's defaults failed in OpenBLAS and
jemalloc in numpy. Most of the address space is not vitkit's: PyPI's torch maps its CUDA
libraries (2.4 GB of the 3.2 GB after ``import torch``) on a CPU too. An allocation that still
fails is one line naming the limit (``out_of_memory``), not a traceback.

A library cannot preload: ``import vitkit`` in a plain Python process (a notebook, a script) tells
glibc's malloc to keep what is freed instead (``keep_freed_memory``), process-wide; off with
``VITKIT_MALLOPT=0``.
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


# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_M_MMAP_MAX = -4
_M_ARENA_MAX = -8
ARENAS_UNDER_A_LIMIT = 2
MALLOPT_ENV = "VITKIT_MALLOPT"
# glibc caps M_MMAP_THRESHOLD at 32 MiB (HEAP_MAX_SIZE / 2 on 64-bit): set above, it is refused
_MMAP_THRESHOLD_MAX = 32 * 2**20


def address_space_limit() -> int | None:
    """This process's address-space limit in bytes (``RLIMIT_AS``), or None where there is none
    (Windows has no such limit, nor the module that reads it)."""
    if sys.platform == "win32":
        return None
    import resource

    soft = resource.getrlimit(resource.RLIMIT_AS)[0]
    return None if soft == resource.RLIM_INFINITY else soft


def fit_address_limit() -> None:
    """Under an address-space limit, at most ``ARENAS_UNDER_A_LIMIT`` glibc arenas: threads
    share them instead of reserving 64 MB each. Nothing elsewhere (no limit, not glibc)."""
    if address_space_limit() is None or not sys.platform.startswith("linux") or jemalloc_loaded():
        return
    mallopt = getattr(ctypes.CDLL(None), "mallopt", None)
    if mallopt is not None:
        mallopt(_M_ARENA_MAX, ARENAS_UNDER_A_LIMIT)


def keep_freed_memory() -> str:
    """glibc's malloc set, for this whole process, to keep freed memory for reuse as jemalloc
    does under the command: no buffer is given back to the kernel when it is freed, so the next
    forward pass does not page-fault its activations in again. Returns what was done, in words.

    Measured on 2 cores of an AMD EPYC Zen 4, eager bf16 ViT-S/16 at batch 32 in a plain process
    (benchmarks/allocator.py): see benchmarks/RESULTS.md, "The Python API's allocator". Nothing
    where it does not apply: off Linux or glibc, ``VITKIT_MALLOPT=0``, jemalloc or tcmalloc
    loaded (they keep freed pages themselves), or under an address-space limit, where memory
    kept is address space a later allocation needs (``fit_address_limit`` decides there)."""
    if os.environ.get(MALLOPT_ENV, "1") == "0":
        return f"{MALLOPT_ENV}=0: glibc's defaults kept"
    if not sys.platform.startswith("linux"):
        return "not Linux: the allocator's defaults kept"
    libc = ctypes.CDLL(None)
    if jemalloc_loaded() or hasattr(libc, "tc_malloc"):
        return "jemalloc or tcmalloc is this process's allocator: nothing to set"
    if address_space_limit() is not None:
        return "an address-space limit is set: glibc's defaults kept (fit_address_limit)"
    if not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "mallopt"):
        return "not glibc: the allocator's defaults kept"
    # a fixed mmap threshold at glibc's cap (else it moves with what is freed), then no mmap at
    # all: every buffer comes from the heap, which is trimmed only above 1 GiB free at its top
    done = (
        libc.mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_MAX)
        and libc.mallopt(_M_MMAP_MAX, 0)
        and libc.mallopt(_M_TRIM_THRESHOLD, 2**30)
    )
    return "glibc's malloc keeps freed memory" if done else "glibc refused mallopt: defaults kept"


# What an allocation that failed says: Python and numpy (MemoryError), torch's CPU allocator,
# oneDNN (which reports a failed allocation as a primitive it could not create) and the dynamic
# loader mapping a library.
_OUT_OF_MEMORY = (
    "can't allocate memory",
    "not enough memory",
    "could not create a primitive",
    "failed to map segment from shared object",
    "cannot allocate memory",
)
# Of those, what says memory only under an address-space limit: oneDNN's refusal, and the loader's
# (a library on a noexec mount fails to map too, with "Operation not permitted").
_UNDER_A_LIMIT = ("could not create a primitive", "failed to map segment from shared object")


def out_of_memory(e: BaseException) -> str | None:
    """One line for an error that is an allocation refused, naming the address-space limit
    where one is set; None for any other error (its traceback is kept)."""
    text = str(e).lower()
    # torch.OutOfMemoryError (a GPU's memory) by name: this module never imports torch
    refused = isinstance(e, MemoryError) or type(e).__name__ == "OutOfMemoryError"
    if not refused and not any(s in text for s in _OUT_OF_MEMORY):
        return None
    if address_space_limit() is None and any(s in text for s in _UNDER_A_LIMIT):
        return None  # without a limit these are not known to be memory (a noexec mount, ...)
    limit = address_space_limit()
    if limit is None:
        return (
            "out of memory: the machine (or the GPU) has no more for this run; use a smaller batch "
            "(train.batch_size, with train.accum_steps to keep the mathematics) or model"
        )
    return (
        f"out of memory under this process's address-space limit of {limit / 2**30:.2f} GiB "
        "(ulimit -v, a scheduler's h_vmem): raise it (torch alone maps about 3 GiB, its "
        "CUDA libraries included, on a CPU too), or use a smaller batch (train.batch_size) or "
        "model"
    )


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
    if jemalloc_loaded() or address_space_limit() is not None:
        return  # under a limit, glibc's malloc with few arenas fits it (fit_address_limit)
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
