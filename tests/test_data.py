"""vitkit.data: datasets (real Fashion-MNIST, CIFAR binary, image folders, synthetic), splits,
reproducible transforms and resumable batching."""

from __future__ import annotations

import gzip
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from helpers import save_image_to
from vitkit.config import ConfigError
from vitkit.data import (
    ArrayDataset,
    Batches,
    BatchOptions,
    ImageFolderDataset,
    Preprocess,
    UnreadableImageWarning,
    balanced_subset,
    center_resize,
    cifar,
    fashion_mnist,
    inception_crop,
    preprocess_for_inference,
    rand_augment,
    random_crop_flip,
    read_idx,
    split_holdout,
    subset,
    synthetic,
    to_float,
)
from vitkit.data.sources.fashion_mnist import SYSTEM_DIR
from vitkit.errors import DataError

needs_fmnist = pytest.mark.skipif(
    not (SYSTEM_DIR / "train-images-idx3-ubyte.gz").is_file(),
    reason="Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)",
)


def g(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------- Fashion-MNIST


@pytest.fixture(autouse=True)
def _home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Verification caches go to a fresh folder, not the user's $VITKIT_HOME (nor tmp_path,
    where a folder would read as a class)."""
    monkeypatch.setenv("VITKIT_HOME", str(tmp_path_factory.mktemp("home")))


@pytest.fixture(scope="module")
def fmnist_test() -> ArrayDataset:
    return fashion_mnist("test")


@needs_fmnist
def test_fashion_mnist_train_is_the_release() -> None:
    ds = fashion_mnist("train")
    assert ds.images.shape == (60_000, 1, 28, 28) and ds.images.dtype == torch.uint8
    assert ds.labels.dtype == torch.int64
    assert ds.labels.bincount().tolist() == [6000] * 10
    assert ds.classes[0] == "T-shirt/top" and ds.classes[9] == "Ankle boot"
    assert int(ds.images.min()) == 0 and int(ds.images.max()) == 255
    image, label = ds[0]
    assert image.shape == (1, 28, 28) and isinstance(label, int)


@needs_fmnist
def test_fashion_mnist_test_split(fmnist_test: ArrayDataset) -> None:
    assert fmnist_test.images.shape == (10_000, 1, 28, 28)
    assert fmnist_test.labels.bincount().tolist() == [1000] * 10
    assert 60 < fmnist_test.images.float().mean() < 80  # the release's mean is ~73


def test_fashion_mnist_missing_directory_says_where_and_how(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(FileNotFoundError) as e:
        fashion_mnist("train", missing)
    message = str(e.value)
    assert "\n" not in message
    assert str(missing) in message and "apt-get install dataset-fashion-mnist" in message
    assert "zalandoresearch/fashion-mnist" in message


def test_fashion_mnist_bad_split() -> None:
    with pytest.raises(ValueError, match="'train' or 'test'"):
        fashion_mnist("val")


@needs_fmnist
def test_corrupt_gz_in_vitkit_data_is_a_value_error_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # $VITKIT_DATA/fashion-mnist comes before the system copy: the corrupt copy must be the one read.
    (tmp_path / "fashion-mnist").mkdir()
    for name in ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
        shutil.copy(SYSTEM_DIR / name, tmp_path / "fashion-mnist" / name)
    target = tmp_path / "fashion-mnist" / "t10k-images-idx3-ubyte.gz"
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0xFF
    target.write_bytes(bytes(data))
    monkeypatch.setenv("VITKIT_DATA", str(tmp_path))
    with pytest.raises(ValueError, match=str(target)):
        fashion_mnist("test")


@needs_fmnist
def test_checksum_is_of_the_decompressed_content(tmp_path: Path) -> None:
    # An uncompressed copy with one label changed: valid IDX, valid gzip elsewhere, wrong SHA-256.
    shutil.copy(SYSTEM_DIR / "t10k-images-idx3-ubyte.gz", tmp_path)
    raw = bytearray(gzip.decompress((SYSTEM_DIR / "t10k-labels-idx1-ubyte.gz").read_bytes()))
    raw[100] = (raw[100] + 1) % 10
    (tmp_path / "t10k-labels-idx1-ubyte").write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=r"t10k-labels-idx1-ubyte: SHA-256 .* expected 0402a96d"):
        fashion_mnist("test", tmp_path)


def test_read_idx_bad_magic_and_truncation(tmp_path: Path) -> None:
    good = tmp_path / "good"
    good.write_bytes(bytes([0, 0, 8, 2, 0, 0, 0, 2, 0, 0, 0, 3, 1, 2, 3, 4, 5, 6]))
    np.testing.assert_array_equal(read_idx(good), [[1, 2, 3], [4, 5, 6]])
    bad = tmp_path / "bad"
    bad.write_bytes(b"\x1f\x8b\x08\x00" + bytes(20))
    with pytest.raises(ValueError, match=r"bad: not an IDX file.*1f 8b 08 00"):
        read_idx(bad)
    short = tmp_path / "short"
    short.write_bytes(good.read_bytes()[:-2])
    with pytest.raises(ValueError, match=r"short: the IDX header says shape \(2, 3\).*found 16"):
        read_idx(short)
    truncated_gz = tmp_path / "t.gz"
    truncated_gz.write_bytes(gzip.compress(good.read_bytes())[:-6])
    with pytest.raises(ValueError, match=r"t\.gz: gzip stream is truncated"):
        read_idx(truncated_gz)


def test_a_small_gz_is_decompressed_no_further_than_its_idx_header_says(tmp_path: Path) -> None:
    """A 50 KB gzip of 48 MB (the header's 6 bytes, then zeros): decompressed to the header's
    size and one byte, then refused, not all 48 MB; a header that claims more than an IDX file
    is read up to is refused before anything past it is decompressed."""
    header = bytes([0, 0, 8, 2, 0, 0, 0, 2, 0, 0, 0, 3])
    bomb = tmp_path / "bomb.gz"
    bomb.write_bytes(gzip.compress(header + bytes(48 << 20), compresslevel=1))
    with pytest.raises(
        ValueError, match=r"bomb\.gz: the IDX header says shape \(2, 3\).*found 19 "
    ):
        read_idx(bomb)
    huge = tmp_path / "huge.gz"
    huge.write_bytes(gzip.compress(bytes([0, 0, 8, 2, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 1, 0])))
    with pytest.raises(ValueError, match=r"huge\.gz: .*\(1,099,511,627,520 bytes\), more than"):
        read_idx(huge)


# ---------------------------------------------------------------- CIFAR


def _write_cifar(root: Path, num_classes: int, sizes: dict[str, int], seed: int = 0) -> dict:
    """Files in the exact binary layout of the release; returns what they hold."""
    rng = np.random.default_rng(seed)
    label_bytes = 1 if num_classes == 10 else 2
    if num_classes == 10:
        folder = root / "cifar-10-batches-bin"
        files = {"train": [f"data_batch_{i}.bin" for i in range(1, 6)], "test": ["test_batch.bin"]}
        names_file = "batches.meta.txt"
    else:
        folder = root / "cifar-100-binary"
        files = {"train": ["train.bin"], "test": ["test.bin"]}
        names_file = "fine_label_names.txt"
    folder.mkdir(parents=True)
    held = {}
    for split, names in files.items():
        images, labels = [], []
        for name in names:
            n = sizes[split]
            img = rng.integers(0, 256, (n, 3, 32, 32), dtype=np.uint8)
            fine = rng.integers(0, num_classes, n, dtype=np.uint8)
            head = fine[:, None] if label_bytes == 1 else np.stack([fine // 5, fine], axis=1)
            (folder / name).write_bytes(
                np.concatenate([head, img.reshape(n, -1)], axis=1).tobytes()
            )
            images.append(img)
            labels.append(fine)
        held[split] = (np.concatenate(images), np.concatenate(labels))
    (folder / names_file).write_text("".join(f"name{k}\n" for k in range(num_classes)) + "\n")
    return held


@pytest.mark.parametrize("num_classes", [10, 100])
def test_cifar_binary_round_trip(tmp_path: Path, num_classes: int) -> None:
    held = _write_cifar(tmp_path, num_classes, {"train": 4, "test": 3})
    for split in ("train", "test"):
        ds = cifar(split, tmp_path, num_classes=num_classes)
        images, labels = held[split]
        assert ds.images.shape == (len(labels), 3, 32, 32)
        np.testing.assert_array_equal(ds.images.numpy(), images)
        np.testing.assert_array_equal(ds.labels.numpy(), labels)  # the fine label for CIFAR-100
        assert len(ds.classes) == num_classes and ds.classes[1] == "name1"
    assert len(cifar("train", tmp_path, num_classes=num_classes)) == (
        20 if num_classes == 10 else 4
    )


def test_cifar_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"cifar-10-binary.tar.gz"):
        cifar("train", tmp_path)
    _write_cifar(tmp_path, 10, {"train": 2, "test": 2})
    test_file = tmp_path / "cifar-10-batches-bin" / "test_batch.bin"
    test_file.write_bytes(test_file.read_bytes()[:-1])
    with pytest.raises(ValueError, match=r"test_batch.bin: expected a whole number of 3073-byte"):
        cifar("test", tmp_path)
    with pytest.raises(ValueError, match="num_classes"):
        cifar("test", tmp_path, num_classes=20)
    (tmp_path / "cifar-10-batches-bin" / "batches.meta.txt").write_bytes(b"caf\xe9\n" * 10)
    with pytest.raises(DataError, match=r"batches.meta.txt:1: the byte 0xe9 is not UTF-8"):
        cifar("train", tmp_path)


# ---------------------------------------------------------------- image folders


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """train/{cat,dog}: RGB PNG, JPEG (upper-case suffix), palette with transparency, RGBA,
    grayscale, 16-bit grayscale; val/{cat,dog}: one image each; plus files to ignore."""
    rng = np.random.default_rng(0)
    noise = Image.fromarray(rng.integers(0, 256, (20, 24, 3), dtype=np.uint8))
    save_image_to(tmp_path / "train/cat/a.png", noise)
    save_image_to(tmp_path / "train/cat/b.JPG", noise, quality=95)
    palette = Image.new("P", (10, 12), 1)
    palette.putpalette([0, 0, 0, 200, 10, 20] + [0] * 762)
    save_image_to(tmp_path / "train/cat/c.png", palette, transparency=0)
    save_image_to(tmp_path / "train/dog/d.png", Image.new("RGBA", (16, 16), (10, 20, 30, 0)))
    save_image_to(tmp_path / "train/dog/e.bmp", Image.new("L", (8, 9), 100))
    save_image_to(tmp_path / "train/dog/f.png", Image.fromarray(np.full((5, 5), 65535, np.uint16)))
    (tmp_path / "train/dog/notes.txt").write_text("not an image")
    (tmp_path / "train/dog/._e.bmp").write_bytes(b"macOS metadata")
    save_image_to(tmp_path / "val/cat/g.webp", noise)
    save_image_to(tmp_path / "val/dog/h.jpeg", noise)
    return tmp_path


def test_image_folder_reads_and_converts_every_kind(folder: Path) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no PIL palette warning, nothing skipped
        ds = ImageFolderDataset(folder, "train")
        items = [ds[i] for i in range(len(ds))]
    assert ds.classes == ["cat", "dog"] and len(ds) == 6
    assert [p.name for p, _ in ds.samples] == ["a.png", "b.JPG", "c.png", "d.png", "e.bmp", "f.png"]
    assert ds.labels.tolist() == [0, 0, 0, 1, 1, 1]
    for image, _ in items:
        assert image.dtype == torch.uint8 and image.ndim == 3 and image.shape[0] == 3
    assert items[0][0].shape == (3, 20, 24)
    assert items[2][0][:, 0, 0].tolist() == [200, 10, 20]  # palette index 1
    assert items[3][0][:, 0, 0].tolist() == [10, 20, 30]  # alpha dropped
    assert items[4][0].unique().tolist() == [100]  # gray replicated to RGB
    assert items[5][0].unique().tolist() == [255]  # 16-bit white stays white
    gray = ImageFolderDataset(folder, "train", mode="L")
    assert gray[0][0].shape == (1, 20, 24) and gray[4][0].unique().tolist() == [100]
    val = ImageFolderDataset(folder, "val")
    assert len(val) == 2 and val.labels.tolist() == [0, 1]


def test_image_folder_structure_errors(folder: Path) -> None:
    (folder / "train/bird").mkdir()
    with pytest.raises(ValueError, match=r"class folder .*train/bird holds no images"):
        ImageFolderDataset(folder, "train")
    save_image_to(folder / "train/bird/x.png", Image.new("RGB", (4, 4)))
    with pytest.raises(ValueError, match=r"only in train: \['bird'\]"):
        ImageFolderDataset(folder, "val")
    with pytest.raises(FileNotFoundError, match=r"test not found .*\['train', 'val'\]"):
        ImageFolderDataset(folder, "test")


def test_image_folder_skips_a_corrupt_file_with_a_warning(folder: Path) -> None:
    (folder / "train/cat/broken.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(40))
    with pytest.warns(UnreadableImageWarning, match=r"broken.png .*1 skipped so far"):
        ds = ImageFolderDataset(folder, "train", max_bad_fraction=0.2)
    assert len(ds) == 6 and "broken.png" not in [p.name for p, _ in ds.samples]
    (folder / "train/dog/broken2.jpg").write_bytes(b"garbage")
    with pytest.raises(ValueError, match=r"2 of 8 images .* are unreadable.*max_bad_fraction=0.2"):
        ImageFolderDataset(folder, "train", max_bad_fraction=0.2)


def test_image_folder_substitutes_an_image_that_fails_to_decode(folder: Path) -> None:
    # A truncated JPEG passes PIL's verify() (headers only) and fails when decoded.
    jpeg = folder / "train/cat/b.JPG"
    data = jpeg.read_bytes()
    jpeg.write_bytes(data[: data.index(b"\xff\xda") + 40])  # cut inside the scan data
    ds = ImageFolderDataset(folder, "train", max_bad_fraction=0.5)
    assert len(ds) == 6
    with pytest.warns(UnreadableImageWarning, match=r"b.JPG failed to decode"):
        image, label = ds[1]
    expected, expected_label = ds[2]  # the next image stands in, with its own label
    assert torch.equal(image, expected) and label == expected_label


# ---------------------------------------------------------------- splits and synthetic data


def test_balanced_subset_counts_and_determinism() -> None:
    ds = synthetic(num_classes=4, per_class=10, image_size=8, channels=1)
    idx = balanced_subset(ds, per_class=3, seed=0)
    assert ds.labels[idx].bincount().tolist() == [3, 3, 3, 3]
    assert torch.equal(idx, balanced_subset(ds, per_class=3, seed=0))
    assert not torch.equal(idx, balanced_subset(ds, per_class=3, seed=1))
    assert ds.labels[balanced_subset(ds, fraction=0.5, seed=0)].bincount().tolist() == [5] * 4
    uneven = ds.subset(torch.cat([torch.arange(8), torch.arange(8, 40, 4)]))  # class 0 has 10
    with pytest.raises(
        ValueError, match=r"class 1 \('class_1'\) has 2 examples, fewer than per_class=3"
    ):
        balanced_subset(uneven, per_class=3, seed=0)
    with pytest.raises(ValueError, match="exactly one"):
        balanced_subset(ds, per_class=1, fraction=0.5, seed=0)


def test_subset_keeps_a_datasets_own_kind_and_wraps_others() -> None:
    ds = synthetic(num_classes=4, per_class=3, image_size=8, channels=1)
    idx = torch.tensor([5, 0, 7])
    own = subset(ds, idx)  # the dataset's own subset: labels and classes kept
    assert isinstance(own, ArrayDataset) and own.labels.tolist() == ds.labels[idx].tolist()
    plain = [ds[i] for i in range(len(ds))]  # a dataset without ``subset``
    wrapped = subset(plain, idx)
    assert [wrapped[i][1] for i in range(len(wrapped))] == ds.labels[idx].tolist()


def test_split_holdout_keeps_an_image_of_every_class_on_both_sides() -> None:
    """round(0.1 x 5) is 0 and round(0.5 x 1) is 0: small classes still hold one out and keep one
    for training; a class of one image cannot, and says what to do."""
    small = ArrayDataset(
        images=torch.zeros(9, 1, 2, 2, dtype=torch.uint8),
        labels=torch.tensor([0, 0, 0, 0, 0, 1, 1, 2, 2]),
        classes=["a", "b", "c"],
    )
    train, held = split_holdout(small, 0.1, 0)
    assert sorted(small.labels[held].tolist()) == [0, 1, 2]
    assert sorted(set(small.labels[train].tolist())) == [0, 1, 2]
    _, most = split_holdout(small, 0.9, 0)
    assert small.labels[most].tolist().count(0) == 4  # all but one
    lonely = ArrayDataset(images=small.images[:6], labels=small.labels[:6], classes=["a", "b"])
    with pytest.raises(
        DataError, match=r"class 'b' has 1 image: a holdout \(data\.holdout\) needs 2"
    ):
        split_holdout(lonely, 0.1, 0)


def test_split_holdout_is_a_class_balanced_partition() -> None:
    ds = synthetic(num_classes=5, per_class=20, image_size=8, channels=1)
    train, held = split_holdout(ds, 0.1, 7)
    assert ds.labels[held].bincount().tolist() == [2] * 5
    assert sorted(torch.cat([train, held]).tolist()) == list(range(100))
    train2, held2 = split_holdout(ds, 0.1, 7)
    assert torch.equal(held, held2) and torch.equal(train, train2)


def test_synthetic_is_deterministic_and_learnable() -> None:
    a = synthetic(num_classes=4, per_class=16, image_size=8, channels=3, seed=3)
    b = synthetic(num_classes=4, per_class=16, image_size=8, channels=3, seed=3)
    assert torch.equal(a.images, b.images) and a.labels[:4].tolist() == [0, 1, 2, 3]
    torch.manual_seed(0)
    x, y = to_float(a.images).flatten(1), a.labels  # (64, 192)
    model = torch.nn.Linear(x.shape[1], 4)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(5):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]


def _process_data() -> int:
    """The bytes of this process's data (VmData: its private writable memory)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmData:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmData in /proc/self/status")


def test_a_presets_synthetic_data_is_built_in_bounded_memory() -> None:
    """``vitkit train --data synthetic --model ViT-S/16``: the preset's 1,000 classes at 224 px
    are 40,000 images, which one draw at once held in float32 (19 GB a tensor: OOM-killed on a
    24 GB machine). Built with the process's data limited to 1 GiB more than it holds
    (RLIMIT_DATA), each image made when it is read."""
    import resource

    from vitkit.config import DataConfig
    from vitkit.data.run_data import build_data
    from vitkit.presets import get_config

    model = get_config("ViT-S/16")
    assert (model.num_classes, model.image_size) == (1000, 224)
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    resource.setrlimit(resource.RLIMIT_DATA, (_process_data() + 2**30, hard))
    try:
        data = build_data(DataConfig(dataset="synthetic"), model, seed=0, in_chans=3)
        image, label = data.train[1001]
    finally:
        resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))
    assert (len(data.train), len(data.test), data.val_is_test) == (32_000, 8_000, True)
    assert image.shape == (3, 224, 224) and image.dtype == torch.uint8 and label == 1
    assert torch.equal(data.train[1001][0], image)  # the same image at every read


def test_synthetic_images_too_many_to_hold_are_made_when_read(monkeypatch) -> None:
    """Beyond ``HELD_PIXELS`` each image is made when read, its noise drawn from (seed, index):
    the same at every read and in every view, on its class's pattern (the held draw's), labels
    cycling through the classes; up to it, the draw held is the one every run made before."""
    from vitkit.data.sources import synthetic as made  # the module (vitkit.data's is the function)

    kw = dict(num_classes=4, per_class=16, image_size=8, channels=3, seed=3)
    held = made.synthetic_images(**kw)
    assert isinstance(held, ArrayDataset) and torch.equal(held.images, synthetic(**kw).images)
    monkeypatch.setattr(made, "HELD_PIXELS", 0)
    lazy = made.synthetic_images(**kw)
    assert isinstance(lazy, made.SyntheticImages) and torch.equal(lazy.labels, held.labels)
    images = torch.stack([lazy[i][0] for i in range(len(lazy))])  # (64, 3, 8, 8)
    assert torch.equal(images, torch.stack([lazy[i][0] for i in range(len(lazy))]))
    assert not torch.equal(images, held.images)  # other noise

    def class_means(x: torch.Tensor) -> torch.Tensor:  # image j * 4 + k is of class k
        return x.float().view(16, 4, 3, 8, 8).mean(0)  # (4, 3, 8, 8)

    # the held draw's patterns: the means of 16 images differ by the noise's (std 32 / 4 each)
    assert (class_means(images) - class_means(held.images)).abs().mean() < 20
    other = made.synthetic_images(**(kw | {"seed": 4}))
    assert (class_means(images) - class_means(torch.stack([x for x, _ in other]))).abs().mean() > 40
    view = lazy.subset(torch.tensor([5, 0, 63]))
    assert [int(y) for y in view.labels] == [1, 0, 3]
    assert all(torch.equal(view[j][0], images[i]) for j, i in enumerate([5, 0, 63]))
    reordered = lazy.in_class_order(["class_3", "class_2", "class_1", "class_0"])
    assert torch.equal(reordered[1][0], images[1]) and reordered[1][1] == 2
    options = BatchOptions(batch_size=16, train=True, seed=0, image_size=8, flip=True, uint8=True)
    batch, labels = next(iter(Batches(lazy, options).epoch(0)))  # read by index, as files are
    assert batch.shape == (16, 3, 8, 8) and labels.shape == (16,)


def test_array_dataset_validates() -> None:
    with pytest.raises(ValueError, match="uint8 tensor"):
        ArrayDataset(images=torch.zeros(2, 1, 4, 4), labels=torch.zeros(2).long(), classes=["a"])
    with pytest.raises(ValueError, match=r"labels must lie in \[0, 1\)"):
        ArrayDataset(
            images=torch.zeros(2, 1, 4, 4, dtype=torch.uint8),
            labels=torch.tensor([0, 1]),
            classes=["a"],
        )


# ---------------------------------------------------------------- transforms


def _batch(n: int = 64, c: int = 2, h: int = 7, w: int = 9) -> torch.Tensor:
    return torch.randint(0, 256, (n, c, h, w), generator=g(0), dtype=torch.uint8)


def test_random_crop_flip_identity_and_flip() -> None:
    x = _batch()
    assert torch.equal(random_crop_flip(x, padding=0, flip=False, generator=g(1)), x)
    out = random_crop_flip(x, padding=0, flip=True, generator=g(1))
    flipped = [not torch.equal(o, s) for o, s in zip(out, x, strict=True)]
    assert 10 < sum(flipped) < 54  # p 0.5 per sample
    for o, s, f in zip(out, x, flipped, strict=True):
        assert torch.equal(o, torch.flip(s, dims=[-1]) if f else s)


def test_random_crop_flip_crops_are_windows_of_the_padded_image() -> None:
    x, p = _batch(), 3
    out = random_crop_flip(x, padding=p, flip=False, generator=g(2))
    padded = torch.nn.functional.pad(x, (p, p, p, p))
    offsets = set()
    for o, s in zip(out, padded, strict=True):
        match = [
            (t, l)
            for t in range(2 * p + 1)
            for l in range(2 * p + 1)  # noqa: E741
            if torch.equal(o, s[:, t : t + x.shape[2], l : l + x.shape[3]])
        ]
        assert match, "an output is not a window of its padded input"
        offsets.add(match[0])
    assert len(offsets) > 10  # offsets vary across the batch
    again = random_crop_flip(x, padding=p, flip=False, generator=g(2))
    assert torch.equal(out, again)
    assert not torch.equal(out, random_crop_flip(x, padding=p, flip=False, generator=g(3)))


def test_per_sample_transforms_are_reproducible() -> None:
    image = torch.randint(0, 256, (3, 40, 30), generator=g(0), dtype=torch.uint8)
    crop = inception_crop(image, 16, generator=g(5))
    assert crop.shape == (3, 16, 16) and crop.dtype == torch.uint8
    assert torch.equal(crop, inception_crop(image, 16, generator=g(5)))
    assert not torch.equal(crop, inception_crop(image, 16, generator=g(6)))
    assert center_resize(image, 12).shape == (3, 12, 12)
    state = torch.get_rng_state()
    aug = rand_augment(image, generator=g(9))
    assert torch.equal(torch.get_rng_state(), state)  # the global RNG is left alone
    assert torch.equal(aug, rand_augment(image, generator=g(9)))
    assert aug.shape == image.shape and aug.dtype == torch.uint8


def test_every_reader_refuses_a_channel_mode_in_the_same_words() -> None:
    """The image as an array, a container's read options and a parquet stream check the channel
    mode with one function, so they say the same; only a container may leave it undecided."""
    from vitkit.data.decoded import ReadOptions
    from vitkit.data.sources.cells import CellReader
    from vitkit.data.stream import ParquetStream
    from vitkit.data.transforms import channels_of, check_mode, mode_of, pil_to_array

    expected = r"^mode='CMYK' is not valid: expected 'RGB' or 'L'$"
    with pytest.raises(ConfigError, match=expected):
        check_mode("CMYK")
    with pytest.raises(ConfigError, match=expected):
        pil_to_array(Image.new("RGB", (2, 2)), "CMYK")
    with pytest.raises(ConfigError, match=expected):
        ParquetStream([], name="s", classes=["a"], image_column="image", label_column="label",
                      label_names=None, cells=CellReader(None), mode="CMYK")  # fmt: skip
    with pytest.raises(
        ConfigError, match=r"^mode='CMYK' is not valid: expected 'RGB', 'L' or None$"
    ):
        ReadOptions(mode="CMYK")
    check_mode(None, undecided=True)
    with pytest.raises(ConfigError, match=r"^mode=None is not valid"):
        check_mode(None)
    assert [mode_of(c) for c in (1, 3)] == ["L", "RGB"]
    assert [channels_of(mode_of(c)) for c in (1, 3)] == [1, 3]


def test_to_float_and_preprocess() -> None:
    assert to_float(torch.tensor([0, 255], dtype=torch.uint8)).tolist() == [-1.0, 1.0]
    pre = Preprocess(image_size=8, in_chans=3)
    assert Preprocess.from_dict(pre.to_dict()) == pre
    with pytest.raises(ValueError, match="unknown config key 'img_size'"):
        Preprocess.from_dict({"img_size": 8})
    with pytest.raises(ValueError, match="normalization="):
        Preprocess(image_size=8, normalization="imagenet")
    out = preprocess_for_inference(Image.new("L", (20, 10), 255), pre)
    assert out.shape == (3, 8, 8) and torch.all(out == 1.0)
    gray = Preprocess(image_size=4, in_chans=1)
    rgb = torch.full((3, 6, 6), 0, dtype=torch.uint8)
    assert preprocess_for_inference(rgb, gray).shape == (1, 4, 4)


def test_preprocess_at_height_by_width() -> None:
    pre = Preprocess(image_size=(24, 48), in_chans=3)
    assert pre.to_dict()["image_size"] == [24, 48]  # as the checkpoint's config.json holds it
    assert Preprocess.from_dict(pre.to_dict()) == pre
    assert Preprocess(image_size=[8, 8]).image_size == 8  # a square pair is its int
    out = preprocess_for_inference(Image.new("RGB", (40, 30), (255, 0, 0)), pre)
    assert out.shape == (3, 24, 48) and torch.all(out[0] == 1.0)
    with pytest.raises(ConfigError, match=r"image_size=\(24, 0\) is not valid"):
        Preprocess(image_size=(24, 0))


# ---------------------------------------------------------------- batching


def _collect(it) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return list(it)


def _same(a: list, b: list) -> bool:
    return len(a) == len(b) and all(
        torch.equal(x, y) and torch.equal(lx, ly) for (x, lx), (y, ly) in zip(a, b, strict=True)
    )


def test_batches_resume_equals_uninterrupted_in_memory() -> None:
    ds = synthetic(num_classes=5, per_class=20, image_size=12, channels=3)
    loader = Batches(ds, BatchOptions(batch_size=16, train=True, seed=3, crop_padding=2, flip=True))
    assert loader.steps_per_epoch == 6  # 100 // 16, last partial batch dropped
    full = _collect(loader.epoch(1))
    assert _same(_collect(loader.epoch(1, start=4)), full[4:])
    assert all(x.shape == (16, 3, 12, 12) and x.dtype == torch.float32 for x, _ in full)
    assert _same(_collect(loader.epoch(1)), full)  # a second pass repeats exactly
    assert not torch.equal(loader.order(0), loader.order(1))  # each epoch its own order
    stream = loader.stream(start_step=6 + 5)  # epoch 1, batch 5, then on into epoch 2
    assert _same([next(stream) for _ in range(3)], full[5:] + _collect(loader.epoch(2))[:2])
    resized = Batches(
        ds, BatchOptions(batch_size=16, train=True, seed=3, image_size=20, inception_crop=True)
    )
    first = next(resized.epoch(0, start=2))
    assert first[0].shape == (16, 3, 20, 20) and _same([first], _collect(resized.epoch(0))[2:3])


def _truncated_pngs(root: Path, bad: set[tuple[str, int]]) -> Path:
    """root/{a,b}/{0..4}.png: 10 small PNGs, those named in ``bad`` cut after 30 bytes."""
    for c in ("a", "b"):
        for k in range(5):
            save_image_to(root / c / f"{k}.png", Image.new("RGB", (6, 6), (40 * k, 0, 0)))
            if (c, k) in bad:
                data = (root / c / f"{k}.png").read_bytes()
                (root / c / f"{k}.png").write_bytes(data[:30])
    return root


@pytest.mark.parametrize("workers", [0, 2])
def test_decoding_failures_in_loader_workers_count_in_the_main_process(
    tmp_path: Path, workers: int
) -> None:
    """Images that fail to decode (unverified) count against data.max_bad_fraction over every
    worker and epoch, as without workers: with workers each counted its own and forgot them
    with each epoch's loader, so 3 bad of 10 passed a bound of 2.5. An error a worker meets
    keeps its message (torch's first line was "Caught DataError in DataLoader worker process
    0.", all the command printed)."""
    root = _truncated_pngs(tmp_path / "f", {("a", 0), ("a", 2), ("b", 0)})
    options = BatchOptions(batch_size=2, train=False, image_size=4, num_workers=workers)
    loose = ImageFolderDataset(root, None, verify="none", mode="RGB", max_bad_fraction=0.5)
    with pytest.warns(UnreadableImageWarning) as said:
        for _ in range(2):  # each image counted once, however often read
            assert sum(len(y) for _, y in Batches(loose, options).epoch(0)) == 10
    assert len([w for w in said if "failed to decode" in str(w.message)]) == 3
    strict = ImageFolderDataset(root, None, verify="none", mode="RGB", max_bad_fraction=0.25)
    bound = r"^3 of 10 images in .* failed to decode, more than"
    with pytest.raises(DataError, match=bound), warnings.catch_warnings():
        warnings.simplefilter("ignore", UnreadableImageWarning)
        list(Batches(strict, options).epoch(0))
    none = _truncated_pngs(tmp_path / "none", {(c, k) for c in "ab" for k in range(5)})
    unreadable = ImageFolderDataset(none, None, verify="none", mode="RGB", max_bad_fraction=0.99)
    # a worker's error ("no image ... can be decoded") comes after the failures it met
    every = r"^10 of 10 images in .*none failed to decode"
    with pytest.raises(DataError, match=every), warnings.catch_warnings():
        warnings.simplefilter("ignore", UnreadableImageWarning)
        list(Batches(unreadable, options).epoch(0))


def test_batches_eval_in_order_with_partial_last_batch() -> None:
    ds = synthetic(num_classes=3, per_class=4, image_size=6, channels=1)
    loader = Batches(ds, BatchOptions(batch_size=5, train=False))
    batches = _collect(loader.epoch(0))
    assert [len(y) for _, y in batches] == [5, 5, 2] and loader.steps_per_epoch == 3
    assert torch.equal(torch.cat([x for x, _ in batches]), to_float(ds.images))
    assert torch.equal(torch.cat([y for _, y in batches]), ds.labels)


def test_batches_errors() -> None:
    ds = synthetic(num_classes=2, per_class=3, image_size=4, channels=1)
    with pytest.raises(ValueError, match=r"batch_size=8 is larger than the dataset \(6 examples\)"):
        Batches(ds, BatchOptions(batch_size=8, train=True))
    assert Batches(ds, BatchOptions(batch_size=8, train=False)).steps_per_epoch == 1
    with pytest.raises(ValueError, match=r"augmentation .* is for training"):
        Batches(ds, BatchOptions(batch_size=2, train=False, flip=True))
    with pytest.raises(ValueError, match="start=5"):
        Batches(ds, BatchOptions(batch_size=2, train=True)).epoch(0, start=5)  # raises at the call


def test_batch_options_from_the_config_sections() -> None:
    """A run's training batches take the train, data and model sections' values; its evaluation
    batches the model's resolution, in order and unaugmented."""
    from vitkit.config import replace
    from vitkit.recipes import get_recipe

    keys = {"data.flip": True, "data.crop_padding": 3, "data.rand_augment": True}
    keys |= {"data.num_workers": 3, "data.aug_repeats": 2}
    run = replace(get_recipe("smoke"), {**keys, "train.seed": 7, "model.image_size": (8, 12)})
    options = BatchOptions.training(run.train, run.data, run.model, shard=(1, 2))
    assert options == BatchOptions(
        batch_size=run.train.batch_size,
        train=True,
        seed=7,
        image_size=(8, 12),
        crop_padding=3,
        flip=True,
        rand_augment=True,
        aug_repeats=2,
        num_workers=3,
        shard=(1, 2),
        uint8=True,
    )
    ordered = BatchOptions.evaluation(run.model, batch_size=4, num_workers=2, uint8=True)
    assert ordered == BatchOptions(
        batch_size=4, train=False, image_size=(8, 12), num_workers=2, uint8=True
    )
    assert BatchOptions(batch_size=2, train=False, image_size=(5, 5)).image_size == 5
    with pytest.raises(ConfigError, match=r"inception_crop=True and crop_padding=2: choose one"):
        BatchOptions(batch_size=2, train=True, inception_crop=True, crop_padding=2)
    with pytest.raises(ConfigError, match=r"batch_size=3 does not split evenly across 2"):
        BatchOptions(batch_size=3, train=True, shard=(0, 2))


def test_batches_image_folder_resume_and_workers(folder: Path) -> None:
    ds = ImageFolderDataset(folder, "train")
    loader = Batches(
        ds,
        BatchOptions(
            batch_size=2, train=True, seed=1, image_size=10, inception_crop=True, flip=True
        ),
    )
    full = _collect(loader.epoch(0))
    assert len(full) == 3 and full[0][0].shape == (2, 3, 10, 10)
    assert _same(_collect(loader.epoch(0, start=1)), full[1:])
    workers = Batches(
        ds,
        BatchOptions(
            batch_size=2,
            train=True,
            seed=1,
            image_size=10,
            inception_crop=True,
            flip=True,
            num_workers=2,
        ),
    )
    assert _same(_collect(workers.epoch(0)), full)
    evaluation = _collect(
        Batches(ds, BatchOptions(batch_size=4, train=False, image_size=10)).epoch(0)
    )
    assert [y.tolist() for _, y in evaluation] == [[0, 0, 0, 1], [1, 1]]
    with pytest.raises(ValueError, match="image_size is required"):
        Batches(ds, BatchOptions(batch_size=2, train=False))


def test_non_square_batches_on_both_paths(folder: Path) -> None:
    ds = synthetic(num_classes=2, per_class=4, image_size=(6, 10), channels=3)
    assert ds.images.shape == (8, 3, 6, 10)
    in_memory = [
        Batches(
            ds, BatchOptions(batch_size=4, train=True, image_size=(8, 12), inception_crop=True)
        ),
        Batches(
            ds,
            BatchOptions(batch_size=4, train=True, image_size=(8, 12), crop_padding=2, flip=True),
        ),
        Batches(ds, BatchOptions(batch_size=4, train=False, image_size=(8, 12))),
        Batches(
            ds, BatchOptions(batch_size=4, train=True, crop_padding=2)
        ),  # the dataset's own 6x10
    ]
    for loader, hw in zip(in_memory, [(8, 12)] * 3 + [(6, 10)], strict=True):
        assert [tuple(x.shape) for x, _ in loader.epoch(0)] == [(4, 3, *hw)] * 2
    images = ImageFolderDataset(folder, "train")  # 6 images of several sizes
    per_sample = [
        Batches(
            images, BatchOptions(batch_size=3, train=True, image_size=(8, 12), inception_crop=True)
        ),
        Batches(images, BatchOptions(batch_size=3, train=True, image_size=(8, 12), crop_padding=1)),
        Batches(images, BatchOptions(batch_size=3, train=False, image_size=(8, 12))),
    ]
    for loader in per_sample:
        assert [tuple(x.shape) for x, _ in loader.epoch(0)] == [(3, 3, 8, 12)] * 2
    # batches of 5 and 1 split over 2 processes: the first process's last part is empty
    shard = Batches(
        images, BatchOptions(batch_size=5, train=False, image_size=(8, 12), shard=(0, 2))
    )
    assert [tuple(x.shape) for x, _ in shard.epoch(0)] == [(2, 3, 8, 12), (0, 3, 8, 12)]
    with pytest.raises(ConfigError, match=r"image_size=\(8, 12, 1\) is not valid"):
        Batches(ds, BatchOptions(batch_size=4, train=False, image_size=(8, 12, 1)))


class _SameImage:
    """A non-array dataset (per-sample path) whose every item is the same image."""

    def __init__(self, image: torch.Tensor, n: int) -> None:
        self.image, self.n = image, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.image, 0


def test_batches_augment_each_batch_and_sample_differently() -> None:
    # Identical images, so any difference between outputs comes from the augmentation's seeds.
    image = torch.randint(0, 256, (1, 8, 8), generator=g(0), dtype=torch.uint8)
    same = ArrayDataset(
        images=image.expand(32, -1, -1, -1).clone(), labels=torch.zeros(32).long(), classes=["x"]
    )
    for dataset in (same, _SameImage(image, 32)):
        loader = Batches(
            dataset, BatchOptions(batch_size=8, train=True, image_size=8, crop_padding=2)
        )
        (b0, _), (b1, _) = list(loader.epoch(0))[:2]
        assert len({x.numpy().tobytes() for x in b0}) > 4  # samples differ within a batch
        assert not torch.equal(b0, b1)  # and batches differ from each other


def test_folder_batches_leave_the_global_rng_alone(folder: Path) -> None:
    # The global RNG drives dropout and mixup and is saved with checkpoints; a DataLoader that
    # drew its base seed from it would make a resumed run differ from an uninterrupted one.
    batches = Batches(
        ImageFolderDataset(folder, "train"),
        BatchOptions(batch_size=2, train=True, image_size=8, flip=True),
    )
    before = torch.get_rng_state()
    for _ in batches.epoch(0):
        pass
    assert torch.equal(before, torch.get_rng_state())


def test_validation_val_takes_the_val_split_and_is_one_line_without_one(tmp_path: Path) -> None:
    from vitkit.config import DataConfig
    from vitkit.data.run_data import build_data
    from vitkit.presets import get_config

    images = Path(shutil.copytree(Path(__file__).parent / "data" / "folder_v1" / "images", tmp_path / "i"))  # fmt: skip
    model, cfg = get_config("ViT-mu/16"), DataConfig(dataset=str(images), validation="val")
    assert build_data(cfg, model, seed=0, in_chans=3).val_name.startswith("val/ (")
    shutil.rmtree(images / "val")
    with pytest.raises(ConfigError, match=r"^data.validation='val' but .*/i has no val split: use"):
        build_data(cfg, model, seed=0, in_chans=3)


def test_every_kind_of_data_spec_has_one_reader() -> None:
    """The kinds the data-spec grammar names (``config.DataSource.kind``) are the kinds the
    registry lists (data/sources/registry.py): a new kind is refused until a reader lists it."""
    import typing

    from vitkit.config.data import DataKind
    from vitkit.data.sources.registry import KINDS

    assert set(typing.get_args(DataKind)) == set(KINDS)
