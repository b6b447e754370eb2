"""``vitkit predict``: images from files, folders and globs, batched, as a table or JSON, on the
device asked for; an unreadable image is a warning, an input that matches nothing an error."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from PIL import Image

import vitkit
from helpers import bf16_from_any_size, claimed_png, padded_image, randomize, tiny
from vitkit.cli import main
from vitkit.cli.common import resolve_device
from vitkit.data import Preprocess
from vitkit.data.image_file import read_image
from vitkit.errors import VitkitError

NAMES = ["ant", "bee", "cat", "dog"]


@pytest.fixture
def checkpoint(tmp_path: Path) -> str:
    model = randomize(vitkit.create_model(tiny(num_classes=4, classifier="gap")), std=0.5)
    with torch.no_grad():  # without constant offsets in the logits, the top-1 varies by image
        model.head.bias.zero_()
        model.norm.bias.zero_()
    return str(vitkit.save(model, tmp_path / "ckpt", class_names=NAMES))


def picture(path: Path, seed: int, size: tuple[int, int]) -> Path:
    """An RGB image of ``size`` (width, height), one random colour plus noise, at ``path``."""
    g = torch.Generator().manual_seed(seed)
    colour = torch.randint(0, 200, (1, 1, 3), generator=g)
    pixels = colour + torch.randint(0, 56, (size[1], size[0], 3), generator=g)  # (H, W, 3)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(pixels.to(torch.uint8).numpy()).save(path)
    return path


@pytest.fixture
def images(tmp_path: Path) -> Path:
    """photos/{a.png, b.JPG, sub/c.bmp} (skipped: photos/.hidden.png, photos/.cache/d.png and
    photos/notes.txt); more/{deep/h.png, e.png, f.png, g.jpg}; hidden/.i.png."""
    root = tmp_path / "images"
    names = [
        *("photos/a.png", "photos/b.JPG", "photos/sub/c.bmp"),
        *("photos/.hidden.png", "photos/.cache/d.png"),
        *("more/e.png", "more/f.png", "more/g.jpg", "more/deep/h.png"),
        "hidden/.i.png",
    ]
    for seed, name in enumerate(names):
        picture(root / name, seed, size=(40 + seed, 30))
    (root / "photos" / "notes.txt").write_text("not an image")
    return root


def predict_json(*args: str, capsys) -> tuple[int, list[dict]]:
    status = main(["predict", *args, "--json", "--device", "cpu"])
    return status, json.loads(capsys.readouterr().out)


def test_folders_globs_and_files_top1_is_the_models_argmax(
    checkpoint: str, images: Path, capsys
) -> None:
    inputs = [str(images / "photos"), str(images / "more" / "*.png"), str(images / "more/g.jpg")]
    status, entries = predict_json(checkpoint, *inputs, "--top", "2", capsys=capsys)
    assert status == 0
    paths = [Path(e["path"]).relative_to(images).as_posix() for e in entries]
    assert paths == [
        "photos/a.png",  # the folder, recursively and sorted; hidden files and notes.txt skipped
        "photos/b.JPG",
        "photos/sub/c.bmp",
        "more/e.png",  # the glob, sorted, not recursive without **
        "more/f.png",
        "more/g.jpg",  # the file
    ]
    model = vitkit.load(checkpoint)
    preprocess = Preprocess(image_size=32)
    x = torch.cat([read_image(e["path"], preprocess) for e in entries])  # (6, 3, 32, 32)
    with torch.no_grad():
        probs = model(x).softmax(dim=-1)
    for entry, p in zip(entries, probs, strict=True):
        assert [t["label"] for t in entry["top"]] == [NAMES[i] for i in p.topk(2).indices]
        assert entry["top"][0]["prob"] == pytest.approx(p.max().item(), abs=1e-6)
    assert len({e["top"][0]["label"] for e in entries}) > 1  # the argmax is not a constant
    status, deep = predict_json(checkpoint, str(images / "more/**/*.png"), capsys=capsys)
    assert status == 0  # sorted as paths: the folder deep/ before the file e.png
    assert [Path(e["path"]).name for e in deep] == ["h.png", "e.png", "f.png"]


def test_batched_predictions_equal_one_at_a_time(checkpoint: str, images: Path, capsys) -> None:
    inputs = [str(images / "photos"), str(images / "more")]
    _, batched = predict_json(checkpoint, *inputs, "--batch-size", "3", capsys=capsys)
    _, single = predict_json(checkpoint, *inputs, "--batch-size", "1", capsys=capsys)
    assert len(batched) == 7 and [e["path"] for e in batched] == [e["path"] for e in single]
    for b, s in zip(batched, single, strict=True):
        assert [t["label"] for t in b["top"]] == [t["label"] for t in s["top"]]
        assert [t["prob"] for t in b["top"]] == pytest.approx(
            [t["prob"] for t in s["top"]], abs=1e-6
        )


def test_unreadable_images_are_warnings_and_exit_status_2(
    checkpoint: str, images: Path, capsys
) -> None:
    photos = images / "photos"
    broken = photos / "broken.png"
    broken.write_bytes(b"\x89PNG not really")  # PIL cannot tell what it is
    truncated = photos / "sub" / "truncated.png"  # a header, half the pixels
    truncated.write_bytes((photos / "a.png").read_bytes()[:200])
    status, entries = predict_json(checkpoint, str(photos), "--batch-size", "2", capsys=capsys)
    assert status == 2
    names = ["a.png", "b.JPG", "broken.png", "c.bmp", "truncated.png"]
    assert [Path(e["path"]).name for e in entries] == names
    for i in (2, 4):
        assert "top" not in entries[i] and "cannot read image" in entries[i]["error"]
    assert all("top" in entries[i] for i in (0, 1, 3))  # the others are still predicted
    assert main(["predict", checkpoint, str(photos), "--device", "cpu"]) == 2
    out, err = capsys.readouterr()
    rows = out.splitlines()
    assert [row.split(":")[0] for row in rows] == [
        str(photos / n) for n in ("a.png", "b.JPG", "sub/c.bmp")
    ]
    assert all(len(row.split()) == 1 + 2 * 4 for row in rows)  # path, then 4 label-prob pairs
    precision, engine, *warnings, error = err.splitlines()
    assert precision.startswith("precision fp32 (auto: ")  # said where the JSON is not
    assert (
        engine
        == "engine torch, eager (auto: this CPU has no native bf16, where openvino was not measured)"
    )
    assert len(warnings) == 2  # one line per unreadable file, naming it and why
    for warning, path in zip(warnings, (broken, truncated), strict=True):
        prefix = f"vitkit: warning: cannot read image {path}: "
        assert warning.startswith(prefix) and warning.endswith("; skipped")
        assert warning.removeprefix(prefix).removesuffix("; skipped")  # PIL's reason
    assert error == "vitkit predict: error: 2 of 5 images could not be read (see the warnings)"


def test_images_beyond_the_byte_and_pixel_bounds_are_unreadable(
    checkpoint: str, images: Path, tmp_path: Path, capsys
) -> None:
    """``predict`` and ``inspect --images`` read image files under the bounds every reader does
    (``data.max_image_bytes``, ``data.max_image_pixels``, at their defaults): a file read whole
    (an 8 GB one was a MemoryError traceback) or a header of 13,000 x 13,000 px (2.9 GB to
    decode) is one warning naming it, as any unreadable image."""
    padded = padded_image(images / "photos" / "padded.png", 64 * 2**20 + 1)  # sparse
    claimed = images / "photos" / "claimed.png"
    claimed.write_bytes(claimed_png(13000, 13000))
    status, entries = predict_json(checkpoint, str(images / "photos"), capsys=capsys)
    assert status == 2
    errors = {Path(e["path"]).name: e["error"] for e in entries if "error" in e}
    assert errors == {
        "claimed.png": f"cannot read image {claimed}: 13,000 x 13,000 pixels, more than "
        "data.max_image_pixels=134,217,728 allows",
        "padded.png": f"cannot read image {padded}: larger than data.max_image_bytes=67,108,864 "
        "allows",
    }
    out = tmp_path / "maps"
    assert main(["inspect", checkpoint, "--images", str(claimed), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"vitkit inspect: error: cannot read image {claimed}: 13,000 x 13,000 pixels, more than "
        "data.max_image_pixels=134,217,728 allows\n"
    )


def test_a_checkpoints_preprocessing_and_class_names_are_checked_and_shown_safely(
    images: Path, tmp_path: Path, capsys
) -> None:
    """A checkpoint's ``preprocess.image_size`` of 10^6 (a 3 TB resize) is one line when it is
    read; its class names reach the terminal with escape sequences, newlines and U+202E escaped
    and --json as recorded (a name of megabytes is refused when read: tests/test_io.py)."""
    names = ["\x1b[31mred", "two\nlines", "\u202eright-to-left", "plain é"]
    model = randomize(vitkit.create_model(tiny(num_classes=4, classifier="gap")), std=0.5)
    checkpoint = vitkit.save(model, tmp_path / "ckpt", class_names=names)
    assert main(["predict", str(checkpoint), str(images / "more"), "--device", "cpu"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert len(rows) == 4  # one per image: no name broke a row
    for row in rows:
        assert "\x1b" not in row and "\u202e" not in row
        for shown in ("\\x1b[31mred", "two\\nlines", "\\u202eright-to-left", "plain é"):
            assert shown in row
    # --json gives the names as recorded (it gave them escaped for a terminal: "two\\nlines")
    _, entries = predict_json(str(checkpoint), str(images / "more"), capsys=capsys)
    assert {top["label"] for entry in entries for top in entry["top"]} == set(names)
    config = json.loads((checkpoint / "config.json").read_text())
    config["preprocess"] = {"image_size": 10**6}
    (checkpoint / "config.json").write_text(json.dumps(config))
    assert main(["predict", str(checkpoint), str(images / "more"), "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"vitkit predict: error: {checkpoint}: preprocess image_size=1000000 for a model of "
        "image_size=32: expected each side a multiple of the patch stride 8, at most 4 times the "
        "model's (128 x 128)\n"
    )


def test_inputs_that_match_nothing_are_one_line_errors(
    checkpoint: str, images: Path, capsys
) -> None:
    for missing, why in [
        (str(images / "nowhere.png"), "no such file or folder"),
        (str(images / "more" / "*.gif"), "matches no image file"),
        (str(images / "hidden"), "matches no image file"),  # only a hidden one
    ]:
        assert main(["predict", checkpoint, str(images / "more"), missing]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"vitkit predict: error: {missing}") and why in err
        assert len(err.splitlines()) == 1


def test_device_argument(checkpoint: str, images: Path, capsys) -> None:
    assert main(["predict", checkpoint, str(images / "more"), "--device", "cpu"]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 4
    gpu = torch.cuda.is_available()
    assert resolve_device("auto") == torch.device("cuda", 0) if gpu else torch.device("cpu")
    assert resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(
        VitkitError, match="--device tpu is not valid: expected one of auto, cpu, cuda"
    ):
        resolve_device("tpu")
    if not gpu:
        assert main(["predict", checkpoint, str(images / "more"), "--device", "cuda"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("vitkit predict: error: --device cuda but PyTorch finds no GPU")
        assert "or use --device cpu" in err
        assert len(err.splitlines()) == 1


def test_precision_argument(checkpoint: str, images: Path, capsys, monkeypatch) -> None:
    """``--precision``: said on stderr with its reason (stdout stays the JSON); bf16 ranks the
    classes of these images as fp32 does; auto is fp32 on a CPU without native bf16 and bf16 on
    one with it once the batch is large enough (here counted as enough)."""
    status = main(["predict", checkpoint, str(images / "more"), "--json", "--device", "cpu"])
    captured = capsys.readouterr()
    fp32 = json.loads(captured.out)
    assert status == 0
    assert captured.err.splitlines()[0] == (
        "precision fp32 (auto: this CPU has no native bf16 (neither AVX512_BF16 nor AMX-BF16))"
    )
    status = main(["predict", checkpoint, str(images / "more"), "--json", "--device", "cpu",
                   "--precision", "bf16"])  # fmt: skip
    captured = capsys.readouterr()
    bf16 = json.loads(captured.out)
    assert status == 0 and captured.err.splitlines()[0] == "precision bf16 (--precision bf16)"
    assert [e["top"][0]["label"] for e in bf16] == [e["top"][0]["label"] for e in fp32]
    for ours, theirs in zip(bf16, fp32, strict=True):  # bf16 keeps ~3 significant digits
        assert ours["top"][0]["prob"] == pytest.approx(theirs["top"][0]["prob"], abs=0.02)
    bf16_from_any_size(monkeypatch)
    monkeypatch.setenv("VITKIT_CPU_BF16", "amx_bf16")
    assert main(["predict", checkpoint, str(images / "more"), "--device", "cpu"]) == 0
    err = capsys.readouterr().err
    assert err.startswith("precision bf16 (auto: this CPU has AMX-BF16, and a forward pass of ")


def test_changed_or_non_finite_weights_are_refused_in_one_line(
    checkpoint: str, images: Path, tmp_path: Path, capsys
) -> None:
    """Weights changed since vitkit wrote them (64 bytes flipped mid-data: other probabilities,
    exit 0) are refused in one line naming the file, by every verb that reads them; a NaN weight
    in any format read (``nan`` probabilities, exit 0; 33% from ``eval``) is refused in one line
    naming the file and the tensor."""
    from safetensors.torch import load_file, save_file

    weights = Path(checkpoint) / "model.safetensors"
    whole = weights.read_bytes()
    middle = len(whole) // 2
    flipped = bytes(b ^ 0xFF for b in whole[middle : middle + 64])
    weights.write_bytes(whole[:middle] + flipped + whole[middle + 64 :])
    onnx = str(tmp_path / "m.onnx")
    for verb in (
        ["predict", checkpoint, str(images / "more")],
        ["export", checkpoint, "--onnx", onnx],
    ):
        assert main(verb) == 2
        err = capsys.readouterr().err
        assert f"{weights} changed since it was written" in err and len(err.splitlines()) == 1

    weights.write_bytes(whole)
    state = load_file(weights)
    state["blocks.0.attn.qkv.weight"][5, 1] = float("nan")
    model = vitkit.create_model(tiny(num_classes=4, classifier="gap"))
    model.load_state_dict(state)
    nan = vitkit.save(model, tmp_path / "nan", class_names=NAMES)  # written as it is
    save_file(state, tmp_path / "nan.safetensors")
    torch.save(state, tmp_path / "nan.pth")
    named = "tensor 'blocks.0.attn.qkv.weight' holds 1 of"
    assert main(["predict", str(nan), str(images / "more")]) == 2
    err = capsys.readouterr().err
    assert f"{nan / 'model.safetensors'}: {named}" in err and len(err.splitlines()) == 1
    for path in (tmp_path / "nan.safetensors", tmp_path / "nan.pth"):
        with pytest.raises(VitkitError, match=re.escape(f"{path}: {named}")):
            vitkit.load(path, num_heads=tiny().num_heads)
