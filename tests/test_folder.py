"""vitkit.data.sources.folder: the two folder layouts (read without opening an image), a split's folder
given directly, the channel decision made while verifying, and the list of skipped files.

Every image is a real file written by PIL into tmp_path; all are a few pixels, so the file runs in
about a second.
"""

from __future__ import annotations

import io
import os
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from helpers import (
    claimed_png,
    colour_image,
    grey_image,
    in_a_child,
    padded_image,
    save_image_to,
)
from vitkit.data import (
    FolderLayout,
    ImageFolderDataset,
    UnreadableImageWarning,
    folder_layout,
)
from vitkit.errors import ConfigError, DataError, MissingFileError


def _tree(root: Path, classes: dict[str, int]) -> Path:
    """``root/<class>/<k>.png``: ``classes[name]`` grey PNGs per class."""
    for name, n in classes.items():
        for k in range(n):
            save_image_to(root / name / f"{k}.png", grey_image(k))
    return root


# ---------------------------------------------------------------- layouts


def test_folder_layout_reads_splits_without_opening_an_image(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _tree(tmp_path / "train", {"cat": 3, "dog": 2})
    save_image_to(
        tmp_path / "train/dog/deeper/x.JPG", grey_image(9).convert("RGB")
    )  # nested, any case
    (tmp_path / "train/dog/notes.txt").write_text("not an image")
    (tmp_path / "train/dog/.hidden.png").write_bytes(b"ignored")
    _tree(tmp_path / "test", {"cat": 1, "dog": 1})
    (tmp_path / "README.md").write_text("files beside the splits are ignored")
    (tmp_path / ".cache").mkdir()  # so are hidden folders

    def no_open(*args: object, **kwargs: object) -> None:
        raise AssertionError("folder_layout opened an image")

    monkeypatch.setattr(Image, "open", no_open)
    layout = folder_layout(tmp_path)
    assert layout == FolderLayout(
        root=tmp_path,
        splits={"train": tmp_path / "train", "test": tmp_path / "test"},
        classes=("cat", "dog"),
        counts={"train": 6, "test": 2},
    )
    assert layout.kind == "splits"


def test_folder_layout_reads_a_single_tree_and_a_split_given_directly(tmp_path: Path) -> None:
    tree = _tree(tmp_path / "vehicles", {"car": 2, "bus": 1, "train": 2})  # a class named 'train'
    layout = folder_layout(tree)
    assert layout.kind == "tree" and layout.splits == {None: tree}
    assert layout.classes == ("bus", "car", "train") and layout.counts == {None: 5}
    _tree(tmp_path / "digits/train", {"0": 2, "1": 2})
    _tree(tmp_path / "digits/val", {"0": 1, "1": 1})
    val = folder_layout(tmp_path / "digits/val")  # class folders given directly
    assert val.kind == "tree" and val.classes == ("0", "1") and val.counts == {None: 2}
    assert folder_layout(tmp_path / "digits").counts == {"train": 4, "val": 2}


@pytest.mark.parametrize(
    ("paths", "error", "message"),
    [
        ([], MissingFileError, r"data folder .*/data not found \(expected .*/data/<class>/<image>"),
        (["val/c/a.png"], DataError, r"split folders \['val'\] but no train/: .*/data/val\)$"),
        (["val/c/a.png", "test/c/a.png"], DataError, r"\['val', 'test'\] but no train/"),
        (
            ["train/c/a.png", "logs/run1/"],
            DataError,
            r"mixes split folders \['train'\] with other folders \['logs'\]: expected only train",
        ),
        (
            ["train/c/a.png", "val/"],
            DataError,
            r"data/val holds no class folders, expected <class>/",
        ),
        (
            ["train/cat/a.png", "train/dog/a.png", "val/cat/a.png", "val/bird/a.png"],
            DataError,
            r"class folders of .*data/val and .*data/train differ: only in val: \['bird'\], "
            r"only in train: \['dog'\]",
        ),
        (
            ["train/cat/a.png", "train/dog/"],
            DataError,
            r"class folder .*train/dog holds no images \(",
        ),
    ],
)
def test_folder_layout_errors(
    tmp_path: Path, paths: list[str], error: type[Exception], message: str
) -> None:
    """``paths`` under ``data/``: images (``.png``) and empty folders (ending in ``/``)."""
    root = tmp_path / "data"
    for path in paths:
        if path.endswith("/"):
            (root / path).mkdir(parents=True)
        else:
            save_image_to(root / path, grey_image(0))
    with pytest.raises(error, match=message):
        folder_layout(root)


def test_folder_layout_errors_on_a_folder_without_folders(tmp_path: Path) -> None:
    save_image_to(tmp_path / "a.png", grey_image(0))
    save_image_to(tmp_path / "b.png", grey_image(1))
    with pytest.raises(
        DataError, match=r"holds no class folders and no split folders .*found 2 images"
    ):
        folder_layout(tmp_path)
    with pytest.raises(DataError, match=r"data folder .*a.png is not a folder"):
        folder_layout(tmp_path / "a.png")
    # A class folder called 'train' holding folders, beside other classes: not a tree we can read.
    _tree(tmp_path / "v", {"bus": 1, "train/steam": 1})
    with pytest.raises(
        DataError, match=r"mixes split folders \['train'\] with other folders \['bus'\]"
    ):
        folder_layout(tmp_path / "v")


def test_a_val_folder_given_directly_is_checked_against_train_beside_it(tmp_path: Path) -> None:
    _tree(tmp_path / "train", {"cat": 1, "dog": 1})
    _tree(tmp_path / "val", {"cat": 1})
    message = (
        r"class folders of .*val and .*train differ: only in val: \[\], only in train: \['dog'\]"
    )
    for read in (
        lambda: folder_layout(tmp_path / "val"),
        lambda: ImageFolderDataset(tmp_path / "val", None),
        lambda: ImageFolderDataset(tmp_path, "val"),
    ):
        with pytest.raises(DataError, match=message):
            read()
    _tree(tmp_path / "other", {"cat": 1})  # a folder not named val/test is its own dataset
    assert ImageFolderDataset(tmp_path / "other", None).classes == ["cat"]


def test_a_link_back_into_the_folder_is_skipped_with_a_warning(tmp_path: Path) -> None:
    """``ln -s . digit_0/self`` was followed 40 levels deep (516 images counted for 36, and a
    holdout of copies of training images); each such link is skipped and named, a linked class
    folder is still read."""
    root = _tree(tmp_path / "digits", {"digit_0": 3, "digit_1": 2})
    _tree(tmp_path / "elsewhere", {"two": 2})
    (root / "digit_2").symlink_to(tmp_path / "elsewhere/two")  # a linked class folder: read
    (root / "digit_0/self").symlink_to(".")
    (root / "digit_1/deeper").mkdir()
    (root / "digit_1/deeper/up").symlink_to("..")
    for read in (
        lambda: folder_layout(root).counts[None],
        lambda: len(ImageFolderDataset(root, None)),
    ):
        with pytest.warns(UserWarning) as caught:
            assert read() == 7
        assert sorted(str(w.message) for w in caught) == [
            f"skipping {root}/digit_0/self: it is {root}/digit_0, a folder already listed (a "
            "link back into the folder would list its images again)",
            f"skipping {root}/digit_1/deeper/up: it is {root}/digit_1, a folder already listed (a "
            "link back into the folder would list its images again)",
        ]


def test_a_link_that_loops_is_an_unreadable_image_not_a_traceback(tmp_path: Path) -> None:
    """``ln -s loop.png loop.png`` in a class folder: listing asked whether it is a folder and
    raised ELOOP (a traceback in train, predict and data pack); it is listed as a dangling
    link is, and reading it names it."""
    root = _tree(tmp_path / "photos", {"a": 3, "b": 2})
    (root / "a/loop.png").symlink_to("loop.png")
    (root / "b/ring").symlink_to("ring")  # not an image's name: left out
    assert folder_layout(root).counts[None] == 6  # the link with an image's name counted
    with pytest.raises(DataError, match=r"loop\.png .*Too many levels of symbolic links"):
        ImageFolderDataset(root, None)  # verified: one bad image of 6, over max_bad_fraction


@pytest.mark.parametrize(
    ("name", "said"),
    [
        (b"new\nline", "the character '\\n', which cannot be printed"),
        (b"b\xff", "the byte 0xff, which is not UTF-8"),
        ("x\u202egnp".encode(), "the character '\\u202e', which cannot be printed"),
    ],
)
def test_a_class_folder_whose_name_is_not_printable_text_is_refused(
    tmp_path: Path, name: bytes, said: str
) -> None:
    """A newline in a class folder's name became two classes in a packed folder's classes.txt
    (the labels after it under the wrong names); a byte that is not UTF-8 failed the run's
    confusion table after training, and data pack, with a traceback. Refused when listed, naming
    the folder as a terminal can show it."""
    root = _tree(tmp_path / "photos", {"a": 2, "z": 2})
    os.rename(root / "z", os.fsencode(root) + b"/" + name)
    with pytest.raises(DataError) as e:
        folder_layout(root)
    assert f": its name holds {said}: expected a class name of printable UTF-8 text" in str(e.value)
    assert "\n" not in str(e.value) and str(e.value).isprintable()


UNREADABLE = """
import json, sys, warnings
from vitkit.data import folder_layout
from vitkit.errors import DataError
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
        found = folder_layout(sys.argv[1]).counts[None]
    except DataError as e:
        found = str(e)
print(json.dumps([found, [str(w.message) for w in caught]]))
"""


def test_a_folder_that_cannot_be_read_is_named_not_left_out(tmp_path: Path) -> None:
    """Run as a user: a class folder that cannot be read was "holds no images"; a folder inside
    one was left out without a word (its images not counted)."""
    root = _tree(tmp_path / "photos", {"a": 2, "b": 2})
    _tree(root / "b", {"more": 3})
    (root / "b/more").chmod(0)
    try:
        assert in_a_child(UNREADABLE, str(root), as_a_user=True) == [
            4,
            [f"skipping {root}/b/more: the folder cannot be read (Permission denied)"],
        ]
        (root / "b/more").chmod(0o755)
        (root / "a").chmod(0)
        assert in_a_child(UNREADABLE, str(root), as_a_user=True) == [
            f"the folder {root}/a cannot be read (Permission denied): expected a folder of "
            "images you can read",
            [],
        ]
    finally:
        for folder in (root / "a", root / "b/more"):
            folder.chmod(0o755)  # for pytest to delete


@pytest.mark.parametrize("link", ["symlink", "hard link", "linked folder"])
def test_an_image_in_two_splits_is_refused(tmp_path: Path, link: str) -> None:
    """Two paths to one file in different splits (a link, a hard link, a linked folder) would
    score memorised images; train/ is listed last, the split it is refused in."""
    _tree(tmp_path / "train", {"cat": 2, "dog": 1})
    _tree(tmp_path / "val", {"dog": 1})
    (tmp_path / "val/cat").mkdir()
    target, in_val = tmp_path / "train/cat/1.png", tmp_path / "val/cat/x.png"
    if link == "symlink":
        in_val.symlink_to(target)
    elif link == "hard link":
        os.link(target, in_val)
    else:
        (tmp_path / "val/cat").rmdir()
        (tmp_path / "val/cat").symlink_to(tmp_path / "train/cat")
        target, in_val = tmp_path / "train/cat/0.png", tmp_path / "val/cat/0.png"
    with pytest.raises(DataError) as err:
        folder_layout(tmp_path)
    assert str(err.value) == (
        f"{target} in train/ is {in_val} in val/ (a link or the same file): expected splits "
        "without common images"
    )


# ---------------------------------------------------------------- the dataset on both layouts


def test_dataset_reads_a_split_given_directly_as_by_name(tmp_path: Path) -> None:
    _tree(tmp_path / "train", {"cat": 2, "dog": 2})
    _tree(tmp_path / "val", {"cat": 1, "dog": 2})
    by_name = ImageFolderDataset(tmp_path, "val")
    direct = ImageFolderDataset(tmp_path / "val", None)
    assert direct.samples == by_name.samples and direct.classes == ["cat", "dog"]
    assert torch.equal(direct.labels, by_name.labels) and direct.split_dir == tmp_path / "val"
    assert torch.equal(direct[2][0], by_name[2][0])
    assert len(ImageFolderDataset(tmp_path)) == 4  # today's default: root/train
    layout = folder_layout(tmp_path)
    sizes = {name: len(ImageFolderDataset(layout.root, name)) for name in layout.splits}
    assert sizes == dict(layout.counts) == {"train": 4, "val": 3}
    tree = folder_layout(tmp_path / "val")
    assert len(ImageFolderDataset(tree.root, None)) == tree.counts[None] == 3


def test_dataset_given_a_split_layout_as_a_tree_says_which_split(tmp_path: Path) -> None:
    _tree(tmp_path / "train", {"cat": 1})
    _tree(tmp_path / "val", {"cat": 1})
    with pytest.raises(
        DataError,
        match=r"holds split folders \['train', 'val'\], not class folders: expected a split name "
        r"\(split='train'\) or the split's folder \(.*/train\)",
    ):
        ImageFolderDataset(tmp_path, None)
    with pytest.raises(MissingFileError, match=r"data folder .*/nothing not found"):
        ImageFolderDataset(tmp_path / "nothing", None)


# ---------------------------------------------------------------- channels decided while verifying


def test_grey_images_of_every_kind_give_one_channel(tmp_path: Path, decodes: list[str]) -> None:
    root = tmp_path / "train"
    save_image_to(root / "a/l.png", grey_image(0))
    save_image_to(root / "a/la.png", grey_image(1).convert("LA"))
    save_image_to(root / "a/one.png", grey_image(2).convert("1"))
    save_image_to(root / "a/wide.png", Image.fromarray(np.full((4, 4), 40000, np.uint16)))  # I;16
    grey_rgb = grey_image(3, (16, 16))
    save_image_to(root / "b/rgb.jpg", grey_rgb.convert("RGB"), quality=75)  # 4:2:0, PIL's default
    save_image_to(root / "b/rgb.png", grey_rgb.convert("RGB"))
    palette = Image.new("P", (4, 4), 1)
    palette.putpalette([0, 0, 0, 90, 90, 90, 255, 0, 0])  # entry 2 is red but no pixel uses it
    save_image_to(root / "b/p.png", palette)
    ds = ImageFolderDataset(tmp_path, "train", mode=None)
    assert (ds.mode, ds.channels) == ("L", 1)
    assert ds.channels_reason == (
        f"1 channel: all 7 images in {root} are greyscale (1 in mode 1, 1 in mode I;16, 1 in mode "
        "L, 1 in mode LA, 1 in mode P with R = G = B, 2 in mode RGB with R = G = B)"
    )
    assert sorted(decodes) == ["p.png", "rgb.jpg", "rgb.png"]  # one-channel modes: no decode
    image, _ = ds[ds.samples.index((root / "b/rgb.jpg", 1))]
    with Image.open(root / "b/rgb.jpg") as jpeg:
        assert torch.equal(image[0], torch.from_numpy(np.array(jpeg))[..., 0])


@pytest.mark.parametrize("subsampling", [0, 1, 2])
@pytest.mark.parametrize("quality", [1, 50, 95, 100])
def test_a_grey_image_saved_as_rgb_jpeg_decodes_with_equal_channels(
    quality: int, subsampling: int
) -> None:
    # Why grey detection needs no tolerance (see folder._grey_kind): pins the measurement.
    buffer = io.BytesIO()
    grey_image(quality, (37, 29)).convert("RGB").save(
        buffer, "JPEG", quality=quality, subsampling=subsampling
    )
    rgb = np.asarray(Image.open(buffer)).astype(int)  # (H, W, 3)
    assert np.abs(rgb - rgb[..., :1]).max() == 0


def test_decoding_stops_at_the_first_colour_image(tmp_path: Path, decodes: list[str]) -> None:
    root = tmp_path / "train"
    for k in range(3):
        save_image_to(root / f"a/{k}.png", grey_image(k).convert("RGB"))
    save_image_to(root / "a/3.png", colour_image(0))
    for k in range(4, 9):
        save_image_to(root / f"b/{k}.png", grey_image(k).convert("RGB"))
    ds = ImageFolderDataset(tmp_path, "train", mode=None)
    assert (ds.mode, ds.channels) == ("RGB", 3) and len(ds) == 9
    assert ds.channels_reason == f"3 channels: {root / 'a/3.png'} is in colour (mode RGB)"
    assert decodes == ["0.png", "1.png", "2.png", "3.png"]  # the other five are only verified
    assert ds[8][0].shape == (3, 6, 5)


def test_a_used_colour_palette_entry_or_a_faint_tint_is_colour(tmp_path: Path) -> None:
    palette = Image.new("P", (4, 4), 0)
    palette.putpalette([0, 0, 0, 255, 0, 0])
    palette.putpixel((1, 1), 1)
    save_image_to(tmp_path / "p/a/p.png", palette)
    assert ImageFolderDataset(tmp_path / "p", None, mode=None).channels == 3
    tinted = np.full((4, 4, 3), 120, np.uint8)
    tinted[0, 0, 2] = 121  # one pixel, one level
    save_image_to(tmp_path / "t/a/t.png", Image.fromarray(tinted))
    ds = ImageFolderDataset(tmp_path / "t", None, mode=None)
    assert ds.channels_reason == f"3 channels: {tmp_path / 't/a/t.png'} is in colour (mode RGB)"


def test_a_given_mode_decodes_nothing_and_says_so(tmp_path: Path, decodes: list[str]) -> None:
    _tree(tmp_path / "train", {"a": 2})
    ds = ImageFolderDataset(tmp_path, "train")
    assert (ds.mode, ds.channels, ds.channels_reason) == (
        "RGB",
        3,
        "3 channels: mode='RGB' was given",
    )
    grey = ImageFolderDataset(tmp_path, "train", mode="L", verify="none")
    assert (grey.channels, grey.channels_reason) == (1, "1 channel: mode='L' was given")
    assert decodes == []
    with pytest.raises(
        ConfigError,
        match=r"mode=None decides the channels while verifying every image: expected verify=.full.",
    ):
        ImageFolderDataset(tmp_path, "train", mode=None, verify="none")
    with pytest.raises(ConfigError, match=r"mode='RGBA' is not valid: expected 'RGB', 'L' or None"):
        ImageFolderDataset(tmp_path, "train", mode="RGBA")


def test_an_image_that_fails_to_decode_while_deciding_is_skipped(tmp_path: Path) -> None:
    _tree(tmp_path / "train", {"a": 9})
    buffer = io.BytesIO()
    grey_image(0, (32, 32)).convert("RGB").save(buffer, "JPEG")
    data = buffer.getvalue()
    cut = tmp_path / "train/a/cut.jpg"
    cut.write_bytes(data[: data.index(b"\xff\xda") + 40])  # passes verify(), fails to decode
    with pytest.warns(  # the decoder training uses says why: simplejpeg's ValueError, or PIL's
        UnreadableImageWarning, match=r"skipping unreadable image .*cut.jpg \((ValueError|OSError)"
    ):
        ds = ImageFolderDataset(tmp_path, "train", mode=None, max_bad_fraction=0.2)
    assert [Path(p).name for p, _ in ds.skipped] == ["cut.jpg"] and len(ds) == 9
    assert ds.channels_reason.startswith("1 channel: all 9 images")


# ---------------------------------------------------------------- skipped files


def test_skipped_names_every_dropped_file_and_each_gets_a_warning(tmp_path: Path) -> None:
    _tree(tmp_path / "train", {"a": 10, "b": 8})
    png = save_image_to(tmp_path / "train/a/bad.png", grey_image(0)).read_bytes()
    at = png.index(b"IDAT") + 6  # a flipped byte inside the pixel data: its chunk's CRC fails
    (tmp_path / "train/a/bad.png").write_bytes(png[:at] + bytes([png[at] ^ 1]) + png[at + 1 :])
    (tmp_path / "train/b/bad.jpg").write_bytes(b"garbage")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ds = ImageFolderDataset(tmp_path, "train", max_bad_fraction=0.1)
    assert [(Path(p).relative_to(tmp_path), why.split(":")[0]) for p, why in ds.skipped] == [
        (Path("train/a/bad.png"), "SyntaxError"),  # broken PNG chunk: failed CRC
        (Path("train/b/bad.jpg"), "UnidentifiedImageError"),
    ]
    messages = [str(w.message) for w in caught if w.category is UnreadableImageWarning]
    assert len(messages) == 2
    assert "a/bad.png" in messages[0] and "1 skipped so far" in messages[0]
    assert "b/bad.jpg" in messages[1] and "2 skipped so far" in messages[1]
    assert len(ds) == 18 and ds.subset([0, 1]).skipped == ds.skipped
    assert ImageFolderDataset(tmp_path, "train", verify="none", mode="L").skipped == []


def test_too_many_bad_files_name_the_first_five_and_count_the_rest(tmp_path: Path) -> None:
    _tree(tmp_path / "train", {"a": 3})
    for k in range(7):
        (tmp_path / f"train/a/bad{k}.png").write_bytes(b"garbage")
    with pytest.raises(DataError) as caught:
        ImageFolderDataset(tmp_path, "train", max_bad_fraction=0.5)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(
        f"7 of 10 images in {tmp_path / 'train'} are unreadable, more than max_bad_fraction=0.5 "
        f"allows: {tmp_path / 'train/a/bad0.png'} (UnidentifiedImageError: cannot identify"
    )
    assert [k for k in range(7) if f"bad{k}.png" in message] == [0, 1, 2, 3, 4]
    assert message.endswith(" and 2 more")


def test_a_class_left_without_a_readable_image_is_an_error(tmp_path: Path) -> None:
    _tree(tmp_path / "train", {"a": 3})
    (tmp_path / "train/b").mkdir()
    (tmp_path / "train/b/bad.png").write_bytes(b"garbage")
    with (
        pytest.warns(UnreadableImageWarning, match=r"bad.png"),
        pytest.raises(
            DataError, match=r"^no readable image left in class\(es\) \['b'\] of .*train$"
        ),
    ):
        ImageFolderDataset(tmp_path, "train", max_bad_fraction=0.5)


# ---------------------------------------------------------------- a real folder's faults


def test_a_real_folders_faults_are_skipped_and_named(tmp_path: Path) -> None:
    """What real folders hold: a broken link (a traceback from ``os.stat`` before), an empty
    file, a directory named like an image, a file its reader may not open (only where the tests
    do not run as root, whom permissions do not stop); each skipped with its name and why, at
    construction and from the cache. A link to an image outside the folder is read, as
    torchvision's ImageFolder reads it."""
    root, outside = tmp_path / "data", tmp_path / "elsewhere"
    for k in range(4):
        save_image_to(root / "a" / f"{k}.png", colour_image(k))
        save_image_to(root / "b" / f"{k}.png", colour_image(10 + k))
    save_image_to(outside / "far.png", colour_image(20))
    (root / "a/linked.png").symlink_to(outside / "far.png")
    (root / "a/broken.png").symlink_to(tmp_path / "gone.png")
    (root / "a/empty.jpg").write_bytes(b"")
    (root / "b/folder.png").mkdir()  # a directory named like an image: nothing in it
    expected = ["a/broken.png", "a/empty.jpg"]
    if os.geteuid() != 0:
        save_image_to(root / "b/locked.png", colour_image(30)).chmod(0)
        expected.append("b/locked.png")
    for cached in (False, True):
        with pytest.warns(UnreadableImageWarning) as caught:
            ds = ImageFolderDataset(root, None, max_bad_fraction=0.5)
        assert ds.verified_cached is cached
        named = sorted(str(Path(p).relative_to(root)) for p, _ in ds.skipped)
        assert named == expected
        assert len([w for w in caught if w.category is UnreadableImageWarning]) == len(expected)
        assert sorted(p.name for p, _ in ds.samples) == sorted(
            [*(f"{k}.png" for k in range(4)), *(f"{k}.png" for k in range(4)), "linked.png"]
        )
    far = next(i for i, (p, _) in enumerate(ds.samples) if p.name == "linked.png")
    assert torch.equal(ds[far][0], torch.from_numpy(np.array(colour_image(20))).permute(2, 0, 1))


def test_images_beyond_the_byte_and_pixel_bounds_are_skipped_and_named(tmp_path: Path) -> None:
    """``data.max_image_bytes`` and ``data.max_image_pixels`` hold for a folder as for every
    source: a file larger than the byte bound (a readable image followed by zeros; an 8 GB one
    was read whole, a MemoryError) is not read past the bound; an image whose header claims more
    pixels than the bound (13,000 x 13,000 px: 2.9 GB to decode), or more than PIL allows, is
    refused before decoding. Each is skipped and named as any unreadable image, at construction,
    and replaced when read unverified."""
    root = _tree(tmp_path / "data", {"a": 3, "b": 3})
    padded_image(root / "a/padded.png", 64 * 2**20 + 1)  # sparse: nothing written past the PNG
    (root / "b/claimed.png").write_bytes(claimed_png(13000, 13000))
    (root / "b/bomb.png").write_bytes(claimed_png(20000, 20000))  # more than PIL's own limit
    with pytest.warns(UnreadableImageWarning) as caught:
        ds = ImageFolderDataset(root, None, max_bad_fraction=0.5)
    why = {Path(path).name: reason for path, reason in ds.skipped}
    assert sorted(why) == ["bomb.png", "claimed.png", "padded.png"] and len(caught) == 3
    assert why["padded.png"].endswith("larger than data.max_image_bytes=67,108,864 allows")
    assert why["claimed.png"] == (
        "DecompressionBombError: 13,000 x 13,000 pixels, more than "
        "data.max_image_pixels=134,217,728 allows"
    )
    assert why["bomb.png"].startswith("DecompressionBombError: Image size (400000000 pixels)")
    # bounds of one's own (the run's config passes its own: tests/test_lists.py); unverified, an
    # image beyond them is replaced when read, as one that fails to decode
    other = _tree(tmp_path / "other", {"a": 1, "b": 1})
    save_image_to(other / "a/1.png", grey_image(1, (7, 6)))  # 6 x 7 = 42 pixels; the others 30
    small = ImageFolderDataset(
        other, None, mode="L", verify="none", max_image_pixels=41, max_bad_fraction=0.5
    )
    with pytest.warns(UnreadableImageWarning, match=r"a/1.png failed to decode \(Decompression"
                      r"BombError: 6 x 7 pixels, more than data.max_image_pixels=41 allows\)"):  # fmt: skip
        image, label = small[1]
    assert label == 1 and torch.equal(image, small[2][0])  # the next image, with its own label
    for bound in ("max_image_bytes", "max_image_pixels"):
        with pytest.raises(
            ConfigError, match=rf"^{bound}=0 is not valid: expected an integer >= 1"
        ):
            ImageFolderDataset(root, None, **{bound: 0})


def test_an_image_gone_after_the_listing_is_replaced_and_named(tmp_path: Path) -> None:
    root = _tree(tmp_path / "data", {"a": 3, "b": 3})
    ds = ImageFolderDataset(root, None, max_bad_fraction=0.5)
    (root / "a/1.png").unlink()  # deleted between the listing and the read
    with pytest.warns(UnreadableImageWarning, match=r"a/1.png failed to decode \(FileNotFound"):
        image, label = ds[1]
    assert label == 0 and torch.equal(image, ds[2][0])  # the next image, with its own label
