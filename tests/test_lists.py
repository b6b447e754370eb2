"""The VTAB-1k list files (``DIR/{train800,val200,train800val200,test}.txt`` of "path label"
lines beside ``DIR/images/``) as a source of the one image container: ``vtab800:DIR`` (the
sweep's splits) and ``vtab:DIR`` (the final run's), and a task folder given as a folder."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from helpers import padded_image, tiny, vtab_task_folder
from vitkit.config import DataConfig, normalise_data
from vitkit.data import UnreadableImageWarning
from vitkit.data.run_data import build_data
from vitkit.data.sources.lists import ListImages
from vitkit.errors import DataError


@pytest.fixture(scope="module")
def cifar(tmp_path_factory) -> Path:
    sizes = {"train800": 6, "val200": 3, "test": 4}
    return vtab_task_folder(tmp_path_factory.mktemp("vtab-1k") / "cifar", 3, "PNG", 0, sizes)


def test_the_lists_are_a_source_of_the_one_container(cifar: Path, tmp_path: Path) -> None:
    train = ListImages(cifar, "train800", mode=None)
    assert len(train) == 6 and train.classes == ["0", "1", "2"] and train.mode == "RGB"
    assert train.labels.tolist() == [0, 1, 2, 0, 1, 2]
    assert train.name_of(4) == f"{cifar}/images/train800/4.png"
    assert train[1][0].shape == (3, 12, 14)
    # the sweep's spec and the final run's: which list trains, which validates, which tests
    model = tiny(image_size=16, patch_size=4)
    sweep = build_data(DataConfig(dataset=f"vtab800:{cifar}"), model, seed=0, in_chans=3)
    assert (len(sweep.train), len(sweep.val), sweep.test) == (6, 3, None)
    assert sweep.val_name == "val200.txt (3 images)"
    final = build_data(
        DataConfig(dataset=f"vtab:{cifar}", validation="test"), model, seed=0, in_chans=3
    )
    assert (len(final.train), len(final.test), final.val_is_test) == (9, 4, True)
    chosen = build_data(DataConfig(dataset=f"vtab:{cifar}"), model, seed=0, in_chans=3)
    assert not chosen.val_is_test and chosen.val_name.startswith("a holdout")  # never on test
    assert normalise_data(str(cifar)) == f"vtab:{cifar}"  # a task folder given as a folder
    # a list's faults name the line
    bad = shutil.copytree(cifar, tmp_path / "bad")
    (bad / "val200.txt").write_text("images/val200/0.png 1\nimages/val200/1.png one\n")
    with pytest.raises(DataError, match=r"val200.txt:2 holds 'one': expected the label"):
        ListImages(bad, "train800")
    (bad / "val200.txt").write_text("images/val200/0.png 999999999999\n")  # a list of 10^12 names
    with pytest.raises(DataError, match=r"val200.txt:1 holds the label 999999999999: expected a"):
        ListImages(bad, "train800")
    (bad / "val200.txt").write_text("images/val200/0.png \u0663\n")  # Arabic-Indic 3
    with pytest.raises(DataError, match=r"val200.txt:1 holds '\u0663': expected the label"):
        ListImages(bad, "train800")
    (bad / "val200.txt").write_text("../../etc/passwd 0\n")
    with pytest.raises(DataError, match=r"val200.txt:1: '../../etc/passwd': expected a path"):
        ListImages(bad, "val200")


def test_list_text_is_utf8_and_its_faults_are_one_bounded_line(cifar: Path, tmp_path: Path) -> None:
    """A list saved by Notepad (a byte-order mark) reads as the same list (its first path was
    '\\ufeffimages/...', a missing file); Latin-1 bytes and a NUL were tracebacks, and a path
    of 10^7 characters a 20 MB error line: each is one line naming the list and the line."""
    bad = shutil.copytree(cifar, tmp_path / "bad")
    lines = (cifar / "val200.txt").read_text()
    (bad / "val200.txt").write_bytes(b"\xef\xbb\xbf" + lines.encode())
    assert ListImages(bad, "val200").skipped == []
    assert ListImages(bad, "val200").source.files == ListImages(cifar, "val200").source.files
    faults = {
        "images/val200/0.png 0\nimages/val200/caf\xe9.png 1\n".encode("latin-1"): (
            r"val200.txt:2: the byte 0xe9 is not UTF-8: expected a list of 'relative/path label' "
            r"lines as UTF-8 text"
        ),
        b"images/val200/0.png 0\nimages/val200/\0.png 1\n": (
            r"val200.txt:2: 'images/val200/\\x00.png 1' holds a NUL character: expected text"
        ),
        ("a/" * 5_000_000 + "x.png 0\n").encode(): (
            r"val200.txt:1: a line of 10,000,007 characters: expected 'relative/path label' of "
            r"at most 4,128$"
        ),
        ("/" + "a" * 4000 + " 0\n").encode(): (  # shown cut in the middle
            r"val200.txt:1: '/a{99}'...\(3,801 characters\)...'a{100}': expected a path inside"
        ),
    }
    for data, match in faults.items():
        (bad / "val200.txt").write_bytes(data)
        with pytest.raises(DataError, match=match) as error:
            ListImages(bad, "val200")
        assert len(str(error.value)) < 600 and "\n" not in str(error.value)


def test_a_listed_path_leads_only_inside_the_task_folder(cifar: Path, tmp_path: Path) -> None:
    """A listed path was followed through links anywhere (as root, /etc/shadow was read and
    decoded): the rule of a Hugging Face cell's path (``bounds.resolves_inside``) holds for each
    file, which must resolve inside the task folder or the target of its images/ link, the
    layout of the releases, unless ``data.image_paths=any``. A file it refuses is unreadable:
    skipped and named."""
    task = shutil.copytree(cifar, tmp_path / "task")
    secret = tmp_path / "secret.png"
    Image.fromarray(np.full((4, 4, 3), 7, dtype=np.uint8)).save(secret)
    (task / "images/train800/0.png").unlink()
    (task / "images/train800/0.png").symlink_to(secret)  # out of the task folder
    (task / "images/train800/1.png").unlink()
    (task / "images/train800/1.png").symlink_to(task / "images/val200/1.png")  # inside it
    with pytest.warns(UnreadableImageWarning, match="leads outside the task folder"):
        listed = ListImages(task, "train800", max_bad_fraction=0.5)
    assert listed.skipped == [
        (
            f"{task}/images/train800/0.png",
            f"OSError: 'images/train800/0.png' leads outside the task folder {task} and its "
            "images/: read it only with data.image_paths=any",
        )
    ]
    anywhere = ListImages(task, "train800", image_paths="any")
    assert anywhere.skipped == [] and anywhere[0][0].shape == (3, 4, 4)
    model = tiny(image_size=16, patch_size=4)  # and as the run's config says
    spec = DataConfig(dataset=f"vtab800:{task}", image_paths="any")
    assert build_data(spec, model, seed=0, in_chans=3).skipped == []
    # the releases' layout: images/ a link to a folder elsewhere, which the files may be in
    shared = tmp_path / "shared"
    (task / "images").rename(shared)
    (task / "images").symlink_to(shared)
    with pytest.warns(UnreadableImageWarning):
        linked = ListImages(task, "train800", max_bad_fraction=0.5)
    assert [Path(name).name for name, _ in linked.skipped] == ["0.png"]  # still the secret only


def test_a_run_reads_its_lists_under_its_bounds(cifar: Path, tmp_path: Path) -> None:
    """``data.max_image_bytes`` and ``data.max_image_pixels`` reach a VTAB list's images from
    the run's config, as every source's: a listed file read whole (an 8 GB one was a
    MemoryError) or an image of too many pixels is skipped and named."""
    task = shutil.copytree(cifar, tmp_path / "task")
    padded_image(task / "images/train800/0.png", 5_001)
    Image.fromarray(np.zeros((13, 14, 3), dtype=np.uint8)).save(task / "images/train800/1.png")
    model = tiny(image_size=16, patch_size=4)
    cfg = DataConfig(
        dataset=f"vtab800:{task}",
        max_image_bytes=5_000,
        max_image_pixels=12 * 14,  # the task's images are 14 x 12
        max_bad_fraction=0.5,
    )
    with pytest.warns(UnreadableImageWarning):
        data = build_data(cfg, model, seed=0, in_chans=3)
    assert len(data.train) == 4 and data.skipped == [
        (
            f"{task}/images/train800/0.png",
            "TooLargeError: larger than data.max_image_bytes=5,000 allows",
        ),
        (
            f"{task}/images/train800/1.png",
            "DecompressionBombError: 14 x 13 pixels, more than data.max_image_pixels=168 allows",
        ),
    ]
