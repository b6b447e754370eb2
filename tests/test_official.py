"""The official vit_jax / big_vision ``.npz`` importer (``vitkit.io.formats.official``).

The proof is not circular: random arrays are written in each official layout by a writer that
knows only the official names and shapes, and the logits of the imported vitkit model are compared
with (a) a re-statement of the official Flax forward pass in plain torch ops that reads those arrays
with Flax conventions (HWIO convs, TF 'SAME' padding, weight standardisation, GroupNorm, tanh GELU,
(D, H, Dh) attention kernels, big_vision's MAPHead) [PAPER.md A1, A2, A10; vit_jax models_vit.py,
models_resnet.py; big_vision models/vit.py], and (b) timm's own ``.npz`` loader where timm supports
the layout.
"""

from __future__ import annotations

import functools
import io
import math
import zipfile
from dataclasses import dataclass, replace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import vitkit
from vitkit.config import ResNetConfig
from vitkit.io.checkpoint import CheckpointError, load_state_dict_strict, read_npz
from vitkit.io.formats.official import read_official
from vitkit.model.vit import VisionTransformer

LAYOUTS = ("released", "flax", "big_vision", "big_vision_scan")
BLOCK_NAMES = {  # (first LayerNorm, attention, second LayerNorm, MLP) inside an encoder block
    "released": ("LayerNorm_0", "MultiHeadDotProductAttention_1", "LayerNorm_2", "MlpBlock_3"),
    "current": ("LayerNorm_0", "MultiHeadDotProductAttention_0", "LayerNorm_1", "MlpBlock_0"),
}


@dataclass(frozen=True)
class Spec:
    """A tiny official checkpoint: its layout and architecture."""

    layout: str = "released"
    hidden: int = 32
    layers: int = 2
    heads: int = 2
    mlp: int = 64
    patch: int = 8
    image: int = 32
    chans: int = 3
    classifier: str = "token"  # or "gap", or "map" (big_vision's MAPHead_0)
    rep: int | None = None
    classes: int = 5
    resnet: tuple[int, ...] | None = None  # units per ResNet stage; () = root only
    root_width: int = 64  # int(64 * width_factor) channels of conv_root; stage s is 2**s as wide
    stored_posemb: bool = True  # big_vision: learned (stored) posemb, else fixed sincos2d

    @property
    def big_vision(self) -> bool:
        return self.layout.startswith("big_vision")

    @property
    def prefix(self) -> str:
        return "params/" if self.big_vision else ""

    @property
    def names(self) -> tuple[str, str, str, str]:
        return BLOCK_NAMES["released" if self.layout == "released" else "current"]

    @property
    def stride(self) -> int:
        if self.resnet is None:
            return self.patch
        return self.patch * 4 * 2 ** max(len(self.resnet) - 1, 0)


# ------------------------------------------------------------------ the writer (official layouts)


def official_arrays(spec: Spec, seed: int = 0) -> dict[str, np.ndarray]:
    """Random arrays in ``spec.layout``, scaled so that every activation and logit is O(1)."""
    rng = np.random.default_rng(seed)

    def normal(shape: tuple[int, ...], std: float) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    def conv(shape: tuple[int, ...]) -> np.ndarray:
        # Small per-channel scales, so the +1e-5 of weight standardisation shows in the logits.
        return normal(shape, 1.0) * rng.uniform(5e-4, 2e-3, shape[-1]).astype(np.float32)

    def norm(p: dict, name: str, c: int) -> None:
        p[f"{name}/scale"] = 1.0 + normal((c,), 0.1)
        p[f"{name}/bias"] = normal((c,), 0.1)

    def dense(p: dict, name: str, kernel: tuple[int, ...], bias: tuple[int, ...]) -> None:
        fan_in = kernel[0] if len(bias) == 2 else math.prod(kernel[:-1])  # q/k/v: (D, H, Dh)
        p[f"{name}/kernel"] = normal(kernel, fan_in**-0.5)
        p[f"{name}/bias"] = normal(bias, 0.1)

    D, H, M, P = spec.hidden, spec.heads, spec.mlp, spec.patch
    p: dict[str, np.ndarray] = {}
    cin = spec.chans
    if spec.resnet is not None:
        root = spec.root_width
        p["conv_root/kernel"] = conv((7, 7, cin, root))  # HWIO
        norm(p, "gn_root", root)
        cin = root
        for s, units in enumerate(spec.resnet, start=1):
            width = root * 2 ** (s - 1)  # vit_jax: ResNetStage(nout=width * 2**i)
            for u in range(1, units + 1):
                unit = f"block{s}/unit{u}"
                if u == 1:
                    p[f"{unit}/conv_proj/kernel"] = conv((1, 1, cin, 4 * width))
                    norm(p, f"{unit}/gn_proj", 4 * width)
                p[f"{unit}/conv1/kernel"] = conv((1, 1, cin, width))
                p[f"{unit}/conv2/kernel"] = conv((3, 3, width, width))
                p[f"{unit}/conv3/kernel"] = conv((1, 1, width, 4 * width))
                for k, c in ((1, width), (2, width), (3, 4 * width)):
                    norm(p, f"{unit}/gn{k}", c)
                cin = 4 * width
    dense(p, "embedding", (P, P, cin, D), (D,))  # HWIO
    token = spec.classifier == "token"
    if token:
        p["cls"] = normal((1, 1, D), 0.5)
    n = (spec.image // spec.stride) ** 2
    if not spec.big_vision:
        p["Transformer/posembed_input/pos_embedding"] = normal((1, n + token, D), 0.5)
    elif spec.stored_posemb:
        p["pos_embedding"] = normal((1, n, D), 0.5)
    ln1, mha, ln2, mlp = spec.names
    blocks = []
    for _ in range(spec.layers):
        b: dict[str, np.ndarray] = {}
        norm(b, ln1, D)
        for name in ("query", "key", "value"):
            dense(b, f"{mha}/{name}", (D, H, D // H), (H, D // H))
        dense(b, f"{mha}/out", (H, D // H, D), (D,))
        norm(b, ln2, D)
        dense(b, f"{mlp}/Dense_0", (D, M), (M,))
        dense(b, f"{mlp}/Dense_1", (M, D), (D,))
        blocks.append(b)
    if spec.layout == "big_vision_scan":  # nn.scan stacks every block array on a layer axis
        p.update({f"Transformer/encoderblock/{k}": np.stack([b[k] for b in blocks]) for k in b})
    else:
        for i, b in enumerate(blocks):
            p.update({f"Transformer/encoderblock_{i}/{k}": v for k, v in b.items()})
    norm(p, "Transformer/encoder_norm", D)
    if spec.classifier == "map":  # big_vision MAPHead: probe, attention, LayerNorm, MlpBlock
        p["MAPHead_0/probe"] = normal((1, 1, D), 0.5)
        for name in ("query", "key", "value"):
            dense(
                p, f"MAPHead_0/MultiHeadDotProductAttention_0/{name}", (D, H, D // H), (H, D // H)
            )
        dense(p, "MAPHead_0/MultiHeadDotProductAttention_0/out", (H, D // H, D), (D,))
        norm(p, "MAPHead_0/LayerNorm_0", D)
        dense(p, "MAPHead_0/MlpBlock_0/Dense_0", (D, M), (M,))
        dense(p, "MAPHead_0/MlpBlock_0/Dense_1", (M, D), (D,))
    if spec.rep:
        dense(p, "pre_logits", (D, spec.rep), (spec.rep,))
    if spec.classes:
        dense(p, "head", (spec.rep or D, spec.classes), (spec.classes,))
    return {spec.prefix + k: v for k, v in p.items()}


# ------------------------------------------------------------------ the official forward, restated


def same_pads(size: int, kernel: int, stride: int) -> tuple[int, int]:
    """TensorFlow / lax 'SAME': total pad so that out = ceil(size / stride), odd pixel after."""
    total = max((-(-size // stride) - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


def pad_nhwc(x: torch.Tensor, kernel: int, stride: int, value: float = 0.0) -> torch.Tensor:
    (top, bottom), (left, right) = (same_pads(x.shape[i], kernel, stride) for i in (1, 2))
    return F.pad(x, (0, 0, left, right, top, bottom), value=value)


def conv_hwio(x: torch.Tensor, kernel: torch.Tensor, stride: int, same: bool) -> torch.Tensor:
    """Flax ``nn.Conv`` without bias: x (B, H, W, C), kernel (kh, kw, C, O) -> (B, H', W', O)."""
    kh, kw = kernel.shape[:2]
    if same:
        x = pad_nhwc(x, kh, stride)
    B, Hp, Wp, C = x.shape
    cols = F.unfold(x.permute(0, 3, 1, 2), (kh, kw), stride=stride)  # (B, C*kh*kw, H'*W')
    cols = cols.reshape(B, C, kh, kw, (Hp - kh) // stride + 1, (Wp - kw) // stride + 1)
    return torch.einsum("bcijhw,ijco->bhwo", cols, kernel)


def std_conv(x: torch.Tensor, kernel: torch.Tensor, stride: int) -> torch.Tensor:
    """vit_jax ``StdConv``: standardise the kernel over (kh, kw, in), then a 'SAME' conv."""
    mean = kernel.mean(dim=(0, 1, 2), keepdim=True)
    std = kernel.std(dim=(0, 1, 2), keepdim=True, unbiased=False)
    return conv_hwio(x, (kernel - mean) / (std + 1e-5), stride, same=True)


def group_norm(x: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """Flax ``nn.GroupNorm`` defaults: 32 groups, eps 1e-6, over (H, W, C / 32) per group."""
    B, H, W, C = x.shape
    g = x.reshape(B, H, W, 32, C // 32)
    mean = g.mean(dim=(1, 2, 4), keepdim=True)
    var = g.var(dim=(1, 2, 4), keepdim=True, unbiased=False)
    return ((g - mean) / torch.sqrt(var + 1e-6)).reshape(B, H, W, C) * scale + bias


def layer_norm(x: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    mean = x.mean(dim=-1, keepdim=True)
    var = x.var(dim=-1, keepdim=True, unbiased=False)
    return (x - mean) / torch.sqrt(var + 1e-6) * scale + bias


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:  # flax nn.gelu (approximate=True)
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x**3)))


def sincos2d(h: int, w: int, width: int, temperature: float = 10_000.0) -> np.ndarray:
    """big_vision ``posemb_sincos_2d``, as written there."""
    y, x = np.mgrid[:h, :w]
    omega = np.arange(width // 4) / (width // 4 - 1)
    omega = 1.0 / (temperature**omega)
    y = np.einsum("m,d->md", y.flatten(), omega)
    x = np.einsum("m,d->md", x.flatten(), omega)
    return np.concatenate([np.sin(x), np.cos(x), np.sin(y), np.cos(y)], axis=1)[None]


def reference_logits(arrays: dict[str, np.ndarray], spec: Spec, images: torch.Tensor):
    """The official JAX forward in float64: images (B, C, H, W) -> logits (B, K)."""

    def a(key: str, layer: int | None = None) -> torch.Tensor:
        t = torch.from_numpy(arrays[spec.prefix + key]).double()
        return t if layer is None else t[layer]

    def gn(x: torch.Tensor, name: str) -> torch.Tensor:
        return group_norm(x, a(f"{name}/scale"), a(f"{name}/bias"))

    def ln(x: torch.Tensor, name: str, layer: int | None = None) -> torch.Tensor:
        return layer_norm(x, a(f"{name}/scale", layer), a(f"{name}/bias", layer))

    def attention(
        x: torch.Tensor, inputs: torch.Tensor, name: str, layer: int | None = None
    ) -> torch.Tensor:
        """flax MultiHeadDotProductAttention ``name``: queries from x (B, Q, D), keys and values
        from inputs (B, T, D) -> (B, Q, D)."""

        def w(leaf: str) -> torch.Tensor:
            return a(f"{name}/{leaf}", layer)

        q = torch.einsum("bqd,dhk->bqhk", x, w("query/kernel")) + w("query/bias")
        k, v = (
            torch.einsum("btd,dhk->bthk", inputs, w(f"{n}/kernel")) + w(f"{n}/bias")
            for n in ("key", "value")
        )  # (B, T, H, Dh) each
        q = q / math.sqrt(q.shape[-1])
        attn = torch.einsum("bqhk,bthk->bhqt", q, k).softmax(dim=-1)  # (B, H, Q, T)
        y = torch.einsum("bhqt,bthk->bqhk", attn, v)  # (B, Q, H, Dh)
        return torch.einsum("bqhk,hkd->bqd", y, w("out/kernel")) + w("out/bias")

    def mlp_block(x: torch.Tensor, name: str, layer: int | None = None) -> torch.Tensor:
        y = gelu_tanh(x @ a(f"{name}/Dense_0/kernel", layer) + a(f"{name}/Dense_0/bias", layer))
        return y @ a(f"{name}/Dense_1/kernel", layer) + a(f"{name}/Dense_1/bias", layer)

    x = images.double().permute(0, 2, 3, 1)  # (B, H, W, C): flax is channels-last
    if spec.resnet is not None:  # vit_jax models_vit.py + models_resnet.py
        x = F.relu(gn(std_conv(x, a("conv_root/kernel"), 2), "gn_root"))
        x = pad_nhwc(x, 3, 2, value=-math.inf)  # nn.max_pool 'SAME' pads with -inf
        x = x.unfold(1, 3, 2).unfold(2, 3, 2).amax(dim=(-2, -1))  # (B, H/4, W/4, C)
        for s, units in enumerate(spec.resnet, start=1):
            for u in range(1, units + 1):
                unit, stride = f"block{s}/unit{u}", 2 if (u == 1 and s > 1) else 1
                residual = x
                if f"{spec.prefix}{unit}/conv_proj/kernel" in arrays:
                    residual = gn(
                        std_conv(x, a(f"{unit}/conv_proj/kernel"), stride), f"{unit}/gn_proj"
                    )
                y = F.relu(gn(std_conv(x, a(f"{unit}/conv1/kernel"), 1), f"{unit}/gn1"))
                y = F.relu(gn(std_conv(y, a(f"{unit}/conv2/kernel"), stride), f"{unit}/gn2"))
                y = gn(std_conv(y, a(f"{unit}/conv3/kernel"), 1), f"{unit}/gn3")
                x = F.relu(residual + y)
    x = conv_hwio(x, a("embedding/kernel"), spec.patch, same=False) + a("embedding/bias")
    B, gh, gw, D = x.shape
    x = x.reshape(B, gh * gw, D)  # (B, N, D)
    cls = [a("cls").expand(B, 1, D)] if spec.classifier == "token" else []
    if spec.big_vision:  # posemb on the patches, then the class token
        pe = a("pos_embedding") if spec.stored_posemb else torch.from_numpy(sincos2d(gh, gw, D))
        x = torch.cat([*cls, x + pe], dim=1)
    else:  # vit_jax: class token, then posemb on every token
        x = torch.cat([*cls, x], dim=1) + a("Transformer/posembed_input/pos_embedding")
    ln1, mha, ln2, mlp = spec.names
    for i in range(spec.layers):
        block = "Transformer/encoderblock" + ("" if spec.layout == "big_vision_scan" else f"_{i}")
        layer = i if spec.layout == "big_vision_scan" else None
        y = ln(x, f"{block}/{ln1}", layer)
        x = x + attention(y, y, f"{block}/{mha}", layer)
        x = x + mlp_block(ln(x, f"{block}/{ln2}", layer), f"{block}/{mlp}", layer)
    x = ln(x, "Transformer/encoder_norm")
    if spec.classifier == "map":  # big_vision MAPHead on the normed tokens
        probe = a("MAPHead_0/probe").expand(B, 1, D)  # jnp.tile(probe, [n, 1, 1])
        y = attention(probe, x, "MAPHead_0/MultiHeadDotProductAttention_0")  # (B, 1, D)
        y = y + mlp_block(ln(y, "MAPHead_0/LayerNorm_0"), "MAPHead_0/MlpBlock_0")
        x = y[:, 0]  # (B, D)
    else:
        x = x[:, 0] if spec.classifier == "token" else x.mean(dim=1)
    if spec.rep:
        x = torch.tanh(x @ a("pre_logits/kernel") + a("pre_logits/bias"))
    if spec.classes:
        x = x @ a("head/kernel") + a("head/bias")
    return x


# ------------------------------------------------------------------ helpers


def images_for(spec: Spec, batch: int = 2) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    return torch.randn(batch, spec.chans, spec.image, spec.image, generator=g)


def vitkit_logits(arrays: dict[str, np.ndarray], images: torch.Tensor, **kwargs):
    cfg, state = read_official(arrays, **kwargs)
    model = VisionTransformer(cfg)
    load_state_dict_strict(model, state)
    with torch.no_grad():
        return model.eval()(images), cfg


def assert_logits_close(got: torch.Tensor, want: torch.Tensor) -> None:
    assert want.abs().max() > 0.1  # a real signal, not a zero head
    torch.testing.assert_close(got.double(), want.double(), atol=1e-5, rtol=0)


# ------------------------------------------------------------------ parity with the official forward


@pytest.mark.parametrize("rep", [None, 24])
@pytest.mark.parametrize("classifier", ["token", "gap"])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_matches_official_forward(layout: str, classifier: str, rep: int | None) -> None:
    spec = Spec(layout=layout, classifier=classifier, rep=rep)
    arrays = official_arrays(spec)
    images = images_for(spec)
    got, cfg = vitkit_logits(arrays, images)
    assert (cfg.classifier, cfg.representation_size, cfg.num_classes) == (classifier, rep, 5)
    assert (cfg.image_size, cfg.patch_size, cfg.num_layers, cfg.num_heads) == (32, 8, 2, 2)
    assert (cfg.hidden_size, cfg.mlp_dim, cfg.act, cfg.posemb) == (32, 64, "gelu_tanh", "learn")
    assert_logits_close(got, reference_logits(arrays, spec, images))


@pytest.mark.parametrize("classifier", ["token", "gap"])
@pytest.mark.parametrize("layout", ["big_vision", "big_vision_scan"])
def test_big_vision_fixed_sincos_posemb(layout: str, classifier: str) -> None:
    spec = Spec(layout=layout, classifier=classifier, stored_posemb=False, image=40)
    arrays = official_arrays(spec)
    images = images_for(spec)
    got, cfg = vitkit_logits(arrays, images)
    # No stored posemb fixes the grid: 224 rounded to the stride (the model runs at any size).
    assert (cfg.posemb, cfg.image_size) == ("sincos2d", 224)
    assert_logits_close(got, reference_logits(arrays, spec, images))
    assert read_official(arrays, posemb="none")[0].posemb == "none"


@pytest.mark.parametrize("rep", [None, 24])
@pytest.mark.parametrize("layout", ["big_vision", "big_vision_scan"])
def test_big_vision_map_head_matches_big_vision_forward(layout: str, rep: int | None) -> None:
    spec = Spec(layout=layout, classifier="map", rep=rep, heads=4)
    arrays = official_arrays(spec)
    images = images_for(spec)
    got, cfg = vitkit_logits(arrays, images)
    assert (cfg.classifier, cfg.num_prefix_tokens, cfg.num_heads) == ("map", 0, 4)
    assert_logits_close(got, reference_logits(arrays, spec, images))


def test_big_vision_map_head_with_fixed_posemb_and_no_head() -> None:
    spec = Spec(layout="big_vision", classifier="map", stored_posemb=False, classes=0)
    arrays = official_arrays(spec)
    images = images_for(spec)
    got, cfg = vitkit_logits(arrays, images)
    assert (cfg.posemb, cfg.num_classes, got.shape) == ("sincos2d", 0, (2, spec.hidden))
    assert_logits_close(got, reference_logits(arrays, spec, images))


@pytest.mark.parametrize(
    ("layout", "resnet", "patch", "image", "classifier", "rep"),
    [
        ("released", (), 1, 36, "token", None),  # root only, odd 9x9 map: asymmetric SAME pads
        ("flax", (), 2, 32, "gap", 24),
        ("released", (1, 1), 1, 64, "token", 24),  # two stages, 8x8 tokens
        ("flax", (1, 2), 1, 40, "gap", None),  # 40 -> 20 -> 10 -> 5: odd map after a stride-2 unit
    ],
)
def test_hybrid_matches_official_forward(layout, resnet, patch, image, classifier, rep) -> None:
    spec = Spec(
        layout=layout,
        resnet=resnet,
        patch=patch,
        image=image,
        classifier=classifier,
        rep=rep,
        layers=1,
    )
    arrays = official_arrays(spec)
    images = images_for(spec)
    got, cfg = vitkit_logits(arrays, images)
    assert cfg.resnet == ResNetConfig(num_layers=resnet, width_factor=1)
    assert (cfg.image_size, cfg.patch_size, cfg.in_chans) == (image, patch, 3)
    assert_logits_close(got, reference_logits(arrays, spec, images))


@pytest.mark.parametrize(
    ("root_width", "resnet", "width_factor"),
    [(32, (1, 1), 0.5), (96, (1,), 1.5), (128, (), 2)],
)
def test_hybrid_of_any_width_matches_official_forward(root_width, resnet, width_factor) -> None:
    # vit_jax: width = int(64 * width_factor); a 32-channel root is width_factor 0.5.
    spec = Spec(resnet=resnet, root_width=root_width, patch=1, image=32, layers=1)
    arrays = official_arrays(spec)
    images = images_for(spec)
    got, cfg = vitkit_logits(arrays, images)
    assert cfg.resnet == ResNetConfig(num_layers=resnet, width_factor=width_factor)
    assert cfg.resnet.width == root_width
    assert_logits_close(got, reference_logits(arrays, spec, images))


def test_hybrid_width_groupnorm_cannot_divide_is_refused() -> None:
    arrays = official_arrays(Spec(resnet=(1,), root_width=64, patch=1, image=32, layers=1))
    arrays["conv_root/kernel"] = arrays["conv_root/kernel"][..., :48]  # 48 channels
    with pytest.raises(CheckpointError) as err:
        read_official(arrays)
    message = str(err.value)
    assert "\n" not in message
    assert "found 48 channels" in message and "32 groups" in message


def test_vit_jax_training_state_prefix() -> None:
    spec = Spec()
    arrays = official_arrays(spec)
    cfg, state = read_official(arrays)
    cfg2, state2 = read_official({f"opt/target/{k}": v for k, v in arrays.items()})
    assert cfg2 == cfg
    assert state2.keys() == state.keys()
    assert all(torch.equal(state[k], state2[k]) for k in state)


def test_no_head_means_features() -> None:
    spec = Spec(classes=0, rep=24, layout="flax")
    arrays = official_arrays(spec)
    images = images_for(spec)
    got, cfg = vitkit_logits(arrays, images)
    assert (cfg.num_classes, got.shape) == (0, (2, 24))
    assert_logits_close(got, reference_logits(arrays, spec, images))


# ------------------------------------------------------------------ parity with timm's loader


@pytest.mark.parametrize(
    ("layout", "classifier"),
    [
        ("released", "token"),
        ("released", "gap"),
        ("big_vision", "token"),
        ("big_vision_scan", "token"),
        ("big_vision_scan", "gap"),
        ("big_vision", "map"),
        ("big_vision_scan", "map"),
    ],
)
def test_matches_timm_npz_loader(tmp_path, layout: str, classifier: str) -> None:
    from timm.models.vision_transformer import VisionTransformer as TimmViT
    from timm.models.vision_transformer import _load_weights

    spec = Spec(layout=layout, classifier=classifier)
    arrays = official_arrays(spec)
    path = tmp_path / "vit.npz"
    np.savez(path, **arrays)
    token = classifier == "token"
    timm_model = TimmViT(
        img_size=spec.image,
        patch_size=spec.patch,
        embed_dim=spec.hidden,
        depth=spec.layers,
        num_heads=spec.heads,
        mlp_ratio=spec.mlp / spec.hidden,
        num_classes=spec.classes,
        act_layer=functools.partial(torch.nn.GELU, approximate="tanh"),
        norm_layer=functools.partial(torch.nn.LayerNorm, eps=1e-6),
        class_token=token,
        global_pool={"token": "token", "gap": "avg"}.get(classifier, classifier),
        fc_norm=False,
        no_embed_class=spec.big_vision,  # big_vision: posemb on the patches only
    )
    _load_weights(timm_model, str(path))
    images = images_for(spec)
    with torch.no_grad():
        want = timm_model.eval()(images)
    got, _ = vitkit_logits(read_npz(path), images)  # the same file, through our safe reader
    assert_logits_close(got, want)


# ------------------------------------------------------------------ every tensor lands in its place


def test_tensors_land_where_they_belong() -> None:
    spec = Spec(resnet=(1, 1), patch=1, image=64, rep=24, layers=2, heads=4)
    arrays = official_arrays(spec)
    cfg, state = read_official(arrays)
    D = spec.hidden
    mha = "Transformer/encoderblock_1/MultiHeadDotProductAttention_1"
    key = arrays[f"{mha}/key/kernel"].reshape(D, D).T  # (D, H, Dh) -> (H*Dh, D)
    torch.testing.assert_close(state["blocks.1.attn.qkv.weight"][D : 2 * D].numpy(), key)
    value = arrays[f"{mha}/value/bias"].reshape(D)
    torch.testing.assert_close(state["blocks.1.attn.qkv.bias"][2 * D :].numpy(), value)
    out = arrays[f"{mha}/out/kernel"].reshape(D, D).T  # (H, Dh, D) -> (D, H*Dh)
    torch.testing.assert_close(state["blocks.1.attn.proj.weight"].numpy(), out)
    fc1 = arrays["Transformer/encoderblock_0/MlpBlock_3/Dense_0/kernel"].T
    torch.testing.assert_close(state["blocks.0.mlp.fc1.weight"].numpy(), fc1)
    norm2 = arrays["Transformer/encoderblock_0/LayerNorm_2/scale"]
    torch.testing.assert_close(state["blocks.0.norm2.weight"].numpy(), norm2)
    proj = arrays["block2/unit1/conv_proj/kernel"].transpose(3, 2, 0, 1)  # HWIO -> OIHW
    down = "patch_embed.backbone.stages.1.blocks.0.downsample"
    torch.testing.assert_close(state[f"{down}.conv.weight"].numpy(), proj)
    torch.testing.assert_close(
        state[f"{down}.norm.bias"].numpy(), arrays["block2/unit1/gn_proj/bias"]
    )
    stem = arrays["conv_root/kernel"].transpose(3, 2, 0, 1)
    torch.testing.assert_close(state["patch_embed.backbone.stem.conv.weight"].numpy(), stem)
    torch.testing.assert_close(state["pre_logits.fc.weight"].numpy(), arrays["pre_logits/kernel"].T)
    torch.testing.assert_close(state["head.weight"].numpy(), arrays["head/kernel"].T)
    assert cfg.num_heads == 4
    assert not any(k.startswith("blocks.2") for k in state)


def test_big_vision_scan_tensors_and_class_slot() -> None:
    spec = Spec(layout="big_vision_scan")
    arrays = official_arrays(spec)
    _, state = read_official(arrays)
    stacked = arrays["params/Transformer/encoderblock/LayerNorm_1/scale"]  # (L, D)
    torch.testing.assert_close(state["blocks.1.norm2.weight"].numpy(), stacked[1])
    pe = state["pos_embed"]  # (1, 1+N, D): big_vision's class token has no posemb
    assert pe.shape == (1, 17, spec.hidden)
    assert torch.equal(pe[:, 0], torch.zeros(1, spec.hidden))
    torch.testing.assert_close(pe[:, 1:].numpy(), arrays["params/pos_embedding"])


# ------------------------------------------------------------------ bad input


def test_missing_and_unused_arrays_are_listed_in_one_error() -> None:
    arrays = official_arrays(Spec())
    del arrays["Transformer/encoder_norm/bias"]
    del arrays["Transformer/encoderblock_1/MlpBlock_3/Dense_1/kernel"]
    arrays["Transformer/encoderblock_0/Extra_9/kernel"] = np.zeros((2, 2), np.float32)
    with pytest.raises(CheckpointError) as err:
        read_official(arrays)
    message = str(err.value)
    assert "missing (2)" in message and "not used (1)" in message
    for name in (
        "Transformer/encoder_norm/bias",
        "Transformer/encoderblock_1/MlpBlock_3/Dense_1/kernel",
        "Transformer/encoderblock_0/Extra_9/kernel",
    ):
        assert name in message


def npz_declaring(path, arrays: dict[str, np.ndarray], name: str, shape: tuple[int, ...]) -> None:
    """``arrays`` as an ``.npz`` at ``path``, with the member ``name`` (added, or in place of the
    array of that name) an ``.npy`` header that declares float32 ``shape`` and no data."""
    with zipfile.ZipFile(path, "w") as archive:
        for key, array in arrays.items():
            if key != name:
                npy = io.BytesIO()
                np.save(npy, array)
                archive.writestr(f"{key}.npy", npy.getvalue())
        header = io.BytesIO()
        np.lib.format.write_array_header_1_0(
            header, {"descr": "<f4", "fortran_order": False, "shape": shape}
        )
        archive.writestr(f"{name}.npy", header.getvalue())


@pytest.mark.parametrize(
    ("name", "match"),
    [
        (
            "Transformer/encoderblock_0/Extra_9/kernel",
            r"not used \(1\): Transformer/encoderblock_0/",
        ),
        (
            "Transformer/encoderblock_1/MlpBlock_3/Dense_1/kernel",
            r"shape mismatch \(1\): Transformer/encoderblock_1/MlpBlock_3/Dense_1/kernel: "
            r"model \(64, 32\) vs file \(1099511627776, 32\)",
        ),
    ],
    ids=["unknown-name", "wrong-shape"],
)
def test_npz_names_and_shapes_are_checked_from_headers_before_reading(
    tmp_path, name: str, match: str
) -> None:
    """An array of 128 TiB that the file only declares is refused from its header: reading the
    arrays first (numpy allocates an array, then fills it) was a MemoryError traceback. The
    issue's 1 MB .npz holding 1 GiB of zeros under a name the model does not have reached 2.0 GB
    resident before that name was checked; now 0.76 GB, what importing vitkit takes."""
    path = tmp_path / "vit.npz"
    npz_declaring(path, official_arrays(Spec()), name, (2**40, 32))
    with pytest.raises(CheckpointError, match=match):
        vitkit.load(path)


def test_map_head_with_other_heads_than_the_encoder_is_refused() -> None:
    arrays = official_arrays(Spec(layout="big_vision", classifier="map"))  # 2 heads of 16
    query = "params/MAPHead_0/MultiHeadDotProductAttention_0/query/kernel"
    arrays[query] = arrays[query].reshape(32, 4, 8)  # 4 heads of 8
    with pytest.raises(CheckpointError, match="has 4 heads: expected the encoder's 2"):
        read_official(arrays)


def test_map_head_arrays_are_all_needed() -> None:
    arrays = official_arrays(Spec(layout="big_vision_scan", classifier="map"))
    del arrays["params/MAPHead_0/MlpBlock_0/Dense_1/bias"]
    with pytest.raises(
        CheckpointError, match=r"missing \(1\): params/MAPHead_0/MlpBlock_0/Dense_1"
    ):
        read_official(arrays)


def test_non_square_posemb_is_refused() -> None:
    arrays = official_arrays(Spec())
    key = "Transformer/posembed_input/pos_embedding"
    arrays[key] = arrays[key][:, :16]  # class slot + 15 patches
    with pytest.raises(CheckpointError, match="not a square"):
        read_official(arrays)


def test_posemb_argument_must_agree_with_the_file() -> None:
    with pytest.raises(CheckpointError, match="stores a learned one"):
        read_official(official_arrays(Spec()), posemb="sincos2d")
    fixed = official_arrays(replace(Spec(layout="big_vision"), stored_posemb=False))
    with pytest.raises(CheckpointError, match="stores no position embedding"):
        read_official(fixed, posemb="learn")
