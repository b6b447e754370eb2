"""The attention-pooling (MAP) head, ``classifier='map'``: timm's ``global_pool='map'`` ViTs load
with equal logits both ways, big_vision's initialisation, and the model contract (inspection,
few-shot, fine-tuning surgery, weight decay) on a model without a class token.

big_vision ``.npz`` files with a ``MAPHead_0`` are proven against a re-statement of big_vision's
forward in ``test_official.py``.
"""

from __future__ import annotations

import math

import pytest
import timm
import torch

import vitkit
from helpers import randomize, tiny
from vitkit.data import Batches, BatchOptions, synthetic
from vitkit.eval.fewshot import extract_features
from vitkit.inspect import inspect_model
from vitkit.io.checkpoint import CheckpointError, load_state_dict_strict
from vitkit.io.formats.timm import read_timm
from vitkit.model import VisionTransformer
from vitkit.model.heads import MAPHead


def timm_map_vit(**kw) -> torch.nn.Module:
    """timm's MAP ViT as big_vision's: no class token, attention pooling after the final norm."""
    base = dict(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, mlp_ratio=2.0)
    peer = timm.models.vision_transformer.VisionTransformer(
        **{**base, **kw}, class_token=False, global_pool="map"
    )
    return randomize(peer, std=0.2).eval()


@pytest.mark.parametrize("via", ["module", "state_dict"])
@pytest.mark.parametrize("act", ["gelu", "gelu_tanh"])
def test_timm_map_vit_loads_with_equal_logits(via: str, act: str) -> None:
    peer = timm_map_vit(num_classes=5, act_layer=act)
    assert peer.attn_pool is not None and isinstance(peer.fc_norm, torch.nn.Identity)
    if via == "module":
        model = vitkit.load(peer)
    else:  # the state dict records neither heads nor activation: both are passed
        cfg, state = read_timm(peer.state_dict(), num_heads=4, act=act)
        model = VisionTransformer(cfg)
        load_state_dict_strict(model, state)
    assert (model.cfg.classifier, model.cfg.num_prefix_tokens, model.cfg.act) == ("map", 0, act)
    x = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        want, got = peer(x), model.eval()(x)
        assert want.abs().mean() > 0.1
        assert (got - want).abs().max() <= 1e-5
        pooled = model.forward_head(model.forward_features(x), pre_logits=True)
        assert (
            pooled - peer.forward_head(peer.forward_features(x), pre_logits=True)
        ).abs().max() <= 1e-5


def test_timm_state_dict_without_module_is_map() -> None:
    peer = timm_map_vit(num_classes=3)
    model = vitkit.load(peer.state_dict(), num_heads=4)
    assert model.cfg.classifier == "map"


def test_our_map_keys_load_into_timm() -> None:
    model = randomize(VisionTransformer(tiny(classifier="map")))
    peer = timm.models.vision_transformer.VisionTransformer(
        img_size=32,
        patch_size=8,
        embed_dim=64,
        depth=2,
        num_heads=4,
        mlp_ratio=2.0,
        num_classes=10,
        class_token=False,
        global_pool="map",
    ).eval()
    peer.load_state_dict(model.state_dict(), strict=True)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert (peer(x) - model(x)).abs().max() <= 1e-5


def test_timm_map_variants_vitkit_lacks_are_refused() -> None:
    with_cls = timm.models.vision_transformer.VisionTransformer(
        img_size=32, patch_size=8, embed_dim=64, depth=1, num_heads=4, global_pool="map"
    )
    with pytest.raises(CheckpointError, match="next to a class token"):
        vitkit.load(with_cls)
    state = timm_map_vit(num_classes=3).state_dict()
    state["attn_pool.latent"] = torch.zeros(1, 2, 64)  # latent_len=2
    with pytest.raises(CheckpointError, match=r"expected one probe"):
        vitkit.load(state, num_heads=4)


def test_fresh_map_head_is_big_vision_initialised() -> None:
    torch.manual_seed(0)
    D = 384
    head = MAPHead(D, 6, 4 * D, act="gelu", eps=1e-6)
    head.reset_parameters()
    # flax xavier_uniform on the (1, 1, D) probe: fan_in 1, fan_out D.
    bound = math.sqrt(6 / (1 + D))
    probe = head.latent.detach()
    assert probe.shape == (1, 1, D)
    assert probe.abs().max() <= bound and probe.abs().max() > 0.9 * bound
    assert abs(probe.var().item() * 3 / bound**2 - 1) < 0.25  # uniform: var = bound^2 / 3
    dense = math.sqrt(6 / (2 * D))  # q, k, v, out: each a (D, D) xavier kernel
    for weight in (head.q.weight, *head.kv.weight.chunk(2), head.proj.weight):
        assert weight.abs().max() <= dense and weight.abs().max() > 0.9 * dense
    for bias in (head.q.bias, head.kv.bias, head.proj.bias, head.norm.bias):
        assert torch.count_nonzero(bias) == 0
    assert torch.equal(head.norm.weight, torch.ones(D))
    assert 0 < head.mlp.fc1.bias.abs().max() < 1e-5  # normal(1e-6), as the encoder's MLP


def test_map_model_contract() -> None:
    model = randomize(VisionTransformer(tiny(classifier="map", representation_size=32)))
    assert model.cls_token is None and model.pos_embed.shape == (1, 16, 64)
    assert {"attn_pool.latent", "attn_pool.q.bias", "attn_pool.norm.weight"} <= (
        model.no_weight_decay()
    )
    assert "attn_pool.q.weight" not in model.no_weight_decay()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        out = model.intermediates(x, attention=True)
        assert out["attn0"].shape == (2, 4, 16, 16)  # patches only: no class token
        torch.testing.assert_close(out["pooled"], model.attn_pool(out["encoded"]))
        assert not torch.allclose(out["pooled"], out["encoded"].mean(dim=1))
        torch.testing.assert_close(out["logits"], model(x))
        probe = model.attn_pool.latent.clone()
        model.reset_head(3)  # fine-tuning keeps the pooling, replaces pre-logits and head
        assert torch.equal(model.attn_pool.latent, probe) and model.pre_logits is None
        assert torch.count_nonzero(model(x)) == 0


def test_fewshot_features_are_the_map_output() -> None:
    model = randomize(VisionTransformer(tiny(classifier="map", num_classes=3)))
    data = synthetic(num_classes=3, per_class=2, image_size=32, channels=3, seed=0)
    batches = Batches(data, BatchOptions(batch_size=4, train=False))
    features, _ = extract_features(model, batches.epoch(0))
    with torch.no_grad():
        images = torch.cat([images for images, _ in batches.epoch(0)])
        expected = model.attn_pool(model.forward_features(images))
    torch.testing.assert_close(features, expected, rtol=1e-5, atol=1e-6)


def test_inspect_a_map_model(tmp_path) -> None:
    model = randomize(VisionTransformer(tiny(classifier="map")), std=0.05)
    written = inspect_model(model, torch.rand(3, 3, 32, 32) * 2 - 1, tmp_path, max_maps=2)
    assert {"index.html", "attention_rollout.png", "attention_distance.png"} <= set(written)
    page = (tmp_path / "index.html").read_text()
    assert "MAP model: no class token" in page and "GAP model" not in page  # says what it drew
