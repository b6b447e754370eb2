"""int8 inference (inference/int8.py): a trained tiny checkpoint quantized by
torchao's x86 quantizer, calibrated on its own training images and checked against fp32 on
held-out ones before ``vitkit eval`` and ``vitkit predict`` use it; refused in one line past the
bound; never a default."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers import pytree_lines
from vitkit import fit
from vitkit.cli import main
from vitkit.config import replace
from vitkit.inference.int8 import Int8Check, check_int8
from vitkit.recipes import get_recipe

pytest.importorskip("torchao")


@pytest.fixture(scope="module")
def best(tmp_path_factory) -> str:
    run_dir = tmp_path_factory.mktemp("smoke")
    fit(replace(get_recipe("smoke"), {"train.device": "cpu"}), run_dir=run_dir, progress=False)
    return str(run_dir / "best")


@pytest.mark.slow
def test_eval_and_predict_in_int8_say_their_check_and_keep_the_figures(
    best: str, tmp_path: Path, capsys
) -> None:
    """The smoke checkpoint in int8: calibrated on 32 of its 128 training images and checked on
    its 32 held-out test images (where one changed prediction is 3.1 points: the bound is set
    wide here); what eval reports is fp32's top-1 and int8's on the same images."""
    from PIL import Image

    assert main(["eval", best, "--no-flip"]) == 0
    fp32 = re.search(r"^top-1 ([0-9.]+)", capsys.readouterr().out, re.M)[1]
    int8 = ["--precision", "int8", "--int8-calibration", "32", "--int8-max-change", "10"]
    assert main(["eval", best, "--no-flip", *int8]) == 0
    out = capsys.readouterr().out
    said = re.search(
        r"^precision int8 \(torchao PT2E; calibrated on 32 training images; on 32 held-out images "
        r"of synthetic: synthetic test \(32 images\) \(the checkpoint's data\): top-1 "
        r"([0-9.]+)% -> ([0-9.]+)% \(([-+][0-9.]+) points\), the same top-1 class for "
        r"([0-9.]+)%, largest logit change [0-9.e-]+\)$",
        out,
        re.M,
    )
    assert said is not None, out
    assert float(said[1]) == pytest.approx(100 * float(fp32), abs=0.01)
    assert float(said[3]) == pytest.approx(float(said[2]) - float(said[1]), abs=0.01)
    assert abs(float(said[3])) <= 10 and float(said[4]) >= 90
    top1 = float(re.search(r"^top-1 ([0-9.]+)", out, re.M)[1])
    assert 100 * top1 == pytest.approx(float(said[2]), abs=0.01)  # the check's were the test split
    Image.new("RGB", (40, 30), (200, 10, 10)).save(tmp_path / "red.png")
    argv = ["predict", best, str(tmp_path / "red.png"), "--json", "--device", "cpu"]
    assert main(argv) == 0
    want = capsys.readouterr().out
    assert main([*argv, *int8]) == 0
    got = capsys.readouterr()
    assert got.err.startswith("precision int8 (torchao PT2E; calibrated on 32 training images")
    assert re.findall(r'"label": "(\w+)"', got.out)[0] == re.findall(r'"label": "(\w+)"', want)[0]


def test_int8_past_its_bound_is_refused_in_one_line(best: str, monkeypatch, capsys) -> None:
    """A check that moves top-1 by more than ``--int8-max-change`` stops the command before it
    predicts anything."""
    from vitkit.inference import int8

    moved = Int8Check(images=32, agreement=0.9, top1_fp32=0.9, top1_int8=0.85, max_logit_change=2.0)
    monkeypatch.setattr(int8, "check_int8", lambda *_: moved)
    monkeypatch.setattr(int8, "quantize_int8", lambda model, images: model)  # not compiled
    argv = ["eval", best, "--precision", "int8", "--int8-max-change", "1"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err == (
        "vitkit eval: error: int8 refused: on 32 held-out images of synthetic: synthetic test (32 "
        "images) (the checkpoint's data): top-1 90.00% -> 85.00% (-5.00 points), the same top-1 "
        "class for 90.00%, largest logit change 2; more than --int8-max-change 1 points: use "
        "--precision bf16 or fp32, or allow more\n"
    )


def test_int8_settings_that_cannot_run_are_one_line(best: str, tmp_path: Path, capsys) -> None:
    import vitkit
    from helpers import tiny

    for extra, why in [
        (
            ["--fast"],
            "--fast=True is not valid: expected False with precision int8 (int8 is "
            "compiled already): give one of --fast and --precision int8",
        ),
        (
            ["--int8-calibration", "0"],
            "--int8-calibration=0 is not valid: expected an integer >= 1",
        ),
        (
            ["--int8-max-change", "nan"],
            "--int8-max-change=nan is not valid: expected a number >= 0",
        ),
    ]:
        assert main(["eval", best, "--precision", "int8", *extra]) == 2
        assert capsys.readouterr().err == f"vitkit eval: error: {why}\n"
    from PIL import Image

    alone = vitkit.save(vitkit.create_model(tiny(num_classes=4)), tmp_path / "alone")
    Image.new("RGB", (40, 30), (200, 10, 10)).save(tmp_path / "red.png")
    assert main(["predict", str(alone), str(tmp_path / "red.png"), "--precision", "int8"]) == 2
    assert "records no data" in capsys.readouterr().err


def test_the_check_compares_top1_and_logits() -> None:
    images = torch.randn(6, 4)
    labels = torch.tensor([0, 1, 2, 3, 0, 1])

    def fp32(x: torch.Tensor) -> torch.Tensor:
        return x

    def shifted(x: torch.Tensor) -> torch.Tensor:  # the first image's class changes
        out = x.clone()
        out[0] = torch.tensor([0.0, 0.0, 0.0, 9.0])
        return out

    same = check_int8(fp32, fp32, [(images[:4], labels[:4]), (images[4:], labels[4:])])
    assert (same.images, same.agreement, same.max_logit_change, same.top1_change) == (6, 1, 0, 0)
    moved = check_int8(fp32, shifted, [(images, labels)])
    assert moved.agreement == pytest.approx(5 / 6) or images[0].argmax() == 3
    assert moved.max_logit_change == pytest.approx(float((shifted(images) - images).abs().max()))


@pytest.mark.slow
def test_torchao_is_imported_without_torchs_deprecation_log(tmp_path: Path) -> None:
    """torchao registers its Enum subclasses (KernelPreference, ...) as pytree constants, which
    torch logs as deprecated, a line each on stderr, when torchao is imported: by every int8
    command (``require_torchao`` first), and by ``convert --format hf`` (transformers imports
    torchao when it is installed). Said to a user who can do nothing about it; dropped."""
    import vitkit
    from helpers import tiny

    checkpoint = vitkit.save(vitkit.create_model(tiny()), tmp_path / "checkpoint")
    commands = [
        [sys.executable, "-c", "from vitkit.inference import int8; int8.require_torchao()"],
        [sys.executable, "-m", "vitkit", "convert", str(checkpoint), str(tmp_path / "hf"),
         "--format", "hf"],
    ]  # fmt: skip
    procs = [subprocess.Popen(c, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for c in commands]  # fmt: skip
    for proc in procs:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        assert not pytree_lines(err), err
