"""What a finished run leaves (``train/report.py``), at ImageNet's class counts: the confusion
matrix stays sparse from ``evaluate`` to the report, and its figure is bounded in pixels and text
whatever the number of classes."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import matplotlib
import pytest
import torch
from PIL import Image
from torch import nn

from vitkit import fit
from vitkit.config import replace
from vitkit.eval.metrics import evaluate
from vitkit.recipes import get_recipe
from vitkit.train.report import (
    ANNOTATED_MAX,
    BINS_MAX,
    CONFUSED_SHOWN,
    confusion_figure,
    most_confused,
    write_report,
)

matplotlib.use("Agg")


def _texts(fig) -> list[str]:
    """The texts drawn in ``fig``: visible and not empty."""
    return [
        t.get_text() for t in fig.findobj(matplotlib.text.Text) if t.get_visible() and t.get_text()
    ]


@pytest.mark.parametrize("k", [1000, 21843])  # ImageNet-1k's classes, and ImageNet-21k's
def test_the_confusion_of_imagenet_class_counts_is_sparse_and_its_figure_bounded(
    k: int, tmp_path: Path
) -> None:
    """1,000 predictions over K classes: ``evaluate`` returns at most one cell per image, and the
    report writes them all as CSV and a figure of at most 2,000 px a side with a bounded number
    of texts and no K x K array. Before, 21,843 classes took 31 s and 8 GB in ``evaluate`` alone
    (a dense K x K bincount per batch), and 1,000 classes drew a 60,100 px square figure with a
    million texts (killed at 22.8 GB). Now this test takes about 1 s a case, and 60 MB above the
    import (ru_maxrss) at 21,843 classes (Intel Xeon, 2 cores)."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 2 * 2, k))
    images, labels = torch.randn(1000, 3, 2, 2), torch.randint(0, k, (1000,))
    result = evaluate(model, zip(images.split(256), labels.split(256), strict=True), k)
    cells = result.confusion
    assert len(result.per_class) == k
    assert 0 < len(cells) <= 1000 and sum(n for _, _, n in cells) == 1000
    assert all(len(cell) == 3 for cell in cells) and cells == sorted(cells)
    hits = sum(n for t, p, n in cells if t == p)
    assert result.accuracy == hits / 1000

    classes = [f"n{i:08d}" for i in range(k)]
    written = write_report(tmp_path, result, "test", classes)
    assert [p.name for p in written] == ["curves.png", "confusion.csv", "confusion.png"]
    with open(tmp_path / "confusion.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(int(r["true"]), int(r["predicted"]), int(r["count"])) for r in rows] == cells
    assert all(r["true_name"] == classes[int(r["true"])] for r in rows)
    with Image.open(tmp_path / "confusion.png") as png:
        assert max(png.size) <= 2000

    fig = confusion_figure(cells, classes, title="test")
    assert len(_texts(fig)) < 100  # ticks, titles, labels and one table: not K
    arrays = [im.get_array() for im in fig.findobj(matplotlib.image.AxesImage)]
    assert arrays and all(a.size <= BINS_MAX**2 < k * k for a in arrays)


def test_few_classes_get_every_cell_annotated_and_the_most_confused_pairs_come_first(
    tmp_path: Path,
) -> None:
    classes = [f"class {i}" for i in range(4)]
    cells = [(0, 0, 5), (0, 2, 1), (1, 3, 4), (2, 2, 7), (3, 1, 4), (3, 3, 1)]
    texts = _texts(confusion_figure(cells, classes, title="val accuracy 0.5"))
    assert texts.count("0") == 16 - len(cells)  # every cell drawn, the empty ones as 0
    for n in ("5", "1", "7"):
        assert n in texts
    # ties (4 and 4) by true class, then predicted; the diagonal is not a confusion
    assert most_confused(cells) == [(1, 3, 4), (3, 1, 4), (0, 2, 1)]

    many = [f"class {i}" for i in range(ANNOTATED_MAX + 1)]
    wrong = [(t, (t + 1) % len(many), t + 1) for t in range(len(many))]  # class t: t+1 images
    table = next(t for t in _texts(confusion_figure(wrong, many, title="x")) if "->" in t)
    lines = table.splitlines()[1:]
    assert len(lines) == CONFUSED_SHOWN
    assert lines[0].split() == ["31", "100.0%", "class", "30", "->", "class", "0"]


def test_a_run_with_a_thousand_classes_finishes_with_its_report(tmp_path: Path) -> None:
    """The smoke recipe at 1,000 classes (8,000 test images), 3 steps: before, the end-of-run
    report exhausted memory after the last checkpoint (22.8 GB); about 5 s now."""
    sets = {"model.num_classes": 1000, "train.device": "cpu", "train.duration": "3st"}
    sets |= {"train.eval_every": "3st", "train.save_every": "3st"}
    run = replace(get_recipe("smoke"), sets)
    result = fit(run, run_dir=tmp_path, progress=False)
    assert result.evaluation.count == 8000 and len(result.evaluation.per_class) == 1000
    with Image.open(tmp_path / "confusion.png") as png:
        assert max(png.size) <= 2000
    assert (tmp_path / "confusion.csv").is_file()


def test_a_log_line_that_is_no_record_is_left_out_of_the_curves(tmp_path: Path) -> None:
    """A valid JSON line without an accuracy, edited into metrics.jsonl, made the resumed run
    train to its end, then fail drawing its curves (KeyError: 'accuracy', exit 1)."""
    from vitkit.train.report import best_evaluation, write_report

    records = [{"step": 1, "loss": 1.2, "accuracy": 0.3}, {"step": 2, "loss": 1.0, "accuracy": 0.4}]
    records.append({"step": 2, "split": "val", "loss": 1.1, "accuracy": 0.35})
    lines = [json.dumps(r) for r in records] + ['{"step": 5, "loss": NaN}', "[1]", "not json"]
    (tmp_path / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    y = torch.tensor([0, 1, 1, 0])
    result = evaluate(nn.Identity(), [(torch.eye(2)[y] * 3.0, y)], 2)
    written = write_report(tmp_path, result, "test", ["a", "b"])
    assert [p.name for p in written] == ["curves.png", "confusion.csv", "confusion.png"]
    assert best_evaluation(tmp_path) == records[2]
