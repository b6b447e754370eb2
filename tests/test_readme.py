"""The user journey of the README and the guides (docs/guides/, in the site's order) runs as
written, on a folder of images the test makes, with tiny settings the test adds (two training
steps, small fine-tuning batches): the documentation cannot drift from the code. Every code
block says whether it runs here (``<!-- docs-test -->``) or why not (``<!-- docs-test: not run
(...) -->``). The serve quickstart's two blocks run in a test of their own, on a model that tells
a phone photo upright from its pixels as stored."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

ROOT = Path(__file__).parent.parent
README = ROOT / "README.md"
BLOCK = re.compile(r"^(?P<marker>[^\n]*)\n```(?P<lang>\w*)\n(?P<body>.*?)\n```", re.M | re.S)
RUN, SKIP = "<!-- docs-test -->", re.compile(r"^<!-- docs-test: not run \(.+\) -->$")
# a block of the site's getting-started page that is the README's, run there
READMES = "<!-- docs-test: not run (the README's block, which the tests run as written there) -->"
# how the README's first block puts `vitkit` (and the venv's `python`) on the PATH; every block
# runs after it, as in a user's shell
ACTIVATE = "source .venv/bin/activate"
# `vitkit` in the README's shell blocks: the venv's command, with two steps of training, and
# fine-tuning's batches of 8 images (the whole folder else: ViT-Ti/16's at 224 px are seconds each)
TINY = """vitkit() {
  case "$1" in
    train) command vitkit "$@" --set train.duration=2st --no-progress ;;
    finetune) command vitkit "$@" --set train.duration=2st --set train.batch_size=8 --no-progress ;;
    *) command vitkit "$@" ;;
  esac
}
set -euo pipefail
"""


def documents() -> list[Path]:
    """The README, then every guide in the order of the site's navigation (mkdocs.yml)."""
    nav = re.findall(r"^\s+- [^:]+: (guides/\S+\.md)$", (ROOT / "mkdocs.yml").read_text(), re.M)
    return [README, *(ROOT / "docs" / page for page in nav)]


def blocks(path: Path = README) -> list[tuple[str, str, str]]:
    """(marker, language, code) of every fenced block of a document."""
    return [(m["marker"], m["lang"], m["body"]) for m in BLOCK.finditer(path.read_text())]


def test_every_guide_is_in_the_site() -> None:
    guides = sorted((ROOT / "docs" / "guides").glob("*.md"))
    assert sorted(documents()[1:]) == guides


def test_no_placeholder_is_left() -> None:
    """A figure still to be measured is written as a line of its own in capitals."""
    for path in documents():
        text = BLOCK.sub("", path.read_text())
        assert not re.findall(r"^[A-Z][A-Z0-9_]{3,}$", text, re.M), path


def test_every_block_is_run_or_says_why_not() -> None:
    assert len(blocks()) >= 4
    for path in documents():
        for marker, _, body in blocks(path):
            assert marker == RUN or SKIP.match(marker), f"unmarked block of {path}:\n{body}"


def test_the_sites_getting_started_page_shows_the_readmes_blocks() -> None:
    """docs/getting-started.md, the install and quickstarts on the site: each block it says is
    the README's is one, as written (the journey runs it there), and every README block that
    runs is on the page."""
    page = blocks(ROOT / "docs" / "getting-started.md")
    theirs = [body for marker, _, body in page if marker == READMES]
    assert all(marker == READMES or SKIP.match(marker) for marker, _, _ in page)
    assert set(theirs) <= {body for _, _, body in blocks()}
    assert {body for marker, _, body in blocks() if marker == RUN} <= set(theirs)


def test_the_first_block_puts_vitkit_on_the_path() -> None:
    _, _, first = blocks()[0]
    assert "make test" in first and ACTIVATE in first


def _folder(root: Path, classes: int = 3, per_class: int = 12) -> None:
    """digits/<class>/*.png: grey strokes at class-dependent angles, with noise."""
    rng = np.random.default_rng(0)
    y, x = np.mgrid[:20, :20] - 9.5
    for k in range(classes):
        (root / f"digit_{k}").mkdir(parents=True)
        angle = np.pi * k / classes
        stroke = np.abs(x * np.sin(angle) - y * np.cos(angle)) < 2
        for i in range(per_class):
            pixels = (stroke * 200 + rng.normal(30, 15, stroke.shape)).clip(0, 255)
            Image.fromarray(pixels.astype(np.uint8), "L").save(root / f"digit_{k}" / f"{i}.png")


def _official_bucket() -> dict[str, bytes]:
    """The official bucket's file for ViT-Ti/16@augreg-in21k, with random weights in its layout
    (ViT-Ti/16, 21,843 classes, tanh GELU), as a local server serves it."""
    import io

    import vitkit
    from helpers import randomize
    from vitkit.io.formats.official import to_official
    from vitkit.io.pretrained import find

    model = randomize(
        vitkit.create_model("ViT-Ti/16", num_classes=21843, act="gelu_tanh"), std=0.05
    )
    buffer = io.BytesIO()
    np.savez(buffer, **to_official(model))
    return {f"/vit_models/{find('ViT-Ti/16@augreg-in21k').path}": buffer.getvalue()}


def serves(code: str) -> bool:
    """Whether a block is one of the serve quickstart's (the export and the Python that reads
    it): ``test_the_served_model_sees_a_phone_photo_as_predict_does`` runs them, on a model that
    tells a photo upright from its pixels as stored; the journey's, trained two steps, cannot."""
    return "digits.onnx" in code


@pytest.mark.slow
def test_the_served_model_sees_a_phone_photo_as_predict_does(tmp_path: Path, capsys) -> None:
    """The serve quickstart's blocks as written, on ``photos/a.png`` stored turned as a phone
    stores it (EXIF orientation 6) and a random model whose head gives the photo upright one
    class and its pixels as they lie another: onnxruntime's class and the pipeline's are ``vitkit
    predict``'s. Before the Python block turned the photo upright (``ImageOps.exif_transpose``),
    onnxruntime's was the other one (issue 46: "rotate 180" came out rot_270, not rot_090)."""
    import torch

    import vitkit
    from helpers import exif_photo, randomize, tiny
    from vitkit.cli import main
    from vitkit.data import Preprocess
    from vitkit.data.image_file import read_image
    from vitkit.model import build_model

    names = ["digit_0", "digit_1", "digit_2"]
    y, x = np.mgrid[:40, :56]
    upright = Image.fromarray(np.stack([4 * x, 6 * y, 255 * (x < 14)], -1).astype(np.uint8))
    (tmp_path / "photos").mkdir()
    photo = exif_photo(tmp_path / "photos" / "a.png", upright, 6, fmt="PNG")
    lying = exif_photo(
        tmp_path / "lying.png", upright.transpose(Image.Transpose.ROTATE_90), 1, fmt="PNG"
    )  # the photo's pixels as they are stored
    images = [read_image(path, Preprocess(image_size=32)) for path in (photo, lying)]
    model = randomize(build_model(tiny(num_classes=3)), std=0.3, seed=1)
    with torch.no_grad():  # a head that tells the two apart: class 0 upright, class 1 lying
        upright_f, lying_f = (
            model.forward_head(model.forward_features(x), pre_logits=True)[0] for x in images
        )  # (D,) each
        apart = (upright_f - lying_f) / (upright_f - lying_f).norm()  # (D,)
        middle = float(apart @ (upright_f + lying_f)) / 2  # the score halfway between them
        model.head.weight.copy_(torch.stack([apart, -apart, 0 * apart]) * 10)  # (3, D)
        model.head.bias.copy_(torch.tensor([-middle, middle, 0.0]) * 10)  # (3,)
        turned, as_stored = (int(model(x).argmax()) for x in images)
    assert (turned, as_stored) == (0, 1)
    checkpoint = vitkit.save(model, tmp_path / "runs" / "digits" / "best", class_names=names)
    assert main(["predict", str(checkpoint), str(photo), "--json", "--device", "cpu"]) == 0
    ((entry,),) = [json.loads(capsys.readouterr().out)]
    assert entry["top"][0]["label"] == names[turned]

    serve = [code for marker, _, code in blocks() if marker == RUN and serves(code)]
    assert len(serve) == 2, "the serve quickstart: a shell block, then a Python block"
    venv_bin = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "PATH": os.pathsep.join([venv_bin, os.environ["PATH"]]),
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(ROOT / "src"), os.environ.get("PYTHONPATH")])
        ),
        "HF_HUB_OFFLINE": "1",  # transformers reads the local folder
    }
    for command in (
        ["bash", "-c", f"set -euo pipefail\n{serve[0]}"],
        [sys.executable, "-c", serve[1]],
    ):
        proc = subprocess.run(
            command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
        )
        assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    pipeline_line, onnx_line = proc.stdout.strip().splitlines()[-2:]
    assert onnx_line == names[turned], (onnx_line, names)
    assert f"'label': '{names[turned]}'" in pipeline_line
    assert (tmp_path / "hf-digits" / "preprocessor_config.json").is_file()


@pytest.mark.slow
def test_the_user_journey_runs_as_written(tmp_path: Path) -> None:
    from helpers import exif_photo
    from http_server import FileServer

    _folder(tmp_path / "digits")
    (tmp_path / "photos").mkdir()
    # a phone's photo: stored turned, with the EXIF tag that turns it upright
    with Image.open(tmp_path / "digits" / "digit_1" / "0.png") as picture:
        exif_photo(tmp_path / "photos" / "a.png", picture.convert("L"), 6, fmt="PNG")
    # `.venv` as the README builds it: this interpreter's venv (the clone's `.venv` under make test)
    assert sys.prefix != sys.base_prefix, "the README's blocks run in a venv: run pytest in one"
    (tmp_path / ".venv").symlink_to(sys.prefix, target_is_directory=True)
    venv_bin = str(Path(sys.prefix) / "bin")
    outside = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    server = FileServer(_official_bucket())
    env = {
        **outside,
        # `vitkit` is on the PATH only once the venv is activated, as for a new user
        "PATH": os.pathsep.join(p for p in outside["PATH"].split(os.pathsep) if p != venv_bin),
        # this tree's code, whichever tree the venv's editable install names
        "PYTHONPATH": os.pathsep.join(
            filter(None, [str(Path(__file__).parents[1] / "src"), outside.get("PYTHONPATH")])
        ),
        "VITKIT_HOME": str(tmp_path / "cache"),  # and the bucket is the local server
        "VITKIT_VIT_MODELS_URL": server.url("/vit_models"),
    }
    for marker, lang, code in (block for path in documents() for block in blocks(path)):
        if marker != RUN or serves(code):  # the serve blocks: the test above runs them
            continue
        if lang == "bash":
            command = ["bash", "-c", f"{ACTIVATE}\n{TINY}{code}"]
        else:
            assert lang == "python", lang
            command = ["bash", "-c", f'{ACTIVATE}\nexec python -c "$1"', "python", code]
        # transformers reads local folders here: the Hub is off limits (not vitkit's bucket)
        hub_off = {"HF_HUB_OFFLINE": "1"} if "transformers" in code else {}
        proc = subprocess.run(
            command,
            cwd=tmp_path,
            env={**env, **hub_off},
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert proc.returncode == 0, f"{code}\n---\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    server.close()
    assert len(server.gets()) == 1  # downloaded once, for every command that named it
    assert (tmp_path / "digits-ti.npz").is_file() and (
        tmp_path / "runs" / "digits-ti" / "best"
    ).is_dir()
    assert (tmp_path / "runs" / "digits" / "best").is_dir()
    assert (tmp_path / "runs" / "digits-64" / "best").is_dir()
    # the protocols' runs on the stand-ins their blocks build
    assert (
        "| pets | Oxford-IIIT Pets | 4 | 10% (3) |"
        in (tmp_path / "runs" / "transfer-digits" / "transfer.md").read_text()
    )
    assert list(
        json.loads((tmp_path / "runs" / "vtab-digits" / "vtab.json").read_text())["tasks"]
    ) == ["cifar100"]
