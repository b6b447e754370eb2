"""A run past its best: the validation loss risen at 3 evaluations in a row while the training
loss fell is said once, naming best/'s step; with ``train.early_stop`` the run ends there, saved
and tested, and the same command again trains no further."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from vitkit import fit
from vitkit.config import replace
from vitkit.recipes import get_recipe
from vitkit.train import overfit
from vitkit.train.overfit import Overfitting

# (train loss logged before it, val loss, val accuracy): the validation loss rises from the second
RISING = [(1.0, 1.2, 0.5), (0.9, 1.1, 0.6), (0.8, 1.15, 0.58), (0.7, 1.2, 0.57), (0.6, 1.3, 0.55)]


def _run(seen: Overfitting, evaluations: list[tuple[float, float, float]]) -> list[bool]:
    """(train loss logged before it, val loss, val accuracy) of each evaluation, 10 steps apart:
    whether each one raised the signal."""
    said = []
    for i, (train, loss, accuracy) in enumerate(evaluations):
        seen.trained(train)
        said.append(seen.evaluated(10 * (i + 1), loss, accuracy))
    return said


def test_three_rises_while_the_training_loss_falls_are_said_once() -> None:
    seen = Overfitting()
    assert _run(seen, RISING) == [False, False, False, False, True]  # 1.1 < 1.15 < 1.2 < 1.3
    assert _run(seen, [(0.5, 1.4, 0.5)]) == [False]  # said once
    said = seen.message("val", early_stop=False)
    assert "rose at 3 evaluations in a row (1.100 at step 20 to 1.300 at step 50)" in said
    assert "best/ holds step 20 (val accuracy 0.6000)" in said and "--init-from" in said
    # two rises and a fall, or rises while the training loss rises too: nothing
    assert not any(_run(Overfitting(), [*RISING[:3], (0.7, 1.1, 0.6), (0.6, 1.2, 0.6)]))
    assert not any(
        _run(
            Overfitting(), [(t, v, a) for (_, v, a), t in zip(RISING, (1, 2, 3, 4, 5), strict=True)]
        )
    )


def test_a_resumed_run_sees_what_its_log_holds_up_to_its_step(tmp_path: Path) -> None:
    """Rebuilt from metrics.jsonl: the records up to the resumed step, without that step's
    evaluation when its checkpoint was saved without it (rank 0 may not have cut it yet)."""
    log = tmp_path / "metrics.jsonl"
    lines = []
    for i, (train, loss, accuracy) in enumerate(RISING):
        lines.append({"step": 10 * (i + 1), "loss": train, "accuracy": 0.9})
        lines.append({"step": 10 * (i + 1), "split": "val", "loss": loss, "accuracy": accuracy})
    lines.append({"step": 50, "split": "test", "loss": 0.1, "accuracy": 1.0})  # the final test
    log.write_text("".join(json.dumps(r) + "\n" for r in lines) + '{"step": 5')  # a torn line
    assert Overfitting.from_log(log, 50, "val").said
    assert not Overfitting.from_log(
        log, 50, "val", evaluated=False
    ).said  # step 50's evaluation redone
    assert not Overfitting.from_log(log, 40, "val").said
    uninterrupted = Overfitting()
    _run(uninterrupted, RISING[:4])
    assert Overfitting.from_log(log, 40, "val") == uninterrupted


def test_early_stop_ends_the_run_where_it_is_said(tmp_path: Path, monkeypatch, caplog) -> None:
    """The loop's side: said once, on the log; with early_stop the run ends at that evaluation's
    step, saved, its result naming why; the same run again trains no further. (When the signal
    holds is the test above: here it holds at the second evaluation.)"""
    monkeypatch.setattr(overfit.Overfitting, "holds", lambda self: len(self.evaluations) >= 2)
    sets = {"train.duration": "12st", "train.eval_every": "2st", "train.save_every": "12st"}
    run = replace(get_recipe("smoke"), {**sets, "train.device": "cpu", "data.num_workers": 0})
    with caplog.at_level(logging.INFO, logger="vitkit.train.loop"):
        result = fit(
            replace(run, {"train.early_stop": True}), run_dir=tmp_path / "a", progress=False
        )
    assert caplog.text.count("rose at 3 evaluations in a row") == 1
    assert result.ended_early == "ended early at step 4 (train.early_stop)"
    assert sorted(p.name for p in (tmp_path / "a" / "checkpoints").iterdir()) == ["step_00000004"]
    again = fit(replace(run, {"train.early_stop": True}), run_dir=tmp_path / "a", progress=False)
    assert again.ended_early == result.ended_early
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="vitkit.train.loop"):
        full = fit(run, run_dir=tmp_path / "b", progress=False)  # said, and trained to the end
    assert full.ended_early is None and caplog.text.count("Try pretrained weights by name") == 1
