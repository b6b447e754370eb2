"""RandAugment with magnitude noise, AutoAugment and TrivialAugment on uint8 images (C, H, W).

Every draw comes from the caller's ``torch.Generator`` (the loader's per-sample or per-batch
one), so an image depends only on (seed, epoch, index) and a resumed run repeats exactly. A
policy (``config.augment.AutoAugment``, from ``data.auto_augment``) draws a plan of ``Step``s
(``plan``), then ``apply`` applies it; ``apply_each`` applies a batch's plans an op at a time
over the images that take it (benchmarks/RESULTS.md, "The toolbox's augmentation a batch at a
time"), pixel for pixel what torchvision's functional ops give each image alone on the same CPU
(one exception: torchvision's contrast blend rounds the last few values of some image sizes,
e.g. 3x11x13, without the fused multiply-add it uses for the rest, so there a value can differ
by one level; no size of 28, 32 or 224 px does). ``rand`` [Cubuk et al. 2020] and ``original``
(the ImageNet policy of Cubuk et al. 2019) are timm's (timm/data/auto_augment.py): its op lists
(``inc``), level-to-argument rules, p 0.5 per RandAugment op, ops drawn with replacement,
magnitudes N(m, mstd) clipped to [0, mmax], a random sign per signed op. ``trivial`` is
torchvision's TrivialAugmentWide [Müller & Hutter 2021]: one op of 14, one of 31 magnitude bins.
Differences: torchvision's tensor arithmetic (``v2.functional``) instead of PIL's (the enhance
ops round differently; shear about the top-left corner, as both); bilinear always (timm draws
bilinear or bicubic, torchvision's TrivialAugment is nearest); grey fill 128 (timm's for mean
0.5; torchvision's is black); posterize bits clipped to [0, 8] (timm's go negative for mmax > 10).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple, cast

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


# PIL's ImageEnhance ops: a blend with a degenerate image by a factor (the argument)
_ENHANCE = ("Color", "Contrast", "Brightness", "Sharpness")


def auto_augment(image: Tensor, policy: AutoAugment, *, generator: torch.Generator) -> Tensor:
    """uint8 ``image`` (C, H, W) augmented by ``policy``, every choice drawn from ``generator``."""
    return apply(image, plan(policy, generator))


def auto_augment_each(images: Tensor, policy: AutoAugment, *, generator: torch.Generator) -> Tensor:
    """uint8 ``images`` (B, C, H, W), each augmented by its own plan, the plans drawn from
    ``generator`` image after image: what ``auto_augment`` of each in turn gives, computed a
    group of images at a time (``apply_each``)."""
    return apply_each(images, [plan(policy, generator) for _ in range(len(images))])


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
    """uint8 ``image`` (C, H, W) with ``steps`` applied in order."""
    return apply_each(image[None], [steps])[0]


def apply_each(images: Tensor, plans: Sequence[list[Step]]) -> Tensor:
    """uint8 ``images`` (B, C, H, W), image i with ``plans[i]`` applied in order.

    The images whose k-th step is the same op are transformed together, each with its own
    argument (the geometric ops as one: each image its own affine matrix), so a batch costs a
    few dozen tensor ops rather than two per image. Every op treats each image alone: an image
    comes out the same whatever else is in its batch (``apply`` is this on a batch of one)."""
    if len(plans) != len(images):
        raise ValueError(f"{len(plans)} plans for {len(images)} images")
    if images.device.type != "cpu":  # the loader's: its per-image arguments are made on the CPU
        raise ValueError(f"auto_augment takes images on the CPU; found them on {images.device}")
    if images.numel() == 0:  # no pixels to move
        return images.clone()
    out, owned = images, False  # ``out`` is written in place only once it is a copy
    chunk = max(1, _CHUNK_VALUES // max(1, images[0].numel())) if len(images) else 1
    for k in range(max((len(steps) for steps in plans), default=0)):
        groups: dict[str, list[tuple[int, Step]]] = {}
        for i, steps in enumerate(plans):
            name = _name(steps[k].op) if k < len(steps) else "Identity"
            if name != "Identity":
                kind = "affine" if name in _GEOMETRIC else name
                groups.setdefault(kind, []).append((i, steps[k]))
        for kind, members in groups.items():
            if len(members) == len(out) <= chunk:  # every image: no gather, no scatter
                out, owned = _OPS[kind](out, [step for _, step in members]), False
                continue
            if not owned:
                out, owned = out.clone(), True
            for start in range(0, len(members), chunk):
                part = members[start : start + chunk]
                index = torch.tensor([i for i, _ in part])
                done = _OPS[kind](out.index_select(0, index), [step for _, step in part])
                for j, (i, _) in enumerate(part):  # a row's copy: index_copy_ is 20x slower
                    out[i].copy_(done[j])
    return out


# Images an op takes at once: about 64K pixel values (256 KiB as float32), so that an op's
# passes over its float copy stay in a core's cache. 21 images of 3x32x32 share a call; a
# 224-px image is one (a batch of 64 at 224 px was 0.8x one image at a time in one call).
_CHUNK_VALUES = 1 << 16


def _name(op: str) -> str:
    """An op's name without timm's variants: the argument already says the direction."""
    return op.removesuffix("Increasing").removesuffix("Original")


def _per_image(values: Sequence[float], dtype: torch.dtype = torch.float32) -> Tensor:
    """One value per image, shaped to broadcast over (n, C, H, W): (n, 1, 1, 1)."""
    return torch.tensor(values, dtype=dtype).view(-1, 1, 1, 1)


def _args(steps: Sequence[Step]) -> list[float]:
    return [float(cast(float, step.arg)) for step in steps]


# The geometric ops, as torchvision's affine and rotate compute them: an inverse affine matrix in
# pixel coordinates about the image's centre, a bilinear grid sample, grey fill blended by a
# mask channel, rounded.
_GEOMETRIC = ("Rotate", "ShearX", "ShearY", "TranslateX", "TranslateY", "TranslateXRel", "TranslateYRel")  # fmt: skip


def _inverse_affine(
    centre: tuple[float, float],
    angle: float,
    translate: tuple[float, float],
    shear: tuple[float, float],
) -> list[float]:
    """torchvision's inverse affine matrix (row-major 2x3, scale 1) of a rotation by ``angle``
    degrees and shears in degrees about ``centre``, then a translation (pixels)."""
    rot, sx, sy = math.radians(angle), math.radians(shear[0]), math.radians(shear[1])
    (cx, cy), (tx, ty) = centre, translate
    a = math.cos(rot - sy) / math.cos(sy)
    b = -(a * math.tan(sx) + math.sin(rot))
    c = math.sin(rot - sy) / math.cos(sy)
    d = math.cos(rot) - c * math.tan(sx)
    m = [d, -b, 0.0, -c, a, 0.0]  # det [[a, b], [c, d]] = 1
    m[2] += cx - m[0] * (cx + tx) - m[1] * (cy + ty)
    m[5] += cy - m[3] * (cx + tx) - m[4] * (cy + ty)
    return m


def _matrix(step: Step, height: int, width: int) -> list[float] | None:
    """The inverse affine matrix of a geometric ``step`` on an image of this size (None: the
    identity, a turn by a whole 360 degrees)."""
    op, a = _name(step.op), float(cast(float, step.arg))
    if op == "Rotate":  # torchvision's rotate turns by -angle in affine's convention
        return None if a % 360 == 0 else _inverse_affine((0.0, 0.0), -a, (0.0, 0.0), (0.0, 0.0))
    if op in ("ShearX", "ShearY"):  # about the top-left corner, as PIL's affine
        shear = math.degrees(math.atan(a))
        sheared = (shear, 0.0) if op == "ShearX" else (0.0, shear)
        return _inverse_affine((-0.5 * width, -0.5 * height), 0.0, (0.0, 0.0), sheared)
    pixels = a * (width if "X" in op else height) if op.endswith("Rel") else float(int(a))
    moved = (pixels, 0.0) if "X" in op else (0.0, pixels)
    return _inverse_affine((0.0, 0.0), 0.0, moved, (0.0, 0.0))


def _affine(x: Tensor, steps: Sequence[Step]) -> Tensor:
    """uint8 ``x`` (n, C, H, W), image i moved by ``steps[i]``'s matrix."""
    C, H, W = x.shape[-3:]
    matrices = [_matrix(step, H, W) for step in steps]
    moved = [i for i, m in enumerate(matrices) if m is not None]
    if not moved:
        return x
    theta = torch.tensor([matrices[i] for i in moved], dtype=torch.float32).view(-1, 2, 3)
    theta = theta.transpose(1, 2) / torch.tensor([0.5 * W, 0.5 * H])  # (m, 3, 2)
    base = torch.empty(H, W, 3)  # pixel centres about the image's centre, and 1
    base[..., 0] = torch.linspace((1.0 - W) * 0.5, (W - 1.0) * 0.5, W)
    base[..., 1] = torch.linspace((1.0 - H) * 0.5, (H - 1.0) * 0.5, H)[:, None]
    base[..., 2] = 1.0
    grid = base.view(1, H * W, 3).expand(len(theta), -1, -1).bmm(theta)  # (m, H*W, 2)
    pixels = (x if len(moved) == len(x) else x[moved]).float()  # (m, C, H, W), and a mask
    pixels = torch.cat([pixels, torch.ones(len(moved), 1, H, W)], dim=1)
    sampled = torch.nn.functional.grid_sample(
        pixels, grid.view(-1, H, W, 2), mode="bilinear", padding_mode="zeros", align_corners=False
    )
    sampled, mask = sampled[:, :C], sampled[:, C:]
    filled = sampled.sub_(_FILL).mul_(mask).add_(_FILL).round_().to(torch.uint8)
    if len(moved) == len(x):
        return filled
    out = x.clone()
    out[moved] = filled
    return out


def _grey(x: Tensor) -> Tensor:
    """Luma of uint8 ``x`` (n, 3, H, W), floored (n, 1, H, W) float: torchvision's weights."""
    r, g, b = x.unbind(dim=-3)
    return r.mul(0.2989).add_(g, alpha=0.587).add_(b, alpha=0.114).unsqueeze_(-3).floor_()


def _fused(x: Tensor, y: Tensor, alpha: Tensor) -> Tensor:
    """float32 ``x + alpha * y`` rounded once, as torch's ``x.add_(y, alpha=a)`` computes it on
    a CPU (a fused multiply-add), with a float32 ``alpha`` per image."""
    return torch.addcmul(x, y, alpha)


def _blend(x: Tensor, other: Tensor, ratios: list[float]) -> Tensor:
    """ratio * x + (1 - ratio) * other, clamped to uint8 (truncated), as torchvision's blend:
    both factors rounded to float32 from the exact ratio."""
    weights = _per_image(ratios), _per_image([1.0 - r for r in ratios])
    return _fused(x.mul(weights[0]), other, weights[1]).clamp_(0, 255).to(torch.uint8)


def _brightness(x: Tensor, steps: Sequence[Step]) -> Tensor:
    return x.mul(_per_image(_args(steps))).clamp_(0, 255).to(torch.uint8)


def _color(x: Tensor, steps: Sequence[Step]) -> Tensor:
    if x.shape[-3] == 1:  # as PIL: a grey image has no saturation
        return x
    return _blend(x, _grey(x), _args(steps))


def _contrast(x: Tensor, steps: Sequence[Step]) -> Tensor:
    grey = _grey(x) if x.shape[-3] == 3 else x.float()
    return _blend(x, grey.mean(dim=(-3, -2, -1), keepdim=True), _args(steps))


_SMOOTH = torch.tensor([[1.0, 1.0, 1.0], [1.0, 5.0, 1.0], [1.0, 1.0, 1.0]]) / 13.0  # PIL's


def _sharpness(x: Tensor, steps: Sequence[Step]) -> Tensor:
    """PIL's sharpness: a blend with the image smoothed by ``_SMOOTH``, the border kept."""
    C, H, W = x.shape[-3:]
    if H <= 2 or W <= 2:
        return x
    out = x.float()
    kernel = _SMOOTH.expand(C, 1, 3, 3)
    smooth = torch.nn.functional.conv2d(out, kernel, groups=C).round_()  # (n, C, H-2, W-2)
    inner = out[..., 1:-1, 1:-1]
    alpha = _per_image([1.0 - a for a in _args(steps)])
    inner.copy_(_fused(inner, smooth.sub_(inner), alpha))
    return out.clamp_(0, 255).to(torch.uint8)


def _posterize(x: Tensor, steps: Sequence[Step]) -> Tensor:
    bits = [min(max(int(a), 0), 8) for a in _args(steps)]
    masks = [(0xFF << (8 - b)) & 0xFF for b in bits]  # the top ``b`` bits
    return x & _per_image(masks, torch.uint8)


def _solarize(x: Tensor, steps: Sequence[Step]) -> Tensor:
    """Pixels at or above the threshold inverted (a threshold of 256 inverts nothing)."""
    return torch.where(x >= _per_image(_args(steps)), x.bitwise_not(), x)


def _solarize_add(x: Tensor, steps: Sequence[Step]) -> Tensor:
    """timm's: the argument added to the pixels below 128, saturating."""
    brighter = (x.int() + _per_image(_args(steps), torch.int32)).clamp_(max=255).to(torch.uint8)
    return torch.where(x < 128, brighter, x)


def _torchvision(name: str) -> Callable[[Tensor, Sequence[Step]], Tensor]:
    """An op without an argument, torchvision's (each image of a batch on its own)."""

    def op(x: Tensor, steps: Sequence[Step]) -> Tensor:
        from torchvision.transforms.v2 import functional as F  # lazily: seconds of import

        return getattr(F, name)(x)

    return op


_OPS: dict[str, Callable[[Tensor, Sequence[Step]], Tensor]] = {
    "affine": _affine,
    "Brightness": _brightness,
    "Color": _color,
    "Contrast": _contrast,
    "Sharpness": _sharpness,
    "Posterize": _posterize,
    "Solarize": _solarize,
    "SolarizeAdd": _solarize_add,
    "AutoContrast": _torchvision("autocontrast"),
    "Equalize": _torchvision("equalize"),
    "Invert": lambda x, steps: x.bitwise_not(),
}
