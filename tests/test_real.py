"""ImageNet ReaL (eval/real.py) and ``vitkit eval --real``: the labels shipped with vitkit equal
timm's copy; the accuracy equals timm's ``RealLabelsImagenet`` on the same predictions, for
stand-in validation sets (a folder, tar shards, a Hugging Face table) whose images are named as
ImageNet's validation files, in another order, a part of them, with other extensions; a name
that does not join is one line."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

import vitkit
from helpers import (
    one_line_error,
    png_bytes,
    real_stand_in_numbers,
    timm_real,
    timm_real_labels,
    top1_predictions,
    val_name,
    write_tar,
)
from vitkit.cli import main
from vitkit.config import ModelConfig
from vitkit.eval.real import ENTRIES, real_accuracy, real_entry, real_labels

ROOT = Path(__file__).resolve().parent.parent
FAVOURED = 4  # classes the stand-in model predicts (among them, by the image)


def test_the_labels_shipped_are_timms() -> None:
    labels = real_labels()
    assert [list(entry) for entry in labels] == timm_real_labels()
    assert len(labels) == ENTRIES and sum(1 for entry in labels if not entry) == 3163


def test_real_entry_joins_by_the_stem_of_the_last_part() -> None:
    assert real_entry("ILSVRC2012_val_00000001.JPEG") == 0
    assert real_entry("ILSVRC2012_val_00000001") == 0  # a shard's key
    assert real_entry("ILSVRC2012_val_00000001_n01751748.JPEG") == 0  # the Hub's imagenet-1k
    assert real_entry("n01440764/ILSVRC2012_val_00050000.png") == ENTRIES - 1
    assert real_entry("C:\\imagenet\\val\\ILSVRC2012_val_00000002.jpeg") == 1
    assert real_entry("ILSVRC2012_val_00000003.seg.png") == 2  # webdataset's key: to the first dot
    for bad in (None, "", "ILSVRC2012_val_00000000.JPEG", "ILSVRC2012_val_00050001.JPEG",
                "ILSVRC2012_val_1.JPEG", "ILSVRC2012_val_00000001.JPEG/x.png",
                "xILSVRC2012_val_00000001.JPEG", "ILSVRC2012_test_00000001.JPEG"):  # fmt: skip
        assert real_entry(bad) is None, bad


def test_real_accuracy_equals_timms_on_a_shuffled_part() -> None:
    """3,000 validation images in a random order (some of them with an empty label set), each
    predicted right half of the time where it can be: the same accuracy and count as timm's."""
    labels = timm_real_labels()
    rng = np.random.default_rng(0)
    numbers = rng.choice(np.arange(1, ENTRIES + 1), 3000, replace=False).tolist()
    guesses = rng.integers(0, 1000, len(numbers))
    predictions = torch.tensor(
        [
            labels[n - 1][0] if labels[n - 1] and rng.random() < 0.5 else int(g)
            for n, g in zip(numbers, guesses, strict=True)
        ]
    )
    ours = real_accuracy([n - 1 for n in numbers], predictions)
    accuracy, counted = timm_real(numbers, predictions)
    assert ours.counted == counted and ours.left_out == 3000 - counted > 0
    assert ours.accuracy == pytest.approx(accuracy, abs=1e-12) and 0.4 < ours.accuracy < 0.6


# --------------------------------------------------------------- vitkit eval --real end to end


def _favoured(numbers: list[int]) -> list[int]:
    """The classes most often in the label sets of ``numbers``: what the stand-in model predicts."""
    labels = timm_real_labels()
    counts = np.bincount([k for n in numbers for k in labels[n - 1]], minlength=1000)
    return np.argsort(-counts, kind="stable")[:FAVOURED].tolist()


def _checkpoint(path: Path, favoured: list[int]) -> Path:
    """A tiny 1000-class ViT that predicts one of ``favoured`` for each image (which one
    depends on the image), so that its ReaL accuracy is neither 0 nor 1."""
    cfg = ModelConfig(
        image_size=16, patch_size=8, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32,
        num_classes=1000,
    )  # fmt: skip
    model = vitkit.create_model(cfg)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.5)
        model.head.bias.fill_(-100.0)
        model.head.bias[favoured] = 0.0
    return vitkit.save(model, path)


def _eval_real(capsys, checkpoint: Path, spec: str) -> tuple[float, int, int]:
    """``vitkit eval CHECKPOINT --data SPEC --real``: (ReaL accuracy, images counted, left out)."""
    capsys.readouterr()
    assert main(["eval", str(checkpoint), "--data", spec, "--real", "--workers", "0"]) == 0
    out = capsys.readouterr().out
    found = re.search(r"^ReaL ([0-9.]+)  \((\d+) images; (\d+) left out", out, re.MULTILINE)
    assert found is not None, out
    return float(found[1]), int(found[2]), int(found[3])


def _same_as_timm(
    capsys, checkpoint: Path, spec: str, number_of: dict[str, int]
) -> tuple[float, int]:
    """``vitkit eval --real`` prints timm's ReaL accuracy of the same predictions (the images
    identified by the test's own record of their numbers, ``number_of``: name -> number)."""
    names, predictions = top1_predictions(checkpoint, spec)
    numbers = [number_of[name] for name in names]
    assert sorted(numbers) != numbers  # evaluated in another order than the numbers'
    accuracy, counted = timm_real(numbers, predictions)
    assert 0 < accuracy < 1
    printed, printed_counted, left_out = _eval_real(capsys, checkpoint, spec)
    assert printed == round(accuracy, 4)
    assert (printed_counted, left_out) == (counted, len(numbers) - counted)
    return accuracy, counted


@pytest.fixture(scope="module")
def shard_numbers() -> list[int]:
    return real_stand_in_numbers(16, seed=1)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, shard_numbers: list[int]) -> Path:
    return _checkpoint(tmp_path_factory.mktemp("real") / "ckpt", _favoured(shard_numbers))


def test_eval_real_on_shards_keyed_by_validation_names(
    checkpoint: Path, shard_numbers: list[int], tmp_path: Path, capsys
) -> None:
    """Two shards of 16 validation images (keys with and without a folder, any extension, out
    of order) and a classes.txt of 1000 names: the shards' keys join them."""
    labels = timm_real_labels()
    root = tmp_path / "shards"
    root.mkdir()
    (root / "classes.txt").write_text("".join(f"class{k}\n" for k in range(1000)))
    number_of: dict[str, int] = {}
    for part in (0, 1):
        members: dict[str, bytes] = {}
        for i, number in enumerate(shard_numbers[part::2]):
            key = val_name(number, "")[:-1]  # ILSVRC2012_val_NNNNNNNN
            key = f"val/{key}" if i % 3 == 0 else key
            members[f"{key}.{'png' if i % 2 else 'jpg'}"] = png_bytes(number)
            members[f"{key}.cls"] = str((labels[number - 1] or [0])[0]).encode()
            number_of[f"{root / f'part-{part:06d}.tar'}:{key}"] = number
        write_tar(root / f"part-{part:06d}.tar", members)
    _same_as_timm(capsys, checkpoint, f"wds:{root}", number_of)


def test_eval_real_on_a_folder_in_its_class_folders(
    checkpoint: Path, tmp_path: Path, capsys
) -> None:
    """ImageNet's validation images as people prepare them, one folder per class (1000 of
    them, one image each: a model's classes are the folder's), files named
    ILSVRC2012_val_NNNNNNNN with several extensions, in an order that is not the numbers'."""
    numbers = real_stand_in_numbers(1000, seed=2)
    root = tmp_path / "val"
    number_of: dict[str, int] = {}
    for k, number in enumerate(numbers):
        path = root / f"n{k:08d}" / val_name(number, ("JPEG", "png", "jpg")[k % 3])
        path.parent.mkdir(parents=True)
        path.write_bytes(png_bytes(number))
        number_of[str(path)] = number
    _, counted = _same_as_timm(capsys, checkpoint, str(root), number_of)
    assert counted < 1000  # images with an empty set are left out


def test_eval_real_on_a_hugging_face_table_by_its_paths(
    checkpoint: Path, shard_numbers: list[int], tmp_path: Path, capsys
) -> None:
    """A table's Image cells hold the bytes and the file's path (as the Hub's imagenet-1k
    validation split does): the paths join; a table of bytes alone has no names."""
    datasets = pytest.importorskip("datasets")
    labels = timm_real_labels()
    features = datasets.Features(
        {"image": datasets.Image(), "label": datasets.ClassLabel(num_classes=1000)}
    )
    rows = {
        "image": [{"bytes": png_bytes(n), "path": f"val/{val_name(n)}"} for n in shard_numbers],
        "label": [(labels[n - 1] or [0])[0] for n in shard_numbers],
    }
    datasets.Dataset.from_dict(rows, features=features).save_to_disk(tmp_path / "hf")
    spec = f"hf:{tmp_path / 'hf'}"
    number_of = {f"{spec} train split row {i}": n for i, n in enumerate(shard_numbers)}
    _same_as_timm(capsys, checkpoint, spec, number_of)

    rows["image"] = [{"bytes": png_bytes(n), "path": None} for n in shard_numbers]
    datasets.Dataset.from_dict(rows, features=features).save_to_disk(tmp_path / "bytes")
    err = one_line_error(capsys, ["eval", str(checkpoint), "--data", f"hf:{tmp_path / 'bytes'}",
                                   "--real"])  # fmt: skip
    assert "16 of the 16 images" in err and "named otherwise: None" in err


def test_names_that_do_not_join_are_one_line(
    checkpoint: Path, shard_numbers: list[int], tmp_path: Path, capsys
) -> None:
    """A shard whose keys are not validation names, and a model of other than 1000 classes:
    one line each, before the model runs."""
    root = tmp_path / "shards"
    root.mkdir()
    (root / "classes.txt").write_text("".join(f"class{k}\n" for k in range(1000)))
    members = {}
    for i, key in enumerate(["ILSVRC2012_val_00000007", "cat_001", "ILSVRC2012_val_00099999",
                             "dog_002", "ILSVRC2012_val_00000009", "x"]):  # fmt: skip
        members[f"{key}.png"], members[f"{key}.cls"] = png_bytes(i), b"3"
    write_tar(root / "images.tar", members)
    err = one_line_error(capsys, ["eval", str(checkpoint), "--data", f"wds:{root}", "--real"])
    assert "ILSVRC2012_val_00000001 to ILSVRC2012_val_00050000" in err
    assert "4 of the 6 images" in err
    assert "'cat_001', 'ILSVRC2012_val_00099999', 'dog_002' and 1 more" in err

    small = vitkit.create_model(ModelConfig(
        image_size=16, patch_size=8, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32,
        num_classes=10))  # fmt: skip
    ten = vitkit.save(small, tmp_path / "ten")
    err = one_line_error(capsys, ["eval", str(ten), "--data", "synthetic", "--real"])
    assert "has 10 outputs: expected 1000" in err


def test_a_validation_image_found_twice_is_one_line(
    checkpoint: Path, tmp_path: Path, capsys
) -> None:
    """The same validation image in three class folders of a shard (and another under two
    extensions) would be counted as often as it appears: one line naming them, before the model
    runs; and ``vitkit transfer``'s join (``real_entries_for``, as ``sweep._joined`` calls it) is
    the same check."""
    from vitkit.errors import DataError
    from vitkit.eval.real import real_entries_for

    root = tmp_path / "shards"
    root.mkdir()
    (root / "classes.txt").write_text("".join(f"class{k}\n" for k in range(1000)))
    names = ["n1/ILSVRC2012_val_00000007.png", "n2/ILSVRC2012_val_00000007.png",
             "ILSVRC2012_val_00000008.png", "n3/ILSVRC2012_val_00000007.png",
             "ILSVRC2012_val_00000009.png", "x/ILSVRC2012_val_00000009_n01751748.jpg"]  # fmt: skip
    members = {}
    for i, name in enumerate(names):
        key = name.rpartition(".")[0]
        members[name], members[f"{key}.cls"] = png_bytes(i), b"3"
    write_tar(root / "images.tar", members)
    err = one_line_error(capsys, ["eval", str(checkpoint), "--data", f"wds:{root}", "--real"])
    assert "counts each validation image once, and 3 of the 6 images" in err
    assert "'n2/ILSVRC2012_val_00000007' repeats 'n1/ILSVRC2012_val_00000007'" in err
    assert "'x/ILSVRC2012_val_00000009_n01751748' repeats 'ILSVRC2012_val_00000009'" in err
    assert "keep one copy of each" in err and "top-1" not in capsys.readouterr().out

    from vitkit.data.run_data import evaluation_split

    model = vitkit.load(checkpoint)
    split = evaluation_split(f"wds:{root}", None, model.cfg, source="test")
    with pytest.raises(DataError, match="3 of the 6 images"):
        real_entries_for(1000, split.dataset, split.name, "the fine-tuned model")
