"""The evaluator on its own: a model's accuracy on a split's batches, the best weights kept in
``best/`` only when an evaluation beats the best so far, and read back from there."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch

from vitkit.config import replace as replace_config
from vitkit.data.loader import BatchOptions
from vitkit.data.run_data import batches_of, build_data
from vitkit.eval.metrics import Evaluation
from vitkit.io.metadata import WeightsMeta
from vitkit.recipes import get_recipe
from vitkit.train.evaluator import Evaluator
from vitkit.train.inputs import read_inputs
from vitkit.train.parts import build_parts


def test_evaluates_and_keeps_only_better_weights(tmp_path: Path) -> None:
    run = replace_config(get_recipe("smoke"), {"train.precision": "fp32", "data.num_workers": 0})
    data = build_data(run.data, run.model, seed=0, in_chans=run.model.in_chans)
    cpu = torch.device("cpu")
    parts = build_parts(run, cpu, autocast=None, pretrained=False)
    inputs = read_inputs(run, data, device=cpu, shard=(0, 1), recorded=None)
    model = parts.model.eval()
    evaluate = Evaluator(run, tmp_path, parts, inputs, WeightsMeta())
    batches = batches_of(data.val, BatchOptions.evaluation(run.model, batch_size=16, uint8=True))
    result = evaluate(model, batches, data.val)
    assert 0.0 <= result.accuracy <= 1.0 and set(result.scalars()) >= {"loss", "accuracy"}

    assert evaluate.keep_if_best(result, model)  # the first evaluation beats -1
    assert evaluate.best == result.accuracy and (tmp_path / "best").is_dir()
    kept = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.no_grad():  # other weights, no better: best/ keeps the first ones
        next(model.parameters()).add_(1.0)
    assert not evaluate.keep_if_best(result, model)
    again = evaluate.best_model(torch.device("cpu"))
    assert all(torch.equal(again.state_dict()[k], v) for k, v in kept.items())
    assert evaluate.keep_if_best(replace(result, accuracy=result.accuracy + 0.1), model)
    again = evaluate.best_model(torch.device("cpu"))
    assert not torch.equal(next(again.parameters()), next(iter(kept.values())))


def test_scalars_flatten_fewshot_results() -> None:
    result = Evaluation(
        loss=1.0,
        accuracy=0.5,
        count=2,
        predictions=torch.tensor([1, 2]),
        fewshot={5: {"mean": 0.3}},
        fewshot_data={"cifar10": {10: {"mean": 0.4}}},
    )
    assert result.scalars() == {
        "loss": 1.0,
        "accuracy": 0.5,
        "fewshot_5shot": 0.3,
        "fewshot_cifar10_10shot": 0.4,
    }
