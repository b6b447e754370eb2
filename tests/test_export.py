"""ONNX export: onnxruntime's outputs equal PyTorch's for every head and stem, at batch sizes other
than the traced one, the class names and preprocessing in the file's metadata, and ``vitkit
export`` end to end with its one-line errors.

Each export takes seconds (torch.export and its decompositions), so three exports cover the
token ViT with a head (through the CLI), GAP with pre-logits and no head, and the hybrid.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from torch import nn

import vitkit
from helpers import in_a_child, pytree_lines, randomize, tiny
from vitkit.cli import main
from vitkit.config import ConfigError, ModelConfig, ResNetConfig
from vitkit.data import Preprocess
from vitkit.errors import VitkitError
from vitkit.io.export import export_onnx, onnx_metadata, verify_onnx
from vitkit.model import build_model


def images(batch: int, cfg: ModelConfig) -> torch.Tensor:
    g = torch.Generator().manual_seed(batch)
    return torch.rand(batch, cfg.in_chans, *cfg.image_hw, generator=g) * 2 - 1


def check_onnx_equals_torch(model: nn.Module, path: Path) -> None:
    """The graph's signature, and its outputs against the model's at batches 1 and 3 (it was traced
    at 2), computed here and by ``verify_onnx``."""
    cfg = model.cfg
    onnx.checker.check_model(str(path))
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (inp,), (out,) = session.get_inputs(), session.get_outputs()
    width = cfg.num_classes or cfg.representation_size or cfg.hidden_size
    assert inp.name == "images" and inp.shape == ["batch", cfg.in_chans, *cfg.image_hw]
    assert out.name == ("logits" if cfg.num_classes else "features")
    assert out.shape == ["batch", width]
    for batch in (1, 3):
        x = images(batch, cfg)
        (got,) = session.run(None, {"images": x.numpy()})
        with torch.no_grad():
            want = model(x).numpy()
        assert got.shape == want.shape == (batch, width)
        diff = float(np.abs(got - want).max())
        assert diff < 1e-4
        assert verify_onnx(model, path, x) == pytest.approx(diff, abs=1e-6)
    # The check sees a different model: it would catch a wrong export.
    assert verify_onnx(randomize(build_model(cfg), seed=1), path, images(3, cfg)) > 1e-2


def metadata(path: Path) -> dict[str, str]:
    """The file's ``metadata_props``, as onnx reads them and as onnxruntime does (the same)."""
    props = {p.key: p.value for p in onnx.load(str(path), load_external_data=False).metadata_props}
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert session.get_modelmeta().custom_metadata_map == props
    return props


def official(height: int, width: int, channels: int = 3) -> dict[str, str]:
    """The metadata of a model saved without class names or preprocessing."""
    return {
        "input_size": f"[{height}, {width}]",
        "channels": str(channels),
        "color_mode": "RGB" if channels == 3 else "L",
        "resize": "bilinear",
        "antialias": "true",
        "normalization": "minus_one_to_one",
        "mean": json.dumps([0.5] * channels),
        "std": json.dumps([0.5] * channels),
        "image_orientation": "exif_transpose",
    }


def test_gap_pre_logits_features_replacing_an_earlier_export(tmp_path) -> None:
    # No head: the graph returns the pre-logits features (B, R), pooled by GAP.
    model = randomize(build_model(tiny(classifier="gap", representation_size=32, num_classes=0)))
    (tmp_path / "model.onnx").write_bytes(b"stale")
    (tmp_path / "model.onnx.data").write_bytes(b"stale")  # an earlier export's external weights
    path = export_onnx(model, tmp_path / "model.onnx")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx"]  # no temporary left
    check_onnx_equals_torch(model, path)
    assert metadata(path) == official(32, 32)  # no head, no class names


@pytest.mark.slow
def test_hybrid_with_external_weights(tmp_path) -> None:
    model = randomize(build_model(tiny(resnet=ResNetConfig(num_layers=(1,)), patch_size=1)))
    path = export_onnx(model, tmp_path / "model.onnx", external_data=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx", "model.onnx.data"]
    weights = 4 * model.num_params()  # float32; onnx keeps tensors under 256 bytes in the graph
    assert (tmp_path / "model.onnx.data").stat().st_size > 0.9 * weights
    check_onnx_equals_torch(model, path)


def test_cli_export_end_to_end_with_names_and_preprocessing(tmp_path) -> None:
    """``vitkit export --onnx`` as a command: its one line, the file, and nothing on stderr
    about torch's pytree (which a process says once, as it imports the peer that registers)."""
    model = randomize(build_model(tiny()))
    names = [f"class {i}" for i in range(10)]
    preprocess = Preprocess(image_size=32, resize="bicubic", antialias=False)
    ckpt = vitkit.save(model, tmp_path / "ckpt", class_names=names, preprocess=preprocess)
    out = tmp_path / "onnx" / "vit.onnx"
    command = [sys.executable, "-m", "vitkit", "export", str(ckpt), "--onnx", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0 and not pytree_lines(done.stderr), done.stderr[-3000:]
    (line,) = done.stdout.splitlines()
    assert str(out) in line and " MB)" in line and "batches of 2 and 5" in line
    assert float(re.search(r"= (\S+) on batches", line).group(1)) < 1e-4
    check_onnx_equals_torch(model, out)
    props = metadata(out)
    assert json.loads(props.pop("class_names")) == names
    assert props == {**official(32, 32), "resize": "bicubic", "antialias": "false"}


def test_non_square_model_through_the_cli(tmp_path, capsys) -> None:
    model = randomize(build_model(tiny(image_size=(16, 40))))  # a 2x5 grid
    ckpt = vitkit.save(model, tmp_path / "ckpt")
    out = tmp_path / "wide.onnx"
    assert main(["export", str(ckpt), "--onnx", str(out)]) == 0
    assert "batches of 2 and 5" in capsys.readouterr().out
    check_onnx_equals_torch(model, out)  # its input is (batch, 3, 16, 40)
    assert metadata(out) == official(16, 40)  # a checkpoint without names or preprocessing


def test_an_export_that_fails_its_check_or_its_opset_replaces_nothing(tmp_path, capsys) -> None:
    """An opset no vitkit model can be written at (torch wrote 18 for 16, said so on stderr, and
    the command said "wrote"; 0, 7 and 99 printed onnx's traceback before the one line), and an
    export its check refuses: the export already there is left as it was, and no other file
    is."""
    model = randomize(build_model(tiny()))
    ckpt = vitkit.save(model, tmp_path / "ckpt")
    out = export_onnx(model, tmp_path / "vit.onnx")
    good = out.read_bytes()
    capsys.readouterr()
    assert main(["export", str(ckpt), "--onnx", str(out), "--opset", "16"]) == 2
    err = capsys.readouterr().err
    # refused before the exporter, which printed onnx's traceback first for 0, 7 or 99
    from onnx.defs import onnx_opset_version

    assert err.endswith(
        f"opset=16: expected 17 (LayerNormalization's first) to {onnx_opset_version()} (this "
        "onnx's newest), or none for torch's own\n"
    )
    assert "Traceback" not in err and err.count("\n") == 1
    assert out.read_bytes() == good
    # the check runs on the staged file, before it replaces anything (the command's check:
    # onnxruntime against torch on two batches; a NaN checkpoint is refused before, on loading)

    def refuse(staged: Path) -> None:
        assert staged.name == out.name and staged.parent != out.parent and staged.is_file()
        raise VitkitError("refused")

    with pytest.raises(VitkitError, match="refused"):
        export_onnx(model, out, check=refuse)
    assert out.read_bytes() == good and sorted(p.name for p in tmp_path.iterdir()) == [
        "ckpt",
        "vit.onnx",
    ]


def test_metadata_of_one_channel_and_what_it_refuses(tmp_path) -> None:
    cfg = tiny(in_chans=1, num_classes=2)
    props = onnx_metadata(cfg, class_names=["no", "yes"])
    assert props == {**official(32, 32, channels=1), "class_names": '["no", "yes"]'}
    model = build_model(cfg)
    for kwargs, match in [
        ({"preprocess": Preprocess(image_size=48, in_chans=1)}, "ONNX graph takes images of"),
        ({"preprocess": Preprocess(image_size=32)}, "in_chans=3 for a model with in_chans=1"),
        ({"class_names": ["a", "b", "c"]}, "3 class_names for a model with num_classes=2"),
    ]:
        with pytest.raises(ConfigError, match=match) as info:  # before the (slow) export
            export_onnx(model, tmp_path / "model.onnx", **kwargs)
        assert "\n" not in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_cli_errors_are_one_line(tmp_path, capsys, monkeypatch) -> None:
    out = tmp_path / "vit.onnx"
    assert main(["export", str(tmp_path / "missing"), "--onnx", str(out)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("vitkit export: error:") and "not found" in line
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # as if it were not installed
    assert main(["export", str(tmp_path / "missing"), "--onnx", str(out)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "onnxruntime" in line and "pip install 'vitkit[export]'" in line
    assert not out.exists()


def test_an_export_never_replaces_a_checkpoints_files_nor_traces_a_huge_batch(
    tmp_path, capsys
) -> None:
    """``export --onnx best/model.safetensors`` replaced the weights it read (exit 0); a
    --batch-size of 10^8 filled the memory. Both are one line, before the checkpoint is read;
    ``fewshot --json best/config.json``, ``--json`` onto a Hugging Face checkpoint's image
    processor and ``transfer --json`` onto another transfer's record are refused alike
    (files.check_output_file)."""
    from vitkit.files import RECORDS, WRITTEN_BESIDE
    from vitkit.io.checkpoint import CONFIG_FILE
    from vitkit.io.formats.hf_processor import PROCESSOR_FILE
    from vitkit.transfer.finetuning import RECORD
    from vitkit.transfer.vtab import SETTINGS_FILE

    assert RECORDS == (CONFIG_FILE, RECORD, SETTINGS_FILE)  # the names, where each is written
    assert PROCESSOR_FILE in WRITTEN_BESIDE
    ckpt = vitkit.save(build_model(tiny(num_layers=1)), tmp_path / "ckpt")
    hf = vitkit.save(build_model(tiny(num_layers=1)), tmp_path / "hf", format="hf")
    weights = (ckpt / "model.safetensors").read_bytes()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "transfer.json").write_text("{}")
    for argv, said in [
        (["export", str(ckpt), "--onnx", str(ckpt / "model.safetensors")], "model.safetensors"),
        (["fewshot", str(ckpt), "--json", str(ckpt / "config.json")], "config.json"),
        (["fewshot", str(ckpt), "--json", str(hf / PROCESSOR_FILE)], PROCESSOR_FILE),
        (
            [
                "transfer",
                str(ckpt),
                "--data",
                "synthetic",
                "--json",
                str(tmp_path / "other" / "transfer.json"),
            ],
            "transfer",
        ),
    ]:
        assert main(argv) == 2
        (line,) = capsys.readouterr().err.splitlines()
        assert f"{said}" in line and "is a file of a checkpoint or a run directory" in line
    assert (ckpt / "model.safetensors").read_bytes() == weights
    (ckpt / "model.onnx").write_bytes(b"an earlier export")  # of its kind: replaced
    assert main(["export", str(ckpt), "--onnx", str(ckpt / "model.onnx")]) == 0
    assert (ckpt / "model.onnx").read_bytes() != b"an earlier export"
    os.mkfifo(tmp_path / "fifo")  # a reader waiting on it hung; /dev/null was replaced, as root
    for special in [tmp_path / "fifo", Path("/dev/null")]:
        assert main(["fewshot", str(ckpt), "--json", str(special)]) == 2
        assert f"error: {special} is not a regular file" in capsys.readouterr().err
    assert stat.S_ISFIFO(os.stat(tmp_path / "fifo").st_mode)
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    if Path("/proc").is_dir():  # a folder nothing is written in: said first, not at the end
        assert main(["fewshot", str(ckpt), "--json", "/proc/vitkit.json"]) == 2
        assert "error: cannot write /proc/vitkit.json: " in capsys.readouterr().err
    assert (
        main(["export", str(ckpt), "--onnx", str(tmp_path / "a.onnx"), "--batch-size", "10000"])
        == 2
    )
    assert "--batch-size 10000: expected 1 to 1,024" in capsys.readouterr().err


# Read in a child process: OpenVINO stays out of the test process (helpers.in_a_child).
RT_INFO = """
import json, sys
import openvino
read = openvino.Core().read_model(sys.argv[1])
keys = read.get_rt_info()["model_info"]
print(json.dumps({key: read.get_rt_info(["model_info", key]).astype(str) for key in keys}))
"""


def test_openvino_ir_end_to_end_with_names_and_preprocessing(tmp_path) -> None:
    """``vitkit export --openvino``, as a command (under its jemalloc): the IR's f32 logits are
    torch's to 1e-4 at two batch sizes (its bf16 gap said beside), its weights fp32, and what
    travels with the weights in its ``rt_info``; a NaN weight is refused in one line."""
    pytest.importorskip("openvino")
    model = randomize(build_model(tiny()))
    names = [f"class {i}" for i in range(10)]
    ckpt = vitkit.save(model, tmp_path / "ckpt", class_names=names)
    out = tmp_path / "ir" / "vit.xml"

    def export(checkpoint: Path, to: Path) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "vitkit", "export", str(checkpoint), "--openvino"]
        return subprocess.run([*command, str(to)], capture_output=True, text=True, timeout=600)

    done = export(ckpt, out)
    assert done.returncode == 0 and not pytree_lines(done.stderr), done.stderr[-3000:]
    (line,) = done.stdout.splitlines()
    assert str(out) in line and "batches of 2 and 5" in line and "in bf16, " in line
    assert float(re.search(r"f32 - torch\| = (\S+) ", line).group(1)) <= 1e-4
    weights = sum(p.numel() for p in model.parameters()) * 4  # fp32, not OpenVINO's fp16
    assert out.with_suffix(".bin").stat().st_size > 0.9 * weights
    info = in_a_child(RT_INFO, str(out))
    assert json.loads(info.pop("class_names")) == names
    assert info == official(32, 32)
    assert sorted(p.name for p in out.parent.iterdir()) == ["vit.bin", "vit.xml"]  # no staging

    broken = randomize(build_model(tiny()))
    with torch.no_grad():
        broken.head.weight[0, 0] = float("nan")
    done = export(vitkit.save(broken, tmp_path / "nan"), tmp_path / "nan.xml")
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    # refused where it is read (a NaN in the compute, too, fails the check: ``not diff <= bound``)
    assert line == (
        f"vitkit export: error: {tmp_path / 'nan' / 'model.safetensors'}: tensor 'head.weight' "
        f"holds 1 of {broken.head.weight.numel()} values that are not finite (NaN or inf): the file is damaged or was "
        "saved from a diverged model; use another checkpoint"
    )


def test_openvino_export_without_the_extra_names_it(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "openvino", None)  # as if it were not installed
    assert main(["export", str(tmp_path / "missing"), "--openvino", str(tmp_path / "m.xml")]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line == (
        "vitkit export: error: the openvino engine needs openvino: pip install 'vitkit[openvino]'"
    )


# Both exports under a file size limit (RLIMIT_FSIZE: a write past it fails with EFBIG, as one
# on a full disk with ENOSPC), in one child: OpenVINO is not loaded into the test process.
FULL_DISK = """
import contextlib, io, json, resource, signal, sys
from vitkit.cli import main
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # past the limit the kernel's signal would kill
resource.setrlimit(resource.RLIMIT_FSIZE, (20_000, 20_000))
said = []
for flag, out in zip(("--onnx", "--openvino"), sys.argv[2:]):
    with contextlib.redirect_stderr(io.StringIO()) as err:
        said.append([main(["export", sys.argv[1], flag, out]), err.getvalue()])
print(json.dumps(said))
"""


def test_a_full_disk_is_one_line_naming_the_file_and_leaves_nothing(tmp_path) -> None:
    """An export that cannot be written whole (a file size limit, as a full disk) is one line
    naming the file the user asked for (ONNX said "File too large" alone; OpenVINO's writer was
    a RuntimeError traceback), and leaves no file or hidden folder behind."""
    from helpers import random_checkpoint

    checkpoint = random_checkpoint(tmp_path / "ckpt")
    onnx, ir = tmp_path / "out" / "m.onnx", tmp_path / "out" / "m.xml"
    (onnx_status, onnx_said), (ir_status, ir_said) = in_a_child(
        FULL_DISK, str(checkpoint), str(onnx), str(ir)
    )
    assert onnx_status == 2 and onnx_said == f"vitkit export: error: File too large: {onnx}\n"
    assert ir_status == 2 and len(ir_said.splitlines()) == 1, ir_said
    assert ir_said.startswith(
        f"vitkit export: error: cannot write {ir} and m.bin: OpenVINO's writer failed ("
    ) and ir_said.endswith("); is the disk full?\n")
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").iterdir())
