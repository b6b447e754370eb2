"""The order of classes named by numbers (ImageNet-v2's class folders ``0`` .. ``999``): by number
when every class folder's name is a number, said by the run and by ``vitkit eval``; a checkpoint
or a run directory that records its classes keeps its order."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

import vitkit
from vitkit.cli import main
from vitkit.config import DataConfig, ModelConfig, replace
from vitkit.data import ImageFolderDataset, folder_layout
from vitkit.data.run_data import build_data, evaluation_split
from vitkit.data.sources.cells import class_order
from vitkit.recipes import get_recipe

NUMBERED = [str(k) for k in range(13)]  # 0 .. 12: by name, 10 comes before 2
BY_NAME = sorted(NUMBERED)


def _digits(root: Path, splits: tuple[str, ...] = ("train", "val"), per_class: int = 1) -> Path:
    """``root/<split>/<k>/<i>.png`` for the classes 0 .. 12: a tiny numbered folder."""
    rng = np.random.default_rng(0)
    for split in splits:
        for name in NUMBERED:
            for i in range(per_class):
                path = root / split / name / f"{i}.png"
                path.parent.mkdir(parents=True, exist_ok=True)
                Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(path)
    return root


def _labelled_by_folder(dataset) -> dict[str, int]:
    """Each image's class folder -> its label."""
    return {path.parent.name: label for path, label in dataset.samples}


def test_class_order_is_by_number_only_when_every_name_is_a_number() -> None:
    assert class_order(reversed(NUMBERED)) == NUMBERED
    assert class_order(["10", "2", "b", "a"]) == ["10", "2", "a", "b"]
    assert class_order(["2", "01", "1", "10"]) == ["01", "1", "2", "10"]
    assert class_order(["٣", "2"]) == ["2", "٣"]  # Arabic-Indic digits are names, not numbers


def test_numbered_class_folders_are_labelled_by_number_and_the_run_says_so(
    tmp_path: Path,
) -> None:
    root = _digits(tmp_path / "digits")
    assert folder_layout(root).classes == tuple(NUMBERED)
    for split in ("train", "val"):  # train and val agree
        images = ImageFolderDataset(root, split)
        assert images.classes == NUMBERED
        assert _labelled_by_folder(images) == {name: int(name) for name in NUMBERED}
    run = replace(get_recipe("smoke"), {"data.dataset": str(root)})
    notes = build_data(run.data, run.model, seed=0).notes
    assert (
        "classes: every class name is a number, so label k is the k-th by number (0, 1, 2, ..., "
        "12), not by name (0, 1, 10, ...)" in notes
    )
    (root / "train" / "a").mkdir()  # a class named otherwise: by name, and nothing to say
    (root / "train" / "10" / "0.png").rename(root / "train" / "a" / "0.png")
    (root / "train" / "10").rmdir()
    assert ImageFolderDataset(root / "train", None).classes == sorted(
        [*NUMBERED[:10], "11", "12", "a"]
    )


def _checkpoint(path: Path, class_names: list[str] | None) -> Path:
    cfg = ModelConfig(
        image_size=16, patch_size=8, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32,
        num_classes=len(NUMBERED),
    )  # fmt: skip
    return vitkit.save(vitkit.create_model(cfg), path, class_names=class_names)


def test_eval_orders_numbered_folders_by_number_unless_the_checkpoint_names_its_order(
    tmp_path: Path, capsys
) -> None:
    """A checkpoint that names no classes is evaluated with labels by number (and eval says
    so); one that records its classes in the order of names (trained before) keeps that order:
    the images of folder 10 are labelled as its head's output 2."""
    root = _digits(tmp_path / "digits", splits=("test",))
    plain = _checkpoint(tmp_path / "plain", None)
    assert main(["eval", str(plain), "--data", str(root / "test"), "--workers", "0"]) == 0
    assert "  classes: every class name is a number, so label k is the k-th by number" in (
        capsys.readouterr().out
    )

    old = _checkpoint(tmp_path / "old", BY_NAME)
    assert main(["eval", str(old), "--data", str(root / "test"), "--workers", "0"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1] == (
        "  classes: in the order the checkpoint records (0, 1, 10, ...), not the data's own "
        "(0, 1, 2, ...)"
    )
    assert "by number" not in "\n".join(out)
    model = vitkit.load(old)
    split = evaluation_split(str(root / "test"), None, model.cfg, source=str(old))
    kept = split.in_class_order(BY_NAME, "the checkpoint records")
    assert kept.classes == BY_NAME
    assert _labelled_by_folder(kept.dataset) == {name: BY_NAME.index(name) for name in NUMBERED}
    assert _labelled_by_folder(split.dataset) == {name: int(name) for name in NUMBERED}


def test_a_resumed_run_keeps_the_class_order_its_checkpoint_records(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A run directory written when numbered folders were in order by name (its checkpoints
    record that order) is continued in that order, and says so; its checkpoints go on recording
    it."""
    from helpers import stopped_copy
    from vitkit import fit

    root = _digits(tmp_path / "digits", per_class=2)
    run = replace(
        get_recipe("smoke"),
        {"data.dataset": str(root), "model.num_classes": 13, "train.duration": "4st",
         "train.save_every": "2st", "train.eval_every": "2st", "train.device": "cpu",
         "optim.warmup": "0st"},
    )  # fmt: skip
    fit(run, run_dir=tmp_path / "run", progress=False)
    run_dir = stopped_copy(tmp_path / "run", tmp_path / "stopped", step=2)
    (stopped,) = (run_dir / "checkpoints").iterdir()
    config = json.loads((stopped / "config.json").read_text())
    assert config["class_names"] == NUMBERED  # a new run: by number
    config["class_names"] = BY_NAME  # as an older vitkit wrote it
    (stopped / "config.json").write_text(json.dumps(config))
    caplog.clear()  # the first run's lines, kept where an earlier test left vitkit's logger at INFO
    with caplog.at_level(logging.INFO, logger="vitkit.train.loop"):
        fit(run, run_dir=run_dir, progress=False)
    assert (
        "classes: in the order the resumed checkpoint records (0, 1, 10, ...), not the data's own"
        in caplog.text
    )
    assert "by number" not in caplog.text
    newest = sorted((run_dir / "checkpoints").iterdir())[-1]
    assert newest.name == "step_00000004"
    assert json.loads((newest / "config.json").read_text())["class_names"] == BY_NAME


def test_a_label_column_of_numbers_as_text_is_in_order_by_number() -> None:
    """A Hugging Face label column of class names that are all numbers (text, not integers)
    follows the folders' rule."""
    from vitkit.data.sources.hf import _classes

    column = np.array(["10", "2", "0", "2", *NUMBERED], dtype=object)
    classes, labels, index = _classes("hf:x", {"train": column}, None)
    assert classes == NUMBERED and index == {name: int(name) for name in NUMBERED}
    assert labels["train"][:4].tolist() == [10, 2, 0, 2]


def test_a_resumed_run_sees_the_images_and_the_holdout_it_saw(tmp_path: Path) -> None:
    """Data put in the order a resumed run recorded (numbered folders by name) is listed as a
    listing in that order lists it, before the holdout is drawn: image i is the file it was, and
    the held-out images are those the run validated on (an image that validated moving into
    training, or image i becoming another file mid-epoch, would break exact resume)."""
    from vitkit.data import ArrayDataset, split_holdout
    from vitkit.data.run_data import build_data

    root = _digits(tmp_path / "digits", splits=("train",), per_class=4)
    cfg = DataConfig(dataset=str(root / "train"), validation="holdout", holdout=0.25)
    model = ModelConfig(
        image_size=16, patch_size=8, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32,
        num_classes=13,
    )  # fmt: skip
    data = build_data(cfg, model, seed=3, in_chans=3, class_order=BY_NAME)
    # the listing an older vitkit made: class folders by name, each one's files in order
    listed = [
        (root / "train" / c / f"{i}.png", BY_NAME.index(c)) for c in BY_NAME for i in range(4)
    ]
    old = ArrayDataset(
        images=torch.zeros(len(listed), 1, 1, 1, dtype=torch.uint8),
        labels=torch.tensor([k for _, k in listed]),
        classes=BY_NAME,
    )
    kept, held = split_holdout(old, 0.25, 3)
    assert data.classes == BY_NAME
    assert data.train.samples == [listed[i] for i in kept.tolist()]
    assert data.val.samples == [listed[i] for i in held.tolist()]
