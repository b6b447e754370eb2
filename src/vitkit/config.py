"""Typed configuration: the model's vocabulary is the paper's and the official code's.

Configs are frozen, keyword-only dataclasses. ``__post_init__`` validates every field and raises
a ``ConfigError`` (vitkit's user error, ``errors.py``) naming the field, the value and what is
allowed. Overrides (from ``--set`` or keyword arguments) are strict: an unknown key is an error
with the closest valid name. This module never imports torch, so the CLI can validate before
paying for that import.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import math
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from .errors import ConfigError

Classifier = Literal["token", "gap", "map"]
Posemb = Literal["learn", "sincos2d", "none"]
Activation = Literal["gelu", "gelu_tanh"]
Architecture = Literal["vit", "resnet"]


def _check(cond: bool, name: str, value: Any, allowed: str) -> None:
    if not cond:
        raise ConfigError(f"{name}={value!r} is not valid: expected {allowed}")


def _positive_int(name: str, value: Any) -> None:
    _check(
        isinstance(value, int) and not isinstance(value, bool) and value > 0,
        name,
        value,
        "a positive integer",
    )


def image_size_of(value: Any) -> int | tuple[int, int]:
    """``value`` as an image size: a positive int, or a (height, width) pair of them (a list is
    taken as a pair, since JSON has no tuples); a square pair becomes its int. A ``ConfigError``
    otherwise."""
    pair = isinstance(value, (tuple, list))
    sides = tuple(value) if pair else (value,)
    _check(
        len(sides) == (2 if pair else 1)
        and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in sides),
        "image_size",
        value,
        "a positive integer or a (height, width) pair of them",
    )
    return sides[0] if len(set(sides)) == 1 else sides


def size_hw(size: int | tuple[int, int]) -> tuple[int, int]:
    """An image size (an int for a square, or a pair) as (height, width)."""
    return (size, size) if isinstance(size, int) else (size[0], size[1])


def _image_size(cfg: Any) -> None:
    """``image_size`` checked and normalised (``image_size_of``) on a frozen dataclass."""
    object.__setattr__(cfg, "image_size", image_size_of(cfg.image_size))


def _rate(name: str, value: Any) -> None:
    _check(
        isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 <= value < 1.0,
        name,
        value,
        "a number in [0, 1)",
    )


@dataclass(frozen=True, kw_only=True)
class ResNetConfig:
    """The BiT ResNet stem of a hybrid model [P §3.1 "Hybrid Architecture", PAPER.md A2].

    ``num_layers`` holds the number of bottleneck units per stage; ``()`` keeps only the root
    (7x7/2 conv, GroupNorm, ReLU, 3x3/2 max-pool), as in the official R+ViT-Ti/16.
    ``width_factor`` may be fractional: as in vit_jax, the root has ``int(64 * width_factor)``
    channels and stage ``i`` units are ``width * 2**i`` wide (x4 at their output), so every width
    is a multiple of the root's, which GroupNorm's 32 groups must divide.
    """

    num_layers: tuple[int, ...]
    width_factor: float = 1

    def __post_init__(self) -> None:
        _check(
            isinstance(self.num_layers, tuple)
            and all(
                isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in self.num_layers
            ),
            "resnet.num_layers",
            self.num_layers,
            "a tuple of positive integers (units per stage), e.g. (3, 4, 9)",
        )
        _check(
            isinstance(self.width_factor, (int, float))
            and not isinstance(self.width_factor, bool)
            and self.width_factor > 0,
            "resnet.width_factor",
            self.width_factor,
            "a positive number",
        )
        _check(
            self.width > 0 and self.width % 32 == 0,
            "resnet.width_factor",
            self.width_factor,
            f"a root width int(64 x width_factor) that GroupNorm's 32 groups divide, "
            f"found {self.width} channels",
        )

    @classmethod
    def from_width(cls, num_layers: tuple[int, ...], width: int) -> ResNetConfig:
        """The config whose root has ``width`` channels (as a checkpoint's root conv shows);
        the factor stays an integer when it is one, so configs of the paper's hybrids read 1."""
        return cls(
            num_layers=num_layers, width_factor=width // 64 if width % 64 == 0 else width / 64
        )

    @property
    def width(self) -> int:
        """Channels of the root conv and of the first stage's bottlenecks (vit_jax's rounding)."""
        return int(64 * self.width_factor)

    @property
    def stride(self) -> int:
        """Total downsampling of the backbone: root conv 2 x max-pool 2 x 2 per later stage."""
        return 4 * 2 ** max(len(self.num_layers) - 1, 0)

    @property
    def out_channels(self) -> int:
        if not self.num_layers:
            return self.width
        return self.width * 2 ** (len(self.num_layers) - 1) * 4


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """A Vision Transformer, pure or hybrid [P §3.1, Table 1; DESIGN.md "Configuration"].

    ``num_classes=0`` means no head: the model returns pooled (pre-logits) features, as in timm.
    ``representation_size`` adds the pre-training "pre-logits" layer (dense + tanh).
    ``classifier`` pools with the class token (``'token'``), the mean of the patch tokens
    (``'gap'``) or big_vision's multihead attention pooling (``'map'``: a learned probe attends
    over the patch tokens); only ``'token'`` has a class token.
    ``arch='resnet'`` is the paper's CNN baseline instead of a ViT: the hybrid's BiT backbone
    (``resnet``), global average pooling and a linear head; the transformer fields are unused.
    ``image_size`` is an int (square images) or a (height, width) pair; a square pair is stored as
    its int, so configs written before pairs existed compare equal and keep loading.
    """

    image_size: int | tuple[int, int]
    patch_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    mlp_dim: int
    num_classes: int = 1000
    in_chans: int = 3
    classifier: Classifier = "token"
    representation_size: int | None = None
    dropout_rate: float = 0.0
    attention_dropout_rate: float = 0.0
    drop_path_rate: float = 0.0
    posemb: Posemb = "learn"
    act: Activation = "gelu"
    layer_norm_eps: float = 1e-6
    head_bias_init: float = 0.0
    resnet: ResNetConfig | None = None
    arch: Architecture = "vit"

    def __post_init__(self) -> None:
        _image_size(self)
        for name in (
            "patch_size",
            "hidden_size",
            "num_layers",
            "num_heads",
            "mlp_dim",
        ):
            _positive_int(name, getattr(self, name))
        for name in ("num_classes",):
            value = getattr(self, name)
            _check(
                isinstance(value, int) and not isinstance(value, bool) and value >= 0,
                name,
                value,
                "an integer >= 0 (0 = no head)",
            )
        _positive_int("in_chans", self.in_chans)
        _check(
            self.hidden_size % self.num_heads == 0,
            "num_heads",
            self.num_heads,
            f"a divisor of hidden_size={self.hidden_size}",
        )
        _check(
            self.classifier in ("token", "gap", "map"),
            "classifier",
            self.classifier,
            "'token', 'gap' or 'map'",
        )
        _check(
            self.posemb in ("learn", "sincos2d", "none"),
            "posemb",
            self.posemb,
            "'learn', 'sincos2d' or 'none'",
        )
        if self.posemb == "sincos2d":
            _check(
                self.hidden_size % 4 == 0,
                "hidden_size",
                self.hidden_size,
                "a multiple of 4 for posemb='sincos2d'",
            )
        _check(self.act in ("gelu", "gelu_tanh"), "act", self.act, "'gelu' or 'gelu_tanh'")
        if self.representation_size is not None:
            _positive_int("representation_size", self.representation_size)
        for name in ("dropout_rate", "attention_dropout_rate", "drop_path_rate"):
            _rate(name, getattr(self, name))
        _check(
            isinstance(self.layer_norm_eps, float) and self.layer_norm_eps > 0,
            "layer_norm_eps",
            self.layer_norm_eps,
            "a positive float",
        )
        _check(
            isinstance(self.head_bias_init, (int, float))
            and not isinstance(self.head_bias_init, bool),
            "head_bias_init",
            self.head_bias_init,
            "a number",
        )
        _check(
            self.resnet is None or isinstance(self.resnet, ResNetConfig),
            "resnet",
            self.resnet,
            "None or a ResNetConfig",
        )
        _check(self.arch in ("vit", "resnet"), "arch", self.arch, "'vit' or 'resnet'")
        if self.arch == "resnet":
            _check(
                self.resnet is not None,
                "resnet",
                self.resnet,
                "a ResNetConfig: arch='resnet' is the BiT backbone with a linear head",
            )
            _check(
                self.representation_size is None,
                "representation_size",
                self.representation_size,
                "None for arch='resnet' (its head is one linear layer on the pooled features)",
            )
            return  # 'SAME' padding and global pooling take any image size
        stride = self.total_stride
        _check(
            all(side % stride == 0 for side in self.image_hw),
            "image_size",
            self.image_size,
            f"each side a multiple of the total stride {stride} (patch_size"
            + (" x ResNet stride" if self.resnet else "")
            + ")",
        )

    @property
    def total_stride(self) -> int:
        """Pixels per token side: the patch size, times the backbone stride for a hybrid."""
        return self.patch_size * (self.resnet.stride if self.resnet else 1)

    @property
    def image_hw(self) -> tuple[int, int]:
        """``image_size`` as (height, width)."""
        return size_hw(self.image_size)

    @property
    def grid(self) -> tuple[int, int]:
        """The patch grid (gh, gw) at ``image_size``: tokens per column and per row."""
        h, w = self.image_hw
        return h // self.total_stride, w // self.total_stride

    @property
    def grid_size(self) -> int:
        """Tokens per side of a square patch grid at ``image_size`` (``grid`` for any grid)."""
        gh, gw = self.grid
        if gh != gw:
            raise ConfigError(
                f"grid_size is the side of a square grid, but image_size={self.image_size!r} "
                f"makes a {gh}x{gw} grid: use grid (gh, gw)"
            )
        return gh

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def num_prefix_tokens(self) -> int:
        return 1 if self.classifier == "token" else 0

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ModelConfig:
        return from_dict(cls, data)


C = TypeVar("C")


def to_dict(cfg: Any) -> dict[str, Any]:
    """A JSON-ready dict of a config (tuples become lists)."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value):
            value = to_dict(value)
        elif isinstance(value, tuple):
            value = list(value)
        out[f.name] = value
    return out


def _closest(name: str, options: list[str]) -> str:
    match = difflib.get_close_matches(name, options, n=1, cutoff=0.5)
    return f" (did you mean {match[0]!r}?)" if match else ""


def _field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _nested_class(hint: Any) -> type | None:
    """The dataclass inside ``X | None``, if the field holds one."""
    args = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    for arg in args:
        if dataclasses.is_dataclass(arg):
            return arg  # type: ignore[return-value]  # is_dataclass narrows to the instance type too
    return None


def from_dict(cls: type[C], data: Mapping[str, Any], *, where: str = "") -> C:
    """Build a config dataclass from a dict, strictly: unknown keys are errors."""
    if not isinstance(data, Mapping):
        raise ConfigError(
            f"{where or cls.__name__}: expected a mapping, found {type(data).__name__}"
        )
    # C is any config dataclass; a TypeVar cannot be bound to "a dataclass type" for mypy
    names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
    hints = _field_types(cls)
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key not in names:
            raise ConfigError(
                f"unknown config key {where}{key!r}{_closest(key, names)}; valid keys: {', '.join(names)}"
            )
        nested = _nested_class(hints[key])
        if nested is not None and isinstance(value, Mapping):
            value = from_dict(nested, value, where=f"{where}{key}.")
        elif isinstance(value, list):
            value = tuple(value)
        kwargs[key] = value
    missing = [
        f.name
        for f in dataclasses.fields(cls)  # type: ignore[arg-type]  # as above
        if f.name not in kwargs
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise ConfigError(f"{where or cls.__name__}: missing required keys {missing}")
    try:
        return cls(**kwargs)
    except TypeError as e:  # a value of the wrong type that validation did not catch
        raise ConfigError(f"{where or cls.__name__}: {e}") from None


def replace(cfg: C, overrides: Mapping[str, Any]) -> C:
    """A copy of ``cfg`` with dotted-key overrides applied (``{"resnet.width_factor": 2}``).

    Unknown keys raise ``ConfigError`` with the closest valid name; values are re-validated.
    """
    data = to_dict(cfg)
    for dotted, value in overrides.items():
        node = data
        parts = dotted.split(".")
        for i, part in enumerate(parts):
            if not isinstance(node, dict) or part not in node:
                options = list(node) if isinstance(node, dict) else []
                prefix = ".".join(parts[:i])
                where = f" under {prefix!r}" if prefix else ""
                raise ConfigError(f"unknown config key {dotted!r}{where}{_closest(part, options)}")
            if i == len(parts) - 1:
                node[part] = to_dict(value) if dataclasses.is_dataclass(value) else value
            else:
                if node[part] is None:
                    raise ConfigError(f"cannot set {dotted!r}: {'.'.join(parts[: i + 1])} is None")
                node = node[part]
    return from_dict(type(cfg), data)


def parse_set(items: list[str]) -> dict[str, Any]:
    """Parse ``--set key=value`` items; values are Python literals, else plain strings."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set expects key=value, found {item!r}")
        try:
            value = ast.literal_eval(raw)
        except (ValueError, SyntaxError):
            value = raw
        out[key.strip()] = value
    return out


# ------------------------------------------------------------------------------------ training

Dataset = Literal["fashion_mnist", "cifar10", "cifar100", "folder", "synthetic"]
Optimizer = Literal["adam", "sgd", "muon"]
Schedule = Literal["cosine", "linear", "constant"]
Objective = Literal["classification", "mpp"]
Parallel = Literal["ddp", "fsdp"]
Device = Literal["auto", "cpu", "cuda"]


def _duration(name: str, value: Any) -> None:
    """Durations are written '<number><unit>': 'st' steps, 'ep' epochs, 'ex' examples."""
    _check(
        isinstance(value, str) and _parse_duration(value) is not None,
        name,
        value,
        "a duration such as '5000st' (steps), '10ep' (epochs) or '1e6ex' (examples)",
    )


def _parse_duration(text: str) -> tuple[float, str] | None:
    for unit in ("st", "ep", "ex"):
        if text.endswith(unit):
            try:
                number = float(text[: -len(unit)])
            except ValueError:
                return None
            return (number, unit) if math.isfinite(number) and number >= 0 else None
    return None


@dataclass(frozen=True, kw_only=True)
class DataConfig:
    """Where the images come from and how they are augmented [P App. B.1.1 for the official
    fine-tuning pipeline: inception crop, resize, values scaled to [-1, 1]]."""

    dataset: Dataset = "fashion_mnist"
    data_dir: str | None = None
    crop_padding: int = 0  # random crop after zero padding (small images)
    flip: bool = False
    # evaluate each test image and its mirror image, averaging the class probabilities
    # (test-time augmentation: twice the evaluation's forward passes)
    test_flip: bool = False
    inception_crop: bool = False
    rand_augment: bool = False  # RandAugment(2, 10)
    per_class: int | None = None  # class-balanced subset of the training set
    num_workers: int = 0

    def __post_init__(self) -> None:
        _check(
            self.dataset in ("fashion_mnist", "cifar10", "cifar100", "folder", "synthetic"),
            "data.dataset",
            self.dataset,
            "'fashion_mnist', 'cifar10', 'cifar100', 'folder' or 'synthetic'",
        )
        if self.dataset == "folder":
            _check(bool(self.data_dir), "data.data_dir", self.data_dir, "the image folder's root")
        if self.per_class is not None:
            _positive_int("data.per_class", self.per_class)
        for name in ("crop_padding", "num_workers"):
            value = getattr(self, name)
            _check(isinstance(value, int) and value >= 0, f"data.{name}", value, "an integer >= 0")


@dataclass(frozen=True, kw_only=True)
class OptimConfig:
    """Adam with decoupled weight decay for pre-training, SGD momentum for fine-tuning [P §4.1,
    Table 3, B.1.1]; linear warmup then cosine or linear decay to ``end_lr``. ``muon`` (not in the
    paper): Muon for the transformer blocks' weight matrices, AdamW (``beta1``, ``beta2``) for the
    rest, the same learning rate and weight decay (train/optim.py)."""

    name: Optimizer = "adam"
    lr: float
    beta1: float = 0.9
    beta2: float = 0.999
    momentum: float = 0.9  # SGD's, and Muon's (Nesterov)
    # Adam: decoupled (AdamW); SGD: PyTorch's L2 (the paper fine-tunes with none). Never on biases,
    # norms, position embedding or class token.
    weight_decay: float = 0.0
    grad_clip: float | None = None  # global norm
    schedule: Schedule = "cosine"
    warmup: str = "0st"
    end_lr: float = 0.0  # vit_jax's linear decay ends at 1e-5

    def __post_init__(self) -> None:
        _check(
            self.name in ("adam", "sgd", "muon"), "optim.name", self.name, "'adam', 'sgd' or 'muon'"
        )
        _check(
            isinstance(self.lr, (int, float)) and self.lr > 0,
            "optim.lr",
            self.lr,
            "a positive number",
        )
        for name in ("beta1", "beta2", "momentum"):
            _rate(f"optim.{name}", getattr(self, name))
        _check(self.weight_decay >= 0, "optim.weight_decay", self.weight_decay, "a number >= 0")
        _check(
            self.grad_clip is None or self.grad_clip > 0,
            "optim.grad_clip",
            self.grad_clip,
            "None or a positive number",
        )
        _check(
            self.schedule in ("cosine", "linear", "constant"),
            "optim.schedule",
            self.schedule,
            "'cosine', 'linear' or 'constant'",
        )
        _duration("optim.warmup", self.warmup)
        _check(
            0 <= self.end_lr <= self.lr,
            "optim.end_lr",
            self.end_lr,
            f"a number in [0, lr={self.lr}]",
        )


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    """The loop: duration, batch, regularisation, precision, and the cadence of log/eval/save."""

    duration: str
    # the global batch, split evenly across processes (torchrun): a recipe means the same
    # mathematics on any number of them (docs/DISTRIBUTED.md)
    batch_size: int
    accum_steps: int = 1  # gradient accumulation: the optimizer sees batch_size x accum_steps
    label_smoothing: float = 0.0
    mixup: float = 0.0  # Beta(α, α) of mixup; 0 = off
    ema: float | None = None  # Polyak averaging of the weights (the paper's 0.9999)
    bf16: bool = False
    compile: bool = False
    seed: int = 0
    log_every: str = "50st"
    eval_every: str = "1ep"
    save_every: str = "1ep"
    keep_last: int = 2
    # 'mpp': masked patch prediction [P §4.6], self-supervised: the labels are not used
    objective: Objective = "classification"
    # few-shot linear evaluation of the pre-logits at every evaluation [P §4.1]: shots per class
    fewshot: tuple[int, ...] = ()
    # under torchrun: 'ddp' replicates the model, 'fsdp' shards parameters, gradients and
    # optimizer state (FSDP2); no effect in a single process
    parallel: Parallel = "ddp"
    # recompute each transformer block's activations in the backward pass (memory for time)
    activation_checkpointing: bool = False
    # where the loop computes: 'auto' is CUDA when PyTorch sees a GPU, else the CPU; under
    # torchrun each process takes GPU LOCAL_RANK (resolved in train/distributed.py)
    device: Device = "auto"

    def __post_init__(self) -> None:
        _duration("train.duration", self.duration)
        _positive_int("train.batch_size", self.batch_size)
        _positive_int("train.accum_steps", self.accum_steps)
        _rate("train.label_smoothing", self.label_smoothing)
        _check(self.mixup >= 0, "train.mixup", self.mixup, "a number >= 0 (0 = off)")
        _check(
            self.ema is None or 0.0 < self.ema < 1.0,
            "train.ema",
            self.ema,
            "None or a number in (0, 1)",
        )
        for name in ("log_every", "eval_every", "save_every"):
            _duration(f"train.{name}", getattr(self, name))
        _positive_int("train.keep_last", self.keep_last)
        _check(
            self.objective in ("classification", "mpp"),
            "train.objective",
            self.objective,
            "'classification' or 'mpp' (masked patch prediction)",
        )
        _check(
            not (self.objective == "mpp" and (self.compile or self.mixup or self.label_smoothing)),
            "train.objective",
            self.objective,
            "'classification' when train.compile, train.mixup or train.label_smoothing is set "
            "(they apply to classification only)",
        )
        _check(
            isinstance(self.fewshot, tuple)
            and all(isinstance(k, int) and not isinstance(k, bool) and k > 0 for k in self.fewshot)
            and len(set(self.fewshot)) == len(self.fewshot),
            "train.fewshot",
            self.fewshot,
            "a tuple of distinct shots per class, e.g. (5, 10), or () for none",
        )
        _check(
            self.parallel in ("ddp", "fsdp"),
            "train.parallel",
            self.parallel,
            "'ddp' (replicated model) or 'fsdp' (sharded model)",
        )
        _check(
            self.device in ("auto", "cpu", "cuda"),
            "train.device",
            self.device,
            "'auto' (CUDA when available, else CPU), 'cpu' or 'cuda'",
        )


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """Everything a training run needs; saved as ``config.json`` in the run directory."""

    model: ModelConfig
    data: DataConfig
    optim: OptimConfig
    train: TrainConfig
    init_from: str | None = None  # pre-trained checkpoint: head replaced, posemb resized

    def __post_init__(self) -> None:
        if self.train.objective == "mpp":
            _check(
                self.model.arch == "vit" and self.model.resnet is None,
                "train.objective",
                self.train.objective,
                "'classification' for this model: masked patch prediction needs a plain ViT (a "
                "hybrid's ResNet would see the masked patches' pixels through its neighbours)",
            )
            _check(
                not self.data.test_flip,
                "data.test_flip",
                self.data.test_flip,
                "False with train.objective='mpp' (its evaluation predicts patches, not classes)",
            )
            _check(
                self.train.ema is None,
                "train.ema",
                self.train.ema,
                "None with train.objective='mpp' (the mask embedding and head are not averaged)",
            )
        _check(
            not (self.optim.name == "muon" and self.model.arch != "vit"),
            "optim.name",
            self.optim.name,
            "'adam' for a ResNet (Muon takes the transformer blocks' weight matrices)",
        )
        _check(
            not (self.optim.name == "muon" and self.train.parallel == "fsdp"),
            "optim.name",
            self.optim.name,
            "'adam' with train.parallel='fsdp' (Muon orthogonalises whole matrices, FSDP shards "
            "them), or train.parallel='ddp'",
        )
        _check(
            not (self.train.activation_checkpointing and self.model.arch != "vit"),
            "train.activation_checkpointing",
            self.train.activation_checkpointing,
            "False for a ResNet (checkpointing is per transformer block)",
        )

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunConfig:
        return from_dict(cls, data)


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


__all__ = [
    "Activation",
    "Classifier",
    "ConfigError",
    "DataConfig",
    "ModelConfig",
    "OptimConfig",
    "Posemb",
    "ResNetConfig",
    "RunConfig",
    "TrainConfig",
    "from_dict",
    "image_size_of",
    "parse_duration",
    "parse_set",
    "replace",
    "size_hw",
    "to_dict",
]
