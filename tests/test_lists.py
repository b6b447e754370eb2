"""The VTAB-1k list files (``DIR/{train800,val200,train800val200,test}.txt`` of "path label"
lines beside ``DIR/images/``) as a source of the one image container: ``vtab800:DIR`` (the
sweep's splits) and ``vtab:DIR`` (the final run's), and a task folder given as a folder."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from helpers import tiny, vtab_task_folder
from vitkit.config import DataConfig, normalise_data
from vitkit.data.lists import ListImages
from vitkit.data.run_data import build_data
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
