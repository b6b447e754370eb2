"""The model against timm with the same weights, and the model contract of DESIGN.md."""

from __future__ import annotations

import math

import numpy as np
import pytest
import timm
import torch
from torch import nn

import vitkit
from helpers import randomize, tiny
from vitkit.config import ConfigError, ModelConfig, ResNetConfig, replace
from vitkit.io.checkpoint import CheckpointError
from vitkit.model import VisionTransformer
from vitkit.model.posemb import grid_of, resize_grid, sincos2d


def timm_vit(*, gap: bool, **kw) -> nn.Module:
    extra = dict(class_token=False, global_pool="avg", fc_norm=False) if gap else {}
    return timm.models.vision_transformer.VisionTransformer(**kw, **extra)


TIMM_SHAPES = [
    # img, patch, dim, depth, heads, mlp_ratio, classes, chans
    (32, 8, 64, 2, 4, 2.0, 10, 3),
    (32, 4, 48, 1, 2, 4.0, 7, 1),
    (64, 16, 96, 3, 6, 3.0, 5, 3),
    (28, 14, 32, 2, 2, 4.0, 3, 3),
]


@pytest.mark.parametrize("gap", [False, True], ids=["token", "gap"])
@pytest.mark.parametrize("shape", TIMM_SHAPES, ids=lambda s: f"img{s[0]}p{s[1]}d{s[2]}L{s[3]}")
def test_logits_equal_timm(shape, gap: bool) -> None:
    img, patch, dim, depth, heads, ratio, classes, chans = shape
    peer = timm_vit(
        gap=gap,
        img_size=img,
        patch_size=patch,
        embed_dim=dim,
        depth=depth,
        num_heads=heads,
        mlp_ratio=ratio,
        num_classes=classes,
        in_chans=chans,
    )
    randomize(peer).eval()
    ours = vitkit.load(peer)
    assert ours.cfg.classifier == ("gap" if gap else "token")
    assert ours.cfg.num_heads == heads
    x = torch.randn(4, chans, img, img)
    with torch.no_grad():
        expected, got = peer(x), ours(x)
        assert expected.abs().mean() > 0.1  # the comparison is between non-trivial logits
        assert (got - expected).abs().max() <= 1e-5
        assert (ours.forward_features(x) - peer.forward_features(x)).abs().max() <= 1e-5


def test_timm_state_dict_heads_from_preset_or_argument(tmp_path) -> None:
    peer = randomize(timm.create_model("vit_tiny_patch16_224", num_classes=4), std=0.05).eval()
    ours = vitkit.load(peer.state_dict())  # Ti: hidden 192, 12 layers, mlp 768 -> 3 heads
    assert ours.cfg.num_heads == 3
    odd = randomize(
        timm_vit(
            gap=False, img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=8, num_classes=3
        )
    ).eval()
    with pytest.raises(ValueError, match="num_heads"):
        vitkit.load(odd.state_dict())
    model = vitkit.load(odd.state_dict(), num_heads=8)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert (model(x) - odd(x)).abs().max() <= 1e-5


def test_timm_activation_is_read_or_refused() -> None:
    kw = dict(img_size=32, patch_size=8, embed_dim=64, depth=1, num_heads=4, num_classes=3)
    tanh = randomize(timm_vit(gap=False, act_layer="gelu_tanh", **kw))  # timm's GELUTanh module
    ours = vitkit.load(tanh)
    assert ours.cfg.act == "gelu_tanh"
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert (ours(x) - tanh(x)).abs().max() <= 1e-5
    with pytest.raises(ValueError, match="QuickGELU: expected GELU"):
        vitkit.load(timm_vit(gap=False, act_layer="quick_gelu", **kw))


def test_intermediates_and_explicit_attention_match_fused() -> None:
    model = randomize(VisionTransformer(tiny(representation_size=48))).eval()
    x = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        out = model.intermediates(x, attention=True)
        fused = model(x)
    assert set(out) == {
        "patch_embed",
        "block0",
        "block1",
        "attn0",
        "attn1",
        "encoded",
        "pooled",
        "pre_logits",
        "logits",
    }
    assert out["patch_embed"].shape == (3, 16, 64)
    assert out["block1"].shape == out["encoded"].shape == (3, 17, 64)
    assert out["attn0"].shape == (3, 4, 17, 17)
    torch.testing.assert_close(out["attn1"].sum(-1), torch.ones(3, 4, 17), rtol=0, atol=1e-5)
    assert out["pre_logits"].shape == (3, 48)
    assert (out["logits"] - fused).abs().max() <= 1e-5  # explicit path == fused SDPA path
    # timm's forward_head(pre_logits=True) meaning: the features the head sees.
    with torch.no_grad():
        feats = model.forward_head(model.forward_features(x), pre_logits=True)
    torch.testing.assert_close(feats, out["pre_logits"])


def test_stages_compose_to_forward() -> None:
    model = randomize(VisionTransformer(tiny())).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        tokens = model.encode(model.embed_patches(x))
        torch.testing.assert_close(model.forward_head(tokens), model(x))
        torch.testing.assert_close(model.pool(tokens), tokens[:, 0])


def test_any_multiple_of_patch_size_and_clear_error() -> None:
    model = randomize(VisionTransformer(tiny())).eval()
    with torch.no_grad():
        assert model(torch.randn(2, 3, 48, 64)).shape == (2, 10)
        # Inference at another size interpolates the posemb on the fly, as resize_pos_embed does.
        x = torch.randn(2, 3, 64, 64)
        on_the_fly = model(x)
        model.resize_pos_embed(8)
        torch.testing.assert_close(model(x), on_the_fly)
    assert model.cfg.image_size == 64
    with pytest.raises(ValueError, match="not a multiple of the model's patch stride 8"):
        model(torch.randn(1, 3, 30, 32))


def test_resize_matches_scipy_zoom_order1() -> None:
    scipy_ndimage = pytest.importorskip("scipy.ndimage")
    posemb = torch.randn(1, 7 * 7, 16)
    ours = resize_grid(posemb, (7, 7), (12, 12))
    grid = posemb.reshape(7, 7, 16).numpy()
    expected = scipy_ndimage.zoom(grid, (12 / 7, 12 / 7, 1), order=1)  # the official resize
    np.testing.assert_allclose(ours.reshape(12, 12, 16).numpy(), expected, atol=1e-5)


def test_resize_pos_embed_keeps_class_token() -> None:
    model = randomize(VisionTransformer(tiny()))
    cls_pe = model.pos_embed[:, :1].detach().clone()
    model.resize_pos_embed(6)
    assert model.pos_embed.shape == (1, 1 + 36, 64)
    torch.testing.assert_close(model.pos_embed[:, :1], cls_pe)


def test_sincos2d_is_big_vision_formula() -> None:
    h, w, dim = 3, 4, 16
    pe = sincos2d((h, w), dim)[0].numpy()
    y, x = np.mgrid[:h, :w]
    omega = 1.0 / 10000 ** (np.arange(dim // 4) / (dim // 4 - 1))
    ey, ex = np.einsum("m,d->md", y.flatten(), omega), np.einsum("m,d->md", x.flatten(), omega)
    expected = np.concatenate([np.sin(ex), np.cos(ex), np.sin(ey), np.cos(ey)], axis=1)
    np.testing.assert_allclose(pe, expected, atol=1e-6)
    model = VisionTransformer(tiny(posemb="sincos2d", classifier="gap"))
    assert "pos_embed" not in model.state_dict()  # fixed, not a parameter


def test_official_initialisation() -> None:
    torch.manual_seed(0)
    model = VisionTransformer(
        tiny(
            hidden_size=256, num_heads=4, mlp_dim=512, representation_size=128, head_bias_init=-6.9
        )
    )
    D = 256
    assert torch.count_nonzero(model.head.weight) == 0  # zero head [P App. B.1.1]
    assert torch.all(model.head.bias == -6.9)
    assert torch.count_nonzero(model.cls_token) == 0
    assert abs(model.pos_embed.std().item() - 0.02) < 0.002
    block = model.blocks[0]
    bound = math.sqrt(6 / (D + D))  # xavier per q/k/v slice, as if separate (D x D) kernels
    for part in block.attn.qkv.weight.chunk(3):
        assert part.abs().max() <= bound and part.abs().max() > 0.95 * bound
    assert torch.count_nonzero(block.attn.qkv.bias) == 0
    assert block.mlp.fc1.bias.abs().max() < 1e-5 and torch.count_nonzero(block.mlp.fc1.bias) > 0
    fan_in = 3 * 8 * 8
    std = model.patch_embed.proj.weight.std().item()
    assert abs(std - math.sqrt(1 / fan_in)) < 0.1 * math.sqrt(1 / fan_in)  # lecun normal
    assert model.blocks[0].norm1.eps == 1e-6


def test_reset_head_is_zero_and_drops_pre_logits() -> None:
    model = randomize(VisionTransformer(tiny(representation_size=32)))
    model.reset_head(3)
    assert model.pre_logits is None and model.cfg.representation_size is None
    assert model.head.weight.shape == (3, 64) and torch.count_nonzero(model.head.weight) == 0
    assert torch.all(model(torch.randn(2, 3, 32, 32)) == 0)  # a zero head predicts 0 at step 0
    model.reset_head(0)
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 64)  # features only, as timm


def test_headless_feature_extractor() -> None:
    model = vitkit.create_model("ViT-mu/16", num_classes=0, image_size=32).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(model(x), model.forward_features(x)[:, 0])
    assert "logits" not in model.intermediates(x)


def test_dropout_where_the_paper_puts_it() -> None:
    model = VisionTransformer(tiny(dropout_rate=0.1, attention_dropout_rate=0.1))
    drops = [name for name, m in model.named_modules() if isinstance(m, nn.Dropout)]
    # after adding posemb, after the attention output projection, after each MLP dense; not qkv
    assert drops == ["pos_drop"] + [
        f"blocks.{i}.{n}" for i in range(2) for n in ("attn.proj_drop", "mlp.drop1", "mlp.drop2")
    ]
    assert model.blocks[0].attn.attn_drop_rate == 0.1
    x = torch.randn(2, 3, 32, 32)
    randomize(model)
    model.train()
    assert not torch.equal(model(x), model(x))
    model.eval()
    assert torch.equal(model(x), model(x))


def test_drop_path_schedule_and_behaviour() -> None:
    model = randomize(VisionTransformer(tiny(num_layers=3, drop_path_rate=0.2)))
    assert [b.drop_path.rate for b in model.blocks] == pytest.approx([0.0, 0.1, 0.2])
    x = torch.randn(8, 3, 32, 32)
    model.train()
    torch.manual_seed(0)
    a = model(x)
    torch.manual_seed(1)
    assert not torch.equal(a, model(x))


def test_no_weight_decay() -> None:
    model = VisionTransformer(tiny())
    names = model.no_weight_decay()
    assert {"pos_embed", "cls_token", "norm.weight", "blocks.0.attn.qkv.bias", "head.bias"} <= names
    assert not names & {"blocks.0.attn.qkv.weight", "head.weight", "patch_embed.proj.weight"}


def test_hybrid_forward_and_shapes() -> None:
    cfg = tiny(image_size=64, patch_size=1, resnet=ResNetConfig(num_layers=(1, 1)))
    model = randomize(VisionTransformer(cfg), std=0.05).eval()
    assert cfg.grid_size == 8  # stride 4 (root) x 2 (second stage)
    with torch.no_grad():
        assert model(torch.randn(2, 3, 64, 64)).shape == (2, 10)
        assert model(torch.randn(1, 3, 40, 48)).shape == (1, 10)  # SAME padding, any multiple of 8
    bn = model.patch_embed.backbone.stages[0].blocks[0]
    fresh = VisionTransformer(cfg)
    assert torch.count_nonzero(fresh.patch_embed.backbone.stages[0].blocks[0].norm3.weight) == 0
    assert bn.downsample is not None  # 64 -> 256 channels needs a projection


def test_bf16_autocast_close_to_fp32() -> None:
    model = randomize(VisionTransformer(tiny()), std=0.1).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        ref = model(x)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = model(x)
    assert low.dtype == torch.bfloat16
    assert (low.float() - ref).abs().max() < 0.05 * ref.abs().max() + 0.05
    # what bf16 would hurt stays fp32: the residual stream (the adds promote), so every
    # LayerNorm reads and writes fp32; only the products and their outputs are bf16
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        out = model.intermediates(x)
    assert all(out[f"block{i}"].dtype == torch.float32 for i in range(len(model.blocks)))
    assert out["encoded"].dtype == torch.float32 and out["logits"].dtype == torch.bfloat16


def test_bf16_on_a_cpu_takes_the_explicit_attention_path(monkeypatch) -> None:
    """bf16 on a CPU computes attention as explicit products over at most 256 tokens in training
    and 64 without gradients (faster there than PyTorch's fused kernel: benchmarks/RESULTS.md),
    whose logits and gradients are as close to fp32's as the fused kernel's; fp32, and longer
    sequences, keep the fused kernel."""
    import torch.nn.functional as F

    from vitkit.model import layers

    def q(tokens: int, dtype: torch.dtype = torch.bfloat16, grad: bool = True) -> torch.Tensor:
        return torch.zeros(1, 2, tokens, 8, dtype=dtype, requires_grad=grad)

    most = {"train": 256, "infer": 64}
    assert not layers.explicit_is_faster(q(17, torch.float32), most)
    assert layers.explicit_is_faster(q(256), most) and not layers.explicit_is_faster(q(257), most)
    assert layers.explicit_is_faster(q(64, grad=False), most)
    assert not layers.explicit_is_faster(q(65, grad=False), most)
    fused_calls = []
    sdpa = F.scaled_dot_product_attention

    def counting(*args, **kwargs):
        fused_calls.append(args[0].dtype)
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", counting)
    model = randomize(VisionTransformer(tiny()), std=0.1)
    x = torch.randn(4, 3, 32, 32)

    def logits_and_grads(bf16: bool) -> tuple[torch.Tensor, torch.Tensor]:
        model.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = model(x).float()
        out.square().mean().backward()
        grads = torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])
        return out.detach(), grads

    ref, ref_grads = logits_and_grads(bf16=False)
    assert fused_calls == [torch.float32] * len(model.blocks)
    fused_calls.clear()
    explicit, explicit_grads = logits_and_grads(bf16=True)
    assert fused_calls == []
    for attention in (m for m in model.modules() if isinstance(m, layers.Attention)):
        attention.explicit_tokens = {"train": 0, "infer": 0}
    fused, fused_grads = logits_and_grads(bf16=True)
    assert fused_calls == [torch.bfloat16] * len(model.blocks)
    bound = 0.05 * ref.abs().max() + 0.05  # as test_bf16_autocast_close_to_fp32
    assert (explicit - ref).abs().max() < bound and (fused - ref).abs().max() < bound
    for grads in (explicit_grads, fused_grads):
        assert F.cosine_similarity(grads, ref_grads, dim=0) > 0.999


@pytest.mark.slow
def test_torch_compile_matches_eager() -> None:
    model = randomize(VisionTransformer(tiny(num_layers=1)), std=0.1).eval()
    compiled = torch.compile(model)
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)


def test_create_model_overrides_are_strict() -> None:
    model = vitkit.create_model(
        "ViT-mu/16", num_classes=5, image_size=32, in_chans=1, classifier="gap"
    )
    assert (model.cfg.num_classes, model.cfg.in_chans, model.cfg.classifier) == (5, 1, "gap")
    assert vitkit.create_model("ViT-mu/16", representation_size=16).pre_logits is not None
    with pytest.raises(TypeError):
        vitkit.create_model("ViT-mu/16", num_clases=5)
    with pytest.raises(ValueError, match="image_size=30"):
        vitkit.create_model("ViT-mu/16", image_size=30)
    with pytest.raises(ValueError, match="classifier='cls'"):
        vitkit.create_model("ViT-mu/16", classifier="cls")


def test_sizes_given_in_python_meet_the_bounds_a_checkpoint_and_a_run_meet() -> None:
    """create_model, reset_head and resize_pos_embed took 10^9 classes, 10^6 px or a grid of
    10^6 to torch, whose allocation failed (768 GB .. 128 TB) deep inside, or overflowed; a
    checkpoint's config.json and a run's --set were refused in one line. The same bounds now,
    before anything is allocated; and a name that is not one is named."""
    for build, said in [
        (lambda: vitkit.create_model("ViT-Ti/16", num_classes=10**9), "model.num_classes="),
        (lambda: vitkit.create_model("ViT-Ti/16", num_classes=10**30), "model.num_classes="),
        (lambda: vitkit.create_model("ViT-Ti/16", image_size=16 * 10**5), "model.image_size="),
        (lambda: vitkit.create_model(None), "name=None: expected a preset's name"),  # type: ignore[arg-type]
    ]:
        with pytest.raises(ConfigError, match=said):
            build()
    model = vitkit.create_model(tiny())
    for surgery, said in [
        (lambda: model.reset_head(10**12), "model.num_classes=1000000000000 is not valid"),
        (lambda: model.resize_pos_embed(10**6), "model.image_size=8000000 is not valid"),
    ]:
        with pytest.raises(ConfigError, match=said):
            surgery()
        assert model.cfg == tiny()  # unchanged


def test_create_model_overrides_are_typed_as_the_configs_fields() -> None:
    """Each keyword override has its ModelConfig field's type, or None for the preset's value,
    so a type checker refuses ``classifier="cls"`` as the config would."""
    import inspect
    import typing

    fields = typing.get_type_hints(ModelConfig)
    params = inspect.signature(vitkit.create_model).parameters
    overrides = [p for p in params.values() if p.kind is p.KEYWORD_ONLY and p.name != "pretrained"]
    assert len(overrides) == 13
    for p in overrides:
        field = fields["image_size" if p.name == "img_size" else p.name]
        assert eval(p.annotation, vars(vitkit)) == field | None, p.name
    # the sentinel of representation_size, whose None means something, by its name (issue 46:
    # the reference page showed ``_KEEP``, help() ``<object object at 0x...>``)
    assert str(params["representation_size"]) == "representation_size: 'int | None' = PRESET"


def test_create_model_takes_timms_img_size_and_patch_size() -> None:
    """timm's keywords build timm's model: the same tensors, and the same logits once timm's
    weights are loaded."""
    args = dict(img_size=32, patch_size=8, num_classes=3)
    model = vitkit.create_model("vit_base_patch16_224", **args).eval()
    peer = randomize(timm.create_model("vit_base_patch16_224", pretrained=False, **args))
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    assert shapes == {k: tuple(v.shape) for k, v in peer.state_dict().items()}
    model.load_state_dict(peer.state_dict())
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(model(x), peer(x), rtol=1e-4, atol=1e-4)
    assert vitkit.create_model(tiny(), img_size=48).cfg.image_size == 48
    assert vitkit.create_model("ViT-mu/16", image_size=32, patch_size=4).cfg.grid == (8, 8)
    with pytest.raises(ConfigError, match="image_size=32 and img_size=32: expected one"):
        vitkit.create_model("ViT-mu/16", image_size=32, img_size=32)
    with pytest.raises(ConfigError, match="patch_size"):  # 224 is no multiple of 10
        vitkit.create_model("ViT-mu/16", patch_size=10)
    with pytest.raises(ConfigError, match="patch_size"):
        vitkit.create_model("ViT-mu/16", patch_size=0)


def test_resnet_baseline_is_the_hybrid_backbone_with_a_linear_head(tmp_path) -> None:
    from vitkit.io.checkpoint import write_ours
    from vitkit.model import ResNetClassifier, build_model

    with pytest.raises(ConfigError, match="arch='resnet'"):
        tiny(arch="resnet")
    cfg = tiny(arch="resnet", resnet=ResNetConfig(num_layers=(1, 1)), image_size=30, in_chans=1)
    model = build_model(cfg)  # 30 px: not a multiple of the stride, fine for a CNN
    assert isinstance(model, ResNetClassifier)
    hybrid = VisionTransformer(
        tiny(resnet=ResNetConfig(num_layers=(1, 1)), patch_size=1, in_chans=1)
    )
    backbone = sum(p.numel() for p in hybrid.patch_embed.backbone.parameters())
    assert model.num_params() == backbone + 512 * 10 + 10  # + head on 512 pooled channels
    x = torch.randn(3, 1, 30, 30)
    assert torch.equal(model(x), torch.zeros(3, 10))  # zero-initialised head
    randomize(model)
    out = model.intermediates(x)
    assert torch.allclose(out["logits"], model(x)) and out["pre_logits"].shape == (3, 512)
    assert torch.allclose(out["pre_logits"], model.backbone(x).mean(dim=(2, 3)))
    with pytest.raises(ValueError, match="no attention"):
        model.intermediates(x, attention=True)
    write_ours(cfg, model.state_dict(), tmp_path / "r")
    again = vitkit.load(tmp_path / "r")
    assert isinstance(again, ResNetClassifier) and torch.equal(again(x), model(x))
    vitkit.save(again, tmp_path / "r2")
    assert torch.equal(vitkit.load(tmp_path / "r2")(x), model(x))
    with pytest.raises(ValueError, match="Vision Transformers only"):
        vitkit.save(again, tmp_path / "hf", format="hf")
    again.reset_head(3)
    assert again.cfg.num_classes == 3 and torch.equal(again(x), torch.zeros(3, 3))
    with pytest.raises(ConfigError, match="representation_size"):
        tiny(arch="resnet", resnet=ResNetConfig(num_layers=(1,)), representation_size=8)


def test_create_model_builds_the_resnet_a_config_describes() -> None:
    """A ResNet config builds the ResNet baseline, as ``build_model`` and timm's
    ``create_model`` do, not a Vision Transformer on the same fields."""
    from vitkit.model import ResNetClassifier, build_model

    cfg = tiny(arch="resnet", resnet=ResNetConfig(num_layers=(1,)), in_chans=1)
    model = vitkit.create_model(cfg, num_classes=3)
    assert isinstance(model, ResNetClassifier)
    assert model.cfg == replace(cfg, {"num_classes": 3})
    assert model.num_params() == build_model(model.cfg).num_params()
    with pytest.raises(ConfigError, match=r"^model.arch='resnet' is not a Vision Transformer"):
        VisionTransformer(cfg)  # the class itself would build a ViT on the same fields


def test_study_baselines_have_golden_parameter_counts() -> None:
    from vitkit.model import build_model
    from vitkit.recipes import get_recipe

    counts = {
        name: build_model(get_recipe(name).model).num_params()
        for name in ("fmnist", "fmnist-resnet", "fmnist-hybrid")
    }
    assert counts == {"fmnist": 805_130, "fmnist-resnet": 813_258, "fmnist-hybrid": 1_672_522}
    # the hybrid is the ResNet's backbone (head aside) feeding the ViT through a 1x1 projection
    backbone = counts["fmnist-resnet"] - (512 * 10 + 10)
    vit_without_stem = counts["fmnist"] - (7 * 7 * 128 + 128)
    assert counts["fmnist-hybrid"] == backbone + vit_without_stem + 512 * 128 + 128


# ---------------------------------------------------------------- non-square grids


def test_image_size_is_an_int_or_a_height_width_pair() -> None:
    cfg = tiny(image_size=(24, 40))
    assert (cfg.image_size, cfg.image_hw, cfg.grid) == ((24, 40), (24, 40), (3, 5))
    assert tiny(image_size=[24, 40]).image_size == (24, 40)  # a JSON list is a pair
    assert tiny(image_size=(32, 32)) == tiny()  # a square pair is stored as its int
    assert (tiny().image_hw, tiny().grid, tiny().grid_size) == ((32, 32), (4, 4), 4)
    assert ModelConfig.from_dict({**cfg.to_dict()}) == cfg
    assert cfg.to_dict()["image_size"] == [24, 40]
    assert replace(tiny(), {"image_size": (16, 48)}).grid == (2, 6)
    with pytest.raises(
        ConfigError,
        match=r"^model\.image_size=\(24, 30\) is not valid: expected each side a multiple of the total "
        r"stride 8 \(patch_size\)$",
    ):
        tiny(image_size=(24, 30))
    for bad in [(24,), (0, 8), (8, 8, 8), (8.0, 8), "32", (True, 8)]:
        with pytest.raises(
            ConfigError, match="expected an integer >= 1 or a pair of integers >= 1"
        ):
            tiny(image_size=bad)
    with pytest.raises(ConfigError, match="3x5 grid: use grid"):
        _ = cfg.grid_size


@pytest.mark.parametrize(
    ("old", "new"),
    [((3, 5), (6, 4)), ((4, 4), (3, 7)), ((5, 2), (5, 9)), ((2, 6), (4, 4))],
    ids=str,
)
def test_non_square_resize_matches_scipy_zoom_order1(old, new) -> None:
    scipy_ndimage = pytest.importorskip("scipy.ndimage")
    model = randomize(VisionTransformer(tiny(image_size=(old[0] * 8, old[1] * 8))))
    before = model.pos_embed.detach().clone()  # (1, 1 + gh*gw, D)
    model.resize_pos_embed(new)
    (gh, gw), (nh, nw) = old, new
    grid = before[0, 1:].reshape(gh, gw, 64).numpy()
    # the official resize (vit_jax checkpoint.py), with separate height and width factors
    expected = scipy_ndimage.zoom(grid, (nh / gh, nw / gw, 1), order=1)
    assert expected.shape == (nh, nw, 64)
    np.testing.assert_allclose(
        model.pos_embed[0, 1:].detach().reshape(nh, nw, 64), expected, atol=1e-5
    )
    torch.testing.assert_close(model.pos_embed[:, :1], before[:, :1])  # class token kept
    assert model.cfg.grid == new and model.cfg.image_hw == (nh * 8, nw * 8)


@pytest.mark.parametrize("posemb", ["learn", "sincos2d"])
def test_non_square_inference_interpolates_as_resize_does(posemb: str) -> None:
    model = randomize(VisionTransformer(tiny(image_size=(24, 40), posemb=posemb))).eval()
    x = torch.randn(2, 3, 48, 32)
    with torch.no_grad():
        on_the_fly = model(x)
        model.resize_pos_embed((6, 4))
        torch.testing.assert_close(model(x), on_the_fly)
    assert model.cfg.image_size == (48, 32)
    model.resize_pos_embed(5)  # a square grid is stored as an int
    assert model.cfg.image_size == 40 and model.pos_embed.shape[1] == 25 + (posemb == "learn")
    with pytest.raises(ValueError, match=r"grid=\(4, 0\) is not valid"):
        model.resize_pos_embed((4, 0))


def test_create_model_takes_a_height_width_pair() -> None:
    model = vitkit.create_model("ViT-mu/16", image_size=(32, 64), num_classes=3).eval()
    assert model.cfg.grid == (2, 4) and model.pos_embed.shape[1] == 1 + 8
    with torch.no_grad():
        assert model(torch.randn(1, 3, 32, 64)).shape == (1, 3)
    with pytest.raises(ValueError, match=r"image_size=\(32, 60\)"):
        vitkit.create_model("ViT-mu/16", image_size=(32, 60))


def test_grid_of_a_token_count() -> None:
    assert grid_of(15, expected=(3, 5), what="x", hint="y") == (3, 5)
    assert grid_of(16, expected=(3, 5), what="x", hint="y") == (4, 4)  # another size: square
    assert grid_of(9, what="x", hint="y") == (3, 3)
    with pytest.raises(
        ConfigError,
        match=r"^pe holds 6 patch tokens, which are not a square grid nor the expected 3x5: "
        r"do this$",
    ):
        grid_of(6, expected=(3, 5), what="pe", hint="do this")
    with pytest.raises(ConfigError, match="15 patch tokens, which are not a square grid: h"):
        grid_of(15, what="pe", hint="h")
    model = randomize(VisionTransformer(tiny(image_size=(24, 40)))).eval()
    x = torch.randn(1, 3, 24, 40)
    with torch.no_grad():
        patches = model.embed_patches(x)  # (1, 15, D): the model's own 3x5 grid
        torch.testing.assert_close(model.encode(patches), model.forward_features(x))
        with pytest.raises(ValueError, match="pass grid="):
            model.encode(patches[:, :6])


def test_non_square_timm_module_converts_and_its_state_dict_needs_the_module() -> None:
    peer = randomize(
        timm_vit(
            gap=False,
            img_size=(24, 40),
            patch_size=8,
            embed_dim=64,
            depth=2,
            num_heads=4,
            num_classes=5,
        )
    )
    ours = vitkit.load(peer)
    assert ours.cfg.image_size == (24, 40)
    x = torch.randn(2, 3, 24, 40)
    with torch.no_grad():
        assert (ours(x) - peer(x)).abs().max() <= 1e-5 and peer(x).abs().mean() > 0.1
    with pytest.raises(CheckpointError, match=r"15 patch tokens.*load the timm module itself"):
        vitkit.load(peer.state_dict(), num_heads=4)


def test_posemb_similarity_of_a_non_square_grid() -> None:
    from vitkit.inspect.posemb import posemb_similarity

    model = randomize(VisionTransformer(tiny(image_size=(24, 40))))
    sim = posemb_similarity(model)  # (gh, gw, gh, gw)
    assert sim.shape == (3, 5, 3, 5)
    pe = model.pos_embed.detach()[0, 1:].reshape(3, 5, 64)  # row-major patch order
    expected = torch.nn.functional.cosine_similarity(pe[1, 4], pe[2, 0], dim=0)
    torch.testing.assert_close(sim[1, 4, 2, 0], expected)
