"""benchmarks/train_e2e.py, smallest: ``vitkit train`` and the timm script each train the stated
number of images in fresh processes on the same folder, and the table holds both rows."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture
def e2e(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    pytest.importorskip("timm")
    monkeypatch.syspath_prepend(str(BENCHMARKS))  # the script imports its sibling loader.py
    import train_e2e

    yield train_e2e
    sys.modules.pop("train_e2e", None)
    sys.modules.pop("loader", None)


def test_both_contenders_train_the_same_images_and_are_tabled(e2e, tmp_path: Path, capsys) -> None:
    rng = np.random.default_rng(0)
    for c in range(2):
        (tmp_path / f"data/train/{c}").mkdir(parents=True)
        for k in range(20):  # 2 of each class held out by both: every tenth file, vitkit's 0.1
            pixels = rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(tmp_path / f"data/train/{c}/{k:02d}.jpg", quality=90)
    out = tmp_path / "e2e.md"
    small = ["--steps", "2", "--log-every", "1", "--warmup", "1", "--batch", "4"]
    small += ["--image-size", "32", "--workers", "0", "--rounds", "1", "--out", str(out)]
    e2e.main([str(tmp_path / "data"), *small])
    printed = capsys.readouterr().out
    table = out.read_text()
    assert table.strip() in printed
    rows = [line for line in table.splitlines() if line.startswith("| vitkit") or "| timm" in line]
    assert [row.split(" | ")[0] for row in rows] == ["| vitkit", "| timm"]
    cells = [[c.strip() for c in row.strip("|").split("|")] for row in rows]
    for name, whole, _, ratio, steady, _, steady_ratio, outside in cells:
        assert float(whole) > 0 and float(steady) > 0 and float(ratio) > 0 and float(outside) > 0
        assert name != "timm" or ratio == steady_ratio == "1.000"  # timm against itself
    assert "round 0 vitkit" in printed and "round 0 timm" in printed


def test_arguments_that_cannot_give_a_steady_state_are_refused(e2e, tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        e2e.main([str(tmp_path), "--steps", "3", "--log-every", "2"])
    with pytest.raises(SystemExit):
        e2e.main([str(tmp_path), "--steps", "4", "--log-every", "2", "--warmup", "4"])
