"""The optimizer and the loop of a run (``OptimConfig``, ``TrainConfig`` [P §4.1, App. B.1]),
their durations ('5000st', '10ep', '1e6ex') and its time budget ('20m'). No torch import here.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

from ..compat import fold_bf16
from ..errors import ConfigError
from .data import DataSpec
from .fewshot import SHOTS
from .keys import Kind, Section, key
from .model import require

Optimizer = Literal["adam", "sgd", "muon"]


Schedule = Literal["cosine", "linear", "constant"]


Objective = Literal["classification", "mpp"]


Parallel = Literal["ddp", "fsdp"]


EmaWarmup = Literal["tf", "timm", "none"]


Device = Literal["auto", "cpu", "cuda"]


Precision = Literal["auto", "fp32", "bf16", "fp16"]


# The most a duration may count, by unit: far beyond any run (the paper's longest, JFT-300M for
# 14 epochs, is 4.2e9 examples), short of what a float counts exactly (2^53): '1e30st' printed a
# schedule of 99,999,999,999,999,991,611,392 steps.
MOST = {"st": 1e12, "ep": 1e9, "ex": 1e15}


def _parse_duration(text: str) -> tuple[float, str] | None:
    for unit in ("st", "ep", "ex"):
        if text.endswith(unit):
            try:
                number = float(text[: -len(unit)])
            except ValueError:
                return None
            if unit == "st" and not number.is_integer():  # '2.5st' ran 3 steps, unsaid
                return None
            return (number, unit) if 0 <= number <= MOST[unit] else None  # NaN fails both
    return None


DURATIONS = (
    "a duration: '5000st' (whole steps, up to 1e12), '10ep' (epochs, up to 1e9) or '1e6ex' "
    "(examples, up to 1e15)"
)


def _spelled(kind: str, parse: Callable[[str], object], expected: str) -> Kind:
    """The kind of a key whose text ``parse`` reads (None: not one), ``expected`` if not."""
    return Kind(
        kind, lambda text: None if parse(text) is not None else f"expected {expected}", expected
    )


Duration = Annotated[str, _spelled("duration", _parse_duration, DURATIONS)]


_SECONDS_PER = {"s": 1.0, "m": 60.0, "h": 3600.0}
TIMES = "a time: '90s', '20m' or '1.5h'"


def parse_seconds(text: str) -> float | None:
    """A time ('90s', '20m', '1.5h') in seconds; None when it is not one."""
    unit = _SECONDS_PER.get(text[-1:])
    if unit is None:
        return None
    try:
        number = float(text[:-1])
    except ValueError:  # '20 m', 'm'
        return None
    return number * unit if math.isfinite(number) and number > 0 else None


TimeSpan = Annotated[str, _spelled("time", parse_seconds, TIMES)]


def parse_duration(text: str, *, steps_per_epoch: int, batch_size: int) -> int:
    """A duration in optimizer steps (rounded up; at least 1 unless the duration is 0)."""
    parsed = _parse_duration(text)
    if parsed is None:
        raise ConfigError(
            f"duration {text!r} is not valid: expected e.g. '5000st', '10ep', '1e6ex'"
        )
    number, unit = parsed
    per = {"st": 1.0, "ep": float(steps_per_epoch), "ex": 1.0 / batch_size}[unit]
    return math.ceil(number * per - 1e-9) if number else 0


@dataclass(frozen=True, kw_only=True)
class OptimConfig(Section):
    """Adam with decoupled weight decay for pre-training, SGD momentum for fine-tuning [P §4.1,
    Table 3, B.1.1]; linear warmup then cosine or linear decay to ``end_lr``. ``muon`` (not in the
    paper): Muon for the transformer blocks' weight matrices, AdamW (``beta1``, ``beta2``) for the
    rest, the same learning rate and weight decay (train/optim.py)."""

    SECTION: ClassVar[str] = "optim"

    name: Optimizer = key(
        "adam", doc="adam (AdamW) [P §4.1], sgd (momentum) [P B.1.1], or muon for the matrices"
    )
    lr: float = key(doc="the peak learning rate, after warmup", gt=0)
    beta1: float = key(0.9, doc="Adam's first-moment decay", ge=0, lt=1)
    beta2: float = key(0.999, doc="Adam's second-moment decay", ge=0, lt=1)
    momentum: float = key(0.9, doc="SGD's momentum, and Muon's (Nesterov)", ge=0, lt=1)
    weight_decay: float = key(
        0.0,
        doc="Adam: decoupled (AdamW); SGD: L2; never on biases, norms, posemb or class token",
        ge=0,
    )
    grad_clip: float | None = key(None, doc="clip the gradients' global norm to this", gt=0)
    schedule: Schedule = key("cosine", doc="decay after warmup")
    warmup: Duration = key("0st", doc="linear warmup from 0 to lr")
    end_lr: float = key(
        0.0, doc="the learning rate at the end (vit_jax's linear decay: 1e-5)", ge=0
    )
    layer_decay: float | None = key(
        None,
        doc="layer-wise learning-rate decay (BEiT, MAE; timm's --layer-decay): a ViT parameter's "
        "lr is multiplied by this to the power L+1-layer, layer 0 the embedding (a hybrid's "
        "ResNet too), block i layer i+1, the final norm L (timm's rule), the head L+1; "
        "`vitkit config --params` shows each parameter's",
        gt=0,
        le=1,
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        require(
            self.end_lr <= self.lr, "optim.end_lr", self.end_lr, f"a number in [0, lr={self.lr}]"
        )


@dataclass(frozen=True, kw_only=True)
class TrainConfig(Section):
    """The loop: duration, batch, regularisation, precision, and the cadence of log/eval/save."""

    SECTION: ClassVar[str] = "train"
    RENAMED: ClassVar[Mapping[str, Any]] = {"bf16": fold_bf16}

    duration: Duration = key(doc="how long to train")
    batch_size: int = key(
        doc="the global batch, split evenly across processes (torchrun): the same mathematics on "
        "any number of them",
        ge=1,
    )
    accum_steps: int = key(
        1, doc="gradient accumulation: the optimizer sees batch_size x accum_steps", ge=1
    )
    label_smoothing: float = key(0.0, doc="label smoothing of the cross-entropy", ge=0, lt=1)
    mixup: float = key(0.0, doc="mixup's Beta(a, a); 0 = off", ge=0)
    ema: float | None = key(
        None, doc="Polyak averaging of the weights (the paper's 0.9999), or none", gt=0, lt=1
    )
    ema_warmup: EmaWarmup = key(
        "tf",
        doc="the EMA's decay at step s (from 0): tf = min(ema, (1+s)/(10+s)) (TensorFlow's "
        "num_updates rule); timm = 0 at s=0, then min(ema, 1-(1+s)^(-2/3)) (timm's ModelEmaV3 "
        "use_warmup, gamma 1, power 2/3); none = ema at every step",
    )
    precision: Precision = key(
        "auto",
        doc="auto: bf16 autocast with TF32 matmuls on CUDA; on a CPU, bf16 autocast where it has "
        "native bf16 (AVX512_BF16, AMX-BF16) and a batch large enough to gain from it, else fp32 "
        "(decided when the run starts, with its reason, and recorded: a resumed run keeps it); "
        "fp32; bf16 (autocast); fp16 (autocast and a gradient scaler, for GPUs without bf16)",
    )
    compile: bool | Literal["auto"] = key(
        "auto",
        doc="compile the training step (torch.compile); auto: compiled on CUDA (1.26x the eager "
        "step there), eager where that was not measured (a CPU, torchrun, masked patch "
        "prediction, activation checkpointing); decided when the run starts and recorded: a "
        "resumed run keeps it",
    )
    seed: int = key(
        0,
        doc="seeds the weights, the batch order, augmentation and holdouts",
        ge=0,
        le=2**63 - 1,  # torch.manual_seed takes a 64-bit integer; numpy's seeds are non-negative
    )
    log_every: Duration = key(
        "50st", doc="how often to log the training loss, and at the end (0st: at the end only)"
    )
    eval_every: Duration = key(
        "1ep",
        doc="how often to evaluate (and keep the best weights), and at the end (0st: at the end only)",
    )
    save_every: Duration = key(
        "1ep",
        doc="how often to write a resumable checkpoint, and at the end (0st: at the end only)",
    )
    keep_last: int = key(2, doc="resumable checkpoints kept", ge=1)
    early_stop: bool = key(
        False,
        doc="end the run once the validation loss has risen at 3 evaluations in a row while the "
        "training loss fell (a run says so either way): saved, then tested with best/'s weights",
    )
    time_budget: TimeSpan | None = key(
        None,
        doc="end the run at the first step after this much of its time (metrics.jsonl's run_s, "
        "summed over resumes), saved and evaluated as at its end, then tested; the schedule "
        "stays train.duration's (the banner's estimate says what fits); a resume may raise it",
    )
    objective: Objective = key(
        "classification",
        doc="classification, or mpp: masked patch prediction [P §4.6] (labels unused)",
    )
    fewshot: tuple[int, ...] = key(
        (),
        doc="few-shot linear evaluation of the run's data at every evaluation [P §4.1]: shots "
        "per class (metrics fewshot_<k>shot); also the shots of train.fewshot_data",
        ge=1,
    )
    fewshot_data: tuple[DataSpec, ...] = key(
        (),
        doc="few-shot linear evaluation at every evaluation on these data too (each one's train "
        "and test splits, as vitkit fewshot): shots train.fewshot, else "
        f"{','.join(map(str, SHOTS))}; metrics fewshot_<name>_<k>shot, <name> the data's (pets "
        "for /data/pets)",
    )
    parallel: Parallel = key(
        "ddp",
        doc="under torchrun: ddp replicates the model, fsdp shards it (FSDP2); no effect in one "
        "process",
    )
    activation_checkpointing: bool = key(
        False, doc="recompute each block's activations in the backward pass (memory for time)"
    )
    device: Device = key(
        "auto", doc="auto: CUDA when PyTorch sees a GPU (torchrun: GPU LOCAL_RANK), else the CPU"
    )
    cutmix: float = key(
        0.0,
        doc="CutMix's Beta(a, a); 0 = off. Mixup and CutMix draw per process: under torchrun "
        "images pair within a process's part of the batch, so mixed batches depend on the "
        "number of processes",
        ge=0,
    )
    mixup_switch_prob: float = key(
        0.5, doc="with mixup and CutMix both on, the probability of CutMix for a batch", ge=0, le=1
    )
    mixup_prob: float = key(
        1.0, doc="the probability that a batch is mixed (mixup or CutMix) at all", ge=0, le=1
    )

    @property
    def compiled(self) -> bool:
        """Whether the step is compiled: ``compile`` true, or ``auto`` decided so when the run
        started (``runtime.machine.compile_on``); an ``auto`` not yet decided counts as eager."""
        return self.compile is True

    def __post_init__(self) -> None:
        super().__post_init__()
        require(
            not (
                self.objective == "mpp"
                and (self.compiled or self.mixup or self.cutmix or self.label_smoothing)
            ),
            "train.objective",
            self.objective,
            "'classification' when train.compile, train.mixup, train.cutmix or "
            "train.label_smoothing is set (they apply to classification only)",
        )
        require(
            len(set(self.fewshot)) == len(self.fewshot),
            "train.fewshot",
            self.fewshot,
            "distinct shots per class, e.g. (5, 10), or () for none",
        )
        require(
            len(set(self.fewshot_data)) == len(self.fewshot_data),
            "train.fewshot_data",
            self.fewshot_data,
            "distinct data specs",
        )
