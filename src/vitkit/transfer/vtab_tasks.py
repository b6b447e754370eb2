"""VTAB-1k's 19 tasks [Zhai et al. 2019; P §4.1, App. D] and their data: the tasks by group, the
task folders of a root found by name (the prepared release's layout, NOAH's and VPT's
vtab-1k/), and each run's data staged as its stage reads it (train800/val200 to choose,
train800val200/test to report).
"""

from __future__ import annotations

import dataclasses
import hashlib
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from ..compose import check_data_exists
from ..config import DataConfig, ModelConfig, data_source, normalise_data
from ..data.decoded import DecodedImages
from ..data.run_data import RunData, build_data
from ..data.sources.lists import LISTS, STAGES, present
from ..data.sources.registry import listing
from ..data.splits import subset
from ..errors import ConfigError, DataError

Group = Literal["natural", "specialized", "structured"]


GROUPS: tuple[Group, ...] = ("natural", "specialized", "structured")


@dataclass(frozen=True)
class Task:
    """One VTAB-1k task: its name (as the ViT and big_vision tables write it), its group, the
    folder the prepared VTAB-1k release names it by (and other spellings met in the wild), its
    classes, the TFDS dataset and what is predicted, and VTAB's split rule (TFDS slices)."""

    name: str
    group: Group
    folder: str
    classes: int
    source: str
    train800: str
    val200: str
    test: str
    aliases: tuple[str, ...] = ()


def _task(
    name: str,
    group: Group,
    folder: str,
    classes: int,
    source: str,
    val: str,
    test: str,
    *aliases: str,
) -> Task:
    # VTAB-1k takes the first 800 of a task's train split and the first 200 of its val split
    return Task(name, group, folder, classes, source, "train[:800]", f"{val}[:200]", test, aliases)


# google-research/task_adaptation's data/*.py (the TFDS dataset, VTAB's val and test splits);
# the folder names of the prepared VTAB-1k release (NOAH's and VPT's vtab-1k/).
N: Group = "natural"


SP: Group = "specialized"


ST: Group = "structured"


# fmt: off
TASKS: tuple[Task, ...] = (
    _task("caltech101", N, "caltech101", 102, "caltech101", "train[90%:]", "test"),
    _task("cifar100", N, "cifar", 100, "cifar100", "train[90%:]", "test", "cifar"),
    _task("dtd", N, "dtd", 47, "dtd", "validation", "test"),
    _task("oxford_flowers102", N, "oxford_flowers102", 102, "oxford_flowers102", "validation",
          "test", "flowers102"),
    _task("oxford_iiit_pet", N, "oxford_iiit_pet", 37, "oxford_iiit_pet", "train[80%:]", "test",
          "pets"),
    _task("sun397", N, "sun397", 397, "sun397/tfds", "validation", "test"),
    _task("svhn", N, "svhn", 10, "svhn_cropped", "train[90%:]", "test"),
    _task("patch_camelyon", SP, "patch_camelyon", 2, "patch_camelyon", "validation", "test",
          "pcam"),
    _task("eurosat", SP, "eurosat", 10, "eurosat/rgb", "train[60%:]", "train[80%:]"),
    _task("resisc45", SP, "resisc45", 45, "resisc45", "train[60%:]", "train[80%:]"),
    _task("diabetic_retinopathy", SP, "diabetic_retinopathy", 5,
          "diabetic_retinopathy_detection/btgraham-300", "validation", "test", "retinopathy"),
    _task("clevr_count", ST, "clevr_count", 8, "clevr: count_all", "train[90%:]", "validation"),
    _task("clevr_distance", ST, "clevr_dist", 6, "clevr: closest_object_distance", "train[90%:]",
          "validation", "clevr_dist"),
    _task("dmlab", ST, "dmlab", 6, "dmlab", "validation", "test"),
    _task("kitti_distance", ST, "kitti", 4, "kitti: closest_vehicle_distance", "validation",
          "test", "kitti", "kitti_dist"),
    _task("dsprites_location", ST, "dsprites_loc", 16, "dsprites: label_x_position, 16 classes",
          "train[80%:]", "train[90%:]", "dsprites_loc"),
    _task("dsprites_orientation", ST, "dsprites_ori", 16,
          "dsprites: label_orientation, 16 classes", "train[80%:]", "train[90%:]", "dsprites_ori"),
    _task("smallnorb_azimuth", ST, "smallnorb_azi", 18, "smallnorb: label_azimuth", "test",
          "test[50%:]", "smallnorb_azi"),
    _task("smallnorb_elevation", ST, "smallnorb_ele", 9, "smallnorb: label_elevation", "test",
          "test[50%:]", "smallnorb_ele"),
)


# fmt: on
BY_NAME: dict[str, Task] = {
    spelling: t for t in TASKS for spelling in {t.name, t.folder, *t.aliases}
}


def find_task(name: str) -> Task:
    """The task a name, a release's folder name or an alias names; a ``ConfigError`` else."""
    task = BY_NAME.get(name.lower())
    if task is None:
        raise ConfigError(
            f"{name!r} is not a VTAB-1k task: expected one of {', '.join(t.name for t in TASKS)} "
            "(or the VTAB-1k release's folder name)"
        )
    return task


@dataclass(frozen=True)
class TaskData:
    """A task and the data spec it is read from."""

    task: Task
    spec: str

    @property
    def lists(self) -> bool:
        """Whether the spec is a prepared VTAB-1k folder (its own lists split it)."""
        return data_source(self.spec).kind in STAGES

    @property
    def lists_digest(self) -> str | None:
        """What the VTAB-1k list files of the folder hold, as a sha256 (16 hex digits; None: not
        a lists layout): a run's record keeps it, so that a list edited in place is not scored
        by the run of the old one (the same --out gave the old test accuracy)."""
        if not self.lists:
            return None
        folder = Path(str(data_source(self.spec).path))
        digest = hashlib.sha256()
        for name in LISTS:
            path = folder / f"{name}.txt"
            digest.update(f"{name}\0".encode() + (path.read_bytes() if path.is_file() else b"-"))
            digest.update(b"\0")
        return f"sha256:{digest.hexdigest()[:16]}"

    def spec_of(self, stage: Literal["sweep", "final"]) -> str:
        """The spec a run of ``stage`` records: a VTAB-1k folder's lists of that stage
        (``vtab800:DIR`` for the sweep, ``vtab:DIR``), else the task's spec."""
        if not self.lists:
            return self.spec
        return f"{'vtab800' if stage == 'sweep' else 'vtab'}:{data_source(self.spec).path}"


def find_tasks(
    root: str | None, given: Iterable[str] = (), only: Sequence[str] | None = None
) -> list[TaskData]:
    """The tasks to run, in ``TASKS`` order: those of the release folder ``root`` (a folder per
    task, named as the release names it or by the task's name) and ``given``, ``TASK=SPEC`` each
    (which wins over ``root``'s); only ``only``'s when given. A ``ConfigError`` when none."""
    specs: dict[str, str] = {}
    if root is not None:
        specs = _release_tasks(Path(root).expanduser())
    for item in given:
        name, sep, spec = item.partition("=")
        if not sep or not spec:
            raise ConfigError(f"--task {item!r}: expected TASK=SPEC, e.g. cifar100=hf:cifar100")
        task = find_task(name)
        specs[task.name] = normalise_data(spec)
        check_data_exists(specs[task.name])
    wanted = None if only is None else {find_task(name).name for name in only}
    found = [TaskData(t, specs[t.name]) for t in TASKS if t.name in specs]
    if wanted is not None:
        missing = sorted(wanted - {d.task.name for d in found})
        if missing:
            raise ConfigError(
                f"no data for the task(s) {', '.join(missing)}: give --task NAME=SPEC"
            )
        found = [d for d in found if d.task.name in wanted]
    if not found:
        raise ConfigError(
            "no VTAB-1k task found: give the release's folder (ROOT/<task>/train800val200.txt) "
            "or --task NAME=SPEC"
        )
    return found


def _release_tasks(base: Path) -> dict[str, str]:
    """The data spec of each task of the release folder ``base`` (a task's folder, by the first
    of its spellings that holds ``train800val200.txt``); the other folders that hold lists are
    named in one warning, with why each is skipped."""
    if not base.is_dir():
        raise ConfigError(f"VTAB-1k folder {base} not found (expected ROOT/<task>/test.txt)")
    taken: dict[str, str] = {}  # task -> its folder's name
    for task in TASKS:
        for spelling in (task.folder, task.name, *task.aliases):
            if (base / spelling / "train800val200.txt").is_file():
                taken[task.name] = spelling
                break
    skipped = []
    for folder in sorted(p for p in base.iterdir() if p.name not in taken.values()):
        if not (folder.is_dir() and present(folder)):
            continue
        named = BY_NAME.get(folder.name)
        if named is None:
            why = "not a VTAB-1k task"
        elif named.name in taken:
            why = f"{named.name} is read from {taken[named.name]}"
        else:
            why = "no train800val200.txt"
        skipped.append(f"{folder.name} ({why})")
    if skipped:
        more = f" and {len(skipped) - 10} more" if len(skipped) > 10 else ""
        warnings.warn(f"{base}: skipped the folders {', '.join(skipped[:10])}{more}", stacklevel=3)
    return {name: f"vtab:{(base / folder).resolve()}" for name, folder in taken.items()}


# What a run trained and was evaluated on, as its record says.
SPLIT_RULE = {
    "sweep": "train800.txt, evaluated on val200.txt",
    "final": "train800val200.txt, evaluated on test.txt",
}


OWN_SPLIT_RULE = {
    "sweep": "80% of 1,000 images of the train split drawn with seed {seed} (all when fewer), "
    "evaluated on the other 20%",
    "final": "the 1,000 images of the train split drawn with seed {seed} (all when fewer), "
    "evaluated on the test split (else the val split)",
}


def stage_data(
    data: TaskData,
    stage: Literal["sweep", "final"],
    cfg: DataConfig,
    model: ModelConfig,
    *,
    seed: int,
    in_chans: int | None = None,
) -> RunData:
    """The images of a task's sweep run (train800 to train, val200 to validate) or final run
    (train800val200 to train, test evaluated once at the end), read as ``cfg`` says but for its
    dataset (the task's) with ``in_chans`` channels (``build_data``'s); a ``DataError`` when they
    have more classes than the task."""
    staged = _staged(data, stage, cfg, model, seed=seed, in_chans=in_chans)
    if len(staged.classes) > data.task.classes:
        raise DataError(
            f"{data.spec} has {len(staged.classes)} classes, {data.task.name} has "
            f"{data.task.classes}: expected that task's data"
        )
    return staged


def _staged(
    data: TaskData,
    stage: Literal["sweep", "final"],
    cfg: DataConfig,
    model: ModelConfig,
    *,
    seed: int,
    in_chans: int | None,
) -> RunData:
    if data.lists:
        listed = dataclasses.replace(cfg, dataset=data.spec_of(stage))
        return build_data(listed, model, seed=seed, in_chans=in_chans)
    if cfg.streaming:
        raise ConfigError(
            f"data.streaming=True: 1,000 images are drawn from {data.spec}'s train split, which "
            "a stream cannot give: set data.streaming=False"
        )
    # all of train to draw from (never a holdout), and test, else val, to evaluate once
    names = listing(dataclasses.replace(cfg, dataset=data.spec)).names
    if "test" not in names and "val" not in names:
        raise DataError(f"{data.spec} has no test or val split: VTAB-1k evaluates its test split")
    whole = dataclasses.replace(
        cfg,
        dataset=data.spec,
        validation="test" if "test" in names else "val",
        per_class=None,
    )
    read = build_data(whole, model, seed=seed, in_chans=in_chans)
    test, named = read.val, read.val_name
    if read.test is not None and read.test_name is not None:
        test, named = read.test, read.test_name
    n = min(len(read.train), 1000)
    order = torch.from_numpy(np.random.default_rng(seed).permutation(len(read.train)))
    cut = round(0.8 * n)  # 800 of 1,000
    if stage == "sweep":
        train, val = subset(read.train, order[:cut]), subset(read.train, order[cut:n])
        name = f"val200: {len(val):,} images of train, seed {seed}"
        return dataclasses.replace(read, train=train, val=val, test=None, val_name=name)
    train = subset(read.train, order[:n])
    return dataclasses.replace(
        read, train=train, val=test, test=test, val_name=named, test_name=named
    )


def data_format(data: TaskData, images: Any, sample: int = 20) -> dict[str, Any]:
    """What a score's data was: the spec, how it is stored, and the encodings of the first
    ``sample`` training images (PIL's names: PNG, JPEG), since the same images re-encoded (as
    PNG, say) score differently."""
    from ..data.codec import DECODE_ERRORS, open_image

    kind = data_source(data.spec).kind
    out: dict[str, Any] = {
        "spec": data.spec,
        "layout": "VTAB-1k lists" if data.lists else kind,
    }
    if data.lists:
        out["lists"] = data.lists_digest
    if isinstance(images, DecodedImages):
        encodings: dict[str, int] = {}
        for index in range(min(sample, len(images))):
            try:  # only the formats vitkit opens (codec.FORMATS)
                with open_image(images.encoded(index)) as image:
                    found = str(image.format)
            except DECODE_ERRORS:  # a file gone or broken since verification
                found = "unreadable"
            encodings[found] = encodings.get(found, 0) + 1
        out["encodings"] = encodings
    else:
        out["encodings"] = {"arrays": len(images)}  # decoded from the release's own binary files
    return out
