"""vitkit.runtime: the allocator the command line sets up, the fast inference path, and the
eval mode every evaluation uses."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from collections.abc import Callable

import pytest
import torch

import vitkit
from helpers import randomize, tiny
from vitkit.inference import compiled as inference
from vitkit.inference.compiled import OneDNNLinear, onednn_speedup, optimize_for_inference
from vitkit.runtime.allocator import SWITCH_ENV, find_jemalloc
from vitkit.runtime.mode import eval_mode

PROBE = (
    "from vitkit.runtime.allocator import preload_jemalloc; preload_jemalloc(); "
    "print('jemalloc' in open('/proc/self/maps').read())"
)


def _limited(limit: int) -> Callable[[], None]:
    """A ``preexec_fn``: the child's address space limited to ``limit`` bytes (``ulimit -v``)."""
    return lambda: resource.setrlimit(
        resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1])
    )


def _probe(limit: int | None = None, **env: str) -> str:
    clean = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", SWITCH_ENV)}
    out = subprocess.run(
        [sys.executable, "-c", PROBE],
        env={**clean, **env},
        capture_output=True,
        text=True,
        preexec_fn=None if limit is None else _limited(limit),
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.mark.skipif(find_jemalloc() is None, reason="jemalloc is not installed (libjemalloc2)")
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="LD_PRELOAD is Linux's")
def test_command_line_process_runs_on_jemalloc_once() -> None:
    assert _probe() == "True"  # re-executed once with jemalloc preloaded, then ran on
    assert _probe(**{SWITCH_ENV: "0"}) == "False"  # the switch turns it off
    # Under an address-space limit (ulimit -v, h_vmem), glibc's malloc: jemalloc reserves more
    assert _probe(limit=64 * 2**30) == "False"


# Eight threads each hold a malloc of glibc's at once (each takes an arena of its own, up to glibc's
# 8 per core), then glibc lists its arenas on stderr; argv[1] == "fit": fit_address_limit() first.
ARENAS = """
import ctypes, sys, threading
from vitkit.runtime.allocator import fit_address_limit
if sys.argv[1] == "fit":
    fit_address_limit()
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
held = threading.Barrier(9)
def hold():
    block = libc.malloc(1 << 16)
    held.wait()
    libc.free(ctypes.c_void_p(block))
threads = [threading.Thread(target=hold) for _ in range(8)]
for thread in threads:
    thread.start()
held.wait()
for thread in threads:
    thread.join()
libc.malloc_stats()
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_under_an_address_space_limit_threads_share_two_arenas() -> None:
    """``fit_address_limit`` (the command line's, with the allocator): under ``ulimit -v`` each
    thread's 64 MB glibc arena would count against the limit, so threads share
    ``ARENAS_UNDER_A_LIMIT``; without a limit nothing changes."""
    from vitkit.runtime.allocator import ARENAS_UNDER_A_LIMIT

    def arenas(fit: bool, limit: int | None) -> int:
        clean = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", SWITCH_ENV)}
        done = subprocess.run(
            [sys.executable, "-c", ARENAS, "fit" if fit else "no"],
            env=clean,
            capture_output=True,
            text=True,
            preexec_fn=None if limit is None else _limited(limit),
        )
        assert done.returncode == 0, done.stderr
        return done.stderr.count("Arena ")

    # else the main thread's and one a thread (9 here; at most 8 per core)
    assert arenas(fit=False, limit=64 * 2**30) > ARENAS_UNDER_A_LIMIT
    assert arenas(fit=True, limit=64 * 2**30) == ARENAS_UNDER_A_LIMIT
    assert arenas(fit=True, limit=None) > ARENAS_UNDER_A_LIMIT


# A 256 MiB buffer written, then freed: the resident memory (MiB) it leaves behind, after
# ``import vitkit`` (argv[1] == "import") or without it.
FREED = """
import ctypes, sys
if sys.argv[1] == "import":
    import vitkit
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
size = 256 * 2**20
block = libc.malloc(size)
ctypes.memset(block, 1, size)
libc.free(ctypes.c_void_p(block))
resident = int(open("/proc/self/statm").read().split()[1]) * 4096
print(resident // 2**20)
"""


def _kept_after_free(imported: bool, limit: int | None = None, **env: str) -> int:
    clean = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", SWITCH_ENV)}
    done = subprocess.run(
        [sys.executable, "-c", FREED, "import" if imported else "no"],
        env={**clean, **env},
        capture_output=True,
        text=True,
        preexec_fn=None if limit is None else _limited(limit),
    )
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
def test_import_vitkit_keeps_freed_memory_for_reuse_unless_told_not_to() -> None:
    """A library cannot preload jemalloc: ``import vitkit`` tells glibc's malloc to keep what is
    freed (a freed 256 MiB buffer stays resident for the next one), except with
    ``VITKIT_MALLOPT=0`` and under an address-space limit, where glibc gives it back."""
    from vitkit.runtime.allocator import MALLOPT_ENV

    plain = _kept_after_free(imported=False)
    assert _kept_after_free(imported=True) > plain + 200  # the buffer, kept
    assert _kept_after_free(imported=True, **{MALLOPT_ENV: "0"}) < plain + 50
    assert _kept_after_free(imported=True, limit=64 * 2**30) < plain + 50


@pytest.mark.skipif(find_jemalloc() is None, reason="jemalloc is not installed (libjemalloc2)")
def test_keep_freed_memory_leaves_jemalloc_alone() -> None:
    probe = "from vitkit.runtime.allocator import keep_freed_memory; print(keep_freed_memory())"
    clean = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", SWITCH_ENV)}
    done = subprocess.run(
        [sys.executable, "-c", probe],
        env={**clean, "LD_PRELOAD": str(find_jemalloc())},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("jemalloc or tcmalloc"), done.stdout


# A run whose model alone (200M parameters, 0.8 GB) exceeds the 300 MB it is left after torch.
OOM = """
import resource, sys
import torch
size = next(line for line in open("/proc/self/status") if line.startswith("VmSize"))
limit = int(size.split()[1]) * 1024 + 300 * 2**20
resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
from vitkit.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_out_of_memory_under_an_address_space_limit_is_one_line_naming_it(tmp_path) -> None:
    args = ["--recipe", "smoke", "--set", "model.hidden_size=4096", "--set", "model.mlp_dim=16384"]
    out = subprocess.run(
        [sys.executable, "-c", OOM, "train", *args, "--run-dir", str(tmp_path / "run")],
        capture_output=True,
        text=True,
        # one thread: on a machine of many cores their stacks alone could exhaust the 300 MB
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert out.returncode == 2, out.stderr[-2000:]
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("vitkit train: error: out of memory under this process's address-space")
    assert "GiB (ulimit -v" in last and "Traceback" not in out.stderr


@pytest.fixture
def eager() -> tuple[torch.nn.Module, torch.Tensor, torch.Tensor]:
    """A random tiny ViT, images, and its eager logits for them (the reference path)."""
    model = randomize(vitkit.create_model(tiny()))
    images = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        return model, images, model.eval()(images)  # logits (3, 10)


@pytest.mark.slow
def test_fast_inference_gives_the_eager_logits(eager) -> None:
    model, images, want = eager
    fast = optimize_for_inference(model, precision="fp32", backend="inductor")
    assert not fast.training and fast.eval() is fast
    got = fast(images)
    assert (got - want).abs().max().item() <= 1e-4 and want.abs().max() > 0.1
    assert (fast(images[:1]) - want[:1]).abs().max().item() <= 1e-4  # another batch size
    with pytest.raises(ValueError, match="frozen weights"):
        fast.train()
    half = optimize_for_inference(model, bf16=True)(images)  # auto: inductor for bf16
    assert half.dtype == torch.bfloat16 and (half.float() - want).abs().max().item() <= 5e-2


def test_onednn_backend_gives_the_eager_logits_and_leaves_the_model_alone(eager) -> None:
    model, images, want = eager
    fast = optimize_for_inference(model, precision="fp32", backend="onednn")
    assert fast.backend == "onednn"
    assert any(isinstance(m, OneDNNLinear) for m in fast.modules())
    assert not any(isinstance(m, OneDNNLinear) for m in model.modules())  # packed a copy
    assert (fast(images) - want).abs().max().item() <= 1e-4
    assert onednn_speedup(model) > 0  # measured on this machine: which is faster varies
    with pytest.raises(ValueError, match="fp32 weights on the CPU"):
        optimize_for_inference(model, bf16=True, backend="onednn")
    with pytest.raises(ValueError, match="expected 'auto'"):
        optimize_for_inference(model, backend="mkl")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("speedup", "precision", "chosen"),
    [
        (2.0, "fp32", "onednn"),
        (1.1, "fp32", "inductor"),
        (2.0, "bf16", "inductor"),
        (2.0, "auto", "inductor"),
    ],
)
def test_auto_takes_onednn_only_where_it_is_clearly_faster_in_fp32(
    monkeypatch, speedup: float, precision: str, chosen: str
) -> None:
    # the machine's measurement replaced by a given one: the rule, not this CPU, is under test
    monkeypatch.setattr(inference, "onednn_speedup", lambda model: speedup)
    model = vitkit.create_model(tiny())
    assert inference.choose_backend(model, precision=precision) == chosen  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("cpu", "batch", "bf16"),
    [("none", 32, False), ("avx512_bf16", 32, True), ("amx_bf16", 1, True), ("none", 1, False)],
)
def test_auto_precision_decides_per_input_shape_as_the_commands_do(
    monkeypatch, cpu: str, batch: int, bf16: bool
) -> None:
    """``precision="auto"`` decides at the first batch of each shape as ``--precision auto``
    (``decide_auto``: ViT-S/16 is 9.2 GFLOP an image, over the 1.0 from which bf16 pays), and
    ``bf16=`` keeps its meaning; every CPU kind through ``VITKIT_CPU_BF16``."""
    from vitkit.runtime.arithmetic import CPU_ENV

    monkeypatch.setenv(CPU_ENV, cpu)
    model = vitkit.create_model("ViT-S/16")
    fast = optimize_for_inference(model, backend="inductor")  # compiled at a first call only
    assert fast.bf16_for(torch.empty(batch, 3, 224, 224)) is bf16
    monkeypatch.setenv(CPU_ENV, "none")  # a shape decided stays decided
    assert fast.bf16_for(torch.empty(batch, 3, 224, 224)) is bf16
    assert fast.bf16_for(torch.empty(batch + 1, 3, 224, 224)) is False
    assert optimize_for_inference(model, bf16=True, backend="inductor").precision == "bf16"
    assert optimize_for_inference(model, bf16=False, backend="inductor").precision == "fp32"


@pytest.mark.parametrize("training", [True, False])
def test_eval_mode_gives_the_mode_back_even_on_error(training: bool) -> None:
    model = vitkit.create_model(tiny(dropout_rate=0.1)).train(training)
    with eval_mode(model) as inside:
        assert inside is model and not any(m.training for m in model.modules())
    assert all(m.training == training for m in model.modules())
    with pytest.raises(RuntimeError), eval_mode(model):
        raise RuntimeError("a failed evaluation")
    assert all(m.training == training for m in model.modules())


def test_a_gpus_out_of_memory_is_one_line_and_other_errors_keep_their_traceback() -> None:
    """torch's OutOfMemoryError (CUDA's) is the machine's, one line; a RuntimeError of vitkit's
    own, or oneDNN's refusal where no address-space limit makes it memory, is not."""
    from vitkit.runtime.allocator import address_space_limit, out_of_memory

    cuda = torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
    assert (out_of_memory(cuda) or "").startswith("out of memory")
    assert out_of_memory(RuntimeError("shape '[2, 3]' is invalid for input of size 5")) is None
    if address_space_limit() is None:
        assert out_of_memory(RuntimeError("could not create a primitive")) is None


def test_a_refused_allocation_of_any_kind_is_one_line_and_a_bug_is_not(capsys) -> None:
    """Through the command line's error handling: ``ENOMEM`` from fork or mmap (an ``OSError``)
    is one line, exit status 2; a library that cannot be mapped without a limit (a noexec mount)
    and a bug's ``RuntimeError`` keep their tracebacks."""
    import argparse
    import errno

    from vitkit.cli import _run
    from vitkit.runtime.allocator import address_space_limit

    def verb(error: BaseException) -> argparse.Namespace:
        def run(args: argparse.Namespace) -> None:
            raise error

        return argparse.Namespace(verb="train", run=run)

    enomem = OSError(errno.ENOMEM, "Cannot allocate memory")
    assert _run(verb(enomem), debug=False) == 2
    assert capsys.readouterr().err.startswith("vitkit train: error: out of memory")
    with pytest.raises(RuntimeError):
        _run(verb(RuntimeError("mat1 and mat2 shapes cannot be multiplied")), debug=False)
    with pytest.raises(OSError):
        _run(verb(enomem), debug=True)  # --debug: every traceback
    if address_space_limit() is None:
        noexec = ImportError("libx.so: failed to map segment from shared object: not permitted")
        with pytest.raises(ImportError):
            _run(verb(noexec), debug=False)


def test_torchao_import_drops_torchs_log_of_torchaos_enums_and_nothing_else() -> None:
    """Inside ``torchao_import``, torch's deprecation of an Enum registered as a pytree constant
    is dropped when the Enum is torchao's (the command test: test_int8.py); the same record of
    another package's Enum, another record, and anything after the block are logged."""
    import enum
    import logging

    from vitkit.runtime.torchao import torchao_import

    theirs = enum.Enum("KernelPreference", "AUTO", module="torchao.quantization.fake")
    ours = enum.Enum("Mine", "A", module="vitkit.fake")
    seen: list[str] = []

    class Seen(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    logger, handler = logging.getLogger("torch.utils._pytree"), Seen()
    logger.addHandler(handler)
    deprecated = "%s is an Enum subclass and is now natively supported by torch.compile (...)"
    try:
        with torchao_import():
            logger.warning(deprecated, theirs)
            logger.warning(deprecated, ours)
            logger.warning("another record of %s", theirs)
        logger.warning(deprecated, theirs)
    finally:
        logger.removeHandler(handler)
    assert seen == [
        deprecated % ours,
        f"another record of {theirs}",
        deprecated % theirs,
    ]


def test_a_model_too_large_for_the_memory_is_refused_before_the_run_begins(
    tmp_path, monkeypatch, capsys
) -> None:
    """A --set of hidden_size=30,000 (4.5e9 weights: 67 GiB to train) filled a 24 GB machine
    until the kernel killed it; the memory each weight needs in training is checked against
    the machine's (or its container's limit) before the run directory is made."""
    import torch

    from vitkit.cli import main
    from vitkit.config import ConfigError
    from vitkit.presets import get_config
    from vitkit.runtime import machine

    assert machine.memory_bytes() is None or machine.memory_bytes() > 2**28
    base = get_config("ViT-Ti/16")  # 5.5e6 weights: 88 MB to train on a CPU, 22 MB on a GPU
    monkeypatch.setattr(machine, "memory_bytes", lambda: 50 * 2**20)
    with pytest.raises(ConfigError, match=r"model\.mlp_dim=768 is not valid here: .* more "):
        machine.check_fits_memory(base, torch.device("cpu"))
    machine.check_fits_memory(base, torch.device("cuda"))  # the weights alone on the CPU
    monkeypatch.setattr(machine, "memory_bytes", lambda: None)  # unknown: not checked
    machine.check_fits_memory(base, torch.device("cpu"))
    monkeypatch.setattr(machine, "memory_bytes", lambda: 2**20)
    run_dir = tmp_path / "r"
    argv = ["train", "--recipe", "smoke", "--set", "model.hidden_size=2048", "--set"]
    assert main([*argv, "model.num_heads=1", "--run-dir", str(run_dir)]) == 2
    assert "model.hidden_size=2048 is not valid here: a model of about" in capsys.readouterr().err
    assert not run_dir.exists()
