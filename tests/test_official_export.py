"""Writing the official vit_jax ``.npz`` (``vitkit.io.formats.official.write_official``).

A random vitkit model is written and the file is read three ways: by vitkit (the same config and
the same bits, so the same logits), by the re-statement of the official Flax forward in
tests/test_official.py (which knows only the released files' names and Flax conventions), and by
timm's own ``.npz`` loader. Then what the format cannot hold, the exact-GELU note and its size,
and the command line.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import vitkit
from helpers import randomize, tiny
from test_official import BLOCK_NAMES, Spec, assert_logits_close, images_for, reference_logits
from vitkit.cli import main
from vitkit.config import ConfigError, ModelConfig, ResNetConfig
from vitkit.errors import UserFileError
from vitkit.io.checkpoint import read_npz
from vitkit.io.formats.official import GELU_NOTE, to_official, write_official
from vitkit.model import ResNetClassifier, VisionTransformer

# Tiny models with the official numerics (tanh GELU; LayerNorm eps 1e-6 is the default): the two
# classifiers the format holds, with and without pre-logits, a headless one, and hybrids.
VARIANTS: dict[str, dict[str, Any]] = {
    "token": {},
    "gap": dict(classifier="gap"),
    "token-prelogits": dict(representation_size=24),
    "gap-prelogits": dict(classifier="gap", representation_size=24),
    "features": dict(num_classes=0, representation_size=24),
    # R50-style: BiT stages (1, 2) of a 32-channel root, 1x1 patches of its 4x4 map
    "hybrid": dict(
        resnet=ResNetConfig(num_layers=(1, 2), width_factor=0.5),
        patch_size=1,
        num_layers=1,
        representation_size=24,
    ),
    # R+ViT-Ti-style: the root alone, 2x2 patches of its 8x8 map
    "hybrid-root": dict(
        resnet=ResNetConfig(num_layers=(), width_factor=0.5),
        patch_size=2,
        num_layers=1,
        classifier="gap",
    ),
}


def official_model(variant: str, **overrides: Any) -> VisionTransformer:
    """A random model of ``VARIANTS[variant]`` (32 wide, 2 heads, 32x32 images), with
    ``overrides``; weights re-drawn so that logits are O(1) and the head is not zero."""
    cfg = tiny(hidden_size=32, num_heads=2, mlp_dim=64, act="gelu_tanh", **VARIANTS[variant])
    model = randomize(VisionTransformer(dataclasses.replace(cfg, **overrides)))
    assert isinstance(model, VisionTransformer)
    return model


def spec_of(cfg: ModelConfig) -> Spec:
    """The re-statement's description of ``cfg``, in the released files' naming."""
    return Spec(
        layout="released",
        hidden=cfg.hidden_size,
        layers=cfg.num_layers,
        heads=cfg.num_heads,
        mlp=cfg.mlp_dim,
        patch=cfg.patch_size,
        image=cfg.grid_size * cfg.total_stride,
        chans=cfg.in_chans,
        classifier=cfg.classifier,
        rep=cfg.representation_size,
        classes=cfg.num_classes,
        resnet=None if cfg.resnet is None else cfg.resnet.num_layers,
        root_width=64 if cfg.resnet is None else cfg.resnet.width,
    )


def written(model: VisionTransformer, tmp_path: Path) -> Path:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a model with the official numerics gets no note
        return write_official(model, tmp_path / "vit.npz")


def logits(model: torch.nn.Module, images: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model.eval()(images)


# ------------------------------------------------------------------ vitkit -> npz -> vitkit


@pytest.mark.parametrize("variant", VARIANTS)
def test_round_trip_gives_the_same_model_bit_for_bit(variant: str, tmp_path: Path) -> None:
    model = official_model(variant)
    back = vitkit.load(written(model, tmp_path))
    assert back.cfg == model.cfg
    ours, theirs = model.state_dict(), back.state_dict()
    assert theirs.keys() == ours.keys()
    assert all(torch.equal(theirs[k], ours[k]) for k in ours)
    images = images_for(spec_of(model.cfg))
    assert torch.equal(logits(back, images), logits(model, images))


def test_arrays_are_the_released_layout() -> None:
    model = official_model("hybrid", num_layers=2)
    arrays = to_official(model)
    D, H, N = 32, 2, 16
    ln1, mha, ln2, mlp = BLOCK_NAMES["released"]
    assert all(a.dtype == np.float32 for a in arrays.values())
    shapes = {
        "embedding/kernel": (1, 1, 256, D),  # HWIO on the ResNet's 256-channel map
        "cls": (1, 1, D),
        "Transformer/posembed_input/pos_embedding": (1, 1 + N, D),
        f"Transformer/encoderblock_1/{ln1}/scale": (D,),
        f"Transformer/encoderblock_1/{mha}/query/kernel": (D, H, D // H),
        f"Transformer/encoderblock_1/{mha}/value/bias": (H, D // H),
        f"Transformer/encoderblock_1/{mha}/out/kernel": (H, D // H, D),
        f"Transformer/encoderblock_1/{ln2}/bias": (D,),
        f"Transformer/encoderblock_1/{mlp}/Dense_0/kernel": (D, 64),
        "Transformer/encoder_norm/scale": (D,),
        "pre_logits/kernel": (D, 24),
        "head/kernel": (24, 10),
        "conv_root/kernel": (7, 7, 3, 32),
        "gn_root/scale": (32,),
        "block1/unit1/conv_proj/kernel": (1, 1, 32, 128),
        "block2/unit1/gn_proj/bias": (256,),
        "block2/unit2/conv2/kernel": (3, 3, 64, 64),
        "block2/unit2/gn3/scale": (256,),
    }
    assert {k: arrays[k].shape for k in shapes} == shapes
    assert "block2/unit2/conv_proj/kernel" not in arrays  # a projection on first units only
    qkv = model.blocks[1].attn.qkv.weight.detach()  # (3D, D): q, k, v rows
    key = arrays[f"Transformer/encoderblock_1/{mha}/key/kernel"]  # (D, H, Dh)
    assert np.array_equal(key.reshape(D, D).T, qkv[D : 2 * D].numpy())


# ------------------------------------------------------------------ the official forward reads it


@pytest.mark.parametrize("variant", VARIANTS)
def test_file_runs_in_the_official_forward(variant: str, tmp_path: Path) -> None:
    # Tolerance 1e-5 (assert_logits_close): the re-statement runs in float64 and vitkit in
    # float32, whose rounding moves these O(1) logits by 1.6e-7 at most (measured, all variants),
    # while the subtlest layout mistake, one block's query and key kernels swapped, moves them by
    # 5.7e-4 or more (measured).
    model = official_model(variant)
    spec = spec_of(model.cfg)
    images = images_for(spec)
    want = reference_logits(read_npz(written(model, tmp_path)), spec, images)
    assert_logits_close(logits(model, images), want)


# ------------------------------------------------------------------ timm's .npz loader reads it


def timm_peer(cfg: ModelConfig) -> torch.nn.Module:
    """timm's ViT for ``cfg`` with the official numerics; timm has no pre-logits layer, so a model
    with one gets no head (timm's output is then the pooled features)."""
    from timm.layers import GroupNormAct, HybridEmbed, StdConv2dSame
    from timm.models.resnetv2 import ResNetV2, create_resnetv2_stem
    from timm.models.vision_transformer import VisionTransformer as TimmViT

    extra: dict[str, Any] = {}
    if cfg.resnet is not None:  # as timm's vit_*_r*: ResNetV2, post-activation, 'SAME' padding
        width, stages = cfg.resnet.width, cfg.resnet.num_layers
        resnet: dict[str, Any] = dict(
            preact=False,
            stem_type="same",
            conv_layer=functools.partial(StdConv2dSame, eps=1e-8),
            norm_layer=functools.partial(GroupNormAct, num_groups=32, eps=1e-6),
        )
        if stages:
            backbone = ResNetV2(
                layers=list(stages),
                channels=tuple(4 * width * 2**i for i in range(len(stages))),
                stem_chs=width,
                num_classes=0,
                global_pool="",
                in_chans=cfg.in_chans,
                **resnet,
            )
        else:
            backbone = create_resnetv2_stem(cfg.in_chans, width, **resnet)
        extra["embed_layer"] = functools.partial(HybridEmbed, backbone=backbone)
    return TimmViT(
        img_size=cfg.grid_size * cfg.total_stride,
        patch_size=cfg.patch_size,
        in_chans=cfg.in_chans,
        embed_dim=cfg.hidden_size,
        depth=cfg.num_layers,
        num_heads=cfg.num_heads,
        mlp_ratio=cfg.mlp_dim / cfg.hidden_size,
        num_classes=0 if cfg.representation_size else cfg.num_classes,
        act_layer=functools.partial(torch.nn.GELU, approximate="tanh"),
        norm_layer=functools.partial(torch.nn.LayerNorm, eps=1e-6),
        class_token=cfg.classifier == "token",
        global_pool={"token": "token", "gap": "avg"}[cfg.classifier],
        fc_norm=False,
        **extra,
    )


@pytest.mark.parametrize("variant", VARIANTS)
def test_timm_npz_loader_reads_the_file(variant: str, tmp_path: Path) -> None:
    from timm.models.vision_transformer import _load_weights

    model = official_model(variant)
    peer = timm_peer(model.cfg)
    _load_weights(peer, str(written(model, tmp_path)))
    images = images_for(spec_of(model.cfg))
    with torch.no_grad():
        tokens = model.forward_features(images)
        # timm reads everything but pre-logits ("removed" there): compare what comes before it
        want = model.pool(tokens) if model.cfg.representation_size else model.forward_head(tokens)
    got = logits(peer, images)
    if model.cfg.resnet is None:
        assert torch.equal(got, want)  # the same float32 ops
    else:
        # timm standardises conv kernels as (w - mean) / sqrt(var + 1e-8), the official code
        # (and vitkit) as (w - mean) / (std + 1e-5): per output channel a scale 1 - O(1e-5 / std)
        # (std ~ 0.2 here), which the GroupNorm after every conv all but cancels; measured 2e-7.
        assert_logits_close(got, want)


# ------------------------------------------------------------------ exact GELU: written, noted


def first_order_bound(
    model: VisionTransformer, images: torch.Tensor, delta: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """The logits (B, K), and how far each can move, to first order, when every GELU output a_u
    moves by at most ``delta``: delta * sum_u |dlogit/da_u| (B, K)."""
    outputs: list[torch.Tensor] = []
    hooks = [
        b.mlp.act.register_forward_hook(lambda m, i, o: outputs.append(o)) for b in model.blocks
    ]
    logits = model(images)  # (B, K), with the graph to every GELU output (B, T, M)
    for hook in hooks:
        hook.remove()
    columns = []
    for k in range(logits.shape[1]):  # an image's logit depends on its own rows only
        grads = torch.autograd.grad(logits[:, k].sum(), outputs, retain_graph=True)
        columns.append(sum(g.abs().flatten(1).sum(1) for g in grads))  # (B,)
    return logits.detach(), delta * torch.stack(columns, dim=1)


def test_exact_gelu_is_written_with_a_note_and_a_bounded_difference(tmp_path: Path) -> None:
    model = official_model("token", act="gelu")
    with pytest.warns(UserWarning) as record:
        path = write_official(model, tmp_path / "vit.npz")
    assert [str(w.message) for w in record] == [GELU_NOTE]
    assert "\n" not in GELU_NOTE and "tanh" in GELU_NOTE
    back = vitkit.load(path)
    assert back.cfg == dataclasses.replace(model.cfg, act="gelu_tanh")

    # The bound: the two activations differ by at most delta anywhere (max |GELU - GELU_tanh|,
    # 4.7e-4 near |x| = 2.7), so each logit moves, to first order, by at most delta times the sum
    # of |dlogit/da_u| over every GELU output a_u; second-order terms are O(delta^2) ~ 2e-7.
    # Measured: 4.3e-5 on logits up to 0.77, at most 2% of the bound, as the sign of GELU -
    # GELU_tanh varies with x and the terms partly cancel.
    x = torch.linspace(-10, 10, 2_000_001, dtype=torch.float64)
    delta = (F.gelu(x) - F.gelu(x, approximate="tanh")).abs().max().item()
    assert 4.7e-4 < delta < 4.8e-4
    images = torch.randn(8, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    exact, bound = first_order_bound(model, images, delta)
    difference = (logits(back, images) - exact).abs()  # (B, K)
    assert difference.max() > 1e-5  # the note is not about nothing (float32 noise: 1e-7)
    assert (difference <= bound + 1e-6).all(), (difference / bound).max()


# ------------------------------------------------------------------ what the format cannot hold


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        (dict(classifier="map"), "classifier='map'"),
        (dict(image_size=(32, 48)), "makes a 4x6 patch grid"),
        (dict(layer_norm_eps=1e-5), "layer_norm_eps=1e-05"),
        (dict(posemb="sincos2d"), "posemb='sincos2d'"),
        (dict(posemb="none"), "posemb='none'"),
    ],
)
def test_what_the_format_cannot_hold_is_refused_in_one_line(
    overrides: dict[str, Any], needle: str, tmp_path: Path
) -> None:
    model = official_model("token", **overrides)
    path = tmp_path / "vit.npz"
    with pytest.raises(ConfigError) as err:
        write_official(model, path)
    message = str(err.value)
    assert "\n" not in message and needle in message
    assert message.startswith("cannot write this model in the official vit_jax format")
    assert not path.exists() and not list(tmp_path.iterdir())  # nothing written, no temporary


def test_every_reason_is_listed_in_the_one_line() -> None:
    model = official_model("token", classifier="map", layer_norm_eps=1e-5)
    with pytest.raises(ConfigError, match=r"classifier='map'.*; layer_norm_eps=1e-05"):
        to_official(model)


def test_the_resnet_baseline_is_refused(tmp_path: Path) -> None:
    cfg = tiny(arch="resnet", resnet=ResNetConfig(num_layers=(1,), width_factor=0.5))
    with pytest.raises(ConfigError, match=r"arch='resnet' is the ResNet baseline") as err:
        write_official(ResNetClassifier(cfg), tmp_path / "r.npz")
    assert "\n" not in str(err.value)
    assert not (tmp_path / "r.npz").exists()


@pytest.mark.parametrize("prune", [dict(prune_norm=True, prune_head=False), dict()])
def test_a_pruned_model_is_refused(prune: dict[str, bool]) -> None:
    model = official_model("token")
    model.prune_intermediate_layers(1, **prune)  # no final norm, or no pooling
    with pytest.raises(ConfigError, match="the model was pruned"):
        to_official(model)


def test_the_file_must_be_an_npz(tmp_path: Path) -> None:
    with pytest.raises(UserFileError, match=r"expected a path ending in \.npz"):
        write_official(official_model("token"), tmp_path / "vit")
    assert not list(tmp_path.iterdir())


def test_class_names_are_not_written_and_that_is_said(tmp_path: Path) -> None:
    model = official_model("token", num_classes=2)
    with pytest.warns(
        UserWarning, match="class names, wnids, the source and preprocessing are not written"
    ):
        vitkit.save(model, tmp_path / "vit.npz", format="official", class_names=["cat", "dog"])
    assert "Transformer/encoder_norm/scale" in read_npz(tmp_path / "vit.npz")


# ------------------------------------------------------------------ vitkit convert (official)


def test_convert_writes_the_file_and_says_gelu_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    model = randomize(VisionTransformer(tiny()))  # vitkit's default: exact GELU
    ours = vitkit.save(model, tmp_path / "ours")
    out = tmp_path / "vit.npz"
    assert main(["convert", str(ours), str(out), "--format", "official"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith(f"wrote {out} (official): ")
    assert captured.err.splitlines() == [f"vitkit: warning: {GELU_NOTE}"]
    back = vitkit.load(out)
    assert back.cfg == dataclasses.replace(model.cfg, act="gelu_tanh")
    assert all(torch.equal(back.state_dict()[k], v) for k, v in model.state_dict().items())

    tanh = vitkit.save(official_model("gap"), tmp_path / "tanh")
    assert main(["convert", str(tanh), str(tmp_path / "tanh.npz"), "--format", "official"]) == 0
    assert capsys.readouterr().err == ""  # the official numerics: no note


def test_convert_refuses_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    ours = vitkit.save(official_model("gap", classifier="map"), tmp_path / "ours")
    assert main(["convert", str(ours), str(tmp_path / "vit.npz"), "--format", "official"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("vitkit convert: error: cannot write this model in the official")
    assert "classifier='map'" in line
    assert not (tmp_path / "vit.npz").exists()
