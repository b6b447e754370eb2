"""VTAB-1k on a checkpoint, as the paper evaluates it [P §4.1, App. B.1.1, Table 2, Fig. 2].

``TASKS``: the 19 tasks (natural 7, specialized 4, structured 8), each with the prepared VTAB-1k
release's folder name, its classes and VTAB's split rule (train800, val200, test); preprocessing
is the ``finetune`` recipe's (resize, no augmentation). ``run_vtab`` fine-tunes every candidate
setting (``CANDIDATES``: vitkit's, the paper lists none) on train800 and evaluates val200,
``choose``s one setting for every task by the mean val200 accuracy (or per task), fine-tunes it
on train800val200, evaluates test once and ``summarise``s tasks, groups and the mean. Each run
is a run directory under ``out`` (``sweep/<task>/lr<lr>-<steps>st``, ``final/<task>``) trained,
resumed or re-evaluated by ``transfer.sweep.train_run``; a finished run's figures stay in its
``vtab.json`` and ``out`` holds one protocol's settings (``sweep.check_same``); a ``--set`` of
what the protocol decides (``DECIDED``) is refused. A task's data is
a prepared folder (``vtab:DIR``) or any spec (``hf:``, ``wds:``, a folder), whose train800 and
val200 are a seeded 80/20 draw of 1,000 train images and whose test is its test split (else
val); each score records the data it came from (``data_format``).
"""

from __future__ import annotations

import functools
import logging
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ..compose import Request, compose
from ..config import ModelConfig
from ..errors import ConfigError, VitkitError
from ..io.api import weights_digest
from ..runtime.stops import stop_requests
from .paper import check_resolution
from .records import (
    NULL,
    Entries,
    Record,
    Shape,
    write_json,
)
from .sweep import (
    check_rates,
    check_same,
    check_sets,
    rate_name,
    train_run,
)
from .vtab_tasks import (
    GROUPS,
    OWN_SPLIT_RULE,
    SPLIT_RULE,
    TaskData,
    data_format,
    find_task,
    stage_data,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True, order=True)
class Candidate:
    """A setting of the sweep: the learning rate and the number of steps."""

    lr: float
    steps: int

    @property
    def label(self) -> str:
        return f"lr {self.lr:g}, {self.steps:,} steps"

    @property
    def slug(self) -> str:
        return f"lr{rate_name(self.lr)}-{self.steps}st"


# The paper sweeps 2 learning rates x 2 schedules without listing them [P App. B.1.1]; its choice
# for every task was lr 0.01, 2,500 steps (PAPER_SETTING), here with 0.001 and 500 steps beside.
LRS = (0.001, 0.01)


STEPS = (500, 2500)


CANDIDATES = tuple(Candidate(lr, steps) for lr in LRS for steps in STEPS)


PAPER_SETTING = Candidate(0.01, 2500)


def choose(
    val: Mapping[str, Mapping[Candidate, float | None]],
    candidates: Sequence[Candidate],
    *,
    per_task: bool = False,
) -> dict[str, Candidate]:
    """The setting each task's final run takes: the candidate of the highest mean val200 accuracy
    over the tasks, the same for all (the paper's choice), or each task's own best with
    ``per_task``; a tie goes to the first in ``candidates``' order. A candidate whose run
    diverged (None) on a task it is scored on is never chosen; a ``ConfigError`` when every one
    did."""

    def best(score: Callable[[Candidate], float | None], where: str) -> Candidate:
        scored = [(s, -i, c) for i, c in enumerate(candidates) if (s := score(c)) is not None]
        if not scored:
            raise ConfigError(
                f"every candidate diverged {where} ({', '.join(c.label for c in candidates)}): "
                "give lower learning rates (--lrs)"
            )
        return max(scored)[2]

    def mean(c: Candidate) -> float | None:
        found = [val[task][c] for task in val]
        return None if None in found else statistics.fmean(f for f in found if f is not None)

    if per_task:
        return {task: best(val[task].__getitem__, f"on {task}") for task in val}
    return dict.fromkeys(val, best(mean, "on some task"))


@dataclass(frozen=True)
class Summary:
    """Test accuracy by task, the mean of each group's tasks and the mean over all tasks (the
    paper's 'VTAB (19 tasks)'); a group without a task is left out."""

    tasks: dict[str, float]
    groups: dict[str, float]
    mean: float


def summarise(test: Mapping[str, float]) -> Summary:
    """``Summary`` of the test accuracies ``test`` (by task name)."""
    groups: dict[str, float] = {
        g: statistics.fmean(acc for name, acc in test.items() if find_task(name).group == g)
        for g in GROUPS
        if any(find_task(name).group == g for name in test)
    }
    return Summary(dict(test), groups, statistics.fmean(test.values()))


# What the protocol decides for each run: set by vitkit vtab's flags, not by --set.
DECIDED = {
    "model": "the checkpoint",
    "init_from": "the checkpoint",
    "data": "the task's data (ROOT, or --task NAME=SPEC)",
    "data.dataset": "the task's data (ROOT, or --task NAME=SPEC)",
    "data.validation": "the protocol (val200, then test)",
    "data.per_class": "the protocol (800, then 1,000 images of train)",
    "optim.lr": "--lrs",
    "train.duration": "--steps",
    "train.eval_every": "the protocol (once, at the end)",
    "model.image_size": "--resolution",
}


def check_flags(
    candidates: Sequence[Candidate], resolution: int | None, sets: Sequence[str]
) -> None:
    """What ``VtabSetup`` takes from vitkit vtab's flags, a ``ConfigError`` where the protocol
    cannot run it: a ``--set`` of what it decides, rates that would share a run, a resolution
    past its bound."""
    check_sets(sets, DECIDED)
    check_rates(dict.fromkeys(c.lr for c in candidates))  # each rate once, of every step count
    check_resolution(resolution)


@dataclass(frozen=True)
class VtabSetup:
    """What every run of a VTAB-1k evaluation shares: the pre-trained checkpoint (and its
    config), the candidates, the resolution (None: the checkpoint's), the ``--set`` items every
    run takes, and whether the setting is chosen per task (``check_flags``)."""

    checkpoint: str
    pretrained: ModelConfig
    candidates: tuple[Candidate, ...] = CANDIDATES
    resolution: int | None = None
    sets: tuple[str, ...] = ()
    per_task: bool = False
    sweep: bool = True

    def __post_init__(self) -> None:
        check_flags(self.candidates, self.resolution, self.sets)

    @functools.cached_property
    def weights(self) -> str:
        """The checkpoint's weights as a record names them (``io.api.weights_digest``), read
        once."""
        return weights_digest(self.checkpoint)

    def settings(self) -> dict[str, Any]:
        """What ``out/vtab-settings.json`` records: a later command on ``out`` must agree."""
        return {
            "checkpoint": self.checkpoint,
            "weights": self.weights,
            "candidates": [[c.lr, c.steps] for c in self.candidates],
            "resolution": self.resolution,
            "sets": list(self.sets),
            "per_task": self.per_task,
            "sweep": self.sweep,
        }


# What a run's vtab.json and out/vtab-settings.json must hold: what the protocol reads back.
_RUN: dict[str, Shape] = {"task": str, "lr": float, "steps": int}


_MEASURED: dict[str, Shape] = {
    **_RUN,
    "accuracy": float,
    "count": int,
    "data": {"spec": str, "layout": str, "lists?": str, "encodings": Entries(int)},
}


RUN_SHAPE: dict[str, Shape] = {
    "sweep": (
        {**_RUN, "accuracy": NULL, "diverged": str, "data": {"spec": str, "lists?": str}},
        _MEASURED,
    ),
    "final": _MEASURED,  # never diverged: the protocol stops instead
}


SETTINGS_FILE = "vtab-settings.json"  # in --out: the settings its runs were made with
SETTINGS_SHAPE: Shape = {
    "checkpoint": str,
    "weights?": str,
    "candidates": [[float]],
    "resolution": (int, NULL),
    "sets": [str],
    "per_task": bool,
    "sweep": bool,
}


def _run(
    protocol: VtabSetup,
    data: TaskData,
    stage: Literal["sweep", "final"],
    setting: Candidate,
    run_dir: Path,
    *,
    progress: bool,
) -> dict[str, Any]:
    """One fine-tuning run (resumed if ``run_dir`` holds a checkpoint), its final evaluation:
    val200 for a sweep run, test for a final run; a finished run's ``vtab.json`` is read."""
    done = Record(run_dir / "vtab.json", RUN_SHAPE[stage])
    if done.data:
        held = (done.data["task"], Candidate(done.data["lr"], done.data["steps"]))
        spec = done.data["data"]["spec"]
        if (*held, spec) != (data.task.name, setting, data.spec):
            raise ConfigError(
                f"{run_dir} holds a run of {held[0]} ({held[1].label}) on {spec}, not of "
                f"{data.task.name} ({setting.label}) on {data.spec}: give another --out"
            )
        lists = done.data["data"].get("lists")  # none in a record written before it
        if lists is not None and lists != data.lists_digest:
            raise ConfigError(
                f"{run_dir} holds a run of {held[0]} on other lists than {data.spec}'s now "
                f"({lists}, now {data.lists_digest}): the lists changed since; give another --out"
            )
        return done.data
    sets = [
        f"optim.lr={setting.lr!r}",
        f"train.duration={setting.steps}st",
        f"train.eval_every={setting.steps}st",  # one evaluation, of the final weights
    ]
    if stage == "final":  # tested once, at the end: nothing is chosen on it
        sets.append("data.validation=test")
    if protocol.resolution is not None:
        sets.append(f"model.image_size={protocol.resolution}")
    request = Request(
        data=data.spec_of(stage), sets=(*sets, *protocol.sets), init_from=protocol.checkpoint
    )
    composed = compose(request, checkpoint=protocol.pretrained)
    seed = composed.run.train.seed
    staged = functools.partial(stage_data, data, stage)
    result, images = train_run(composed, run_dir, progress=progress, build=staged)
    if "diverged" in result and stage == "final":
        raise ConfigError(f"{data.task.name} {setting.label}: {result['diverged']}")
    if "diverged" in result:  # never chosen (``choose``); recorded, so it is not run again
        done.data = {
            "task": data.task.name,
            "stage": stage,
            "lr": setting.lr,
            "steps": setting.steps,
            "accuracy": None,
            "diverged": result["diverged"],
            "data": {
                "spec": data.spec,
                **({"lists": data.lists_digest} if data.lists else {}),
            },
        }
        done.save()
        return done.data
    done.data = {
        "task": data.task.name,
        "stage": stage,
        "lr": setting.lr,
        "steps": setting.steps,
        "split": result["split"],
        "accuracy": float(result["accuracy"]),
        "count": int(result["count"]),
        "train_images": len(images.train),
        "data": data_format(data, images.train),
        "images": SPLIT_RULE[stage] if data.lists else OWN_SPLIT_RULE[stage].format(seed=seed),
    }
    done.save()
    return done.data


def _check_settings(out: Path, protocol: VtabSetup) -> Path | None:
    """``out`` holds the runs of this protocol or none: runs of other settings are not mixed.
    Returns the settings file when this call recorded it (None: it held them already)."""
    record = Record(
        out / SETTINGS_FILE, SETTINGS_SHAPE, "delete it to record this command's settings"
    )
    held = f"{out} holds the runs of another VTAB-1k evaluation"
    check_same(record.data, protocol.settings(), held, "--out")
    if record.data:
        return None
    record.data = protocol.settings()
    record.save()
    return out / SETTINGS_FILE


def _forget_settings(out: Path, recorded: Path | None) -> None:
    """The settings this call ``recorded`` removed when ``out`` holds nothing else: a call
    refused at its first run (a resolution the model cannot take) records nothing, so the
    corrected call is not refused as another evaluation."""
    held = [p.name for p in out.iterdir() if not p.name.startswith(".")]  # its lock aside
    if recorded is not None and held == [SETTINGS_FILE]:
        recorded.unlink()


@stop_requests()  # one for all its runs: a signal between two stops it before the next
def run_vtab(
    protocol: VtabSetup,
    tasks: Sequence[TaskData],
    out: str | Path,
    *,
    progress: bool = False,
    said: Callable[[str], None] = lambda line: None,
) -> dict[str, Any]:
    """The protocol (module docstring) over ``tasks``, its runs below ``out``; returns what
    ``out/vtab.json`` holds: every run's figures, the settings chosen, every task's test
    accuracy and data, the group means and the mean. ``said`` gets a line per run."""
    out = Path(out)
    recorded = _check_settings(out, protocol)
    try:
        return _runs(protocol, tasks, out, progress=progress, said=said)
    except VitkitError:
        _forget_settings(out, recorded)
        raise


def _runs(
    protocol: VtabSetup,
    tasks: Sequence[TaskData],
    out: Path,
    *,
    progress: bool,
    said: Callable[[str], None],
) -> dict[str, Any]:
    """``run_vtab``'s runs, once ``out`` holds its settings."""
    candidates = protocol.candidates if protocol.sweep else (PAPER_SETTING,)
    val: dict[str, dict[Candidate, float | None]] = {}  # None: the run diverged
    sweep_runs = []
    if protocol.sweep:
        for data in tasks:
            for setting in candidates:
                run_dir = out / "sweep" / data.task.name / setting.slug
                record = _run(protocol, data, "sweep", setting, run_dir, progress=progress)
                val.setdefault(data.task.name, {})[setting] = record["accuracy"]
                sweep_runs.append(record)
                found = record["accuracy"]
                score = "diverged" if found is None else f"{found:.4f}"
                said(f"sweep {data.task.name} {setting.label}: val200 {score}")
        chosen = choose(val, candidates, per_task=protocol.per_task)
    else:
        chosen = {data.task.name: PAPER_SETTING for data in tasks}
    finals = {}
    for data in tasks:
        setting = chosen[data.task.name]
        run_dir = out / "final" / data.task.name / setting.slug  # another choice: another run
        record = _run(protocol, data, "final", setting, run_dir, progress=progress)
        finals[data.task.name] = record
        said(f"final {data.task.name} {setting.label}: test {record['accuracy']:.4f}")
    summary = summarise({name: r["accuracy"] for name, r in finals.items()})
    result = {
        "settings": protocol.settings(),
        "chosen": {name: [c.lr, c.steps] for name, c in chosen.items()},
        "choice": "per task" if protocol.per_task else "one for all tasks, by the mean val200",
        "sweep": sweep_runs,
        "tasks": finals,
        "groups": summary.groups,
        "mean": summary.mean,
        "count": len(finals),
    }
    write_json(out / "vtab.json", result)  # never read: the runs' records are the record
    return result


def table(result: Mapping[str, Any]) -> str:
    """The result as a markdown table: a row per task (its group, data, val200 accuracy per
    candidate, the setting chosen, test accuracy), then the group means and the mean."""
    candidates = [Candidate(lr, steps) for lr, steps in result["settings"]["candidates"]]
    swept = bool(result["sweep"])
    val = {(r["task"], Candidate(r["lr"], r["steps"])): r["accuracy"] for r in result["sweep"]}
    head = ["task", "group", "data"]
    if swept:
        head += [f"val200 {c.label}" for c in candidates]
    head += ["chosen", "test"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, record in result["tasks"].items():
        data = record["data"]
        encodings = "+".join(sorted(data["encodings"]))
        row = [name, find_task(name).group, f"{data['layout']} ({encodings})"]
        if swept:
            row += ["diverged" if val[name, c] is None else f"{100 * val[name, c]:.1f}"
                    for c in candidates]  # fmt: skip
        chosen = Candidate(*result["chosen"][name])
        row += [chosen.label, f"{100 * record['accuracy']:.1f}"]
        lines.append("| " + " | ".join(row) + " |")
    blank = [""] * (len(head) - 2)
    for group, mean in result["groups"].items():
        lines.append("| " + " | ".join([f"mean {group}", *blank, f"{100 * mean:.1f}"]) + " |")
    lines.append(
        "| "
        + " | ".join(
            [
                f"mean, {result['count']} task{'s' if result['count'] != 1 else ''}",
                *blank,
                f"{100 * result['mean']:.1f}",
            ]
        )
        + " |"
    )
    return "\n".join(lines)
