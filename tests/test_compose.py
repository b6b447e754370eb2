"""From a command's choices to a run: the recipe supplies hyperparameters, --model and --data say
what to train and on what, --set wins, the data fills what nobody set, and every value keeps its
origin. No torch is needed for any of it."""

from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import bf16_from_any_size, uninterrupted_log
from vitkit.compose import Request, adapt, compose, default_run_dir, flat
from vitkit.config import ConfigError, RunConfig
from vitkit.presets import get_config
from vitkit.recipes import RECIPES, get_recipe


def test_a_recipe_alone_runs_exactly_as_it_is_written() -> None:
    for name in ("fmnist", "fmnist-speed", "smoke"):
        composed = compose(Request(recipe=name))
        assert composed.run == get_recipe(name)
        assert set(composed.origin.values()) == {f"recipe {name}"}
        assert composed.fixed == frozenset()


def test_model_takes_the_presets_architecture_and_keeps_the_recipes_regularisation() -> None:
    composed = compose(Request(recipe="pretrain-i1k-b16", model="ViT-Ti/8", data="synthetic"))
    preset, recipe = get_config("ViT-Ti/8"), get_recipe("pretrain-i1k-b16")
    model = composed.run.model
    assert recipe.model.dropout_rate == 0.1 != preset.dropout_rate  # the recipe's, kept
    assert model == dataclasses.replace(preset, dropout_rate=0.1)
    assert composed.origin["model.hidden_size"] == "preset ViT-Ti/8"
    assert composed.origin["model.dropout_rate"] == "recipe pretrain-i1k-b16"
    # --set model=PRESET is --model; later model keys apply on top, whatever their place
    same = compose(
        Request(recipe="fmnist", sets=("model.patch_size=16", "model=vit_tiny_patch8_224"))
    )
    assert same.run.model.patch_size == 16 and same.run.model.hidden_size == 192
    assert same.origin["model.patch_size"] == "--set"
    with pytest.raises(ConfigError, match="disagree"):
        compose(Request(recipe="fmnist", model="ViT-S/16", sets=("model=ViT-B/16",)))


def test_data_replaces_the_dataset_and_keeps_the_augmentation(tmp_path: Path, monkeypatch) -> None:
    (tmp_path / "imgs" / "a").mkdir(parents=True)
    composed = compose(Request(recipe="fmnist-long", data=str(tmp_path / "imgs")))
    recipe = get_recipe("fmnist-long")
    assert composed.run.data == dataclasses.replace(recipe.data, dataset=str(tmp_path / "imgs"))
    assert composed.run.data.crop_padding == 2 and composed.run.data.flip
    assert composed.origin["data.dataset"] == "--data"
    # a relative folder is recorded absolute: a later command from elsewhere finds it
    monkeypatch.chdir(tmp_path)
    relative = compose(Request(data="imgs"))
    assert relative.run.data.dataset == str(tmp_path / "imgs")
    assert compose(Request(sets=("data=imgs",))).run.data == relative.run.data
    assert compose(Request(recipe="smoke", data="cifar10:c10")).run.data.dataset == (
        f"cifar10:{tmp_path / 'c10'}"
    )


def test_without_a_recipe_the_scratch_recipe_and_the_data_is_required() -> None:
    composed = compose(Request(data="synthetic"))
    assert composed.recipe.name == "scratch"
    assert composed.run.optim.name == "adam" and composed.run.train.label_smoothing == 0.1
    assert composed.run.data.flip is False  # no flips unless data.flip=true
    with pytest.raises(ConfigError, match="say what to train on: --data DIR"):
        compose(Request())


def test_the_data_decides_classes_channels_and_a_sized_schedule_unless_set() -> None:
    composed = compose(Request(data="synthetic", sets=("train.batch_size=64",)))
    adapted = adapt(composed, num_classes=7, channels=1, train_size=1_800)
    assert (adapted.run.model.num_classes, adapted.run.model.in_chans) == (7, 1)
    assert adapted.origin["model.num_classes"] == adapted.origin["model.in_chans"] == "data"
    # 300,000 examples / 1,800 images: under 10,000 from scratch, with the toolbox
    assert adapted.run.train.duration == "167ep" and adapted.run.train.mixup == 0.8
    assert adapted.origin["train.duration"] == (
        "recipe scratch, for 1,800 training images (under 10,000 from scratch: the toolbox's "
        "augmentation over a longer schedule)"
    )
    from vitkit.recipes.scratch import scratch_schedule

    assert scratch_schedule(1_800, None, True) == (  # from pretrained weights: the plain recipe
        {**scratch_schedule(60_000)[0], "train.duration": "56ep", "optim.warmup": "2.8ep",
         "train.eval_every": "5.6ep", "train.save_every": "5.6ep"},
        None,
    )  # fmt: skip
    large = adapt(composed, num_classes=7, channels=1, train_size=60_000)
    assert large.run.train.duration == "20ep" and large.run.train.mixup == 0.0
    assert large.origin["train.duration"] == "recipe scratch, for 60,000 training images"
    assert adapted.run.train.batch_size == 64 and adapted.origin["train.batch_size"] == "--set"
    pinned = compose(
        Request(
            data="synthetic", sets=("model.num_classes=3", "model.in_chans=3", "train.duration=2ep")
        )
    )
    kept = adapt(pinned, num_classes=7, channels=1, train_size=1_800)
    assert (kept.run.model.num_classes, kept.run.model.in_chans) == (3, 3)
    assert kept.run.train.duration == "2ep" and kept.origin["train.duration"] == "--set"
    # a recipe without a sized schedule keeps its own
    fixed = adapt(compose(Request(recipe="smoke")), num_classes=4, channels=3, train_size=128)
    assert fixed.run == get_recipe("smoke")


def test_every_origin_names_a_key_of_the_config() -> None:
    for model in ("ViT-S/16", "R50+ViT-B/16"):
        composed = compose(Request(data="synthetic", model=model, sets=("optim.lr=1e-4",)))
        assert set(composed.origin) == set(flat(composed.run.to_dict()))
        assert composed.origin["model.patch_size"] == f"preset {model}"
    hybrid = compose(Request(data="synthetic", model="R50+ViT-B/16"))
    assert hybrid.origin["model.resnet.num_layers"] == "preset R50+ViT-B/16"


def test_finetune_takes_the_checkpoints_architecture_and_refuses_changing_it() -> None:
    pretrained = dataclasses.replace(
        get_config("ViT-Ti/8"), image_size=32, num_classes=10, representation_size=64
    )
    request = Request(init_from="runs/x/best", data="synthetic", sets=("model.patch_size=8",))
    composed = compose(request, checkpoint=pretrained)
    assert composed.recipe.name == "finetune"
    model = composed.run.model
    assert (model.patch_size, model.image_size, model.representation_size) == (8, 32, None)
    assert composed.run.optim.name == "sgd" and composed.run.train.accum_steps == 8
    assert "model.in_chans" in composed.fixed  # the checkpoint's patch embedding decides
    assert composed.run.init_from == "runs/x/best"
    higher = compose(
        dataclasses.replace(request, sets=("model.image_size=64",)), checkpoint=pretrained
    )
    assert higher.run.model.image_size == 64
    with pytest.raises(
        ConfigError,
        match=r"model\.patch_size=16: fine-tuning keeps the checkpoint's architecture \(patch_size=8\)",
    ):
        compose(dataclasses.replace(request, sets=("model.patch_size=16",)), checkpoint=pretrained)
    with pytest.raises(ConfigError, match="records no training data"):
        compose(Request(init_from="x.npz"), checkpoint=pretrained)
    recorded = compose(
        Request(init_from="runs/x/best"), checkpoint=pretrained, checkpoint_data="synthetic"
    )
    assert (
        recorded.run.data.dataset == "synthetic" and recorded.origin["data.dataset"] == "checkpoint"
    )


def test_a_named_recipe_keeps_its_resolution_when_fine_tuning() -> None:
    """finetune-paper fine-tunes at 384 whatever the checkpoint's 224; the default recipe keeps
    the checkpoint's resolution."""
    pretrained = get_config("ViT-B/16")
    paper = compose(
        Request(recipe="finetune-paper", init_from="b16.npz", data="cifar10"), checkpoint=pretrained
    )
    assert paper.run.model.image_size == 384
    assert paper.origin["model.image_size"] == "recipe finetune-paper"
    default = compose(Request(init_from="b16.npz", data="cifar10"), checkpoint=pretrained)
    assert (
        default.run.model.image_size == 224 and default.origin["model.image_size"] == "checkpoint"
    )


def test_a_sized_batch_splits_evenly_across_processes() -> None:
    composed = compose(Request(data="synthetic"))
    assert adapt(composed, num_classes=3, channels=3, train_size=100).run.train.batch_size == 12
    across = adapt(composed, num_classes=3, channels=3, train_size=100, world=8)
    assert across.run.train.batch_size == 8  # 100 // 8 = 12, made a multiple of 8
    few = adapt(composed, num_classes=3, channels=3, train_size=20, world=4)
    assert few.run.train.batch_size == 4  # at least one image per process


def test_default_run_dir_is_named_after_the_choices_and_stable() -> None:
    def run_dir(request: Request) -> Path:
        return default_run_dir(request, compose(request))

    assert run_dir(Request(recipe="fmnist")) == Path("runs/fmnist")
    a = run_dir(Request(data="/data/digits", model="ViT-Ti/8"))
    assert re.fullmatch(r"runs/scratch-vit-ti-8-digits-[0-9a-f]{6}", str(a))
    b = run_dir(Request(data="/data/digits", model="vit_tiny_patch8_224", sets=("train.seed=1",)))
    c = run_dir(Request(data="/data/digits", model="ViT-Ti/8", sets=("train.seed = 1",)))
    assert b == c and b.name.startswith("scratch-vit-ti-8-digits-") and b != a
    d = run_dir(Request(data="/data/digits", model="ViT-Ti/8", sets=("train.seed=2",)))
    assert d != b
    other = run_dir(Request(data="/elsewhere/digits", model="ViT-Ti/8"))  # another folder
    assert other != a and other.name.startswith("scratch-vit-ti-8-digits-")
    # what a resume may change names no run: a larger time budget continues the same one
    for placed in ("train.time_budget=8s", "train.time_budget=1h", "data.num_workers=0"):
        again = Request(data="/data/digits", model="ViT-Ti/8", sets=("train.seed=1", placed))
        assert run_dir(again) == b


def test_config_errors_are_reported_before_torch_is_imported(tmp_path: Path) -> None:
    code = (
        "import sys\nfrom vitkit.cli import main\n"
        "codes = [main(['train', '--data', 'synthetic', '--set', 'data.flip=maybe']),"
        " main(['train', '--data', '/no/such/folder']),"
        " main(['config', '--recipe', 'fmnist', '--set', 'optim.lr=0'])]\n"
        "print(codes, 'torch' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip().splitlines()[-1] == "[2, 2, 2] False", proc.stderr
    err = proc.stderr.splitlines()
    assert err[0] == "vitkit train: error: data.flip=maybe is not valid: expected true or false"
    assert err[1].startswith("vitkit train: error: data: image folder /no/such/folder not found")
    assert err[2] == "vitkit config: error: optim.lr=0 is not valid: expected a number > 0"


def test_config_lists_every_key_with_type_value_allowed_origin_and_doc(
    tmp_path: Path, capsys
) -> None:
    from PIL import Image

    from vitkit.cli import main

    for k in range(3):  # 3 classes of 40 images: 36 for training, 4 held out
        (tmp_path / f"c{k}").mkdir()
        for i in range(40):
            Image.new("L", (8, 8), 60 * k + i).save(tmp_path / f"c{k}" / f"{i}.png")
    args = ["config", "--data", str(tmp_path), "--model", "ViT-Ti/8", "--set", "optim.lr=3e-4"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert out.startswith(
        f"recipe scratch; data {tmp_path}: 3 classes, 108 training images (listed, before "
        "verification); run directory runs/scratch-vit-ti-8-"
    )
    keys = list(flat(compose(Request(data="synthetic")).run.to_dict()))
    for key in keys:
        assert f"\n{key} = " in out, key
    assert (
        "optim.lr = 0.0003    (--set)\n    float: a number > 0\n    the peak learning rate" in out
    )
    assert "model.hidden_size = 192    (preset ViT-Ti/8)" in out
    assert "optim.name = adam    (recipe scratch)\n    'adam', 'sgd' or 'muon'\n" in out
    assert "model.num_classes = 3    (data)" in out
    assert "model.in_chans = 3    (the data: 1 if every training image is greyscale" in out
    why = "under 10,000 from scratch: the toolbox's augmentation over a longer schedule"
    assert f"train.duration = 300ep    (recipe scratch, for 108 training images ({why}))" in out
    assert f"train.mixup = 0.8    (recipe scratch, for 108 training images ({why}))" in out
    assert main(["config", "--recipe", "fmnist", "train.b*"]) == 0
    out = capsys.readouterr().out
    assert "train.batch_size = 128" in out and "train.compile" not in out and "optim" not in out
    assert main(["config", "--recipe", "fmnist", "nothing"]) == 2
    capsys.readouterr()
    for recipe in RECIPES:  # every recipe's keys, hybrids' and ResNets' included
        if RECIPES[recipe].build().data.source.kind == "folder":
            continue  # its data is ImageNet, a folder not here
        assert main(["config", "--recipe", recipe]) == 0, recipe
    assert main(["config", "--data", "synthetic", "--model", "R50+ViT-B/16", "model.resnet"]) == 0
    out = capsys.readouterr().out
    assert "model.resnet.num_layers = (3, 4, 9)    (preset R50+ViT-B/16)" in out


def test_config_and_train_refuse_the_inception_crop_with_crop_padding_before_any_data(
    tmp_path: Path, capsys
) -> None:
    """The rule the loader keeps (one way of cropping) is the config's: ``vitkit config`` refuses
    what ``vitkit train`` refuses, in one line naming both keys, from the settings alone (the
    folder named does not exist: its error would come first if the data were looked at)."""
    from vitkit.cli import main

    absent = str(tmp_path / "photos")
    crops = ["--set", "data.inception_crop=true", "--set", "data.crop_padding=4"]
    line = (
        "error: data.crop_padding=4 is not valid: expected 0 with data.inception_crop=True (the "
        "inception crop excludes crop padding: choose one way of cropping)\n"
    )
    assert main(["config", "--recipe", "scratch", "--data", absent, *crops]) == 2
    assert capsys.readouterr().err == f"vitkit config: {line}"
    run_dir = tmp_path / "run"
    assert (
        main(["train", "--recipe", "scratch", "--data", absent, *crops, "--run-dir", str(run_dir)])
        == 2
    )
    assert capsys.readouterr().err == f"vitkit train: {line}"
    assert not run_dir.exists()
    assert main(["config", "--recipe", "scratch", "--data", absent, crops[1]]) == 2  # then the data
    assert "photos not found" in capsys.readouterr().err
    with pytest.raises(ConfigError, match=r"data\.crop_padding=2 .* data\.inception_crop=True"):
        dataclasses.replace(get_recipe("finetune-paper").data, crop_padding=2)


def test_train_help_lists_the_recipes(capsys) -> None:
    from vitkit.cli import main
    from vitkit.recipes import RECIPES

    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    for name, recipe in RECIPES.items():
        assert f"  {name}" in out and recipe.about.split()[0] in out
    assert RunConfig  # the config class the listing documents


def test_what_the_machine_decides_has_its_origin_and_the_run_records_it(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """The precision of ``auto`` and the workers of none are decided before the run, said with
    their origin by the run and by ``vitkit config``, and recorded in config.json; running the
    command again reads the run directory's config.json once."""
    import json

    from vitkit.cli import main

    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    run_dir = tmp_path / "run"
    argv = ["train", "--recipe", "smoke", "--set", "train.device=cpu", "--no-progress"]
    argv += ["--run-dir", str(run_dir)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    no_bf16 = "auto: this CPU has no native bf16 (neither AVX512_BF16 nor AMX-BF16)"
    assert f"{no_bf16}: train.precision='fp32'" in out
    assert re.search(r"none on this machine: \d+ cores for 1 process, less one each: "
                     r"data\.num_workers=\d+", out)  # fmt: skip
    saved = json.loads((run_dir / "config.json").read_text())
    assert saved["train"]["precision"] == "fp32" and isinstance(saved["data"]["num_workers"], int)
    assert main(["config", "--recipe", "smoke", "train.precision"]) == 0
    assert f"train.precision = fp32    ({no_bf16})" in capsys.readouterr().out

    reads: list[Path] = []
    read_text = Path.read_text

    def counted(self: Path, *args, **kwargs) -> str:
        reads.append(self)
        return read_text(self, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", counted)
    assert main(argv) == 0  # finished: evaluated again
    assert reads.count(run_dir / "config.json") == 1


def test_a_command_prepares_its_run_once(tmp_path: Path, monkeypatch, capsys) -> None:
    """``vitkit train`` prepares its run once (``compose.prepare``) and trains what it prepared
    (``train_prepared``): a new run and a resumed one each resolve the device once and read the
    data once, and the resumed one reads its config.json once."""
    from helpers import count_preparation, stopped_copy
    from vitkit.cli import main

    argv = ["train", "--recipe", "smoke", "--set", "train.device=cpu", "--no-progress"]
    argv += ["--set", "train.save_every=4st"]
    full, resumed = tmp_path / "full", tmp_path / "resumed"
    seen = count_preparation(monkeypatch)
    assert main([*argv, "--run-dir", str(full)]) == 0
    assert (seen[full / "config.json"], seen["device"], seen["data"]) == (0, 1, 1)
    stopped_copy(full, resumed, step=4)
    seen.clear()
    assert main([*argv, "--run-dir", str(resumed)]) == 0
    assert (seen[resumed / "config.json"], seen["device"], seen["data"]) == (1, 1, 1)
    assert "resuming from step 4 of 8" in capsys.readouterr().out


def _greyscale_folder(root: Path, classes: int = 3, each: int = 4) -> Path:
    """``root/c<k>/<i>.png``: ``each`` greyscale 16x16 images in each of ``classes`` folders."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for k in range(classes):
        (root / f"c{k}").mkdir(parents=True)
        for i in range(each):
            pixels = rng.integers(0, 256, (16, 16), dtype=np.uint8)
            Image.fromarray(pixels, mode="L").save(root / f"c{k}" / f"{i}.png")
    return root


# A run of three steps on the CPU, as --set items
SHORT = ("train.duration=3st", "optim.warmup=1st", "train.batch_size=4", "train.device=cpu")


def test_fit_trains_what_the_command_trains(tmp_path: Path) -> None:
    """``vitkit.fit(recipe=, data=, sets=)`` takes the command's path: the run it trains is the
    one ``vitkit train`` trains with those flags (the classes and the channels the data's: 3
    greyscale classes where the smoke recipe has 4 of RGB; what is set, as set), and it logs
    the same steps."""
    import json

    import vitkit
    from helpers import deterministic_metrics
    from vitkit.cli import main

    data = _greyscale_folder(tmp_path / "grey")
    vitkit.fit(recipe="smoke", data=str(data), sets=SHORT, run_dir=tmp_path / "fit", progress=False)
    argv = ["train", "--recipe", "smoke", "--data", str(data), "--no-progress"]
    argv += [item for key in SHORT for item in ("--set", key)]
    assert main([*argv, "--run-dir", str(tmp_path / "command")]) == 0
    saved = json.loads((tmp_path / "fit" / "config.json").read_text())
    assert saved == json.loads((tmp_path / "command" / "config.json").read_text())
    assert (saved["model"]["num_classes"], saved["model"]["in_chans"]) == (3, 1)
    assert saved["train"]["duration"] == "3st"
    fitted = deterministic_metrics(tmp_path / "fit")
    assert fitted == deterministic_metrics(tmp_path / "command") and fitted


def test_a_folder_of_one_class_is_refused_before_training(tmp_path: Path, capsys) -> None:
    """One class folder trained to loss 0 and accuracy 1.0, exit 0, without a word."""
    from vitkit.cli import main

    data = _greyscale_folder(tmp_path / "one", classes=1)
    argv = ["train", "--recipe", "smoke", "--data", str(data), "--run-dir", str(tmp_path / "r")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err == (
        f"vitkit train: error: {data} holds 1 class ('c0'): a classifier trains on at least 2, "
        "a folder of images per class\n"
    )
    assert not (tmp_path / "r").exists()


def test_fit_keeps_every_value_of_a_run_config_as_given(tmp_path: Path) -> None:
    """A ``RunConfig`` given whole is set in every value: the data decides none of them (its
    channels are read as the config says; classes that are not the config's are refused), and
    only what the config leaves to the machine is decided."""
    import json

    import vitkit
    from vitkit.config import parse_set, replace

    data = _greyscale_folder(tmp_path / "grey")
    run = replace(get_recipe("smoke"), {**parse_set(RunConfig, SHORT), "data.dataset": str(data)})
    with pytest.raises(ConfigError, match=r"model\.num_classes=4 but the dataset has 3 classes"):
        vitkit.fit(run, run_dir=tmp_path / "four", progress=False)
    three = replace(run, {"model.num_classes": 3})
    vitkit.fit(three, run_dir=tmp_path / "three", progress=False)
    saved = flat(json.loads((tmp_path / "three" / "config.json").read_text()))
    given = flat(three.to_dict())
    # what it left to the machine: auto precision and step, the decoding workers of none
    left = {"train.precision", "train.compile", "data.num_workers"}
    assert {k for k in given if saved[k] != given[k]} == left
    assert (given["train.precision"], saved["train.precision"]) == ("auto", "fp32")
    assert (given["train.compile"], saved["train.compile"]) == ("auto", False)  # on a CPU
    assert saved["model.in_chans"] == 3  # as given: the greyscale images read as RGB


def test_fit_takes_a_run_config_or_the_flags_that_compose_one(tmp_path: Path) -> None:
    """``fit(run, recipe=...)`` would have to drop one of them; ``sets`` of one string would be
    read a character at a time: each is one line, before anything is read."""
    import vitkit

    with pytest.raises(ConfigError, match=r"^fit\(run, recipe=, sets=\): a RunConfig is the whole"):
        vitkit.fit(get_recipe("smoke"), recipe="smoke", sets=SHORT, run_dir=tmp_path)
    with pytest.raises(ConfigError, match="expected a list of 'key=value' items"):
        vitkit.fit(recipe="smoke", sets="train.duration=3st", run_dir=tmp_path)
    with pytest.raises(ConfigError, match="say what to train on"):
        vitkit.fit(run_dir=tmp_path)
    with pytest.raises(ConfigError, match=r"^fit\(run=\{'a': 1\}\): expected a RunConfig"):
        vitkit.fit({"a": 1}, run_dir=tmp_path)  # type: ignore[arg-type]  # AttributeError before
    for wrong, said in [  # each a TypeError or an AttributeError from inside before
        ({"sets": None}, "sets=None: expected a list of 'key=value' items"),
        ({"sets": {"train.seed": 1}}, "(a dict: [f'{k}={v}' for k, v in sets.items()])"),
        ({"sets": ["train.seed=1", 5]}, "sets: 5 is not a 'key=value' item (a str)"),
        ({"recipe": 5}, "recipe=5: expected a str, or None"),
        ({"run_dir": None}, "run_dir=None: expected a folder's path"),
    ]:
        with pytest.raises(ConfigError, match=re.escape(said)):
            vitkit.fit(**{"recipe": "smoke", "run_dir": tmp_path, **wrong})  # type: ignore[arg-type]
    assert not any(tmp_path.iterdir())


def test_a_resumed_run_is_prepared_with_the_images_and_the_holdout_it_saw(tmp_path: Path) -> None:
    """A run whose checkpoint records its classes in another order than its data's own (numbered
    class folders, in order by name when it began) is prepared with its data in that order
    before the holdout is drawn, as ``compose.prepare`` prepares it: the images it validated on, not a
    holdout drawn in the data's order and relabelled."""
    import json

    import numpy as np
    from PIL import Image

    from vitkit.compose import prepare
    from vitkit.data.run_data import RESUMED, build_data
    from vitkit.train.rundir import RunLock

    numbered = [str(k) for k in range(13)]
    by_name = sorted(numbered)  # 0, 1, 10, 11, 12, 2, ...
    rng = np.random.default_rng(0)
    for name in numbered:
        for i in range(4):
            path = tmp_path / "digits" / name / f"{i}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(rng.integers(0, 256, (8, 8, 3), dtype=np.uint8)).save(path)
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints" / "step_00000002").mkdir(parents=True)
    (run_dir / "checkpoints" / "step_00000002" / "config.json").write_text(
        json.dumps({"class_names": by_name})
    )
    request = Request(data=str(tmp_path / "digits"), sets=("data.holdout=0.25",))
    with RunLock(run_dir) as lock:
        prepared = prepare(compose(request), run_dir, lock=lock)
    run = prepared.run
    assert prepared.data.classes == by_name and prepared.record.class_names == by_name
    kept = build_data(run.data, run.model, seed=run.train.seed, in_chans=3, class_order=by_name)
    assert prepared.data.val.samples == kept.val.samples
    relabelled = build_data(run.data, run.model, seed=run.train.seed, in_chans=3)
    relabelled = relabelled.in_class_order(by_name, RESUMED)
    assert {p for p, _ in relabelled.val.samples} != {p for p, _ in kept.val.samples}


def _resumed_from_step_4(full: Path, to: Path, argv: list[str], capsys) -> tuple[Path, str]:
    """A copy of run ``full`` as stopped after its step-4 checkpoint, continued by the command
    ``argv``: the copy, and what the command printed."""
    import shutil

    from helpers import stopped_copy
    from vitkit.cli import main

    resumed = stopped_copy(full, to, step=4)
    shutil.rmtree(resumed / "best")
    (resumed / "metrics.jsonl").unlink()
    assert main([*argv, "--run-dir", str(resumed)]) == 0
    return resumed, capsys.readouterr().out


def test_a_cpu_with_native_bf16_records_bf16_and_a_resume_never_decides_again(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """Where ``auto`` stands for bf16 (a CPU standing in for one with AVX512_BF16, the smoke
    model's batch counted as enough), the run says why and config.json records bf16; the same
    command on a CPU without native bf16 resumes in bf16, as recorded, and says so."""
    import json

    from vitkit.cli import main

    bf16_from_any_size(monkeypatch)
    monkeypatch.setenv("VITKIT_CPU_BF16", "avx512_bf16")
    full = tmp_path / "full"
    argv = ["train", "--recipe", "smoke", "--set", "train.device=cpu", "--no-progress"]
    assert main([*argv, "--run-dir", str(full)]) == 0
    out = capsys.readouterr().out
    assert re.search(
        r"auto: this CPU has AVX512_BF16, and a forward pass of a batch is [\d.e-]+ GFLOP: "
        r"train\.precision='bf16'",
        out,
    )
    assert json.loads((full / "config.json").read_text())["train"]["precision"] == "bf16"
    assert main(["config", "--recipe", "smoke", "train.precision"]) == 0
    assert "train.precision = bf16    (auto: this CPU has AVX512_BF16, and" in (
        capsys.readouterr().out
    )

    monkeypatch.setenv("VITKIT_CPU_BF16", "none")  # the run moves to a CPU without bf16
    resumed, out = _resumed_from_step_4(full, tmp_path / "resumed", argv, capsys)
    said = f"recorded in {resumed / 'config.json'}: "
    assert re.search(f"{re.escape(said)}.*train\\.precision='bf16'", out)
    assert json.loads((resumed / "config.json").read_text())["train"]["precision"] == "bf16"
    after = [json.loads(line) for line in (resumed / "metrics.jsonl").read_text().splitlines()]
    uninterrupted = [json.loads(line) for line in (full / "metrics.jsonl").read_text().splitlines()]
    assert [r["loss"] for r in after if r["step"] > 4] == [
        r["loss"] for r in uninterrupted if r["step"] > 4
    ]


@pytest.mark.parametrize(
    ("device", "settings", "launch", "compiled"),
    [
        ("cpu", {}, None, False),  # as before auto
        ("cuda", {}, None, True),  # 1.26x the eager step on an H200
        ("cuda", {}, "ddp", False),  # under torchrun: measured eager only
        ("cuda", {}, "fsdp", False),
        ("cuda", {}, "ddp1", False),  # torchrun wraps one process too
        ("cuda", {"train.objective": "mpp"}, None, False),  # compiled classification only
        ("cuda", {"train.activation_checkpointing": True}, None, False),  # measured eager only
    ],
)
def test_compile_auto_over_every_kind_of_device(
    device: str, settings: dict, launch: str | None, compiled: bool, monkeypatch
) -> None:
    """``train.compile`` auto, decided for each device, objective, parallelism and activation
    checkpointing, with its reason; a value the run sets is left alone."""
    import torch

    from vitkit.config import replace
    from vitkit.runtime import machine

    for name in ("RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    if launch:  # as torchrun starts a process of two (ddp1: of one)
        monkeypatch.setenv("RANK", "0")
        monkeypatch.setenv("WORLD_SIZE", "1" if launch.endswith("1") else "2")
    classify_only = ("train.label_smoothing", "train.mixup", "train.cutmix")
    run = replace(
        get_recipe("smoke"),
        {"train.parallel": (launch or "ddp").rstrip("1")}
        | dict.fromkeys(classify_only, 0.0)
        | settings,
    )
    decided = machine.decide(run, torch.device(device), image_flops=10**6)
    value, why = decided["train.compile"]
    assert value is compiled and why.startswith("auto")
    assert why.split(": ", 1)[1].startswith("compiled" if compiled else "eager")
    fixed = replace(run, {"train.compile": False})
    assert "train.compile" not in machine.decide(fixed, torch.device(device), image_flops=10**6)
    # what the loop reads: auto undecided is eager, the decided value is what it says
    assert run.train.compiled is False
    assert replace(run, {"train.compile": value}).train.compiled is value


def test_a_resume_keeps_the_recorded_compile_and_never_decides_again(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """config.json records what ``train.compile`` auto stood for (eager, here on a CPU); the same
    command resumes with it without deciding again."""
    import json

    from vitkit.cli import main
    from vitkit.runtime import machine

    full = tmp_path / "full"
    argv = ["train", "--recipe", "smoke", "--set", "train.device=cpu", "--no-progress"]
    assert main([*argv, "--run-dir", str(full)]) == 0
    assert "auto on cpu: eager, as before" in capsys.readouterr().out
    assert json.loads((full / "config.json").read_text())["train"]["compile"] is False

    def never(*args: object, **kwargs: object) -> None:
        raise AssertionError("a resume decided train.compile again")

    monkeypatch.setattr(machine, "compile_on", never)
    resumed, out = _resumed_from_step_4(full, tmp_path / "resumed", argv, capsys)
    said = f"recorded in {resumed / 'config.json'}: "
    assert re.search(f"{re.escape(said)}.*train\\.compile=False", out)


def test_another_runs_checkpoint_continues_with_what_that_run_decided(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """``--resume`` of another run's checkpoint into a new directory: what the command leaves
    ``auto`` is what that run decided (eager, on a CPU), not decided again where it would come
    out otherwise (here a stand-in for CUDA, where auto compiles), which the resume would
    refuse as a change of config."""
    import json

    from vitkit.cli import main
    from vitkit.runtime import machine

    first = tmp_path / "first"
    argv = ["train", "--recipe", "smoke", "--set", "train.device=cpu", "--no-progress"]
    assert main([*argv, "--run-dir", str(first)]) == 0
    capsys.readouterr()
    monkeypatch.setattr(machine, "compile_on", lambda run, device: (True, "auto on cuda"))
    checkpoint = first / "checkpoints" / "step_00000004"
    second = tmp_path / "second"
    # its step as the help shows it, or unpadded (the directory's name pads it to 8 digits)
    assert (
        main([*argv, "--run-dir", str(second), "--resume", str(checkpoint.parent / "step_4")]) == 0
    )
    said = f"recorded in {checkpoint / 'config.json'}: "
    assert re.search(f"{re.escape(said)}.*train\\.compile=False", capsys.readouterr().out)
    assert json.loads((second / "config.json").read_text())["train"]["compile"] is False


def test_a_finished_checkpoint_resumed_alone_leaves_the_best_the_summary_names(
    tmp_path: Path, capsys
) -> None:
    """The final checkpoint resumed into a new directory, where the validation split is the test
    split: the summary said "best weights in .../best" and wrote none (only a run with a test
    split apart wrote them). Another run's checkpoints copied into a directory are checked as
    --resume's are."""
    from vitkit.cli import main

    argv = ["train", "--recipe", "smoke", "--no-progress", "--set", "train.duration=8st"]
    argv += ["--set", "train.save_every=2st", "--set", "train.eval_every=4st"]
    assert main([*argv, "--run-dir", str(tmp_path / "a")]) == 0
    last = tmp_path / "a" / "checkpoints" / "step_00000008"
    assert main([*argv, "--run-dir", str(tmp_path / "b"), "--resume", str(last)]) == 0
    assert f"best weights in {tmp_path / 'b' / 'best'}" in capsys.readouterr().out
    assert (tmp_path / "b" / "best" / "model.safetensors").is_file()
    # another run's checkpoints copied into a directory are refused as --resume refuses them:
    # they were continued under this command's settings, whatever they were
    shutil.copytree(tmp_path / "a" / "checkpoints", tmp_path / "c" / "checkpoints")
    capsys.readouterr()
    assert main([*argv, "--run-dir", str(tmp_path / "c"), "--set", "optim.lr=0.01"]) == 2
    assert "holds a run with a different config (optim.lr " in capsys.readouterr().err


def test_a_checkpoint_left_aside_by_a_kill_between_renames_is_resumed(tmp_path: Path, capsys):
    """A process killed between ``atomic_directory``'s two renames of its newest checkpoint (a
    re-save) left it aside, whole, under a temporary name. The next start puts it back, and
    resumes from it, not from the checkpoint before (the run's record was read before)."""
    import shutil

    from vitkit.cli import main

    argv = ["train", "--recipe", "smoke", "--no-progress", "--set", "train.save_every=2st"]
    run = tmp_path / "run"
    assert main([*argv, "--set", "train.duration=4st", "--run-dir", str(run)]) == 0
    newest = run / "checkpoints" / "step_00000004"
    shutil.copytree(newest, newest.with_name(".tmp-step_00000004-deadbeef"))
    newest.rename(newest.with_name(".tmp-step_00000004-deadbeef-old"))
    capsys.readouterr()
    assert main([*argv, "--set", "train.duration=4st", "--run-dir", str(run)]) == 0
    assert "already finished (step 4)" in capsys.readouterr().out
    assert sorted(p.name for p in (run / "checkpoints").iterdir())[-1] == newest.name


def test_the_committed_runs_resume_in_fp32_on_a_cpu_with_native_bf16(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """Every run directory written before ``auto`` could mean bf16 on a CPU records fp32 (as
    ``train.bf16: false``): the command that wrote resume_v1, run again where ``auto`` would
    now choose bf16, continues it in fp32 and logs what its code logged uninterrupted."""
    import json
    import shutil

    from vitkit.cli import main

    bf16_from_any_size(monkeypatch)
    monkeypatch.setenv("VITKIT_CPU_BF16", "amx_bf16")
    old = Path(__file__).parent / "data" / "resume_v1"
    run_dir = Path(shutil.copytree(old / "run", tmp_path / "run"))
    sets = [
        "train.duration=6st", "train.save_every=2st", "train.log_every=3st",
        "train.eval_every=6st", "model.dropout_rate=0.1", "model.hidden_size=16",
        "model.mlp_dim=32", "train.ema=0.9", "train.mixup=0.2", "train.keep_last=3",
        "train.device=cpu", "data.num_workers=0",
    ]  # fmt: skip
    argv = ["train", "--recipe", "smoke", "--no-progress", "--run-dir", str(run_dir)]
    assert main([*argv, *(f"--set={s}" for s in sets)]) == 0
    said = f"recorded in {run_dir / 'config.json'}: "
    assert re.search(f"{re.escape(said)}.*train\\.precision='fp32'", capsys.readouterr().out)
    assert json.loads((run_dir / "config.json").read_text())["train"]["bf16"] is False
    expected = uninterrupted_log(old)
    got = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r.get("split")) for r in got] == [
        (r["step"], r.get("split")) for r in expected
    ]
    for ours, theirs in zip(got, expected, strict=True):  # other CPUs may round differently
        numbers = {k: v for k, v in theirs.items() if k != "split"}
        assert {k: ours[k] for k in numbers} == pytest.approx(numbers, rel=1e-4)


# Beyond a new run's bounds, each (config/keys.py ``check_new``), and the first key it names.
BEYOND = [
    ("data.aug_repeats=100", "data.aug_repeats=100 is not valid: expected an integer in [1, 64]"),
    ("data.random_erase_count=20", "data.random_erase_count=20 is not valid: expected an integer"),
    ("data.auto_augment=rand-n20", "data.auto_augment='rand-n20' is not valid: 'rand-n20' applies"),
]


@pytest.mark.parametrize(("item", "line"), BEYOND)
def test_a_new_run_beyond_a_toolbox_bound_is_refused_before_any_data_is_read(
    tmp_path: Path, monkeypatch, capsys, item: str, line: str
) -> None:
    """``data.auto_augment=rand-n1000000000`` ran 94 s, then a MemoryError traceback; now every
    count beyond its bound is one line, before the data is read or the run directory made."""
    import vitkit.data.run_data
    from vitkit.cli import main

    def no_data(*args: object, **kwargs: object) -> None:
        raise AssertionError("the data was read")

    monkeypatch.setattr(vitkit.data.run_data, "build_data", no_data)
    run_dir = tmp_path / "run"
    assert main(["train", "--recipe", "smoke", "--set", item, "--run-dir", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"vitkit train: error: {line}") and err.count("\n") == 1
    assert not run_dir.exists()


@pytest.mark.slow
def test_a_run_recorded_beyond_the_toolbox_bounds_resumes_as_it_began(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """A run directory written before the bounds, holding values beyond them all, resumes from
    its checkpoint with them and logs what the uninterrupted run logged; the same command in a
    new directory is refused."""
    import json

    import vitkit.compose
    from helpers import stopped_copy
    from vitkit.cli import main

    sets = [item for item, _ in BEYOND] + ["data.random_erase=0.5"]
    argv = ["train", "--recipe", "smoke", "--no-progress", "--set", "train.duration=4st"]
    argv += ["--set", "train.save_every=2st", *(a for s in sets for a in ("--set", s))]
    with monkeypatch.context() as before:  # the vitkit that wrote it had no bounds
        before.setattr(vitkit.compose, "check_new", lambda *args: None)
        full = tmp_path / "full"
        assert main([*argv, "--run-dir", str(full)]) == 0
    assert json.loads((full / "config.json").read_text())["data"]["aug_repeats"] == 100
    resumed = stopped_copy(full, tmp_path / "resumed", step=2)
    capsys.readouterr()
    assert main([*argv, "--run-dir", str(resumed)]) == 0

    def losses(run_dir: Path) -> list[float]:
        rows = map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
        return [r["loss"] for r in rows if "loss" in r and "split" not in r and r["step"] > 2]

    assert losses(resumed) == losses(full) != []
    assert main([*argv, "--run-dir", str(tmp_path / "new")]) == 2
    assert BEYOND[0][1] in capsys.readouterr().err
