"""What a finished run leaves for a person: a loss/accuracy curve and (when it classifies) a
confusion matrix (its non-zero cells as CSV, and a PNG whose size is bounded whatever the number
of classes: ImageNet's 1,000 or 21,843 too), drawn from ``metrics.jsonl`` and the final
evaluation; and the run's time to accuracy and best evaluation, read from the same log."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..files import atomic_write, atomic_write_text
from .metrics_log import METRICS_FILE, read_records

if TYPE_CHECKING:
    from ..eval.metrics import Evaluation

DPI = 100
ANNOTATED_MAX = 30  # classes whose every cell is drawn with its count: at most 1,900 px a side
BINS_MAX = 800  # a larger matrix is drawn in blocks of classes, about a pixel each
FIGURE_INCHES = (17.0, 10.0)  # the bounded figure: 1,700 x 1,000 px at DPI
CONFUSED_SHOWN = 25


def _records(run_dir: Path) -> list[dict[str, Any]]:
    return [record for _, record in read_records(run_dir / METRICS_FILE)]


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
    ``run_s`` is the run's time then."""
    records = _records(run_dir)
    evaluations = [r for r in records if r.get("split") == "val"] or [
        r for r in records if r.get("split") == "test"
    ]
    if not evaluations:
        return None
    return max(evaluations, key=lambda r: r["accuracy"])  # the first of equals


def write_report(run_dir: Path, result: Evaluation, split: str, classes: list[str]) -> list[Path]:
    """Write ``curves.png`` and, for a classifier, ``confusion.csv`` and ``confusion.png`` of
    ``result`` (an evaluation on ``split``) into ``run_dir``; returns their paths."""
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
    atomic_write(curves, lambda tmp: fig.savefig(tmp, dpi=DPI, format="png"))
    plt.close(fig)

    cells = result.confusion
    if cells is None:  # masked patch prediction: no classes to confuse
        return [curves]
    table = run_dir / "confusion.csv"
    write_confusion_table(table, cells, classes)
    title = f"{split} accuracy {result.accuracy:.4f}"
    fig = confusion_figure(cells, classes, title=title)
    matrix = run_dir / "confusion.png"
    atomic_write(matrix, lambda tmp: fig.savefig(tmp, dpi=DPI, format="png"))
    plt.close(fig)
    return [curves, table, matrix]


def write_confusion_table(
    path: Path, cells: list[tuple[int, int, int]], classes: list[str]
) -> None:
    """``confusion.csv``: every non-zero cell of the confusion matrix, one row each (true,
    predicted, count, true_name, predicted_name), in the order of ``cells``; written whole or
    not at all, in UTF-8."""
    text = io.StringIO(newline="")
    out = csv.writer(text)
    out.writerow(["true", "predicted", "count", "true_name", "predicted_name"])
    out.writerows((t, p, n, classes[t], classes[p]) for t, p, n in cells)
    atomic_write_text(path, text.getvalue())


def most_confused(
    cells: list[tuple[int, int, int]], count: int = CONFUSED_SHOWN
) -> list[tuple[int, int, int]]:
    """The ``count`` off-diagonal cells with the most images, most first (ties: by true, then
    predicted class)."""
    wrong = [c for c in cells if c[0] != c[1]]
    return sorted(wrong, key=lambda c: (-c[2], c[0], c[1]))[:count]


def confusion_figure(cells: list[tuple[int, int, int]], classes: list[str], *, title: str) -> Any:
    """The confusion matrix as a matplotlib figure (rows: true class). Up to
    ``ANNOTATED_MAX`` classes every cell is drawn with its count and the axes name the classes;
    above, the figure is bounded whatever the number of classes (``FIGURE_INCHES`` at ``DPI``,
    at most ``BINS_MAX`` x ``BINS_MAX`` cells, each the sum of a block of classes, on a log
    scale, no text per cell) beside a table of the most confused pairs."""
    import matplotlib.pyplot as plt
    import numpy as np

    k = len(classes)
    true, predicted, counts = np.array(cells, dtype=np.int64).reshape(-1, 3).T  # 3 x (cells,)
    if k <= ANNOTATED_MAX:
        matrix = np.zeros((k, k), dtype=np.int64)
        np.add.at(matrix, (true, predicted), counts)
        fig, ax = plt.subplots(figsize=(1.0 + 0.6 * k, 1.0 + 0.6 * k))
        ax.imshow(matrix, cmap="Blues")
        for i in range(k):
            for j in range(k):
                ax.text(j, i, str(matrix[i, j]), ha="center", va="center", fontsize=7)
        ax.set_xticks(range(k), classes, rotation=60, ha="right", fontsize=8)
        ax.set_yticks(range(k), classes, fontsize=8)
        ax.set(xlabel="predicted", ylabel="true", title=title)
        fig.tight_layout()
        return fig
    bins = min(k, BINS_MAX)  # class c falls in bin c * bins // k
    binned = np.zeros((bins, bins), dtype=np.float64)
    np.add.at(binned, (true * bins // k, predicted * bins // k), counts)
    fig, (ax, side) = plt.subplots(
        1, 2, figsize=FIGURE_INCHES, gridspec_kw={"width_ratios": [1.6, 1]}
    )
    shown = ax.imshow(np.log1p(binned), cmap="Blues", interpolation="nearest", extent=(0, k, k, 0))
    fig.colorbar(shown, ax=ax, fraction=0.046, pad=0.04, label="log(1 + images)")
    per_bin = f", {k / bins:.1f} classes a cell" if bins < k else ""
    ax.set(
        xlabel="predicted class (index)",
        ylabel="true class (index)",
        title=f"{title}, {k:,} classes{per_bin}",
    )
    images_of = np.bincount(true, weights=counts, minlength=k)  # (K,) images of each true class
    lines = [f"{'images':>7} {'share':>6}  true -> predicted"]
    lines += [
        f"{n:>7} {n / images_of[t]:>6.1%}  {_short(classes[t])} -> {_short(classes[p])}"
        for t, p, n in most_confused(cells)
    ]
    side.axis("off")
    side.set_title("most confused pairs (all cells: confusion.csv)")
    side.text(0, 1, "\n".join(lines), va="top", family="monospace", fontsize=9)
    fig.tight_layout()
    return fig


def _short(name: str, width: int = 30) -> str:
    return name if len(name) <= width else name[: width - 3] + "..."
