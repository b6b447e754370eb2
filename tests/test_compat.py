"""vitkit.compat: one test for each path an earlier vitkit's files need, on the committed runs
that need it (tests/data/: folder_v1, folder_v1_no_val, resume_v1; their resumes end to end are
test_workflow's ``test_a_run_written_before_data_specs_resumes`` and test_train's
``test_resumes_a_checkpoint_of_the_previous_state_format``), and the one-line errors of the old
forms no written file needs."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
import torch

from vitkit.config import ConfigError, DataConfig, RunConfig, parse_set
from vitkit.config.dicts import upgrade
from vitkit.io.api import load_with_meta

DATA = Path(__file__).parent / "data"
FIXTURES = ["folder_v1", "folder_v1_no_val", "resume_v1"]


def _config(fixture: str) -> dict:
    return json.loads((DATA / fixture / "run" / "config.json").read_text())


@pytest.mark.parametrize("fixture", FIXTURES)
def test_data_dir_folds_into_the_data_spec(fixture: str) -> None:
    """``data.dataset`` + ``data.data_dir`` (before data specs) are one spec; a folder's run
    validates as it did then (val/, else test/), others by today's rule."""
    old = _config(fixture)
    run = RunConfig.from_dict(old)
    if fixture == "resume_v1":  # synthetic, data_dir null
        assert (run.data.dataset, run.data.validation) == ("synthetic", "auto")
    else:
        assert (run.data.dataset, run.data.validation) == ("images", "val_or_test")
    assert "data_dir" not in run.to_dict()["data"] and RunConfig.from_dict(run.to_dict()) == run
    checkpoint = DATA / fixture / "run" / "checkpoints" / "step_00000002"
    assert load_with_meta(checkpoint)[1].trained_on == run.data.dataset  # what it records
    # the other kinds of that time
    for dataset, data_dir, spec in [
        ("cifar10", "/x", "cifar10:/x"),
        ("fashion_mnist", None, "fashion_mnist"),
        ("synthetic", "/ignored", "synthetic"),
    ]:
        assert upgrade(DataConfig, {"dataset": dataset, "data_dir": data_dir}) == {"dataset": spec}
    with pytest.raises(ConfigError, match=r"data\.data_dir='/x' goes with data\.dataset naming"):
        RunConfig.from_dict({**old, "data": {"dataset": "cifar10:/y", "data_dir": "/x"}})


@pytest.mark.parametrize("fixture", ["folder_v1", "folder_v1_no_val"])
def test_val_or_test_validates_on_val_else_test(fixture: str, tmp_path: Path) -> None:
    """The rule of a folder's run before ``data.validation``: val/, else test/, never a
    holdout of train/."""
    from vitkit.data.run_data import build_data

    images = Path(shutil.copytree(DATA / "folder_v1" / "images", tmp_path / "images"))
    if fixture == "folder_v1_no_val":
        shutil.rmtree(images / "val")
    run = RunConfig.from_dict(_config(fixture))
    data = dataclasses.replace(run.data, dataset=str(images))
    built = build_data(data, run.model, seed=0, in_chans=3)
    assert built.val_name.startswith("val/" if fixture == "folder_v1" else "test/")
    assert len(built.train) == sum(1 for p in (images / "train").rglob("*") if p.is_file())


def test_val_or_test_is_an_earlier_runs_value_only(tmp_path: Path) -> None:
    """A folder's run from before data specs validates by ``VAL_OR_TEST``: the config.json a
    resumed run writes holds it and reads back, and the run directory keeps it for the command
    that resumes it; but it is no choice: neither listed (``vitkit config``) nor taken from
    ``--set``."""
    from vitkit.compat import VAL_OR_TEST
    from vitkit.compose import Request, as_recorded, compose
    from vitkit.config.keys import describe
    from vitkit.config.overrides import field_hint
    from vitkit.train.state import RunRecord

    run = RunConfig.from_dict(_config("folder_v1"))
    assert run.data.validation == VAL_OR_TEST == "val_or_test"
    written = json.loads(json.dumps(run.to_dict()))  # the config.json a resumed run writes
    assert written["data"]["validation"] == VAL_OR_TEST and RunConfig.from_dict(written) == run
    (tmp_path / "config.json").write_text(json.dumps(written))
    command = compose(Request(recipe="smoke", data="images"))
    assert command.run.data.validation == "auto"
    assert as_recorded(command, RunRecord.read(tmp_path)).run.data.validation == VAL_OR_TEST
    hint, spec = field_hint(RunConfig, "data.validation")
    assert describe(hint, spec) == "'auto', 'holdout', 'val' or 'test'"
    with pytest.raises(
        ConfigError,
        match=r"^data\.validation=val_or_test is not valid: expected 'auto', 'holdout', 'val' or",
    ):
        parse_set(RunConfig, ["data.validation=val_or_test"])


@pytest.mark.parametrize("fixture", FIXTURES)
def test_bf16_folds_into_precision(fixture: str) -> None:
    """``train.bf16`` (before ``train.precision``): false is fp32, true bf16; only booleans."""
    old = _config(fixture)
    assert old["train"]["bf16"] is False and RunConfig.from_dict(old).train.precision == "fp32"
    on = {**old, "train": {**old["train"], "bf16": True}}
    assert RunConfig.from_dict(on).train.precision == "bf16"
    with pytest.raises(ConfigError, match=r"^train\.bf16='yes' is not valid: expected true or"):
        RunConfig.from_dict({**old, "train": {**old["train"], "bf16": "yes"}})


@pytest.mark.parametrize("fixture", FIXTURES)
def test_a_state_without_seconds_and_scaler_reads(fixture: str) -> None:
    """``state.pt`` of that time has no ``seconds``, ``scaler`` or ``eval_due``, and its log
    window no ``seconds``: the run's time starts at 0, the window's images with the resumed
    process, and its step's evaluation was done (a stop waited for it then)."""
    from vitkit.train.state import TrainState

    path = DATA / fixture / "run" / "checkpoints" / "step_00000002" / "state.pt"
    payload = torch.load(path, weights_only=True)
    assert "seconds" not in payload and "scaler" not in payload and "eval_due" not in payload
    assert "seconds" not in payload["window"]
    state = TrainState.read(path)
    assert state.seconds == 0.0 and state.scaler is None and state.step == 2
    assert state.eval_due is False
    kept = {k: payload["window"][k] for k in ("loss", "accuracy", "n")}
    assert state.window == {**kept, "images": 0, "seconds": 0.0}


def test_the_old_keys_in_set_are_unknown_keys() -> None:
    """``train.bf16`` and ``data.data_dir`` are read from files only: an override is an
    unknown key, as any other (no written file needs them there)."""
    for key in ("train.bf16", "data.data_dir"):
        with pytest.raises(ConfigError, match=rf"^unknown config key '{key}'"):
            parse_set(RunConfig, [f"{key}=true"])


@pytest.mark.parametrize("verb", ["eval", "fewshot", "inspect"])
def test_data_dir_of_the_checkpoint_verbs_is_gone(verb: str, capsys) -> None:
    """``--data-dir`` (before ``--data``): no written file needs it; argparse's one line."""
    from vitkit.cli import main

    with pytest.raises(SystemExit) as e:
        main([verb, "checkpoint", *(["--out", "o"] if verb == "inspect" else []), "--data-dir", "images"])  # fmt: skip
    assert e.value.code == 2
    assert "unrecognized arguments: --data-dir images" in capsys.readouterr().err
