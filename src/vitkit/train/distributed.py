"""Data parallelism on PyTorch's own stack: torchrun's process group, DDP or FSDP2, and checkpoints
that do not depend on how many processes wrote them (docs/DISTRIBUTED.md).

The paper trained on TPU pods with a global batch of 4096 [P §4.1]; here the same mathematics runs
on any number of processes launched by ``torchrun``: every process computes the gradient of its
part of the global batch and the wrapper averages them. ``train.parallel`` picks the wrapper:

- ``ddp``: ``DistributedDataParallel`` keeps a whole replica per process and all-reduces the
  gradients (models that fit one device: training ViT-B/16 needs ~1.4 GB of weights and
  optimizer state, plus activations).
- ``fsdp``: FSDP2's ``fully_shard`` on each transformer block, then on the root, shards
  parameters, gradients and optimizer state: a process holds 1/world of them and gathers one
  block's weights at a time (ViT-L, ViT-H). ``train.precision`` bf16 (or fp16) adds a ``MixedPrecisionPolicy`` (bf16
  compute, fp32 gradient reduction).

Checkpoints hold *full* state dicts, gathered to rank 0 and offloaded to CPU
(``get_model_state_dict`` / ``get_optimizer_state_dict`` with ``full_state_dict=True``), written
in the single-process format (``model.safetensors`` + ``state.pt`` with the optimizer's integer
parameter ids). Why not ``torch.distributed.checkpoint``'s sharded files: a checkpoint must stay
one format that every vitkit reader takes (``vitkit.load``, ``eval``, ``finetune``, a
single-process resume) and that resumes on any number of processes, DDP or FSDP. The price is a
gather through rank 0's CPU memory at each save, 12 bytes per parameter (weights and Adam's two
moments): 7.6 GB for ViT-H, acceptable up to the paper's largest model; sharded files are the
way past that.

Devices (``train.device``): ``auto`` computes on CUDA when PyTorch sees a GPU, else on the CPU.
Under torchrun each process takes GPU ``LOCAL_RANK`` and the process group is NCCL's (collectives
of CUDA tensors); on CPUs it is gloo's. A single process uses GPU 0 (``CUDA_VISIBLE_DEVICES``
picks another). Every collective waits at most ``VITKIT_DIST_TIMEOUT`` seconds (default 300): a
process that died or hangs ends the job with an error naming the timeout instead of hanging
forever.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from ..errors import ConfigError

if TYPE_CHECKING:
    from ..config import Device, Parallel

TIMEOUT_ENV = "VITKIT_DIST_TIMEOUT"
DEFAULT_TIMEOUT_S = 300


def launched() -> bool:
    """Whether this process was started by torchrun (which sets RANK and WORLD_SIZE)."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def timeout_s() -> float:
    """The longest wait of any collective, from ``VITKIT_DIST_TIMEOUT`` (seconds)."""
    text = os.environ.get(TIMEOUT_ENV, str(DEFAULT_TIMEOUT_S))
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ConfigError(f"{TIMEOUT_ENV}={text!r} is not valid: expected seconds > 0")
    return value


def choose_device(requested: Device, *, gpus: int, local_rank: int | None) -> torch.device:
    """The device ``train.device`` names, given the number of GPUs PyTorch sees and torchrun's
    ``LOCAL_RANK`` (``None`` without torchrun): one GPU per process of a node, GPU 0 alone."""
    if requested == "cpu" or (requested == "auto" and gpus == 0):
        return torch.device("cpu")
    if gpus == 0:
        raise ConfigError(
            "train.device='cuda' but PyTorch finds no GPU (torch.cuda.is_available() is False): "
            "expected a CUDA build of PyTorch and a visible GPU, or use train.device='cpu'"
        )
    index = local_rank or 0
    if index >= gpus:
        raise ConfigError(
            f"LOCAL_RANK={index} but PyTorch sees {gpus} GPU(s): expected one GPU per process "
            f"(at most {gpus} processes per node), or train.device='cpu'"
        )
    return torch.device("cuda", index)


def resolve_device(requested: Device) -> torch.device:
    """This process's device (``choose_device``); a GPU becomes the current CUDA device, which
    NCCL and every CUDA call without an index use."""
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    local_rank = int(os.environ.get("LOCAL_RANK", "0")) if launched() else None
    device = choose_device(requested, gpus=gpus, local_rank=local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    return device


def backend(device: torch.device) -> str:
    """The process group's backend for processes computing on ``device``: NCCL between GPUs,
    gloo between CPUs."""
    return "nccl" if device.type == "cuda" else "gloo"


@contextmanager
def process_group(device: Device) -> Iterator[None]:
    """Join torchrun's process group for the duration of the block, with the backend of
    ``train.device``'s device (``backend``); nothing without torchrun."""
    if not launched() or dist.is_initialized():
        yield
        return
    dist.init_process_group(backend(resolve_device(device)), timeout=timedelta(seconds=timeout_s()))
    try:
        yield
    finally:
        dist.destroy_process_group()


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    return dist.get_rank() if is_distributed() else 0


def world_size() -> int:
    return dist.get_world_size() if is_distributed() else 1


def is_main() -> bool:
    """Rank 0: the one process that writes logs, progress, metrics and checkpoints."""
    return rank() == 0


def collective_device() -> torch.device:
    """Where the tensors of collectives live: this process's GPU under NCCL (which takes CUDA
    tensors only), else the CPU. FSDP's device mesh is of its type."""
    if is_distributed() and dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def all_sum(tensor: Tensor) -> Tensor:
    """``tensor`` summed over processes (a new tensor on ``tensor``'s device; ``tensor`` itself
    without processes)."""
    if not is_distributed():
        return tensor
    total = tensor.to(collective_device(), copy=True)
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    return total.to(tensor.device)


def all_concat(tensor: Tensor) -> Tensor:
    """The 1-D ``tensor`` of every process, concatenated in rank order (the parts may differ in
    length: each is padded to the longest for ``all_gather``, then cut back); ``tensor`` itself
    without processes."""
    if not is_distributed():
        return tensor
    device = collective_device()
    length = torch.tensor([tensor.numel()], device=device)
    lengths = [torch.zeros_like(length) for _ in range(world_size())]
    dist.all_gather(lengths, length)
    sizes = [int(n) for n in torch.cat(lengths).tolist()]
    if max(sizes) == 0:
        return tensor
    padded = tensor.new_zeros(max(sizes), device=device)
    padded[: tensor.numel()] = tensor
    parts = [torch.empty_like(padded) for _ in sizes]
    dist.all_gather(parts, padded)
    return torch.cat([part[:n] for part, n in zip(parts, sizes, strict=True)]).to(tensor.device)


def all_mean(tensor: Tensor) -> Tensor:
    """``tensor`` averaged over processes (each holds the mean of an equal part of a batch)."""
    return all_sum(tensor) / world_size() if is_distributed() else tensor


def all_max(value: int) -> int:
    """The largest ``value`` of any process (a stop request seen by one stops all)."""
    return int(all_max_many([float(value)])[0])


def all_max_many(values: list[float]) -> list[float]:
    """The largest of each of ``values`` over processes, in one collective (a host read)."""
    if not is_distributed():
        return values
    tensor = torch.tensor(values, dtype=torch.float64, device=collective_device())
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return [float(v) for v in tensor.tolist()]


def barrier() -> None:
    if is_distributed():
        dist.barrier()


def checkpoint_blocks(blocks: Iterable[nn.Module]) -> None:
    """Activation checkpointing per block: each block's activations are recomputed in the
    backward pass instead of kept (about one block's worth kept instead of all of them, for one
    more forward). The composable API leaves parameter names unchanged (a wrapper would add
    ``_checkpoint_wrapped_module.`` to them, and to checkpoints)."""
    from torch.distributed._composable import checkpoint

    for block in blocks:
        checkpoint(block)


def parallelize(
    module: nn.Module,
    blocks: Sequence[nn.Module],
    *,
    parallel: Parallel,
    dtype: torch.dtype | None,
    find_unused: bool = False,
) -> nn.Module:
    """The module to call for training: ``module`` wrapped in DDP, or ``module`` itself sharded in
    place by FSDP2 (``blocks`` as units, then the rest as the root). ``find_unused``: some
    parameters get no gradient (masked patch prediction leaves the classifier head unused)."""
    if parallel == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(module, find_unused_parameters=find_unused)
    shard(module, blocks, dtype=dtype)
    return module


def shard(module: nn.Module, blocks: Sequence[nn.Module], *, dtype: torch.dtype | None) -> None:
    """FSDP2 in place: each of ``blocks`` becomes a unit whose weights are gathered for its own
    forward and backward only; ``module`` is the root holding the rest (embeddings, head).
    ``dtype``: the autocast dtype of a mixed-precision run, the gathered weights' too."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh(collective_device().type, (world_size(),))
    policy = (
        MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=torch.float32)
        if dtype is not None
        else MixedPrecisionPolicy()
    )
    for block in blocks:
        fully_shard(block, mesh=mesh, mp_policy=policy)
    fully_shard(module, mesh=mesh, mp_policy=policy)


def no_sync(module: nn.Module, skip: bool) -> AbstractContextManager[Any]:
    """Gradient accumulation: ``skip`` the all-reduce of this micro-batch's gradients (DDP keeps
    adding them locally until a micro-batch that syncs). FSDP reduce-scatters every micro-batch,
    which keeps its gradients sharded."""
    from torch.nn.parallel import DistributedDataParallel

    if skip and isinstance(module, DistributedDataParallel):
        return module.no_sync()
    return nullcontext()


@contextmanager
def unsharded(module: nn.Module) -> Iterator[None]:
    """``module``'s own FSDP-sharded parameters gathered for calls that bypass its ``forward``
    (evaluating the model inside the sharded objective); its blocks gather their own."""
    from torch.distributed.fsdp import FSDPModule

    if not isinstance(module, FSDPModule):
        yield
        return
    module.unshard()
    try:
        yield
    finally:
        module.reshard()


def _full_options(**kw: Any) -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, **kw)


def model_state(module: nn.Module) -> dict[str, Tensor]:
    """``module``'s whole weights: ``state_dict()`` in one process; gathered to CPU on rank 0
    under torchrun (a collective: every process calls it; the others get ``{}``)."""
    if not is_distributed():
        return module.state_dict()
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    # torch types the values as any state (DTensor, ShardedTensor, ...); a full state is tensors
    weights: dict[str, Any] = get_model_state_dict(module, options=_full_options(cpu_offload=True))
    return weights


def load_model_state(module: nn.Module, weights: dict[str, Tensor]) -> None:
    """Load whole weights (every process passes them) into ``module``, sharded or not; strict."""
    if not is_distributed():
        module.load_state_dict(weights, strict=True)
        return
    from torch.distributed.checkpoint.state_dict import set_model_state_dict

    full: dict[str, Any] = weights  # torch asks for a dict of its wider value type (invariant)
    set_model_state_dict(module, full, options=_full_options(strict=True))


def optimizer_state(module: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """The optimizer's whole state as ``optimizer.state_dict()`` gives it in one process (integer
    ids in parameter order), whatever the sharding; ``{}`` on ranks other than 0."""
    if not is_distributed():
        return optimizer.state_dict()
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    optimizers = getattr(optimizer, "optimizers", optimizer)  # Muon with AdamW: both
    full: dict[str, Any] = get_optimizer_state_dict(
        module, optimizers, options=_full_options(cpu_offload=True)
    )
    if not full:
        return {}
    names = [name for group in full["param_groups"] for name in group["params"]]
    ids = {name: i for i, name in enumerate(names)}
    return {
        "state": {ids[name]: state for name, state in full["state"].items()},
        "param_groups": [
            {**group, "params": [ids[name] for name in group["params"]]}
            for group in full["param_groups"]
        ],
    }


def load_optimizer_state(
    module: nn.Module, optimizer: torch.optim.Optimizer, state: dict[str, Any]
) -> None:
    """Load a state written by ``optimizer_state`` (any sharding) into ``optimizer``, whose
    parameters are ``module``'s."""
    if not is_distributed():
        optimizer.load_state_dict(state)
        return
    from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

    name_of = {id(p): name for name, p in module.named_parameters()}
    names = [name_of[id(p)] for group in optimizer.param_groups for p in group["params"]]
    full: dict[str, Any] = {
        "state": {names[i]: s for i, s in state["state"].items()},
        "param_groups": [
            {**group, "params": [names[i] for i in group["params"]]}
            for group in state["param_groups"]
        ],
    }
    optimizers = getattr(optimizer, "optimizers", optimizer)  # Muon with AdamW: both
    set_optimizer_state_dict(module, optimizers, full, options=_full_options())


def lost_peer(error: BaseException) -> bool:
    """Whether ``error`` is a collective that failed because another process died or hung
    (gloo reports both as a ``RuntimeError`` from its transport)."""
    return isinstance(error, dist.DistError) or (
        isinstance(error, RuntimeError) and "gloo" in str(error)
    )


def describe(error: BaseException) -> str:
    """The first sentence of a collective's error, without gloo's source location."""
    text = re.sub(r"^\[[^\]]*\]\s*", "", str(error).strip().splitlines()[0])
    return text.split(". ")[0].rstrip(".")
