"""What a run leaves to the machine it runs on, decided in one place, each value with its origin.

- the device: ``train.device`` (or a command's ``--device``) ``auto`` is CUDA when PyTorch sees
  a GPU, else the CPU; under torchrun each process takes GPU ``LOCAL_RANK``;
- the arithmetic: ``train.precision`` ``auto`` is bf16 autocast on CUDA, and on a CPU with
  native bf16 where the model's batch is large enough (``runtime.arithmetic``), fp32 elsewhere;
- the step: ``train.compile`` ``auto`` is compiled for one process on CUDA, eager elsewhere
  and where compiling was not measured (``compile_on``);
- the decoding workers: ``data.num_workers`` none is this machine's cores divided among its
  processes, less one for the process itself.

``decide`` gives the values a run's config leaves open, with where each came from; the command
line states them, ``vitkit config`` prints them, and ``config.json`` records them, so a resumed
run keeps its precision and its compiled or eager step (and takes this machine's placement;
``compose.as_recorded``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

import torch

from ..config import Device
from ..errors import ConfigError
from .arithmetic import precision_on
from .cores import usable_cores

if TYPE_CHECKING:
    from ..config import ModelConfig, RunConfig


def launched() -> bool:
    """Whether this process was started by torchrun (which sets RANK and WORLD_SIZE)."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def local_processes() -> int:
    """The processes of this run on this machine (torchrun's ``LOCAL_WORLD_SIZE``, else 1)."""
    return max(int(os.environ.get("LOCAL_WORLD_SIZE", "1")), 1)


def choose_device(
    requested: Device, *, gpus: int, local_rank: int | None, setting: str = "train.device"
) -> torch.device:
    """The device ``requested`` names, given the number of GPUs PyTorch sees and torchrun's
    ``LOCAL_RANK`` (``None`` without torchrun): one GPU per process of a node, GPU 0 alone.
    ``setting``: what the user wrote it as, for the error (``train.device``, ``--device``)."""

    def written(value: str) -> str:  # as the user writes it: --device cpu, train.device='cpu'
        return f"{setting} {value}" if setting.startswith("--") else f"{setting}={value!r}"

    if requested not in get_args(Device):
        raise ConfigError(
            f"{written(requested)} is not valid: expected one of {', '.join(get_args(Device))}"
        )
    if requested == "cpu" or (requested == "auto" and gpus == 0):
        return torch.device("cpu")
    if gpus == 0:
        raise ConfigError(
            f"{written('cuda')} but PyTorch finds no GPU (torch.cuda.is_available() is False): "
            f"expected a CUDA build of PyTorch and a visible GPU, or use {written('cpu')}"
        )
    index = local_rank or 0
    if index >= gpus:
        raise ConfigError(
            f"LOCAL_RANK={index} but PyTorch sees {gpus} GPU(s): expected one GPU per process "
            f"(at most {gpus} processes per node), or {written('cpu')}"
        )
    return torch.device("cuda", index)


def this_device(requested: Device, *, setting: str = "train.device") -> torch.device:
    """``choose_device`` on this machine, for this process."""
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    local_rank = int(os.environ.get("LOCAL_RANK", "0")) if launched() else None
    return choose_device(requested, gpus=gpus, local_rank=local_rank, setting=setting)


def cores_per_process() -> int:
    """The cores this process may use, divided among this machine's processes (at least one)."""
    return max(1, usable_cores() // local_processes())


def loader_workers() -> int:
    """Decoding workers per process when ``data.num_workers`` is none: this process's share of
    the cores (``cores_per_process``), less one for the process itself."""
    return cores_per_process() - 1


def memory_bytes() -> int | None:
    """This machine's memory, or its container's limit where that is lower (cgroup v2's
    ``memory.max``); None where neither can be read."""
    try:
        found = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError):
        return None
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
    except OSError:
        return found
    return min(found, int(limit)) if limit.isdigit() else found


# Bytes a trained parameter holds in the CPU's memory during training: float32 weights, their
# gradients and AdamW's two moments (more with an EMA copy or activations, which are not counted).
TRAINED_BYTES = 16


def check_fits_memory(cfg: ModelConfig, device: torch.device) -> None:
    """A ``ConfigError`` naming the key when the ViT ``cfg`` cannot be trained in this machine's
    memory even before its activations (``TRAINED_BYTES`` a weight on a CPU; on a GPU the
    float32 weights the CPU builds first): a --set of hidden_size=30,000 (4.5e9 weights) filled
    the memory until the kernel killed the process."""
    host = memory_bytes()
    if cfg.arch != "vit" or host is None:
        return
    parts = cfg.weights_by_key
    # on a GPU the CPU holds the float32 weights alone, while they are built
    need = sum(parts.values()) * (TRAINED_BYTES if device.type == "cpu" else 4)
    if need > host:
        key = max(parts, key=lambda k: parts[k])
        raise ConfigError(
            f"model.{key}={getattr(cfg, key)} is not valid here: a model of about "
            f"{sum(parts.values()):.2e} weights needs {need / 2**30:.3g} GiB to train, more than "
            f"this machine's {host / 2**30:.3g} GiB of memory"
        )


def processes() -> int:
    """The processes of this run (torchrun's ``WORLD_SIZE``, else 1)."""
    return max(int(os.environ.get("WORLD_SIZE", "1")), 1) if launched() else 1


def compile_on(run: RunConfig, device: torch.device) -> tuple[bool, str]:
    """What ``train.compile`` ``auto`` stands for on ``device``, and why. On CUDA the step
    compiled with torch.compile's default mode: 1.26x the eager step (ViT-B/16, bf16, batch 256
    on an H200; max-autotune gained 2.6% more for 5 minutes of compiling, the whole step as one
    CUDA graph 1.6%: benchmarks/RESULTS.md), for 10-40 s at the start. Elsewhere eager, as
    before ``auto``: on a CPU the compile's 20-40 s pay on some runs and not others, and the
    recipes that gain set it (the Fashion-MNIST one). Eager for masked patch prediction (compiled
    classification only) and under torchrun: FSDP's and DDP's steps were measured eager only (a
    compiled model inside DDP hands its gradients over at the end of its backward graph, which
    may cost the overlap of their all-reduce with it more than compiling gains), and with
    activation checkpointing, whose per-block hooks torch.compile was never measured through."""
    tc = run.train
    if device.type != "cuda":
        return False, f"auto on {device.type}: eager, as before; a recipe compiles where it pays"
    if tc.objective != "classification":
        return False, f"auto: eager (train.objective={tc.objective} runs eager)"
    if launched():  # of any size: torchrun wraps even one process in DDP or FSDP
        return False, f"auto: eager under torchrun ({tc.parallel}: measured eager only)"
    if tc.activation_checkpointing:  # its per-block hooks were never traced by torch.compile
        return False, "auto: eager with train.activation_checkpointing (measured eager only)"
    return True, "auto on cuda: compiled (1.26x the eager step on an H200)"


def decide(run: RunConfig, device: torch.device, *, image_flops: int) -> dict[str, tuple[Any, str]]:
    """The values of ``run`` that are this machine's to decide (``train.precision`` and
    ``train.compile`` auto, ``data.num_workers`` none) on ``device``: dotted key -> (value,
    origin). ``image_flops``: the model's forward pass of one image (``model.flops.count_flops``),
    which sizes the work."""
    out: dict[str, tuple[Any, str]] = {}
    if run.train.precision == "auto":
        per_process = max(run.train.batch_size // processes(), 1)  # the batch of one forward pass
        out["train.precision"] = precision_on("auto", device, gflop=image_flops * per_process / 1e9)
    if run.train.compile == "auto":
        out["train.compile"] = compile_on(run, device)
    if run.data.num_workers is None:
        local = local_processes()
        processes_here = f"{local} processes" if local > 1 else "1 process"
        out["data.num_workers"] = (
            loader_workers(),
            f"none on this machine: {usable_cores()} cores for {processes_here}, less one each",
        )
    return out
