"""Run recipes: the paper's training setups, ours for training on your own data, and the
Fashion-MNIST ones of the main job, each a function whose docstring gives its command and its
measured result here (or the paper's number it targets).

A recipe supplies hyperparameters; ``--data`` and ``--model`` say what to train on and what to
train (compose.py). A recipe may size its schedule from the number of training images
(``sized``) and declare time-to-accuracy targets (``targets``), which the end of a run reports.
Override any field with ``--set section.key=value`` (sections: model, data, optim, train).
No torch import here.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .config import (
    ConfigError,
    DataConfig,
    ModelConfig,
    OptimConfig,
    ResNetConfig,
    RunConfig,
    Schedule,
    TrainConfig,
)
from .config.keys import closest
from .presets import get_config


@dataclass(frozen=True)
class Targets:
    """Time-to-accuracy targets: the first time each accuracy is reached, and the accuracy at
    ``at_minutes``, from the process's start (metrics.jsonl's ``time_s``)."""

    accuracies: tuple[float, ...]
    at_minutes: float


# A schedule sized by the data: (training images, train.duration if the user set it) -> the
# settings it derives ({dotted key: value}), applied where the user set none of them.
Sized = Callable[[int, "str | None"], dict[str, Any]]


@dataclass(frozen=True)
class Recipe:
    """A registered recipe: ``build()`` gives its ``RunConfig``; ``sized`` (optional) the
    schedule it derives from the number of training images; ``targets`` its time-to-accuracy
    targets, if it has any."""

    name: str
    about: str  # one line, for `vitkit train --help`
    build: Callable[[], RunConfig]
    sized: Sized | None = None
    targets: Targets | None = None


RECIPES: dict[str, Recipe] = {}


def recipe(
    about: str,
    *,
    sized: Sized | None = None,
    targets: Targets | None = None,
) -> Callable[[Callable[[], RunConfig]], Callable[[], RunConfig]]:
    """Register the decorated function as a recipe named after it (``_`` written ``-``)."""

    def register(fn: Callable[[], RunConfig]) -> Callable[[], RunConfig]:
        name = fn.__name__.replace("_", "-")
        RECIPES[name] = Recipe(name, about, fn, sized, targets)
        return fn

    return register


def scratch_vit() -> ModelConfig:
    """The ``scratch`` recipe's ViT when no ``--model`` is given: 32x32 images cut into a 4x4
    grid of 8x8 patches (16 tokens + class token), 6 layers of width 192 (3 heads, MLP 384):
    1.8M parameters, a size two CPU cores train in minutes. Patches of 4 (64 tokens) trained
    scikit-learn's 1,797 digits at 175 images/s on two threads, patches of 8 at 430 on one, and
    reached 98.9% of the holdout in 2.5 min; classes and channels come from the data."""
    return ModelConfig(
        image_size=32,
        patch_size=8,
        hidden_size=192,
        num_layers=6,
        num_heads=3,
        mlp_dim=384,
        num_classes=10,
    )


# Examples a from-scratch run sees, whatever the dataset's size, within the epoch bounds below.
SCRATCH_EXAMPLES = 100_000
SCRATCH_EPOCHS = (20, 300)


def paced(duration: str) -> dict[str, str]:
    """A run of ``duration`` with warmup for its first 5% and 10 evaluations and checkpoints, in
    the duration's own unit."""
    number, unit = float(duration[:-2]), duration[-2:]
    part = {"ep": 1e-2, "st": 1.0, "ex": 1.0}[unit]  # steps and examples are whole

    def share(fraction: float, least: float) -> str:
        return f"{max(least, round(number * fraction / part) * part):g}{unit}"

    return {
        "train.duration": duration,
        "optim.warmup": share(0.05, 0.0),
        "train.eval_every": share(0.1, part),
        "train.save_every": share(0.1, part),
    }


def scratch_schedule(n: int, duration: str | None = None) -> dict[str, Any]:
    """The ``scratch`` recipe's schedule for ``n`` training images: about 100,000 examples
    (``SCRATCH_EXAMPLES``) as epochs between 20 and 300 (or the ``duration`` given), paced by
    ``paced``; batches of 128, or of an eighth of a smaller set (8 steps an epoch)."""
    if duration is None:
        low, high = SCRATCH_EPOCHS
        duration = f"{min(max(math.ceil(SCRATCH_EXAMPLES / n), low), high)}ep"
    return {**paced(duration), "train.batch_size": min(128, max(1, n // 8))}


@recipe(
    "your images from scratch: AdamW, cosine, label smoothing, duration by dataset size",
    sized=scratch_schedule,
)
def scratch() -> RunConfig:
    """Training from scratch on your own images (the recipe when ``vitkit train`` is given
    ``--data`` and no ``--recipe``): AdamW, lr 1e-3, weight decay 0.05 (not on biases, norms,
    posemb, class token), warmup then cosine, clipping at 1, label smoothing 0.1, no flips (set
    ``data.flip=true`` for data that mirrors), batch 128, and a duration scaled to the dataset's
    size (``scratch_schedule``). Its model is ``scratch_vit`` unless ``--model`` names a preset.

    Command: ``vitkit train --data DIR [--model ViT-Ti/8]``.
    Measured (2 cores): ``vitkit train --data digits/`` on scikit-learn's 1,797 handwritten
    digits (written as 32x32 image files, 3 corrupt ones added): 97.8% of the 179 held-out images
    after 2.5 min (62 epochs).
    """
    return RunConfig(
        model=scratch_vit(),
        data=DataConfig(dataset="synthetic"),  # replaced by --data
        optim=OptimConfig(
            name="adam", lr=1e-3, weight_decay=0.05, grad_clip=1.0, schedule="cosine", warmup="1ep"
        ),
        train=TrainConfig(duration="20ep", batch_size=128, label_smoothing=0.1),
    )


# The paper's fine-tuning steps by dataset size [P Table 4]: Oxford Flowers and Pets (1-4k
# images) 500, CIFAR (50k) 10k, ImageNet (1.28M) 20k; between them, interpolated in log-log.
FINETUNE_STEPS = ((3_000, 500), (50_000, 10_000), (1_281_167, 20_000))


def finetune_steps(n: int) -> int:
    """Fine-tuning steps for ``n`` training images, as the paper's Table 4 (``FINETUNE_STEPS``),
    rounded to 100."""
    (n0, s0), *_ = FINETUNE_STEPS
    if n <= n0:
        return s0
    for (a, sa), (b, sb) in itertools.pairwise(FINETUNE_STEPS):
        if n <= b:
            t = math.log(n / a) / math.log(b / a)
            return round(math.exp(math.log(sa) + t * math.log(sb / sa)) / 100) * 100
    return FINETUNE_STEPS[-1][1]


def finetune_schedule(n: int, duration: str | None = None) -> dict[str, Any]:
    """The ``finetune`` recipe's schedule for ``n`` training images: ``finetune_steps(n)`` steps
    (or the ``duration`` given), paced by ``paced``; batches of 64 (of ``n`` when fewer)
    accumulated 8 times into the paper's 512, or as many times as an epoch holds."""
    micro = min(64, n)
    return {
        **paced(duration or f"{finetune_steps(n)}st"),
        "train.batch_size": micro,
        "train.accum_steps": min(8, max(1, n // micro)),
    }


@recipe(
    "fine-tune on your images as the paper does: SGD 0.9, batch 512, steps by dataset size",
    sized=finetune_schedule,
)
def finetune() -> RunConfig:
    """Fine-tuning pre-trained weights on your own images (the recipe of ``vitkit finetune``
    without ``--recipe``), as the paper fine-tunes [P §4.1, Table 4, App. B.1.1]: SGD momentum
    0.9, no weight decay, batch 512 (64 x 8 accumulation), warmup then cosine decay, clipping at
    global norm 1, steps by dataset size (``finetune_schedule``: 500 for a few thousand images,
    10k for CIFAR's 50k, 20k for ImageNet), at the checkpoint's resolution unless
    ``model.image_size`` is set. Learning rate 0.01, stated: the middle of the paper's sweep
    {0.001, 0.003, 0.01, 0.03}; sweep it on a holdout for the best result. No flips or crops:
    set ``data.flip=true`` or ``data.inception_crop=true`` where they suit the images.

    Command: ``vitkit finetune --init-from CKPT --data DIR [--set model.image_size=64]``.
    Measured (2 cores): the ``scratch`` digits checkpoint (97.8%) fine-tuned at 64 px kept 97.8%
    of the 179 held-out images, 500 steps in 23.5 min.
    """
    return RunConfig(
        model=scratch_vit(),  # replaced by the checkpoint's architecture
        data=DataConfig(dataset="synthetic"),  # replaced by --data or the checkpoint's data
        optim=OptimConfig(
            name="sgd", lr=0.01, momentum=0.9, grad_clip=1.0, schedule="cosine", warmup="25st"
        ),
        train=TrainConfig(duration="500st", batch_size=64, accum_steps=8),
    )


def fmnist_vit() -> ModelConfig:
    """The Fashion-MNIST ViT: 28x28 grayscale images cut into a 4x4 grid of 7x7 patches (16
    tokens + class token), 6 layers of width 128 (4 heads, MLP 256): 0.8M parameters, chosen for
    what two CPU cores train in minutes (patches of 4 would see 3x more tokens at 1/4 the speed)."""
    return ModelConfig(
        image_size=28,
        patch_size=7,
        hidden_size=128,
        num_layers=6,
        num_heads=4,
        mlp_dim=256,
        num_classes=10,
        in_chans=1,
    )


@recipe("Fashion-MNIST, the main job's ViT for 8 epochs (89.1%)")
def fmnist() -> RunConfig:
    """A plain ViT trained from scratch on Fashion-MNIST: the model of the main job
    (``fmnist-speed`` trains it for time to accuracy), and the base of docs/guides/reproduction.md's
    studies.

    Command: ``vitkit train --recipe fmnist --run-dir runs/fmnist``.
    Measured (2-core Xeon, torch 2.14.1): 89.12% test accuracy, 10.6 min from process start to
    the final evaluation (8 epochs at ~800 images/s, with an unfused AdamW; the fused one vitkit
    uses makes the eager step ~5% faster, benchmarks/RESULTS.md). Paper-style references for a plain ViT on Fashion-MNIST: 91-93.5% after 100-200
    epochs (PAPER.md B1).
    """
    return RunConfig(
        model=fmnist_vit(),
        data=DataConfig(dataset="fashion_mnist", flip=True),
        optim=OptimConfig(
            name="adam",
            lr=1e-3,
            weight_decay=0.05,
            grad_clip=1.0,
            schedule="cosine",
            warmup="0.5ep",
        ),
        train=TrainConfig(
            duration="8ep", batch_size=128, label_smoothing=0.1, eval_every="2ep", save_every="1ep"
        ),
    )


@recipe(
    "the main job: Fashion-MNIST for time to accuracy (91.4% in 6.3 min on 2 cores)",
    targets=Targets(accuracies=(0.90, 0.91), at_minutes=15.0),
)
def fmnist_speed() -> RunConfig:
    """The main job (``make run``): the ``fmnist`` recipe's ViT (7x7 patches, 6
    layers of width 128), trained for time to accuracy; the clock runs from process start,
    evaluations included.

    What the measurements put in it (benchmarks/RESULTS.md, "Time to accuracy"): Muon for
    the blocks' weight matrices (AdamW for the rest), which learns in 4 epochs what AdamW learns in
    10; weight decay 0.5 (0.8 points more than 0.05 after 10 epochs: the training accuracy ran
    to 98% while the test accuracy stalled, and unlike crops, dropout or stochastic depth, decay
    does not slow the start); batch 256 (the Muon step is per batch: half its cost per image,
    the same accuracy per epoch as 128 with lr 1.5e-3); the training step compiled; an average of
    the weights (EMA 0.996, about an epoch) evaluated and kept; each test image evaluated with its
    mirror image (``data.test_flip``; the log has the one-view accuracy beside); 10 epochs, what
    fits in 15 minutes here.

    Command: ``vitkit train --recipe fmnist-speed --run-dir runs/fmnist-speed``.
    Measured (2 cores of an AMD EPYC Zen 4, torch 2.14.1, compilation cache empty, bf16 as
    ``auto`` chose there): 90.33% test accuracy 3.5 min after the process started, 91.02% at
    4.5 min, 91.36% at the end, 6.3 min (one view: 90.81% at the end); in fp32 on the same
    machine, 91.52% at 9.7 min; on a 2-core Xeon in fp32, 91.62% at 14.0 min. 90% within 10
    minutes and 91% within 15, the recipe's targets. The logs are in benchmarks/RESULTS.md.
    """
    run = fmnist()
    return dataclasses.replace(
        run,
        data=dataclasses.replace(run.data, test_flip=True),
        optim=dataclasses.replace(
            run.optim, name="muon", lr=1.5e-3, momentum=0.95, weight_decay=0.5
        ),
        train=dataclasses.replace(
            run.train,
            duration="10ep",
            batch_size=256,
            ema=0.996,
            compile=True,
            eval_every="1ep",
            save_every="1ep",
        ),
    )


@recipe("Fashion-MNIST for 30 epochs with random crops (90.6%)")
def fmnist_long() -> RunConfig:
    """The main job's ViT trained longer, with random crops: the best a plain ViT reaches here.

    Command: ``vitkit train --recipe fmnist-long --run-dir runs/fmnist-long``.
    Measured (same machine): 90.56% test accuracy after 30 epochs, 51.4 min. Plain ViTs
    trained 100-200 epochs elsewhere report 91-93.5% (PAPER.md B1); patches of 4 would help, at
    four times the cost.
    """
    run = fmnist()
    return dataclasses.replace(
        run,
        data=dataclasses.replace(run.data, crop_padding=2),
        train=dataclasses.replace(run.train, duration="30ep", eval_every="5ep"),
    )


FMNIST_BACKBONE = ResNetConfig(num_layers=(2, 2))  # root + 2 stages: 0.8M parameters, stride 8


@recipe("the ResNet baseline of the data-requirement study")
def fmnist_resnet() -> RunConfig:
    """The ResNet baseline of the data-requirement study (docs/guides/reproduction.md (a)): the hybrid's
    BiT backbone (root, 2 stages of 2 bottlenecks, GroupNorm + weight standardisation) with global
    average pooling and a linear head, 0.8M parameters like the ViT; the main job's optimizer and
    schedule (the paper trains its ResNets with Adam too, App. D.1).

    Command: ``vitkit train --recipe fmnist-resnet --run-dir runs/fmnist-resnet``.
    Measured: 86.91% after 600 steps (study a, full training set; the ViT: 83.87%).
    """
    return dataclasses.replace(
        fmnist(),
        model=dataclasses.replace(
            fmnist_vit(), arch="resnet", patch_size=1, resnet=FMNIST_BACKBONE
        ),
    )


@recipe("the hybrid of the data-requirement study")
def fmnist_hybrid() -> RunConfig:
    """The hybrid for the data-requirement study: the ResNet baseline's backbone feeding the main
    job's transformer through a 1x1 patch embedding (patch size 1 on the stride-8 feature map
    [P §3.1]). Images are resized to 32 px so that the feature map is the ViT's 4x4 grid.

    Command: ``vitkit train --recipe fmnist-hybrid --run-dir runs/fmnist-hybrid``.
    Measured: 87.09% after 600 steps (study a, full training set), with 1.67M parameters (the
    backbone's 0.8M plus the ViT's transformer).
    """
    return dataclasses.replace(
        fmnist(),
        model=dataclasses.replace(
            fmnist_vit(), image_size=32, patch_size=1, resnet=FMNIST_BACKBONE
        ),
    )


@recipe("seconds on synthetic images, for tests and trying the CLI")
def smoke() -> RunConfig:
    """Seconds-long run on synthetic images, for tests and trying the CLI.

    Command: ``vitkit train --recipe smoke --run-dir runs/smoke``.
    """
    return RunConfig(
        model=dataclasses.replace(
            get_config("ViT-mu/16"), image_size=16, patch_size=4, num_classes=4
        ),
        data=DataConfig(dataset="synthetic"),
        optim=OptimConfig(lr=3e-3, warmup="2st"),
        train=TrainConfig(
            duration="8st", batch_size=16, log_every="2st", eval_every="4st", save_every="4st"
        ),
    )


@recipe("the paper's fine-tuning of ViT-B/16 to CIFAR-10 at 384 px")
def finetune_paper() -> RunConfig:
    """The paper's fine-tuning [P Table 4, App. B.1.1; vit_jax defaults]: SGD momentum 0.9, no
    weight decay, batch 512 (64 x 8 accumulation), cosine, 500 warmup steps, clip at global norm 1,
    384 px, inception crop; 10k steps (the CIFAR schedule), lr 0.03 from the {0.001..0.03} sweep.

    Command: ``vitkit finetune --recipe finetune-paper --init-from ViT-B_16.npz --data
    cifar10:DIR``. Target: ViT-B/16 (I21k) -> CIFAR-10 99.0%
    (vit_jax README); not runnable here (no pre-trained weights, no GPU).
    """
    return RunConfig(
        model=dataclasses.replace(get_config("ViT-B/16"), image_size=384, num_classes=10),
        data=DataConfig(dataset="cifar10", inception_crop=True),  # resized to model.image_size
        optim=OptimConfig(
            name="sgd", lr=0.03, momentum=0.9, grad_clip=1.0, schedule="cosine", warmup="500st"
        ),
        train=TrainConfig(
            duration="10000st",
            batch_size=64,
            accum_steps=8,
            eval_every="1000st",
            save_every="500st",
        ),
    )


def _pretrain(
    preset: str, *, lr: float, wd: float, dropout: float, schedule: Schedule, epochs: int
) -> RunConfig:
    return RunConfig(
        model=dataclasses.replace(
            get_config(preset), dropout_rate=dropout, representation_size=768
        ),
        data=DataConfig(dataset="imagenet", inception_crop=True),
        optim=OptimConfig(
            lr=lr,
            weight_decay=wd,
            grad_clip=1.0,
            schedule=schedule,
            warmup="10000st",
            end_lr=1e-5 if schedule == "linear" else 0.0,
        ),
        train=TrainConfig(duration=f"{epochs}ep", batch_size=64, accum_steps=64),  # 4096 per update
    )


@recipe("the paper's ViT-B/16 pre-training on ImageNet-1k (DIR: --data)")
def pretrain_i1k_b16() -> RunConfig:
    """ViT-B/16 from scratch on ImageNet-1k [P Table 3]: Adam lr 3e-3, wd 0.3, dropout 0.1,
    cosine, 300 epochs, batch 4096 (64 x 64 accumulation), 10k warmup, clip 1. Paper: 77.9% top-1
    after fine-tuning at 384 (Table 5). Command: ``vitkit train --recipe pretrain-i1k-b16 --data
    IMAGENET`` (an ImageFolder: train/ and val/)."""
    return _pretrain("ViT-B/16", lr=3e-3, wd=0.3, dropout=0.1, schedule="cosine", epochs=300)


@recipe("the paper's ViT-B/16 pre-training on ImageNet-21k (DIR: --data)")
def pretrain_i21k_b16() -> RunConfig:
    """ViT-B/16 on ImageNet-21k [P Table 3]: Adam lr 1e-3, wd 0.03, dropout 0.1, linear decay to
    1e-5, 90 epochs, batch 4096, 10k warmup. Paper: 84.0% ImageNet after fine-tuning."""
    return _pretrain("ViT-B/16", lr=1e-3, wd=0.03, dropout=0.1, schedule="linear", epochs=90)


# AugReg [Steiner et al. 2021, "How to train your ViT?"], as big_vision's configs name its augmentation
# and regularisation levels (big_vision/configs/vit_i1k.py and vit_i21k.py, MIXUP_DEF and
# RANDAUG_DEF): mixup's alpha and RandAugment(2, magnitude) in TensorFlow's scale, where 10 is an
# op's full range and 15 or 20 go past it ("light1" is RandAugment(2, 0): "actually not nothing").
# Here RandAugment is data.auto_augment's timm RandAugment (magnitudes on the same 0..10 scale,
# mmax raised past 10 where the level is), each op applied with p 0.5 (TensorFlow's draws its own).
AUGREG_LEVELS: dict[str, tuple[float, int | None]] = {
    "none": (0.0, None),
    "light1": (0.0, 0),
    "light2": (0.2, 10),
    "medium1": (0.2, 15),
    "medium2": (0.5, 15),
    "strong1": (0.5, 20),
    "strong2": (0.8, 20),
}


def _augreg(
    preset: str, level: str, *, weight_decay: float, dataset: str, pre_logits: bool
) -> RunConfig:
    """AugReg's pre-training: Adam lr 1e-3 (its runs' ``lr_0.001``), batch 4096 (64 x 64
    accumulation), 10k warmup steps, cosine, clip 1, inception crop and flip at 224, 300 epochs
    (``--set train.duration=30ep`` for the 30-epoch runs), the level's mixup and RandAugment,
    dropout and stochastic depth 0 (the released runs' ``do_0.0-sd_0.0``). ``weight_decay`` in
    vitkit's AdamW (lr x wd): the runs' ``wd_0.1`` is big_vision's ``wd=0.0001`` at lr 1e-3."""
    mixup, magnitude = AUGREG_LEVELS[level]
    model = get_config(preset)
    if pre_logits:  # the ImageNet-1k config's rep_size=True: a pre-logits layer of the width
        model = dataclasses.replace(model, representation_size=model.hidden_size)
    policy = None if magnitude is None else f"rand-m{magnitude}-n2-mmax{max(magnitude, 10)}"
    return RunConfig(
        model=model,
        data=DataConfig(dataset=dataset, inception_crop=True, flip=True, auto_augment=policy),
        optim=OptimConfig(
            lr=1e-3, weight_decay=weight_decay, grad_clip=1.0, schedule="cosine", warmup="10000st"
        ),
        train=TrainConfig(duration="300ep", batch_size=64, accum_steps=64, mixup=mixup),
    )


def _augreg_recipe(
    size: str, level: str, *, weight_decay: float, i21k: bool, published: str
) -> None:
    """Register ``augreg-i21k-<size>`` or ``augreg-i1k-<size>``."""
    preset = {"ti16": "ViT-Ti/16", "s16": "ViT-S/16", "b16": "ViT-B/16", "l16": "ViT-L/16"}[size]
    data = "imagenet21k" if i21k else "imagenet"
    name = f"augreg-{'i21k' if i21k else 'i1k'}-{size}"

    def build() -> RunConfig:
        return _augreg(preset, level, weight_decay=weight_decay, dataset=data, pre_logits=not i21k)

    build.__doc__ = (
        f"AugReg {preset} on {'ImageNet-21k' if i21k else 'ImageNet-1k'}, aug_{level} "
        f"(mixup {AUGREG_LEVELS[level][0]:g}, RandAugment level {AUGREG_LEVELS[level][1]}), "
        f"wd {weight_decay:g}. Command: ``vitkit train --recipe {name} --data DIR``. {published}"
    )
    about = (
        f"AugReg {preset} on {'ImageNet-21k' if i21k else 'ImageNet-1k'} (aug_{level}, DIR: --data)"
    )
    RECIPES[name] = Recipe(name, about, build)


# ImageNet-21k, 300 epochs: the vision_transformer README's recommended run of each size (its
# checkpoint names give the level and the weight decay; io/pretrained.py registers the weights),
# with the README's ImageNet top-1 after fine-tuning at 384 px (20k steps).
for _size, _level, _wd, _top1 in (
    ("ti16", "none", 0.03, 78.22),
    ("s16", "light1", 0.03, 83.73),
    ("b16", "medium1", 0.1, 85.49),
    ("l16", "strong1", 0.1, 85.59),
):
    _augreg_recipe(
        _size,
        _level,
        weight_decay=_wd,
        i21k=True,
        published=f"Published: {_top1}% ImageNet top-1 after fine-tuning at 384 px "
        "(vision_transformer README, AugReg checkpoints).",
    )
# ImageNet-1k, 300 epochs: big_vision's vit_i1k.py, its level per size ("a good average between 30ep
# and 300ep") and wd 0.0001 (0.1 here). Published: timm's evaluation of the released AugReg
# ImageNet-1k checkpoint of that size at 224 px (timm's results/results-imagenet.csv, at commit
# aa4b5850: vit_small_patch16_224.augreg_in1k, vit_base_patch16_224.augreg_in1k); that run's own
# level is in the release's index.csv, not readable here. No Ti/16 or L/16 was released.
for _size, _level, _published in (
    ("ti16", "light1", None),
    ("s16", "medium2", 78.842),
    ("b16", "medium2", 79.154),
    ("l16", "medium2", None),
):
    _augreg_recipe(
        _size,
        _level,
        weight_decay=0.1,
        i21k=False,
        published="Target: the AugReg paper's ImageNet-1k 300-epoch result for this size "
        "(Steiner et al. 2021, Fig. 4), not recorded here."
        if _published is None
        else f"Published: {_published}% ImageNet top-1 at 224 px (timm's evaluation of the "
        "released AugReg ImageNet-1k checkpoint, results-imagenet.csv).",
    )


def _deit_data() -> DataConfig:
    """DeiT's images: inception crop and flip, ``rand-m9-mstd0.5-inc1``, random erasing 0.25."""
    return DataConfig(
        dataset="imagenet",
        inception_crop=True,
        flip=True,
        auto_augment="rand-m9-mstd0.5-inc1",
        random_erase=0.25,
    )


@recipe("DeiT-B: ViT-B/16 on ImageNet-1k with DeiT's augmentation (DIR: --data)")
def deit_b() -> RunConfig:
    """DeiT-B without distillation [Touvron et al. 2021, Table 9 and its repository's main.py]:
    AdamW, lr 5e-4 x batch / 512 (1e-3 at the batch of 1024 here: 64 x 16 accumulation; with
    another ``train.batch_size`` x ``train.accum_steps``, set ``optim.lr`` by the same rule),
    weight decay 0.05, cosine to 1e-5 after 5 warmup epochs, 300 epochs, label smoothing 0.1,
    mixup 0.8 and CutMix 1.0 switched with p 0.5, RandAugment ``rand-m9-mstd0.5-inc1``, random
    erasing 0.25, repeated augmentation x3, stochastic depth 0.1, no dropout, no clipping;
    inception crop (vitkit's area 0.05-1, DeiT's 0.08-1) and flip at 224, inputs in [-1, 1]
    (DeiT normalises by ImageNet's mean and std). Command: ``vitkit train --recipe deit-b
    --data IMAGENET``. Published: 81.8% ImageNet top-1 (DeiT paper, DeiT-B at 224)."""
    return RunConfig(
        model=dataclasses.replace(get_config("ViT-B/16"), drop_path_rate=0.1),
        data=dataclasses.replace(_deit_data(), aug_repeats=3),
        optim=OptimConfig(
            lr=5e-4 * 1024 / 512,
            weight_decay=0.05,
            schedule="cosine",
            warmup="5ep",
            end_lr=1e-5,
        ),
        train=TrainConfig(
            duration="300ep",
            batch_size=64,
            accum_steps=16,
            label_smoothing=0.1,
            mixup=0.8,
            cutmix=1.0,
            mixup_switch_prob=0.5,
        ),
    )


@recipe("fine-tune with layer-wise lr decay 0.65, MAE's ViT-B recipe (--init-from, --data)")
def finetune_layer_decay() -> RunConfig:
    """MAE's end-to-end fine-tuning of ViT-B [He et al. 2022, Table 9 (A.1)]: AdamW (0.9, 0.999),
    base lr 5e-4 x batch / 256 (2e-3 at the batch of 1024 here: 64 x 16 accumulation), layer-wise
    lr decay 0.65, weight decay 0.05, 5 warmup epochs then cosine, 100 epochs, label smoothing 0.1,
    mixup 0.8, CutMix 1.0, RandAugment ``rand-m9-mstd0.5-inc1``, random erasing 0.25, stochastic
    depth 0.1; the head replaced as fine-tuning here always does (MAE pools the tokens' average,
    ``--set model.classifier`` cannot change a checkpoint's). Command: ``vitkit finetune --recipe
    finetune-layer-decay --init-from CKPT --data IMAGENET``. Published: 83.6% ImageNet top-1 from
    MAE's pre-trained ViT-B (MAE paper, Table 3)."""
    return RunConfig(
        model=dataclasses.replace(get_config("ViT-B/16"), drop_path_rate=0.1),
        data=_deit_data(),  # MAE fine-tunes with DeiT's augmentation, without repeats
        optim=OptimConfig(
            lr=5e-4 * 1024 / 256,
            weight_decay=0.05,
            layer_decay=0.65,
            schedule="cosine",
            warmup="5ep",
        ),
        train=TrainConfig(
            duration="100ep",
            batch_size=64,
            accum_steps=16,
            label_smoothing=0.1,
            mixup=0.8,
            cutmix=1.0,
        ),
    )


def smoke_mode(run: RunConfig) -> RunConfig:
    """``run`` with every training tool it turns on kept, on the smoke recipe's tiny model and
    synthetic images for two steps: how the tests run the ImageNet recipes here."""
    tiny = smoke().model
    model = dataclasses.replace(
        tiny,
        dropout_rate=run.model.dropout_rate,
        attention_dropout_rate=run.model.attention_dropout_rate,
        drop_path_rate=run.model.drop_path_rate,
        representation_size=None if run.model.representation_size is None else tiny.hidden_size,
    )
    data = dataclasses.replace(run.data, dataset="synthetic", num_workers=0)
    train = dataclasses.replace(
        run.train,
        duration="2st",
        batch_size=8,
        accum_steps=1,
        log_every="1st",
        eval_every="2st",
        save_every="2st",
    )
    optim = dataclasses.replace(run.optim, warmup="0st")
    return dataclasses.replace(run, model=model, data=data, train=train, optim=optim)


def find_recipe(name: str) -> Recipe:
    """The registered recipe ``name``; a ``ConfigError`` with the closest name otherwise."""
    if name not in RECIPES:
        hint = closest(name, list(RECIPES))
        raise ConfigError(f"unknown recipe {name!r}{hint}; recipes: {', '.join(RECIPES)}")
    return RECIPES[name]


def get_recipe(name: str) -> RunConfig:
    """The ``RunConfig`` of recipe ``name``."""
    return find_recipe(name).build()
