"""vitkit.inference.Inference: a checkpoint opened once, its class names and preprocessing read
from it, its precision and engine decided once for a batch size and said with their reasons; the
object the commands and the Python API run a checkpoint through."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import vitkit
from helpers import in_a_child, randomize, tiny
from vitkit.config.inference import InferenceConfig
from vitkit.data import Preprocess
from vitkit.errors import ConfigError, MissingExtraError, VitkitError
from vitkit.inference import Inference
from vitkit.inference.engines import decide_engine
from vitkit.io.api import read
from vitkit.model import VisionTransformer
from vitkit.runtime.arithmetic import CPU_ENV, CpuFeatures
from vitkit.runtime.openvino import openvino_version


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
    for batch in ("32", None, -5, 2.5, True):  # '32' failed deep inside, -5 and 2.5 were taken
        with pytest.raises(ConfigError, match=f"batch={batch!r}: expected a positive whole"):
            opened.prepare(batch)  # type: ignore[arg-type]


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
        "engine torch, eager (auto: this CPU has no native bf16, where openvino was not measured)",
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


@pytest.mark.parametrize("cpu", ["none", "avx512_bf16", "amx_bf16"])
def test_fast_is_torch_compiled_on_every_cpu_kind(tmp_path, monkeypatch, cpu) -> None:
    """--fast (compile=True) is torch compiled whatever the CPU: its backend auto is torch's
    (inductor or onednn). The compiled path's own auto chose OpenVINO where the CPU has native
    bf16, and the engine line said "torch, compiled by openvino"."""
    ckpt = vitkit.save(vitkit.create_model(tiny(num_layers=1, num_classes=2)), tmp_path / "t")
    monkeypatch.setenv(CPU_ENV, cpu)
    for engine in ("auto", "torch"):
        fast = Inference.open(str(ckpt), InferenceConfig(compile=True, engine=engine), device="cpu")
        line = _said(fast, 32)[1]
        assert re.match(r"engine torch, compiled by (inductor|onednn) \(", line), line


@pytest.mark.parametrize(("cpu", "chosen"), [("none", "fp32"), ("avx512_bf16", "bf16")])
def test_auto_precision_follows_the_cpu_kind_and_the_batch(tmp_path, monkeypatch, cpu, chosen):
    """``auto`` as every command decides it (``runtime.arithmetic``), for the batch prepared:
    ViT-S/16 at 32 images is 294 GFLOP (count_flops), bf16 wherever the CPU has it natively."""
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


CPU = torch.device("cpu")
TESTS = Path(__file__).resolve().parent
KINDS = {
    "none": CpuFeatures(),
    "avx512_bf16": CpuFeatures(avx512_bf16=True),
    "amx_bf16": CpuFeatures(amx_bf16=True),
}


@pytest.mark.parametrize("kind", KINDS)
def test_auto_engine_is_openvino_only_on_native_bf16_with_enough_work(kind: str) -> None:
    """Every CPU kind, with and without openvino installed, for a handful of images and many,
    and what names torch: --fast, int8, a GPU."""
    cpu = KINDS[kind]

    def auto(images: int | None, *, openvino: str | None = "2026.4.1", **given) -> str:
        settings = {"device": CPU, "precision": "bf16", "compile": False, **given}
        chosen, why = decide_engine(
            "auto", images=images, image_gflop=9.2, openvino=openvino, cpu=cpu, **settings
        )
        assert why.startswith(("auto", "--"))
        return chosen

    many = "openvino" if cpu.native_bf16 else "torch"
    assert auto(10_000) == many and auto(None) == many
    assert auto(1) == "torch"  # one image: the conversion costs more than it saves
    assert auto(800) == "torch" and auto(1_000) == many  # 7,360 and 9,200 GFLOP: 8,000 pays
    assert auto(10_000, openvino=None) == "torch"
    assert auto(10_000, compile=True) == "torch" and auto(10_000, precision="int8") == "torch"
    assert auto(10_000, device=torch.device("cuda")) == "torch"
    _, why = decide_engine(
        "auto",
        device=CPU,
        precision="bf16",
        compile=False,
        images=1,
        image_gflop=9.2,
        openvino=None,
        cpu=cpu,
    )
    assert why == "auto: openvino is not installed (pip install 'vitkit[openvino]')"


def test_engine_openvino_by_name_is_refused_where_it_cannot_run() -> None:
    def named(**given) -> tuple[str, str]:
        settings = {"device": CPU, "precision": "fp32", "compile": False, **given}
        return decide_engine("openvino", images=1, image_gflop=9.2, **settings)

    assert named(openvino="2026.4.1") == ("openvino", "--engine openvino")
    with pytest.raises(MissingExtraError, match=r"pip install 'vitkit\[openvino\]'"):
        named(openvino=None)
    for given in ({"compile": True}, {"precision": "int8"}):
        with pytest.raises(ConfigError, match=r"with --fast or --precision int8 \(both are torch"):
            InferenceConfig(engine="openvino", **given)
    with pytest.raises(VitkitError, match="runs on the CPU: not on cuda"):
        named(openvino="2026.4.1", device=torch.device("cuda"))
    assert decide_engine(
        "torch",
        device=CPU,
        precision="fp32",
        compile=False,
        images=None,
        image_gflop=9.2,
        openvino="2026.4.1",
    ) == ("torch", "--engine torch")


# OpenVINO is run in a child process here (helpers.in_a_child says why), once for two tests.
OPENVINO = """
import json, torch, vitkit
from helpers import randomize, tiny
from vitkit.inference.compiled import optimize_for_inference
from vitkit.inference.openvino import OpenVINOInference

model = randomize(vitkit.create_model(tiny(num_layers=2, num_classes=5))).eval()
f32 = OpenVINOInference(model, precision="fp32")
bf16 = OpenVINOInference(model, precision="bf16")
rows = []
for batch in (3, 1, 5):
    images = torch.randn(batch, 3, 32, 32)
    with torch.no_grad():
        want = model(images)  # (B, 5)
    rows.append([
        want.abs().max().item(),
        (f32(images) - want).abs().max().item(),
        (bf16(images) - want).abs().max().item(),
    ])
fast = optimize_for_inference(model)  # VITKIT_CPU_BF16=avx512_bf16: a CPU with native bf16
with torch.no_grad():
    gap = (fast(images) - model(images)).abs().max().item()
optimized = {"backend": fast.backend, "precision": fast.precision, "gap": gap,
             "bf16": fast.bf16_for(images)}
print(json.dumps({"rows": rows, "converted": len(f32.converted), "compiled": len(f32.requests),
                  "optimized": optimized}))
"""


@pytest.fixture(scope="module")
def in_openvino() -> dict:
    """What the child running ``OPENVINO`` found, as if on a CPU with native bf16."""
    if openvino_version() is None:
        pytest.skip("openvino is not installed")
    code = f"import sys; sys.path.insert(0, {str(TESTS)!r})\n" + OPENVINO
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CPU_ENV, "avx512_bf16")
        return in_a_child(code)


def test_openvino_gives_the_eager_logits_at_every_batch_size(in_openvino: dict) -> None:
    """f32: the model's logits to 1e-4, at batch sizes other than the traced one (the
    conversion keeps the batch dynamic); bf16: within bf16's rounding of them."""
    for scale, f32, bf16 in in_openvino["rows"]:
        assert scale > 0.1 and f32 <= 1e-4
        # bf16 keeps 8 bits of mantissa: products and sums over 64 features round to ~1e-2
        assert bf16 <= 5e-2 * scale
    assert in_openvino["converted"] == 1 and in_openvino["compiled"] == 3  # converted once


@pytest.mark.skipif(openvino_version() is None, reason="openvino is not installed")
def test_predict_by_the_openvino_engine_says_it_and_names_the_same_classes(tmp_path, capsys):
    from PIL import Image

    from vitkit.cli import main

    model = randomize(vitkit.create_model(tiny(num_layers=1, num_classes=3)))
    ckpt = str(vitkit.save(model, tmp_path / "ckpt", class_names=["cat", "dog", "emu"]))
    for i, colour in enumerate([(200, 10, 10), (10, 200, 10), (10, 10, 200)]):
        Image.new("RGB", (40, 30), colour).save(tmp_path / f"{i}.png")
    images = [str(tmp_path / f"{i}.png") for i in range(3)]

    def predict(*flags: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "vitkit", "predict", ckpt, *images, "--top", "3"]
        done = subprocess.run([*command, *flags], capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        return done

    assert main(["predict", ckpt, *images, "--top", "3", "--precision", "fp32"]) == 0
    eager = capsys.readouterr()
    # a command, under its jemalloc: with OpenVINO there, each run aborted in free() until
    # TBB_ENABLE_SANITIZERS=1 (runtime.openvino.require_openvino)
    got = predict("--precision", "fp32", "--engine", "openvino")
    assert got.stderr.splitlines()[1] == (
        f"engine openvino {openvino_version()}, fp32 (--engine openvino)"
    )
    assert eager.err.splitlines()[1].startswith("engine torch, eager (auto: ")
    assert [row.split()[1::2] for row in got.stdout.splitlines()] == [
        row.split()[1::2] for row in eager.out.splitlines()
    ]  # each image's classes, in the same order
    assert main(["predict", ckpt, *images, "--engine", "openvino", "--fast"]) == 2
    assert capsys.readouterr().err == (  # before the checkpoint is read
        "vitkit predict: error: --engine='openvino' is not valid: expected torch or auto with "
        "--fast or --precision int8 (both are torch's): give one\n"
    )


@pytest.mark.parametrize("cpu", ["none", "avx512_bf16"])
def test_optimize_for_inference_takes_openvino_where_the_engine_would(
    monkeypatch, in_openvino: dict, cpu: str
) -> None:
    """``backend="auto"``: OpenVINO on a CPU with native bf16 (a function kept for many
    calls), torch's compiled path elsewhere; each with ``precision="auto"`` per input shape
    (a tiny model's batch: under the 1 GFLOP from which bf16 pays)."""
    if cpu == "none":  # torch's: OpenVINO is not loaded here
        from vitkit.inference.compiled import optimize_for_inference

        monkeypatch.setenv(CPU_ENV, cpu)
        fast = optimize_for_inference(vitkit.create_model(tiny(num_layers=1, num_classes=3)))
        found = {"backend": fast.backend, "precision": fast.precision, "gap": 0.0}
        found["bf16"] = fast.bf16_for(torch.randn(2, 3, 32, 32))
    else:
        found = in_openvino["optimized"]
    assert found["backend"] == ("inductor" if cpu == "none" else "openvino")
    assert found["precision"] == "auto" and found["bf16"] is False and found["gap"] <= 1e-4
