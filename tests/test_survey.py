"""vitkit.data.survey: the median shorter side of a split's images, from their headers, chosen
from the seed, cached beside the verification, and the hint a run gives when its model sees
under a quarter of it."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from helpers import exif_photo
from vitkit.data import ImageFolderDataset
from vitkit.data import survey as sv


def _folder(root: Path, sizes: list[tuple[int, int]]) -> Path:
    """Photographs of (height, width) upright, every other one stored turned with its EXIF
    orientation tag (6: a quarter turn), in two classes."""
    rng = np.random.default_rng(0)
    for k, (h, w) in enumerate(sizes):
        path = root / ("a" if k % 2 else "b") / f"{k:02d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        picture = Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
        exif_photo(path, picture, 6 if k % 2 else 1)
    return root


def test_the_median_shorter_side_comes_from_the_headers_and_is_cached(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sizes = [(40, 64), (72, 48), (30, 90), (100, 100), (56, 80)]  # shorter: 40 48 30 100 56
    images = ImageFolderDataset(_folder(tmp_path / "data", sizes), None)
    decoded: list[int] = []
    monkeypatch.setattr(sv, "upright_size", lambda data: decoded.append(1) or _size(data))
    found = sv.shorter_sides(images, seed=0)
    assert found == sv.Sides(median=48, images=5, sampled=5) and len(decoded) == 5
    again = sv.shorter_sides(images, seed=0)
    assert again == found and len(decoded) == 5  # read from the cache
    chosen = sv.shorter_sides(images, seed=1, sample=3)  # another choice: read again
    assert chosen is not None and chosen.sampled == 3 and len(decoded) == 8
    touched = images.source.path(0)
    st = os.stat(touched)
    os.utime(touched, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
    fresh = ImageFolderDataset(tmp_path / "data", None)
    assert sv.shorter_sides(fresh, seed=0) == found and len(decoded) == 13  # a new state


def _size(data: bytes) -> tuple[int, int]:
    from vitkit.data.codec import upright_size

    return upright_size(data)


def test_a_model_under_a_quarter_of_the_images_gets_a_hint() -> None:
    sides = sv.Sides(median=375, images=1000, sampled=1000)
    hint = sides.hint((32, 32))
    assert hint is not None and hint.startswith("hint: the model sees 32x32 px, under a quarter")
    assert "(375 px)" in hint
    assert sides.hint((96, 96)) is None  # 4 x 96 = 384 >= 375
    assert sides.hint((224, 224)) is None


def test_a_run_states_its_images_size_and_hints_when_the_model_sees_a_quarter_of_it(
    tmp_path: Path,
) -> None:
    """The scratch recipe's 32 px on photographs of about 200 px: the run's statement of its
    data gives the median shorter side and the hint; at 64 px, the median alone. The same for
    the folder's tar shards, which verify at the level ``data.verify`` says, as a folder does."""
    from vitkit.config import replace
    from vitkit.data.run_data import build_data
    from vitkit.data.sources.shards import pack_folder
    from vitkit.recipes import get_recipe

    sizes = [(200, 260), (180, 240), (240, 200), (210, 300)]  # shorter sides 200 180 200 210
    root = _folder(tmp_path / "data", sizes)
    pack_folder(root, tmp_path / "shards", shard_size=4)
    for dataset in (str(root), f"wds:{tmp_path / 'shards'}"):
        run = replace(
            get_recipe("scratch"),
            {"data.dataset": dataset, "data.validation": "holdout", "data.verify": "header"},
        )
        notes = build_data(run.data, run.model, seed=0).notes
        line = "images: median shorter side 200 px (the headers of all 4 training images, upright)"
        assert line in notes, (dataset, notes)
        assert any(n.startswith("hint: the model sees 32x32 px") for n in notes)
        at_64 = replace(run, {"model.image_size": 64})
        data = build_data(at_64.data, at_64.model, seed=0)
        assert not any(n.startswith("hint:") for n in data.notes)
        assert data.train.verify == "header" and data.channels == 3
