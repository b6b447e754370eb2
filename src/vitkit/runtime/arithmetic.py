"""The arithmetic ``auto`` precision stands for, decided from what the machine reports and the
size of the work, with the reason said.

- CUDA: bf16 autocast (TF32 for the parts that stay fp32).
- A CPU with native bf16 (``AVX512_BF16``: AMD EPYC since Zen 4, Intel Xeons since Cooper Lake;
  ``AMX-BF16``: Xeons since Sapphire Rapids), as PyTorch reports it: bf16 autocast when one
  forward pass of a batch costs at least the task's least work (its kind's ``Bf16Rule``); below
  that, the casts and the per-operation overhead cost more than the faster products save.
- Any other CPU: fp32 (its bf16 is emulated, slower than fp32).

Where bf16 pays differs by the kind of CPU: each kind's ``Bf16Rule`` (``RULES``) holds the least
work and the longest sequences on which bf16 attention takes the explicit products
(``model.layers.Attention``). A process decides its rule once (``process_rule``), so that a
compiled forward pass (``fullgraph=True``) never probes the CPU.

``VITKIT_CPU_BF16`` stands in for what the CPU reports: ``none`` decides as on a CPU without
native bf16 (the test suite's default, so that its fp32 figures hold on every machine),
``avx512_bf16`` or ``amx_bf16`` as on one with it.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

import torch

from ..errors import ConfigError

if TYPE_CHECKING:
    from ..config import Precision

Task = Literal["train", "infer"]
CPU_ENV = "VITKIT_CPU_BF16"
_OVERRIDES = ("none", "avx512_bf16", "amx_bf16")


@dataclass(frozen=True)
class CpuFeatures:
    """The bf16 instructions a CPU has."""

    avx512_bf16: bool = False
    amx_bf16: bool = False

    @property
    def native_bf16(self) -> str | None:
        """The instructions that do bf16 natively (AMX's tiles first), or None."""
        if self.amx_bf16:
            return "AMX-BF16"
        return "AVX512_BF16" if self.avx512_bf16 else None


@dataclass(frozen=True)
class Bf16Rule:
    """Where bf16 pays on one kind of CPU, as measured there."""

    # The smallest forward pass (GFLOP of one batch, count_flops x batch) for which bf16 autocast
    # is faster than fp32: training amortises the casts over a backward pass too.
    min_gflop: dict[Task, float]
    # bf16 attention computes explicit products (q kᵀ, softmax, weights v) over at most this many
    # tokens, PyTorch's fused kernel beyond: with a backward pass, and without one.
    explicit_tokens: dict[Task, int]
    measured: str  # where, and how it was derived


# 2 cores of an AMD EPYC Zen 4 over models and batches from 0.02 to 300 GFLOP a forward pass
# (benchmarks/RESULTS.md, "bf16 on a CPU"): every training step from 0.5 GFLOP up and every
# forward pass from 1.0 up ran faster in bf16 (1.02-2.1x), most below lost or tied. PyTorch's
# fused CPU attention (its flash kernel) is slower in bf16 than the explicit products for short
# sequences: its backward 2-10x at 17-65 tokens and 1.1-1.2x in a ViT-*/16 training step at 197,
# its forward 1.14x at 17 tokens (the main job's model); beyond 64 tokens its forward is 5-8% the
# faster, and beyond 256 the explicit path's T x T weights cost more ("bf16 on a CPU: attention").
ZEN4 = Bf16Rule(
    min_gflop={"train": 0.5, "infer": 1.0},
    explicit_tokens={"train": 256, "infer": 64},
    measured="2 cores of an AMD EPYC Zen 4 (benchmarks/bf16_gain.py)",
)
# By the CPU's native bf16 (``CpuFeatures.native_bf16``). AMX's tiles run the products several
# times faster than AVX512_BF16, which moves both limits; no AMX machine has measured them yet
# (benchmarks/bf16_gain.py derives them there), so it takes Zen 4's until one does. Without
# native bf16, ``auto`` never takes bf16, and a bf16 set by hand keeps the attention path it had.
RULES: dict[str | None, Bf16Rule] = {"AVX512_BF16": ZEN4, "AMX-BF16": ZEN4, None: ZEN4}


def rule_for(cpu: CpuFeatures | None = None) -> Bf16Rule:
    """The rule of ``cpu``'s kind (None: this machine's, ``cpu_features``)."""
    return RULES[(cpu or cpu_features()).native_bf16]


@functools.cache
def process_rule() -> Bf16Rule:
    """This process's rule, decided at its first call (``VITKIT_CPU_BF16`` as it was then): what a
    model reads when it is built, never inside its forward pass."""
    return rule_for()


def cpu_features() -> CpuFeatures:
    """This machine's CPU as PyTorch reports it (``torch.cpu.get_capabilities``, or its older
    probes), unless ``VITKIT_CPU_BF16`` stands in for it."""
    override = os.environ.get(CPU_ENV) or None  # empty is unset, as VITKIT_HOME= is
    if override is not None:
        if override not in _OVERRIDES:
            raise ConfigError(f"{CPU_ENV}={override!r}: expected one of {', '.join(_OVERRIDES)}")
        return CpuFeatures(avx512_bf16=override == "avx512_bf16", amx_bf16=override == "amx_bf16")
    capabilities = getattr(torch.cpu, "get_capabilities", None)
    if capabilities is not None:
        found = capabilities()
        return CpuFeatures(
            avx512_bf16=bool(found.get("avx512_bf16")), amx_bf16=bool(found.get("amx_bf16"))
        )
    avx512 = getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)
    amx = getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)
    return CpuFeatures(avx512_bf16=bool(avx512()), amx_bf16=bool(amx()))


def decide_auto(
    device: torch.device, *, task: Task, gflop: float, cpu: CpuFeatures | None = None
) -> tuple[Precision, str]:
    """What ``auto`` stands for on ``device`` for a forward pass of ``gflop`` (one batch), and
    why. ``cpu``: the CPU's features (None: this machine's, ``cpu_features``)."""
    if device.type == "cuda":
        return "bf16", "auto on cuda"
    if device.type != "cpu":
        return "fp32", f"auto on {device.type}"
    cpu = cpu or cpu_features()
    native = cpu.native_bf16
    if native is None:
        return "fp32", "auto: this CPU has no native bf16 (neither AVX512_BF16 nor AMX-BF16)"
    least = rule_for(cpu).min_gflop[task]
    if gflop < least:
        return "fp32", (
            f"auto: this CPU has {native}, but a forward pass of a batch is {gflop:.2g} GFLOP, "
            f"under the {least:g} from which bf16 is faster"
        )
    return (
        "bf16",
        f"auto: this CPU has {native}, and a forward pass of a batch is {gflop:.3g} GFLOP",
    )


def precision_on(
    precision: Precision, device: torch.device, *, gflop: float, cpu: CpuFeatures | None = None
) -> tuple[Precision, str]:
    """A training run's ``precision`` made concrete for ``device`` (``auto``: ``decide_auto``
    for a training step whose forward pass is ``gflop``), and why."""
    if precision != "auto":
        return precision, "set"
    return decide_auto(device, task="train", gflop=gflop, cpu=cpu)


def inference_precision(
    precision: Precision, device: torch.device, *, gflop: float, cpu: CpuFeatures | None = None
) -> tuple[Precision, str]:
    """An inference command's ``--precision`` made concrete for ``device`` (``auto``:
    ``decide_auto`` for a forward pass of one batch of ``gflop``), and why."""
    if precision != "auto":
        return precision, f"--precision {precision}"
    return decide_auto(device, task="infer", gflop=gflop, cpu=cpu)
