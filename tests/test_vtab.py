"""VTAB-1k (issue 26 item 5): the 19-task registry and the protocol's arithmetic as data; the
VTAB-1k list files as a source of the one image container (``vtab:DIR``, ``vtab800:DIR``); and
``vitkit vtab`` end to end on three stand-in tasks, one per group, in the prepared release's
layout, resumed after an interruption."""

from __future__ import annotations

import json
import shutil
import statistics
from pathlib import Path

import pytest
from PIL import Image

import vitkit.train.loop
from helpers import random_checkpoint, stopped_copy, tiny, vtab_task_folder
from vitkit.cli import main
from vitkit.config import DataConfig
from vitkit.data.sources.lists import LISTS
from vitkit.errors import ConfigError, DataError
from vitkit.transfer.vtab import CANDIDATES, Candidate, choose, summarise
from vitkit.transfer.vtab_tasks import TASKS, TaskData, find_task, find_tasks, stage_data

# ------------------------------------------------------------------------------- the registry

# The VTAB-1k tasks and their classes [Zhai et al. 2019, Table 5]; the folder names of the
# prepared release (NOAH's and VPT's vtab-1k/), in the order of the ViT paper's Table 9.
REGISTRY = {
    "natural": [("caltech101", "caltech101", 102), ("cifar100", "cifar", 100),
                ("dtd", "dtd", 47), ("oxford_flowers102", "oxford_flowers102", 102),
                ("oxford_iiit_pet", "oxford_iiit_pet", 37), ("sun397", "sun397", 397),
                ("svhn", "svhn", 10)],
    "specialized": [("patch_camelyon", "patch_camelyon", 2), ("eurosat", "eurosat", 10),
                    ("resisc45", "resisc45", 45),
                    ("diabetic_retinopathy", "diabetic_retinopathy", 5)],
    "structured": [("clevr_count", "clevr_count", 8), ("clevr_distance", "clevr_dist", 6),
                   ("dmlab", "dmlab", 6), ("kitti_distance", "kitti", 4),
                   ("dsprites_location", "dsprites_loc", 16),
                   ("dsprites_orientation", "dsprites_ori", 16),
                   ("smallnorb_azimuth", "smallnorb_azi", 18),
                   ("smallnorb_elevation", "smallnorb_ele", 9)],
}  # fmt: skip


def test_the_registry_holds_the_19_tasks_in_their_groups_with_the_release_folder_names() -> None:
    assert [(t.group, t.name, t.folder, t.classes) for t in TASKS] == [
        (group, name, folder, classes)
        for group, rows in REGISTRY.items()
        for name, folder, classes in rows
    ]
    assert [len(rows) for rows in REGISTRY.values()] == [7, 4, 8]
    for task in TASKS:  # VTAB-1k: the first 800 of train, the first 200 of val
        assert task.train800 == "train[:800]" and task.val200.endswith("[:200]")
        assert find_task(task.folder) is find_task(task.name.upper()) is task
    # VTAB's own splits, where they are not the dataset's train/validation/test
    assert find_task("cifar").val200 == "train[90%:][:200]" and find_task("cifar").test == "test"
    assert find_task("clevr_dist").test == "validation"
    assert find_task("smallnorb_ele").val200 == "test[:200]"
    assert find_task("smallnorb_ele").test == "test[50%:]"
    assert find_task("dsprites_loc").test == find_task("eurosat").test[:5] + "[90%:]"
    assert (Candidate(0.001, 500), Candidate(0.001, 2500), Candidate(0.01, 500),
                          Candidate(0.01, 2500)) == CANDIDATES  # fmt: skip
    with pytest.raises(ValueError, match="'imagenet' is not a VTAB-1k task: expected one of"):
        find_task("imagenet")


# ------------------------------------------------------------------------------ the arithmetic

A, B, C = Candidate(0.001, 500), Candidate(0.01, 500), Candidate(0.01, 2500)


def test_one_setting_for_all_tasks_by_the_mean_val200_accuracy_or_one_per_task() -> None:
    val = {
        "cifar100": {A: 0.50, B: 0.60, C: 0.70},  # C best here
        "eurosat": {A: 0.90, B: 0.92, C: 0.80},  # B best here
        "clevr_count": {A: 0.40, B: 0.45, C: 0.44},  # B best here
    }
    # means: A 0.6, B 0.656..., C 0.646...: B for every task, though C is cifar100's best
    assert choose(val, [A, B, C]) == dict.fromkeys(val, B)
    assert choose(val, [A, B, C], per_task=True) == {
        "cifar100": C,
        "eurosat": B,
        "clevr_count": B,
    }
    diverged = {"dtd": {A: 0.9, B: 0.5}, "svhn": {A: None, B: 0.25}}  # A diverged on svhn
    assert choose(diverged, [A, B]) == dict.fromkeys(diverged, B)
    assert choose(diverged, [A, B], per_task=True) == {"dtd": A, "svhn": B}
    with pytest.raises(ConfigError, match=r"^every candidate diverged on svhn"):
        choose({"svhn": {A: None, B: None}}, [A, B], per_task=True)
    tied = {"dtd": {A: 0.5, B: 0.5}, "svhn": {A: 0.25, B: 0.25}}
    assert choose(tied, [B, A]) == dict.fromkeys(tied, B)  # a tie: the first listed
    assert choose(tied, [A, B], per_task=True) == dict.fromkeys(tied, A)


def test_group_means_and_the_mean_over_tasks() -> None:
    test = {"cifar100": 0.8, "dtd": 0.6, "eurosat": 0.95, "clevr_count": 0.5, "dmlab": 0.4,
            "kitti_distance": 0.3}  # fmt: skip
    summary = summarise(test)
    assert summary.groups == pytest.approx({"natural": 0.7, "specialized": 0.95, "structured": 0.4})
    assert summary.mean == pytest.approx(3.55 / 6)  # over the tasks, not over the groups
    assert summarise({"svhn": 0.9}).groups == {"natural": 0.9}  # no task, no group


# ------------------------------------------------------------------------------ the stand-ins

# Three tasks, one per group, in the release's layout: DIR/<folder>/images/..., four lists.
STAND_INS = {"cifar": ("PNG", 3), "eurosat": ("JPEG", 2), "clevr_count": ("PNG", 3)}
SIZES = {"train800": 6, "val200": 3, "test": 4}


@pytest.fixture(scope="module")
def release(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("vtab-1k")
    for seed, (folder, (fmt, classes)) in enumerate(STAND_INS.items()):
        vtab_task_folder(root / folder, classes, fmt, seed, SIZES)
    (root / "README.txt").write_text("not a task")
    return root


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    return random_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny", image_size=16, patch_size=4)


def test_a_task_from_any_spec_takes_1000_seeded_images_of_train_and_tests_its_test(
    tmp_path: Path,
) -> None:
    """Ten training images stand for 1,000: 8 train800, 2 val200; the final run trains on all
    ten and tests the test split."""
    for split, n in (("train", 10), ("test", 3)):
        for i in range(n):
            folder = tmp_path / "pets" / split / f"c{i % 2}"
            folder.mkdir(parents=True, exist_ok=True)
            Image.new("RGB", (9, 9), (40 * i, 0, 0)).save(folder / f"{i}.png")
    data = TaskData(find_task("pets"), str(tmp_path / "pets"))
    model, cfg = tiny(image_size=16, patch_size=4), DataConfig(dataset="synthetic")
    sweep = stage_data(data, "sweep", cfg, model, seed=0)
    final = stage_data(data, "final", cfg, model, seed=0)
    assert (len(sweep.train), len(sweep.val), sweep.test) == (8, 2, None)
    names = {sweep.train.name_of(i) for i in range(8)} | {sweep.val.name_of(i) for i in range(2)}
    assert names == {final.train.name_of(i) for i in range(10)}  # the same ten, no overlap
    assert (len(final.test), final.val_is_test) == (3, True)
    again = stage_data(data, "sweep", cfg, model, seed=0)
    assert [again.val.name_of(i) for i in range(2)] == [sweep.val.name_of(i) for i in range(2)]
    other = stage_data(data, "sweep", cfg, model, seed=1)
    assert [other.val.name_of(i) for i in range(2)] != [sweep.val.name_of(i) for i in range(2)]
    # without test/, val/ is tested, and all of train is still drawn from; without both, an error
    (tmp_path / "pets" / "test").rename(tmp_path / "pets" / "val")
    final = stage_data(data, "final", cfg, model, seed=0)
    assert (len(final.train), len(final.test), final.test_name) == (10, 3, "val/ (3 images)")
    shutil.rmtree(tmp_path / "pets" / "val")
    with pytest.raises(DataError, match=r"pets has no test or val split: VTAB-1k evaluates its"):
        stage_data(data, "final", cfg, model, seed=0)


# ------------------------------------------------------------------------------ end to end


def _vtab(checkpoint: Path, release: Path, out: Path, *more: str) -> list[str]:
    return ["vtab", str(checkpoint), str(release), "--out", str(out), "--lrs", "0.001,0.3",
            "--steps", "4", "--set", "train.device=cpu", "--no-progress", *more]  # fmt: skip


def test_vtab_runs_the_protocol_on_three_stand_ins_and_resumes(
    checkpoint: Path, release: Path, tmp_path: Path, capsys, monkeypatch
) -> None:
    out = tmp_path / "out"
    assert main(_vtab(checkpoint, release, out)) == 0
    printed = capsys.readouterr().out
    print(printed)  # the table, for the record (pytest -s)
    result = json.loads((out / "vtab.json").read_text())
    names = ["cifar100", "eurosat", "clevr_count"]
    assert list(result["tasks"]) == names
    assert len(result["sweep"]) == 6  # 3 tasks x 2 settings, each on train800 / val200
    val = {
        name: {
            Candidate(r["lr"], r["steps"]): r["accuracy"]
            for r in result["sweep"]
            if r["task"] == name
        }
        for name in names
    }
    for r in result["sweep"]:
        assert (r["split"], r["count"], r["train_images"]) == ("val", 3, 6)
    settings = [Candidate(0.001, 4), Candidate(0.3, 4)]
    chosen = choose(val, settings)
    assert {name: Candidate(*c) for name, c in result["chosen"].items()} == chosen
    for name, folder in zip(names, STAND_INS, strict=True):
        final = result["tasks"][name]
        assert (final["split"], final["count"], final["train_images"]) == ("test", 4, 9)
        assert final["images"] == "train800val200.txt, evaluated on test.txt"
        assert (final["lr"], final["steps"]) == (chosen[name].lr, chosen[name].steps)
        assert final["data"] == {
            "spec": f"vtab:{release / folder}",
            "layout": "VTAB-1k lists",
            "lists": TaskData(find_task(name), f"vtab:{release / folder}").lists_digest,
            "encodings": {STAND_INS[folder][0]: 9},
        }
        run_dir = out / "final" / name / chosen[name].slug  # another choice: another run
        logged = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        tests = [r for r in logged if r.get("split") == "test"]
        assert len(tests) == 1 and tests[0]["accuracy"] == final["accuracy"]  # tested once
        recorded = json.loads((run_dir / "config.json").read_text())
        assert recorded["data"]["dataset"] == f"vtab:{release / folder}"
        assert recorded["optim"]["lr"] == chosen[name].lr
    tests = {name: result["tasks"][name]["accuracy"] for name in names}
    assert result["groups"] == {
        "natural": tests["cifar100"],
        "specialized": tests["eurosat"],
        "structured": tests["clevr_count"],
    }
    assert result["mean"] == pytest.approx(statistics.fmean(tests.values()))
    assert "| cifar100 | natural | VTAB-1k lists (PNG) |" in printed
    assert "| eurosat | specialized | VTAB-1k lists (JPEG) |" in printed
    assert f"| mean, 3 tasks |  |  |  |  |  | {100 * result['mean']:.1f} |" in printed

    # killed in the middle of eurosat's final run: the same command trains that run alone, from
    # its checkpoint, to the same figures
    resumed = tmp_path / "resumed"
    shutil.copytree(out, resumed)
    eurosat = Path("final", "eurosat", chosen["eurosat"].slug)
    shutil.rmtree(resumed / eurosat)
    stopped_copy(out / eurosat, resumed / eurosat, step=1)
    (resumed / eurosat / "vtab.json").unlink()
    (resumed / "vtab.json").unlink()
    calls = []
    real = vitkit.train.loop.train_prepared

    def counted(prepared, **kwargs):
        calls.append(prepared.run_dir)
        return real(prepared, **kwargs)

    monkeypatch.setattr(vitkit.train.loop, "train_prepared", counted)
    assert main(_vtab(checkpoint, release, resumed)) == 0
    assert calls == [resumed / eurosat]
    again = json.loads((resumed / "vtab.json").read_text())
    assert again["tasks"]["eurosat"]["accuracy"] == result["tasks"]["eurosat"]["accuracy"]
    assert again["mean"] == result["mean"]
    capsys.readouterr()
    # other settings on the same runs: one line
    assert main(_vtab(checkpoint, release, resumed, "--per-task")) == 2
    err = capsys.readouterr().err
    assert "holds the runs of another VTAB-1k evaluation (per_task differ" in err
    # another checkpoint written at the same path: its weights, recorded, differ
    from vitkit.io.api import weights_digest

    settings = json.loads((resumed / "vtab-settings.json").read_text())
    assert settings["weights"] == weights_digest(checkpoint) != ""
    settings["weights"] = "sha256:0123456789abcdef"
    (resumed / "vtab-settings.json").write_text(json.dumps(settings))
    assert main(_vtab(checkpoint, release, resumed)) == 2
    assert "(weights differ: weights 'sha256:0123456789abcdef', now" in capsys.readouterr().err


def test_a_run_of_lists_edited_since_is_not_given_its_old_result(
    checkpoint: Path, release: Path, tmp_path: Path, capsys
) -> None:
    """A list file edited in place (a label changed) kept the old run's test accuracy under the
    same --out, exit 0: each run records its lists' digest, and another is refused."""
    import shutil

    copy = Path(shutil.copytree(release / "eurosat", tmp_path / "eurosat"))
    args = _vtab(checkpoint, release, tmp_path / "out", "--task", f"eurosat={copy}")
    args += ["--tasks", "eurosat"]
    assert main(args) == 0
    capsys.readouterr()
    test = copy / "test.txt"
    path, label = test.read_text().splitlines()[0].rsplit(" ", 1)
    test.write_text(test.read_text().replace(f"{path} {label}", f"{path} {1 - int(label)}", 1))
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "on other lists than" in err and "the lists changed since; give another --out" in err


def test_vtab_errors_are_one_line(checkpoint: Path, release: Path, tmp_path: Path, capsys) -> None:
    for argv, expected in [
        ([str(tmp_path / "none")], "VTAB-1k folder"),
        ([str(release), "--tasks", "cifar,dmlab"], "no data for the task(s) dmlab: give --task"),
        ([str(release), "--task", "mnist=/x"], "'mnist' is not a VTAB-1k task"),
        ([str(release), "--task", "dtd=/x"], "data: image folder /x not found"),
        ([str(tmp_path)], "no VTAB-1k task found"),
        ([str(release), "--lrs", "0.1,x"], "--lrs '0.1,x': expected positive numbers"),
    ]:
        assert main(["vtab", str(checkpoint), *argv]) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and expected in err, err


def test_a_vtab_refused_at_its_first_run_records_no_settings(
    checkpoint: Path, release: Path, tmp_path: Path, capsys
) -> None:
    """--resolution 17 (not a multiple of the patch) was refused at the first run, after the
    settings were recorded: the corrected call was then refused as another evaluation."""
    out = tmp_path / "out"
    argv = _vtab(checkpoint, release, out, "--tasks", "cifar", "--resolution")
    assert main([*argv, "17"]) == 2
    assert "model.image_size=17 is not valid" in capsys.readouterr().err
    assert not (out / "vtab-settings.json").exists()  # so the corrected call is its own


def test_a_second_vtab_on_the_same_folder_is_one_line(
    checkpoint: Path, release: Path, tmp_path: Path, capsys
) -> None:
    """Two protocols writing one --out would train its runs twice at once: the second command
    is refused in one line while the first holds the folder, as transfer's and train's are."""
    import fcntl

    from vitkit.train.rundir import LOCK_FILE

    out = tmp_path / "out"
    out.mkdir()
    with open(out / LOCK_FILE, "a+") as held:  # another process's lock, as flock sees it
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        assert main(_vtab(checkpoint, release, out)) == 2
    err = capsys.readouterr().err
    assert f"run directory {out} is in use by" in err and "Traceback" not in err
    assert "or use another --out" in err  # vtab's flag, not train's --run-dir
    assert not (out / "sweep").exists()


def test_vtab_refuses_what_its_protocol_decides_and_flags_it_cannot_run(
    checkpoint: Path, release: Path, tmp_path: Path, capsys
) -> None:
    """A --set of what the protocol decides would train every run alike while the table reports
    the candidates: refused, naming vtab's own flag; rates that name one run, steps and a
    resolution past their bounds and an --out that is a file or cannot be made: one line each."""
    file = tmp_path / "file"
    file.write_text("")
    cases = [
        (["--set", "optim.lr=0.5"], "--set optim.lr=0.5: optim.lr is decided by --lrs"),
        (["--set", "train.duration=3st"], "train.duration is decided by --steps"),
        (["--set", "data.dataset=synthetic"], "data.dataset is decided by the task's data (ROOT"),
        (["--set", "model.image_size=32"], "model.image_size is decided by --resolution"),
        (["--set", "data.validation=holdout"], "data.validation is decided by the protocol"),
        (["--lrs", "0.001,0.0010000001"], "--lrs: 0.001 and 0.0010000001 are one run (lr 0.001"),
        (["--steps", "4,4"], "--steps '4,4': 4 twice"),
        (["--steps", "10000001"], "--steps '10000001': expected positive numbers up to 10,000,000"),
        (["--resolution", "1000000"], "--resolution 1000000: expected 1 to 2048 pixels a side"),
        (["--out", str(file)], f"run directory {file}: {file} is a file, expected a directory"),
        (["--out", str(file / "o")], f"{file} is a file, expected a directory"),
    ]
    if Path("/proc/self").is_dir():  # Linux: nothing can be made in /proc, not even by root
        cases.append((["--out", "/proc/self/runs"], "run directory /proc/self/runs cannot be made"))
    for more, expected in cases:
        assert main([*_vtab(checkpoint, release, tmp_path / "out"), *more]) == 2, more
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and expected in err, err
    assert not (tmp_path / "out").exists()


def test_folders_of_a_root_that_are_not_tasks_are_named_in_one_line(tmp_path: Path) -> None:
    """A folder that holds VTAB-1k lists but is no task the protocol runs is named, with why."""
    for folder, lists in [("cifar", LISTS), ("mnist", LISTS), ("dtd", ("test",)),
                          ("cifar100", LISTS), ("notes", ())]:  # fmt: skip
        (tmp_path / folder).mkdir()
        for name in lists:
            (tmp_path / folder / f"{name}.txt").write_text("images/0.png 0\n")
    with pytest.warns(UserWarning) as warned:
        found = find_tasks(str(tmp_path))
    assert [d.spec for d in found] == [f"vtab:{tmp_path / 'cifar'}"]
    assert [str(w.message) for w in warned] == [
        f"{tmp_path}: skipped the folders cifar100 (cifar100 is read from cifar), dtd (no "
        "train800val200.txt), mnist (not a VTAB-1k task)"
    ]


def test_vtab_records_of_another_shape_are_one_line_and_its_summary_is_only_written(
    checkpoint: Path, release: Path, tmp_path: Path, capsys
) -> None:
    """A run's vtab.json and vtab-settings.json are read for their keys and types: one line
    naming the file and what deleting it does. OUT/vtab.json is written, never read: a truncated
    copy does not block the finished protocol."""
    out = tmp_path / "out"
    args = [*_vtab(checkpoint, release, out), "--tasks", "cifar", "--lrs", "0.01", "--steps", "1"]
    assert main(args) == 0
    summary = (out / "vtab.json").read_text()
    (out / "vtab.json").write_text(summary[:10])
    assert main(args) == 0
    assert (out / "vtab.json").read_text() == summary
    capsys.readouterr()
    run = out / "sweep" / "cifar100" / "lr0.01-1st" / "vtab.json"
    settings = out / "vtab-settings.json"
    good = {path: json.loads(path.read_text()) for path in (run, settings)}
    deep = "[" * 100_000 + "]" * 100_000
    for path, broken, fix in [
        *[(run, text, "delete it to re-run its runs") for text in ("[]", "null", deep, "{")],
        (run, {**good[run], "accuracy": "high"}, "['accuracy']: expected a number, found text"),
        (run, {k: v for k, v in good[run].items() if k != "data"}, "no 'data'"),
        (run, {**good[run], "lr": 0.5}, "holds a run of cifar100 (lr 0.5, 1 steps)"),
        *[(settings, text, "delete it to record this command's settings")
          for text in ("[]", "null", deep, "{")],
        (settings, {**good[settings], "sets": "x"}, "['sets']: expected a list, found text"),
    ]:  # fmt: skip
        path.write_text(broken if isinstance(broken, str) else json.dumps(broken))
        assert main(args) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and fix in err, err
        assert str(path.parent) in err
        path.write_text(json.dumps(good[path]))
    assert main(args) == 0


def test_a_sigterm_after_a_runs_last_step_check_ends_vtab_once_it_is_recorded(
    checkpoint: Path, release: Path, tmp_path: Path, capsys, monkeypatch
) -> None:
    """A SIGTERM at the first sweep run's last step: that run finishes and is recorded, and the
    protocol stops before the next run (it used to go on)."""
    import os
    import signal

    from vitkit.train.cadence import Cadence

    out, real_log = tmp_path / "out", Cadence.log
    first = out / "sweep" / "cifar100" / Candidate(0.001, 4).slug

    def killed(self: Cadence, step: int) -> bool:
        if step == 4 and not (first / "vtab.json").exists():
            os.kill(os.getpid(), signal.SIGTERM)
        return real_log(self, step)

    monkeypatch.setattr(Cadence, "log", killed)
    with pytest.raises(SystemExit) as stopped:
        main(_vtab(checkpoint, release, out, "--tasks", "cifar"))
    assert stopped.value.code == 128 + signal.SIGTERM
    assert "stopped by signal 15 before the run in" in capsys.readouterr().err
    assert json.loads((first / "vtab.json").read_text())["steps"] == 4  # recorded
    assert sorted(p.name for p in first.parent.iterdir()) == [first.name]  # no other began
