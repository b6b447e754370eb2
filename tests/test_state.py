"""The training state a checkpoint holds (train/state.py): it round-trips, and an incomplete
payload is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from helpers import RESUME_V1


def test_train_state_round_trips_and_refuses_incomplete_payloads(tmp_path: Path) -> None:
    from vitkit.errors import CheckpointError
    from vitkit.train.state import LiveRun, TrainState

    state = TrainState.read(RESUME_V1 / "run" / "checkpoints" / "step_00000002" / "state.pt")
    state.write(tmp_path / "state.pt")  # a round trip keeps every field
    again = TrainState.read(tmp_path / "state.pt")
    assert again.step == 2 and again.window == state.window and torch.equal(again.rng, state.rng)
    assert state.objective is None  # a classification run's
    masked = LiveRun(  # a masked-patch run cannot take a state without the objective's weights
        objective=torch.nn.Linear(1, 1), optimizer=None, ema=None, mpp=torch.nn.Linear(1, 1),
        device=torch.device("cpu"),
    )  # fmt: skip
    with pytest.raises(CheckpointError, match="holds no mask embedding and head"):
        state.restore(masked)
    payload = torch.load(tmp_path / "state.pt", weights_only=True)
    for field in ("rng", "objective"):  # every field but what vitkit.compat fills in
        broken = {k: v for k, v in payload.items() if k != field}
        torch.save(broken, tmp_path / "broken.pt")
        with pytest.raises(CheckpointError, match=f"not a vitkit training state: '{field}'"):
            TrainState.read(tmp_path / "broken.pt")


def test_the_log_keeps_what_the_checkpoint_resumed_holds(tmp_path: Path) -> None:
    """A resumed run's log is cut after its checkpoint's step; and, when that checkpoint was
    saved without its step's evaluation (``eval_due``: a stop dropped it), before that
    evaluation too, which the resumed run does again: a process killed after redoing it, before
    its next checkpoint, would otherwise log it twice."""
    import json

    from vitkit.train.state import truncate_metrics

    records = [{"step": 1}, {"step": 2}, {"step": 2, "split": "val"}, {"step": 3}]
    path = tmp_path / "metrics.jsonl"

    def kept(**kw: bool) -> list[dict]:
        path.write_text("".join(json.dumps(r) + "\n" for r in records) + '{"step": 4, "lo')
        truncate_metrics(path, 2, **kw)
        return [json.loads(line) for line in path.read_text().splitlines()]

    assert kept() == records[:3]  # and the line torn by a kill
    assert kept(evaluated=False) == records[:2]
