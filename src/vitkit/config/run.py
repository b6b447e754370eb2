"""A training run's configuration: the data, the optimizer, the loop [P §4.1, App. B.1].

``RunConfig`` is saved as ``config.json`` in every run directory and inside every checkpoint;
``data.dataset`` names the data with a spec such as ``cifar10:DIR``. The keys of files written by
an earlier vitkit are folded in by vitkit.compat (``RENAMED``). No torch import here.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Annotated, Any, ClassVar, Literal

from ..compat import VAL_OR_TEST, fold_bf16, fold_data_dir
from ..errors import ConfigError
from .augment import AUTO_AUGMENTS, MAX_MAGNITUDE, MAX_OPS, why_not_auto_augment, why_not_new
from .fewshot import SHOTS
from .keys import Kind, Section, from_dict, key, upgrade
from .model import ModelConfig, require

Optimizer = Literal["adam", "sgd", "muon"]
Schedule = Literal["cosine", "linear", "constant"]
Objective = Literal["classification", "mpp"]
Parallel = Literal["ddp", "fsdp"]
EmaWarmup = Literal["tf", "timm", "none"]
Device = Literal["auto", "cpu", "cuda"]
Validation = Literal["auto", "holdout", "val", "test"]
ImagePaths = Literal["dataset", "any"]
Precision = Literal["auto", "fp32", "bf16", "fp16"]
Verify = Literal["full", "header", "none"]

# ------------------------------------------------------------------------------------ durations


def _parse_duration(text: str) -> tuple[float, str] | None:
    for unit in ("st", "ep", "ex"):
        if text.endswith(unit):
            try:
                number = float(text[: -len(unit)])
            except ValueError:
                return None
            return (number, unit) if math.isfinite(number) and number >= 0 else None
    return None


DURATIONS = "a duration: '5000st' (steps), '10ep' (epochs) or '1e6ex' (examples)"
Duration = Annotated[
    str,
    Kind(
        "duration",
        lambda text: None if _parse_duration(text) is not None else f"expected {DURATIONS}",
        DURATIONS,
    ),
]


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


# ------------------------------------------------------------------------------------ data specs

DataKind = Literal[
    "fashion_mnist", "cifar10", "cifar100", "synthetic", "folder", "wds", "hf", "vtab", "vtab800"
]
# Datasets known by name; each may be followed by ':DIR', the folder holding its files.
NAMED: tuple[DataKind, ...] = ("fashion_mnist", "cifar10", "cifar100")
# Datasets in shards: the kind, then ':' and where they are (required).
SHARDED: dict[DataKind, str] = {
    "wds": "wds:DIR, the folder of its {split}-*.tar shards",
    "hf": "hf:PATH or hf:NAME, a save_to_disk folder, parquet files or a Hub dataset",
    "vtab": "vtab:DIR, a VTAB-1k task folder (DIR/train800val200.txt, DIR/test.txt, DIR/images/)",
    "vtab800": "vtab800:DIR, a VTAB-1k task folder (DIR/train800.txt, DIR/val200.txt, ...)",
}
DATA_SPECS = (
    "DIR (a folder of class folders), fashion_mnist[:DIR], cifar10[:DIR], cifar100[:DIR], "
    "wds:DIR (tar shards), hf:PATH|NAME (Hugging Face datasets), vtab:DIR (a VTAB-1k task's "
    "lists: train800val200 to train, test; vtab800:DIR: train800 to train, val200) or synthetic"
)


@dataclass(frozen=True)
class DataSource:
    """What a data spec names: a dataset ``kind`` and where its files are (None: the default
    places, data/sources/paths.py)."""

    kind: DataKind
    path: str | None = None

    @property
    def spec(self) -> str:
        if self.kind == "folder":
            return str(self.path)
        return self.kind if self.path is None else f"{self.kind}:{self.path}"


def data_source(spec: str) -> DataSource:
    """Parse a data spec: ``DIR`` (or ``folder:DIR``), ``fashion_mnist[:DIR]``,
    ``cifar10[:DIR]``, ``cifar100[:DIR]``, ``wds:DIR``, ``hf:PATH`` or ``hf:NAME``,
    ``synthetic``; a ``ConfigError`` for anything else."""
    name, sep, rest = spec.partition(":")
    if name in SHARDED and sep:
        if not rest:
            raise ConfigError(f"data {spec!r}: expected {SHARDED[name]}")
        return DataSource(name, rest)
    if name in NAMED:
        if sep and not rest:
            raise ConfigError(f"data {spec!r}: expected {name}:DIR, the folder holding its files")
        return DataSource(name, rest or None)
    if name == "synthetic":
        if sep:
            raise ConfigError(f"data {spec!r}: synthetic images are made, not read: 'synthetic'")
        return DataSource("synthetic")
    if name == "folder" and sep:
        spec = rest
    if spec in ("", "folder"):
        raise ConfigError(
            f"data {spec!r} names no folder: give the image folder itself (--data DIR); "
            f"expected {DATA_SPECS}"
        )
    return DataSource("folder", spec)


def data_name(spec: str) -> str:
    """A data spec's short name, as few-shot tables and metric names show it: a named dataset's
    kind (``cifar10``), else the last part of its folder or path (``/data/pets`` -> ``pets``; a
    glob's or a parquet file's folder), or a Hub dataset's name (``hf:user/beans`` ->
    ``beans``); characters other than letters, digits, ``.``, ``_`` and ``-`` become ``_``."""
    source = data_source(spec)
    if source.path is None or source.kind in NAMED:
        return source.kind
    parts = [p for p in source.path.split("/") if p and p not in (".", "..")]
    plain = [p for p in parts if not any(c in p for c in "*?[")]  # a glob's folder
    if len(plain) > 1 and plain[-1].endswith(".parquet"):  # data/beans/train.parquet: beans
        plain.pop()
    name = (plain[-1] if plain else source.kind).removesuffix(".parquet") or source.kind
    return re.sub(r"[^A-Za-z0-9._-]", "_", name)


def data_names(specs: Sequence[str]) -> list[str]:
    """``data_name`` of each spec, a repeated name numbered from its second use (``test``,
    ``test-2``), so that each spec of a list has its own."""
    names: list[str] = []
    for spec in specs:
        name, n = data_name(spec), 2
        while name in names:
            name, n = f"{data_name(spec)}-{n}", n + 1
        names.append(name)
    return names


def hf_is_local(path: str) -> bool:
    """Whether ``hf:PATH`` names files on this machine (a folder, a parquet file or a glob of
    them) rather than a dataset on the Hub: it exists, has a glob character or a ``.parquet``
    suffix, or starts like a path (``/``, ``.``, ``~``). So ``hf:./mnist`` is the folder and
    ``hf:mnist`` the Hub's dataset unless a folder ``mnist`` is here."""
    return (
        os.path.exists(os.path.expanduser(path))
        or any(c in path for c in "*?[")
        or path.endswith(".parquet")
        or path.startswith(("/", ".", "~"))
    )


def normalise_data(spec: str) -> str:
    """A data spec with its folder made absolute (``~`` expanded), so that the run records where
    the data is whatever the directory a later command runs from (a Hub name stays a name); a
    folder holding ``train800val200.txt`` (a prepared VTAB-1k task) is ``vtab:DIR``."""
    source = data_source(spec)
    if source.path is None or (source.kind == "hf" and not hf_is_local(source.path)):
        return source.spec
    path = os.path.abspath(os.path.expanduser(source.path))
    if source.kind == "folder" and os.path.isfile(os.path.join(path, "train800val200.txt")):
        return f"vtab:{path}"  # a VTAB-1k task folder given as a folder: its lists, not a tree
    return dataclasses.replace(source, path=path).spec


def recorded_data(extra: Mapping[str, Any]) -> str | None:
    """The data spec a checkpoint's metadata records (the run that wrote it), if any."""
    run = extra.get("run")
    if not isinstance(run, Mapping) or not isinstance(run.get("data"), Mapping):
        return None
    dataset = upgrade(DataConfig, run["data"]).get("dataset", "fashion_mnist")
    return dataset if isinstance(dataset, str) else None


def _why_not_spec(spec: str) -> str | None:
    """What is wrong with a data spec, in ``data_source``'s words (None: nothing)."""
    try:
        data_source(spec)
    except ConfigError as e:
        return str(e)
    return None


DataSpec = Annotated[str, Kind("data", _why_not_spec, DATA_SPECS)]
AutoAugmentSpec = Annotated[
    str, Kind("augmentation", why_not_auto_augment, AUTO_AUGMENTS, why_not_new=why_not_new)
]
# A new run's bounds on the toolbox's counts (config/keys.py ``check_new``: a run recorded
# before them keeps its value): generous beside timm's and DeiT's values.
MAX_AUG_REPEATS, MAX_ERASE_COUNT = 64, 16


# ------------------------------------------------------------------------------------ sections


@dataclass(frozen=True, kw_only=True)
class DataConfig(Section):
    """Where the images come from and how they are augmented [P App. B.1.1 for the official
    fine-tuning pipeline: inception crop, resize, values scaled to [-1, 1]]."""

    SECTION: ClassVar[str] = "data"
    RENAMED: ClassVar[Mapping[str, Any]] = {"data_dir": fold_data_dir}

    dataset: DataSpec = key("fashion_mnist", doc=f"what to train on: {DATA_SPECS}")
    crop_padding: int = key(0, doc="random crop after zero padding by this many pixels", ge=0)
    flip: bool = key(False, doc="random horizontal flips in training")
    test_flip: bool = key(
        False,
        doc="evaluate each image and its mirror image, averaging the class probabilities (twice "
        "the evaluation's forward passes)",
    )
    inception_crop: bool = key(False, doc="random-resized (inception) crops [P App. B.1.1]")
    rand_augment: bool = key(False, doc="RandAugment(2, 10)")
    aug_repeats: int = key(
        1,
        doc="repeated augmentation r (DeiT's RASampler, timm's --aug-repeats): an epoch keeps "
        "about the dataset's size but serves about 1/r of its images, r times each, differently "
        "augmented; under torchrun with r or more processes an image's copies land on different "
        f"ones (data/loader.py); 1 = off; not with data.streaming; DeiT's is 3, a new run's at "
        f"most {MAX_AUG_REPEATS} and fewer than its training images",
        ge=1,
        new_le=MAX_AUG_REPEATS,
    )
    per_class: int | None = key(None, doc="a class-balanced subset of the training set", ge=1)
    num_workers: int | None = key(
        None,
        doc="processes decoding images per process (0: the process itself; none: the machine's "
        "cores divided among its processes, less one); where the run computes, not what: a "
        "resume may change it",
        ge=0,
    )
    verify: Verify = key(
        "full",
        doc="how much of each image a split's first read checks: full = PIL's verify() of "
        "every image (and decoding until a colour image when the channels are decided); header "
        "= verify() only, channels from the images' modes; none = the listing only, a bad image "
        "replaced when read (needs model.in_chans). The findings of a folder, of shards and of "
        "an hf: table on disk are cached under $VITKIT_HOME, per state of the data",
    )
    max_bad_fraction: float = key(
        0.01,
        doc="the fraction of a split's images that may be unreadable (each skipped and named)",
        ge=0,
        lt=1,
    )
    validation: Validation = key(
        "auto",
        doc="what chooses the best weights: auto = a folder's (or shards') val split, else a "
        "seeded holdout of its train split (the test split for fashion_mnist, cifar, synthetic, "
        "and for a stream without a val split); holdout; val (an error without one); test",
        earlier=(VAL_OR_TEST,),
    )
    holdout: float = key(
        0.1,
        doc="the fraction of every class held out of train to validate on (seeded by train.seed)",
        gt=0,
        lt=1,
    )
    image_column: str = key(
        "image", doc="hf: the column of the images (an Image feature, or encoded bytes)"
    )
    label_column: str = key(
        "label",
        doc="hf: the column of the labels (a ClassLabel, integers from 0, or class names)",
    )
    image_paths: ImagePaths = key(
        "dataset",
        doc="hf: where an image cell that stores a path instead of bytes may point, and vtab: "
        "where a list's path may lead through links: dataset = a relative path inside the "
        "dataset's own folder (no '..'; a VTAB task's folder or the target of its images/ "
        "link); any = any local file (what datasets built with cast_column('image', Image()) "
        "store); regular files only, either way",
    )
    max_image_bytes: int = key(
        64 * 2**20,
        doc="the largest encoded image a file, a shard's member or an hf: cell may hold or point "
        "to, in bytes (a larger one is unreadable, skipped and named)",
        ge=1,
    )
    max_image_pixels: int = key(
        64 * 10**6,
        doc="the most pixels (width x height, from the header) an image may have: a larger one is "
        "unreadable, refused before it is decoded (a 13,000 x 13,000 PNG of 0.5 MB costs 2.9 GB "
        "to decode); PIL refuses more than 178,956,970 whatever this says",
        ge=1,
    )
    streaming: bool = key(
        False,
        doc="hf: read the parquet files as a stream, row group by row group, instead of "
        "converting them to memory-mapped Arrow first (data/stream.py)",
    )
    shuffle_buffer: int = key(
        1000,
        doc="streaming: training rows are shuffled within windows of at least this many (their "
        "images held in memory)",
        ge=1,
    )
    random_erase: float = key(
        0.0,
        doc="random erasing's probability per image (timm's --reprob, pixel mode: boxes of "
        "N(0, 1) noise in the [-1, 1] inputs, drawn on the device); 0 = off",
        ge=0,
        le=1,
    )
    random_erase_count: int = key(
        1,
        doc="random erasing: at most this many boxes per image, 1 to it (timm's --recount, 1 "
        f"unless set; a new run's at most {MAX_ERASE_COUNT}: the boxes' mask is (batch, count, "
        "H, W))",
        ge=1,
        new_le=MAX_ERASE_COUNT,
    )
    auto_augment: AutoAugmentSpec | None = key(
        None,
        doc="timm's --aa strings (config/augment.py, data/autoaugment.py): rand-m9-mstd0.5-inc1 "
        "(RandAugment: n ops, magnitude m on 0..10 with noise std mstd clipped to [0, mmax], inc "
        f"ops, each applied with p 0.5; timm's n is 2-4, a new run's at most {MAX_OPS}, mmax at "
        f"most {MAX_MAGNITUDE}), original (AutoAugment's ImageNet policy), trivial "
        "(TrivialAugment wide); timm's ops and magnitudes on torchvision's tensor ops: bilinear "
        "where timm draws bilinear or bicubic, grey fill 128 (timm's for mean 0.5)",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        require(
            not (self.rand_augment and self.auto_augment),
            "data.auto_augment",
            self.auto_augment,
            "none with data.rand_augment=True (RandAugment(2, 10)): choose one augmentation",
        )
        require(
            not (self.inception_crop and self.crop_padding),
            "data.crop_padding",
            self.crop_padding,
            "0 with data.inception_crop=True (the inception crop excludes crop padding: choose "
            "one way of cropping)",
        )
        require(
            not self.streaming or self.source.kind == "hf",
            "data.streaming",
            self.streaming,
            f"False for {self.dataset} (only hf: data is streamed; the rest is read with random "
            "access)",
        )
        require(
            not (self.streaming and self.aug_repeats > 1),
            "data.aug_repeats",
            self.aug_repeats,
            "1 with data.streaming=True (a stream's windows cannot repeat an image in one epoch)",
        )

    @property
    def source(self) -> DataSource:
        return data_source(self.dataset)


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
    compile: bool = key(False, doc="compile the training step (torch.compile)")
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

    def __post_init__(self) -> None:
        super().__post_init__()
        require(
            not (
                self.objective == "mpp"
                and (self.compile or self.mixup or self.cutmix or self.label_smoothing)
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


@dataclass(frozen=True, kw_only=True)
class RunConfig(Section):
    """Everything a training run needs; saved as ``config.json`` in the run directory."""

    model: ModelConfig = key(doc="the model")
    data: DataConfig = key(doc="the data")
    optim: OptimConfig = key(doc="the optimizer")
    train: TrainConfig = key(doc="the loop")
    init_from: str | None = key(
        None, doc="pre-trained weights to start from: head replaced, posemb resized"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.train.objective == "mpp":
            require(
                self.model.arch == "vit" and self.model.resnet is None,
                "train.objective",
                self.train.objective,
                "'classification' for this model: masked patch prediction needs a plain ViT (a "
                "hybrid's ResNet would see the masked patches' pixels through its neighbours)",
            )
            require(
                not self.data.test_flip,
                "data.test_flip",
                self.data.test_flip,
                "False with train.objective='mpp' (its evaluation predicts patches, not classes)",
            )
            require(
                self.train.ema is None,
                "train.ema",
                self.train.ema,
                "None with train.objective='mpp' (the mask embedding and head are not averaged)",
            )
            require(
                not self.data.random_erase,
                "data.random_erase",
                self.data.random_erase,
                "0 with train.objective='mpp' (noise would replace the patch colours it predicts)",
            )
        require(
            not (self.optim.name == "muon" and self.model.arch != "vit"),
            "optim.name",
            self.optim.name,
            "'adam' for a ResNet (Muon takes the transformer blocks' weight matrices)",
        )
        require(
            not (self.optim.layer_decay is not None and self.model.arch != "vit"),
            "optim.layer_decay",
            self.optim.layer_decay,
            "none for a ResNet (layer-wise decay counts a ViT's transformer blocks)",
        )
        require(
            not (self.optim.name == "muon" and self.train.parallel == "fsdp"),
            "optim.name",
            self.optim.name,
            "'adam' with train.parallel='fsdp' (Muon orthogonalises whole matrices, FSDP shards "
            "them), or train.parallel='ddp'",
        )
        require(
            not (self.train.activation_checkpointing and self.model.arch != "vit"),
            "train.activation_checkpointing",
            self.train.activation_checkpointing,
            "False for a ResNet (checkpointing is per transformer block)",
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunConfig:
        return from_dict(cls, data)
