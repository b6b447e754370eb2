"""What a saved model carries besides weights, so other tools use it as vitkit does: class names
and preprocessing, in our format and in Hugging Face's, where transformers' own pipeline proves
them on an image file; read back into a ``Preprocess``, and refused in one line where HF's image
processor cannot express them. (ONNX's metadata: tests/test_export.py.)
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image, ImageDraw

import vitkit
from helpers import exif_photo, randomize, tiny
from vitkit.cli import main
from vitkit.config import ConfigError
from vitkit.data import Preprocess
from vitkit.data.image_file import read_image
from vitkit.io.api import read
from vitkit.io.formats.hf import read_hf_dir
from vitkit.model import VisionTransformer, build_model

transformers = pytest.importorskip("transformers")

NAMES = ["cat", "dog", "ship", "frog", "tree"]


def _model(seed: int = 0, **fields) -> VisionTransformer:
    """A 1-layer, 32-wide ViT with 8-pixel patches and five classes; weights N(0, 0.3), which
    gives probabilities far from uniform."""
    cfg = tiny(hidden_size=32, num_layers=1, num_heads=2, mlp_dim=64, num_classes=5, **fields)
    return randomize(build_model(cfg), std=0.3, seed=seed)


def _image_file(path: Path, seed: int = 0) -> Path:
    """A 53x71 PNG of colour noise and filled ellipses: neither the model's size nor its aspect
    ratio, so the resize matters, and coloured, so a 1-channel model's luma matters."""
    g = np.random.default_rng(seed)
    image = Image.fromarray(g.integers(0, 256, (53, 71, 3), dtype=np.uint8))
    draw = ImageDraw.Draw(image)
    for _ in range(6):
        x, y, w, h = (int(v) for v in g.integers((0, 0, 5, 5), (60, 45, 30, 30)))
        draw.ellipse([x, y, x + w, y + h], fill=tuple(int(v) for v in g.integers(0, 256, 3)))
    image.save(path)
    return path


def _pipeline(directory: Path, image: Path, processor: type | None) -> tuple[str, torch.Tensor]:
    """``transformers.pipeline("image-classification")`` on the image file: its top-1 label and
    its probability of each of ``NAMES``; ``processor`` replaces the image processor class
    transformers picks for ``preprocessor_config.json``."""
    kwargs = {} if processor is None else {"image_processor": processor.from_pretrained(directory)}
    classify = transformers.pipeline(
        "image-classification", model=str(directory), device="cpu", **kwargs
    )
    results = classify(str(image), top_k=len(NAMES))
    score = {r["label"]: r["score"] for r in results}
    return results[0]["label"], torch.tensor([score[name] for name in NAMES])


# The processors that read preprocessor_config.json: the one transformers picks (torchvision's
# resize in transformers 5) and, where transformers has it, the PIL one (transformers 4's).
PROCESSORS = [None] + (
    [transformers.ViTImageProcessorPil] if hasattr(transformers, "ViTImageProcessorPil") else []
)


def test_our_format_stores_names_and_preprocess(tmp_path: Path) -> None:
    preprocess = Preprocess(image_size=32, resize="bicubic", antialias=False)
    directory = vitkit.save(_model(), tmp_path / "ours", class_names=NAMES, preprocess=preprocess)
    meta = json.loads((directory / "config.json").read_text())
    assert meta["class_names"] == NAMES and meta["preprocess"] == preprocess.to_dict()
    _, _, recorded = read(directory)
    assert recorded.to_dict() == {"class_names": NAMES, "preprocess": preprocess.to_dict()}
    with pytest.raises(ConfigError, match="in_chans=1 for a model with in_chans=3"):
        vitkit.save(_model(), tmp_path / "x", preprocess=Preprocess(image_size=32, in_chans=1))
    with pytest.raises(ConfigError, match="2 class_names for a model with num_classes=5"):
        vitkit.save(_model(), tmp_path / "x", class_names=["a", "b"])
    assert not (tmp_path / "x").exists()


@pytest.mark.parametrize(
    ("in_chans", "image_size", "resize", "seed", "tol"),
    [
        pytest.param(3, (24, 40), "bicubic", 0, 1e-4, id="rgb"),
        pytest.param(1, 32, "bilinear", 1, 2e-3, id="gray"),
    ],
)
@torch.no_grad()
def test_pipeline_classifies_an_image_file_as_vitkit(
    in_chans: int, image_size, resize: str, seed: int, tol: float, tmp_path: Path
) -> None:
    """The pipeline's top-1 label is vitkit's, and its probabilities are within ``tol``.

    vitkit's side is what ``vitkit predict`` computes, the model on ``read_image`` with the
    checkpoint's preprocessing, compared by probabilities rather than through predict's printed
    output (whose format is changing). Tolerances, about 4-5x the largest difference measured
    with transformers 5.23: RGB, 1e-4: the same resize, but PIL's (the PIL processor) and
    torchvision's antialiased one (vitkit's, and the default processor's) differ by up to a grey
    level at some pixels (measured 2.3e-5 with PIL, 1.5e-8 with torchvision); 1 channel, 2e-3:
    PIL rounds L to an integer before resizing where the export weighs the resized R, G and B
    exactly, about a grey level apart (measured 4.2e-4). The top-2 gaps are 0.30 and 0.24.
    """
    model = _model(seed, in_chans=in_chans, image_size=image_size)
    preprocess = Preprocess(image_size=image_size, in_chans=in_chans, resize=resize)
    directory = vitkit.save(
        model, tmp_path / "hf", format="hf", class_names=NAMES, preprocess=preprocess
    )
    image = _image_file(tmp_path / "image.png")
    probs = model(read_image(str(image), preprocess)).softmax(-1)[0]  # (K,)
    top2 = probs.topk(2)
    assert top2.values[0] - top2.values[1] > 50 * tol  # a top-1 the tolerance cannot flip
    for processor in PROCESSORS:
        label, scores = _pipeline(directory, image, processor)
        assert label == NAMES[top2.indices[0]]
        assert (scores - probs).abs().max() <= tol


@torch.no_grad()
def test_a_photo_in_any_orientation_is_classified_as_the_pipeline_does(tmp_path: Path) -> None:
    """A phone photo stored turned, with the EXIF tag that turns it upright, in each of the eight
    orientations (a JPEG of 53x71 px, so a turn changes its shape): ``vitkit predict``'s top-1
    is the pipeline's, which turns images upright (``transformers.image_utils.load_image``), and
    the probabilities are within 1e-3 in L1 (measured: 1.0e-7 at most, transformers 5). Before
    vitkit read the tag, they differed by 0.027-0.059 in L1 on the seven turned ones."""
    model = _model(2)
    preprocess = Preprocess(image_size=32)
    directory = vitkit.save(
        model, tmp_path / "hf", format="hf", class_names=NAMES, preprocess=preprocess
    )
    with Image.open(_image_file(tmp_path / "picture.png", seed=3)) as picture:
        upright = picture.convert("RGB")
    classify = transformers.pipeline("image-classification", model=str(directory), device="cpu")
    for orientation in range(1, 9):
        photo = exif_photo(tmp_path / f"photo-{orientation}.jpg", upright, orientation)
        probs = model(read_image(str(photo), preprocess)).softmax(-1)[0]  # (K,)
        results = classify(str(photo), top_k=len(NAMES))
        scores = torch.tensor([{r["label"]: r["score"] for r in results}[n] for n in NAMES])
        assert results[0]["label"] == NAMES[probs.argmax()], orientation
        assert (scores - probs).abs().sum() <= 1e-3, (orientation, scores, probs)


def test_processor_file_says_what_preprocess_does(tmp_path: Path) -> None:
    preprocess = Preprocess(image_size=(24, 40), resize="bicubic")
    model = _model(image_size=(24, 40))
    directory = vitkit.save(model, tmp_path / "hf", format="hf", preprocess=preprocess)
    processor = json.loads((directory / "preprocessor_config.json").read_text())
    assert processor["image_processor_type"].startswith("ViTImageProcessor")
    assert processor["size"] == {"height": 24, "width": 40}
    assert processor["resample"] == 3  # PIL's BICUBIC
    assert processor["do_resize"] and processor["do_rescale"] and processor["do_normalize"]
    assert processor["rescale_factor"] == 1 / 255 and not processor.get("do_center_crop")
    assert processor["image_mean"] == processor["image_std"] == [0.5, 0.5, 0.5]
    assert processor["image_orientation"] == "exif_transpose"  # for a reader decoding files itself
    _, _, recorded = read_hf_dir(directory)
    assert recorded.preprocess == preprocess


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"image_mean": [0.485, 0.456, 0.406], "image_std": [0.229, 0.224, 0.225]}, "image_mean"),
        ({"size": {"shortest_edge": 16}}, "shortest_edge"),
        ({"do_center_crop": True, "crop_size": {"height": 16, "width": 16}}, "do_center_crop"),
        ({"resample": 0}, "resample=0"),
    ],
)
def test_processor_vitkit_cannot_express_is_not_carried_over(
    change: dict, why: str, tmp_path: Path
) -> None:
    directory = vitkit.save(_model(image_size=16), tmp_path / "hf", format="hf")
    path = directory / "preprocessor_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **change}))
    with pytest.warns(UserWarning) as records:
        _, _, recorded = read_hf_dir(directory)
    assert recorded.preprocess is None  # rather than a Preprocess that does something else
    (record,) = records
    assert "preprocessing not carried over" in str(record.message) and why in str(record.message)


def test_a_processors_size_is_checked_when_the_checkpoint_is_read(tmp_path: Path) -> None:
    """Hugging Face's ``size`` of 10^6 made ``predict`` allocate 3 TB: it is checked against the
    model when the directory is read, as our format's ``preprocess`` is, in one line naming it."""
    from vitkit.io.api import load_with_meta

    directory = vitkit.save(_model(image_size=16), tmp_path / "hf", format="hf")
    path = directory / "preprocessor_config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "size": 10**6}))
    with pytest.raises(vitkit.io.CheckpointError) as info:
        load_with_meta(directory)
    assert str(info.value) == (
        f"{directory}: preprocess image_size=1000000 for a model of image_size=16: expected each "
        "side a multiple of the patch stride 8, at most 4 times the model's (64 x 64)"
    )
    assert main(["predict", str(directory), str(_image_file(tmp_path / "a.png"))]) == 2


@pytest.mark.parametrize(
    ("preprocess", "match"),
    [
        (Preprocess(image_size=(24, 40), antialias=False), "antialias=False .* always antialias"),
        (Preprocess(image_size=32), r"image_size=32 for a model of image_size=\(24, 40\)"),
        (Preprocess(image_size=(24, 40), in_chans=1), "in_chans=1 for a model with in_chans=3"),
    ],
)
def test_what_hf_cannot_hold_is_refused_in_one_line(
    preprocess: Preprocess, match: str, tmp_path: Path
) -> None:
    model = _model(image_size=(24, 40))
    with pytest.raises(ConfigError, match=match) as info:
        vitkit.save(model, tmp_path / "hf", format="hf", preprocess=preprocess)
    assert "\n" not in str(info.value)
    assert not (tmp_path / "hf").exists()


# ---------------------------------------------------------------- through vitkit convert


def _convert(src: Path, dst: Path, *options: str) -> Path:
    assert main(["convert", str(src), str(dst), *options]) == 0
    return dst


@pytest.mark.parametrize("in_chans", [3, 1])
def test_convert_to_hf_and_back_keeps_names_and_preprocess(in_chans: int, tmp_path: Path) -> None:
    preprocess = Preprocess(image_size=(24, 40), in_chans=in_chans, resize="bicubic")
    model = _model(in_chans=in_chans, image_size=(24, 40))
    ours = vitkit.save(model, tmp_path / "ours", class_names=NAMES, preprocess=preprocess)
    hf = _convert(ours, tmp_path / "hf", "--format", "hf")
    config = json.loads((hf / "config.json").read_text())
    assert config["id2label"] == {str(i): name for i, name in enumerate(NAMES)}
    assert config["label2id"] == {name: i for i, name in enumerate(NAMES)}
    processor = json.loads((hf / "preprocessor_config.json").read_text())
    assert processor["size"] == {"height": 24, "width": 40} and processor["resample"] == 3

    _, _, recorded = read(_convert(hf, tmp_path / "back"))
    # A 1-channel model comes back as the 3-channel model it was exported as (test_hf.py), so
    # its preprocessing comes back with 3 channels.
    rgb = dataclasses.replace(preprocess, in_chans=3)
    assert recorded.to_dict() == {"class_names": NAMES, "preprocess": rgb.to_dict()}


def test_hf_to_vitkit_to_hf_keeps_labels_and_processor(tmp_path: Path) -> None:
    """A directory transformers wrote, model and ViTImageProcessor, comes back the same."""
    config = transformers.ViTConfig(
        hidden_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        intermediate_size=64,
        image_size=16,
        patch_size=8,
        id2label=dict(enumerate(NAMES)),
        label2id={name: i for i, name in enumerate(NAMES)},
    )
    transformers.ViTForImageClassification(config).save_pretrained(tmp_path / "hf")
    processor = transformers.ViTImageProcessor(size={"height": 16, "width": 16}, resample=3)
    processor.save_pretrained(tmp_path / "hf")  # ViT's defaults otherwise: 1/255, mean = std = 0.5

    ours = _convert(tmp_path / "hf", tmp_path / "ours")
    _, _, recorded = read(ours)
    assert recorded.to_dict() == {
        "class_names": NAMES,
        "preprocess": Preprocess(image_size=16, resize="bicubic").to_dict(),
    }
    again = _convert(ours, tmp_path / "again", "--format", "hf")
    before, after = (json.loads((d / "config.json").read_text()) for d in (tmp_path / "hf", again))
    assert after["id2label"] == before["id2label"] and after["label2id"] == before["label2id"]
    before, after = (
        json.loads((d / "preprocessor_config.json").read_text()) for d in (tmp_path / "hf", again)
    )
    fields = ["do_resize", "size", "resample", "do_rescale", "rescale_factor", "do_normalize"]
    fields += ["image_mean", "image_std"]
    assert {k: after[k] for k in fields} == {k: before[k] for k in fields}


def test_convert_to_ours_keeps_names_and_preprocess(tmp_path: Path) -> None:
    preprocess = Preprocess(image_size=32, resize="bicubic", antialias=False)
    ours = vitkit.save(_model(), tmp_path / "ours", class_names=NAMES, preprocess=preprocess)
    _, _, recorded = read(_convert(ours, tmp_path / "copy"))
    assert recorded.to_dict() == {"class_names": NAMES, "preprocess": preprocess.to_dict()}
    # At another resolution the preprocessing follows the model: it resizes to 24x48 now.
    _, _, recorded = read(_convert(ours, tmp_path / "wide", "--image-size", "24x48"))
    wide = dataclasses.replace(preprocess, image_size=(24, 48))
    assert recorded.to_dict() == {"class_names": NAMES, "preprocess": wide.to_dict()}


def test_convert_refuses_in_one_line_what_hf_cannot_hold(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    preprocess = Preprocess(image_size=32, antialias=False)
    ours = vitkit.save(_model(), tmp_path / "ours", preprocess=preprocess)
    assert main(["convert", str(ours), str(tmp_path / "hf"), "--format", "hf"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("vitkit convert: error:") and "antialias=False" in line
    assert not (tmp_path / "hf").exists()


def test_wnids_and_source_travel_and_are_checked(tmp_path: Path) -> None:
    """``wnids`` (each class's WordNet id) and ``pretrained`` (the weights' source) travel with the
    weights in our format and Hugging Face's, and what is not one distinct wnid per class is
    refused in one line, on writing (nothing written) and on reading (naming the file)."""
    from vitkit.errors import CheckpointError

    wnids = [f"n0000000{i}" for i in range(5)]
    written = {"class_names": NAMES, "wnids": wnids, "pretrained": "ViT-mu/16@test"}
    ours = vitkit.save(_model(), tmp_path / "ours", **written)
    assert read(ours)[2].to_dict() == written
    hf = vitkit.save(_model(), tmp_path / "hf", format="hf", **written)
    config = transformers.AutoConfig.from_pretrained(hf)
    assert config.id2label[0] == "cat" and config.wnids == wnids
    assert config.pretrained == "ViT-mu/16@test"
    assert {k: v for k, v in read(hf)[2].to_dict().items() if k != "preprocess"} == written
    refused = [
        (wnids[:2], "2 wnids for a model with num_classes=5: expected one wnid per class"),
        ([*wnids[:4], "n00000000"], r"wnids must be distinct, found \['n00000000'\]"),
        ([*wnids[:4], "cat"], r"wnids: expected WordNet synset ids .* found \['cat'\]"),
    ]
    for bad, match in refused:
        with pytest.raises(ConfigError, match=match):
            vitkit.save(_model(), tmp_path / "x", wnids=bad)
        assert not (tmp_path / "x").exists()
    meta = json.loads((ours / "config.json").read_text())
    (ours / "config.json").write_text(json.dumps({**meta, "wnids": wnids[:4]}))
    with pytest.raises(CheckpointError, match=r"config\.json: 4 wnids for a model with num_"):
        read(ours)
