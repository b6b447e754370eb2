"""A folder's training images decoded once and kept in memory (``data.keep_decoded_mb``): the same
pixels as resizing each decoded image, by any number of processes; a run decides it by its
budget and says so; a run recorded before the key keeps decoding its files (its batches)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from helpers import colour_image, save_image_to
from vitkit.config import replace
from vitkit.data import ImageFolderDataset
from vitkit.data.in_memory import decode_into_memory
from vitkit.data.run_data import build_data
from vitkit.data.transforms import resize
from vitkit.recipes import get_recipe
from vitkit.train.inputs import read_inputs


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """train/ of 2 classes, 5 colour images each of 6x5 px, and a truncated JPEG; val/."""
    root = tmp_path_factory.mktemp("kept")
    for split, seeds in (("train", range(10)), ("val", range(100, 104))):
        for seed in seeds:
            save_image_to(root / split / f"c{seed % 2}" / f"{seed}.png", colour_image(seed))
    whole = (root / "train" / "c0" / "0.png").read_bytes()
    (root / "train" / "c1" / "cut.png").write_bytes(whole[: len(whole) // 2])
    return root


def test_kept_images_are_the_decoded_images_resized(folder: Path) -> None:
    """Image i kept is image i decoded and resized (a truncated file replaced as reading it
    replaces it), with its label; decoded in this process or in workers, the same bytes."""
    images = ImageFolderDataset(
        folder / "train", None, mode="RGB", verify="none", max_bad_fraction=0.5
    )
    with pytest.warns(UserWarning, match="cut.png failed to decode"):
        kept = decode_into_memory(images, (8, 12), workers=0)
    assert kept.images.shape == (len(images), 3, 8, 12) and kept.classes == images.classes
    expected = [(resize(image, (8, 12)), label) for image, label in images]  # said once, above
    assert all(
        torch.equal(kept.images[i], image) and int(kept.labels[i]) == label
        for i, (image, label) in enumerate(expected)
    )
    in_workers = decode_into_memory(images, (8, 12), workers=2)
    assert torch.equal(in_workers.images, kept.images)
    assert torch.equal(in_workers.labels, kept.labels)


def test_a_run_keeps_them_within_its_budget_and_says_so(folder: Path, monkeypatch) -> None:
    run = replace(
        get_recipe("smoke"),
        {
            "data.dataset": str(folder),
            "data.num_workers": 0,
            "data.max_bad_fraction": 0.5,  # cut.png, skipped
            "model.num_classes": 2,
            "train.batch_size": 4,
            "train.device": "cpu",
        },
    )
    with pytest.warns(UserWarning, match="skipping unreadable image .*cut.png"):
        data = build_data(run.data, run.model, seed=0, in_chans=3)
    cpu = torch.device("cpu")

    def inputs(run, recorded=None):
        return read_inputs(run, data, device=cpu, shard=(0, 1), recorded=recorded).data

    side = 2 * run.model.image_size
    kept = inputs(run)
    assert kept.train.read_as == "memory" and kept.train.images.shape[-2:] == (side, side)
    assert f"decoded once, kept in memory at {side}x{side} px" in kept.notes[-1]
    assert kept.val is data.val  # evaluation reads its files as before
    # over the budget (7.5 MiB of images at 512 px a side), or none: decoded every epoch
    large = replace(run, {"model.image_size": 256, "data.keep_decoded_mb": 1})
    over = inputs(large)
    assert (
        over.train is data.train
        and "8 MiB in memory, over data.keep_decoded_mb=1" in over.notes[-1]
    )
    assert inputs(replace(run, {"data.keep_decoded_mb": 0})).train is data.train
    # the budget is a process's (the pixels of a batch may not depend on how many processes run):
    # 4 processes of torchrun keep them as one does, each a copy, and the note says so
    fits_one = replace(run, {"model.image_size": 256, "data.keep_decoded_mb": 16})
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)  # one process
    one = inputs(fits_one)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    four = inputs(fits_one)
    assert torch.equal(four.train.images, one.train.images)
    assert "(8 MiB in each of this machine's 4 processes; data.keep_decoded_mb)" in four.notes[-1]
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    # a run directory recorded before the key: resumed as it began, from the files
    before = run.to_dict()
    del before["data"]["keep_decoded_mb"]
    assert inputs(run, recorded=before).train is data.train
    assert inputs(run, recorded=run.to_dict()).train.read_as == "memory"


def test_a_killed_run_kept_in_memory_resumes_as_if_never_stopped(
    folder: Path, tmp_path: Path, caplog
) -> None:
    """A run whose training images are kept in memory, killed after a checkpoint mid-epoch,
    resumes to the uninterrupted run's log and weights: its batches (inception crops and flips
    drawn from the kept images) are a function of seed, epoch and index."""
    import logging

    from helpers import logged_metrics, stopped_copy
    from photos import same_weights
    from vitkit import fit

    run = replace(
        get_recipe("smoke"),
        {"data.dataset": str(folder), "data.num_workers": 0, "data.max_bad_fraction": 0.5,
         "model.num_classes": 2, "train.batch_size": 4, "train.device": "cpu",
         "train.duration": "6st", "train.save_every": "2st", "train.eval_every": "3st",
         "train.log_every": "1st", "train.keep_last": 3, "data.flip": True,
         "data.inception_crop": True, "model.dropout_rate": 0.1},
    )  # fmt: skip
    full = tmp_path / "full"
    with pytest.warns(UserWarning), caplog.at_level(logging.INFO, logger="vitkit.train.loop"):
        fit(run, run_dir=full, progress=False)
    assert "decoded once, kept in memory at 32x32 px" in caplog.text  # 9 images: 2 an epoch
    resumed = stopped_copy(full, tmp_path / "resumed", step=4)
    with pytest.warns(UserWarning):
        fit(run, run_dir=resumed, progress=False)
    assert logged_metrics(resumed) == logged_metrics(full) and len(logged_metrics(full)) == 8
    same_weights(full / "checkpoints" / "step_00000006", resumed / "checkpoints" / "step_00000006")
