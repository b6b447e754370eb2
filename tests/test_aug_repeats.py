"""Repeated augmentation (data.aug_repeats, DeiT's RASampler): each epoch serves about N/r images r
times each, differently augmented, on one process or several, and resumes exactly."""

from __future__ import annotations

from collections import Counter

import pytest
import torch

from vitkit.config import ConfigError, DataConfig
from vitkit.data import ArrayDataset, Batches, BatchOptions
from vitkit.data.loader import Augment, generator, repeated

N, B, R = 48, 12, 3  # 4 batches an epoch: 16 images, 3 copies each


class _Indexed:
    """A dataset read by index (the per-sample path) over ``arrays``."""

    def __init__(self, arrays: ArrayDataset) -> None:
        self.arrays = arrays

    def __len__(self) -> int:
        return len(self.arrays)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        return self.arrays.images[index], int(self.arrays.labels[index])


def _arrays() -> ArrayDataset:
    """N distinct random images whose label is their index, so a batch's labels name its images."""
    images = torch.randint(0, 256, (N, 3, 32, 32), generator=generator(0), dtype=torch.uint8)
    return ArrayDataset(images=images, labels=torch.arange(N), classes=[str(i) for i in range(N)])


DATASETS = {"in_memory": _arrays(), "per_sample": _Indexed(_arrays())}


def _batches(dataset, **options) -> Batches:
    kw = dict(batch_size=B, train=True, seed=4, image_size=8, inception_crop=True, flip=True)
    kw |= dict(uint8=True)
    return Batches(dataset, BatchOptions(**(kw | options)))


def _epoch(batches: Batches, epoch: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return list(batches.epoch(epoch))


@pytest.mark.parametrize("path", sorted(DATASETS))
def test_each_chosen_image_comes_r_times_differently_augmented(path: str) -> None:
    batches = _batches(DATASETS[path], aug_repeats=R)
    assert batches.steps_per_epoch == N // B  # an epoch keeps its length
    seen = []
    for epoch in (0, 1):
        served = _epoch(batches, epoch)
        labels = torch.cat([y for _, y in served])
        counts = Counter(labels.tolist())
        assert len(counts) == N // R and set(counts.values()) == {R}  # the others: 0 times
        assert set(counts) == set(batches.order(epoch).tolist())
        seen.append(set(counts))
        images = torch.cat([x for x, _ in served])
        for i in counts:  # the r copies of an image are augmented differently
            copies = images[labels == i]
            assert len({c.numpy().tobytes() for c in copies}) == R
    assert seen[0] != seen[1]  # each epoch its own images


@pytest.mark.parametrize("path", sorted(DATASETS))
def test_two_processes_split_the_one_process_batches_and_spread_the_copies(path: str) -> None:
    one = _epoch(_batches(DATASETS[path], aug_repeats=R), 0)
    for world in (2, 3, 4):
        parts = [
            _epoch(_batches(DATASETS[path], aug_repeats=R, shard=(rank, world)), 0)
            for rank in range(world)
        ]
        for b, (images, labels) in enumerate(one):
            assert torch.equal(torch.cat([p[b][0] for p in parts]), images)
            assert torch.equal(torch.cat([p[b][1] for p in parts]), labels)
            if world >= R:  # every process holds at most one copy of an image
                for p in parts:
                    assert len(set(p[b][1].tolist())) == len(p[b][1])


@pytest.mark.parametrize("path", sorted(DATASETS))
def test_a_stream_resumed_mid_epoch_serves_what_the_uninterrupted_one_does(path: str) -> None:
    batches = _batches(DATASETS[path], aug_repeats=R)
    stream = batches.stream()
    full = [next(stream) for _ in range(7)]  # into the second epoch
    again = _batches(DATASETS[path], aug_repeats=R).stream(start_step=2)  # a fresh process
    for x, y in full[2:]:
        x2, y2 = next(again)
        assert torch.equal(x, x2) and torch.equal(y, y2)


@pytest.mark.parametrize("path", sorted(DATASETS))
def test_one_repeat_serves_the_batches_of_before(path: str) -> None:
    """aug_repeats=1 draws what vitkit drew before repeated augmentation: the order from
    (seed, 0, epoch), per sample the augmentation from (seed, 2, epoch, index), so old runs
    resume exactly; under repeats, copy 0 of an image keeps that draw."""
    dataset = DATASETS[path]
    plain = _batches(dataset)
    augment = Augment(8, 0, True, True)
    expected = torch.randperm(N, generator=generator(4, 0, 1))
    assert torch.equal(plain.order(1), expected)
    (images, labels), *_ = _epoch(plain, 1)
    assert torch.equal(labels, expected[:B])
    assert torch.equal(images, next(_batches(dataset, aug_repeats=1).epoch(1))[0])
    if path == "in_memory":  # one draw for the whole batch, from (seed, 1, epoch, batch)
        draw = augment(dataset.images[expected[:B]], generator(4, 1, 1, 0))
        assert torch.equal(images, draw)
    else:
        for image, i in zip(images, labels.tolist(), strict=True):
            draw = augment(dataset.arrays.images[i][None], generator(4, 2, 1, i))[0]
            assert torch.equal(image, draw)
        (images, labels), *_ = _epoch(_batches(dataset, aug_repeats=R), 1)
        first = {}  # each image's first copy in the batch: copy 0 (copy-major layout)
        for image, i in zip(images, labels.tolist(), strict=True):
            first.setdefault(i, image)
        for i, image in first.items():
            draw = augment(dataset.arrays.images[i][None], generator(4, 2, 1, i))[0]
            assert torch.equal(image, draw)


def test_copies_are_spread_over_processes_whenever_there_are_r_of_them() -> None:
    """The layout alone, at DeiT's batch (1024, r=3 not dividing it) and at small ones: within
    a batch split into ``world`` >= r contiguous parts, no part holds two copies of an image."""
    for n, batch, r, world in [(4096, 1024, 3, 8), (4096, 1024, 3, 4), (200, 12, 3, 3)]:
        order, _ = repeated(torch.randperm(n, generator=generator(1)), r, batch)
        process = torch.arange(batch) * world // batch
        for b in range(n // batch):
            served = order[b * batch : (b + 1) * batch] * world + process
            assert len(served.unique()) == batch


def test_repeats_are_for_training_and_not_for_a_stream() -> None:
    with pytest.raises(ConfigError, match=r"aug_repeats=3 is for training"):
        BatchOptions(batch_size=4, train=False, aug_repeats=3)
    with pytest.raises(ConfigError, match=r"aug_repeats=0 is not valid: expected an integer >= 1"):
        BatchOptions(batch_size=4, train=True, aug_repeats=0)
    with pytest.raises(ConfigError, match=r"data.aug_repeats=2 is not valid: expected 1 with"):
        DataConfig(dataset="hf:/data/x", streaming=True, aug_repeats=2)
