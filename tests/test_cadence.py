"""When a run logs, evaluates and saves (train/cadence.py)."""

from __future__ import annotations

from vitkit.config import TrainConfig
from vitkit.train.cadence import Cadence


def test_cadence_in_steps() -> None:
    tc = TrainConfig(
        duration="2ep", batch_size=10, log_every="3st", eval_every="1ep", save_every="1000ex"
    )
    c = Cadence.from_config(tc, steps_per_epoch=50)
    assert (c.total_steps, c.log_every, c.eval_every, c.save_every) == (100, 3, 50, 100)
    assert [s for s in range(1, 101) if c.eval(s)] == [50, 100]
    assert c.log(100) and not c.log(100 - 1 - 1)  # the end always logs


def test_a_run_evaluated_only_at_its_end_says_so(tmp_path, capsys) -> None:
    """``train.eval_every=0st`` (documented: at the end only) printed "evaluation every 0 steps"."""
    from vitkit.cli import main

    argv = ["train", "--recipe", "smoke", "--set", "train.eval_every=0st", "--no-progress"]
    assert main([*argv, "--run-dir", str(tmp_path)]) == 0
    (schedule,) = [line for line in capsys.readouterr().out.splitlines() if "schedule" in line]
    assert schedule.endswith("cosine decay; evaluation at the end")
