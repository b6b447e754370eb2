"""The training state a checkpoint holds (train/state.py): it round-trips, and an incomplete
payload is refused."""

from __future__ import annotations

import json
import re
import shutil
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


def _flip(path: Path, at: float = 0.5, count: int = 64) -> Path:
    """``path`` with ``count`` bytes inverted from ``at`` of its length on: what a failing disk or
    a bad copy leaves, which a file's structure (a zip's, safetensors' header) does not reveal."""
    data = bytearray(path.read_bytes())
    start = int(len(data) * at)
    data[start : start + count] = bytes(b ^ 0xFF for b in data[start : start + count])
    path.write_bytes(bytes(data))
    return path


def _without_digests(checkpoint: Path) -> None:
    """``checkpoint``'s config.json as a vitkit before digests wrote it."""
    config = json.loads((checkpoint / "config.json").read_text())
    del config["sha256"]
    (checkpoint / "config.json").write_text(json.dumps(config))


def _resumable(tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the committed run stopped at step 2, its checkpoint written again by today's
    vitkit (``save_checkpoint``: with digests); the run directory and the checkpoint."""
    from vitkit.config import RunConfig
    from vitkit.io.checkpoint import read_our_config
    from vitkit.train.state import load_checkpoint, save_checkpoint

    run_dir = Path(shutil.copytree(RESUME_V1 / "run", tmp_path / "run"))
    run = RunConfig.from_dict(json.loads((run_dir / "config.json").read_text()))
    checkpoint = run_dir / "checkpoints" / "step_00000002"
    weights, state = load_checkpoint(checkpoint, run.model)
    _, meta = read_our_config(checkpoint, own_run=True)
    assert save_checkpoint(run_dir, run.model, weights, state, meta=meta, keep_last=1) == checkpoint
    return run_dir, checkpoint


def test_a_checkpoint_records_its_files_digests_and_a_resume_refuses_damage(
    tmp_path: Path,
) -> None:
    """A checkpoint vitkit writes records the sha256 of model.safetensors and state.pt in its
    config.json. Resuming refuses, in one line naming the file: either file changed since it was
    written (bytes flipped mid-data: the resume continued with weights off by 1.7e7); a damaged
    state.pt of a checkpoint that records no digests (an earlier vitkit's: a traceback); a NaN
    weight (reported as "the run diverged")."""
    from safetensors.torch import load_file, save_file

    from vitkit import fit
    from vitkit.config import RunConfig
    from vitkit.errors import CheckpointError
    from vitkit.files import sha256_of

    run_dir, checkpoint = _resumable(tmp_path)
    weights_file, state_file = checkpoint / "model.safetensors", checkpoint / "state.pt"
    recorded = json.loads((checkpoint / "config.json").read_text())["sha256"]
    assert recorded == {
        name: sha256_of(checkpoint / name) for name in ("model.safetensors", "state.pt")
    }
    run = RunConfig.from_dict(json.loads((run_dir / "config.json").read_text()))

    def resume(expected: str) -> str:
        """The resume's error (a ``CheckpointError``: one line at the command line)."""
        with pytest.raises(CheckpointError, match=re.escape(expected)) as e:
            fit(run, run_dir=run_dir, progress=False)
        assert "\n" not in str(e.value)
        return str(e.value)

    whole = {p: p.read_bytes() for p in (weights_file, state_file)}
    for damaged in (weights_file, state_file):
        _flip(damaged)
        resume(f"{damaged} changed since it was written")
        damaged.write_bytes(whole[damaged])

    _without_digests(checkpoint)  # an earlier vitkit's checkpoint: its damage found as it can be
    state_file.write_bytes(whole[state_file][: len(whole[state_file]) // 2])
    resume(f"cannot read {state_file} (damaged or truncated?)")
    state_file.write_bytes(whole[state_file])
    weights = load_file(weights_file)
    weights["blocks.0.mlp.fc1.weight"][3, 1] = float("nan")
    save_file(weights, weights_file)
    err = resume(f"{weights_file}: tensor 'blocks.0.mlp.fc1.weight'")
    assert "holds 1 of 512 values that are not finite" in err and "the run diverged" not in err


def test_the_log_keeps_what_the_checkpoint_resumed_holds(tmp_path: Path) -> None:
    """A resumed run's log is cut after its checkpoint's step; and, when that checkpoint was
    saved without its step's evaluation (``eval_due``: a stop dropped it), before that
    evaluation too, which the resumed run does again: a process killed after redoing it, before
    its next checkpoint, would otherwise log it twice."""
    from vitkit.train.state import truncate_metrics

    records = [
        {"step": k, "loss": 1.0 / k, "accuracy": 0.5, **split}
        for k, split in ((1, {}), (2, {}), (2, {"split": "val"}), (3, {}))
    ]
    path = tmp_path / "metrics.jsonl"
    # lines no vitkit record is: a hand-edited record without its accuracy (the resumed run
    # trained, then failed drawing its curves), JSON that is not a record
    edited = [
        '{"step": 1, "loss": NaN}',
        "[1, 2]",
        '"x"',
        '{"step": "2", "loss": 1, "accuracy": 0}',
    ]

    def kept(**kw: bool) -> list[dict]:
        lines = [json.dumps(r) for r in records[:2]] + edited
        lines += [json.dumps(r) for r in records[2:]] + ['{"step": 4, "lo']
        path.write_text("".join(f"{line}\n" for line in lines))
        truncate_metrics(path, 2, **kw)
        return [json.loads(line) for line in path.read_text().splitlines()]

    assert kept() == records[:3]  # and the line torn by a kill
    assert kept(evaluated=False) == records[:2]


def test_a_damaged_newest_checkpoint_names_the_one_before_and_how_to_continue_from_it(
    tmp_path: Path,
) -> None:
    """A run whose newest checkpoint cannot be read (a truncated state.pt) is refused in one line
    that names the checkpoint before it and what to delete to continue from there; nothing is
    deleted for the user, and once it is, the run continues from that one to its end."""
    from vitkit import fit
    from vitkit.errors import CheckpointError

    fit(recipe="smoke", run_dir=tmp_path, progress=False)  # 8 steps, checkpoints at 4 and 8
    before, newest = sorted((tmp_path / "checkpoints").iterdir())
    state = newest / "state.pt"
    state.write_bytes(state.read_bytes()[:1000])
    with pytest.raises(CheckpointError) as e:
        fit(recipe="smoke", run_dir=tmp_path, progress=False)
    assert str(e.value).endswith(f"to continue from {before.name} instead, delete {newest}")
    assert f"{state} changed since it was written" in str(e.value) and "\n" not in str(e.value)
    assert newest.is_dir()
    shutil.rmtree(newest)
    assert fit(recipe="smoke", run_dir=tmp_path, progress=False).ended_early is None
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [
        before.name,
        newest.name,
    ]
