"""What a run reads from its datasets (read when it is prepared, prepare.py), checked before
anything is written: the batches every process takes its part of, the cadence in steps, and the
data few-shot evaluation reads (``train.fewshot_data``).

Every process walks the same global batches (``train.batch_size``) and keeps its ``world``-th of
each; batches are uint8, scaled on the device, page-locked for a GPU so that their copies
overlap compute. The validation split is what the run evaluates on its cadence; a test split
apart from it is evaluated once at the end (``final_test``); ``split`` is what metrics.jsonl
calls the evaluations.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, cast

import torch

from ..config import RunConfig, data_names, size_hw
from ..config.dicts import recorded_as
from ..data import Batches
from ..data.decoded import DecodedImages
from ..data.in_memory import decode_into_memory
from ..data.loader import BatchOptions
from ..data.run_data import Images, RunData, batches_of, evaluation_split
from ..errors import ConfigError
from ..runtime.machine import cores_per_process, local_processes
from .cadence import Cadence


@dataclass
class Inputs:
    """A run's data and batches (``read_inputs``)."""

    data: RunData
    train_batches: Batches  # this process's part of every training batch
    evaluation: Batches  # the validation split's, in order
    final_test: Batches | None  # the test split's, when it is not the validation split
    split: str  # "val", or "test" when the validation split is the test split
    steps_per_epoch: int  # optimizer steps
    cadence: Cadence
    fewshot_data: dict[str, tuple[Images, Images]]  # train.fewshot_data: {name: (train, test)}


def read_inputs(
    run: RunConfig,
    data: RunData,
    *,
    device: torch.device,
    shard: tuple[int, int],
    recorded: dict[str, Any] | None,
) -> Inputs:
    """The inputs of ``run`` (decided for this machine: ``runtime.machine.decide``) on ``data``
    for process ``shard`` = (rank, world) on ``device``; ``recorded``: the run directory's
    config.json as read. A ``ConfigError`` when the data does not fit the run (classes that are
    not the model's; a global batch that does not split across the processes: ``BatchOptions``;
    more repeats than training images, unless ``recorded`` holds them)."""
    tc = run.train
    if tc.objective == "classification" and len(data.classes) != run.model.num_classes:
        raise ConfigError(
            f"model.num_classes={run.model.num_classes} but the dataset has {len(data.classes)} "
            "classes"
        )
    _check_repeats(run, data.train, recorded)
    data = _kept_in_memory(run, data, recorded)
    pinned = device.type == "cuda"
    options = BatchOptions.training(tc, run.data, run.model, shard=shard, pin_memory=pinned)
    train_batches = batches_of(data.train, options)
    ordered = BatchOptions.evaluation(
        run.model,
        batch_size=tc.batch_size,  # larger starves the overlap of input and compute
        num_workers=options.num_workers,
        shard=shard,
        uint8=True,
        pin_memory=pinned,
    )
    evaluation = batches_of(data.val, ordered)
    final_test = (
        batches_of(data.test, ordered) if data.test is not None and not data.val_is_test else None
    )
    steps_per_epoch = train_batches.steps_per_epoch // tc.accum_steps
    if steps_per_epoch < 1:
        raise ConfigError(
            f"an epoch has {train_batches.steps_per_epoch} batches of {tc.batch_size}, fewer than "
            f"train.accum_steps={tc.accum_steps}"
        )
    cadence = Cadence.from_config(tc, steps_per_epoch, run.optim.warmup)
    if tc.fewshot:
        from ..eval.fewshot import check_shots

        check_shots(data.train, tc.fewshot)
    return Inputs(
        data=data,
        train_batches=train_batches,
        evaluation=evaluation,
        final_test=final_test,
        split="test" if data.val_is_test else "val",
        steps_per_epoch=steps_per_epoch,
        cadence=cadence,
        fewshot_data=read_fewshot_data(run),  # read and checked before the run
    )


def _kept_in_memory(run: RunConfig, data: RunData, recorded: dict[str, Any] | None) -> RunData:
    """``data`` with a folder's training images decoded once, kept in memory at twice the model's
    resolution (``data.in_memory``), where they fit ``data.keep_decoded_mb`` (a process's
    budget); said in its notes. Not for a run begun before the key: its batches were crops of
    the files."""
    budget, train = run.data.keep_decoded_mb, data.train
    if not budget or run.data.source.kind != "folder" or train.read_as != "decoded":
        return data
    if recorded is not None and "keep_decoded_mb" not in recorded.get("data", {}):
        return data  # resumed as it began: its batches are crops of the files
    h, w = (2 * side for side in size_hw(run.model.image_size))
    mib = len(train) * train.channels * h * w / 2**20
    # the budget is one process's: whether the images are kept decides the pixels of every
    # batch, so it may not depend on how many processes run (a resume on another count would
    # not continue exactly); each of torchrun's processes keeps every image, since any image may
    # fall in its part of a later batch, and the note says what the machine holds
    if mib > budget:
        note = f"decoded every epoch: at {h}x{w} px they would take {mib:,.0f} MiB in memory"
        note += f", over data.keep_decoded_mb={budget:,}"
        return dataclasses.replace(data, notes=[*data.notes, note])
    local = local_processes()
    # none: this process decodes them; else with its share of the machine's cores
    workers = run.data.num_workers and cores_per_process()
    decoded = cast(DecodedImages, train)  # a folder's, read as decoded: checked above
    kept = decode_into_memory(decoded, (h, w), workers=workers or 0)
    held = f"{mib:,.0f} MiB" + (
        f" in each of this machine's {local} processes" if local > 1 else ""
    )
    note = f"decoded once, kept in memory at {h}x{w} px ({held}; data.keep_decoded_mb)"
    return dataclasses.replace(data, train=kept, notes=[*data.notes, note])


def _check_repeats(run: RunConfig, train: Images, recorded: dict[str, Any] | None) -> None:
    """Repeated augmentation serves ceil(N/r) images r times an epoch: r >= N would serve one
    image all epoch long, refused unless ``recorded`` (the run directory's config.json) holds
    that r."""
    repeats = run.data.aug_repeats
    if repeats == 1 or repeats < len(train):  # 1: none (a stream's length is not known ahead)
        return
    old = recorded_as(RunConfig, recorded)
    if old is not None and old.data.aug_repeats == repeats:
        return  # a run begun before this check continues as it began
    raise ConfigError(
        f"data.aug_repeats={repeats:,} is not valid for {len(train):,} training images: "
        "expected fewer repeats than images (an epoch serves ceil(N/r) images r times each; "
        "here one)"
    )


def read_fewshot_data(run: RunConfig) -> dict[str, tuple[Images, Images]]:
    """The data of ``train.fewshot_data`` by ``data_names``: (the training images shots are
    drawn from, every class holding enough of them; the images classified), read with the
    model's channels as ``vitkit fewshot`` reads them."""
    from ..config.fewshot import SHOTS
    from ..eval.fewshot import check_shots

    splits = {}
    for name, spec in zip(data_names(run.train.fewshot_data), run.train.fewshot_data, strict=True):
        split = evaluation_split(spec, None, run.model, source="train.fewshot_data")
        if split.train is None:
            raise ConfigError(
                f"train.fewshot_data: {split.name} has no training images to draw shots from "
                "(a stream, or one set of images): give data with a train split and a test split"
            )
        check_shots(split.train, run.train.fewshot or SHOTS)
        splits[name] = (split.train, split.dataset)
    return splits
