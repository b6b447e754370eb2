"""The parts of a run on their own: built as the config says (EMA, masked patch prediction), the
checkpoint a run resumes from chosen, and a checkpoint's weights and state loaded back into
parts built afresh."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from vitkit.config import replace
from vitkit.recipes import get_recipe
from vitkit.train.parts import build_parts, checkpoint_to_resume
from vitkit.train.state import TrainState, save_checkpoint

CPU = torch.device("cpu")


def test_parts_follow_the_config() -> None:
    run = get_recipe("smoke")
    plain = build_parts(run, CPU, autocast=None, pretrained=False)
    assert plain.ema is None and plain.average is None and plain.mpp is None
    assert plain.averaged is plain.model and plain.step_fn is plain.objective
    assert plain.live.scaler is None  # fp32: no gradient scaler

    averaged = build_parts(replace(run, {"train.ema": 0.9}), CPU, autocast=None, pretrained=False)
    assert averaged.averaged is averaged.ema and averaged.average is not None

    parts = build_parts(
        replace(run, {"train.objective": "mpp"}), CPU, autocast=None, pretrained=False
    )
    assert parts.mpp is not None
    optimized = {id(p) for g in parts.live.optimizer.param_groups for p in g["params"]}
    assert {id(p) for p in parts.mpp.parameters()} <= optimized  # the mpp head trains too


def test_a_checkpoint_resumes_into_new_parts(tmp_path: Path) -> None:
    run = replace(get_recipe("smoke"), {"train.ema": 0.9})
    assert checkpoint_to_resume(tmp_path, None, run) is None  # a new run
    torch.manual_seed(0)
    parts = build_parts(run, CPU, autocast=None, pretrained=False)
    images, labels = torch.rand(4, 3, 16, 16), torch.tensor([0, 1, 2, 3])
    parts.step_fn(images, labels)["loss"].backward()
    parts.live.optimizer.step()
    parts.average.update(0)
    window = {"loss": 1.5, "accuracy": 0.25, "n": 1, "images": 4, "seconds": 0.5}
    state = TrainState.capture(parts.live, step=1, best=0.5, window=window, seconds=3.0)
    save_checkpoint(
        tmp_path, parts.model.cfg, parts.model.state_dict(), state, extra={}, keep_last=2
    )
    checkpoint = checkpoint_to_resume(tmp_path, "/elsewhere/step_1", run)  # its own comes first
    assert checkpoint is not None and checkpoint.name.startswith("step_")

    torch.manual_seed(1)  # other initial weights, overwritten by the checkpoint's
    again = build_parts(run, CPU, autocast=None, pretrained=False)
    resumed = again.resume(checkpoint)
    assert (resumed.step, resumed.best, resumed.seconds) == (1, 0.5, 3.0)
    for before, after in [(parts.model, again.model), (parts.ema, again.ema)]:
        for key, value in before.state_dict().items():
            assert torch.equal(after.state_dict()[key], value), key
    assert again.live.optimizer.state_dict()["state"].keys() == (
        parts.live.optimizer.state_dict()["state"].keys()
    )


def test_another_runs_checkpoint_must_match_the_run(tmp_path: Path) -> None:
    from vitkit.errors import VitkitError

    with pytest.raises(VitkitError):
        checkpoint_to_resume(tmp_path / "new", tmp_path / "no-such-checkpoint", get_recipe("smoke"))
