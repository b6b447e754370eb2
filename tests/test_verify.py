"""vitkit.data.verify: the verification cache (a hit opens no image, any change misses), the pass
split across processes (the serial pass's findings, index for index), processes that construct
one dataset at once (one pass), and the cheap levels ('header', 'none').

Every image is a real file of a few pixels written by PIL into tmp_path; ``$VITKIT_HOME`` is a
fresh folder in each test, so the cache starts empty.
"""

from __future__ import annotations

import io
import json
import multiprocessing
import os
import warnings
from pathlib import Path

import pytest
from PIL import Image

from helpers import colour_image, grey_image, in_a_child, save_image_to, write_tar
from vitkit.data import ImageFolderDataset, UnreadableImageWarning, verify_image_folder
from vitkit.data import verify as vf
from vitkit.errors import ConfigError


@pytest.fixture
def opens(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The files PIL opens (``Image.open``), by name."""
    seen: list[str] = []
    open_ = Image.open

    def counting_open(fp, *args, **kwargs):  # type: ignore[no-untyped-def]
        seen.append(Path(str(fp)).name if isinstance(fp, str | os.PathLike) else "<bytes>")
        return open_(fp, *args, **kwargs)

    monkeypatch.setattr(Image, "open", counting_open)
    return seen


def _truncated_jpeg(seed: int) -> bytes:
    """A grey JPEG stored as RGB cut inside its scan: verify() passes, decoding fails."""
    buffer = io.BytesIO()
    grey_image(seed, (32, 32)).convert("RGB").save(buffer, "JPEG")
    data = buffer.getvalue()
    return data[: data.index(b"\xff\xda") + 40]


def _mixed(root: Path) -> Path:
    """A tree for the channel decision: grey images (stored as L and as RGB), unreadable files,
    truncated JPEGs before and after the first colour image, then colour and grey mixed."""
    for k in range(6):
        save_image_to(root / f"a/{k:02d}.png", grey_image(k).convert("RGB" if k % 2 else "L"))
    (root / "a/06.png").write_bytes(b"garbage")  # fails verify()
    (root / "a/07.jpg").write_bytes(_truncated_jpeg(7))  # fails decoding: before the colour one
    for k in range(8, 12):
        save_image_to(root / f"a/{k:02d}.png", grey_image(k).convert("RGB"))
    save_image_to(root / "b/12.png", colour_image(12))  # the first colour image
    for k in range(13, 30):
        if k in (15, 23):
            (root / f"b/{k}.jpg").write_bytes(_truncated_jpeg(k))  # after it: never decoded
        elif k == 20:
            (root / f"b/{k}.png").write_bytes(b"also garbage")
        else:
            save_image_to(
                root / f"b/{k}.png", grey_image(k).convert("RGB") if k % 3 else colour_image(k)
            )
    return root


def _outcome(ds: ImageFolderDataset) -> tuple:
    return ds.samples, ds.skipped, ds.mode, ds.channels_reason, ds.labels.tolist()


def _quiet(*args, **kwargs) -> ImageFolderDataset:  # type: ignore[no-untyped-def]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnreadableImageWarning)
        return ImageFolderDataset(*args, **kwargs)


# ---------------------------------------------------------------- the cache


def test_a_second_construction_reads_the_cache_and_opens_no_image(
    tmp_path: Path, home: Path, opens: list[str]
) -> None:
    root = _mixed(tmp_path / "data")
    first = _quiet(root, None, mode=None, max_bad_fraction=0.2)
    assert len(opens) >= 30 and not first.verified_cached
    assert first.verified_from is not None and first.verified_from.parent == home / "verified"
    opens.clear()
    with pytest.warns(UnreadableImageWarning) as caught:
        second = ImageFolderDataset(root, None, mode=None, max_bad_fraction=0.2)
    assert opens == [] and second.verified_cached and second.verified_from == first.verified_from
    assert _outcome(second) == _outcome(first)
    warned = [w for w in caught if w.category is UnreadableImageWarning]
    assert len(warned) == len(first.skipped) == 3  # the warnings are the same as after a pass
    entry = json.loads(first.verified_from.read_text())
    assert entry["source"] == str(root.resolve()) and entry["records"] == 30
    assert [s[:2] for s in entry["skipped"]] == [[6, "verify"], [7, "decode"], [20, "verify"]]
    assert entry["colour"] == [12, "RGB"] and entry["decided"] is True


def test_names_that_are_not_utf8_are_listed_verified_and_cached(
    tmp_path: Path, opens: list[str]
) -> None:
    root = tmp_path / "data"
    save_image_to(root / "b/0.png", colour_image(0))
    (root / "a").mkdir()
    buffer = io.BytesIO()
    colour_image(1).save(buffer, "PNG")
    with open(os.fsencode(root / "a") + b"/\xff\xfe.png", "wb") as f:  # Latin-1 bytes, not UTF-8
        f.write(buffer.getvalue())
    first = ImageFolderDataset(root, None, mode=None)
    assert len(first) == 2 and not first.verified_cached and first.verified_from is not None
    opens.clear()
    second = ImageFolderDataset(root, None, mode=None)
    assert opens == [] and second.verified_cached and _outcome(second) == _outcome(first)
    assert second[0][0].shape == (3, 6, 5)  # the odd name still opens


# constructs the folder's dataset, with the cache, as a user without root's right to read any file
AS_A_USER = """
import json, sys, warnings
from vitkit.data import ImageFolderDataset
warnings.simplefilter("ignore")
ds = ImageFolderDataset(sys.argv[1], None, mode=None, max_bad_fraction=0.5)
print(json.dumps([len(ds), ds.verified_cached, [why for _, why in ds.skipped]]))
"""


def test_a_file_that_could_not_be_read_is_read_again_once_its_permission_is_back(
    tmp_path: Path, home: Path
) -> None:
    """A file refused by its permission (``chmod 000``) was cached as unreadable under a key of
    sizes and times, which ``chmod`` changes neither: fixed, it went on being skipped, and eval
    refused the folder naming a PermissionError root could not have. Such an entry is used only
    while the file still cannot be read. Run as a user (root loses its right to read any file)."""
    root = tmp_path / "data"
    for k in range(4):
        save_image_to(root / f"{'ab'[k % 2]}/{k}.png", colour_image(k))

    def as_a_user() -> list:
        return in_a_child(AS_A_USER, str(root), as_a_user=True)

    (root / "a/0.png").chmod(0)
    assert as_a_user() == [3, False, ["PermissionError: [Errno 13] Permission denied: "
                                      f"'{root / 'a/0.png'}'"]]  # fmt: skip
    assert as_a_user()[:2] == [3, True]  # still unreadable: the entry holds
    (root / "a/0.png").chmod(0o644)
    assert as_a_user() == [4, False, []]  # read again, not skipped
    assert as_a_user() == [4, True, []]


@pytest.mark.parametrize("change", ["touch", "rewrite", "add", "remove", "rename"])
def test_a_changed_folder_misses_and_verifies_again(
    tmp_path: Path, opens: list[str], change: str
) -> None:
    root = tmp_path / "data"
    for k in range(4):
        save_image_to(root / f"a/{k}.png", grey_image(k))
    first = ImageFolderDataset(root, None)
    target = root / "a/2.png"
    if change == "touch":
        st = target.stat()
        os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns + 1))  # 1 ns later, same bytes
    elif change == "rewrite":  # a broken file of the same size and modification time
        st = target.stat()
        target.write_bytes(b"x" * st.st_size)
        os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    elif change == "add":
        save_image_to(root / "a/9.png", grey_image(9))
    elif change == "remove":
        target.unlink()
    else:
        target.rename(root / "a/2b.png")
    opens.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnreadableImageWarning)
        second = ImageFolderDataset(root, None, max_bad_fraction=0.5)
    if change == "rewrite":  # size and time unchanged: the key cannot see it (module docstring)
        assert second.verified_cached and opens == []
        return
    assert not second.verified_cached and len(opens) == len(second.samples)
    assert second.verified_from == first.verified_from  # the entry is replaced, not added to
    assert [p.name for p in (first.verified_from.parent).glob("*.json")] == [
        first.verified_from.name
    ]
    third = ImageFolderDataset(root, None)
    assert third.verified_cached and third.samples == second.samples


def test_an_entry_that_decided_serves_a_given_mode_but_not_the_other_way(
    tmp_path: Path, opens: list[str]
) -> None:
    root = _mixed(tmp_path / "data")
    given = _quiet(root, None, mode="RGB", max_bad_fraction=0.2, verify_cache=False)
    assert [Path(p).name for p, _ in given.skipped] == ["06.png", "20.png"]  # nothing was decoded
    _quiet(root, None, mode=None, max_bad_fraction=0.2)  # writes an entry that decided
    opens.clear()
    served = _quiet(root, None, mode="RGB", max_bad_fraction=0.2)
    assert served.verified_cached and opens == []
    assert _outcome(served) == _outcome(given)  # 07.jpg, found only by decoding, is kept
    other = tmp_path / "other"
    for k in range(3):
        save_image_to(other / f"a/{k}.png", grey_image(k).convert("RGB"))
    _quiet(other, None, mode="L")  # an entry that did not decide
    opens.clear()
    decided = ImageFolderDataset(other, None, mode=None)
    assert not decided.verified_cached and decided.mode == "L" and opens
    assert ImageFolderDataset(other, None, mode=None).verified_cached


def test_levels_have_their_own_entries_and_no_cache_means_none(
    tmp_path: Path, home: Path, opens: list[str]
) -> None:
    root = tmp_path / "data"
    for k in range(3):
        save_image_to(root / f"a/{k}.png", grey_image(k))
    full = ImageFolderDataset(root, None, verify="full")
    header = ImageFolderDataset(root, None, verify="header")
    assert not header.verified_cached and full.verified_from != header.verified_from
    assert full.verified_from.name.endswith("-full.json")
    assert header.verified_from.name.endswith("-header.json")
    opens.clear()
    uncached = ImageFolderDataset(root, None, verify_cache=False)
    assert uncached.verified_from is None and not uncached.verified_cached and len(opens) == 3
    assert sorted(p.suffix for p in (home / "verified").iterdir()) == [
        ".json",
        ".json",
        ".lock",
        ".lock",
    ]


def test_a_malformed_entry_is_verified_again_and_replaced(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "data"
    for k in range(3):
        save_image_to(root / f"a/{k}.png", grey_image(k))
    entry = ImageFolderDataset(root, None).verified_from
    assert entry is not None
    for text in ("{not json", json.dumps({"format": 1}), "[]"):
        entry.write_text(text)
        ds = ImageFolderDataset(root, None)
        assert not ds.verified_cached and len(ds) == 3
        assert json.loads(entry.read_text())["records"] == 3
    assert "ignoring the unreadable verification cache" in caplog.text


def test_an_unwritable_home_verifies_without_a_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "file").write_text("a file where the cache folder would be")
    monkeypatch.setenv("VITKIT_HOME", str(tmp_path / "file"))
    save_image_to(tmp_path / "data/a/0.png", grey_image(0))
    ds = ImageFolderDataset(tmp_path / "data", None)
    assert len(ds) == 1 and ds.verified_from is None and "cannot cache" in caplog.text


# ---------------------------------------------------------------- in parallel


def test_summarise_replays_the_serial_pass_over_any_chunking(tmp_path: Path) -> None:
    root = _mixed(tmp_path / "data")
    ds = _quiet(root, None, mode="RGB", max_bad_fraction=0.2, verify="none")
    source, records = ds.source, range(30)
    for level in ("full", "header"):
        for decide in (True, False):
            look = decide and level == "full"
            serial = vf.summarise(
                vf.check_records(source, records, look), level=level, decide=decide
            )
            for size in (1, 2, 3, 5, 7, 13, 29):
                chunked = [
                    s
                    for k in range(0, 30, size)
                    for s in vf.check_records(source, records[k : k + size], look)
                ]
                assert vf.summarise(chunked, level=level, decide=decide) == serial, (level, size)
    full = vf.summarise(vf.check_records(source, records, True), level="full", decide=True)
    assert [(i, stage) for i, stage, _ in full.skipped] == [
        (6, "verify"),
        (7, "decode"),
        (20, "verify"),
    ]
    assert full.colour == (12, "RGB") and full.grey == {"L": 3, "RGB with R = G = B": 7}


@pytest.mark.parametrize("mode", [None, "RGB"])
@pytest.mark.parametrize("verify", ["full", "header"])
def test_the_pass_in_worker_processes_equals_the_serial_pass(
    tmp_path: Path, mode: str | None, verify: str
) -> None:
    root = _mixed(tmp_path / "data")
    kwargs = {"mode": mode, "verify": verify, "max_bad_fraction": 0.2, "verify_cache": False}
    serial = _quiet(root, None, verify_workers=0, **kwargs)
    parallel = _quiet(root, None, verify_workers=2, **kwargs)  # 2 processes, chunks of 2 files
    assert _outcome(parallel) == _outcome(serial)
    if mode is None and verify == "full":
        assert [Path(p).name for p, _ in serial.skipped] == ["06.png", "07.jpg", "20.png"]


def test_a_large_listing_goes_to_the_pool_by_default(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    calls: list[int] = []
    executor = vf.ProcessPoolExecutor

    def counting(workers: int, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(workers)
        return executor(workers, **kwargs)

    monkeypatch.setattr(vf, "ProcessPoolExecutor", counting)
    monkeypatch.setattr(vf, "PARALLEL_MIN_FILES", 8)
    monkeypatch.setattr(vf, "usable_cores", lambda: 2)
    for k in range(8):
        save_image_to(tmp_path / f"data/a/{k}.png", grey_image(k))
    assert len(ImageFolderDataset(tmp_path / "data", None, verify_cache=False)) == 8
    assert calls == [2]
    ImageFolderDataset(tmp_path / "data", None, verify_cache=False, verify_workers=0)
    assert calls == [2]  # 0: serial, whatever the size


def _construct(root: str, home: str, queue: multiprocessing.Queue) -> None:
    os.environ["VITKIT_HOME"] = home
    queue.put(ImageFolderDataset(root, None, mode=None).verified_cached)


def test_processes_that_construct_at_once_verify_once(tmp_path: Path, home: Path) -> None:
    for k in range(40):
        save_image_to(
            tmp_path / f"data/a/{k}.png", grey_image(k).convert("RGB")
        )  # grey as RGB: all decoded
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    procs = [
        ctx.Process(target=_construct, args=(str(tmp_path / "data"), str(home), queue))
        for _ in range(3)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    assert sorted(queue.get(timeout=5) for _ in procs) == [False, True, True]


def test_verify_image_folder_fills_the_cache_the_datasets_read(
    tmp_path: Path, opens: list[str]
) -> None:
    for split, n in (("train", 4), ("val", 2), ("test", 2)):
        for k in range(n):
            save_image_to(tmp_path / f"{split}/a/{k}.png", grey_image(k).convert("RGB"))
            save_image_to(tmp_path / f"{split}/b/{k}.png", grey_image(k))
    datasets = verify_image_folder(tmp_path, mode=None)
    assert sorted(datasets) == ["test", "train", "val"] and opens
    assert {name: ds.mode for name, ds in datasets.items()} == dict.fromkeys(datasets, "L")
    opens.clear()
    train = ImageFolderDataset(tmp_path, "train", mode=None)
    val = ImageFolderDataset(tmp_path, "val", mode=train.mode)
    assert opens == [] and train.verified_cached and val.verified_cached
    assert val.samples == datasets["val"].samples
    tree = verify_image_folder(tmp_path / "val")
    assert list(tree) == [None] and tree[None].verified_cached


# ---------------------------------------------------------------- the cheap levels


def test_header_decides_channels_from_the_modes_without_decoding(
    tmp_path: Path, decodes: list[str]
) -> None:
    root = tmp_path / "data"
    save_image_to(root / "a/0.png", grey_image(0))
    save_image_to(root / "a/1.png", grey_image(1).convert("LA"))
    ds = ImageFolderDataset(root, None, mode=None, verify="header")
    assert (ds.mode, ds.channels_reason) == (
        "L",
        f"1 channel: all 2 images in {root} are greyscale (1 in mode L, 1 in mode LA)",
    )
    save_image_to(root / "b/2.png", grey_image(2).convert("RGB"))  # grey, stored as RGB
    header = ImageFolderDataset(root, None, mode=None, verify="header")
    assert decodes == []
    assert header.mode == "RGB" and "has mode RGB (verify='header' reads the modes" in (
        header.channels_reason
    )
    assert ImageFolderDataset(root, None, mode=None, verify="full").mode == "L"
    assert decodes == ["2.png"]


def test_none_opens_nothing_and_replaces_a_bad_file_when_it_is_read(
    tmp_path: Path, opens: list[str]
) -> None:
    root = tmp_path / "data"
    for k in range(3):
        save_image_to(root / f"a/{k}.png", grey_image(k))
    (root / "a/1.png").write_bytes(b"garbage")
    ds = ImageFolderDataset(root, None, verify="none", max_bad_fraction=0.5)
    assert opens == [] and len(ds) == 3 and ds.skipped == [] and ds.verified_from is None
    with pytest.warns(UnreadableImageWarning, match=r"1.png failed to decode"):
        image, _ = ds[1]
    assert image.shape == (3, 6, 5)
    with pytest.raises(ConfigError, match=r"^verify=True is not valid: expected one of 'full'"):
        ImageFolderDataset(root, None, verify=True)  # type: ignore[arg-type]


def test_levels_and_workers_are_checked(tmp_path: Path) -> None:
    save_image_to(tmp_path / "a/0.png", grey_image(0))
    with pytest.raises(ConfigError, match=r"verify='fast' is not valid: expected one of 'full'"):
        ImageFolderDataset(tmp_path, None, verify="fast")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"mode=None .* expected verify='full' or 'header'"):
        ImageFolderDataset(tmp_path, None, mode=None, verify="none")
    with pytest.raises(ConfigError, match=r"verify_workers=-1 is not valid"):
        ImageFolderDataset(tmp_path, None, verify_workers=-1)


# ---------------------------------------------------------------- data.verify, in a run


def test_data_verify_sets_the_level_of_a_runs_folder(
    tmp_path: Path, decodes: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """``data.verify`` reaches the folders a run reads; 'none' without model.in_chans is one
    line saying what to set, from build_data and from the command line."""
    from vitkit.cli import main
    from vitkit.config import replace
    from vitkit.data.run_data import build_data
    from vitkit.recipes import get_recipe

    root = tmp_path / "data"
    for split in ("train", "val"):
        save_image_to(
            root / f"{split}/a/0.png", grey_image(0).convert("RGB")
        )  # grey, stored as RGB
        save_image_to(root / f"{split}/b/1.png", grey_image(1))
    run = replace(get_recipe("smoke"), {"data.dataset": str(root), "data.verify": "header"})
    data = build_data(run.data, run.model, seed=0)
    assert decodes == [] and data.train.verify == "header" and data.train.mode == "RGB"
    assert build_data(replace(run, {"data.verify": "full"}).data, run.model, seed=0).channels == 1
    listed = replace(run, {"data.verify": "none"}).data
    assert build_data(listed, run.model, seed=0, in_chans=3).train.verify == "none"
    with pytest.raises(ConfigError, match=r"^data.verify=none opens no image .* model.in_chans"):
        build_data(listed, run.model, seed=0)
    code = main(["train", "--data", str(root), "--set", "data.verify=none"])
    err = capsys.readouterr().err
    assert code == 2 and "data.verify=none opens no image" in err and "Traceback" not in err


def test_only_the_listed_formats_are_opened_and_older_entries_are_verified_again(
    tmp_path: Path,
) -> None:
    """PIL opens whatever it sniffs: an EPS named .jpg (which would reach Ghostscript where it is
    installed) and an ICO named .bmp passed verification before; now only ``codec.FORMATS`` are
    opened, whatever the name (a TIFF named .png is one of them). A cache entry written before
    (format 1, the EPS kept) is not trusted: the folder is verified again."""
    root = tmp_path / "data"
    save_image_to(root / "a/ok.png", colour_image(0))
    save_image_to(root / "a/tiff.png", colour_image(1), format="TIFF")
    save_image_to(root / "a/eps.jpg", colour_image(2), format="EPS")
    save_image_to(root / "a/icon.bmp", colour_image(3), format="ICO")
    with pytest.warns(UnreadableImageWarning):
        ds = ImageFolderDataset(root, None, max_bad_fraction=0.6)
    assert sorted(Path(p).name for p, _ in ds.skipped) == ["eps.jpg", "icon.bmp"]
    assert all("as one of JPEG, PNG, WEBP, BMP, GIF, TIFF" in why for _, why in ds.skipped)
    assert [path.name for path, _ in ds.samples] == ["ok.png", "tiff.png"]
    assert ds[1][0].shape == (3, 6, 5)
    entry = ds.verified_from
    assert entry is not None
    old = json.loads(entry.read_text())
    entry.write_text(json.dumps({**old, "format": 1, "skipped": []}))  # what vitkit wrote before
    with pytest.warns(UnreadableImageWarning):
        again = ImageFolderDataset(root, None, max_bad_fraction=0.6)
    assert not again.verified_cached and len(again) == 2


# ---------------------------------------------------------------- every source alike


def _as_shards(folder: Path, out: Path) -> Path:
    """The files of ``folder``'s tree (bad ones included) as one tar shard, in the listing's
    order, labelled by class folder."""
    from vitkit.data.sources.folder import image_files

    classes = sorted(d.name for d in folder.iterdir())
    members = {}
    for k, path in enumerate(image_files(folder)):
        members[f"{k:04d}{path.suffix}"] = path.read_bytes()
        members[f"{k:04d}.cls"] = str(classes.index(path.parent.name)).encode()
    write_tar(out / "train-000000.tar", members)
    return out


def _as_table(folder: Path, out: Path) -> Path:
    """The same files as a ``save_to_disk`` dataset of encoded bytes (an Arrow file on disk)."""
    import datasets

    from vitkit.data.sources.folder import image_files

    classes = sorted(d.name for d in folder.iterdir())
    files = image_files(folder)
    table = datasets.Dataset.from_dict(
        {
            "image": [p.read_bytes() for p in files],
            "label": [classes.index(p.parent.name) for p in files],
        }
    )
    table.save_to_disk(str(out))
    return out


@pytest.mark.parametrize("kind", ["folder", "wds", "hf"])
def test_every_source_is_verified_decided_and_cached_by_the_one_container(
    tmp_path: Path, kind: str, opens: list[str]
) -> None:
    """A folder, its tar shard and its Hugging Face table are read by the one container: the same
    images skipped (a record's name says where it is), the same channel decision, the pass in
    worker processes equal to the serial one, the findings cached and read back without opening
    an image, and a changed source verified again."""
    pytest.importorskip("datasets")
    from vitkit.config import DataConfig
    from vitkit.data.sources.hf import open_hf
    from vitkit.data.sources.shards import WebDatasetShards

    folder = _mixed(tmp_path / "data")
    if kind == "folder":
        read = lambda **kw: _quiet(folder, None, **kw)  # noqa: E731
        changed = folder / "a/00.png"
    elif kind == "wds":
        shards = _as_shards(folder, tmp_path / "shards")
        read = lambda **kw: _quiet_of(WebDatasetShards, shards, "train", **kw)  # noqa: E731
        changed = shards / "train-000000.tar"
    else:
        table = _as_table(folder, tmp_path / "table")
        hf = open_hf(DataConfig(dataset=f"hf:{table}"))
        read = lambda **kw: _quiet_of(hf.dataset, "train", **kw)  # noqa: E731
        changed = next(table.glob("*.arrow"))
    options = {"mode": None, "max_bad_fraction": 0.2}
    serial = read(verify_workers=0, verify_cache=False, **options)
    parallel = read(verify_workers=2, verify_cache=False, **options)
    for ds in (serial, parallel):
        assert (ds.mode, len(ds)) == ("RGB", 27)
        assert ds.channels_reason.endswith(" is in colour (mode RGB)")
    assert [name for name, _ in parallel.skipped] == [name for name, _ in serial.skipped]
    assert parallel.labels.tolist() == serial.labels.tolist()
    assert len(serial.skipped) == 3  # 06 and 20 fail verify(), 07 fails to decode
    first = read(**options)
    assert not first.verified_cached and first.verified_from is not None
    opens.clear()
    second = read(**options)
    assert second.verified_cached and opens == [] and second.skipped == first.skipped
    assert second.rows.tolist() == first.rows.tolist() and second.mode == first.mode
    st = changed.stat()
    os.utime(changed, ns=(st.st_atime_ns, st.st_mtime_ns + 1))  # 1 ns later, same bytes
    assert not read(**options).verified_cached


def _quiet_of(make, *args, **kwargs):  # type: ignore[no-untyped-def]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnreadableImageWarning)
        return make(*args, **kwargs)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_named_like_an_image_is_skipped_not_waited_on(tmp_path: Path) -> None:
    root = tmp_path / "data"
    for k in range(3):
        save_image_to(root / f"a/{k}.png", grey_image(k))
    os.mkfifo(root / "a/pipe.jpg")  # reading it would wait for a writer forever
    with pytest.warns(UnreadableImageWarning, match=r"pipe\.jpg \(OSError: .* not a regular file"):
        ds = ImageFolderDataset(root, None, max_bad_fraction=0.5)
    assert len(ds) == 3
