"""What a finished run leaves for a person: a loss/accuracy curve and (when it classifies) a
confusion matrix (PNG), drawn from ``metrics.jsonl`` and the final evaluation; and the run's time
to accuracy and best evaluation, read from the same log."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _records(run_dir: Path) -> list[dict[str, Any]]:
    path = run_dir / "metrics.jsonl"
    return (
        [json.loads(line) for line in path.read_text().splitlines() if line]
        if path.is_file()
        else []
    )


def time_to_accuracy(
    run_dir: Path,
    *,
    targets: tuple[float, ...] = (0.90, 0.91),
    at_minutes: float = 15.0,
    key: str = "accuracy",
) -> dict[str, Any]:
    """From ``metrics.jsonl``'s test records (``time_s``: seconds since the process started):
    the first time each of ``targets`` was reached (None if never), and the accuracy of the last
    evaluation at or before ``at_minutes`` (None if none). ``key``: which accuracy
    (``accuracy_one_view``: without test-time flips). For a run that was never interrupted (a
    resumed process starts its clock again)."""
    test = [r for r in _records(run_dir) if r.get("split") == "test" and key in r]
    first = {t: next((r["time_s"] for r in test if r[key] >= t), None) for t in targets}
    before = [r for r in test if r["time_s"] <= at_minutes * 60]
    return {
        "seconds_to": first,
        "at_minutes": at_minutes,
        "accuracy_at": before[-1][key] if before else None,
    }


def best_evaluation(run_dir: Path) -> dict[str, Any] | None:
    """The first evaluation with the best accuracy (the one whose weights are in ``best/``):
    among the validation records, or the test records of a run that validates on its test split.
    ``run_s`` is the run's time then (``time_s`` for a log written before it was kept)."""
    records = _records(run_dir)
    evaluations = [r for r in records if r.get("split") == "val"] or [
        r for r in records if r.get("split") == "test"
    ]
    if not evaluations:
        return None
    best = max(evaluations, key=lambda r: r["accuracy"])  # the first of equals
    return {**best, "run_s": best.get("run_s", best["time_s"])}


def write_report(run_dir: Path, result: dict[str, Any], classes: list[str]) -> list[Path]:
    """Write ``curves.png`` and ``confusion.png`` into ``run_dir``; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = _records(run_dir)
    train = [r for r in records if "split" not in r]
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key in ((ax_loss, "loss"), (ax_acc, "accuracy")):
        ax.plot([r["step"] for r in train], [r[key] for r in train], label="train")
        for split in ("val", "test"):  # evaluations: validation during the run, test at its end
            points = [r for r in records if r.get("split") == split]
            if points:
                ax.plot([r["step"] for r in points], [r[key] for r in points], "o-", label=split)
    ax_loss.set(xlabel="step", ylabel="loss", title="loss")
    ax_acc.set(xlabel="step", ylabel="accuracy", title="accuracy")
    for ax in (ax_loss, ax_acc):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    curves = run_dir / "curves.png"
    fig.savefig(curves, dpi=100)
    plt.close(fig)

    if "confusion" not in result:  # masked patch prediction: no classes to confuse
        return [curves]
    confusion = result["confusion"]
    k = len(confusion)
    fig, ax = plt.subplots(figsize=(1.0 + 0.6 * k, 1.0 + 0.6 * k))
    ax.imshow(confusion, cmap="Blues")
    for i in range(k):
        for j in range(k):
            ax.text(j, i, str(confusion[i][j]), ha="center", va="center", fontsize=7)
    ax.set_xticks(range(k), classes, rotation=60, ha="right", fontsize=8)
    ax.set_yticks(range(k), classes, fontsize=8)
    split = result.get("split", "test")
    ax.set(xlabel="predicted", ylabel="true", title=f"{split} accuracy {result['accuracy']:.4f}")
    fig.tight_layout()
    matrix = run_dir / "confusion.png"
    fig.savefig(matrix, dpi=100)
    plt.close(fig)
    return [curves, matrix]
