"""Presets: official parameter counts to the unit, formula counts for the rest, names and aliases."""

from __future__ import annotations

import dataclasses
import re

import pytest
import torch

import vitkit
from vitkit.config import ConfigError, ModelConfig
from vitkit.model import VisionTransformer
from vitkit.model.flops import count_flops
from vitkit.presets import ALIASES, PRESETS, get_config, list_models

# The official counts (vit_jax, num_classes=1000, 224x224, no pre-logits) [DESIGN.md].
GOLDEN = {
    "ViT-Ti/16": 5_717_416,
    "ViT-S/16": 22_050_664,
    "ViT-S/32": 22_878_952,
    "ViT-B/32": 88_224_232,
    "ViT-B/16": 86_567_656,
    "ViT-B/8": 86_576_872,
    "ViT-L/16": 304_326_632,
    "ViT-L/32": 306_535_400,
    "ViT-H/14": 632_045_800,
    "R+ViT-Ti/16": 6_337_704,
    "R26+ViT-S/32": 36_431_912,
    "R26+ViT-B/32": 101_383_976,
    "R50+ViT-B/16": 98_659_112,
    "R50+ViT-L/32": 328_994_856,
    "ViT-S/16-gap-norep": 22_049_896,
    "ViT-S/32-gap-norep": 22_878_184,
    "ViT-B/16-gap-norep": 86_566_120,
    "ViT-B/32-gap-norep": 88_222_696,
}
# Presets without an official count are checked by the formula below; these are the families it
# covers. A new preset that is in neither GOLDEN nor a family fails test_every_preset_is_counted.
FORMULA_FAMILIES = [
    r"ViT-(mu|Ti|S|M|B|L|H)/\d+(-384)?",
    r"R(26|50)?\+ViT-(Ti|S|B|L)/\d+(-384)?",
]


def formula_count(cfg: ModelConfig) -> int:
    """Parameter count written out from the paper's equations, independent of the model code."""
    D, M, L, K, C = cfg.hidden_size, cfg.mlp_dim, cfg.num_layers, cfg.num_classes, cfg.in_chans
    n = 0
    cin = C
    if cfg.resnet is not None:
        w = int(64 * cfg.resnet.width_factor)  # vit_jax's root width
        n += 49 * C * w + 2 * w  # root conv (no bias) + GroupNorm
        cin = w
        for stage, units in enumerate(cfg.resnet.num_layers):
            width = w * 2**stage
            for u in range(units):
                n += cin * width + 9 * width * width + width * 4 * width  # three convs
                n += 2 * width + 2 * width + 2 * 4 * width  # three GroupNorms
                if u == 0 and (cin != 4 * width or stage > 0):
                    n += cin * 4 * width + 2 * 4 * width  # projection conv + GN
                cin = 4 * width
    P = cfg.patch_size
    N = cfg.grid_size**2
    n += cin * P * P * D + D  # patch embedding E
    n += D if cfg.classifier == "token" else 0  # x_class
    n += (N + cfg.num_prefix_tokens) * D if cfg.posemb == "learn" else 0  # E_pos
    per_layer = 2 * 2 * D + (D * 3 * D + 3 * D) + (D * D + D) + (D * M + M) + (M * D + D)
    n += L * per_layer + 2 * D  # encoder + final LayerNorm
    if cfg.classifier == "map":  # probe, q, k/v, out, LayerNorm, MLP
        n += D + (D * D + D) + (D * 2 * D + 2 * D) + (D * D + D) + 2 * D + (D * M + M) + (M * D + D)
    R = cfg.representation_size
    if R:
        n += D * R + R
    if K:
        n += (R or D) * K + K
    return n


def meta_count(cfg: ModelConfig) -> int:
    with torch.device("meta"):
        return VisionTransformer(cfg).num_params()


@pytest.mark.parametrize("name", list(GOLDEN))
def test_official_parameter_counts(name: str) -> None:
    assert meta_count(get_config(name)) == GOLDEN[name]


@pytest.mark.parametrize("name", list(GOLDEN))
def test_formula_reproduces_official_counts(name: str) -> None:
    # The formula is itself checked against the official numbers before it checks anything else.
    assert formula_count(get_config(name)) == GOLDEN[name]


def test_every_preset_is_counted() -> None:
    uncovered = [
        n
        for n in list_models()
        if n not in GOLDEN and not any(re.fullmatch(f, n) for f in FORMULA_FAMILIES)
    ]
    assert not uncovered, f"presets without a golden or formula count: {uncovered}"


@pytest.mark.parametrize("name", [n for n in list_models() if n not in GOLDEN])
def test_formula_counts(name: str) -> None:
    cfg = get_config(name)
    assert meta_count(cfg) == formula_count(cfg)


def test_formula_counts_map_head() -> None:
    cfg = dataclasses.replace(get_config("ViT-B/16"), classifier="map")
    assert meta_count(cfg) == formula_count(cfg)


@pytest.mark.parametrize("width_factor", [0.5, 1.5, 2])
def test_formula_counts_any_resnet_width(width_factor: float) -> None:
    cfg = dataclasses.replace(
        get_config("R26+ViT-S/32"),
        resnet=vitkit.ResNetConfig(num_layers=(2, 2, 2, 2), width_factor=width_factor),
    )
    assert meta_count(cfg) == formula_count(cfg)


def test_any_size_patch_pair_by_name() -> None:
    cfg = get_config("ViT-H/16")
    assert (cfg.hidden_size, cfg.num_layers, cfg.num_heads, cfg.patch_size) == (1280, 32, 16, 16)
    assert get_config("ViT-S/8-gap").classifier == "gap"
    assert get_config("ViT-B_16") == get_config("ViT-B/16")  # vit_jax spelling


def test_aliases() -> None:
    assert get_config("vit_base_patch16_224") == get_config("ViT-B/16")
    assert get_config("vit_b16") == get_config("ViT-B/16")
    assert get_config("r50_vit_b16") == get_config("R50+ViT-B/16")
    assert get_config("vit_base_r50_s16_384").image_size == 384
    assert all(target in PRESETS for target in ALIASES.values())


def test_hybrid_grids() -> None:
    # R+ViT-Ti/16 max-pools before its 8x8 patches: a 7x7 grid at 224 despite the name.
    assert get_config("R+ViT-Ti/16").grid_size == 7
    assert get_config("R50+ViT-B/16").grid_size == 14
    assert get_config("R50+ViT-L/32").grid_size == 7


def test_unknown_name_suggests_closest() -> None:
    with pytest.raises(ConfigError, match="did you mean 'vit_base_patch16_224'"):
        get_config("vit_base_patch16_244")


def test_list_models_glob() -> None:
    assert set(list_models("ViT-B/*")) >= {"ViT-B/16", "ViT-B/32", "ViT-B/8"}
    assert "ViT-B/16" not in list_models("R*")


def test_list_models_matches_aliases_once_each_in_registry_order() -> None:
    base = list_models("vit_base*")  # timm's names: the pure models, then the hybrids
    assert base == [
        "ViT-B/8",
        "ViT-B/8-384",
        "ViT-B/14",
        "ViT-B/16",
        "ViT-B/16-384",
        "ViT-B/32",
        "ViT-B/32-384",
        "R26+ViT-B/32",
        "R26+ViT-B/32-384",
        "R50+ViT-B/16",
        "R50+ViT-B/16-384",
    ]
    # ViT-B/16 matches by its name and by both aliases, and is listed once
    assert list_models("*[Bb]*16*").count("ViT-B/16") == 1
    assert list_models("vit_b16_gap") == ["ViT-B/16-gap-norep"]
    assert list_models("ViT-B/16") == ["ViT-B/16"]


def test_flops_match_torch_flop_counter() -> None:
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    for cfg in (
        ModelConfig(
            image_size=32,
            patch_size=8,
            hidden_size=64,
            num_layers=2,
            num_heads=4,
            mlp_dim=96,
            num_classes=5,
        ),
        ModelConfig(
            image_size=64,
            patch_size=2,
            hidden_size=64,
            num_layers=1,
            num_heads=2,
            mlp_dim=64,
            num_classes=3,
            classifier="gap",
            representation_size=32,
            resnet=vitkit.ResNetConfig(num_layers=(1, 1)),
        ),
        ModelConfig(
            image_size=32,
            patch_size=1,
            hidden_size=32,
            num_layers=1,
            num_heads=2,
            mlp_dim=64,
            num_classes=3,
            resnet=vitkit.ResNetConfig(num_layers=(1, 1), width_factor=0.5),
        ),
        ModelConfig(
            image_size=32,
            patch_size=8,
            hidden_size=64,
            num_layers=2,
            num_heads=4,
            mlp_dim=96,
            num_classes=5,
            classifier="map",
        ),
        ModelConfig(  # non-square: a 2x5 grid
            image_size=(16, 40),
            patch_size=8,
            hidden_size=64,
            num_layers=1,
            num_heads=4,
            mlp_dim=96,
            num_classes=5,
        ),
        ModelConfig(  # non-square hybrid: the backbone's height and width halve separately
            image_size=(32, 48),
            patch_size=1,
            hidden_size=32,
            num_layers=1,
            num_heads=2,
            mlp_dim=64,
            num_classes=3,
            resnet=vitkit.ResNetConfig(num_layers=(1, 1), width_factor=0.5),
        ),
    ):
        model = VisionTransformer(cfg).eval()
        counter = FlopCounterMode(display=False)
        # The explicit attention path, and SDPA's math backend for the MAP head's attention: the
        # counter sees their matmuls (it has no count for the fused CPU kernel).
        with counter, torch.no_grad(), sdpa_kernel(SDPBackend.MATH):
            model.intermediates(torch.randn(1, 3, *cfg.image_hw), attention=True)
        assert count_flops(cfg) == counter.get_total_flops()


def test_flop_count_of_the_resnet_baseline_matches_torchs_counter() -> None:
    """``arch='resnet'``: the backbone and its linear head on the pooled features, no
    transformer (the count sizes the work for ``auto`` precision)."""
    from torch.utils.flop_counter import FlopCounterMode

    from vitkit.model import build_model

    cfg = ModelConfig(
        image_size=32,
        patch_size=1,
        hidden_size=32,
        num_layers=1,
        num_heads=2,
        mlp_dim=64,
        num_classes=3,
        resnet=vitkit.ResNetConfig(num_layers=(1, 1), width_factor=0.5),
        arch="resnet",
    )
    model = build_model(cfg).eval()
    counter = FlopCounterMode(display=False)
    with counter, torch.no_grad():
        model(torch.randn(1, 3, 32, 32))
    assert count_flops(cfg) == counter.get_total_flops()


def test_vit_b16_gflops() -> None:
    assert round(count_flops(get_config("ViT-B/16")) / 1e9, 1) == 35.1


def test_flops_of_a_non_square_grid_count_its_tokens() -> None:
    # A plain ViT's cost depends on the image only through its token count: a 2x8 grid costs
    # what a 4x4 grid does; an (H, W) given to count_flops counts as that config's image_size.
    square = ModelConfig(
        image_size=32, patch_size=8, hidden_size=64, num_layers=2, num_heads=4, mlp_dim=96
    )
    wide = dataclasses.replace(square, image_size=(16, 64))
    assert wide.grid == (2, 8) and count_flops(wide) == count_flops(square)
    assert count_flops(square, (16, 64)) == count_flops(wide)
    tall = dataclasses.replace(square, image_size=(64, 24))  # 8x3 = 24 tokens, 25 with the class
    t, D, M, L = 25, 64, 96, 2
    per_block = t * D * 3 * D + 2 * t * t * D + t * D * D + 2 * t * D * M
    macs = 24 * 8 * 8 * 3 * D + L * per_block + D * 1000
    assert count_flops(tall) == 2 * macs
