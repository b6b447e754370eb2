"""What every test shares: a cache folder of its own and a CPU counted as without native bf16;
what tests of image files share: which files verification decoded; what the tests of shards,
Hugging Face datasets and streams share: the photos as a folder, tar shards and tables."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from PIL import Image

from photos import CLASSES, SIZES, pixels, rows
from vitkit.cli import main
from vitkit.data import ImageFolderDataset

# One thread for what this process computes: the suite's models are tiny, where a second OpenMP
# thread costs more than it computes, and far more when the cores are busy (a 2x16x32 linear: 9 us
# alone, 155 us with two threads on 2 loaded cores; tests/test_intermediates.py: 64 s -> 11 s).
# The commands the tests start are processes of their own, with every core vitkit would use.
torch.set_num_threads(1)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under ``pytest -n`` (make test), the tests that start several processes (torchrun, gloo)
    run one after another on one worker (``--dist loadgroup``): two jobs of ranks at once on 2
    cores starved each other's collectives."""
    for item in items:
        if item.get_closest_marker("distributed") is not None:
            item.add_marker(pytest.mark.xdist_group("distributed"))


@pytest.fixture(autouse=True)
def home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh ``$VITKIT_HOME`` for each test (verification findings, downloads), never the
    user's; outside ``tmp_path``, where a folder would read as a class of an ImageFolder.
    Subprocesses inherit it."""
    path = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("VITKIT_HOME", str(path))
    return path


@pytest.fixture(autouse=True)
def cpu_without_bf16(monkeypatch: pytest.MonkeyPatch) -> None:
    """``auto`` precision decides as on a CPU without native bf16 (``runtime.arithmetic``), in
    this process and its subprocesses: the figures tests assert are fp32's on every machine. A
    test of the decision sets ``VITKIT_CPU_BF16`` itself, or removes it to read the machine."""
    from vitkit.runtime.arithmetic import process_rule

    monkeypatch.setenv("VITKIT_CPU_BF16", "none")
    process_rule.cache_clear()  # each test's process decides anew, from what stands in for its CPU


@pytest.fixture
def decodes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[str]:
    """The image files under ``tmp_path`` whose pixels verification decodes to tell grey from
    colour (``verify.grey_kind`` of a mode that is not one-channel; ``verify()`` decodes
    nothing), by name (the file holding the same bytes), in order. The pass must run in this
    process (fewer than ``PARALLEL_MIN_FILES``)."""
    from PIL import ImageMode

    from vitkit.data import verify

    seen: list[str] = []
    grey_kind = verify.grey_kind

    def counting(source: bytes, mode: str, **bounds: int) -> str | None:
        if ImageMode.getmode(mode).basemode != "L":
            named = [p.name for p in sorted(tmp_path.rglob("*")) if p.is_file()
                     and p.read_bytes() == source]  # fmt: skip
            seen.append(named[0] if named else "<bytes of no file>")
        return grey_kind(source, mode, **bounds)

    monkeypatch.setattr(verify, "grey_kind", counting)
    return seen


# ------------------------------------------------------- the photos as a folder, shards, tables


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> Path:
    """photos/{train,val,test}/<class>/: PNGs and JPEGs, RGB and one greyscale PNG per class."""
    root = tmp_path_factory.mktemp("data") / "photos"
    for s, (split, n) in enumerate(SIZES.items()):
        for k, name in enumerate(CLASSES):
            folder = root / split / name
            folder.mkdir(parents=True)
            for i in range(n):
                image = Image.fromarray(pixels(k, 1000 * s + 100 * k + i))
                if i == 1:
                    image.convert("L").save(folder / f"{i}.png")
                else:
                    image.save(folder / f"{i}.{'jpg' if i % 2 else 'png'}", quality=95)
    return root


@pytest.fixture(scope="module")
def shards(photos: Path, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("data") / "shards"
    assert main(["data", "pack", str(photos), str(out), "--shard-size", "7"]) == 0
    return out


@pytest.fixture(scope="module")
def hf_data(photos: Path, tmp_path_factory) -> dict[str, Path]:
    """The photos as a save_to_disk folder (train/validation/test) and as parquet files (two
    train files of row groups of 5 rows, shuffled; validation; test)."""
    datasets = pytest.importorskip("datasets")
    features = datasets.Features(
        {"image": datasets.Image(), "label": datasets.ClassLabel(names=list(CLASSES))}
    )
    tables = {
        hf_name: datasets.Dataset.from_dict(
            rows(ImageFolderDataset(photos, split)), features=features
        )
        for hf_name, split in (("train", "train"), ("validation", "val"), ("test", "test"))
    }
    root = tmp_path_factory.mktemp("hf")
    datasets.DatasetDict(tables).save_to_disk(root / "saved")
    parquet = root / "parquet" / "data"
    parquet.mkdir(parents=True)
    train = tables["train"].shuffle(seed=0)
    half = len(train) // 2
    train.select(range(half)).to_parquet(parquet / "train-00000-of-00002.parquet", batch_size=5)
    train.select(range(half, len(train))).to_parquet(
        parquet / "train-00001-of-00002.parquet", batch_size=5
    )
    for name in ("validation", "test"):
        tables[name].to_parquet(parquet / f"{name}-00000-of-00001.parquet", batch_size=5)
    return {"saved": root / "saved", "parquet": root / "parquet"}


@pytest.fixture
def hf_cache(tmp_path_factory, monkeypatch) -> None:
    """datasets' cache (parquet converted to Arrow) in a folder of the test's, not the user's."""
    datasets = pytest.importorskip("datasets")
    monkeypatch.setattr(
        datasets.config, "HF_DATASETS_CACHE", tmp_path_factory.getbasetemp() / "hf-cache"
    )
