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
