"""RandAugment with magnitude noise, AutoAugment and TrivialAugment on uint8 images (C, H, W).

Every draw comes from the caller's ``torch.Generator`` (the loader's per-sample or per-batch
one), so an image depends only on (seed, epoch, index) and a resumed run repeats exactly. A
policy (``config.augment.AutoAugment``, from ``data.auto_augment``) draws a plan of ``Step``s
(``plan``), then ``apply`` applies it. ``rand`` [Cubuk et al. 2020] and ``original`` (the ImageNet
policy of Cubuk et al. 2019) are timm's (timm/data/auto_augment.py): its op lists (``inc``),
level-to-argument rules, p 0.5 per RandAugment op, ops drawn with replacement, magnitudes
N(m, mstd) clipped to [0, mmax], a random sign per signed op. ``trivial`` is torchvision's
TrivialAugmentWide [Müller & Hutter 2021]: one op of 14, one of 31 magnitude bins. Differences:
torchvision's tensor ops (``v2.functional``) instead of PIL's (the enhance ops round differently;
shear about the top-left corner, as both); bilinear always (timm draws bilinear or bicubic,
torchvision's TrivialAugment is nearest); grey fill 128 (timm's for mean 0.5; torchvision's is
black); posterize bits clipped to [0, 8] (timm's go negative for mmax > 10).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor

from ..config.augment import AutoAugment

_FILL = 128.0  # timm's img_mean for mean 0.5, vitkit's normalisation


class Step(NamedTuple):
    """One op of a plan: timm's name, its magnitude (timm's 0..mmax level; TrivialAugment: the
    fraction of the op's range, bin / 30) and the argument it is applied with (signed)."""

    op: str
    magnitude: float
    arg: float | None


# timm's level -> argument rules: (v = magnitude / 10, sign) -> argument, and whether a sign is
# drawn (each op's magnitude negated with p 0.5).
_LEVELS: dict[str, tuple[Callable[[float, int], float | None], bool]] = {
    "AutoContrast": (lambda v, s: None, False),
    "Equalize": (lambda v, s: None, False),
    "Invert": (lambda v, s: None, False),
    "Rotate": (lambda v, s: s * 30 * v, True),
    "Posterize": (lambda v, s: int(4 * v), False),
    "PosterizeIncreasing": (lambda v, s: 4 - int(4 * v), False),
    "PosterizeOriginal": (lambda v, s: int(4 * v) + 4, False),
    "Solarize": (lambda v, s: min(256, int(256 * v)), False),
    "SolarizeIncreasing": (lambda v, s: 256 - min(256, int(256 * v)), False),
    "SolarizeAdd": (lambda v, s: min(128, int(110 * v)), False),
    **{
        op: (lambda v, s: 1.8 * v + 0.1, False)
        for op in ("Color", "Contrast", "Brightness", "Sharpness")
    },
    **{
        f"{op}Increasing": (lambda v, s: max(0.1, 1 + s * 0.9 * v), True)
        for op in ("Color", "Contrast", "Brightness", "Sharpness")
    },
    "ShearX": (lambda v, s: s * 0.3 * v, True),
    "ShearY": (lambda v, s: s * 0.3 * v, True),
    "TranslateXRel": (lambda v, s: s * 0.45 * v, True),
    "TranslateYRel": (lambda v, s: s * 0.45 * v, True),
}
_RAND_OPS = (  # timm's _RAND_TRANSFORMS; with inc1 the Increasing variants (_RAND_INCREASING_...)
    "AutoContrast", "Equalize", "Invert", "Rotate", "Posterize", "Solarize", "SolarizeAdd",
    "Color", "Contrast", "Brightness", "Sharpness", "ShearX", "ShearY", "TranslateXRel",
    "TranslateYRel",
)  # fmt: skip
_INCREASING = {"Posterize", "Solarize", "Color", "Contrast", "Brightness", "Sharpness"}
# AutoAugment's ImageNet policy [Cubuk et al. 2019, Table 9], timm's 'original': 25 sub-policies
# of two (op, probability, magnitude) each.
IMAGENET_POLICY: tuple[tuple[tuple[str, float, int], ...], ...] = (
    (("PosterizeOriginal", 0.4, 8), ("Rotate", 0.6, 9)),
    (("Solarize", 0.6, 5), ("AutoContrast", 0.6, 5)),
    (("Equalize", 0.8, 8), ("Equalize", 0.6, 3)),
    (("PosterizeOriginal", 0.6, 7), ("PosterizeOriginal", 0.6, 6)),
    (("Equalize", 0.4, 7), ("Solarize", 0.2, 4)),
    (("Equalize", 0.4, 4), ("Rotate", 0.8, 8)),
    (("Solarize", 0.6, 3), ("Equalize", 0.6, 7)),
    (("PosterizeOriginal", 0.8, 5), ("Equalize", 1.0, 2)),
    (("Rotate", 0.2, 3), ("Solarize", 0.6, 8)),
    (("Equalize", 0.6, 8), ("PosterizeOriginal", 0.4, 6)),
    (("Rotate", 0.8, 8), ("Color", 0.4, 0)),
    (("Rotate", 0.4, 9), ("Equalize", 0.6, 2)),
    (("Equalize", 0.0, 7), ("Equalize", 0.8, 8)),
    (("Invert", 0.6, 4), ("Equalize", 1.0, 8)),
    (("Color", 0.6, 4), ("Contrast", 1.0, 8)),
    (("Rotate", 0.8, 8), ("Color", 1.0, 2)),
    (("Color", 0.8, 8), ("Solarize", 0.8, 7)),
    (("Sharpness", 0.4, 7), ("Invert", 0.6, 8)),
    (("ShearX", 0.6, 5), ("Equalize", 1.0, 9)),
    (("Color", 0.4, 0), ("Equalize", 0.6, 3)),
    (("Equalize", 0.4, 7), ("Solarize", 0.2, 4)),
    (("Solarize", 0.6, 5), ("AutoContrast", 0.6, 5)),
    (("Invert", 0.6, 4), ("Equalize", 1.0, 8)),
    (("Color", 0.6, 4), ("Contrast", 1.0, 8)),
    (("Equalize", 0.8, 8), ("Equalize", 0.6, 3)),
)
# TrivialAugmentWide's space (torchvision's order): op -> (the argument at each of 31 bins,
# signed); the argument of bin k is the k-th of these.
_BINS = 31
_WIDE: dict[str, tuple[Callable[[], Tensor] | None, bool]] = {
    "Identity": (None, False),
    "ShearX": (lambda: torch.linspace(0.0, 0.99, _BINS), True),
    "ShearY": (lambda: torch.linspace(0.0, 0.99, _BINS), True),
    "TranslateX": (lambda: torch.linspace(0.0, 32.0, _BINS), True),
    "TranslateY": (lambda: torch.linspace(0.0, 32.0, _BINS), True),
    "Rotate": (lambda: torch.linspace(0.0, 135.0, _BINS), True),
    **{  # the factor is 1 + this (signed)
        op: (lambda: torch.linspace(0.0, 0.99, _BINS), True)
        for op in ("Brightness", "Color", "Contrast", "Sharpness")
    },
    "Posterize": (lambda: (8 - torch.arange(_BINS) / ((_BINS - 1) / 6)).round(), False),
    "Solarize": (lambda: 255 * torch.linspace(1.0, 0.0, _BINS), False),
    "AutoContrast": (None, False),
    "Equalize": (None, False),
}


_ENHANCE = {  # PIL's ImageEnhance as torchvision's functional ops
    "Color": "adjust_saturation",
    "Contrast": "adjust_contrast",
    "Brightness": "adjust_brightness",
    "Sharpness": "adjust_sharpness",
}


def auto_augment(image: Tensor, policy: AutoAugment, *, generator: torch.Generator) -> Tensor:
    """uint8 ``image`` (C, H, W) augmented by ``policy``, every choice drawn from ``generator``."""
    return apply(image, plan(policy, generator))


def sample_magnitude(m: float, std: float, mmax: float, g: torch.Generator) -> float:
    """One op's magnitude, as timm draws it: N(m, std) (uniform on [0, m] for an infinite std),
    clipped to [0, mmax]."""
    if math.isinf(std):
        m = m * float(torch.rand((), generator=g))
    elif std > 0:
        m = m + std * float(torch.randn((), generator=g))
    return min(max(m, 0.0), mmax)


def _uniform(g: torch.Generator) -> float:
    return float(torch.rand((), generator=g))


def _choice(n: int, g: torch.Generator) -> int:
    return int(torch.randint(n, (), generator=g))


def _timm_step(
    op: str, prob: float, magnitude: float, policy: AutoAugment, g: torch.Generator
) -> Step | None:
    """timm's ``AugmentOp``: applied with ``prob`` (None when not), then its magnitude noised
    with the policy's ``mstd``, then its sign (for a signed op)."""
    if prob < 1 and _uniform(g) > prob:
        return None
    if policy.magnitude_std > 0:
        magnitude = sample_magnitude(magnitude, policy.magnitude_std, policy.magnitude_max, g)
    rule, signed = _LEVELS[op]
    sign = (-1 if _uniform(g) > 0.5 else 1) if signed else 1
    return Step(op, float(magnitude), rule(magnitude / 10, sign))


def plan(policy: AutoAugment, g: torch.Generator) -> list[Step]:
    """The ops ``policy`` applies to one image, in order, drawn from ``g``."""
    if policy.policy == "rand":  # n ops drawn with replacement, then each applied with p
        ops = [
            f"{op}Increasing" if policy.increasing and op in _INCREASING else op for op in _RAND_OPS
        ]
        chosen = [ops[_choice(len(ops), g)] for _ in range(policy.num_ops)]
        steps = [_timm_step(op, policy.prob, policy.magnitude, policy, g) for op in chosen]
    elif policy.policy == "original":  # one sub-policy, each of its ops with its probability
        sub_policy = IMAGENET_POLICY[_choice(len(IMAGENET_POLICY), g)]
        steps = [_timm_step(op, p, m, policy, g) for op, p, m in sub_policy]
    else:  # trivial: one op, one magnitude bin, a sign
        op = list(_WIDE)[_choice(len(_WIDE), g)]
        args, signed = _WIDE[op]
        if args is None:
            return [Step(op, 0.0, None)]
        k = _choice(_BINS, g)
        sign = (-1 if _choice(2, g) else 1) if signed else 1
        arg = sign * float(args()[k]) + (1.0 if op in _ENHANCE else 0.0)
        return [Step(op, k / (_BINS - 1), arg)]
    return [step for step in steps if step is not None]


def apply(image: Tensor, steps: list[Step]) -> Tensor:
    """uint8 ``image`` (C, H, W) with ``steps`` applied in order (torchvision's tensor ops)."""
    from torchvision.transforms.v2 import InterpolationMode  # lazily: seconds of import
    from torchvision.transforms.v2 import functional as F

    # the enum, not its name: an older torchvision (the GPU machine's, beside torch 2.11)
    # rejects the string
    bilinear = InterpolationMode.BILINEAR

    def affine(x: Tensor, **how: list[float]) -> Tensor:
        how = {"translate": [0.0, 0.0], "shear": [0.0, 0.0], **how}
        return F.affine(x, angle=0.0, scale=1.0, interpolation=bilinear, fill=[_FILL], **how)

    H, W = image.shape[-2:]
    for step in steps:
        op = step.op.removesuffix("Increasing").removesuffix("Original")
        if step.arg is None:  # AutoContrast, Equalize, Invert, Identity
            image = image if op == "Identity" else getattr(F, op.lower())(image)
            continue
        a = step.arg
        if op == "Rotate":
            image = F.rotate(image, a, interpolation=bilinear, fill=[_FILL])
        elif op == "Posterize":
            image = F.posterize(image, min(max(int(a), 0), 8))
        elif op == "Solarize":  # a threshold of 256 inverts nothing
            image = image if a >= 256 else F.solarize(image, a)
        elif op == "SolarizeAdd":  # timm's: add to the pixels below 128, saturating
            brighter = (image.int() + int(a)).clamp_(max=255).to(torch.uint8)
            image = torch.where(image < 128, brighter, image)
        elif op in _ENHANCE:
            image = getattr(F, _ENHANCE[op])(image, a)
        elif op in ("ShearX", "ShearY"):  # about the top-left corner, as PIL's affine
            shear = math.degrees(math.atan(a))
            sheared = [shear, 0.0] if op == "ShearX" else [0.0, shear]
            image = affine(image, shear=sheared, center=[0.0, 0.0])
        elif op in ("TranslateX", "TranslateY", "TranslateXRel", "TranslateYRel"):
            pixels = a * (W if "X" in op else H) if op.endswith("Rel") else int(a)
            image = affine(image, translate=[pixels, 0.0] if "X" in op else [0.0, pixels])
        else:
            raise AssertionError(f"no op {step.op}")
    return image
