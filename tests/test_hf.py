"""Hugging Face ViT in and out (io/formats/hf.py), proven against transformers itself.

Every converter is checked by logits: random-initialised transformers models (weights re-drawn so
that logits are O(1) and the classifier is not zero) must give vitkit's outputs within 1e-5, and a
vitkit model written with ``write_hf`` must read back bit for bit and load in transformers.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from helpers import file_size_limit
from vitkit.config import ConfigError, ModelConfig, ResNetConfig
from vitkit.data import Preprocess
from vitkit.io.checkpoint import CheckpointError, load_state_dict_strict, read_safetensors
from vitkit.io.formats.hf import (
    looks_like_hf_state,
    read_hf,
    read_hf_dir,
    read_hf_module,
    write_hf,
)
from vitkit.model import VisionTransformer

transformers = pytest.importorskip("transformers")

TOL = 1e-5

# Shapes and numerics to cover: hidden 32-64, 1-3 layers, 2-4 heads, patch 4/8, image 16-32,
# 1 or 3 channels, exact and tanh GELU, HF's eps 1e-12 and the official 1e-6.
HF_CASES = [
    dict(
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        patch_size=8,
        image_size=16,
        num_channels=3,
        hidden_act="gelu",
        layer_norm_eps=1e-12,
        num_labels=5,
    ),
    dict(
        hidden_size=48,
        num_hidden_layers=2,
        num_attention_heads=3,
        intermediate_size=96,
        patch_size=4,
        image_size=16,
        num_channels=1,
        hidden_act="gelu_pytorch_tanh",
        layer_norm_eps=1e-6,
        num_labels=3,
    ),
    dict(
        hidden_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        intermediate_size=128,
        patch_size=8,
        image_size=32,
        num_channels=3,
        hidden_act="gelu_new",
        layer_norm_eps=1e-6,
        num_labels=7,
    ),
    dict(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=48,
        patch_size=4,
        image_size=24,
        num_channels=3,
        hidden_act="gelu",
        layer_norm_eps=1e-12,
        num_labels=10,
    ),
]
SMALL = HF_CASES[0]


def _redraw(module: nn.Module, seed: int) -> nn.Module:
    """Every parameter re-drawn: LayerNorm scales 1 + N(0, 0.1), everything else N(0, 0.15)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            noise = torch.randn(p.shape, generator=g)
            p.copy_(1 + 0.1 * noise if p.ndim == 1 and name.endswith("weight") else 0.15 * noise)
    return module.eval()


def _images(fields: dict, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    size, chans = fields["image_size"], fields["num_channels"]
    height, width = (size, size) if isinstance(size, int) else size
    return torch.randn(2, chans, height, width, generator=g)  # (B, C, H, W)


def _hf_classifier(fields: dict, seed: int = 0) -> nn.Module:
    return _redraw(transformers.ViTForImageClassification(transformers.ViTConfig(**fields)), seed)


def _hf_backbone(fields: dict, *, pooler: bool, seed: int = 0) -> nn.Module:
    fields = {k: v for k, v in fields.items() if k != "num_labels"}
    model = transformers.ViTModel(transformers.ViTConfig(**fields), add_pooling_layer=pooler)
    return _redraw(model, seed)


def _vitkit(cfg: ModelConfig, state: dict[str, torch.Tensor]) -> VisionTransformer:
    model = VisionTransformer(cfg)
    load_state_dict_strict(model, state)
    return model.eval()


def _diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a - b).abs().max().item()


def _convert(hf_model: nn.Module, via: str, tmp_path: Path) -> VisionTransformer:
    if via == "module":
        return _vitkit(*read_hf_module(hf_model))
    hf_model.save_pretrained(tmp_path / "hf")
    cfg, state, _ = read_hf_dir(tmp_path / "hf")
    return _vitkit(cfg, state)


# ---------------------------------------------------------------- Hugging Face -> vitkit


@pytest.mark.parametrize("via", ["module", "dir"])
@pytest.mark.parametrize("case", range(len(HF_CASES)))
@torch.no_grad()
def test_classifier_logits_match_transformers(case: int, via: str, tmp_path: Path) -> None:
    fields = HF_CASES[case]
    hf = _hf_classifier(fields, seed=case)
    model = _convert(hf, via, tmp_path)
    cfg = model.cfg
    assert (cfg.hidden_size, cfg.num_layers, cfg.num_heads, cfg.mlp_dim) == (
        fields["hidden_size"],
        fields["num_hidden_layers"],
        fields["num_attention_heads"],
        fields["intermediate_size"],
    )
    assert cfg.num_classes == fields["num_labels"] and cfg.in_chans == fields["num_channels"]
    assert cfg.layer_norm_eps == fields["layer_norm_eps"]  # 1e-12 carried over, not 1e-6
    assert cfg.act == ("gelu" if fields["hidden_act"] == "gelu" else "gelu_tanh")
    assert cfg.representation_size is None and cfg.dropout_rate == 0.0

    x = _images(fields)
    out = hf(pixel_values=x)
    logits = model(x)  # (B, K)
    assert out.logits.abs().max() > 0.5  # O(1) logits: a zero classifier would prove nothing
    assert _diff(logits, out.logits) <= TOL
    tokens = hf.vit(pixel_values=x).last_hidden_state  # (B, T, D)
    assert _diff(model.forward_features(x), tokens) <= TOL


@pytest.mark.parametrize("via", ["module", "dir"])
@pytest.mark.parametrize("pooler_output_size", [None, 40])
@torch.no_grad()
def test_backbone_with_pooler_is_pre_logits(
    via: str, pooler_output_size: int | None, tmp_path: Path
) -> None:
    fields = {**HF_CASES[1], "pooler_output_size": pooler_output_size}
    hf = _hf_backbone(fields, pooler=True)
    model = _convert(hf, via, tmp_path)
    assert model.cfg.num_classes == 0
    assert model.cfg.representation_size == (pooler_output_size or fields["hidden_size"])
    x = _images(fields)
    out = hf(pixel_values=x)
    tokens = model.forward_features(x)  # (B, T, D)
    assert _diff(tokens, out.last_hidden_state) <= TOL
    assert _diff(model.forward_head(tokens, pre_logits=True), out.pooler_output) <= TOL  # (B, R)


@pytest.mark.parametrize("via", ["module", "dir"])
@torch.no_grad()
def test_backbone_without_pooler_returns_class_token(via: str, tmp_path: Path) -> None:
    fields = HF_CASES[2]
    hf = _hf_backbone(fields, pooler=False)
    model = _convert(hf, via, tmp_path)
    assert model.cfg.num_classes == 0 and model.cfg.representation_size is None
    x = _images(fields)
    out = hf(pixel_values=x)
    assert _diff(model(x), out.last_hidden_state[:, 0]) <= TOL  # (B, D): pooled features
    assert _diff(model.forward_features(x), out.last_hidden_state) <= TOL


@pytest.mark.parametrize("via", ["module", "dir"])
@torch.no_grad()
def test_height_width_image_size_converts(via: str, tmp_path: Path) -> None:
    fields = {**SMALL, "image_size": (16, 40)}  # ViTConfig's (height, width): a 2x5 grid
    hf = _hf_classifier(fields, seed=3)
    model = _convert(hf, via, tmp_path)
    assert model.cfg.image_size == (16, 40) and model.cfg.grid == (2, 5)
    x = _images(fields)
    out = hf(pixel_values=x)
    assert out.logits.abs().max() > 0.5
    assert _diff(model(x), out.logits) <= TOL
    assert _diff(model.forward_features(x), hf.vit(pixel_values=x).last_hidden_state) <= TOL


def test_looks_like_hf_state() -> None:
    hf = _hf_classifier(SMALL)
    assert looks_like_hf_state(hf.state_dict())  # "vit." prefix
    assert looks_like_hf_state(hf.vit.state_dict())  # bare ViTModel
    _, state = read_hf_module(hf)
    assert not looks_like_hf_state(state)


def test_bin_and_sharded_directories_read_the_same(tmp_path: Path) -> None:
    hf = _hf_classifier(SMALL)
    hf.save_pretrained(tmp_path / "one")
    cfg, state, _ = read_hf_dir(tmp_path / "one")

    # pytorch_model.bin (tensor-only, through torch.load(weights_only=True))
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "config.json").write_text((tmp_path / "one" / "config.json").read_text())
    torch.save(
        read_safetensors(tmp_path / "one" / "model.safetensors"),
        tmp_path / "bin" / "pytorch_model.bin",
    )
    # sharded safetensors with an index
    hf.save_pretrained(tmp_path / "sharded", max_shard_size="20KB")
    assert (tmp_path / "sharded" / "model.safetensors.index.json").is_file()

    for name in ("bin", "sharded"):
        cfg2, state2, _ = read_hf_dir(tmp_path / name)
        assert cfg2 == cfg and state2.keys() == state.keys()
        assert all(torch.equal(state[k], state2[k]) for k in state)


# ---------------------------------------------------------------- vitkit -> Hugging Face


def _random_vitkit(seed: int = 0, **fields) -> VisionTransformer:
    base = dict(image_size=16, patch_size=4, hidden_size=32, num_layers=2, num_heads=4, mlp_dim=64)
    torch.manual_seed(seed)
    return _redraw(VisionTransformer(ModelConfig(**{**base, **fields})), seed)


@torch.no_grad()
def test_round_trip_classifier(tmp_path: Path) -> None:
    model = _random_vitkit(num_classes=3, act="gelu_tanh")
    names = ["cat", "dog", "ship"]
    out = write_hf(model, tmp_path / "export", class_names=names)
    assert out == tmp_path / "export" and (out / "model.safetensors").is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["export"]  # no temporary sibling left
    meta = json.loads((out / "config.json").read_text())
    assert meta["model_type"] == "vit" and meta["id2label"] == {"0": "cat", "1": "dog", "2": "ship"}
    assert meta["hidden_act"] == "gelu_pytorch_tanh" and meta["layer_norm_eps"] == 1e-6

    cfg, state, meta = read_hf_dir(out)
    assert cfg == model.cfg  # the official preprocessing, written by default, comes back
    assert meta.to_dict() == {
        "class_names": names,
        "preprocess": Preprocess(image_size=16).to_dict(),
    }
    x = torch.randn(2, 3, 16, 16)
    logits = model(x)
    assert logits.abs().max() > 0.5
    assert torch.equal(_vitkit(cfg, state)(x), logits)

    hf = transformers.ViTForImageClassification.from_pretrained(out).eval()
    assert _diff(hf(pixel_values=x).logits, logits) <= TOL


@torch.no_grad()
def test_one_channel_model_becomes_rgb_by_luma(tmp_path: Path) -> None:
    """The export reads RGB as the 1-channel model reads its luma: kernel W becomes w_c W."""
    model = _random_vitkit(num_classes=3, in_chans=1)
    out = write_hf(model, tmp_path / "export")
    assert json.loads((out / "config.json").read_text())["num_channels"] == 3
    cfg, state, meta = read_hf_dir(out)
    assert cfg == dataclasses.replace(model.cfg, in_chans=3)
    assert meta.to_dict() == {"preprocess": Preprocess(image_size=16, in_chans=3).to_dict()}
    kernel = model.patch_embed.proj.weight  # (D, 1, P, P)
    luma = torch.tensor([0.299, 0.587, 0.114]).view(1, 3, 1, 1)
    assert torch.equal(state["patch_embed.proj.weight"], kernel * luma)  # (D, 3, P, P)

    rgb = torch.rand(2, 3, 16, 16) * 2 - 1  # normalised R, G, B
    gray = (rgb * luma).sum(1, keepdim=True)  # the normalised luma: the weights sum to 1
    logits = model(gray)
    assert logits.abs().max() > 0.5
    hf = transformers.ViTForImageClassification.from_pretrained(out).eval()
    assert _diff(hf(pixel_values=rgb).logits, logits) <= TOL
    assert _diff(_vitkit(cfg, state)(rgb), logits) <= TOL


@pytest.mark.parametrize("representation_size", [None, 32, 48])
@torch.no_grad()
def test_round_trip_backbone(representation_size: int | None, tmp_path: Path) -> None:
    model = _random_vitkit(num_classes=0, representation_size=representation_size)
    out = write_hf(model, tmp_path / "export")
    cfg, state, meta = read_hf_dir(out)
    assert cfg == model.cfg and meta.to_dict() == {
        "preprocess": Preprocess(image_size=16).to_dict()
    }
    x = torch.randn(2, 3, 16, 16)
    features = model(x)  # (B, R or D)
    assert torch.equal(_vitkit(cfg, state)(x), features)

    pooler = representation_size is not None
    hf = transformers.ViTModel.from_pretrained(out, add_pooling_layer=pooler).eval()
    result = hf(pixel_values=x)
    assert _diff(result.last_hidden_state, model.forward_features(x)) <= TOL
    hf_features = result.pooler_output if pooler else result.last_hidden_state[:, 0]
    assert _diff(hf_features, features) <= TOL


@torch.no_grad()
def test_round_trip_non_square(tmp_path: Path) -> None:
    model = _random_vitkit(num_classes=3, image_size=(24, 12))
    out = write_hf(model, tmp_path / "export")
    assert json.loads((out / "config.json").read_text())["image_size"] == [24, 12]
    cfg, state, _ = read_hf_dir(out)
    assert cfg == model.cfg
    x = torch.randn(2, 3, 24, 12)
    logits = model(x)
    assert torch.equal(_vitkit(cfg, state)(x), logits)
    hf = transformers.ViTForImageClassification.from_pretrained(out).eval()
    assert _diff(hf(pixel_values=x).logits, logits) <= TOL
    square = write_hf(_random_vitkit(num_classes=3), tmp_path / "square")
    assert json.loads((square / "config.json").read_text())["image_size"] == 16


def test_write_into_existing_directory_and_refuse_a_file(tmp_path: Path) -> None:
    model = _random_vitkit(num_classes=2)
    (tmp_path / "there").mkdir()
    write_hf(model, tmp_path / "there")
    assert read_hf_dir(tmp_path / "there")[0] == model.cfg
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError, match="not a directory"):
        write_hf(model, tmp_path / "file")


_WRITE_PAST_THE_LIMIT = """
import sys
from vitkit.config import ModelConfig
from vitkit.io.formats.hf import write_hf
from vitkit.model import VisionTransformer
cfg = ModelConfig(image_size=16, patch_size=4, hidden_size=64, num_layers=2, num_heads=4,
                  mlp_dim=256, num_classes=2)
for out in sys.argv[1:]:
    try:
        write_hf(VisionTransformer(cfg), out)
    except OSError as e:
        print(type(e).__name__, e.errno, e.filename)
"""


def test_a_full_disk_leaves_nothing_and_names_the_file(tmp_path: Path) -> None:
    """Weights written past a file size limit (EFBIG, as a full disk's ENOSPC) were safetensors'
    SafetensorError, a traceback, after the config had been written into an existing directory.
    They are the OSError naming the file, and neither a new directory nor an existing one gets
    any file of the export."""
    there = tmp_path / "there"
    there.mkdir()
    (there / "README.md").write_text("mine")
    proc = subprocess.run(
        [sys.executable, "-c", _WRITE_PAST_THE_LIMIT, str(tmp_path / "new"), str(there)],
        capture_output=True, text=True, timeout=120, preexec_fn=file_size_limit(100_000),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        f"OSError {errno.EFBIG} {out / 'model.safetensors'}" for out in (tmp_path / "new", there)
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["there"]
    assert [p.name for p in there.iterdir()] == ["README.md"]


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        (dict(classifier="gap"), "classifier='gap'"),
        (dict(classifier="map"), "classifier='map' .*HF's ViT has no MAP head"),
        (dict(posemb="sincos2d"), "posemb='sincos2d'"),
        (dict(posemb="none"), "posemb='none'"),
        (
            dict(resnet=ResNetConfig(num_layers=()), patch_size=1, image_size=16),
            "hybrid",
        ),
        (dict(representation_size=32, num_classes=3), "pre-logits"),
    ],
)
def test_write_refuses_what_hf_cannot_express(fields: dict, reason: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=reason) as info:  # one line for the command line
        write_hf(_random_vitkit(**fields), tmp_path / "export")
    assert "\n" not in str(info.value)
    assert not (tmp_path / "export").exists()


def test_write_checks_class_names(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="2 class_names for a model with num_classes=3"):
        write_hf(_random_vitkit(num_classes=3), tmp_path / "a", class_names=["x", "y"])
    with pytest.raises(ValueError, match="distinct"):
        write_hf(_random_vitkit(num_classes=2), tmp_path / "b", class_names=["x", "x"])


def test_without_transformers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reading needs only JSON and safetensors; writing says how to install transformers."""
    _hf_classifier(SMALL).save_pretrained(tmp_path / "hf")
    monkeypatch.setitem(sys.modules, "transformers", None)  # any import of it now fails
    cfg, _, _ = read_hf_dir(tmp_path / "hf")
    assert cfg.num_classes == SMALL["num_labels"]
    with pytest.raises(ImportError, match=r"pip install 'vitkit\[hf\]'"):
        write_hf(_random_vitkit(num_classes=2), tmp_path / "export")


# ---------------------------------------------------------------- strictness


def _state_and_config() -> tuple[dict[str, torch.Tensor], dict]:
    hf = _hf_classifier(SMALL)
    return dict(hf.state_dict()), hf.config.to_dict()


def test_extra_and_missing_keys_are_listed_together() -> None:
    state, config = _state_and_config()
    state["vit.embeddings.extra_token"] = torch.zeros(1, 1, 32)
    del state["vit.layernorm.bias"]
    with pytest.raises(CheckpointError) as info:
        read_hf(state, config)
    message = str(info.value)
    assert "vit.embeddings.extra_token" in message and "vit.layernorm.bias" in message


def test_config_and_weights_must_agree() -> None:
    state, config = _state_and_config()
    with pytest.raises(CheckpointError, match="shape mismatch"):
        read_hf(state, {**config, "intermediate_size": 48})
    # A config deeper than the weights is refused from the weights' names, before a model of its
    # depth is built: 20,000 layers took 29 s here (shape-only) to list 320,000 missing names.
    with pytest.raises(CheckpointError, match=r"num_hidden_layers=20000, the weights hold 1 layer"):
        read_hf(state, {**config, "num_hidden_layers": 20000})


def test_mask_token_is_refused_with_its_reason() -> None:
    fields = {k: v for k, v in SMALL.items() if k != "num_labels"}
    hf = transformers.ViTModel(transformers.ViTConfig(**fields), use_mask_token=True)
    with pytest.raises(CheckpointError, match=r"mask_token.*masked-image-modeling"):
        read_hf_module(hf)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"model_type": "deit"}, "model_type='deit'"),
        ({"hidden_act": "relu"}, "hidden_act='relu'"),
        ({"qkv_bias": False}, "qkv_bias"),
        ({"patch_size": [8, 4]}, "square patch_sizes only"),
        ({"num_attention_heads": 3}, "num_heads"),
    ],
)
def test_config_refusals(change: dict, match: str) -> None:
    state, config = _state_and_config()
    with pytest.raises(CheckpointError, match=match):
        read_hf(state, {**config, **change})


def test_pooler_with_classifier_is_refused() -> None:
    state, config = _state_and_config()
    state["vit.pooler.dense.weight"] = torch.zeros(32, 32)
    state["vit.pooler.dense.bias"] = torch.zeros(32)
    with pytest.raises(CheckpointError, match="both a pooler and a classifier"):
        read_hf(state, config)


def test_directory_model_type_must_be_vit(tmp_path: Path) -> None:
    _hf_classifier(SMALL).save_pretrained(tmp_path / "hf")
    path = tmp_path / "hf" / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "model_type": "deit"}))
    with pytest.raises(CheckpointError, match="model_type='deit'"):
        read_hf_dir(tmp_path / "hf")
    with pytest.raises(FileNotFoundError):
        read_hf_dir(tmp_path / "missing")
