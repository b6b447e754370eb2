"""Which engine computes a checkpoint's forward passes (``inference.engine``), decided once, with
its reason, from the settings, the device, what the CPU has and how much work the run holds.

``auto`` takes OpenVINO (the ``openvino`` extra) on a CPU with native bf16 (AMX-BF16 or
AVX512_BF16) when the run's work pays for its conversion, and torch everywhere else: on a GPU;
on a CPU without native bf16, where OpenVINO was not measured; with ``--fast`` (torch, compiled)
or ``--precision int8`` (torchao's), which are torch's by name; and for a handful of images,
where the conversion costs more than it saves (``vitkit predict CKPT one.png``: under
``OPENVINO_MIN_GFLOP`` of work), or a small model's images, whose passes save little.

OpenVINO's bf16 forward passes, measured: 1.2-1.4x torch eager bf16's for ViT-S/16 and B/16 at
batch 1 and 32 on 2 cores of an AMD EPYC Zen 4 (benchmarks/RESULTS.md, "Inference against
OpenVINO"); 1.3-2.5x torch's fastest bf16 path on 2 cores of an Intel Xeon with AMX (issue 42).
"""

from __future__ import annotations

from typing import Literal

import torch

from ..errors import MissingExtraError, VitkitError
from ..runtime.arithmetic import CpuFeatures, cpu_features

Chosen = Literal["torch", "openvino"]
# The work of a run (images x GFLOP an image, count_flops) from which OpenVINO's first call
# (import, conversion, a compilation per batch shape: 4-8 s in a command) is paid back by its
# faster forward passes. `vitkit predict --batch-size 32` end to end on 2 Zen 4 cores, openvino
# over torch (benchmarks/RESULTS.md, "Inference against OpenVINO"): ViT-S/16 (9.2 GFLOP) 1.71x
# the time at 64 images, 1.36x at 128, 1.19x at 256, about 9 ms saved an image: break-even near
# 500 images (4,600 GFLOP); ViT-B/16 (35) 1.74x at 32, 1.44x at 64: near 250 (9,000 GFLOP).
OPENVINO_MIN_GFLOP = 8000.0


def decide_engine(
    engine: str,
    *,
    device: torch.device,
    precision: str,
    compile: bool,
    images: int | None,
    image_gflop: float,
    openvino: str | None,
    cpu: CpuFeatures | None = None,
) -> tuple[Chosen, str]:
    """The engine ``engine`` (``auto``, ``torch`` or ``openvino``) stands for, and why, for a run
    of ``images`` images (None: not known, taken as many) of ``image_gflop`` each at ``precision``
    (decided: fp32, bf16 or int8) on ``device``; ``compile``: torch's compiled path asked for
    (``InferenceConfig`` refuses it, and int8, with ``openvino`` by name). ``openvino``: the installed version, or None;
    ``cpu``: the CPU's features (None: this machine's)."""
    if engine == "torch":
        return "torch", "--engine torch"
    if engine == "openvino":
        if device.type != "cpu":
            raise VitkitError(f"--engine openvino runs on the CPU: not on {device}")
        if openvino is None:
            raise MissingExtraError("the openvino engine", "openvino", "openvino")
        return "openvino", "--engine openvino"
    if compile:
        return "torch", "--fast: torch, compiled"
    if precision == "int8":
        return "torch", "--precision int8: torchao's, on torch"
    if device.type != "cpu":
        return "torch", f"auto on {device.type}"
    if openvino is None:
        return "torch", "auto: openvino is not installed (pip install 'vitkit[openvino]')"
    native = (cpu or cpu_features()).native_bf16
    if native is None:
        return "torch", "auto: this CPU has no native bf16, where openvino was not measured"
    if images is not None and images * image_gflop < OPENVINO_MIN_GFLOP:
        return "torch", (
            f"auto: {images:,} image{'s' * (images != 1)} of {image_gflop:.2g} GFLOP, too "
            f"little work to pay for openvino's conversion (it pays from about "
            f"{OPENVINO_MIN_GFLOP:,.0f} GFLOP)"
        )
    many = "a run of unknown length" if images is None else f"{images:,} images"
    return "openvino", (
        f"auto: openvino {openvino} is installed, this CPU has {native}, and {many} of "
        f"{image_gflop:.2g} GFLOP pay for its conversion"
    )
