"""The metrics log: one JSON record a line with its two clocks, the run's going on across
resumes; rank 0 alone writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vitkit.runtime.clock import process_seconds
from vitkit.train.metrics_log import METRICS_FILE, MetricsLog


def test_records_get_both_clocks_and_are_found_again(tmp_path: Path) -> None:
    metrics = MetricsLog(tmp_path, main=True, earlier_s=100.0)
    metrics.write({"step": 3, "loss": 0.5, "accuracy": 0.75})
    metrics.write({"step": 3, "split": "val", "loss": 0.9, "accuracy": 0.25})
    first, second = map(json.loads, (tmp_path / METRICS_FILE).read_text().splitlines())
    assert first["step"] == 3 and first["loss"] == 0.5 and second["split"] == "val"
    assert 0 <= first["time_s"] <= process_seconds() + 0.01
    assert first["run_s"] - first["time_s"] == pytest.approx(
        100.0, abs=0.02
    )  # the earlier processes' time
    assert metrics.logged(3, "val") and not metrics.logged(3, "test")
    assert not metrics.logged(4, "val")


def test_only_the_main_process_writes(tmp_path: Path) -> None:
    metrics = MetricsLog(tmp_path, main=False, earlier_s=5.0)
    metrics.write({"step": 1, "loss": 1.0, "accuracy": 0.5})
    assert not (tmp_path / METRICS_FILE).exists() and not metrics.logged(1, "train")
    assert metrics.run_seconds() >= 5.0
