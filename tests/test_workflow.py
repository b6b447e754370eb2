"""The user's own workflow, end to end through the command line: a folder of images (a single
tree, or train/val/test), a model picked by preset name, what the run states, the best weights
chosen on a validation split and the test split reported once, verbs that start from what the
checkpoint records, fine-tuning at a higher resolution, --resume, and runs written before data
specs existed resuming."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import vitkit
from helpers import uninterrupted_log
from vitkit.cli import main
from vitkit.io import checkpoint as checkpoint_io

# A tiny ViT at 16 px (4x4 patches of 4), so every run takes seconds.
TINY = ("--model", "ViT-mu/16", "--set", "model.image_size=16", "--set", "model.patch_size=4")
CLASSES = ("bar", "dot", "ring")


def _image(kind: str, seed: int) -> np.ndarray:
    """A 20x20 grey picture of ``kind`` with noise: learnable, not identical."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[:20, :20]
    shape = {
        "bar": abs(x - 10) < 3,
        "dot": (x - 10) ** 2 + (y - 10) ** 2 < 16,
        "ring": abs(np.hypot(x - 10, y - 10) - 7) < 1.5,
    }[kind]
    return (shape * 170 + rng.normal(40, 20, (20, 20))).clip(0, 255).astype(np.uint8)


def _write(folder: Path, per_class: int, seed: int) -> None:
    """Greyscale images in several formats: L PNGs, grey RGB JPEGs, BMPs."""
    for k, kind in enumerate(CLASSES):
        (folder / kind).mkdir(parents=True)
        for i in range(per_class):
            image = Image.fromarray(_image(kind, seed + 100 * k + i), "L")
            if i % 3 == 1:
                image.convert("RGB").save(folder / kind / f"{i}.jpg", quality=95)
            else:
                image.save(folder / kind / f"{i}.{'png' if i % 3 == 0 else 'bmp'}")


@pytest.fixture(scope="module")
def tree(tmp_path_factory) -> Path:
    """One folder of class folders, 30 images each, and a corrupt file."""
    root = tmp_path_factory.mktemp("data") / "shapes"
    _write(root, 30, seed=0)
    (root / "dot" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\nnot an image")
    return root


@pytest.fixture(scope="module")
def splits(tmp_path_factory) -> Path:
    """train/ (24 per class), val/ (8) and test/ (8)."""
    root = tmp_path_factory.mktemp("data") / "split"
    for split, n, seed in (("train", 24, 0), ("val", 8, 1000), ("test", 8, 2000)):
        _write(root / split, n, seed)
    return root


def _records(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _same_log(got: list[dict], expected: list[dict], rel: float) -> None:
    """The same records (steps, splits, keys) with the same numbers within ``rel``, the clocks
    aside (another CPU may round differently)."""
    timing = ("images_per_s", "time_s", "run_s")
    assert [(r["step"], r.get("split")) for r in got] == [
        (r["step"], r.get("split")) for r in expected
    ]
    for ours, theirs in zip(got, expected, strict=True):
        numbers = {k: v for k, v in theirs.items() if k not in (*timing, "split")}
        assert {k: ours[k] for k in numbers} == pytest.approx(numbers, rel=rel)


def test_train_on_a_folder_states_its_choices_and_resumes(
    tree: Path, tmp_path, monkeypatch, capsys
) -> None:
    monkeypatch.chdir(tmp_path)
    args = ["train", "--data", str(tree), *TINY, "--set", "train.duration=2ep", "--set", "train.log_every=1st", "--no-progress"]  # fmt: skip
    assert main(args) == 2  # 1 bad image in 91 is more than the 1% data.max_bad_fraction allows
    assert "1 of 91 images in" in capsys.readouterr().err
    args += ["--set", "data.max_bad_fraction=0.05"]
    assert main(args) == 0
    captured = capsys.readouterr()
    out = captured.out
    run_dir = next((tmp_path / "runs").iterdir())
    assert re.fullmatch(r"scratch-vit-mu-16-shapes-[0-9a-f]{6}", run_dir.name)
    # where the values came from
    assert "         data: model.num_classes=3, model.in_chans=1\n" in out
    assert f"         --data: data.dataset='{tree}'\n" in out
    assert (
        "         preset ViT-mu/16: model.image_size=224, model.patch_size=16, model.hidden_size=32"
        not in out
    )
    assert "model.hidden_size=32" in out and "preset ViT-mu/16" in out
    # what the run states at its start: data, splits, channels, the skipped file, model, device
    assert (
        f"data     {tree}: 81 training images; validation: a holdout of 10% of every class of train (9 images, seed 0); no test split; 3 classes"
        in out
    )
    assert (
        "1 channel: all 90 images in" in out
        and "are greyscale (60 in mode L, 30 in mode RGB with R = G = B)" in out
    )
    assert "1 unreadable image(s) skipped, listed in runs/" in out
    assert "model    ViT: " in out and "16x16 px, 1 channel, patch 4 (4x4 tokens)" in out
    assert "device   cpu, fp32" in out and f"run dir  runs/{run_dir.name}: new run" in out
    # each skipped image is named in the log (one line) and in the run directory
    assert re.search(
        r"^vitkit: warning: skipping unreadable image .*broken\.png \(", captured.err, re.M
    )
    skipped = (run_dir / "skipped_images.txt").read_text().splitlines()
    assert len(skipped) == 1 and skipped[0].startswith(f"{tree / 'dot' / 'broken.png'}\t")
    # --no-progress: one line per log window (every step here), and every evaluation
    steps = int(re.search(r"^schedule (\d+) steps of 10 images: 2.0 epochs", out, re.M)[1])
    assert steps == max(r["step"] for r in _records(run_dir))  # batches of 81 // 8 images
    assert len(re.findall(rf"^step \d+/{steps} \(epoch ", out, re.M)) == steps
    evaluations = [r for r in _records(run_dir) if "split" in r]
    assert {r["split"] for r in evaluations} == {"val"} and all(r["run_s"] > 0 for r in evaluations)
    assert "(no test split: the last evaluation)" in out and "best val accuracy" in out
    assert vitkit.load(run_dir / "best").cfg.in_chans == 1
    names = json.loads((run_dir / "best" / "config.json").read_text())["class_names"]
    assert names == list(CLASSES)
    # the same command again: the same directory, already finished, re-evaluated
    assert main(args) == 0
    assert (
        f"run dir  runs/{run_dir.name}: already finished (step {steps}): re-evaluating"
        in capsys.readouterr().out
    )
    assert len(list((tmp_path / "runs").iterdir())) == 1


@pytest.fixture(scope="module")
def split_run(splits: Path, tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("runs") / "split"
    args = ["train", "--data", str(splits), *TINY, "--set", "train.duration=30ep", "--set", "optim.lr=3e-3", "--run-dir", str(run_dir), "--no-progress"]  # fmt: skip
    assert main(args) == 0
    return run_dir


def test_the_best_weights_are_chosen_on_val_and_test_is_reported_once(
    split_run: Path, splits: Path, capsys
) -> None:
    records = _records(split_run)
    evaluations = [r for r in records if "split" in r]
    assert [r["split"] for r in evaluations][:-1] == ["val"] * (len(evaluations) - 1)
    final = evaluations[-1]
    assert final["split"] == "test" and final["step"] == max(r["step"] for r in records)
    # the test record is the best (validation-chosen) weights on test/: vitkit eval agrees
    assert main(["eval", str(split_run / "best")]) == 0
    out = capsys.readouterr().out
    assert out.startswith(
        f"eval {split_run / 'best'} on {splits}: test/ (24 images) (the checkpoint's data)\n"
    )
    assert f"top-1 {final['accuracy']:.4f}" in out
    assert final["accuracy"] > 0.6  # it learned: three classes
    # a split folder given directly is evaluated as it is
    assert main(["eval", str(split_run / "best"), "--data", str(splits / "val")]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"eval {split_run / 'best'} on {splits / 'val'} (24 images)\n")
    best_val = max(r["accuracy"] for r in evaluations if r["split"] == "val")
    assert f"top-1 {best_val:.4f}" in out


def test_inspect_and_fewshot_start_from_the_checkpoints_data(
    split_run: Path, splits: Path, tmp_path, capsys
) -> None:
    assert (
        main(
            ["inspect", str(split_run / "best"), "--out", str(tmp_path / "page"), "--max-maps", "3"]
        )
        == 0
    )
    page = (tmp_path / "page" / "index.html").read_text()
    assert (
        f"Images: {splits.name}: test/ (24 images) (the checkpoint&#x27;s data), drawn at random "
        "(seed 0) from each class in turn: 24 at 16x16 px" in page
    )
    assert str(splits) not in page and str(split_run) not in page  # a page is shared
    assert main(["fewshot", str(split_run / "best"), "--shots", "2", "--seeds", "1"]) == 0
    out = capsys.readouterr().out
    assert f"fewshot {split_run / 'best'} on {splits}: test/ (24 images)" in out
    assert re.search(r"^split\s+3\s+\d+\s+24\s+[0-9.]+ \+- [0-9.]+$", out, re.M)


def test_finetune_at_a_higher_resolution_says_what_it_changed(
    split_run: Path, splits: Path, tmp_path, capsys
) -> None:
    args = ["finetune", "--init-from", str(split_run / "best"), "--set", "model.image_size=32", "--set", "model.patch_size=4", "--set", "train.duration=4st", "--run-dir", str(tmp_path / "ft"), "--no-progress"]  # fmt: skip
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"init     {split_run / 'best'}: " in out and "16x16 px, 3 classes" in out
    assert "position embeddings 4x4 -> 8x8 (2D interpolation, corners aligned) for 32x32 px" in out
    assert "head replaced for 3 classes, zero-initialised" in out
    assert "recipe   finetune:" in out
    assert re.search(
        rf"^         checkpoint: model\.hidden_size=32, .*data\.dataset='{splits}'$", out, re.M
    )
    # the paper's batch of 512 where the data allows it: 72 images give 64 x 1
    assert "schedule 4 steps of 64 images: " in out and "sgd lr 0.01" in out
    ft = vitkit.load(tmp_path / "ft" / "best")
    assert ft.cfg.image_size == 32 and ft.cfg.patch_size == 4
    # the architecture is the checkpoint's: changing it is refused, naming the checkpoint's value
    refused = ["finetune", "--init-from", str(split_run / "best"), "--set", "model.hidden_size=64"]
    assert main(refused) == 2
    assert (
        "model.hidden_size=64: fine-tuning keeps the checkpoint's architecture (hidden_size=32)"
        in capsys.readouterr().err
    )


def test_resume_continues_a_checkpoint_of_another_run_directory(
    split_run: Path, splits: Path, tmp_path, capsys
) -> None:
    checkpoint = sorted((split_run / "checkpoints").iterdir())[0]
    step = int(checkpoint.name.removeprefix("step_"))
    args = ["train", "--data", str(splits), *TINY, "--set", "train.duration=30ep", "--set", "optim.lr=3e-3", "--run-dir", str(tmp_path / "moved"), "--no-progress", "--resume", str(checkpoint)]  # fmt: skip
    reads: list[Path] = []  # the weights files read
    read_safetensors = checkpoint_io.read_safetensors

    def counted(path: Path) -> dict:
        reads.append(Path(path))
        return read_safetensors(path)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(checkpoint_io, "read_safetensors", counted)
        assert main(args) == 0
    assert reads.count(checkpoint / "model.safetensors") == 1  # checked, then read once
    out = capsys.readouterr().out
    assert f"resuming from step {step:,} of" in out
    moved = _records(tmp_path / "moved")
    assert min(r["step"] for r in moved) > step
    # the run continues exactly: the same log as the run it came from, after that step; but
    # for the last record, test/ on the best weights, which this directory chose from the
    # evaluations after the step (the checkpoint came without its run's best/)
    after = [r for r in _records(split_run) if r["step"] > step]
    _same_log(moved[:-1], after[:-1], rel=1e-6)
    assert moved[-1]["split"] == after[-1]["split"] == "test"
    # and its clock goes on from the checkpoint's, not from zero
    assert min(r["run_s"] for r in moved) > 0
    assert main([*args[:-2], "--resume", str(split_run / "best")]) == 0  # the run is done now
    capsys.readouterr()
    shutil.rmtree(tmp_path / "moved")
    assert main([*args[:-2], "--resume", str(split_run / "best")]) == 2
    assert (
        "has no state.pt: expected a checkpoint written by vitkit train" in capsys.readouterr().err
    )


OLD_RUN = Path(__file__).parent / "data" / "folder_v1"
NO_VAL = Path(__file__).parent / "data" / "folder_v1_no_val"
# Made by the code before data specs (data.dataset='folder' + data.data_dir), in a folder holding
# folder_v1/images (train/, val/, test/; for folder_v1_no_val without val/):
#   vitkit train --recipe smoke --set data.dataset=folder --set data.data_dir=images
#     --set model.num_classes=2 --set train.duration=6st --set train.save_every=2st
#     --set train.eval_every=2st --set train.log_every=1st --set train.keep_last=5
#     --set train.device=cpu --run-dir run --no-progress
# (run/ keeps its config.json and checkpoints/step_00000002; uninterrupted.jsonl is its log).
# The images are greyscale: that code read them as RGB, which the resumed run must keep; it
# chose its best weights on val/, else test/, and trained on all of train/.
# Today's command for it: the same settings, the folder as --data (the old --set data.data_dir is
# gone from the command line; a run directory that recorded it still reads: vitkit/compat.py).
COMMAND = ["--recipe", "smoke", "--data", "images", "--set", "model.num_classes=2", "--set", "train.duration=6st", "--set", "train.save_every=2st", "--set", "train.eval_every=2st", "--set", "train.log_every=1st", "--set", "train.keep_last=5", "--set", "train.device=cpu", "--run-dir", "run", "--no-progress"]  # fmt: skip


@pytest.mark.parametrize("old", [OLD_RUN, NO_VAL], ids=["val", "no-val"])
def test_a_run_written_before_data_specs_resumes(old: Path, tmp_path, monkeypatch, capsys) -> None:
    """Its folder was recorded as data.data_dir, relative: today's command resumes it from the same folder, as RGB, validating where it did, and logs what the old code
    logged. With val/, the evaluations (of val/) were called 'test' then and 'val' now, and a
    final record evaluates test/; without val/, they evaluate test/ as then."""
    shutil.copytree(old / "run", tmp_path / "old" / "run")
    shutil.copytree(OLD_RUN / "images", tmp_path / "old" / "images")
    if old == NO_VAL:
        shutil.rmtree(tmp_path / "old" / "images" / "val")
    monkeypatch.chdir(tmp_path / "old")
    assert main(["train", *COMMAND]) == 0
    out = capsys.readouterr().out
    assert "resuming from step 2 of 6" in out and "3 channels" in out
    got = _records(Path("run"))
    expected = uninterrupted_log(old)
    if old == OLD_RUN:
        assert got[-1]["split"] == "test" and got[-1]["step"] == 6  # test/, with the best weights
        got = got[:-1]
        expected = [{**r, "split": "val"} if r.get("split") == "test" else r for r in expected]
    _same_log(got, [r for r in expected if r["step"] > 2], rel=1e-4)


def test_resume_refuses_a_checkpoint_of_another_run_and_finishes_a_finished_one(
    split_run: Path, splits: Path, tmp_path, capsys
) -> None:
    last = sorted((split_run / "checkpoints").iterdir())[-1]
    args = ["train", "--data", str(splits), *TINY, "--set", "train.duration=30ep", "--no-progress"]  # fmt: skip
    # optim.lr differs from the run that wrote it: refused in one line, nothing written
    assert main([*args, "--run-dir", str(tmp_path / "a"), "--resume", str(last)]) == 2
    err = capsys.readouterr().err
    assert (
        err.count("\n") == 1
        and "holds a run with a different config (optim.lr 0.003 recorded, 0.001 now)" in err
    )
    # the finished checkpoint, moved alone: its final weights stand in for best/, test/ once
    moved = tmp_path / "b"
    done = [*args, "--set", "optim.lr=3e-3", "--run-dir", str(moved), "--resume", str(last)]
    assert main(done) == 0
    assert "already finished" in capsys.readouterr().out and (moved / "best").is_dir()
    assert main(done) == 0  # again: re-evaluated, not logged twice
    assert [r["split"] for r in _records(moved)] == ["test"]


def test_channels_other_than_grey_or_rgb_are_one_line(tree: Path, tmp_path, capsys) -> None:
    args = ["train", "--data", str(tree), *TINY, "--set", "model.in_chans=2", "--run-dir", str(tmp_path)]  # fmt: skip
    assert main(args) == 2
    assert capsys.readouterr().err == (
        "vitkit train: error: model.in_chans=2: images have 1 channel (greyscale) or 3 (RGB)\n"
    )


def test_a_named_datasets_channels_come_from_it_unless_set() -> None:
    """Fashion-MNIST is grey: a model takes 1 channel from it, or, its channels set (a
    checkpoint's 3), gets its images repeated into R, G and B."""
    from vitkit.config import DataConfig
    from vitkit.data.run_data import build_data
    from vitkit.presets import get_config

    model = get_config("ViT-mu/16")  # 3 channels
    grey = build_data(DataConfig(dataset="fashion_mnist"), model, seed=0)
    assert grey.channels == 1 and grey.train[0][0].shape == (1, 28, 28) and not grey.notes
    rgb = build_data(DataConfig(dataset="fashion_mnist"), model, seed=0, in_chans=3)
    image = rgb.train[0][0]  # (3, 28, 28)
    assert image.shape == (3, 28, 28) and (image == grey.train[0][0]).all()
    assert rgb.notes == [
        "3 channels: fashion_mnist's images repeated into R, G and B, as the model takes"
    ]
