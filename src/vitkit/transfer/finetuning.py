"""The paper's transfer protocol on a checkpoint [P §4.1, Table 2, Table 4, App. B.1.1; PAPER.md
A4]: for each dataset, hold out the paper's fraction of every class of train (seeded by
``train.seed``), fine-tune once per learning rate of the dataset's sweep for its Table 4 steps,
choose the rate by the holdout's top-1 at the end of its run (``sweep.choose``), fine-tune with
it on all of train, and report the test split's top-1 at the end (else its val split's).

Every run is ``vitkit finetune --recipe finetune-paper --init-from CKPT --data SPEC`` composed
through ``compose``, with the protocol's settings set as ``--set`` would set them, evaluated once
at its last step. Layout: ``RUN_DIR/<dataset>/lr-<lr>/``, ``RUN_DIR/<dataset>/final/``, and
``RUN_DIR/transfer.json`` (``records.Record``: it lets a stopped protocol resume, and ``table``
turns it into the paper's table beside ``paper.PAPER_RESULTS``). ImageNet's final run also
reports ImageNet ReaL (``sweep.measure_real``); where its images do not join the ReaL labels the
row says why in one line and the protocol goes on (``vitkit eval ... --real`` measures it later).
"""

from __future__ import annotations

import reprlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..compose import Request, compose
from ..config import DataConfig, data_names, normalise_data
from ..config.overrides import split_set
from ..errors import ConfigError, DataError, UserFileError
from ..io.api import weights_digest
from ..runtime.stops import stop_requests
from .paper import (
    DEFAULT,
    DEFAULT_LR,
    WARMUP,
    DatasetSettings,
    check_resolution,
    paper_result,
    scaled_steps,
    settings_for,
)
from .records import (
    NULL,
    RERUN,
    Entries,
    Record,
    Shape,
)
from .sweep import (
    check_rates,
    check_same,
    check_sets,
    choose,
    rate_name,
    train_run,
)

RECIPE = "finetune-paper"
RECORD = "transfer.json"
TABLE = "transfer.md"
# What the protocol decides for each run: set by its flags, not by --set.
DECIDED = {
    "model": "the checkpoint",
    "data": "--data",
    "data.dataset": "--data",
    "init_from": "the checkpoint",
    "optim.lr": "--lrs, or --lr with --no-sweep",
    "train.duration": "--steps",
    "train.eval_every": "the protocol (once, at the end)",
    "data.validation": "the protocol (a holdout, then test)",
    "data.holdout": "--holdout",
    "model.image_size": "--resolution",
}
# What the protocol reads back from its record (records.Record checks it): a run's figures, and
# each dataset's settings (which must then equal this command's, sweep.check_same).
_REAL: Shape = ({"not_measured": str}, {"accuracy": float, "counted": int, "left_out": int})
_MEASURED: dict[str, Shape] = {"accuracy": float, "count": int, "real?": _REAL}
_SETTINGS: Shape = {
    "steps": int,
    "paper_steps": int,
    "lrs": [float],
    "sweep": bool,
    "holdout": float,
    "resolution": (int, NULL),
    "sets": [str],
}
RECORD_SHAPE: Shape = {
    "checkpoint?": str,
    "weights?": str,
    "recipe?": str,
    "datasets?": Entries(
        {
            "data": str,
            "settings": _SETTINGS,
            "sweep": Entries(({"diverged": str}, _MEASURED)),
            "final?": {**_MEASURED, "split": str},
        }
    ),
}


@dataclass(frozen=True)
class Dataset:
    """One dataset of a transfer: its name in the table, its data spec and its settings (the
    paper's, or ``DEFAULT``)."""

    name: str
    spec: str
    settings: DatasetSettings
    known: bool  # the paper fine-tunes on it


@dataclass(frozen=True, kw_only=True)
class Options:
    """What ``vitkit transfer`` was asked, for every dataset."""

    checkpoint: str
    resolution: int | None = None  # None: the recipe's 384
    sweep: bool = True
    lr: float = DEFAULT_LR  # without a sweep
    lrs: tuple[float, ...] | None = None  # None: each dataset's
    holdout: float | None = None  # None: each dataset's
    steps: int | float | None = None  # paper.parse_steps; None: each dataset's
    sets: tuple[str, ...] = ()  # --set, for every run
    paper_model: str | None = None  # PRESET@PRE-TRAINING; None: what the checkpoint records
    num_heads: int | None = None
    progress: bool = True

    def __post_init__(self) -> None:
        check_sets(self.sets, DECIDED)
        check_rates(self.lrs or ())
        check_resolution(self.resolution)


def datasets(given: Sequence[str]) -> list[Dataset]:
    """``--data [NAME=]SPEC`` each: the name (else the spec's, ``config.data_name``) picks the
    paper's settings (``paper.settings_for``)."""
    named: list[tuple[str | None, str]] = []
    for text in given:
        name, sep, spec = text.partition("=")
        plain = sep and name[:1].isalnum() and all(c.isalnum() or c in "._-" for c in name)
        named.append((name if plain else None, spec if plain else text))
    specs = [normalise_data(spec) for _, spec in named]
    if len(set(specs)) < len(specs):
        raise ConfigError(f"--data names a dataset twice: {', '.join(specs)}")
    inferred = data_names(specs)
    out = []
    for (given_name, _), spec, guess in zip(named, specs, inferred, strict=True):
        name = given_name or guess
        settings = settings_for(name)
        out.append(Dataset(name, spec, settings or DEFAULT, settings is not None))
    if len({d.name for d in out}) < len(out):
        raise ConfigError("two --data have one name: name them, --data NAME=SPEC")
    return out


def plan(dataset: Dataset, options: Options) -> dict[str, Any]:
    """The settings of ``dataset``'s runs, as the record keeps them (a resumed protocol must
    ask for the same)."""
    s = dataset.settings
    return {
        "steps": scaled_steps(s.steps, options.steps),
        "paper_steps": s.steps,
        "lrs": list(options.lrs or s.lrs) if options.sweep else [options.lr],
        "sweep": options.sweep,
        "holdout": options.holdout or s.holdout,
        "resolution": options.resolution,
        "sets": list(options.sets),
    }


def run_sets(settings: dict[str, Any], options: Options, lr: float, validation: str) -> list[str]:
    """The --set items of one run: the protocol's, then the user's (which may change the warmup
    and the checkpoints' cadence, and anything the protocol does not decide)."""
    steps = settings["steps"]
    given = {split_set(item)[0] for item in options.sets}
    out = [
        f"optim.lr={lr!r}",
        f"train.duration={steps}st",
        f"train.eval_every={steps}st",
        f"data.validation={validation}",
        f"data.holdout={settings['holdout']!r}",
    ]
    if "optim.warmup" not in given:
        out.append(f"optim.warmup={round(WARMUP * steps)}st")
    if "train.save_every" not in given:
        out.append(f"train.save_every={max(1, round(steps / 10))}st")
    if options.resolution is not None:
        out.append(f"model.image_size={options.resolution}")
    return [*out, *options.sets]


def _final_validation(spec: str) -> str:
    """What the final run evaluates: the test split, else the val split."""
    from ..data.sources.registry import listing

    names = listing(DataConfig(dataset=spec)).names
    if "test" in names:
        return "test"
    if "val" in names:
        return "val"
    raise DataError(f"{spec} has no test (or val) split to report: give data with one")


class _Runs:
    """The runs of one protocol: each composed as ``vitkit finetune`` composes it, from the
    checkpoint read once."""

    def __init__(self, options: Options, root: Path) -> None:
        from ..io.api import read

        self.options, self.root = options, root
        self.pretrained, _, self.meta = read(options.checkpoint, num_heads=options.num_heads)

    def run(
        self,
        spec: str,
        settings: dict[str, Any],
        lr: float,
        validation: str,
        name: str,
        *,
        real: bool = False,
    ) -> dict[str, Any]:
        """One run of ``spec`` with ``lr``, validated on ``validation``, in the run directory
        ``name`` below the protocol's (as the record names it, so the folder can move): the
        holdout's runs never see the test split. ``real``: ImageNet ReaL measured too."""
        where = self.root / name
        sets = run_sets(settings, self.options, lr, validation)
        request = Request(
            recipe=RECIPE, data=spec, sets=tuple(sets), init_from=self.options.checkpoint
        )
        composed = compose(
            request, checkpoint=self.pretrained, checkpoint_data=self.meta.trained_on
        )
        result, _ = train_run(
            composed,
            where,
            test=validation != "holdout",
            progress=self.options.progress,
            real=real,
        )
        return {"run_dir": name, "lr": lr, **result}


def _row(record: Record, dataset: Dataset, options: Options, model: str | None) -> dict[str, Any]:
    """``dataset``'s entry of the record (new, or the one a stopped protocol left, which must be
    of the same data and settings), with what the paper says of it."""
    settings = plan(dataset, options)
    fresh = {"data": dataset.spec, "settings": settings, "sweep": {}}
    row = record.data["datasets"].setdefault(dataset.name, fresh)
    check_same(
        {"data": row["data"], **row["settings"]},
        {"data": dataset.spec, **settings},
        f"{record.path} holds {dataset.name} with other settings",
        "--run-dir",
    )
    stray = set(row["sweep"]) - {rate_name(lr) for lr in settings["lrs"]}
    if stray:  # a rate of no run of these settings
        raise UserFileError(
            f"{record.path} holds runs of {dataset.name} at lr {reprlib.repr(sorted(stray))}, "
            f"not among its settings' rates: {RERUN}"
        )
    row["settings_of"] = dataset.settings.name if dataset.known else None
    paper = paper_result(model, dataset.settings) if dataset.known else None
    row["paper"] = None if paper is None else {"model": model, "top1": paper[0], "source": paper[1]}
    return row


def _described(result: dict[str, Any], split: str) -> str:
    if "diverged" in result:
        return str(result["diverged"])
    said = f"{split} top-1 {100 * result['accuracy']:.2f}% ({result['count']:,} images)"
    real = result.get("real")
    if real is None:
        return said
    if "not_measured" in real:
        return f"{said}; ImageNet ReaL not measured: {real['not_measured']}"
    return f"{said}; ImageNet ReaL {_real_cell(real)}"


def _real_cell(real: dict[str, Any]) -> str:
    """A measured ReaL: its accuracy (%), the images counted and those left out."""
    accuracy = "--" if not real["counted"] else _percent(real["accuracy"])
    return f"{accuracy} ({real['counted']:,}; {real['left_out']:,} left out)"


@stop_requests()  # one for all its runs: a signal between two stops it before the next
def transfer(
    chosen: Sequence[Dataset],
    options: Options,
    run_dir: Path,
    *,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run (or resume) the protocol for ``chosen`` in ``run_dir``: the summary of this command's
    datasets (``transfer.json``'s entries, which ``table`` prints). ``say``: a line per run."""
    record = Record(run_dir / RECORD, RECORD_SHAPE)
    given = {
        "checkpoint": options.checkpoint,
        "weights": weights_digest(options.checkpoint),
        "recipe": RECIPE,
    }
    recorded = {k: record.data[k] for k in given if k in record.data}
    check_same(recorded, given, f"{run_dir} holds the transfer of another checkpoint", "--run-dir")
    record.data |= given
    record.data.setdefault("datasets", {})
    runs = _Runs(options, run_dir)
    model = options.paper_model or runs.meta.pretrained
    rows = {}
    reported = {d.name: _final_validation(d.spec) for d in chosen}  # before any sweep's hours
    for dataset in chosen:
        row = _row(record, dataset, options, model)
        settings = row["settings"]
        lrs = settings["lrs"] if settings["sweep"] else []
        for i, lr in enumerate(lrs):
            key = rate_name(lr)
            if key not in row["sweep"]:  # recorded: done
                where = f"{dataset.name}/lr-{key}"
                row["sweep"][key] = runs.run(dataset.spec, settings, lr, "holdout", where)
                record.save()
            say(
                f"{dataset.name}: lr {key} ({i + 1}/{len(lrs)}, {settings['steps']:,} steps): "
                + _described(row["sweep"][key], "holdout")
            )
        sweep = {float(k): r.get("accuracy") for k, r in row["sweep"].items()}
        row["lr"] = choose(sweep) if settings["sweep"] else options.lr
        if "final" not in row:
            where = f"{dataset.name}/final"
            final = runs.run(
                dataset.spec,
                settings,
                row["lr"],
                reported[dataset.name],
                where,
                real=dataset.settings.real,
            )
            if "diverged" in final:
                raise ConfigError(f"{dataset.name}: lr {row['lr']:g}: {final['diverged']}")
            row["final"] = final
            record.save()
        final = row["final"]
        say(
            f"{dataset.name}: lr {row['lr']:g} on all of train ({settings['steps']:,} steps): "
            + _described(final, final["split"])
        )
        rows[dataset.name] = row
    record.save()
    return {
        "checkpoint": options.checkpoint,
        "recipe": RECIPE,
        "paper_model": model,
        "datasets": rows,
    }


def _percent(x: float) -> str:
    return f"{100 * x:.2f}"


def table(summary: dict[str, Any]) -> list[str]:
    """The paper's table of ``transfer``'s summary, in markdown: a row per dataset with its
    settings, the holdout top-1 of each rate (the chosen one in bold), the chosen rate, the test
    top-1 (%), ImageNet ReaL (%: the images counted; those left out, whose ReaL label set is
    empty) and the paper's number for the same model; below it, why a ReaL was not measured."""
    model = summary.get("paper_model")
    lines = [
        f"Transfer of {summary['checkpoint']} (recipe {summary['recipe']}; the paper's model: "
        f"{model or 'not known (--paper PRESET@PRE-TRAINING names it)'})",
        "",
        "| dataset | settings | steps | holdout | lr: holdout top-1 (%) | lr | test top-1 (%) "
        "| ReaL (%) | paper (%) |",
        "|---|---|---:|---|---|---:|---:|---|---|",
    ]
    unmeasured: list[str] = []
    for name, row in summary["datasets"].items():
        s, final = row["settings"], row["final"]
        if s["sweep"]:
            cells = []
            for lr, result in row["sweep"].items():
                got = _percent(result["accuracy"]) if "accuracy" in result else "diverged"
                cells.append(f"**{lr}: {got}**" if float(lr) == row["lr"] else f"{lr}: {got}")
            counts = {r["count"] for r in row["sweep"].values() if "count" in r}
            held = f"{s['holdout']:.0%}" + (f" ({counts.pop():,})" if len(counts) == 1 else "")
            swept = ", ".join(cells)
        else:
            held, swept = "—", "no sweep (--no-sweep)"
        settings = row["settings_of"] or f"{DEFAULT.name}'s (not in the paper)"
        tested = (
            _percent(final["accuracy"])
            + f" ({final['count']:,}"
            + (")" if final["split"] == "test" else ", val)")
        )
        real = final.get("real")
        if real is None:
            cell = "—"
        elif "not_measured" in real:
            cell = "not measured (below)"
            unmeasured.append(
                f"{name}: ImageNet ReaL not measured: {real['not_measured']} (`vitkit eval "
                f"RUN_DIR/{name}/final/best --data IMAGENET_VAL --real` measures it on images "
                "named as ImageNet's validation files)"
            )
        else:
            cell = _real_cell(real)
        paper = row["paper"]
        cited = "—" if paper is None else f"{paper['top1']:.2f} ({paper['source']})"
        lines.append(
            f"| {name} | {settings} | {s['steps']:,} | {held} | {swept} | {row['lr']:g} | "
            f"{tested} | {cell} | {cited} |"
        )
    return [*lines, "", *unmeasured] if unmeasured else lines


def settings_line(dataset: Dataset, options: Options) -> str:
    """What ``dataset``'s runs will be, as the command states it before they start."""
    s, p = dataset.settings, plan(dataset, options)
    whose = (
        f"the paper's {s.name} settings [P Table 4, B.1.1]"
        if dataset.known
        else f"not a dataset of the paper: {DEFAULT.name}'s settings"
    )
    steps = f"{p['steps']:,} steps" + (
        f" (of the paper's {s.steps:,})" if p["steps"] != s.steps else ""
    )
    if p["sweep"]:
        rates = ", ".join(f"{lr:g}" for lr in p["lrs"])
        how = f"lr {rates} chosen on a seeded {p['holdout']:.0%} holdout of train"
    else:
        how = f"lr {options.lr:g} (no sweep)"
    return f"{dataset.name} ({dataset.spec}): {whose}: {steps}, {how}"
