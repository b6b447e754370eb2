"""Layer-wise learning-rate decay (``optim.layer_decay``): every parameter's multiplier and weight
decay are timm's ``param_groups_layer_decay``, and the optimizer's learning rate of every
parameter is the schedule's times that multiplier, at every step, under every schedule and
optimizer, in the training loop, after a resume and under FSDP; with it off, the groups are the
two every earlier checkpoint holds."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import vitkit
from helpers import stopped_copy, tiny
from vitkit.config import ConfigError, OptimConfig, ResNetConfig, RunConfig, replace
from vitkit.model import build_model
from vitkit.recipes import get_recipe
from vitkit.train.optim import (
    build_optimizer,
    learning_rate,
    param_groups,
    param_settings,
    set_learning_rate,
)


def multiplier(name: str, decay: float, num_layers: int) -> float:
    """The rule restated from timm's ViT ``group_matcher``: the embedding 0, block i i+1, the final
    norm with the last block, the head L+1; d^(L+1-layer)."""
    if name.startswith(("cls_token", "pos_embed", "patch_embed")):
        layer = 0
    elif name.startswith("blocks."):
        layer = int(name.split(".")[1]) + 1
    else:
        layer = num_layers if name.startswith("norm.") else num_layers + 1
    return decay ** (num_layers + 1 - layer)


@pytest.mark.parametrize(
    "timm_name", ["vit_base_patch16_224", "vit_base_r50_s16_224"], ids=["B16", "R50+B16"]
)
def test_multipliers_and_weight_decay_equal_timms(timm_name: str) -> None:
    timm = pytest.importorskip("timm")
    from timm.optim import param_groups_layer_decay

    from vitkit.io.formats.timm import read_timm_module

    with torch.device("meta"):  # no weights: the groups are a matter of names and shapes
        # timm's hybrid has no head unless asked: with one, its layers are the plain ViT's
        theirs = timm.create_model(timm_name, pretrained=False, num_classes=1000)
        cfg, state = read_timm_module(theirs)  # the converter: timm's names are ours
        ours = build_model(cfg)
    assert set(state) == {n for n, _ in ours.named_parameters()}
    assert (cfg.resnet is not None) == ("r50" in timm_name)

    def by_name(model: torch.nn.Module, groups: list[dict]) -> dict[str, tuple[float, float]]:
        name = {id(p): n for n, p in model.named_parameters()}
        return {
            name[id(p)]: (g["lr_scale"], g["weight_decay"]) for g in groups for p in g["params"]
        }

    optim = OptimConfig(lr=1e-3, weight_decay=0.05, layer_decay=0.75)
    expected = by_name(
        theirs,
        param_groups_layer_decay(
            theirs,
            weight_decay=0.05,
            no_weight_decay_list=theirs.no_weight_decay(),
            layer_decay=0.75,
        ),
    )
    got = by_name(ours, param_groups(param_settings(optim, ours), optim))
    assert got.keys() == expected.keys()
    for name in got:
        assert got[name] == pytest.approx(expected[name], rel=1e-12), name
    assert len({m for m, _ in got.values()}) == 14  # 0.75^13 .. 1: 12 blocks, embedding, head


OPTIMIZERS = [{}, {"optim.name": "sgd"}, {"optim.name": "muon", "optim.weight_decay": 0.1}]
SCHEDULES = [
    {"optim.schedule": "cosine", "optim.warmup": "3st", "optim.end_lr": 1e-5},
    {"optim.schedule": "linear", "optim.warmup": "0st"},
    {"optim.schedule": "constant", "optim.warmup": "4st"},
]


@pytest.mark.parametrize("optimizer", OPTIMIZERS, ids=["adam", "sgd", "muon"])
def test_every_parameters_lr_is_the_schedules_times_its_multiplier(optimizer: dict) -> None:
    run = replace(
        get_recipe("smoke"), {"model.num_layers": 2, "optim.layer_decay": 0.5, **optimizer}
    )
    model = vitkit.create_model(run.model)
    name = {id(p): n for n, p in model.named_parameters()}
    opt = build_optimizer(model, run.optim)
    for g in opt.param_groups:  # before any step too: the first step's lr is scaled
        assert all(g["lr"] == run.optim.lr * multiplier(name[id(p)], 0.5, 2) for p in g["params"])
    for schedule in SCHEDULES:
        cfg = replace(run, schedule).optim
        warmup = {"3st": 3, "0st": 0, "4st": 4}[schedule["optim.warmup"]]
        for step in (0, 2, 3, 5, 9):
            lr = learning_rate(step, cfg=cfg, total_steps=10, warmup_steps=warmup)
            set_learning_rate(opt, lr)
            for g in opt.param_groups:
                for p in g["params"]:
                    assert g["lr"] == pytest.approx(lr * multiplier(name[id(p)], 0.5, 2))
    assert {n for g in opt.param_groups for n in map(name.get, map(id, g["params"]))} == set(
        name.values()
    )


def test_off_keeps_the_two_groups_of_every_earlier_checkpoint() -> None:
    run = get_recipe("smoke")
    model = vitkit.create_model(run.model)
    opt = build_optimizer(model, replace(run, {"optim.weight_decay": 0.1}).optim)
    skip = model.no_weight_decay()
    names = [[n for n, p in model.named_parameters() if (n in skip) == nd] for nd in (False, True)]
    ids = {id(p): n for n, p in model.named_parameters()}
    assert [[ids[id(p)] for p in g["params"]] for g in opt.param_groups] == names
    assert [g["weight_decay"] for g in opt.param_groups] == [0.1, 0.0]
    assert all("lr_scale" not in g for g in opt.param_groups)
    # an earlier run's checkpoint loads into them, its groups as they were
    saved = torch.load(
        Path(__file__).parent / "data/resume_v1/run/checkpoints/step_00000002/state.pt",
        weights_only=True,
    )["optimizer"]
    old = RunConfig.from_dict(
        json.loads((Path(__file__).parent / "data/resume_v1/run/config.json").read_text())
    )
    fresh = build_optimizer(vitkit.create_model(old.model), old.optim)
    fresh.load_state_dict(saved)
    assert [len(g["params"]) for g in fresh.param_groups] == [
        len(g["params"]) for g in saved["param_groups"]
    ]


def test_frozen_parameters_get_no_group_and_a_resnet_no_layer_decay() -> None:
    cfg = OptimConfig(lr=1.0, layer_decay=0.5)
    model = vitkit.create_model(get_recipe("smoke").model)
    model.cls_token.requires_grad_(False)
    names = [s.name for s in param_settings(cfg, model)]
    assert "cls_token" not in names and "pos_embed" in names
    resnet = build_model(tiny(arch="resnet", resnet=ResNetConfig(num_layers=(1,))))
    with pytest.raises(ConfigError, match="needs a ViT's transformer blocks"):
        param_settings(cfg, resnet)


def _group_lrs(checkpoint: Path) -> list[tuple[float, float]]:
    state = torch.load(checkpoint / "state.pt", weights_only=True)["optimizer"]
    return [(g["lr"], g["lr_scale"]) for g in state["param_groups"]]


def test_the_loop_scales_every_groups_lr_and_a_resume_rebuilds_the_groups(
    tmp_path: Path, caplog
) -> None:
    from vitkit import fit

    caplog.set_level("INFO", logger="vitkit")

    run = replace(
        get_recipe("smoke"),
        {
            "train.device": "cpu",
            "data.num_workers": 0,
            "model.num_layers": 2,
            "optim.layer_decay": 0.5,
            "train.duration": "4st",
            "train.save_every": "1st",
            "train.keep_last": 4,
            "train.eval_every": "0st",
        },
    )
    fit(run, run_dir=tmp_path / "full", progress=False)
    model = vitkit.create_model(run.model)
    settings = {id(s.param): s.name for s in param_settings(run.optim, model)}
    groups = param_groups(param_settings(run.optim, model), run.optim)  # the state's order
    expected_scales = [multiplier(settings[id(g["params"][0])], 0.5, 2) for g in groups]
    for step in range(1, 5):  # the checkpoint after step s holds the lr of step s-1 (0-based)
        lr = learning_rate(step - 1, cfg=run.optim, total_steps=4, warmup_steps=2)
        got = _group_lrs(tmp_path / "full" / "checkpoints" / f"step_{step:08d}")
        assert [scale for _, scale in got] == expected_scales
        assert [lr_ for lr_, _ in got] == pytest.approx([lr * s for s in expected_scales])
    assert "tools    layer decay 0.5" in caplog.text  # the banner says so
    resumed = stopped_copy(tmp_path / "full", tmp_path / "resumed", step=2)
    fit(run, run_dir=resumed, progress=False)
    for step in (3, 4):
        name = f"checkpoints/step_{step:08d}"
        assert _group_lrs(resumed / name) == _group_lrs(tmp_path / "full" / name)


@pytest.mark.distributed
@pytest.mark.slow
def test_fsdp_groups_take_the_scaled_lr_and_resume(tmp_path: Path) -> None:
    """Two FSDP processes (gloo): the sharded parameters' groups hold the schedule's learning rate
    times their multipliers, in the checkpoints they write, and again after resuming sharded."""
    args = [
        "train", "--recipe", "smoke", "--no-progress", "--set", "train.device=cpu",
        "--set", "train.duration=3st", "--set", "optim.warmup=1st", "--set", "train.save_every=1st",
        "--set", "train.keep_last=3", "--set", "train.eval_every=0st",
        "--set", "optim.layer_decay=0.5", "--set", "model.num_layers=2",
        "--set", "train.parallel='fsdp'", "--run-dir",
    ]  # fmt: skip
    run_dir = tmp_path / "fsdp"
    fsdp = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
    for command in ([*fsdp, "-m", "vitkit", *args, str(run_dir)], None):
        if command is None:  # the run stopped after step 1, resumed sharded
            resumed = stopped_copy(run_dir, tmp_path / "resumed", step=1)
            command = [*fsdp, "-m", "vitkit", *args, str(resumed)]
        proc = subprocess.run(command, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr[-3000:]
    run = replace(
        get_recipe("smoke"),
        {"optim.layer_decay": 0.5, "model.num_layers": 2, "optim.warmup": "1st"},
    )
    model = vitkit.create_model(run.model)
    name = {id(s.param): s.name for s in param_settings(run.optim, model)}
    groups = param_groups(param_settings(run.optim, model), run.optim)  # the state's order
    scales = [multiplier(name[id(g["params"][0])], 0.5, 2) for g in groups]
    for step in (1, 2, 3):
        lr = learning_rate(step - 1, cfg=run.optim, total_steps=3, warmup_steps=1)
        checkpoint = f"checkpoints/step_{step:08d}"
        for directory in (run_dir, resumed) if step > 1 else (run_dir,):
            got = _group_lrs(directory / checkpoint)
            assert [scale for _, scale in got] == scales
            assert [lr_ for lr_, _ in got] == pytest.approx([lr * s for s in scales])


def test_config_params_prints_each_parameters_multiplier_without_weights(capsys) -> None:
    from vitkit.cli import main

    args = ["config", "--params", "--data", "synthetic", "--set", "optim.weight_decay=0.05"]
    assert main([*args, "--model", "ViT-B/16", "--set", "optim.layer_decay=0.75"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert (
        lines[0].startswith("152 trained tensors, 86,567,656 parameters")
        and "layer decay 0.75" in lines[0]
    )
    rows = [line.split() for line in lines[2:]]
    assert len(rows) == 152
    for name, shape, _, scale, wd in rows:
        assert float(scale) == pytest.approx(multiplier(name, 0.75, 12), rel=1e-5), name
        skip = "x" not in shape or name in ("cls_token", "pos_embed")  # 1-D, or named
        assert float(wd) == (0.0 if skip else 0.05), name
    assert {tuple(r[2:4]) for r in rows if r[0].startswith(("norm.", "head."))} == {
        ("12", "0.75"),
        ("13", "1"),
    }
    # a ViT-H's table at once (the meta device), filtered by a glob; off: every multiplier 1
    assert main([*args, "--model", "ViT-H/14", "blocks.31.mlp.*"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[2:]]
    assert [r[0] for r in rows] == [
        f"blocks.31.mlp.fc{i}.{w}" for i in (1, 2) for w in ("weight", "bias")
    ]
    assert {(r[2], r[3]) for r in rows} == {("-", "1")}


def test_the_banner_names_the_tools_that_are_on() -> None:
    from vitkit.train.banner import tools_on

    assert tools_on(get_recipe("smoke")) == []
    run = replace(
        get_recipe("smoke"),
        {
            "optim.layer_decay": 0.75,
            "train.mixup": 0.2,
            "train.label_smoothing": 0.1,
            "train.ema": 0.9999,
            "data.rand_augment": True,
            "model.drop_path_rate": 0.1,
        },
    )
    assert tools_on(run) == [
        "layer decay 0.75",
        "mixup 0.2",
        "label smoothing 0.1",
        "EMA 0.9999",
        "RandAugment(2, 10)",
        "stochastic depth 0.1",
    ]


def test_a_resnet_run_with_layer_decay_is_refused_before_any_data(capsys) -> None:
    """The config refuses it in one line (vitkit config and train), as the optimizer would later."""
    from vitkit.cli import main

    assert main(["config", "--recipe", "fmnist-resnet", "--set", "optim.layer_decay=0.75"]) == 2
    err = capsys.readouterr().err
    assert "optim.layer_decay=0.75 is not valid: expected none for a ResNet" in err
    assert len(err.strip().splitlines()) == 1
