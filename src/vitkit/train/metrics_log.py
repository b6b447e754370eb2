"""A run's metrics log: ``metrics.jsonl`` in the run directory, one JSON record a line (a log
window's training figures, an evaluation's), mirrored to TensorBoard when it is installed.

Every record gets two clocks: ``time_s``, seconds since this process started (time to accuracy
counts from there; a resumed run's clock starts at its restart), and ``run_s``, the run's own
time, which goes on across resumes (``earlier_s``: what the checkpoint resumed from had counted,
less this process's clock then). Under torchrun every process keeps one; rank 0 alone writes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..runtime.clock import process_seconds

METRICS_FILE = "metrics.jsonl"


def read_records(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """The records of the log ``path`` (none when it is missing), each with its line as
    written: a JSON object with an integer ``step`` and a number ``loss`` and ``accuracy``, as
    every record vitkit writes has. Any other line (torn by a kill mid-write, or edited by
    hand) is left out, by every reader alike."""
    if not path.is_file():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if (
            isinstance(record, dict)
            and type(record.get("step")) is int
            and all(isinstance(record.get(k), (int, float)) for k in ("loss", "accuracy"))
        ):
            records.append((line, record))
    return records


class MetricsLog:
    """Appends records to ``run_dir/metrics.jsonl`` (when ``main``) with their clocks."""

    def __init__(self, run_dir: Path, *, main: bool, earlier_s: float = 0.0) -> None:
        self.path, self.main, self.earlier_s = run_dir / METRICS_FILE, main, earlier_s
        self.board = _tensorboard(run_dir) if main else None

    def run_seconds(self) -> float:
        """The run's time so far, summed over the processes that resumed it."""
        return self.earlier_s + process_seconds()

    def write(self, record: dict[str, Any]) -> None:
        """Append ``record`` with its ``time_s`` and ``run_s`` (added to it, in place)."""
        if not self.main:
            return
        record["time_s"] = round(process_seconds(), 2)
        record["run_s"] = round(self.run_seconds(), 2)
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")
        if self.board is not None:
            prefix = record.get("split", "train")
            for key, value in record.items():
                if isinstance(value, float):
                    self.board.add_scalar(f"{prefix}/{key}", value, record["step"])

    def logged(self, step: int, split: str) -> bool:
        """Whether the log has a record of ``split`` at ``step``."""
        return any(
            r["step"] == step and r.get("split") == split for _, r in read_records(self.path)
        )


def _tensorboard(run_dir: Path) -> Any:
    """A TensorBoard writer when tensorboard is installed (it is optional), else None."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        return None
    return SummaryWriter(str(run_dir / "tensorboard"))
