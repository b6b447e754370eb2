"""Data parallelism on PyTorch's own stack: torchrun's process group, DDP or FSDP2, and checkpoints
that do not depend on how many processes wrote them (docs/guides/scale-out.md).

Every process computes the gradient of its part of the global batch [P §4.1: 4096 on TPU pods]
and the wrapper (``train.parallel``) averages them: ``ddp`` keeps a replica per process and
all-reduces gradients; ``fsdp`` (FSDP2's ``fully_shard`` per block, then the root) shards
parameters, gradients and optimizer state, with a ``MixedPrecisionPolicy`` under bf16/fp16 (low
precision compute, fp32 reduction). Checkpoints hold full state dicts gathered to rank 0 on the
CPU, in the single-process format, so every reader takes them and they resume on any number of
processes (why not sharded files: docs/guides/scale-out.md). The process group is NCCL's between
GPUs (GPU ``LOCAL_RANK`` each: ``runtime.machine``), gloo's between CPUs; every collective waits
at most ``VITKIT_DIST_TIMEOUT`` seconds (default 300), so a dead or hung peer ends the job with
an error instead of a hang. A process that has been in the group ends by ``end_process``, without
the interpreter's shutdown, which gloo's threads outlive.
"""

from __future__ import annotations

import atexit
import os
import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from datetime import timedelta
from typing import TYPE_CHECKING, Any, NoReturn

import torch
import torch.distributed as dist
from torch import Tensor, nn

from ..errors import ConfigError
from ..runtime.machine import launched, this_device

if TYPE_CHECKING:
    from ..config import Device, Parallel

TIMEOUT_ENV = "VITKIT_DIST_TIMEOUT"
DEFAULT_TIMEOUT_S = 300


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


def resolve_device(requested: Device) -> torch.device:
    """This process's device (``runtime.machine.this_device``); a GPU becomes the current CUDA
    device, which NCCL and every CUDA call without an index use."""
    device = this_device(requested)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    return device


def backend(device: torch.device) -> str:
    """The process group's backend for processes computing on ``device``: NCCL between GPUs,
    gloo between CPUs."""
    return "nccl" if device.type == "cuda" else "gloo"


# Whether this process has joined torchrun's process group (``process_group``): it ends by
# ``end_process`` then.
_joined = False


@contextmanager
def process_group(device: torch.device) -> Iterator[None]:
    """Join torchrun's process group for the duration of the block, with the backend of this
    process's ``device`` (``resolve_device``'s; ``backend``); nothing without torchrun."""
    global _joined
    if not launched() or dist.is_initialized():
        yield
        return
    dist.init_process_group(backend(device), timeout=timedelta(seconds=timeout_s()))
    _joined = True
    try:
        yield
    finally:
        dist.destroy_process_group()


def joined() -> bool:
    """Whether this process has been in torchrun's process group (``process_group``)."""
    return _joined


def end_process(status: int) -> NoReturn:
    """End this process now with exit status ``status``: its ``atexit`` functions run (logging's
    handlers flushed, data loaders' workers ended: runtime/stops.py), its output is flushed, and
    the interpreter's shutdown is skipped, which a process that has been in a gloo process group
    must not take (issue 43). Its threads end where they stand (non-daemon ones are not waited
    for: vitkit starts none)."""
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with suppress(OSError, ValueError):  # a reader gone, a stream closed: nothing to keep
            stream.flush()
    # destroy_process_group leaves gloo's threads running: torch keeps the group (DTensor's caches
    # hold FSDP2's device mesh, which holds it; torch.distributed.nn.functional, imported once the
    # group exists by DDP or the state-dict helpers, keeps it as its functions' default group)
    # until the interpreter's shutdown frees them. A gloo thread releasing a finished barrier then
    # frees all-gather tensors owned by Python objects, which takes the GIL; the finalizing
    # interpreter makes it exit inside a noexcept destructor, and std::terminate aborts a process
    # that had finished and saved (SIGABRT, a job torchrun reports failed: about 1 launch in 20 on
    # 2 loaded cores; benchmarks/RESULTS.md)
    os._exit(status)


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
