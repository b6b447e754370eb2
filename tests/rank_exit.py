"""``python tests/rank_exit.py ARGS``: ``vitkit ARGS`` in a process that torchrun starts, saying on
stderr how it ends (tests/test_distributed.py): ``rank R: exit functions ran`` once its ``atexit``
functions have run, and ``rank R: gloo threads alive as the interpreter shuts down: NAMES`` if its
interpreter starts to shut down with a thread of gloo's still running. Such a thread takes the GIL
to free tensors while the interpreter finalizes, is made to exit inside a ``noexcept`` destructor,
and ``std::terminate`` aborts a process that had finished (issue 43)."""

from __future__ import annotations

import atexit
import os
import runpy
import threading


def gloo_threads() -> list[str]:
    """The names of this process's gloo threads (native threads: ``threading`` does not list them;
    gloo names its transport's ``gloo_tcp_loop`` and its process group's ``pt_gloo_runloop``)."""
    names = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as comm:
                names.append(comm.read().strip())
        except FileNotFoundError:  # a thread that ended since the listing
            continue
    return sorted(name for name in names if "gloo" in name)


def say(text: str) -> None:
    # one write of one line: both processes write to torchrun's stderr
    os.write(2, f"rank {os.environ.get('RANK', '?')}: {text}\n".encode())


def at_shutdown() -> None:
    if threads := gloo_threads():
        say(f"gloo threads alive as the interpreter shuts down: {', '.join(threads)}")


atexit.register(say, "exit functions ran")  # registered first, so it runs last
# the first step of the interpreter's shutdown (before the atexit functions), which an exit by
# os._exit never takes; CPython's own hook for it, as concurrent.futures uses
threading._register_atexit(at_shutdown)
runpy.run_module("vitkit", run_name="__main__")
