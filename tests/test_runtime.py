"""vitkit.runtime: the allocator the command line sets up, and the fast inference path."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from vitkit.runtime.allocator import SWITCH_ENV, find_jemalloc

PROBE = (
    "from vitkit.runtime.allocator import preload_jemalloc; preload_jemalloc(); "
    "print('jemalloc' in open('/proc/self/maps').read())"
)


def _probe(**env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", SWITCH_ENV)}
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env={**clean, **env}, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.mark.skipif(find_jemalloc() is None, reason="jemalloc is not installed (libjemalloc2)")
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="LD_PRELOAD is Linux's")
def test_command_line_process_runs_on_jemalloc_once() -> None:
    assert _probe() == "True"  # re-executed once with jemalloc preloaded, then ran on
    assert _probe(**{SWITCH_ENV: "0"}) == "False"  # the switch turns it off
