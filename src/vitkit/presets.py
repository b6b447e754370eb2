"""Registered model presets: the paper's Table 1 sizes x patch sizes, the official code's variants
(Ti, S, M, -gap-norep) and hybrids, with timm's names as aliases.

Naming follows the paper: ``ViT-B/16`` is the Base model with 16x16 patches; ``R50+ViT-B/16`` is
the hybrid whose total downsampling is 16 [P §4.1]. Any size/patch pair can be built by name
(``ViT-H/16``, ``ViT-S/8``), with ``_`` accepted for ``/`` (``ViT-B_16``, as vit_jax spells it).
No torch import here.
"""

from __future__ import annotations

import dataclasses
import difflib
import fnmatch
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from .config import ConfigError, ModelConfig, ResNetConfig


@dataclass(frozen=True)
class Size:
    hidden_size: int
    num_layers: int
    num_heads: int
    mlp_dim: int


# Written once [P Table 1; vit_jax configs/models.py; big_vision decode_variant].
SIZES: dict[str, Size] = {
    "mu": Size(32, 1, 2, 128),  # the official code's tiny test size
    "Ti": Size(192, 12, 3, 768),
    "S": Size(384, 12, 6, 1536),
    "M": Size(512, 12, 8, 2048),
    "B": Size(768, 12, 12, 3072),
    "L": Size(1024, 24, 16, 4096),
    "H": Size(1280, 32, 16, 5120),
}
SIZE_WORDS = {
    "mu": "mu",
    "Ti": "tiny",
    "S": "small",
    "M": "medium",
    "B": "base",
    "L": "large",
    "H": "huge",
}
PATCHES = (8, 14, 16, 32)

# Hybrids: (size, total stride) -> ResNet units per stage and the patch size on its feature map.
HYBRIDS: dict[str, tuple[str, ResNetConfig, int]] = {
    "R+ViT-Ti/16": ("Ti", ResNetConfig(num_layers=()), 8),
    "R26+ViT-S/32": ("S", ResNetConfig(num_layers=(2, 2, 2, 2)), 1),
    "R26+ViT-B/32": ("B", ResNetConfig(num_layers=(2, 2, 2, 2)), 1),
    "R50+ViT-B/16": ("B", ResNetConfig(num_layers=(3, 4, 9)), 1),
    "R50+ViT-B/32": ("B", ResNetConfig(num_layers=(3, 4, 6, 3)), 1),
    "R50+ViT-L/16": ("L", ResNetConfig(num_layers=(3, 4, 9)), 1),
    "R50+ViT-L/32": ("L", ResNetConfig(num_layers=(3, 4, 6, 3)), 1),
}
# timm's hybrid names for the same models.
TIMM_HYBRIDS = {
    "R+ViT-Ti/16": "vit_tiny_r_s16_p8",
    "R26+ViT-S/32": "vit_small_r26_s32",
    "R26+ViT-B/32": "vit_base_r26_s32",
    "R50+ViT-B/16": "vit_base_r50_s16",
    "R50+ViT-L/32": "vit_large_r50_s32",
}

_PURE = re.compile(r"^ViT-(mu|Ti|S|M|B|L|H)[/_](\d+)(-gap)?(-norep)?$")


@dataclass(frozen=True)
class Preset:
    name: str
    build: Callable[[], ModelConfig]
    aliases: tuple[str, ...] = ()


def _pure(size: str, patch: int, *, gap: bool = False, image_size: int = 224) -> ModelConfig:
    s = SIZES[size]
    return ModelConfig(
        image_size=image_size,
        patch_size=patch,
        hidden_size=s.hidden_size,
        num_layers=s.num_layers,
        num_heads=s.num_heads,
        mlp_dim=s.mlp_dim,
        classifier="gap" if gap else "token",
    )


def _hybrid(name: str, image_size: int = 224) -> ModelConfig:
    size, resnet, patch = HYBRIDS[name]
    return dataclasses.replace(_pure(size, patch, image_size=image_size), resnet=resnet)


def _registry() -> dict[str, Preset]:
    reg: dict[str, Preset] = {}

    def add(name: str, build: Callable[[], ModelConfig], aliases: tuple[str, ...] = ()) -> None:
        reg[name] = Preset(name, build, aliases)

    for size in SIZES:
        if size == "mu":
            continue
        for patch in PATCHES:
            word = SIZE_WORDS[size]
            short = f"vit_{size.lower()}{patch}"
            timm = f"vit_{word}_patch{patch}_224"
            add(f"ViT-{size}/{patch}", partial(_pure, size, patch), (short, timm))
            if 384 % patch:
                continue  # /14 models fine-tune at 518 instead [P Table 2]; build with image_size=
            add(
                f"ViT-{size}/{patch}-384",
                partial(_pure, size, patch, image_size=384),
                (f"{short}_384", f"vit_{word}_patch{patch}_384"),
            )
    for size, patch in (("S", 16), ("S", 32), ("B", 16), ("B", 32)):
        add(
            f"ViT-{size}/{patch}-gap-norep",
            partial(_pure, size, patch, gap=True),
            (f"vit_{size.lower()}{patch}_gap",),
        )
    add("ViT-mu/16", lambda: _pure("mu", 16), ("vit_mu16",))
    for name in HYBRIDS:
        short = name.lower().replace("+vit-", "_vit_").replace("/", "")  # r50_vit_b16
        timm_name = TIMM_HYBRIDS.get(name)
        add(name, partial(_hybrid, name), (short, f"{timm_name}_224") if timm_name else (short,))
        if timm_name:
            add(f"{name}-384", partial(_hybrid, name, 384), (f"{short}_384", f"{timm_name}_384"))
    return reg


PRESETS: dict[str, Preset] = _registry()
ALIASES: dict[str, str] = {a: p.name for p in PRESETS.values() for a in p.aliases}


def list_models(pattern: str = "*") -> list[str]:
    """Canonical names of the registered presets whose name or any alias matches the glob
    ``pattern`` (case-sensitive), each once, in registry order: ``list_models("vit_base*")`` is
    ``["ViT-B/8", "ViT-B/8-384", ...]``, found through timm's aliases."""
    return [
        name
        for name, preset in PRESETS.items()
        if any(fnmatch.fnmatchcase(n, pattern) for n in (name, *preset.aliases))
    ]


def resolve_name(name: str) -> str:
    """Canonical preset name for a name or alias (``vit_base_patch16_224`` -> ``ViT-B/16``)."""
    if name in PRESETS:
        return name
    if name in ALIASES:
        return ALIASES[name]
    slashed = name.replace("_", "/", 1) if name.startswith(("ViT-", "R")) else name
    if slashed in PRESETS:
        return slashed
    if _PURE.match(name):
        return slashed
    options = list(PRESETS) + list(ALIASES)
    match = difflib.get_close_matches(name, options, n=1, cutoff=0.6)
    hint = f" (did you mean {match[0]!r}?)" if match else ""
    raise ConfigError(
        f"unknown model {name!r}{hint}; `vitkit presets` lists them all, and any "
        "'ViT-<mu|Ti|S|M|B|L|H>/<patch>' can be built by name"
    )


def get_config(name: str) -> ModelConfig:
    """The ``ModelConfig`` of a preset, alias, or any ``ViT-<size>/<patch>[-gap]`` name."""
    canonical = resolve_name(name)
    if canonical in PRESETS:
        return PRESETS[canonical].build()
    m = _PURE.match(canonical)
    assert m is not None  # resolve_name only returns registered or pattern-matching names
    return _pure(m.group(1), int(m.group(2)), gap=bool(m.group(3)))
