"""How a checkpoint is run (``vitkit.inference.Inference``): the engine, the arithmetic, torch's
compilation and int8's calibration. Declared here, without torch, so that ``vitkit predict``,
``eval``, ``fewshot`` and ``inspect`` check their arguments and show these defaults in ``--help``
before torch is imported."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from .keys import Section, key
from .model import require

Engine = Literal["auto", "torch", "openvino"]
InferencePrecision = Literal["auto", "fp32", "bf16", "int8"]
Backend = Literal["auto", "inductor", "onednn"]
ENGINES: tuple[str, ...] = get_args(Engine)
INFERENCE_PRECISIONS: tuple[str, ...] = get_args(InferencePrecision)
BACKENDS: tuple[str, ...] = get_args(Backend)


@dataclass(frozen=True, kw_only=True)
class InferenceConfig(Section):
    """What runs a checkpoint's forward passes; ``auto`` values are decided once, when it is
    prepared for a batch size (``Inference.prepare``), and said with their reasons."""

    SECTION = "inference"

    engine: Engine = key(
        "auto",
        doc="what computes the forward passes: auto (openvino on a CPU with native bf16 when it "
        "is installed and the run has enough images to pay for its conversion; else torch), "
        "torch or openvino (the openvino extra)",
    )
    precision: InferencePrecision = key(
        "auto",
        doc="the arithmetic: auto (bf16 on CUDA, and on a CPU with native bf16 when a batch is "
        "large enough to gain; else fp32), fp32, bf16, or int8 on a CPU (calibrated on training "
        "images and checked: tens of seconds first; no default takes it, as it measured 1.2x "
        "the openvino engine's bf16 at batch 32 on a Zen 4 and slower on an AMX Xeon)",
    )
    compile: bool = key(
        False, doc="torch, compiled with frozen weights (--fast): tens of seconds first"
    )
    backend: Backend = key(
        "auto", doc="the compiled torch path's backend: auto (measured once), inductor or onednn"
    )
    int8_calibration: int = key(
        300, ge=1, doc="training images int8 is calibrated on (a seeded draw)"
    )
    int8_held_out: int = key(
        1000, ge=1, doc="held-out images int8 is checked on against fp32 (a seeded draw)"
    )
    int8_max_change: float = key(
        0.5,
        ge=0,
        doc="points of top-1 accuracy int8 may move on the held-out images before it is refused",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        require(
            not (self.compile and self.precision == "int8"),
            "inference.compile",
            self.compile,
            "False with precision int8 (int8 is compiled already): give one of --fast and "
            "--precision int8",
        )
        require(
            not (self.engine == "openvino" and (self.compile or self.precision == "int8")),
            "inference.engine",
            self.engine,
            "torch or auto with --fast or --precision int8 (both are torch's): give one",
        )
