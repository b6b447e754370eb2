"""Datasets in shards: ``vitkit data pack`` writes an image folder as webdataset tar shards that
read back as the folder's images and labels; ``wds:DIR`` and ``hf:PATH`` (a ``save_to_disk``
folder, parquet files) train, resume exactly and evaluate through the command line; every user
error is one line. Streams are tested in test_stream.py, Hugging Face datasets' own rules in
test_hf_data.py. No test touches the Hub: every dataset here is made by the test."""

from __future__ import annotations

import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from helpers import file_size_limit, logged_metrics, one_line_error, stopped_copy, write_tar
from photos import CLASSES, SIZES, TINY, pixels, rows, same_weights, save_image
from vitkit import fit
from vitkit.cli import main
from vitkit.config import replace
from vitkit.data import ImageFolderDataset
from vitkit.data.run_data import build_data
from vitkit.data.sources.shards import WebDatasetShards, shard_layout
from vitkit.errors import ConfigError, DataError
from vitkit.recipes import get_recipe

datasets = pytest.importorskip("datasets")
pytestmark = pytest.mark.usefixtures("hf_cache")  # datasets' cache: the test's, not the user's


def _pairs(dataset) -> list[tuple[int, bytes]]:
    """(label, pixels) of every item, sorted: the same images and labels, whatever the order."""
    out = []
    for i in range(len(dataset)):
        image, label = dataset[i]
        out.append((label, bytes(image.numpy()) + bytes(str(tuple(image.shape)), "ascii")))
    return sorted(out)


# ------------------------------------------------------------------------------------ pack, wds


def test_pack_writes_shards_that_read_back_as_the_folder(photos: Path, shards: Path) -> None:
    layout = shard_layout(shards)
    assert [p.name for p in layout.splits["train"]] == [f"train-00000{i}.tar" for i in range(5)]
    assert [p.name for p in layout.splits["val"]] == ["val-000000.tar", "val-000001.tar"]
    assert (shards / "classes.txt").read_text() == "blue\ngreen\nred\n"
    assert not list(shards.glob(".*"))  # no partial file left beside the shards
    originals = {p.read_bytes() for p in photos.rglob("*.*")}
    for shard in layout.splits["train"]:
        with tarfile.open(shard) as tar:
            names = tar.getnames()
            keys = [n.partition(".")[0] for n in names[::2]]
            assert keys == sorted(set(keys))  # unique, sorted, image then label
            assert all(n.endswith(".cls") for n in names[1::2])
            for member in tar.getmembers()[::2]:  # the files' own bytes, not re-encoded
                assert tar.extractfile(member).read() in originals  # type: ignore[union-attr]
        assert len(names) == 2 * (7 if shard.name != "train-000004.tar" else 2)
    for split in SIZES:
        ours = WebDatasetShards(shards, split, mode=None)
        folder = ImageFolderDataset(photos, split, mode=None)
        assert ours.classes == list(CLASSES) and ours.mode == folder.mode == "RGB"
        assert _pairs(ours) == _pairs(folder)  # pixel for pixel, label for label
    grey = WebDatasetShards(shards, "val", mode="L")
    assert grey[0][0].shape == (1, 12, 14)


def test_an_interrupted_pack_leaves_no_shard_behind(tmp_path: Path) -> None:
    """``data pack`` stopped by a full disk (RLIMIT_FSIZE: EFBIG, as ENOSPC) left its first
    shards in the folder, and ``wds:`` read them without a word (it trained on 15 of 24 images).
    Now nothing of the pack is there: neither a new folder, nor a split added to a folder of
    shards, whose own shards stay as they were."""
    folder, out = tmp_path / "photos", tmp_path / "shards"
    for k in range(6):
        save_image(folder / "train" / "a" / f"{k}.png", k)
        save_image(folder / "val" / "a" / f"{k}.png", 10 + k)
    noise = np.random.default_rng(0).integers(0, 256, (128, 128, 3), dtype=np.uint8)
    Image.fromarray(noise).save(folder / "val" / "a" / "big.png")  # 49 KB: past the limit
    pack = [sys.executable, "-m", "vitkit", "data", "pack", str(folder)]
    assert (
        main(["data", "pack", str(folder), str(out), "--split", "train", "--shard-size", "1"]) == 0
    )
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    for target in (out, tmp_path / "new"):
        proc = subprocess.run(
            [*pack, str(target), "--split", "val", "--shard-size", "1"],
            capture_output=True, text=True, timeout=120, preexec_fn=file_size_limit(20_000),
        )  # fmt: skip
        assert proc.returncode == 2, proc.stderr
        assert re.fullmatch(
            rf"vitkit data: error: File too large: {re.escape(str(target))}/val-\d+\.tar\n",
            proc.stderr,
        )
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert not (tmp_path / "new").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["photos", "shards"]  # nothing hidden


def test_a_pack_stopped_by_sigterm_cleans_up_and_one_killed_is_named_by_the_next(
    tmp_path: Path,
) -> None:
    """SIGTERM's default action ended ``data pack`` where it stood: its hidden staging folder
    stayed, and later packs said nothing of it. SIGTERM now ends it as Ctrl-C does (status 143,
    nothing left); what a SIGKILL leaves is named by the next pack into the same folder."""
    import signal
    import time

    folder, out = tmp_path / "photos", tmp_path / "shards"
    for k in range(150):
        save_image(folder / "a" / f"{k}.png", k)
    pack = [sys.executable, "-m", "vitkit", "data", "pack", str(folder), str(out), "--shard-size"]

    def stopped_midway(signum: int) -> subprocess.Popen:
        proc = subprocess.Popen(  # its own process group, signalled whole: as timeout and Slurm do
            [*pack, "1"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
        )
        deadline = time.monotonic() + 60
        while not list(tmp_path.glob(".tmp-shards-*")):
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.002)
        os.killpg(proc.pid, signum)
        proc.wait(timeout=60)
        return proc

    proc = stopped_midway(signal.SIGTERM)
    assert proc.returncode == 128 + signal.SIGTERM, proc.stderr.read() if proc.stderr else ""
    assert sorted(p.name for p in tmp_path.iterdir()) == ["photos"]  # nothing hidden left
    assert stopped_midway(signal.SIGKILL).returncode == -signal.SIGKILL
    (left,) = tmp_path.glob(".tmp-shards-*")
    done = subprocess.run([*pack, "100"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (
        f"vitkit: warning: {left} is what an earlier data pack stopped midway left: delete it "
        "once no other pack into the same folder runs\n"
    ) in done.stderr


def test_a_tree_packed_as_one_split_and_keys_classes_without_a_classes_file(
    photos: Path, tmp_path: Path, capsys
) -> None:
    assert main(["data", "pack", str(photos / "val"), str(tmp_path), "--shard-size", "100",
                 "--split", "val", "--seed", "3"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "val: 9 images in 1 shard, val-000000.tar .. val-000000.tar" in out
    assert [p.name for p in tmp_path.glob("*.tar")] == ["val-000000.tar"]
    # shards named by no split are all train; without classes.txt the labels name the classes
    (tmp_path / "val-000000.tar").rename(tmp_path / "part-a.tar")
    (tmp_path / "classes.txt").unlink()
    layout = shard_layout(tmp_path)
    assert list(layout.splits) == ["train"] and not layout.named
    assert WebDatasetShards(tmp_path, "train").classes == ["0", "1", "2"]


def test_every_source_gives_each_images_own_name_as_its_key(
    photos: Path, shards: Path, hf_data: dict[str, Path], tmp_path: Path
) -> None:
    """``key_of``: a folder's file below its split's folder, a shard's sample key, a table's
    stored path (None where it stores bytes alone), in the container's order, past the images
    verification skipped and through a subset."""
    from vitkit.config import DataConfig
    from vitkit.data.sources.hf import open_hf

    folder = ImageFolderDataset(photos, "val")
    assert [folder.key_of(i) for i in range(len(folder))] == [
        path.relative_to(photos / "val").as_posix() for path, _ in folder.samples
    ]
    ours = WebDatasetShards(shards, "val")
    members = []
    for shard in shard_layout(shards).splits["val"]:
        with tarfile.open(shard) as tar:
            members += [n.partition(".")[0] for n in tar.getnames() if not n.endswith(".cls")]
    assert [ours.key_of(i) for i in range(len(ours))] == members
    assert ours.subset([2, 0]).key_of(0) == members[2]

    bytes_only = open_hf(DataConfig(dataset=f"hf:{hf_data['saved']}")).dataset("val", mode="RGB")
    assert {bytes_only.key_of(i) for i in range(len(bytes_only))} == {None}
    table = rows(ImageFolderDataset(photos, "test"))
    table["image"] = [
        {"bytes": cell["bytes"], "path": f"images/{i}.png" if i != 4 else None}
        for i, cell in enumerate(table["image"])
    ]
    features = datasets.Features(
        {"image": datasets.Image(), "label": datasets.ClassLabel(names=list(CLASSES))}
    )
    table = datasets.Dataset.from_dict(table, features=features)
    table.select([3, 4, 5]).save_to_disk(tmp_path / "paths")  # an index mapping, kept
    paths = open_hf(DataConfig(dataset=f"hf:{tmp_path / 'paths'}")).dataset("train", mode="RGB")
    # save_to_disk keeps a cell's path as the file's name (datasets' Image.embed_storage)
    assert [paths.key_of(i) for i in range(3)] == ["3.png", None, "5.png"]


def test_classnames_txt_beside_shards_names_the_classes_as_the_clip_benchmark_lays_them_out(
    shards: Path, tmp_path: Path
) -> None:
    """The CLIP benchmark's webdataset layout: DIR/classnames.txt, DIR/test/0.tar; classes.txt
    and classes.json come first when one is there too."""
    clip = tmp_path / "clip"
    (clip / "test").mkdir(parents=True)
    (clip / "train").mkdir()
    (clip / "test" / "0.tar").write_bytes((shards / "val-000000.tar").read_bytes())
    (clip / "train" / "0.tar").write_bytes((shards / "train-000000.tar").read_bytes())
    (clip / "classnames.txt").write_text("azure\nlime\ncrimson\n")
    assert WebDatasetShards(clip, "test", verify="none").classes == ["azure", "lime", "crimson"]
    (clip / "classes.json").write_text('["b", "g", "r"]')
    assert WebDatasetShards(clip, "test", verify="none").classes == ["b", "g", "r"]
    # not UTF-8, or JSON nested past Python's recursion: one line each (they were tracebacks)
    (clip / "classes.json").write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(DataError, match=r"classes.json is not JSON .*expected a list of class"):
        WebDatasetShards(clip, "test", verify="none")
    (clip / "classes.txt").write_bytes(b"azure\ncaf\xe9\n")
    with pytest.raises(DataError, match=r"classes.txt:2: the byte 0xe9 is not UTF-8: expected one"):
        WebDatasetShards(clip, "test", verify="none")


def test_the_split_of_a_shard_is_a_word_of_its_name(tmp_path: Path) -> None:
    for name in ("train-000000.tar", "imagenet-train-0001.tar", "in1k_validation_0.tar",
                 "test/0000.tar", ".hidden-val.tar", "test-notes.txt"):  # fmt: skip
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    layout = shard_layout(tmp_path)
    assert {
        k: [p.relative_to(tmp_path).as_posix() for p in v] for k, v in layout.splits.items()
    } == {
        "train": ["imagenet-train-0001.tar", "train-000000.tar"],
        "val": ["in1k_validation_0.tar"],
        "test": ["test/0000.tar"],
    }
    (tmp_path / "extra-0.tar").write_bytes(b"")
    with pytest.raises(DataError, match=r"mixes shards named by split .* \(extra-0.tar\)"):
        shard_layout(tmp_path)
    (tmp_path / "extra-0.tar").rename(tmp_path / "train-val-0.tar")
    with pytest.raises(DataError, match=r"names the splits \['train', 'val'\]"):
        shard_layout(tmp_path)


def test_an_unreadable_sample_is_skipped_and_named(shards: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad"
    bad.mkdir()
    with (
        tarfile.open(shards / "test-000000.tar") as src,
        tarfile.open(bad / "test-000000.tar", "w") as dst,
    ):
        for member in src.getmembers():
            data = src.extractfile(member).read()  # type: ignore[union-attr]
            if member.name.startswith("00000002.") and not member.name.endswith(".cls"):
                data = b"\x89PNG\r\n\x1a\nnot an image"
            member.size = len(data)
            dst.addfile(member, io.BytesIO(data))
    for name in ("train-000000.tar", "test-000001.tar", "classes.txt"):
        (bad / name).write_bytes((shards / name).read_bytes())
    with pytest.warns(UserWarning, match=r"test-000000.tar:00000002"):
        test = WebDatasetShards(bad, "test", max_bad_fraction=0.2)
    assert len(test) == 8 and test.skipped[0][0].endswith("test-000000.tar:00000002")
    with pytest.raises(DataError, match=r"1 of 9 images .* unreadable, more than"):
        WebDatasetShards(bad, "test", max_bad_fraction=0.1)


@pytest.mark.parametrize("kind", ["wds", "hf"])
def test_data_verify_none_opens_no_image_and_needs_the_channels(
    kind: str, shards: Path, hf_data: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = f"wds:{shards}" if kind == "wds" else f"hf:{hf_data['saved']}"
    opened: list[object] = []
    open_ = Image.open
    monkeypatch.setattr(Image, "open", lambda *a, **k: opened.append(a) or open_(*a, **k))
    for level, in_chans in (("full", None), ("none", 3)):
        opened.clear()
        run = replace(get_recipe("smoke"), {"data.dataset": spec, "data.verify": level})
        data = build_data(run.data, run.model, seed=0, in_chans=in_chans)
        assert len(data.train) > 0 and (len(opened) > 0) == (level == "full")
    with pytest.raises(ConfigError, match=r"data\.verify=none opens no image"):
        build_data(run.data, run.model, seed=0, in_chans=None)


# ------------------------------------------------------------------------------------ training


@pytest.mark.parametrize("kind", ["wds", "saved", "parquet"])
def test_train_eval_fewshot_inspect_finetune_from_the_command_line(
    kind: str, shards: Path, hf_data: dict[str, Path], tmp_path: Path, capsys
) -> None:
    spec = f"wds:{shards}" if kind == "wds" else f"hf:{hf_data[kind]}"
    run_dir = tmp_path / "run"
    assert main(["train", "--data", spec, *TINY, "--set", "train.duration=2st",
                 "--set", "train.batch_size=8", "--run-dir", str(run_dir), "--no-progress"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    val, test = ("val shards", "test shards") if kind == "wds" else ("val split", "test split")
    assert (
        f"{spec}: 30 training images; validation: {val} (9 images); test: {test} (9 images); 3 classes"
        in out
    )
    assert "3 channels: " in out  # decided by the data: the images are in colour
    records = logged_metrics(run_dir)
    assert [r["step"] for r in records if r.get("split") == "val"] == [1, 2]
    assert records[-1]["split"] == "test" and "accuracy" in records[-1]
    root = shards if kind == "wds" else spec  # a Hub name would be bare: hf: says what it is
    best = str(run_dir / "best")
    for argv in (["eval", best], ["eval", best, "--data", spec]):
        assert main(argv) == 0
        out = capsys.readouterr().out
        assert f"on {root}: {test} (9 images)" in out and "top-1 " in out
    assert main(["fewshot", best, "--data", spec, "--shots", "1,2", "--seeds", "1"]) == 0
    assert "2-shot" in capsys.readouterr().out
    assert main(["inspect", best, "--data", spec, "--out", str(tmp_path / "page"),
                 "--num-images", "6", "--max-maps", "2"]) == 0  # fmt: skip
    assert (tmp_path / "page" / "index.html").is_file()
    assert main(["finetune", "--init-from", best, "--data", spec, "--set", "train.duration=1st",
                 "--set", "model.image_size=24", "--run-dir", str(tmp_path / "ft"),
                 "--no-progress"]) == 0  # fmt: skip
    assert (tmp_path / "ft" / "best").is_dir()


def test_a_killed_run_on_shards_resumes_as_if_never_stopped(shards: Path, tmp_path: Path) -> None:
    run = replace(
        get_recipe("smoke"),
        {"data.dataset": f"wds:{shards}", "model.num_classes": 3, "train.device": "cpu",
         "train.duration": "6st", "train.batch_size": 8, "train.save_every": "2st",
         "train.eval_every": "3st", "train.log_every": "1st", "data.flip": True, "train.keep_last": 3,
         "data.inception_crop": True, "model.dropout_rate": 0.1},
    )  # fmt: skip
    full = tmp_path / "full"
    fit(run, run_dir=full, progress=False)
    resumed = stopped_copy(full, tmp_path / "resumed", step=4)  # mid-epoch: 3 steps an epoch
    fit(run, run_dir=resumed, progress=False)
    assert logged_metrics(resumed) == logged_metrics(full) and len(logged_metrics(full)) == 9
    same_weights(full / "checkpoints" / "step_00000006", resumed / "checkpoints" / "step_00000006")


# ------------------------------------------------------------------------------------ streaming


# ------------------------------------------------------------------------------------ errors


def test_a_sample_with_two_images_or_labels_or_no_image_is_refused(tmp_path: Path) -> None:
    """A key twice (two labels, or two images) was merged into one sample, which of them used
    unsaid; a label without an image of ours (KEY.pgm, an image stored as a link) was left out
    unsaid. Each is one line naming the sample."""
    from vitkit.data.sources.shards import index_shard

    png = b"listing reads headers only"

    def shard(name: str, members: list[tuple[str, bytes | None]]) -> Path:
        path = tmp_path / f"{name}.tar"
        with tarfile.open(path, "w") as tar:
            for member, data in members:
                info = tarfile.TarInfo(member)
                if data is None:  # a link
                    info.type, info.linkname = tarfile.SYMTYPE, "elsewhere.png"
                    tar.addfile(info)
                    continue
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        return path

    for name, members, said in [
        ("labels", [("a.png", png), ("a.cls", b"0"), ("a.cls", b"1")], "'a' has two labels"),
        ("images", [("a.png", png), ("a.jpg", png), ("a.cls", b"0")], "'a' has two images (a.png"),
        ("pgm", [("a.png", png), ("a.cls", b"0"), ("b.pgm", png), ("b.cls", b"1")], "'b' has a"),
        ("link", [("b.png", None), ("b.cls", b"1"), ("a.png", png), ("a.cls", b"0")], "'b' has a"),
    ]:
        with pytest.raises(DataError, match=re.escape(f"{name}.tar: sample {said}")):
            index_shard(shard(name, members))
    assert index_shard(shard("whole", [("a.png", png), ("a.cls", b"0")])).keys == ("a",)


def test_every_user_error_is_one_line(
    shards: Path, hf_data: dict[str, Path], tmp_path: Path, capsys
) -> None:
    run = ["train", *TINY, "--set", "train.duration=1st", "--run-dir", str(tmp_path / "r")]
    empty = tmp_path / "empty"
    empty.mkdir()
    one_line_error(capsys, [*run, "--data", f"wds:{empty}"], "holds no .tar shards")
    one_line_error(capsys, [*run, "--data", f"wds:{tmp_path / 'nowhere'}"], "not found")
    unlabelled = tmp_path / "unlabelled"
    unlabelled.mkdir()
    with tarfile.open(unlabelled / "train-0.tar", "w") as tar:
        data = (shards / "classes.txt").read_bytes()
        info = tarfile.TarInfo("a.png")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    one_line_error(capsys, [*run, "--data", f"wds:{unlabelled}"], "sample 'a' has no a.cls")
    saved = f"hf:{hf_data['saved']}"
    one_line_error(capsys, [*run, "--data", saved, "--set", "data.image_column=img"],
                    "has no column 'img' (data.image_column): its columns are image, label")  # fmt: skip
    one_line_error(capsys, [*run, "--data", saved, "--set", "data.label_column=y"],
                    "has no column 'y' (data.label_column)")  # fmt: skip
    one_line_error(capsys, [*run, "--data", f"hf:{tmp_path}/none-*.parquet"], "not found")
    one_line_error(capsys, [*run, "--data", saved, "--set", "data.streaming=true"],
                    "is a save_to_disk folder")  # fmt: skip
    one_line_error(capsys, [*run, "--data", f"wds:{shards}", "--set", "data.streaming=true"],
                    "data.streaming=True is not valid")  # fmt: skip
    # an unknown split: a dataset without train, shards asked for a split they lack
    odd = tmp_path / "odd"
    datasets.DatasetDict(
        {"extra": datasets.load_from_disk(str(hf_data["saved"]))["test"]}
    ).save_to_disk(odd)
    one_line_error(
        capsys, [*run, "--data", f"hf:{odd}"], "has the splits ['extra'] and no train split"
    )
    with pytest.raises(DataError, match=r"has no holdout shards \(expected holdout-\*.tar\)"):
        WebDatasetShards(shards, "holdout")
    train_only = tmp_path / "train-only"
    train_only.mkdir()
    (train_only / "train-000000.tar").write_bytes((shards / "train-000000.tar").read_bytes())
    (train_only / "classes.txt").write_bytes((shards / "classes.txt").read_bytes())
    best = tmp_path / "r2"
    assert main(["train", "--data", f"wds:{shards}", *TINY, "--set", "train.duration=1st",
                 "--run-dir", str(best), "--no-progress"]) == 0  # fmt: skip
    capsys.readouterr()
    one_line_error(capsys, ["eval", str(best / "best"), "--data", f"wds:{train_only}"],
                    "has only train shards: give the data to evaluate")  # fmt: skip
    one_line_error(capsys, ["data", "pack", str(tmp_path / "nowhere"), str(tmp_path / "o"),
                             "--shard-size", "2"], "not found")  # fmt: skip
    one_line_error(capsys, ["data", "pack", str(hf_data["saved"]), str(shards), "--shard-size", "0"],
                    "--shard-size 0")  # fmt: skip


def test_a_cut_shard_and_a_hostile_label_are_one_line_errors(
    shards: Path, tmp_path: Path, hf_cache: None
) -> None:
    """Shards and tables are untrusted: a shard cut at a member's end (an interrupted copy) was
    read as a shorter one without a word; a label of 999999999999 in a 10 KB shard, or an
    integer label of 10^12 in a table, sized a list of 10^12 class names (MemoryError or the
    OOM killer); a 30-digit one was an OverflowError; Arabic-Indic digits were read as ASCII."""
    whole = (shards / "train-000000.tar").read_bytes()
    with tarfile.open(shards / "train-000000.tar") as tar:
        members = tar.getmembers()  # (image, label) a sample
    last = members[-3]  # the cut drops the last sample whole
    assert last.name.endswith(".cls") and members[-1].name.endswith(".cls")
    cut = tmp_path / "cut"
    cut.mkdir()
    end = last.offset_data + -(-last.size // 512) * 512
    (cut / "train-000000.tar").write_bytes(whole[:end])
    with pytest.raises(DataError, match=r"train-000000.tar is truncated: its [\d,]+ bytes end"):
        WebDatasetShards(cut, "train")

    png = (shards / "train-000000.tar").read_bytes()[512:600]  # bytes enough: never decoded
    for label, why in [
        ("999999999999", "holds the label 999999999999: expected a class index below 1,048,576"),
        ("9" * 30, f"holds the label {'9' * 30}: expected a class index below"),
        ("\u0663", "holds '\u0663': expected the label, an integer >= 0 as text"),
    ]:
        hostile = write_tar(tmp_path / f"h{len(label)}" / "train-0.tar",
                         {"a.png": png, "a.cls": label.encode()})  # fmt: skip
        with pytest.raises(DataError, match=rf"a\.cls {why}"):
            WebDatasetShards(hostile.parent, "train", verify="none")

    named = write_tar(tmp_path / "named" / "train-0.tar", {"a.png": png, "a.cls": b"3"})
    (named.parent / "classes.txt").write_text("cat\ndog\n")
    with pytest.raises(DataError, match=r"train-0.tar: a.cls holds the label 3, and the classes "
                       r"file of .* names 2: expected labels from 0 to 1"):  # fmt: skip
        WebDatasetShards(named.parent, "train", verify="none")

    from vitkit.config import DataConfig
    from vitkit.data.sources.hf import open_hf

    table = datasets.Dataset.from_dict({"image": [png, png], "label": [0, 10**12]})
    table.to_parquet(tmp_path / "big-label.parquet")
    with pytest.raises(DataError, match=r"train split holds the label 1000000000000: expected"):
        open_hf(DataConfig(dataset=f"hf:{tmp_path / 'big-label.parquet'}"))


@pytest.mark.parametrize("kind", [tarfile.XHDTYPE, tarfile.GNUTYPE_LONGNAME], ids=["pax", "gnu"])
def test_an_extended_header_claiming_a_terabyte_is_a_corrupt_shard(
    tmp_path: Path, kind: bytes
) -> None:
    """tarfile reads a pax or GNU long-name header whole, at the size it claims: a shard
    claiming gigabytes was read into memory (and the line said to raise the memory). One above
    MAX_EXTENDED_HEADER is refused before it is read; a real one (a long name) reads."""
    from vitkit.data.sources.shards import index_shard

    key = "k" * 150  # beyond ustar's 100 characters: written with a pax header
    named = write_tar(tmp_path / "long" / "train-0.tar", {f"{key}.png": b"x", f"{key}.cls": b"0"})
    assert index_shard(named).keys == (key,)

    header = tarfile.TarInfo("././@PaxHeader" if kind == tarfile.XHDTYPE else "././@LongLink")
    header.type, header.size = kind, 2**40
    hostile = tmp_path / "hostile" / "train-0.tar"
    hostile.parent.mkdir()
    hostile.write_bytes(header.tobuf(format=tarfile.GNU_FORMAT) + named.read_bytes())
    with pytest.raises(DataError) as err:
        WebDatasetShards(hostile.parent, "train", verify="none")
    assert str(err.value) == (
        f"shard {hostile} is corrupt: an extended header (pax or GNU long name) at byte 0 claims "
        "1,099,511,627,776 bytes, expected at most 1,048,576: copy it again or pack it again"
    )


def test_class_names_longer_than_a_thousand_characters_are_refused(
    tmp_path: Path, hf_cache: None
) -> None:
    """Class names from a label column of text (or a ClassLabel) are bounded as a checkpoint's
    are when it is read (io/metadata.py), so a run never writes names it cannot read back."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from vitkit.config import DataConfig
    from vitkit.data.sources.hf import open_hf

    buffer = io.BytesIO()
    Image.fromarray(pixels(0, 0)).save(buffer, "PNG")
    names = ["cat", "x" * 1001]
    table = pa.table({"image": [buffer.getvalue()] * 2, "label": names})
    pq.write_table(table, tmp_path / "train.parquet")
    with pytest.raises(DataError, match=r"train.parquet: class 1's name has 1,001 characters "
                       r"\('x{20}'...\(961 characters\)...'x{20}'\): expected at most 1,000$"):  # fmt: skip
        open_hf(DataConfig(dataset=f"hf:{tmp_path / 'train.parquet'}"))
    shards = tmp_path / "shards"  # and a shards' classes file
    write_tar(shards / "train-000000.tar", {"0.png": buffer.getvalue(), "0.cls": b"0"})
    (shards / "classes.txt").write_text("\n".join(names) + "\n")
    with pytest.raises(DataError, match=r"classes.txt: class 1's name has 1,001 characters"):
        WebDatasetShards(shards, "train")


def test_a_shard_member_beyond_the_byte_bound_is_skipped_and_named(tmp_path: Path) -> None:
    """``data.max_image_bytes`` holds for a shard's members as for files: a larger member is
    not read, and is unreadable, skipped and named."""
    rng = np.random.default_rng(0)
    images = []
    for side in (4, 32, 4, 4):  # the second far larger than the others
        buffer = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (side, side, 3), dtype=np.uint8)).save(buffer, "PNG")
        images.append(buffer.getvalue())
    members = {}
    for k, data in enumerate(images):
        members |= {f"{k}.png": data, f"{k}.cls": str(k % 2).encode()}
    write_tar(tmp_path / "train-000000.tar", members)
    bound = max(len(images[k]) for k in (0, 2, 3))
    with pytest.warns(UserWarning, match="skipping unreadable image"):
        shards = WebDatasetShards(tmp_path, "train", max_image_bytes=bound, max_bad_fraction=0.5)
    assert shards.skipped == [
        (
            f"{tmp_path / 'train-000000.tar'}:1",
            f"TooLargeError: {len(images[1]):,} bytes, larger than data.max_image_bytes="
            f"{bound:,} allows",
        )
    ]
    assert len(WebDatasetShards(tmp_path, "train")) == 4  # under the default bound


@pytest.mark.filterwarnings("ignore::PIL.Image.DecompressionBombWarning")  # its claimed size
def test_a_folder_and_its_shards_refuse_the_same_truncated_jpeg(tmp_path: Path) -> None:
    """A truncated JPEG whose header claims 12000 x 12000: simplejpeg refused it in a folder, PIL
    decoded 432 MB of it (with a warning) from the same bytes packed into a shard, so the two
    trained on different images. One decoder now reads both, and both refuse it alike. (Its
    header claims 8000 x 8000 here, as many pixels as data.max_image_pixels allows, which
    verification refuses above.)"""
    root = tmp_path / "photos"
    for k in range(3):
        save_image(root / "a" / f"{k}.png", k)
    buffer = io.BytesIO()
    Image.fromarray(pixels(0, 5)).save(buffer, "JPEG", quality=90)
    claimed = bytearray(buffer.getvalue())
    sof = claimed.index(b"\xff\xc0")  # the frame header: height, then width
    claimed[sof + 5 : sof + 9] = (8000).to_bytes(2, "big") * 2
    (root / "a/big.jpg").write_bytes(bytes(claimed))
    assert main(["data", "pack", str(root), str(tmp_path / "shards"), "--shard-size", "9"]) == 0

    def items(dataset) -> list[bytes]:
        with pytest.warns(UserWarning, match=r"failed to decode \(ValueError: Corrupt JPEG"):
            return [dataset[i][0].numpy().tobytes() for i in range(len(dataset))]

    folder = ImageFolderDataset(root, None, max_bad_fraction=0.5)
    shards = WebDatasetShards(tmp_path / "shards", "train", max_bad_fraction=0.5)
    assert len(folder) == len(shards) == 4
    # the three good images in both (a replacement is the next image, in each one's order)
    seen = set(items(folder))
    assert seen == set(items(shards)) and len(seen) == 3


def test_test_shards_alone_are_evaluated_with_their_classnames_but_not_trained_on(
    shards: Path, tmp_path: Path
) -> None:
    """The CLIP benchmark's layout: ``DIR/test/*.tar`` beside ``DIR/classnames.txt`` and no
    train shards: evaluated whole with those names (no few-shot training images); training on
    it is one line saying that train shards are missing."""
    from vitkit.config import DataConfig, ModelConfig
    from vitkit.data.run_data import evaluation_split

    bench = tmp_path / "bench"
    (bench / "test").mkdir(parents=True)
    for tar in sorted(shards.glob("test-*.tar")):
        shutil.copy(tar, bench / "test" / tar.name.replace("test-", ""))
    names = (shards / "classes.txt").read_text().splitlines()
    (bench / "classnames.txt").write_text("".join(f"a photo's {n}\n" for n in names))
    model = ModelConfig(
        image_size=16, patch_size=8, hidden_size=16, num_layers=1, num_heads=2, mlp_dim=32,
        num_classes=len(names),
    )  # fmt: skip
    split = evaluation_split(f"wds:{bench}", None, model, source="ckpt")
    assert split.classes == [f"a photo's {n}" for n in names] and split.train is None
    assert len(split.dataset) == SIZES["test"] * len(names)
    with pytest.raises(DataError, match=r"has no train shards \(expected train-\*\.tar\); it has"):
        build_data(DataConfig(dataset=f"wds:{bench}"), model, seed=0, in_chans=3)
