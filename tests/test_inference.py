"""vitkit.inference.Inference: a checkpoint opened once, its class names and preprocessing read
from it, its precision and engine decided once for a batch size and said with their reasons; the
object the commands and the Python API run a checkpoint through."""

from __future__ import annotations

import io

import pytest
import torch

import vitkit
from helpers import randomize, tiny
from vitkit.config.inference import InferenceConfig
from vitkit.data import Preprocess
from vitkit.inference import Inference
from vitkit.io.api import read
from vitkit.model import VisionTransformer
from vitkit.runtime.arithmetic import CPU_ENV


def test_opened_once_with_its_model_class_names_and_preprocessing(tmp_path) -> None:
    """The model in eval mode, what travels with its weights as recorded (``WeightsMeta``), the
    class names as a terminal shows them (the classes' numbers where none are recorded), and the
    preprocessing (the official one at the model's resolution where none is recorded)."""
    names = ["two\nlines", "b", "c"]
    model = vitkit.create_model(tiny(num_layers=1, num_classes=3))
    ckpt = vitkit.save(model, tmp_path / "ckpt", class_names=names)
    opened = Inference.open(str(ckpt), device="cpu")
    assert isinstance(opened.model, VisionTransformer) and not opened.model.training
    assert opened.meta == read(ckpt)[2] and opened.meta.class_names == tuple(names)
    assert opened.names == ["two\\nlines", "b", "c"]
    assert opened.preprocess == Preprocess(image_size=32) and opened.meta.preprocess is None
    bare = vitkit.save(vitkit.create_model(tiny(num_layers=1, num_classes=2)), tmp_path / "bare")
    assert Inference.open(str(bare), device="cpu").names == ["0", "1"]


def _said(inference: Inference, batch: int) -> list[str]:
    out = io.StringIO()
    inference.prepare(batch, say=out)
    return out.getvalue().splitlines()


def test_each_decision_is_said_once_with_its_reason(tmp_path, monkeypatch) -> None:
    """The precision, then the engine with its backend, decided by the first ``prepare``; a
    second keeps them (a command's batches do not change its arithmetic midway)."""
    model = randomize(vitkit.create_model(tiny(num_layers=1, num_classes=3)))
    ckpt = vitkit.save(model, tmp_path / "ckpt")
    monkeypatch.setenv(CPU_ENV, "none")
    eager = Inference.open(str(ckpt), device="cpu")
    assert _said(eager, 8) == [
        "precision fp32 (auto: this CPU has no native bf16 (neither AVX512_BF16 nor AMX-BF16))",
        "engine torch, eager (the default)",
    ]
    assert eager.precision == "fp32" and eager.autocast is None
    assert _said(eager, 64) == []  # decided once
    images = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(eager(images), model.eval()(images))  # the checkpoint's own logits
    bf16 = Inference.open(str(ckpt), InferenceConfig(precision="bf16"), device="cpu")
    assert _said(bf16, 8)[0] == "precision bf16 (--precision bf16)"
    assert bf16(images).dtype == torch.bfloat16 and bf16.autocast == torch.bfloat16
    with pytest.raises(ValueError, match="cannot train"):
        eager.train()


@pytest.mark.parametrize(("cpu", "chosen"), [("none", "fp32"), ("avx512_bf16", "bf16")])
def test_auto_precision_follows_the_cpu_kind_and_the_batch(tmp_path, monkeypatch, cpu, chosen):
    """``auto`` as every command decides it (``runtime.arithmetic``), for the batch prepared:
    ViT-S/16 at 32 images is 147 GFLOP, bf16 wherever the CPU has it natively."""
    ckpt = vitkit.save(vitkit.create_model("ViT-S/16", num_classes=2), tmp_path / "s16")
    monkeypatch.setenv(CPU_ENV, cpu)
    opened = Inference.open(str(ckpt), device="cpu")
    assert _said(opened, 32)[0].startswith(f"precision {chosen} (auto: ")


def test_ranked_names_each_files_classes_and_says_an_unreadable_one(tmp_path) -> None:
    """The Python user's predict: files in, (class name, probability) pairs out, best first; a
    file that is not an image is its reason, warned, not an exception."""
    from PIL import Image

    model = randomize(vitkit.create_model(tiny(num_layers=1, num_classes=3)))
    ckpt = vitkit.save(model, tmp_path / "ckpt", class_names=["cat", "dog", "emu"])
    Image.new("RGB", (40, 30), (200, 10, 10)).save(tmp_path / "red.png")
    (tmp_path / "not.png").write_bytes(b"not an image")
    opened = Inference.open(str(ckpt), device="cpu")
    with pytest.warns(UserWarning, match="cannot read image"):
        results = list(opened.ranked([tmp_path / "red.png", tmp_path / "not.png"], top=2))
    (red, top), (_, why) = results
    assert red.name == "red.png" and [name for name, _ in top] != [] and len(top) == 2
    assert {name for name, _ in top} <= {"cat", "dog", "emu"} and top[0][1] >= top[1][1]
    assert isinstance(why, str) and "cannot read image" in why
