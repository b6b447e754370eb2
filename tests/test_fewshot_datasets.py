"""Few-shot across datasets (issue 26 item 3): ``vitkit fewshot CKPT --data A --data B`` reads
each dataset's images through the model once and prints one table (and JSON); a training run's
``train.fewshot_data`` evaluates the datasets it names at every evaluation, under their own metric
names, while ``train.fewshot`` keeps its meaning and names."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import vitkit.eval.fewshot as fewshot
from helpers import random_checkpoint
from vitkit import fit
from vitkit.cli import main
from vitkit.config import RunConfig, data_names, parse_set, replace
from vitkit.data.run_data import evaluation_split
from vitkit.io.api import load
from vitkit.recipes import get_recipe


def image_folder(root: Path, classes: int, train: int, test: int, seed: int) -> Path:
    """``root/{train,test}/c<k>/<i>.png``: ``train`` and ``test`` small images per class, each
    class a colour of its own plus noise (so features tell classes apart a little)."""
    rng = np.random.default_rng(seed)
    for split, per_class in (("train", train), ("test", test)):
        for k in range(classes):
            folder = root / split / f"c{k}"
            folder.mkdir(parents=True)
            for i in range(per_class):
                colour = np.array([40 * k, 255 - 40 * k, 120], dtype=np.int64)
                pixels = np.clip(colour + rng.integers(-30, 30, (12, 14, 3)), 0, 255)
                Image.fromarray(pixels.astype(np.uint8)).save(folder / f"{i}.png")
    return root


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> tuple[Path, Path]:
    """Two stand-in datasets: 3 classes (2 training and 2 test images each) and 5 classes (2
    and 1); with shots (1, 2) every training image is in some subset."""
    root = tmp_path_factory.mktemp("fewshot")
    return (
        image_folder(root / "three", classes=3, train=2, test=2, seed=0),
        image_folder(root / "five", classes=5, train=2, test=1, seed=1),
    )


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    """A tiny random ViT (16 px, 10 classes: neither dataset's number) with pre-logits."""
    return random_checkpoint(
        tmp_path_factory.mktemp("ckpt") / "tiny",
        image_size=16,
        patch_size=4,
        representation_size=24,
    )


def test_data_names() -> None:
    specs = ["/data/pets", "hf:user/beans", "cifar10:/x", "synthetic", "wds:/s/flowers/"]
    assert data_names(specs) == ["pets", "beans", "cifar10", "synthetic", "flowers"]
    assert data_names(["hf:/p/q/*.parquet", "hf:/d/beans/train.parquet", "/my data"]) == [
        "q",
        "beans",
        "my_data",
    ]
    assert data_names(["/a/test", "/b/test", "/c/test"]) == ["test", "test-2", "test-3"]
    # the key reads paths whole, an 'x' in them included (an 'x' splits numbers only: 24x48)
    assert parse_set(RunConfig, ["train.fewshot_data=/data/box"]) == {
        "train.fewshot_data": ("/data/box",)
    }
    assert parse_set(RunConfig, ["train.fewshot_data=(/a,hf:b)"]) == {
        "train.fewshot_data": ("/a", "hf:b")
    }
    with pytest.raises(ValueError, match="distinct data specs"):
        replace(get_recipe("smoke"), {"train.fewshot_data": ("/a", "/a")})


def test_fewshot_over_datasets_reads_each_image_once(
    checkpoint: Path,
    folders: tuple[Path, Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    three, five = folders
    forward = fewshot._forward_pre_logits
    images_seen: list[int] = []

    def counted(model, images, *args):
        images_seen.append(len(images))
        return forward(model, images, *args)

    monkeypatch.setattr(fewshot, "_forward_pre_logits", counted)
    out_json = tmp_path / "fewshot.json"
    argv = ["fewshot", str(checkpoint), "--data", str(three), "--data", str(five)]
    argv += ["--shots", "1,2", "--seeds", "3", "--batch-size", "4", "--json", str(out_json)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    # 3 seeds x 2 shot counts = 6 subsets per dataset, yet every image went through once:
    # (6 training + 6 test) + (10 training + 5 test)
    assert sum(images_seen) == 12 + 15
    lines = out.splitlines()
    table = lines[lines.index(next(x for x in lines if x.startswith("few-shot linear"))) :]
    assert "l2=1024; vitkit sampling, mean +- std over 3 seeds; images resized to 16x16" in table[0]
    assert re.split(r"\s+", table[1]) == ["data", "classes", "train", "test", "1-shot", "2-shot"]
    cell = r"([0-9.]+) \+- ([0-9.]+)"
    rows = [
        re.fullmatch(rf"(\S+)\s+(\d+)\s+(\d+)\s+(\d+)\s+{cell}\s+{cell}", x) for x in table[2:4]
    ]
    assert [r.groups()[:4] for r in rows] == [("three", "3", "6", "6"), ("five", "5", "10", "5")]
    written = json.loads(out_json.read_text())
    assert written["sampling"] == "vitkit" and written["preprocess"] == "resize"
    assert [d["name"] for d in written["datasets"]] == ["three", "five"]

    # the figures are fewshot_model's on each dataset (and the table shows them)
    model = load(checkpoint)
    for row, found, folder in zip(rows, written["datasets"], folders, strict=True):
        split = evaluation_split(str(folder), None, model.cfg, source="test")
        expected = fewshot.fewshot_model(
            model, split.train, split.dataset, shots=(1, 2), seeds=3, image_size=16
        )
        assert found["accuracy"] == {str(k): v for k, v in expected.items()}
        shown = [float(x) for x in row.groups()[4:]]
        assert shown == pytest.approx(
            [expected[1]["mean"], expected[1]["std"], expected[2]["mean"], expected[2]["std"]],
            abs=5e-5,
        )


def test_fewshot_cli_takes_big_vision_sampling_and_preprocessing(
    checkpoint: Path, folders: tuple[Path, Path], tmp_path: Path, capsys
) -> None:
    three, _ = folders
    out_json = tmp_path / "bv.json"
    argv = ["fewshot", str(checkpoint), "--data", str(three), "--shots", "1,2", "--seeds", "2"]
    argv += ["--sampling", "big_vision", "--preprocess", "big_vision", "--json", str(out_json)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "big_vision sampling" in out and "resized to 18x18 and their centre 16x16" in out
    model = load(checkpoint)
    split = evaluation_split(str(three), None, model.cfg, source="test")
    expected = fewshot.fewshot_model(
        model, split.train, split.dataset, shots=(1, 2), seeds=2, image_size=16,
        sampling="big_vision", preprocess="big_vision",
    )  # fmt: skip
    found = json.loads(out_json.read_text())["datasets"][0]["accuracy"]
    assert found == {str(k): v for k, v in expected.items()}


def test_fewshot_cli_errors(checkpoint: Path, folders: tuple[Path, Path], capsys) -> None:
    three, five = folders
    ckpt = str(checkpoint)
    assert main(["fewshot", ckpt, "--data", str(three), "--data", str(three)]) == 2
    assert "--data names a dataset twice" in capsys.readouterr().err
    assert main(["fewshot", ckpt, "--data", str(three), "--data", str(five) + "/nope"]) == 2
    assert "nope not found" in capsys.readouterr().err  # before the checkpoint is read
    assert main(["fewshot", ckpt, "--data", str(three), "--shots", "3"]) == 2
    assert "fewer than shots=3" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # argparse's own error
        main(["fewshot", ckpt, "--data", str(three), "--sampling", "numpy"])
    assert "invalid choice: 'numpy'" in capsys.readouterr().err
    # the checkpoint records no data to fall back on
    assert main(["fewshot", ckpt]) == 2
    assert "records no data" in capsys.readouterr().err


def test_training_evaluates_fewshot_data_under_its_names(
    folders: tuple[Path, Path], tmp_path: Path
) -> None:
    three, five = folders
    run = replace(
        get_recipe("smoke"),
        {"train.fewshot": (1, 2), "train.fewshot_data": (str(three), str(five))},
    )
    fit(run, run_dir=tmp_path / "run", progress=False)
    records = [
        json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().split("\n") if x
    ]
    evaluations = [r for r in records if "accuracy" in r and "split" in r]
    names = {k for k in evaluations[-1] if k.startswith("fewshot")}
    # the run's own data keeps train.fewshot's names; each named dataset has its own
    assert names == {
        "fewshot_1shot", "fewshot_2shot",
        "fewshot_three_1shot", "fewshot_three_2shot",
        "fewshot_five_1shot", "fewshot_five_2shot",
    }  # fmt: skip
    last = evaluations[-1]
    model = load(tmp_path / "run" / "checkpoints" / f"step_{last['step']:08d}")
    split = evaluation_split(str(five), None, model.cfg, source="test")
    expected = fewshot.fewshot_model(
        model, split.train, split.dataset, shots=(1, 2), seeds=3, image_size=16
    )
    assert last["fewshot_five_2shot"] == pytest.approx(expected[2]["mean"])


def test_training_fewshot_data_is_checked_before_the_run(
    folders: tuple[Path, Path], tmp_path: Path, capsys
) -> None:
    three, _ = folders
    run_dir = tmp_path / "run"
    # without train.fewshot the datasets take big_vision's shots, up to 25: too many here
    with pytest.raises(ValueError, match="fewer than shots=25"):
        fit(replace(get_recipe("smoke"), {"train.fewshot_data": (str(three),)}), run_dir=run_dir)
    with pytest.raises(ValueError, match="has no training images"):
        fit(
            replace(get_recipe("smoke"), {"train.fewshot_data": (str(three / "test"),)}),
            run_dir=run_dir,
        )
    assert not run_dir.exists()
    argv = ["train", "--recipe", "smoke", "--run-dir", str(run_dir), "--no-progress"]
    assert main([*argv, "--set", f"train.fewshot_data={tmp_path / 'nope'}"]) == 2
    assert "nope not found" in capsys.readouterr().err
    assert not run_dir.exists()
