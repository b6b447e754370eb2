"""The parts of a run on their own: built as the config says (EMA, masked patch prediction), the
checkpoint a run resumes from chosen, and a checkpoint's weights and state loaded back into
parts built afresh."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from vitkit.config import replace
from vitkit.io.metadata import WeightsMeta
from vitkit.recipes import get_recipe
from vitkit.train.parts import build_parts, checkpoint_to_resume
from vitkit.train.state import RunRecord, TrainState, save_checkpoint

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


def test_a_compiled_step_plans_one_static_graph_per_shape() -> None:
    """train.compile's forward is compiled with static shapes: a third batch size gets a graph
    of its own, where torch's default would have made the second graph's batch symbolic and
    reused it (a symbolic graph failed inside Inductor on an H200 with torch 2.11). Dynamo
    traces as on a GPU; the graphs then run eagerly, not through Inductor's minutes here."""
    from torch._dynamo.utils import counters

    run = replace(get_recipe("smoke"), {"train.compile": True})
    parts = build_parts(run, CPU, autocast=None, pretrained=False)
    S = run.model.image_size
    torch._dynamo.reset()
    counters.clear()
    with torch._dynamo.config.patch(debug_backend_override=">=0:eager"):
        for batch in (2, 3, 5):
            parts.objective(torch.rand(batch, 3, S, S), torch.zeros(batch, dtype=torch.long))
    assert counters["stats"]["unique_graphs"] == 3
    torch._dynamo.reset()


def test_every_compiled_run_in_a_process_compiles_past_dynamos_limit() -> None:
    """Ten compiled runs in one process, each with its own number of classes (a VTAB-1k sweep):
    each compiles its forward. Dynamo's graphs are per function, not per model, so without a
    fresh start per run the ninth would pass its limit of 8 and run eagerly."""
    from torch._dynamo.utils import counters

    run = replace(get_recipe("smoke"), {"train.compile": True})
    S = run.model.image_size
    counters.clear()
    with torch._dynamo.config.patch(debug_backend_override=">=0:eager"):
        for k in range(2, 12):
            parts = build_parts(
                replace(run, {"model.num_classes": k}), CPU, autocast=None, pretrained=False
            )
            before = counters["stats"]["unique_graphs"]
            parts.objective(torch.rand(2, 3, S, S), torch.zeros(2, dtype=torch.long))
            assert counters["stats"]["unique_graphs"] == before + 1, f"run {k - 1} ran eagerly"
    torch._dynamo.reset()


def test_a_checkpoint_resumes_into_new_parts(tmp_path: Path) -> None:
    run = replace(get_recipe("smoke"), {"train.ema": 0.9})
    assert checkpoint_to_resume(RunRecord.read(tmp_path), run) is None  # a new run
    torch.manual_seed(0)
    parts = build_parts(run, CPU, autocast=None, pretrained=False)
    images, labels = torch.rand(4, 3, 16, 16), torch.tensor([0, 1, 2, 3])
    parts.step_fn(images, labels)["loss"].backward()
    parts.live.optimizer.step()
    parts.average.update(0)
    window = {"loss": 1.5, "accuracy": 0.25, "n": 1, "images": 4, "seconds": 0.5}
    state = TrainState.capture(parts.live, step=1, best=0.5, window=window, seconds=3.0)
    save_checkpoint(
        tmp_path,
        parts.model.cfg,
        parts.model.state_dict(),
        state,
        meta=WeightsMeta(run=run),  # the run that wrote it, which a resume must be
        keep_last=2,
    )
    record = RunRecord.read(tmp_path, "/elsewhere/step_1")
    checkpoint = checkpoint_to_resume(record, run)  # its own comes first
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

    record = RunRecord.read(tmp_path / "new", tmp_path / "no-such-checkpoint")
    with pytest.raises(VitkitError):
        checkpoint_to_resume(record, get_recipe("smoke"))


@pytest.mark.parametrize("warmup", ["tf", "timm", "none"])
def test_ema_warmup_decays_by_its_rule_and_as_timm(warmup: str) -> None:
    """train.ema_warmup's decay at step s (0 for the first update) is its formula and, for timm
    and none, timm's own: ``ModelEmaV3.get_decay(s + 1)`` with use_warmup (gamma 1, power 2/3,
    its defaults; timm counts updates from 1) and ``ModelEmaV2``'s constant decay (ModelEmaV3
    without warmup copies the weights at its first update: equal from s = 1). The averages the
    run's parts keep follow it, as timm's do on the same weights."""
    from timm.utils.model_ema import ModelEmaV2, ModelEmaV3

    from vitkit.train.parts import ema_decay

    decay = 0.999
    rule = {
        "tf": lambda s: min(decay, (1 + s) / (10 + s)),  # TensorFlow's num_updates rule
        "timm": lambda s: 0.0 if s == 0 else min(decay, 1 - (1 + s) ** (-2 / 3)),
        "none": lambda s: decay,
    }[warmup]
    parts = build_parts(
        replace(get_recipe("smoke"), {"train.ema": decay, "train.ema_warmup": warmup}),
        CPU,
        autocast=None,
        pretrained=False,
    )
    assert parts.average is not None and parts.ema is not None
    timm = {
        "tf": None,
        "timm": ModelEmaV3(parts.model, decay=decay, use_warmup=True),
        "none": ModelEmaV2(parts.model, decay=decay),
    }[warmup]
    steps = [0, 1, 2, 3, 5, 10, 100, 1000, 10**5]
    for s in steps:
        assert ema_decay(warmup, decay, s) == rule(s)
        if warmup == "timm":
            assert ModelEmaV3(parts.model, decay=decay, use_warmup=True).get_decay(s + 1) == rule(s)
        if warmup == "none":
            assert ModelEmaV2(parts.model, decay=decay).decay == rule(s)
            if s:
                assert ModelEmaV3(parts.model, decay=decay).get_decay(s + 1) == rule(s)
    if warmup != "none":  # the warmups ramp up to the decay
        assert rule(1) < rule(10) < rule(1000) <= decay
    expected = {k: v.clone() for k, v in parts.ema.state_dict().items()}
    torch.manual_seed(0)
    for s in range(4):
        with torch.no_grad():
            for p in parts.model.parameters():
                p.add_(torch.randn_like(p))  # the model moves; the averages follow it
        parts.average.update(s)
        if isinstance(timm, ModelEmaV3):
            timm.update(parts.model, step=s + 1)
        elif timm is not None:
            timm.update(parts.model)
        for k, v in parts.model.state_dict().items():
            expected[k] = rule(s) * expected[k] + (1 - rule(s)) * v
        for k, v in parts.ema.state_dict().items():
            torch.testing.assert_close(v, expected[k], rtol=1e-5, atol=1e-6)
            if timm is not None:  # V3 lerps as Average does (bit for bit); V2 multiplies and adds
                exact = isinstance(timm, ModelEmaV3)
                tolerance = {"rtol": 0, "atol": 0} if exact else {"rtol": 1e-5, "atol": 1e-6}
                torch.testing.assert_close(v, timm.module.state_dict()[k], **tolerance)
