"""``vitkit transfer``, the paper's transfer protocol (issue 26 item 4): its arithmetic (Table 4's
steps scaled, the holdout's size, the choice of the learning rate) against hand-computed values,
and the command end to end on stand-ins: a tiny checkpoint (the smoke recipe), a folder named
``pets`` (3 classes of 12, 15 and 25 training images, 3 test images each) and synthetic images
named ``cifar10``; a SIGTERM in the middle of the second sweep run, and the same command again:
the first run is not redone, the second resumes from its checkpoint, and the table and record
equal an uninterrupted protocol's."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

import vitkit
from helpers import (
    png_bytes,
    real_stand_in_numbers,
    timm_real,
    timm_real_labels,
    top1_predictions,
    val_name,
    write_tar,
)
from vitkit import fit
from vitkit.cli import main
from vitkit.errors import ConfigError
from vitkit.recipes import get_recipe
from vitkit.transfer import finetuning, sweep
from vitkit.transfer.finetuning import Options, datasets, plan, run_sets
from vitkit.transfer.paper import (
    DEFAULT,
    paper_result,
    parse_steps,
    scaled_steps,
    settings_for,
)
from vitkit.transfer.sweep import choose

TRAIN, TEST = (12, 15, 25), (3, 3, 3)  # images per class of the pets stand-in
QUICK = ["--steps", "4", "--resolution", "16", "--set", "train.batch_size=8", "--set", "train.accum_steps=1", "--set", "train.device=cpu", "--no-progress"]  # fmt: skip


def test_steps_are_table_4s_scaled_or_given() -> None:
    cifar, pets, imagenet = (settings_for(n) for n in ("cifar10", "Oxford-IIIT-Pet", "ILSVRC2012"))
    assert cifar and pets and imagenet
    assert [s.steps for s in (cifar, pets, imagenet)] == [10_000, 500, 20_000]
    assert imagenet.lrs == (0.003, 0.01, 0.03, 0.06) and pets.lrs == (0.001, 0.003, 0.01, 0.03)
    assert [s.holdout for s in (cifar, pets, imagenet)] == [0.02, 0.10, 0.01]
    assert parse_steps("0.01") == 0.01 and parse_steps("200") == 200 and parse_steps("1.0") == 1.0
    assert [scaled_steps(s.steps, 0.01) for s in (cifar, pets, imagenet)] == [100, 5, 200]
    assert scaled_steps(500, 0.0001) == 1 and scaled_steps(500, 7) == 7
    assert scaled_steps(500, None) == 500 and scaled_steps(500, parse_steps("1.0")) == 500
    for bad in ("0", "-1", "x", ""):
        with pytest.raises(ConfigError, match="--steps"):
            parse_steps(bad)
    # vit_jax's 500 warmup steps of CIFAR's 10,000; a checkpoint every tenth of the run
    (ds,) = datasets(["cifar10:/data/cifar"])
    sets = run_sets(plan(ds, Options(checkpoint="c")), Options(checkpoint="c"), 0.03, "holdout")
    assert {"optim.lr=0.03", "train.duration=10000st", "optim.warmup=500st"} <= set(sets)
    assert {"train.save_every=1000st", "data.holdout=0.02", "data.validation=holdout"} <= set(sets)


def test_datasets_take_the_papers_settings_by_name_else_cifars() -> None:
    got = datasets(["cifar100:/d/c", "pets=hf:/d/x", "/d/oxford_flowers102", "/d/mine"])
    assert [(d.name, d.settings.name, d.known) for d in got] == [
        ("cifar100", "CIFAR-100", True),
        ("pets", "Oxford-IIIT Pets", True),
        ("oxford_flowers102", "Oxford Flowers-102", True),
        ("mine", DEFAULT.name, False),
    ]
    assert got[1].spec == "hf:/d/x"
    with pytest.raises(ConfigError, match="twice"):
        datasets(["/d/mine", "/d/mine"])
    with pytest.raises(ConfigError, match="NAME=SPEC"):
        datasets(["/a/mine", "/b/mine", "mine-2=/c/x"])


def test_the_papers_numbers_for_the_same_model() -> None:
    cifar10, cifar100 = settings_for("cifar10"), settings_for("cifar100")
    assert cifar10 and cifar100
    assert paper_result("ViT-B/16@in1k", cifar10) == (98.13, "P Table 5 (A11)")
    assert paper_result("ViT-H/14@jft", cifar100) == (94.55, "P Table 2")
    assert paper_result("ViT-B/16@in21k", cifar100) is None
    assert paper_result(None, cifar10) is None


class _Labels:
    """A dataset of labels only: what a holdout is drawn from."""

    def __init__(self, counts: list[int]) -> None:
        self.labels = torch.repeat_interleave(torch.arange(len(counts)), torch.tensor(counts))
        self.classes = [str(k) for k in range(len(counts))]


@pytest.mark.parametrize(
    ("name", "counts", "held"),
    [
        ("cifar10", [5_000] * 10, 1_000),  # 2% of 5,000 = 100 a class
        ("flowers", [10] * 102, 102),  # 10% of 10 = 1 a class
        ("imagenet", [1_300] * 100 + [732] * 100, 1_300 + 700),  # 1%: 13 or round(7.32) a class
        ("pets", [12, 15, 25], 1 + 2 + 2),  # round(1.2), round(1.5), round(2.5): to even
    ],
)
def test_the_holdout_is_the_papers_fraction_of_every_class(
    name: str, counts: list[int], held: int
) -> None:
    from vitkit.data.splits import split_holdout

    settings = settings_for(name)
    assert settings is not None
    kept, out = split_holdout(_Labels(counts), settings.holdout, seed=0)
    assert len(out) == held and len(kept) == sum(counts) - held


def test_the_best_rate_is_chosen_and_a_tie_goes_to_the_smaller() -> None:
    assert choose({0.001: 0.5, 0.003: 0.7, 0.01: 0.7, 0.03: None}) == 0.003
    assert choose({0.03: 0.9, 0.001: 0.9, 0.01: 0.8}) == 0.001  # whatever the order given
    assert choose({0.01: 0.2, 0.03: 0.4}) == 0.03
    with pytest.raises(ConfigError, match="every run of the sweep diverged"):
        choose({0.01: None, 0.03: None})


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> str:
    run_dir = tmp_path_factory.mktemp("pretrained")
    fit(get_recipe("smoke"), run_dir=run_dir, progress=False)  # 16 px, 4x4 patches of 4
    return str(run_dir / "best")


@pytest.fixture(scope="module")
def pets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("data") / "pets"
    rng = np.random.default_rng(0)
    for split, counts in (("train", TRAIN), ("test", TEST)):
        for k, n in enumerate(counts):
            (root / split / f"c{k}").mkdir(parents=True)
            for i in range(n):
                noise = rng.integers(0, 60, (20, 20, 3), dtype=np.uint8)
                Image.fromarray(noise + np.uint8(40 + 80 * k)).save(root / split / f"c{k}/{i}.png")
    return root


def _transfer(checkpoint: str, pets: Path, run_dir: Path, *more: str) -> list[str]:
    args = ["transfer", checkpoint, "--data", str(pets), "--lrs", "0.001,0.01", *QUICK]
    return [*args, "--run-dir", str(run_dir), *more]


@pytest.fixture(scope="module")
def uninterrupted(checkpoint: str, pets: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    run_dir = tmp_path_factory.mktemp("transfer")
    assert main(_transfer(checkpoint, pets, run_dir)) == 0
    return run_dir


def _record(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "transfer.json").read_text())


def test_transfer_sweeps_chooses_and_tests(
    uninterrupted: Path, pets: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    row = _record(uninterrupted)["datasets"]["pets"]
    assert row["settings"]["steps"] == 4 and row["settings"]["holdout"] == 0.1
    for lr in ("0.001", "0.01"):  # each on the holdout alone: 5 images, as computed above
        run = row["sweep"][lr]
        assert run["split"] == "val" and run["count"] == 5
        assert run["run_dir"] == f"pets/lr-{lr}"  # below the record's folder
        assert (uninterrupted / "pets" / f"lr-{lr}" / "config.json").is_file()
        config = json.loads((uninterrupted / "pets" / f"lr-{lr}" / "config.json").read_text())
        assert config["optim"]["lr"] == float(lr) and config["data"]["validation"] == "holdout"
        logged = (uninterrupted / "pets" / f"lr-{lr}" / "metrics.jsonl").read_text()
        assert '"split": "test"' not in logged and '"split": "val"' in logged  # never tested
    accuracies = {float(k): v["accuracy"] for k, v in row["sweep"].items()}
    assert row["lr"] == choose(accuracies)
    final = row["final"]
    assert final["split"] == "test" and final["count"] == sum(TEST)
    logged = (uninterrupted / "pets" / "final" / "metrics.jsonl").read_text().splitlines()
    tests = [r for r in map(json.loads, logged) if r.get("split") == "test"]
    assert [r["step"] for r in tests] == [4] and tests[0]["accuracy"] == final["accuracy"]
    table = (uninterrupted / "transfer.md").read_text()
    cells = [f"**{k}: {100 * v['accuracy']:.2f}**" if float(k) == row["lr"] else f"{k}: {100 * v['accuracy']:.2f}" for k, v in row["sweep"].items()]  # fmt: skip
    assert (
        f"| pets | Oxford-IIIT Pets | 4 | 10% (5) | {', '.join(cells)} | {row['lr']:g} | "
        f"{100 * final['accuracy']:.2f} (9) | — | — |"
    ) in table


def test_no_sweep_and_the_papers_number_beside(
    checkpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A stand-in named cifar10 (synthetic images) without a sweep, beside the paper's B/16."""
    args = ["transfer", checkpoint, "--data", "cifar10=synthetic", "--no-sweep", *QUICK]
    args += ["--paper", "ViT-B/16@in1k", "--run-dir", str(tmp_path), "--json", str(tmp_path / "s.json")]  # fmt: skip
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "cifar10 (synthetic): the paper's CIFAR-10 settings [P Table 4, B.1.1]: 4 steps " in out
    assert "lr 0.01 (no sweep)" in out and not (tmp_path / "cifar10" / "lr-0.01").exists()
    summary = json.loads((tmp_path / "s.json").read_text())
    final = summary["datasets"]["cifar10"]["final"]
    assert (
        final["lr"] == 0.01 and final["count"] == 80
    )  # synthetic: 8 test images of each of the recipe's 10 classes
    row = f"| 4 | — | no sweep (--no-sweep) | 0.01 | {100 * final['accuracy']:.2f} (80) | — | "
    assert row + "98.13 (P Table 5 (A11)) |" in out
    # --json where no file can be written: one line before any run (it was a traceback at the end)
    (tmp_path / "a-file").write_text("")
    for bad in (tmp_path, tmp_path / "a-file" / "s.json"):
        again = [*args[:-2], "--run-dir", str(tmp_path / "never"), "--json", str(bad)]
        assert main(again) == 2
        assert "expected" in capsys.readouterr().err
        assert not (tmp_path / "never").exists()


def test_a_protocol_killed_mid_run_resumes_to_the_same_table(
    checkpoint: str,
    pets: Path,
    uninterrupted: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from vitkit.train.cadence import Cadence

    runs: list[str] = []  # the run directories trained, in order
    steps: list[tuple[str, int]] = []  # (run, step) of every step trained
    real_run, real_log = sweep.train_run, Cadence.log

    def counted(composed: Any, run_dir: Path, **kw: Any) -> Any:
        runs.append(run_dir.name)
        return real_run(composed, run_dir, **kw)

    def killed(self: Cadence, step: int) -> bool:  # a SIGTERM at step 2 of the second run
        steps.append((runs[-1], step))
        if steps[-1] == ("lr-0.01", 2) and kill:
            os.kill(os.getpid(), signal.SIGTERM)
        return real_log(self, step)

    monkeypatch.setattr(finetuning, "train_run", counted)
    monkeypatch.setattr(Cadence, "log", killed)
    kill = True
    with pytest.raises(SystemExit) as stopped:
        main(_transfer(checkpoint, pets, tmp_path))
    assert stopped.value.code == 128 + signal.SIGTERM
    assert "run the same command to resume" in capsys.readouterr().err
    half = tmp_path / "pets" / "lr-0.01" / "checkpoints"
    assert sorted(p.name for p in half.iterdir()) == ["step_00000001", "step_00000002"]
    assert list(_record(tmp_path)["datasets"]["pets"]["sweep"]) == ["0.001"]
    first = (tmp_path / "pets" / "lr-0.001" / "metrics.jsonl").read_text()

    kill = False
    runs.clear()
    steps.clear()
    assert main(_transfer(checkpoint, pets, tmp_path)) == 0
    assert runs == ["lr-0.01", "final"]  # the first run is recorded: not run again
    assert (tmp_path / "pets" / "lr-0.001" / "metrics.jsonl").read_text() == first
    assert sorted({s for run, s in steps if run == "lr-0.01"}) == [3, 4]  # resumed after step 2
    assert _record(tmp_path) == _record(uninterrupted)
    assert (tmp_path / "transfer.md").read_text() == (uninterrupted / "transfer.md").read_text()

    runs.clear()  # once more: everything is recorded, nothing runs
    assert main(_transfer(checkpoint, pets, tmp_path)) == 0
    assert runs == []
    assert "pets: lr 0.01 (2/2, 4 steps): holdout top-1" in capsys.readouterr().out


def test_a_sigterm_after_a_runs_last_step_check_ends_the_protocol_once_it_is_recorded(
    checkpoint: str,
    pets: Path,
    uninterrupted: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A SIGTERM at the first run's last step, which the run can no longer stop at: the run
    finishes and is recorded, and the protocol stops before the next run (it used to be
    swallowed with the run's stop requests, and the protocol went on to the end)."""
    from vitkit.train.cadence import Cadence

    real_log = Cadence.log

    def killed(self: Cadence, step: int) -> bool:  # step 4 of 4, the first run's last
        if step == 4 and not (tmp_path / "transfer.json").exists():
            os.kill(os.getpid(), signal.SIGTERM)
        return real_log(self, step)

    monkeypatch.setattr(Cadence, "log", killed)
    with pytest.raises(SystemExit) as stopped:
        main(_transfer(checkpoint, pets, tmp_path))
    assert stopped.value.code == 128 + signal.SIGTERM
    err = capsys.readouterr().err
    assert f"stopped by signal 15 before the run in {tmp_path / 'pets' / 'lr-0.01'} began" in err
    swept = _record(tmp_path)["datasets"]["pets"]["sweep"]
    assert swept == {"0.001": _record(uninterrupted)["datasets"]["pets"]["sweep"]["0.001"]}
    assert not (tmp_path / "pets" / "lr-0.01").exists()  # the next run never began


def test_settings_a_resumed_protocol_cannot_change(
    checkpoint: str, pets: Path, uninterrupted: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = _transfer(checkpoint, pets, uninterrupted)
    assert main([*args, "--steps", "5"]) == 2
    assert (
        "holds pets with other settings (steps differ: steps 4, now 5)" in capsys.readouterr().err
    )
    assert main([*args, "--set", "optim.lr=0.1"]) == 2
    err = capsys.readouterr().err
    assert "optim.lr is decided by --lrs, or --lr with --no-sweep" in err


def test_another_checkpoint_written_at_the_same_path_is_not_given_its_results(
    checkpoint: str, pets: Path, uninterrupted: Path, tmp_path: Path, capsys
) -> None:
    """The record named its checkpoint by path alone: a model trained again into the same
    best/ was given the first one's table, exit 0. It records the weights' digest now; a record
    written before that (no "weights") is taken as it is."""
    import shutil

    from vitkit.io.api import weights_digest

    ck, run_dir = tmp_path / "best", tmp_path / "transfer"
    shutil.copytree(checkpoint, ck)
    shutil.copytree(uninterrupted, run_dir)
    record = _record(run_dir)
    assert record["weights"] == weights_digest(checkpoint) == weights_digest(ck)
    record["checkpoint"] = str(ck)  # as if it had been run on this path
    (run_dir / "transfer.json").write_text(json.dumps(record))
    assert main(_transfer(str(ck), pets, run_dir)) == 0  # the same weights: its table
    capsys.readouterr()
    model = vitkit.load(ck)
    with torch.no_grad():
        model.head.bias += 1
    shutil.rmtree(ck)  # another model written at the same path (trained again, copied)
    vitkit.save(model, ck)
    assert main(_transfer(str(ck), pets, run_dir)) == 2
    err = capsys.readouterr().err
    assert f"{run_dir} holds the transfer of another checkpoint (weights differ: weights " in err
    del record["weights"]  # an earlier vitkit's record: nothing to compare
    (run_dir / "transfer.json").write_text(json.dumps(record))
    assert main(_transfer(str(ck), pets, run_dir)) == 0


def test_a_run_finished_but_not_recorded_is_evaluated_again_not_trained(
    checkpoint: str,
    pets: Path,
    uninterrupted: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Killed after a run's last step, before the record was written: the run directory holds
    the finished run, which is evaluated again (train/loop.py), to the same figures."""
    import shutil

    from vitkit.train.cadence import Cadence

    copy = tmp_path / "copy"
    shutil.copytree(uninterrupted, copy)
    record = _record(copy)
    del record["datasets"]["pets"]["sweep"]["0.01"], record["datasets"]["pets"]["final"]
    (copy / "transfer.json").write_text(json.dumps(record))
    trained: list[int] = []
    real_log = Cadence.log
    monkeypatch.setattr(
        Cadence, "log", lambda self, step: trained.append(step) or real_log(self, step)
    )
    assert main(_transfer(checkpoint, pets, copy)) == 0
    assert trained == [] and _record(copy) == _record(uninterrupted)


def _imagenet_shards(root: Path, numbers: list[int], label: int, renamed: int = 0) -> Path:
    """An ImageNet stand-in in shards: ``classes.txt`` names 1000 classes (a folder would need
    an image in each of 1000 class folders of each split), ``train-000000.tar`` 8 images of the
    class ``label``, ``val-000000.tar`` the validation images ``numbers`` keyed by their names
    (the first ``renamed`` keyed otherwise), each labelled with the first of its ReaL set."""

    labels = timm_real_labels()
    root.mkdir(parents=True)
    (root / "classes.txt").write_text("".join(f"n{k:08d}\n" for k in range(1000)))
    samples = {
        "train": [(f"t{i}", png_bytes(100 + i), label) for i in range(8)],
        "val": [
            (f"cat_{i:03d}" if i < renamed else val_name(n, "")[:-1], png_bytes(n),
             (labels[n - 1] or [0])[0])
            for i, n in enumerate(numbers)
        ],
    }  # fmt: skip
    for split, rows in samples.items():
        members = {}
        for key, image, k in rows:
            members |= {f"{key}.png": image, f"{key}.cls": str(k).encode()}
        write_tar(root / f"{split}-000000.tar", members)
    return root


def test_imagenet_reports_real_and_says_why_not_in_one_line(
    checkpoint: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two ImageNet stand-ins (both take ImageNet's settings): one whose validation images are
    named as ImageNet's files reports ReaL, equal to timm's ``RealLabelsImagenet`` on the
    fine-tuned model's predictions (images with an empty label set left out); one with a name
    that does not join says so in its row, and the protocol finishes."""
    numbers = real_stand_in_numbers(15, seed=3)
    labels = timm_real_labels()
    counts = np.bincount([k for n in numbers for k in labels[n - 1]], minlength=1000)
    trained = int(counts.argmax())  # the class the runs learn to predict: in some label sets
    good = _imagenet_shards(tmp_path / "imagenet", numbers, trained)
    bad = _imagenet_shards(tmp_path / "renamed", numbers, trained, renamed=2)
    runs = tmp_path / "runs"
    args = ["transfer", checkpoint, "--data", f"imagenet=wds:{good}", "--data",
            f"ilsvrc2012=wds:{bad}", "--no-sweep", *QUICK, "--run-dir", str(runs)]  # fmt: skip
    assert main(args) == 0
    out = capsys.readouterr().out
    datasets = _record(runs)["datasets"]
    real = datasets["imagenet"]["final"]["real"]
    names, predictions = top1_predictions(runs / "imagenet" / "final" / "best", f"wds:{good}")
    order = [int(name.rpartition("_")[2]) for name in names]  # as evaluated
    accuracy, counted = timm_real(order, predictions)
    assert 0 < accuracy < 1 and real["accuracy"] == pytest.approx(accuracy, abs=1e-12)
    assert (real["counted"], real["left_out"]) == (counted, 15 - counted) and counted <= 12
    cell = f"{100 * accuracy:.2f} ({counted}; {15 - counted} left out)"
    assert (
        f"| 0.01 | {100 * datasets['imagenet']['final']['accuracy']:.2f} (15, val) | {cell} |"
        in out
    )
    why = datasets["ilsvrc2012"]["final"]["real"]["not_measured"]
    assert "2 of the 15 images" in why and "'cat_000', 'cat_001'" in why and "\n" not in why
    assert "(15, val) | not measured (below) |" in out
    assert f"ilsvrc2012: ImageNet ReaL not measured: {why} (`vitkit eval" in out


def test_a_protocols_run_is_prepared_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run of a protocol (``train_run``) is prepared as ``vitkit train`` prepares one
    (``compose.prepare``) and trained as prepared: its device resolved once, its data read once,
    and, run again (finished: evaluated again), its config.json read once."""
    from helpers import count_preparation
    from vitkit.compose import Request, compose

    composed = compose(Request(recipe="smoke", sets=("train.device=cpu",)))
    run_dir = tmp_path / "run"
    seen = count_preparation(monkeypatch)
    result, data = sweep.train_run(composed, run_dir, progress=False)
    assert (seen[run_dir / "config.json"], seen["device"], seen["data"]) == (0, 1, 1)
    seen.clear()
    again, _ = sweep.train_run(composed, run_dir, progress=False)
    assert (seen[run_dir / "config.json"], seen["device"], seen["data"]) == (1, 1, 1)
    assert again == result and len(data.classes) == composed.run.model.num_classes


@pytest.mark.parametrize(("precision", "autocast"), [("fp32", None), ("bf16", torch.bfloat16)])
def test_real_is_measured_in_the_runs_precision(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, precision: str, autocast: Any
) -> None:
    """ImageNet ReaL is measured as the run evaluates: in the precision it records (``auto``
    decided when it started), with no flag of its own."""
    import vitkit
    from helpers import randomize, tiny
    from vitkit.config import replace
    from vitkit.data import ArrayDataset
    from vitkit.eval import metrics

    model = randomize(vitkit.create_model(tiny(num_classes=1000, image_size=16, patch_size=8)))
    vitkit.save(model, tmp_path / "best")
    run = replace(get_recipe("smoke"), {"train.precision": precision, "train.device": "cpu"})
    run = replace(run, {"model": model.cfg})
    images = ArrayDataset(
        images=torch.randint(0, 256, (4, 3, 16, 16), dtype=torch.uint8),
        labels=torch.zeros(4, dtype=torch.int64),
        classes=[str(k) for k in range(1000)],
    )
    seen: list[Any] = []
    evaluate = metrics.evaluate

    def noting(*args: Any, **kwargs: Any) -> dict:
        seen.append(kwargs.get("autocast"))
        return evaluate(*args, **kwargs)

    monkeypatch.setattr(metrics, "evaluate", noting)
    real = sweep.measure_real(run, tmp_path, images, np.arange(4), torch.device("cpu"))
    assert seen == [autocast] and real["counted"] + real["left_out"] == 4


def test_the_table_of_a_summary() -> None:
    """ImageNet (a rate that diverged; ReaL measured) and a dataset of CIFAR's settings
    without a sweep, as the table prints them."""
    summary = {
        "checkpoint": "ViT-B/16@in21k",
        "recipe": "finetune-paper",
        "paper_model": "ViT-B/16@in21k",
        "datasets": {
            "imagenet": {
                "settings": {"sweep": True, "steps": 20_000, "holdout": 0.01},
                "settings_of": "ImageNet",
                "sweep": {
                    "0.003": {"accuracy": 0.8, "count": 12_811},
                    "0.01": {"accuracy": 0.81234, "count": 12_811},
                    "0.06": {"diverged": "the loss was not finite at step 7"},
                },
                "lr": 0.01,
                "final": {
                    "split": "val",
                    "accuracy": 0.8397,
                    "count": 50_000,
                    "real": {"accuracy": 0.90123, "counted": 46_837, "left_out": 3_163},
                },
                "paper": {"model": "ViT-B/16@in21k", "top1": 83.97, "source": "P §4.6 (A6)"},
            },
            "mine": {
                "settings": {"sweep": False, "steps": 100, "holdout": 0.02},
                "settings_of": None,
                "sweep": {},
                "lr": 0.01,
                "final": {"split": "test", "accuracy": 0.5, "count": 10},
                "paper": None,
            },
        },
    }
    lines = finetuning.table(summary)
    assert lines[0].endswith("(recipe finetune-paper; the paper's model: ViT-B/16@in21k)")
    assert lines[4] == (
        "| imagenet | ImageNet | 20,000 | 1% (12,811) | 0.003: 80.00, **0.01: 81.23**, "
        "0.06: diverged | 0.01 | 83.97 (50,000, val) | 90.12 (46,837; 3,163 left out) | "
        "83.97 (P §4.6 (A6)) |"
    )
    assert lines[5] == (
        "| mine | CIFAR's (not in the paper) | 100 | — | no sweep (--no-sweep) | 0.01 | "
        "50.00 (10) | — | — |"
    )
    assert len(lines) == 6  # every ReaL measured: nothing below the table


def test_flags_a_protocol_cannot_run_are_one_line(
    checkpoint: str, pets: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Rates that name one run (6 significant digits name it), steps and a resolution past their
    bounds, and a run directory that is a file or cannot be made: one line each, nothing run."""
    file = tmp_path / "file"
    file.write_text("")
    cases = [
        (["--lrs", "0.001,0.0010000001"], "--lrs: 0.001 and 0.0010000001 are one run (lr 0.001"),
        (["--lrs", "0.01,0.01"], "--lrs: 0.01 and 0.01 are one run"),
        (["--steps", "1e400"], "--steps '1e400': expected a number of steps up to 10,000,000"),
        (
            ["--steps", "10000001"],
            "up to 10,000,000 (e.g. 200) or a scale of the paper's up to 500",
        ),
        (["--resolution", "1000000"], "--resolution 1000000: expected 1 to 2048 pixels a side"),
        (["--run-dir", str(file)], f"run directory {file}: {file} is a file, expected a directory"),
        (["--run-dir", str(file / "r")], f"{file} is a file, expected a directory"),
    ]
    if Path("/proc/self").is_dir():  # Linux: nothing can be made in /proc, not even by root
        cases.append(
            (["--run-dir", "/proc/self/runs"], "run directory /proc/self/runs cannot be made")
        )
    for more, expected in cases:
        assert main([*_transfer(checkpoint, pets, tmp_path / "runs"), *more]) == 2, more
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and expected in err, err
    assert not (tmp_path / "runs").exists()
    # data with no test (or val) split: said before the sweep, not after its runs
    assert main(_transfer(checkpoint, pets / "train", tmp_path / "flat")) == 2
    captured = capsys.readouterr()
    assert "has no test (or val) split to report: give data with one" in captured.err
    assert "lr 0.001 (1/2" not in captured.out and not (tmp_path / "flat" / "train").exists()


# transfer.json of another shape: its text, or an edit of a finished protocol's pets entry
BROKEN_RECORDS: dict[str, str | Callable[[dict[str, Any]], object]] = {
    "a list": "[]",
    "null": "null",
    "text": '"text"',
    "nested 100,000 deep": "[" * 100_000 + "]" * 100_000,
    "datasets a list": '{"datasets": []}',
    "data a number": '{"datasets": {"pets": {"data": 3}}}',
    "no data": '{"datasets": {"pets": {"sweep": {}}}}',
    "an accuracy as text": lambda row: row["final"].update(accuracy="high"),
    "a run without its count": lambda row: row["sweep"]["0.001"].pop("count"),
    "a rate not of the settings": lambda row: row["sweep"].update(abc=row["sweep"].pop("0.01")),
}


@pytest.mark.parametrize("broken", list(BROKEN_RECORDS))
def test_a_record_of_another_shape_is_one_line_naming_it(
    checkpoint: str,
    pets: Path,
    uninterrupted: Path,
    tmp_path: Path,
    broken: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """transfer.json is read for its keys and their types, not only as JSON: one line naming
    the file and what deleting it does, before any run."""
    text = BROKEN_RECORDS[broken]
    if not isinstance(text, str):
        record = _record(uninterrupted)
        text(record["datasets"]["pets"])
        text = json.dumps(record)
    (tmp_path / "transfer.json").write_text(text)
    assert main(_transfer(checkpoint, pets, tmp_path)) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert f"{tmp_path / 'transfer.json'}" in err and "delete it to re-run its runs" in err, err
    assert not (tmp_path / "pets").exists()
