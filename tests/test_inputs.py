"""A run's inputs on their own: the data checked against the run before anything is written,
each process's part of the global batch, the cadence in optimizer steps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from vitkit.config import ConfigError, RunConfig, replace
from vitkit.data.run_data import build_data
from vitkit.model.flops import count_flops
from vitkit.recipes import get_recipe
from vitkit.runtime.machine import decide
from vitkit.train.inputs import read_inputs
from vitkit.train.state import RunRecord

CPU = torch.device("cpu")


def resolved(run: RunConfig, device: torch.device) -> RunConfig:
    """``run`` decided for ``device``, as ``train`` decides it (runtime.machine.decide)."""
    decided = decide(run, device, image_flops=count_flops(run.model))
    return replace(run, {key: value for key, (value, _) in decided.items()})


def test_inputs_of_the_smoke_run(tmp_path: Path) -> None:
    run = resolved(replace(get_recipe("smoke"), {"train.accum_steps": 2}), CPU)
    data = build_data(run.data, run.model, seed=run.train.seed, in_chans=run.model.in_chans)
    inputs = read_inputs(run, data, device=CPU, shard=(1, 2), recorded=None)
    assert inputs.train_batches.options.num_workers == run.data.num_workers
    assert inputs.data.classes and len(inputs.data.classes) == run.model.num_classes
    images, _ = next(iter(inputs.train_batches.epoch(0)))
    assert images.shape[0] == run.train.batch_size // 2  # this process's half of the batch
    batches = inputs.train_batches.steps_per_epoch
    assert inputs.steps_per_epoch == batches // 2  # optimizer steps of 2 micro-batches
    assert inputs.cadence.total_steps == 8  # the recipe's 8st
    assert inputs.split in ("val", "test") and inputs.fewshot_data == {}
    assert (inputs.final_test is None) == (inputs.split == "test")
    assert not tmp_path.joinpath("metrics.jsonl").exists()  # nothing written


@pytest.mark.parametrize(
    ("changes", "shard", "message"),
    [
        ({"model.num_classes": 5}, (0, 1), "model.num_classes=5 but the dataset has 4 classes"),
        ({}, (0, 3), "does not split evenly across 3 processes: train.batch_size is the global"),
        ({"train.accum_steps": 10**6}, (0, 1), "fewer than train.accum_steps=1000000"),
    ],
)
def test_data_that_does_not_fit_the_run_is_refused(
    tmp_path: Path, changes: dict, shard: tuple[int, int], message: str
) -> None:
    smoke = get_recipe("smoke")
    data = build_data(smoke.data, smoke.model, seed=0)  # 4 classes
    with pytest.raises(ConfigError, match=message):
        read_inputs(
            resolved(replace(smoke, changes), CPU), data, device=CPU, shard=shard, recorded=None
        )


def test_more_repeats_than_training_images_are_refused_unless_the_run_recorded_them(
    tmp_path: Path,
) -> None:
    """data.aug_repeats=r serves ceil(N/r) images an epoch: with r >= N, one image N times. Once
    the data is known (32 training images here) that is one line, unless the run directory
    records that r (a run begun before the check continues as it began)."""
    run = resolved(replace(get_recipe("smoke"), {"data.per_class": 8}), CPU)  # 4 classes x 8
    data = build_data(run.data, run.model, seed=0)
    assert len(data.train) == 32

    def read(repeats: int) -> None:
        repeated = replace(run, {"data.aug_repeats": repeats})
        recorded = RunRecord.read(tmp_path).config
        read_inputs(repeated, data, device=CPU, shard=(0, 1), recorded=recorded)

    read(31)  # two images an epoch
    with pytest.raises(ConfigError) as info:
        read(32)
    assert str(info.value) == (
        "data.aug_repeats=32 is not valid for 32 training images: expected fewer repeats than "
        "images (an epoch serves ceil(N/r) images r times each; here one)"
    )
    recorded = replace(run, {"data.aug_repeats": 32}).to_dict()
    (tmp_path / "config.json").write_text(json.dumps(recorded))
    read(32)
