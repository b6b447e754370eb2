"""Hugging Face datasets as data (data/sources/hf.py): columns named by settings, labels as
names, a split without labels left out, an image cell read only from files of its own dataset
and shown cut, a row's image from its Arrow column. Every dataset here is made by the test."""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import vitkit
from photos import CLASSES, TINY, pixels, rows, save_image
from vitkit.cli import main
from vitkit.config import replace
from vitkit.data import ImageFolderDataset
from vitkit.data.run_data import build_data
from vitkit.errors import ConfigError, DataError
from vitkit.recipes import get_recipe

datasets = pytest.importorskip("datasets")
pytestmark = pytest.mark.usefixtures("hf_cache")


@pytest.mark.parametrize("streaming", [False, True])
def test_a_split_without_labels_is_left_out_with_a_warning(streaming: bool, tmp_path: Path) -> None:
    def pngs(n: int) -> list[dict]:
        out = []
        for k in range(n):
            buffer = io.BytesIO()
            Image.fromarray(pixels(k % 3, k).astype(np.uint8)).save(buffer, "PNG")
            out.append({"bytes": buffer.getvalue(), "path": None})
        return out

    features = datasets.Features(
        {"image": datasets.Image(), "label": datasets.ClassLabel(names=list(CLASSES))}
    )
    train = datasets.Dataset.from_dict(
        {"image": pngs(9), "label": [k % 3 for k in range(9)]}, features=features
    )
    test = datasets.Dataset.from_dict({"image": pngs(4), "label": [-1] * 4}, features=features)
    folder = tmp_path / "parquet"
    folder.mkdir()
    train.to_parquet(folder / "train-00000-of-00001.parquet")
    test.to_parquet(folder / "test-00000-of-00001.parquet")
    keys = {"data.dataset": f"hf:{folder}", "data.streaming": streaming, "model.num_classes": 3}
    keys |= {"data.validation": "holdout"} if not streaming else {}
    run = replace(get_recipe("smoke"), keys)
    if streaming:  # a stream cannot hold out: without its test split it has nothing to validate on
        with (
            pytest.warns(UserWarning, match=r"every label of its test split is -1"),
            pytest.raises(ConfigError, match=r"has no val or test split"),
        ):
            build_data(run.data, run.model, seed=0, in_chans=3)
        return
    with pytest.warns(UserWarning, match=r"every label of its test split is -1"):
        data = build_data(run.data, run.model, seed=0, in_chans=3)
    assert data.test is None and len(data.train) + len(data.val) == 9


def test_a_damaged_parquet_file_is_named_in_one_line(tmp_path: Path, caplog) -> None:
    """A parquet file cut short in a folder (or a glob) of them was datasets'
    DatasetGenerationError, a traceback after datasets' own log line; it is one line naming the
    file, and datasets says nothing."""
    from vitkit.config import DataConfig
    from vitkit.data.sources.hf import open_hf

    table = datasets.Dataset.from_dict({"image": [b"x"] * 4, "label": [0, 1, 0, 1]})
    folder = tmp_path / "parquet"
    folder.mkdir()
    for k in range(2):
        table.to_parquet(folder / f"train-{k}.parquet")
    damaged = folder / "train-1.parquet"
    damaged.write_bytes(damaged.read_bytes()[:-100])
    for spec in (folder, folder / "*.parquet"):
        with pytest.raises(DataError) as err:
            open_hf(DataConfig(dataset=f"hf:{spec}"))
        assert str(err.value) == (
            f"hf:{spec} cannot be read: {damaged} is not a readable parquet file (ArrowInvalid: "
            "Parquet magic bytes not found in footer. Either the file is corrupted or this is "
            "not a parquet file.)"
        )
    assert not [r for r in caplog.records if r.name.startswith("datasets")]


def test_columns_are_settings_and_labels_may_be_names(photos: Path, tmp_path: Path, capsys) -> None:
    """Images in 'img' and class names as text in 'y' (no ClassLabel): the classes are the names,
    sorted; eval --data reads the columns the checkpoint's run named."""
    tables = {split: rows(ImageFolderDataset(photos, split)) for split in ("train", "test")}
    datasets.DatasetDict(
        {
            split: datasets.Dataset.from_dict(
                {"img": r["image"], "y": [CLASSES[k] for k in r["label"]]},
                features=datasets.Features(
                    {"img": datasets.Image(), "y": datasets.Value("string")}
                ),
            )
            for split, r in tables.items()
        }
    ).save_to_disk(tmp_path / "named")
    spec = f"hf:{tmp_path / 'named'}"
    run_dir = tmp_path / "run"
    assert main(["train", "--data", spec, *TINY, "--set", "train.duration=1st",
                 "--set", "data.image_column=img", "--set", "data.label_column=y",
                 "--run-dir", str(run_dir), "--no-progress"]) == 0  # fmt: skip
    assert "a holdout of 10% of every class of train" in capsys.readouterr().out  # no val split
    assert vitkit.load(run_dir / "best").cfg.num_classes == 3
    assert main(["eval", str(run_dir / "best"), "--data", spec]) == 0
    out = capsys.readouterr().out
    assert f"on {spec}: test split (9 images)" in out
    lines = out.splitlines()
    per_class = lines[next(i for i, line in enumerate(lines) if line.startswith("top-1")) + 1 :]
    assert [line.split()[0] for line in per_class] == list(CLASSES)


def test_an_image_cell_reads_only_files_of_its_own_dataset(tmp_path: Path, hf_cache: None) -> None:
    """An ``Image`` cell may store a path instead of bytes: an absolute path outside the dataset
    was read and trained on, and ``/dev/zero`` filled the memory. By default a cell reads a
    relative path inside the dataset's folder only; ``data.image_paths=any`` (the one-line
    reason names it) reads any regular file; ``data.max_image_bytes`` caps what is read."""
    import pyarrow.parquet as pq

    from vitkit.config import DataConfig
    from vitkit.data.sources.hf import open_hf

    root = tmp_path / "ds"
    for k in range(3):
        save_image(root / "imgs" / f"{k}.png", k)
    outside = save_image(tmp_path / "outside.png", 9)
    (root / "imgs/escape.png").symlink_to(outside)
    fifo = root / "imgs/fifo.png"
    os.mkfifo(fifo)
    paths = ["imgs/0.png", "imgs/1.png", str(outside), "../outside.png", "imgs/escape.png",
             "/dev/zero", "imgs/fifo.png", "imgs/2.png"]  # fmt: skip
    features = datasets.Features(
        {"image": datasets.Image(), "label": datasets.ClassLabel(names=["a", "b"])}
    )
    rows = datasets.Dataset.from_dict(
        {"image": paths, "label": [k % 2 for k in range(len(paths))]}, features=features
    )
    pq.write_table(rows.data.table, root / "train.parquet")  # the paths as they are

    def read(**keys) -> dict[str, str]:
        spec = DataConfig(dataset=f"hf:{root / 'train.parquet'}", **keys)
        with pytest.warns(UserWarning):
            split = open_hf(spec).dataset("train", mode="RGB", max_bad_fraction=0.9)
        assert len(split) == len(paths) - len(split.skipped)
        return {paths[int(name.rsplit(" ", 1)[1])]: why for name, why in split.skipped}

    refused = read()
    assert sorted(refused) == sorted(paths[2:7])
    for path in (str(outside), "../outside.png", "imgs/escape.png", "/dev/zero"):
        assert "not inside the dataset's folder" in refused[path]
        assert "read it only with data.image_paths=any" in refused[path]
    assert "not a regular file" in refused["imgs/fifo.png"]  # and it did not wait for a writer
    anywhere = read(image_paths="any")
    # ../outside.png read from the dataset's folder; a device or a FIFO never, whatever is allowed
    assert sorted(anywhere) == ["/dev/zero", "imgs/fifo.png"]
    assert "not a regular file" in anywhere["/dev/zero"]
    capped = DataConfig(dataset=f"hf:{root / 'train.parquet'}", max_image_bytes=60)
    with pytest.raises(DataError, match=r"row 0 \(OSError: the cell's file 'imgs/0.png' is "
                       r"larger than data.max_image_bytes=60 allows\)"):  # fmt: skip
        open_hf(capped).dataset("train", mode="RGB")


def test_a_cells_path_is_text_of_bounded_length_and_shown_cut(
    tmp_path: Path, hf_cache: None
) -> None:
    """A cell's path with a NUL character was a ValueError traceback, and one of 10^7
    characters made 20 MB error lines: each is an unreadable image, named in a line of bounded
    length."""
    import pyarrow.parquet as pq

    from vitkit.config import DataConfig
    from vitkit.data.sources.hf import open_hf

    root = tmp_path / "ds"
    for k in range(4):
        save_image(root / "imgs" / f"{k}.png", k)
    paths = ["imgs/0.png", "imgs/\0.png", "imgs/1.png", "a/" * 5_000_000 + "x.png", "imgs/2.png"]
    paths.append("imgs/3.png")
    features = datasets.Features(
        {"image": datasets.Image(), "label": datasets.ClassLabel(names=["a", "b"])}
    )
    rows = datasets.Dataset.from_dict(
        {"image": paths, "label": [k % 2 for k in range(len(paths))]}, features=features
    )
    pq.write_table(rows.data.table, root / "train.parquet")
    spec = DataConfig(dataset=f"hf:{root / 'train.parquet'}")
    with pytest.warns(UserWarning) as caught:
        split = open_hf(spec).dataset("train", mode="RGB", max_bad_fraction=0.5)
    why = dict(split.skipped)
    assert sorted(why) == [f"{split.where} row 1", f"{split.where} row 3"]
    assert why[f"{split.where} row 1"] == (
        "OSError: the cell stores a NUL character in a path: 'imgs/\\x00.png'"
    )
    assert why[f"{split.where} row 3"].startswith(
        "OSError: the cell stores a path of 10,000,005 characters, more than 4,096: 'a/a/"
    )
    assert all(len(str(w.message)) < 800 for w in caught)


@pytest.mark.parametrize("column", ["image", "bytes"])
def test_a_rows_image_is_read_from_its_arrow_column_or_through_a_selection(
    tmp_path: Path, column: str
) -> None:
    """A row's cell is read straight from the table's Arrow column (a quarter of datasets' row
    formatting's cost): the same cells as datasets gives, for an ``Image`` feature and for a
    column of bytes; a table whose rows are a selection of another's (an indices mapping) is
    read through datasets, each row its own."""
    from vitkit.data.sources.cells import CellReader
    from vitkit.data.sources.hf import RowSource

    blobs = [save_image(tmp_path / f"{k}.png", k).read_bytes() for k in range(4)]
    feature = datasets.Image() if column == "image" else datasets.Value("binary")
    table = datasets.Dataset.from_dict(
        {column: blobs}, features=datasets.Features({column: feature})
    )
    if column == "image":
        table = table.cast_column(column, datasets.Image(decode=False))
    table.save_to_disk(str(tmp_path / "saved"))
    table = datasets.load_from_disk(str(tmp_path / "saved"))

    def source(rows: datasets.Dataset) -> RowSource:
        labels = np.zeros(len(rows), dtype=np.int64)
        cells = CellReader(tmp_path)
        return RowSource(rows, labels, where="t", classes=["a"], image_column=column, cells=cells)

    direct = source(table)
    assert direct._arrow is not None  # read from the column
    assert [direct.read(k) for k in range(4)] == blobs
    assert list(direct.read_all(range(4))) == blobs
    selected = source(table.select([2, 0, 3]))
    assert selected._arrow is None  # through datasets: its rows are a mapping
    assert [selected.read(k) for k in range(3)] == [blobs[2], blobs[0], blobs[3]]
