"""The command line: each verb end to end, and user errors as one line with exit status 2."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import vitkit
from helpers import pytree_lines
from vitkit.cli import main


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vitkit", *args], capture_output=True, text=True, timeout=120
    )


def test_presets_lists_official_counts(capsys) -> None:
    assert main(["presets"]) == 0
    out = capsys.readouterr().out
    assert "ViT-B/16" in out and "86,567,656" in out and "35.13" in out
    assert "R50+ViT-B/16" in out and "98,659,112" in out
    assert "vit_base_patch16_224" in out


def test_presets_pattern_matches_aliases(capsys) -> None:
    assert main(["presets", "vit_base_patch16*"]) == 0
    rows = capsys.readouterr().out.splitlines()[1:]
    assert [row.split()[0] for row in rows] == ["ViT-B/16", "ViT-B/16-384"]


def test_help_does_not_import_torch() -> None:
    code = "import sys; from vitkit.cli import main\ntry:\n main(['--help'])\nexcept SystemExit: pass\nprint('torch' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    ).stdout
    assert out.strip().endswith("False")


def test_version_does_not_import_torch() -> None:
    code = "import sys; from vitkit.cli import main\ntry:\n main(['--version'])\nexcept SystemExit as e: print(e.code)\nprint('torch' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    ).stdout
    assert out.splitlines() == [f"vitkit {vitkit.__version__}", "0", "False"]


def test_listing_and_downloading_weights_does_not_import_torch() -> None:
    """``vitkit pretrained`` lists the registry, and ``io.download`` fetches files, without torch:
    1.5 s of a 0.3 s command (``vitkit.io`` imports ``load`` and ``save`` when asked for them)."""
    code = (
        "import sys; from vitkit.cli import main; import vitkit.io.download\n"
        "code = main(['pretrained', 'ViT-Ti/16@*'])\nprint(code, 'torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "ViT-Ti/16@augreg-in21k" in done.stdout, done.stderr
    assert done.stdout.splitlines()[-1] == "0 False"
    from vitkit.io import load, save  # still there, imported when asked for

    assert callable(load) and callable(save)


def test_convert_timm_file_to_ours_and_hf(tmp_path, capsys) -> None:
    import timm
    from transformers.utils import logging as hf_logging

    peer = timm.models.vision_transformer.VisionTransformer(
        img_size=32, patch_size=8, embed_dim=64, depth=1, num_heads=4, num_classes=3
    ).eval()
    torch.save(peer.state_dict(), tmp_path / "timm.pth")
    # as a command: nothing on stderr about torch's pytree (said once a process, on an import)
    done = run("convert", str(tmp_path / "timm.pth"), str(tmp_path / "ours"), "--num-heads", "4",
               "--image-size", "48")  # fmt: skip
    assert done.returncode == 0 and not pytree_lines(done.stderr), done.stderr
    model = vitkit.load(tmp_path / "ours")
    assert model.cfg.image_size == 48 and model.cfg.num_heads == 4
    capsys.readouterr()
    before = hf_logging.is_progress_bar_enabled()
    assert main(["convert", str(tmp_path / "ours"), str(tmp_path / "hf"), "--format", "hf"]) == 0
    assert (tmp_path / "hf" / "config.json").is_file()
    # what it wrote, said once: no transformers progress bar, whose setting is left as it was
    assert "Writing model shards" not in capsys.readouterr().err
    assert hf_logging.is_progress_bar_enabled() == before
    # a checkpoint of the same format is replaced; another config.json (a run directory's, the
    # other format's, anyone's) is refused in one line and left as it was
    assert main(["convert", str(tmp_path / "hf"), str(tmp_path / "ours")]) == 0
    assert main(["convert", str(tmp_path / "ours"), str(tmp_path / "hf"), "--format", "hf"]) == 0
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.json").write_text('{"model": {}, "train": {}}')
    for dst, fmt in [("run", "vitkit"), ("run", "hf"), ("hf", "vitkit"), ("ours", "hf")]:
        before_bytes = (tmp_path / dst / "config.json").read_bytes()
        capsys.readouterr()
        assert main(["convert", str(tmp_path / "ours"), str(tmp_path / dst), "--format", fmt]) == 2
        err = capsys.readouterr().err
        assert (
            f"holds a config.json that is not a {fmt} checkpoint's" in err and err.count("\n") == 1
        )
        assert (tmp_path / dst / "config.json").read_bytes() == before_bytes
    assert not (tmp_path / "run" / "model.safetensors").exists()
    # a training run's checkpoint (its config.json records the run, which a resume and `eval`
    # read) was overwritten without it, exit 0; a saved checkpoint converted onto itself is
    shutil.copytree(tmp_path / "ours", tmp_path / "trained")
    recorded = json.loads((tmp_path / "trained" / "config.json").read_text())
    (tmp_path / "trained" / "config.json").write_text(json.dumps({**recorded, "run": {}}))
    before_bytes = (tmp_path / "trained" / "config.json").read_bytes()
    capsys.readouterr()
    assert main(["convert", str(tmp_path / "ours"), str(tmp_path / "trained")]) == 2
    err = capsys.readouterr().err
    assert "is a training run's checkpoint: its config.json records the run" in err
    assert err.count("\n") == 1
    assert (tmp_path / "trained" / "config.json").read_bytes() == before_bytes
    assert main(["convert", str(tmp_path / "ours"), str(tmp_path / "ours")]) == 0
    assert vitkit.load(tmp_path / "ours").cfg.image_size == 48
    # a size beyond a new model's bounds, before the position embeddings are resized to it (it
    # ran out of memory, with advice about training)
    for size, found in [("10000000", "4096 pixels a side"), ("2056", "65,536 tokens, found 257")]:
        assert (
            main(["convert", str(tmp_path / "ours"), str(tmp_path / "big"), "--image-size", size])
            == 2
        )
        assert (
            f"image_size={size} is not valid: expected at most {found}" in capsys.readouterr().err
        )


def test_summary_of_preset(capsys) -> None:
    assert main(["summary", "ViT-mu/16"]) == 0
    assert "parameters   76,712" in capsys.readouterr().out


def test_summary_and_convert_at_height_by_width(tmp_path, capsys) -> None:
    from helpers import tiny

    vitkit.save(vitkit.create_model(tiny()), tmp_path / "square")
    args = ["convert", str(tmp_path / "square"), str(tmp_path / "wide"), "--image-size", "24x48"]
    assert main(args) == 0
    assert capsys.readouterr().out.rstrip().endswith("parameters, 24x48px")
    assert vitkit.load(tmp_path / "wide").cfg.image_size == (24, 48)
    assert main(["summary", str(tmp_path / "wide")]) == 0
    out = capsys.readouterr().out
    assert "per image at 24x48" in out and "tokens       3x6 patches + 1 class token" in out
    assert "forward      (1, 3, 24, 48) -> (1, 10)" in out
    assert (
        main(["convert", str(tmp_path / "square"), str(tmp_path / "x"), "--image-size", "24x"]) == 2
    )
    assert "--image-size '24x': expected S or HxW" in capsys.readouterr().err


def test_the_verbs_that_train_take_their_run_arguments_from_one_declaration() -> None:
    """train, finetune, transfer and vtab declare --set, --run-dir, --num-heads and
    --no-progress with ``add_run_arguments``: the same flags, parsed alike."""
    import argparse

    from vitkit.cli import build_parser
    from vitkit.cli.common import add_run_arguments

    def declared(parser: argparse.ArgumentParser) -> dict[str, tuple]:
        return {
            a.option_strings[0]: (type(a), a.dest, a.nargs, a.type, a.default, a.metavar)
            for a in parser._actions
            if a.option_strings
        }

    one = argparse.ArgumentParser(add_help=False)
    add_run_arguments(one, sets="", run_dir="", checkpoint=True)
    expected = declared(one)
    assert sorted(expected) == ["--no-progress", "--num-heads", "--run-dir", "--set"]
    parser = build_parser()
    given = ["--set", "a=1", "--set", "b=2", "--no-progress"]
    for verb, args, flags in [
        (["train"], [], ["--set", "--run-dir", "--no-progress"]),
        (["finetune", "--init-from", "ck"], ["--num-heads", "3"], list(expected)),
        (["transfer", "ck", "--data", "d"], ["--num-heads", "3"], list(expected)),
        (["vtab", "ck"], ["--num-heads", "3"], ["--set", "--num-heads", "--no-progress"]),
    ]:
        sub = parser._subparsers._group_actions[0].choices[verb[0]]
        assert {f: declared(sub).get(f) for f in flags} == {f: expected[f] for f in flags}
        parsed = parser.parse_args([*verb, *given, *args])
        assert (parsed.set, parsed.no_progress) == (["a=1", "b=2"], True), verb
        assert getattr(parsed, "num_heads", None) == (3 if args else None), verb


def test_user_errors_are_one_line() -> None:
    for args, needle in [
        (["summary", "ViT-Q/16"], "unknown model 'ViT-Q/16'"),
        (["convert", "/no/such.npz", "out"], "checkpoint not found"),
        (["presets", "Nothing*"], "no preset matches"),
    ]:
        proc = run(*args)
        assert proc.returncode == 2, proc.stderr
        assert needle in proc.stderr
        assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_warnings_are_one_line_while_main_runs(monkeypatch, capsys) -> None:
    import warnings

    import vitkit.cli.models as cli

    def warns(args) -> None:
        warnings.warn("3 of 40 images unreadable:\n  a.png, b.png", UserWarning, stacklevel=1)
        print("done")

    monkeypatch.setattr(cli, "_summary", warns)
    before = warnings.showwarning
    for _ in range(2):  # each run shows its warnings, even those an earlier run in-process showed
        assert main(["summary", "ViT-mu/16"]) == 0
        out, err = capsys.readouterr()
        assert out == "done\n"
        assert err == "vitkit: warning: 3 of 40 images unreadable: a.png, b.png\n"
        assert warnings.showwarning is before  # a caller's own handler, back after main


def test_user_errors_are_one_line_bugs_keep_their_traceback(monkeypatch, capsys) -> None:
    import errno

    import vitkit.cli.models as cli
    from vitkit.errors import CheckpointError, MissingFileError

    def raises(error: BaseException):
        def verb(args) -> None:
            raise error

        return verb

    user = [
        CheckpointError("checkpoint x has 3 blocks: expected 2\nsecond line"),
        MissingFileError("checkpoint not found: /x"),
        OSError(errno.ENOSPC, "No space left on device", "/runs/x/state.pt"),
    ]
    for error, line in zip(
        user,
        [
            "checkpoint x has 3 blocks: expected 2",
            "checkpoint not found: /x",
            "No space left on device: /runs/x/state.pt",
        ],
        strict=True,
    ):
        monkeypatch.setattr(cli, "_summary", raises(error))
        assert main(["summary", "ViT-mu/16"]) == 2
        assert capsys.readouterr().err == f"vitkit summary: error: {line}\n"
        with pytest.raises(type(error)):  # --debug, after the verb or before it: the traceback
            main(["summary", "ViT-mu/16", "--debug"])
        with pytest.raises(type(error)):
            main(["--debug", "summary", "ViT-mu/16"])
    monkeypatch.setattr(cli, "_summary", raises(user[0]))
    monkeypatch.setenv("VITKIT_DEBUG", "1")
    with pytest.raises(CheckpointError):
        main(["summary", "ViT-mu/16"])
    monkeypatch.delenv("VITKIT_DEBUG")
    # a bug in vitkit (not a VitkitError, an OSError of ours): its traceback, not a line
    for bug in (KeyError("x"), TypeError("y"), ValueError("z"), FileNotFoundError(2, "gone", "f")):
        monkeypatch.setattr(cli, "_summary", raises(bug))
        with pytest.raises(type(bug)):
            main(["summary", "ViT-mu/16"])


@pytest.mark.parametrize(
    ("names", "found"),
    [
        (7, "class_names: expected a list of 3 strings (one per class), found 7"),
        (["cat", "dog"], "2 class_names for a model with num_classes=3: expected one name per"),
    ],
    ids=["number", "short"],
)
def test_class_names_a_checkpoint_records_are_checked_by_every_verb(
    tmp_path, capsys, names, found: str
) -> None:
    """Before: predict and eval raised a TypeError (a number) or an IndexError (too few names),
    or printed fewer classes than the model has; export and convert a TypeError, or the short
    list's error without the file's name."""
    import json

    from PIL import Image

    from helpers import tiny

    ckpt = vitkit.save(vitkit.create_model(tiny(num_layers=1, num_classes=3)), tmp_path / "ckpt")
    meta = json.loads((ckpt / "config.json").read_text())
    (ckpt / "config.json").write_text(json.dumps({**meta, "class_names": names}))
    Image.new("RGB", (32, 32)).save(tmp_path / "x.png")
    for args in (
        ["predict", str(ckpt), str(tmp_path / "x.png")],
        ["eval", str(ckpt), "--data", "synthetic"],
        ["export", str(ckpt), "--onnx", str(tmp_path / "x.onnx")],
        ["convert", str(ckpt), str(tmp_path / "out")],
        ["convert", str(ckpt), str(tmp_path / "hf"), "--format", "hf"],
    ):
        assert main(args) == 2, args
        err = capsys.readouterr().err
        assert err.startswith(f"vitkit {args[0]}: error: {ckpt / 'config.json'}: {found}")
        assert err.endswith("\n") and err.count("\n") == 1


def test_a_folder_that_cannot_be_written_is_one_line_before_the_work(tmp_path, capsys) -> None:
    """``inspect --out`` below a file, or in /proc or /sys, and ``convert`` into one, were a
    traceback (NotADirectoryError, PermissionError) after the model's work; the official format's
    temporary file was the name given."""
    from helpers import random_checkpoint

    ckpt = str(random_checkpoint(tmp_path / "ck"))
    (tmp_path / "afile").write_text("x")
    below = tmp_path / "afile" / "sub"
    cases = [
        (["inspect", ckpt, "--out", str(below)], f"{below}: {tmp_path / 'afile'} is a file"),
        (["convert", ckpt, str(below)], f"{below}: {tmp_path / 'afile'} is a file"),
        (["convert", ckpt, str(below) + ".npz", "--format", "official"], "afile is a file"),
    ]
    if Path("/proc").is_dir():
        cases += [
            (["inspect", ckpt, "--out", "/proc/vitkit"], "cannot write in /proc/vitkit: "),
            (["convert", ckpt, "/proc/vitkit"], "cannot write in /proc/vitkit: "),
            (["convert", ckpt, "/proc/v.npz", "--format", "official"], "cannot write /proc/v.npz"),
        ]
    for argv, said in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert said in err and len(err.splitlines()) == 1, err
