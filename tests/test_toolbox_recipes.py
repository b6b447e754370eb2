"""The recipes built from the training toolbox (AugReg, DeiT-B, MAE's layer-decay fine-tuning):
each keeps its tools in smoke mode and trains two steps; their settings are the cited ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vitkit import fit
from vitkit.recipes import AUGREG_LEVELS, RECIPES, get_recipe, smoke_mode
from vitkit.train.banner import tools_on

TOOLBOX = [n for n in RECIPES if n.startswith(("augreg-", "deit-", "finetune-layer-decay"))]
# One recipe of each smoke configuration: in smoke mode the sizes are the same tiny model, so the
# AugReg recipes that differ only by size train the same run.
DISTINCT = list(
    {json.dumps(smoke_mode(get_recipe(n)).to_dict(), default=str): n for n in TOOLBOX}.values()
)


def test_the_toolbox_recipes_are_registered() -> None:
    assert len(TOOLBOX) == 10  # AugReg i21k and i1k at Ti/S/B/L, DeiT-B, MAE's fine-tuning


@pytest.mark.parametrize("name", DISTINCT)
def test_each_recipe_trains_two_steps_in_smoke_mode_with_its_tools(
    name: str, tmp_path: Path
) -> None:
    run = get_recipe(name)
    smoke = smoke_mode(run)
    assert tools_on(smoke) == tools_on(run)  # every tool kept on the tiny model
    result = fit(smoke, run_dir=tmp_path / "run", progress=False)
    assert result.evaluation.count > 0 and 0.0 <= result.evaluation.accuracy <= 1.0


def test_the_recipes_settings_are_the_cited_ones() -> None:
    deit = get_recipe("deit-b")
    batch = deit.train.batch_size * deit.train.accum_steps
    assert deit.optim.lr == pytest.approx(5e-4 * batch / 512)  # DeiT's lr rule
    assert (deit.train.mixup, deit.train.cutmix, deit.train.label_smoothing) == (0.8, 1.0, 0.1)
    assert (deit.data.random_erase, deit.data.aug_repeats) == (0.25, 3)
    assert deit.data.auto_augment == "rand-m9-mstd0.5-inc1" and deit.model.drop_path_rate == 0.1
    mae = get_recipe("finetune-layer-decay")
    assert mae.optim.layer_decay == 0.65
    assert mae.optim.lr == pytest.approx(5e-4 * mae.train.batch_size * mae.train.accum_steps / 256)
    b16 = get_recipe("augreg-i21k-b16")  # B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0
    assert (b16.optim.lr, b16.optim.weight_decay, b16.train.mixup) == (1e-3, 0.1, 0.2)
    assert b16.data.auto_augment == "rand-m15-n2-mmax15"
    assert b16.train.batch_size * b16.train.accum_steps == 4096
    assert get_recipe("augreg-i21k-ti16").data.auto_augment is None  # aug_none
    assert get_recipe("augreg-i1k-ti16").data.auto_augment == "rand-m0-n2-mmax10"  # light1
    assert set(AUGREG_LEVELS) == {
        "none",
        "light1",
        "light2",
        "medium1",
        "medium2",
        "strong1",
        "strong2",
    }
