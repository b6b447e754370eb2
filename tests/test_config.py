"""Typed configs: validation and --set text derived from the annotations, one line per error
naming the key, the value and the type; overrides are strict (the files of an earlier vitkit:
test_compat.py)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from vitkit.config import (
    ConfigError,
    DataConfig,
    ModelConfig,
    ResNetConfig,
    RunConfig,
    data_source,
    parse_set,
    replace,
)
from vitkit.config.dicts import check_new
from vitkit.config.keys import Section, describe, fields_of, hints, spec_of, type_name
from vitkit.presets import get_config
from vitkit.recipes import get_recipe


def test_validation_names_field_value_and_allowed() -> None:
    cfg = get_config("ViT-mu/16")
    with pytest.raises(
        ConfigError, match=r"model\.num_heads=3 is not valid: expected a divisor of hidden_size=32"
    ):
        replace(cfg, {"num_heads": 3})
    with pytest.raises(ConfigError, match=r"model\.dropout_rate=1.5 .* in \[0, 1\)"):
        replace(cfg, {"dropout_rate": 1.5})
    with pytest.raises(ConfigError, match=r"model\.posemb='sin' .*'learn', 'sincos2d' or 'none'"):
        replace(cfg, {"posemb": "sin"})
    with pytest.raises(ConfigError, match=r"model\.resnet\.num_layers"):
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
    with pytest.raises(ConfigError, match=r"unknown config key 'train\.bacth_size'.*'batch_size'"):
        parse_set(RunConfig, ["train.bacth_size=3"])


def test_resnet_width_factor_is_vit_jax_rounding() -> None:
    assert ResNetConfig(num_layers=(1,), width_factor=0.5).width == 32  # int(64 * 0.5)
    assert ResNetConfig(num_layers=(1,), width_factor=1.5).out_channels == 4 * 96
    assert ResNetConfig.from_width((3, 4, 9), 64) == ResNetConfig(num_layers=(3, 4, 9))
    assert ResNetConfig.from_width((1,), 32).width_factor == 0.5
    with pytest.raises(
        ConfigError,
        match=r"^model\.resnet\.width_factor=0\.75 is not valid: .*32 groups divide, found 48 "
        r"channels$",
    ):
        ResNetConfig(num_layers=(1,), width_factor=0.75)
    with pytest.raises(ConfigError, match=r"model\.resnet\.width_factor=True"):
        ResNetConfig(num_layers=(1,), width_factor=True)
    cfg = replace(get_config("R50+ViT-B/16"), {"resnet.width_factor": 0.5})
    assert ModelConfig.from_dict(cfg.to_dict()) == cfg


def test_dict_round_trip() -> None:
    for name in ("ViT-B/16", "R50+ViT-B/16", "ViT-S/16-gap-norep"):
        cfg = get_config(name)
        assert ModelConfig.from_dict(cfg.to_dict()) == cfg
    run = get_recipe("fmnist-speed")
    assert RunConfig.from_dict(json.loads(json.dumps(run.to_dict()))) == run


def test_required_fields_and_wrong_types() -> None:
    with pytest.raises(ConfigError, match="missing required keys"):
        ModelConfig.from_dict({"image_size": 224})
    # a Python value of the wrong type is refused, not read as text
    with pytest.raises(ConfigError, match=r"model\.hidden_size='768' .*expected an integer >= 1"):
        replace(get_config("ViT-B/16"), {"hidden_size": "768"})


def test_set_text_is_read_by_the_fields_type() -> None:
    """The issue's cases: 'false' was the truthy string 'false', 'yes' a string compared with
    floats; now each value is read as its field's type."""
    run = get_recipe("fmnist")  # flips on, no EMA, eager
    got = parse_set(
        RunConfig,
        [
            "data.flip=false",
            "train.compile=No",
            "train.precision=FP32",
            "data.test_flip=YES",
            "data.rand_augment=on",
            "train.batch_size=1_024",
            "optim.lr=3e-4",
            "train.ema=none",
            "optim.grad_clip=None",
            "optim.schedule=Linear",  # a Literal's value in any case
            "train.duration=2.5ep",
            "train.fewshot=(5,10)",
            "model.image_size=24x32",
            "model.representation_size=64",
            "data.dataset='cifar10:/data/c10'",
        ],
    )
    assert got == {
        "data.flip": False,
        "train.compile": False,
        "train.precision": "fp32",
        "data.test_flip": True,
        "data.rand_augment": True,
        "train.batch_size": 1024,
        "optim.lr": 3e-4,
        "train.ema": None,
        "optim.grad_clip": None,
        "optim.schedule": "linear",
        "train.duration": "2.5ep",
        "train.fewshot": (5, 10),
        "model.image_size": (24, 32),
        "model.representation_size": 64,
        "data.dataset": "cifar10:/data/c10",
    }
    new = replace(run, {k: v for k, v in got.items() if k != "model.image_size"})
    assert new.data.flip is False and new.train.compile is False
    assert parse_set(RunConfig, ["train.fewshot=5,10"])["train.fewshot"] == (5, 10)
    assert parse_set(RunConfig, ["train.fewshot=()"])["train.fewshot"] == ()
    assert parse_set(RunConfig, ["train.fewshot=[25]"])["train.fewshot"] == (25,)
    assert parse_set(RunConfig, ["model.image_size=(24, 32)"])["model.image_size"] == (24, 32)
    assert parse_set(RunConfig, ["model.image_size=64"])["model.image_size"] == 64


@pytest.mark.parametrize(
    ("item", "message"),
    [
        ("data.flip=maybe", "data.flip=maybe is not valid: expected true or false"),
        ("train.ema=yes", "train.ema=yes is not valid: expected a number in (0, 1), or none"),
        ("train.ema=1.5", "train.ema=1.5 is not valid: expected a number in (0, 1), or none"),
        ("train.batch_size=12.5", "train.batch_size=12.5 is not valid: expected an integer >= 1"),
        ("train.batch_size=0", "train.batch_size=0 is not valid: expected an integer >= 1"),
        ("optim.name=adamw", "optim.name=adamw is not valid: expected 'adam', 'sgd' or 'muon'"),
        ("optim.lr=fast", "optim.lr=fast is not valid: expected a number > 0"),
        ("train.duration=10 epochs", "train.duration=10 epochs is not valid: expected a duration"),
        # a fraction of a step ran rounded up, unsaid; 1e30 steps went through a float
        ("train.duration=2.5st", "train.duration=2.5st is not valid: expected a duration: '5000st"),
        ("optim.warmup=0.5st", "optim.warmup=0.5st is not valid: expected a duration"),
        ("train.duration=1e30st", "train.duration=1e30st is not valid: expected a duration"),
        ("train.duration=2e9ep", "train.duration=2e9ep is not valid: expected a duration"),
        ("train.duration=nanex", "train.duration=nanex is not valid: expected a duration"),
        (
            "train.time_budget=20",
            "train.time_budget=20 is not valid: expected a time: '90s', '20m'",
        ),
        ("train.time_budget=-5m", "train.time_budget=-5m is not valid: expected a time"),
        ("train.time_budget=nanh", "train.time_budget=nanh is not valid: expected a time"),
        ("train.fewshot=(5,x)", "train.fewshot=(5,x) is not valid: expected a tuple of integers"),
        ("model.image_size=24x", "model.image_size=24x is not valid: expected an integer >= 1"),
        (
            "data.dataset=synthetic:x",
            "data.dataset=synthetic:x is not valid: data 'synthetic:x': synthetic images are made",
        ),
        (
            "data.dataset=cifar10:",
            "data.dataset=cifar10: is not valid: data 'cifar10:': expected cifar10:DIR",
        ),
        ("model.resnet=(3,4)", "model.resnet=(3,4) is not valid: expected a ResNetConfig, or none"),
        ("train.seed", "--set expects key=value, found 'train.seed'"),
        (  # more than torch.manual_seed takes: an overflow traceback once the data was built
            "train.seed=99999999999999999999999",
            "train.seed=99999999999999999999999 is not valid: "
            "expected an integer in [0, 9223372036854775807]",
        ),
        (
            "train.seed=-1",
            "train.seed=-1 is not valid: expected an integer in [0, 9223372036854775807]",
        ),
        (  # that many processes would have been started
            "data.num_workers=100000",
            "data.num_workers=100000 is not valid: expected an integer in [0, 1024], or none",
        ),
    ],
)
def test_a_wrong_value_is_one_line_naming_key_value_and_type(item: str, message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_set(RunConfig, [item])
    text = str(info.value)
    assert text.startswith(message), text
    assert "\n" not in text


def test_every_key_has_a_doc_a_type_and_a_description() -> None:
    """One source of truth: every field of every section is declared with key(), and what it
    admits can be described from its annotation and bounds."""
    sections = [RunConfig, ModelConfig, ResNetConfig, DataConfig]
    sections += [type(get_recipe("smoke").optim), type(get_recipe("smoke").train)]
    for cls in sections:
        assert issubclass(cls, Section)
        for f in fields_of(cls):
            spec = spec_of(f)
            assert spec is not None and spec.doc, f"{cls.__name__}.{f.name} has no doc"
            assert type_name(hints(cls)[f.name]) and describe(hints(cls)[f.name], spec)


def test_data_specs() -> None:
    assert data_source("fashion_mnist") == data_source("fashion_mnist")
    assert data_source("cifar10:/d").path == "/d" and data_source("cifar10:/d").kind == "cifar10"
    assert data_source("photos").kind == "folder" and data_source("photos").path == "photos"
    assert data_source("folder:x:y").path == "x:y"
    assert data_source("synthetic").path is None
    for bad in ("", "folder", "cifar10:", "synthetic:x"):
        with pytest.raises(ConfigError):
            data_source(bad)


def test_none_words_are_none_for_optional_strings() -> None:
    """'none' is None where None is allowed, before a string could take the word."""
    assert parse_set(RunConfig, ["init_from=none", "train.ema=None"]) == {
        "init_from": None,
        "train.ema": None,
    }


def test_sections_are_frozen_and_checked_on_creation() -> None:
    smoke = get_recipe("smoke")
    with pytest.raises(dataclasses.FrozenInstanceError):
        smoke.train.seed = 3  # type: ignore[misc]
    with pytest.raises(ConfigError, match=r"train\.keep_last=0"):
        dataclasses.replace(smoke.train, keep_last=0)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"data.aug_repeats": 65},
            "data.aug_repeats=65 is not valid: expected an integer in [1, 64]",
        ),
        (
            {"data.random_erase": 0.5, "data.random_erase_count": 10**9},
            "data.random_erase_count=1000000000 is not valid: expected an integer in [1, 16]",
        ),
        (
            {"data.auto_augment": "rand-n1000000000"},
            "data.auto_augment='rand-n1000000000' is not valid: 'rand-n1000000000' applies "
            "n=1,000,000,000 ops: expected n in [1, 16]",
        ),
        (
            {"data.auto_augment": "rand-m9-mmax101"},
            "data.auto_augment='rand-m9-mmax101' is not valid: 'rand-m9-mmax101' has mmax=101: "
            "expected mmax <= 100",
        ),
        (  # no weight ties a sin-cos model's size: a checkpoint of it is held to the same
            {"model.posemb": "sincos2d", "model.image_size": 10**6},
            "model.image_size=1000000 is not valid: expected at most 4096 pixels a side",
        ),
        (
            {"model.image_size": (16, 1028 * 64)},
            "model.image_size=(16, 65792) is not valid: expected at most 4096 pixels a side",
        ),
        (
            {"model.posemb": "none", "model.image_size": 1028},
            "model.image_size=1028 is not valid: expected at most 65,536 tokens, found 257 x 257 "
            "patches of 4 pixels",
        ),
        (  # a --set typo filled the machine's memory (and a checkpoint's, a traceback)
            {"model.hidden_size": 10**9},
            "model.hidden_size=1000000000 is not valid: expected a model of at most "
            "100,000,000,000 parameters, found about 5.00e+18 (depth 1, width 1000000000",
        ),
        (
            {"model.num_classes": 10**11},
            "model.num_classes=100000000000 is not valid: expected a model of at most "
            "100,000,000,000 parameters, found about 3.20e+12",
        ),
    ],
)
def test_a_new_run_keeps_the_toolbox_counts_bounded_and_a_recorded_run_its_own(
    changes: dict, message: str
) -> None:
    """The toolbox's counts are bounded for a new run (``check_new``), in one line; a run
    directory whose config.json records a value beyond a bound (written before it) still reads,
    and keeps that value; any other value is a new run's."""
    smoke = get_recipe("smoke")
    run = replace(smoke, changes)  # a config that holds it reads
    recorded = json.loads(json.dumps(run.to_dict()))  # as config.json holds it
    assert RunConfig.from_dict(recorded) == run
    check_new(run, recorded)  # the run continues as it began
    for other in (None, smoke.to_dict()):  # no run recorded, or another value
        with pytest.raises(ConfigError) as info:
            check_new(run, other)
        assert str(info.value).startswith(message), str(info.value)
        assert "\n" not in str(info.value)
    at_most = {"data.aug_repeats": 64, "data.random_erase_count": 16, "model.image_size": 1024}
    check_new(replace(smoke, {**at_most, "data.auto_augment": "rand-n16-m100-mmax100"}), None)


def test_vitkit_config_shows_the_bounds_of_the_toolbox_counts(capsys) -> None:
    from vitkit.cli import main

    for key, bound in [
        ("data.aug_repeats", "int: an integer in [1, 64]"),
        ("data.random_erase_count", "int: an integer in [1, 16]"),
        ("data.auto_augment", "n in [1, 16], m <= mmax <= 100"),
    ]:
        assert main(["config", "--recipe", "smoke", key]) == 0
        assert bound in capsys.readouterr().out


def test_a_data_spec_set_enters_as_the_run_records_it(tmp_path, monkeypatch) -> None:
    """``--set data.dataset=DIR``, and each of ``train.fewshot_data``, is read with its folder
    made absolute (``config.normalise_data``), so the run records where the data is whatever
    the directory a later command runs from; a named dataset stays a name."""
    monkeypatch.chdir(tmp_path)
    got = parse_set(RunConfig, ["data.dataset=pets", "train.fewshot_data=(flowers,cifar10)"])
    assert got["data.dataset"] == str(tmp_path / "pets")
    assert got["train.fewshot_data"] == (str(tmp_path / "flowers"), "cifar10")
    recorded = DataConfig(dataset="pets")  # a config read whole keeps the string it holds
    assert recorded.dataset == "pets"


def test_crop_padding_beyond_the_image_is_refused() -> None:
    """10^5 px of padding on 16 px images filled the memory, and the message said to use a
    smaller batch or model."""
    run = get_recipe("smoke")  # 16 px
    with pytest.raises(
        ConfigError,
        match=r"data.crop_padding=17 is not valid: expected at most the model's image size \(16",
    ):
        replace(run, {"data.crop_padding": 17})
    assert replace(run, {"data.crop_padding": 16}).data.crop_padding == 16
