"""Fine-tuning pre-trained weights: the paper's steps by dataset size [P Table 4] (``finetune``),
its ViT-B/16 to CIFAR-10 at 384 px (``finetune-paper``), and MAE's layer-wise lr decay
(``finetune-layer-decay``).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Any

from ..config import (
    DataConfig,
    OptimConfig,
    RunConfig,
    TrainConfig,
)
from ..presets import get_config
from .registry import recipe
from .scratch import paced, scratch_vit

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


def finetune_schedule(
    n: int, duration: str | None = None, pretrained: bool = True
) -> tuple[dict[str, Any], None]:
    """The ``finetune`` recipe's schedule for ``n`` training images: ``finetune_steps(n)`` steps
    (or the ``duration`` given), paced by ``paced``; batches of 64 (of ``n`` when fewer)
    accumulated 8 times into the paper's 512, or as many times as an epoch holds."""
    micro = min(64, n)
    return {
        **paced(duration or f"{finetune_steps(n)}st"),
        "train.batch_size": micro,
        "train.accum_steps": min(8, max(1, n // micro)),
    }, None


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
        data=deit_data(),  # MAE fine-tunes with DeiT's augmentation, without repeats
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


def deit_data() -> DataConfig:
    """DeiT's images: inception crop and flip, ``rand-m9-mstd0.5-inc1``, random erasing 0.25."""
    return DataConfig(
        dataset="imagenet",
        inception_crop=True,
        flip=True,
        auto_augment="rand-m9-mstd0.5-inc1",
        random_erase=0.25,
    )
