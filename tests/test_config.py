"""Typed configs: validation names the field, overrides are strict, JSON round-trips."""

from __future__ import annotations

import pytest

from vitkit.config import ConfigError, ModelConfig, ResNetConfig, parse_set, replace
from vitkit.presets import get_config


def test_validation_names_field_value_and_allowed() -> None:
    cfg = get_config("ViT-mu/16")
    with pytest.raises(
        ConfigError, match=r"num_heads=3 is not valid: expected a divisor of hidden_size=32"
    ):
        replace(cfg, {"num_heads": 3})
    with pytest.raises(ConfigError, match=r"dropout_rate=1.5 .* in \[0, 1\)"):
        replace(cfg, {"dropout_rate": 1.5})
    with pytest.raises(ConfigError, match="posemb='sin'"):
        replace(cfg, {"posemb": "sin"})
    with pytest.raises(ConfigError, match=r"resnet\.num_layers"):
        ResNetConfig(num_layers=(3, 0))
    with pytest.raises(ConfigError, match="image_size=100"):
        replace(cfg, {"image_size": 100})


def test_unknown_override_suggests_closest() -> None:
    cfg = get_config("R50+ViT-B/16")
    with pytest.raises(ConfigError, match="did you mean 'hidden_size'"):
        replace(cfg, {"hiden_size": 8})
    with pytest.raises(ConfigError, match="did you mean 'width_factor'"):
        replace(cfg, {"resnet.width_facter": 2})
    assert replace(cfg, {"resnet.width_factor": 2}).resnet == ResNetConfig(
        num_layers=(3, 4, 9), width_factor=2
    )


def test_resnet_width_factor_is_vit_jax_rounding() -> None:
    assert ResNetConfig(num_layers=(1,), width_factor=0.5).width == 32  # int(64 * 0.5)
    assert ResNetConfig(num_layers=(1,), width_factor=1.5).out_channels == 4 * 96
    assert ResNetConfig.from_width((3, 4, 9), 64) == ResNetConfig(num_layers=(3, 4, 9))
    assert ResNetConfig.from_width((1,), 32).width_factor == 0.5
    with pytest.raises(
        ConfigError,
        match=r"^resnet\.width_factor=0\.75 is not valid: .*32 groups divide, found 48 channels$",
    ):
        ResNetConfig(num_layers=(1,), width_factor=0.75)
    with pytest.raises(ConfigError, match=r"resnet\.width_factor=True"):
        ResNetConfig(num_layers=(1,), width_factor=True)
    cfg = replace(get_config("R50+ViT-B/16"), {"resnet.width_factor": 0.5})
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg


def test_dict_round_trip() -> None:
    for name in ("ViT-B/16", "R50+ViT-B/16", "ViT-S/16-gap-norep"):
        cfg = get_config(name)
        assert ModelConfig.from_dict(cfg.to_dict()) == cfg


def test_required_fields_and_wrong_types() -> None:
    with pytest.raises(ConfigError, match="missing required keys"):
        ModelConfig.from_dict({"image_size": 224})
    with pytest.raises(ConfigError, match="hidden_size='768'"):
        replace(get_config("ViT-B/16"), {"hidden_size": "768"})


def test_parse_set() -> None:
    assert parse_set(["model.dropout_rate=0.1", "name=ViT-B/16", "x=(1, 2)"]) == {
        "model.dropout_rate": 0.1,
        "name": "ViT-B/16",
        "x": (1, 2),
    }
    with pytest.raises(ConfigError, match="key=value"):
        parse_set(["dropout"])
