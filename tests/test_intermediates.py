"""timm's feature-extraction contract: ``forward_intermediates`` and ``prune_intermediate_layers``
return what timm's ``VisionTransformer`` returns, output for output, with the same weights.

The peers are random-initialised timm models (class token and GAP, square and non-square images)
converted by ``vitkit.load``; every argument combination timm's method takes (its attention-mask
arguments aside) is compared, structure (tuple, list, pairs, dict keys in order) and values.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

import pytest
import timm
import torch
from torch import nn

import vitkit
from helpers import randomize, tiny
from vitkit.config import ConfigError, ResNetConfig
from vitkit.model import VisionTransformer

DEPTH = 4
INDICES = [
    None,
    1,
    3,
    [0, 2],
    [-1],
    [2, 0],
    [1, 1, -3],
]  # last n, lists, negative, unsorted, repeats
FLAGS = ("return_prefix_tokens", "norm", "stop_early", "intermediates_only", "output_dict")
MODELS = [
    # classifier, (H, W) image, patch
    ("token", (32, 32), 8),
    ("gap", (32, 32), 8),
    ("token", (24, 40), 8),  # a 3x5 grid: NCHW must not transpose
    ("gap", (40, 16), 8),  # 5x2
]


def timm_peer(classifier: str, image: tuple[int, int], patch: int) -> nn.Module:
    extra = dict(class_token=False, global_pool="avg", fc_norm=False) if classifier == "gap" else {}
    peer = timm.models.vision_transformer.VisionTransformer(
        img_size=image,
        patch_size=patch,
        embed_dim=32,
        depth=DEPTH,
        num_heads=2,
        mlp_ratio=2.0,
        num_classes=5,
        **extra,
    )
    return randomize(peer, std=0.15)


def assert_same(got: Any, expected: Any, where: str = "output") -> None:
    """The same nesting of tuples, lists and dicts (keys in the same order) and equal tensors."""
    assert type(got) is type(expected), (
        f"{where}: {type(got).__name__} vs {type(expected).__name__}"
    )
    if isinstance(expected, torch.Tensor):
        assert got.shape == expected.shape, (
            f"{where}: {tuple(got.shape)} vs {tuple(expected.shape)}"
        )
        assert got.is_contiguous() == expected.is_contiguous(), where
        torch.testing.assert_close(got, expected, msg=lambda m: f"{where}: {m}")
    elif isinstance(expected, dict):
        assert list(got) == list(expected), f"{where}: keys {list(got)} vs {list(expected)}"
        for key in expected:
            assert_same(got[key], expected[key], f"{where}[{key!r}]")
    else:
        assert len(got) == len(expected), f"{where}: {len(got)} items vs {len(expected)}"
        for i, (a, b) in enumerate(zip(got, expected, strict=True)):
            assert_same(a, b, f"{where}[{i}]")


@pytest.fixture(params=MODELS, ids=lambda m: f"{m[0]}-{m[1][0]}x{m[1][1]}")
def pair(request) -> tuple[nn.Module, VisionTransformer, torch.Tensor]:
    classifier, image, patch = request.param
    peer = timm_peer(classifier, image, patch)
    ours = vitkit.load(peer)
    assert ours.cfg.classifier == classifier and ours.cfg.image_hw == image
    x = torch.randn(2, 3, *image, generator=torch.Generator().manual_seed(1))
    return peer, ours, x


@torch.no_grad()
def test_forward_intermediates_equals_timm_for_every_argument(pair) -> None:
    peer, ours, x = pair
    H, W = x.shape[-2:]
    checked = 0
    for indices, fmt, flags in itertools.product(
        INDICES, ("NCHW", "NLC"), itertools.product((False, True), repeat=len(FLAGS))
    ):
        kwargs = dict(zip(FLAGS, flags, strict=True), output_fmt=fmt)
        expected = peer.forward_intermediates(x, indices, **kwargs)
        got = ours.forward_intermediates(x, indices, **kwargs)
        assert_same(got, expected, f"indices={indices} {kwargs}")
        checked += 1
    assert checked == len(INDICES) * 2 * 2 ** len(FLAGS)
    # The comparison is not vacuous: the blocks' outputs differ, and NCHW maps are (B, D, gh, gw).
    final, features = ours.forward_intermediates(x)
    assert len(features) == DEPTH and features[0].shape == (2, 32, H // 8, W // 8)
    assert all((a - b).abs().max() > 0.1 for a, b in itertools.pairwise(features))
    torch.testing.assert_close(final, ours.forward_features(x))  # not stopped early: the output


@torch.no_grad()
def test_indices_by_keyword_and_defaults(pair) -> None:
    peer, ours, x = pair
    assert_same(ours.forward_intermediates(x), peer.forward_intermediates(x))
    assert_same(
        ours.forward_intermediates(x, indices=[-2], output_fmt="NLC"),
        peer.forward_intermediates(x, indices=[-2], output_fmt="NLC"),
    )


@pytest.mark.parametrize("bad", [0, DEPTH + 1, [DEPTH], [-DEPTH - 1], [], True])
def test_bad_indices_are_one_line_errors_where_timm_also_refuses(bad) -> None:
    model = randomize(VisionTransformer(tiny(num_layers=DEPTH)))
    x = torch.randn(1, 3, 32, 32)
    with pytest.raises(ConfigError, match=r"^indices=.* is not valid: expected [^\n]*$"):
        model.forward_intermediates(x, bad)
    with pytest.raises(ConfigError, match="indices="):
        model.prune_intermediate_layers(bad)
    assert len(model.blocks) == DEPTH  # a refused prune changes nothing
    if bad is not True:  # timm takes True as 1
        peer = timm_peer("token", (32, 32), 8)
        with pytest.raises((AssertionError, ValueError)):
            peer.forward_intermediates(x, bad)


def test_bad_output_format_is_refused() -> None:
    model = VisionTransformer(tiny())
    with pytest.raises(ConfigError, match="output_fmt='NHWC' is not valid"):
        model.forward_intermediates(torch.randn(1, 3, 32, 32), output_fmt="NHWC")


@pytest.mark.parametrize("prune_head", [True, False], ids=["head", "keep-head"])
@pytest.mark.parametrize("prune_norm", [False, True], ids=["keep-norm", "norm"])
@pytest.mark.parametrize("indices", [1, 2, [0, 1], [-3], [2, 0]], ids=str)
@torch.no_grad()
def test_prune_intermediate_layers_equals_timm(pair, indices, prune_norm, prune_head) -> None:
    peer, ours, x = pair
    peer, ours = copy.deepcopy(peer), copy.deepcopy(ours)
    kept = peer.prune_intermediate_layers(indices, prune_norm=prune_norm, prune_head=prune_head)
    assert (
        ours.prune_intermediate_layers(indices, prune_norm=prune_norm, prune_head=prune_head)
        == kept
    )
    assert len(ours.blocks) == len(peer.blocks) == ours.cfg.num_layers == max(kept) + 1
    # timm's pruned head also drops the pooling: forward returns the tokens (B, T, D)
    assert_same(ours(x), peer(x), "forward")
    assert ours(x).ndim == (3 if prune_head else 2)
    assert_same(
        ours.forward_head(ours.forward_features(x), pre_logits=True),
        peer.forward_head(peer.forward_features(x), pre_logits=True),
        "pre_logits",
    )
    for norm in (False, True):
        assert_same(
            ours.forward_intermediates(x, kept, norm=norm, return_prefix_tokens=True),
            peer.forward_intermediates(x, kept, norm=norm, return_prefix_tokens=True),
        )
    assert prune_norm == isinstance(ours.norm, nn.Identity)
    assert ours.cfg.num_classes == (0 if prune_head else 5)


def test_prune_head_drops_pre_logits_and_default_keeps_the_last_block() -> None:
    model = randomize(VisionTransformer(tiny(num_layers=3, representation_size=16)))
    assert model.prune_intermediate_layers() == [2]  # timm's default: indices=1, the last block
    assert len(model.blocks) == 3 and model.pre_logits is None and model.cfg.num_classes == 0
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(model(x), model.forward_features(x))  # (B, T, D)


@torch.no_grad()
def test_hybrid_maps_follow_the_total_stride() -> None:
    cfg = tiny(image_size=(32, 64), patch_size=1, resnet=ResNetConfig(num_layers=(1, 1)))
    model = randomize(VisionTransformer(cfg), std=0.05)
    x = torch.randn(1, 3, 32, 64)
    final, (last,) = model.forward_intermediates(x, 1, norm=True)
    assert last.shape == (1, 64, 4, 8)  # stride 8: a 4x8 grid
    torch.testing.assert_close(last.flatten(2).transpose(1, 2), final[:, 1:])


@torch.no_grad()
def test_a_head_attached_after_pruning_sees_each_token_as_timms(pair) -> None:
    peer, ours, x = pair
    peer, ours = copy.deepcopy(peer), copy.deepcopy(ours)
    peer.prune_intermediate_layers(2, prune_norm=True)
    ours.prune_intermediate_layers(2, prune_norm=True)
    peer.reset_classifier(3)  # keeps global_pool='': no pooling
    ours.reset_head(3)
    ours.head.load_state_dict(peer.head.state_dict())  # timm's new head is random, ours zero
    assert_same(ours(x), peer(x), "forward")
    assert ours(x).shape == (2, ours.cfg.num_prefix_tokens + x.shape[-2] * x.shape[-1] // 64, 3)
