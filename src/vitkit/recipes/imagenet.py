"""Pre-training on ImageNet: the paper's ViT-B/16 on ImageNet-1k and 21k, AugReg's recipes of each
size [Steiner et al. 2021], and DeiT-B.
"""

from __future__ import annotations

import dataclasses

from ..config import (
    DataConfig,
    OptimConfig,
    RunConfig,
    Schedule,
    TrainConfig,
)
from ..presets import get_config
from .finetune import deit_data
from .registry import RECIPES, Recipe, recipe


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
        data=dataclasses.replace(deit_data(), aug_repeats=3),
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
