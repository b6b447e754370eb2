"""``vitkit fewshot``, ``inspect``, ``eval --fast`` and ``eval --flip`` end to end on a trained checkpoint, and their
errors."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from vitkit import fit
from vitkit.cli import main
from vitkit.config import replace
from vitkit.recipes import get_recipe


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A smoke run evaluated with test-time flips."""
    run_dir = tmp_path_factory.mktemp("smoke")
    fit(replace(get_recipe("smoke"), {"data.test_flip": True}), run_dir=run_dir, progress=False)
    return run_dir


@pytest.fixture(scope="module")
def best(run_dir: Path) -> str:
    return str(run_dir / "best")


def test_test_flip_logs_both_accuracies(run_dir: Path) -> None:
    """The run's last evaluation is its final weights' accuracy with flips, and without."""
    from vitkit.config import DataConfig
    from vitkit.data import BatchOptions
    from vitkit.data.run_data import batches_of, build_data
    from vitkit.eval.metrics import evaluate
    from vitkit.io.api import load

    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    last = [r for r in map(json.loads, lines) if r.get("split") == "test"][-1]
    model = load(run_dir / "checkpoints" / f"step_{last['step']:08d}")
    data = build_data(DataConfig(dataset="synthetic"), model.cfg, seed=0)
    assert data.val_is_test  # synthetic data validates on its test split
    batches = batches_of(data.test, BatchOptions.evaluation(model.cfg, batch_size=256))
    flipped = evaluate(model, batches.epoch(0), model.cfg.num_classes, flip=True)
    plain = evaluate(model, batches.epoch(0), model.cfg.num_classes)
    assert last["accuracy"] == flipped.accuracy
    assert last["accuracy_one_view"] == plain.accuracy == flipped.accuracy_one_view


def test_eval_flip_prints_both_accuracies(best: str, capsys) -> None:
    assert main(["eval", best, "--data", "synthetic", "--no-flip"]) == 0
    plain = re.search(r"top-1 ([0-9.]+)", capsys.readouterr().out)[1]
    assert main(["eval", best, "--data", "synthetic", "--flip"]) == 0
    out = capsys.readouterr().out
    assert "each with its mirror image" in out
    assert re.search(r"top-1 without ([0-9.]+)", out)[1] == plain
    # without either, as the run evaluated: it had data.test_flip
    assert main(["eval", best, "--data", "synthetic"]) == 0
    assert capsys.readouterr().out.splitlines()[1:] == out.splitlines()[1:]


def test_fewshot_cli(best: str, capsys) -> None:
    assert main(["fewshot", best, "--data", "synthetic", "--shots", "1,4", "--seeds", "2"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^data\s+classes\s+train\s+test\s+1-shot\s+4-shot$", out, re.M)
    cell = r"([0-9.]+) \+- ([0-9.]+)"
    row = re.search(rf"^synthetic\s+4\s+128\s+32\s+{cell}\s+{cell}$", out, re.M)
    assert row is not None and all(0.0 <= float(x) <= 1.0 for x in row.groups())
    assert "over 2 seeds" in out


def test_fewshot_cli_errors(best: str, capsys) -> None:
    assert main(["fewshot", best, "--data", "synthetic", "--shots", "one"]) == 2
    assert "--shots 'one'" in capsys.readouterr().err
    assert main(["fewshot", best, "--data", "synthetic", "--shots", "100"]) == 2  # 32 per class
    assert "fewer than shots=100" in capsys.readouterr().err
    for l2 in ("inf", "nan", "0"):  # inf was a traceback from the Cholesky factorisation
        assert main(["fewshot", best, "--data", "synthetic", "--l2", l2]) == 2
        assert f"--l2 {float(l2)}: expected a finite number > 0" in capsys.readouterr().err


def test_eval_and_predict_refuse_a_checkpoint_without_a_head(best: str, tmp_path, capsys) -> None:
    """A headless checkpoint (num_classes=0, features only): eval divided by zero classes."""
    import vitkit

    headless = vitkit.load(best)
    headless.reset_head(0)
    path = vitkit.save(headless, tmp_path / "headless")
    image = tmp_path / "a.png"
    from PIL import Image

    Image.new("RGB", (16, 16)).save(image)
    for argv in (["eval", str(path), "--data", "synthetic"], ["predict", str(path), str(image)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert "has no classifier head (num_classes=0) to " in err and err.count("\n") == 1


def test_predict_shows_a_hostile_file_name_on_one_line(best: str, tmp_path, capsys) -> None:
    """A newline in a file's name made a second row that read as a result; an escape sequence
    reached the terminal. Each is shown escaped, one row an image."""
    from PIL import Image

    folder = tmp_path / "hostile"
    folder.mkdir()
    for name in ("a\nfake.png: 0 1.000.png", "\x1b[31mred.png"):
        Image.new("RGB", (16, 16)).save(folder / name, format="PNG")
    assert main(["predict", best, str(folder)]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert len(rows) == 2 and not any("\x1b" in row for row in rows)
    assert any(row.startswith(f"{folder}/a\\nfake.png: 0 1.000.png: ") for row in rows)


def test_inspect_cli_on_test_images_and_files(best: str, tmp_path: Path, capsys) -> None:
    out = tmp_path / "inspect"
    assert main(["inspect", best, "--data", "synthetic", "--out", str(out), "--max-maps", "4"]) == 0
    page = (out / "index.html").read_text()
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert pngs == [
        "attention_distance.png",
        "attention_rollout.png",
        "embedding_filters.png",
        "posemb_similarity.png",
    ]
    assert all(f'src="{name}"' in page for name in pngs)
    assert (
        "Images: synthetic: synthetic test (32 images), drawn at random (seed 0) from each class "
        "in turn: 32 at 16x16" in page
    )
    assert {p.suffix for p in out.iterdir()} == {".png", ".json", ".npz", ".html"}
    from PIL import Image

    Image.new("RGB", (40, 30), (200, 10, 10)).save(tmp_path / "red.png")
    files = tmp_path / "files"
    assert main(["inspect", best, "--images", str(tmp_path / "red.png"), "--out", str(files)]) == 0
    assert "Images: image files: 1 at 16x16 px" in (files / "index.html").read_text()  # resized
    assert (files / "attention_rollout.png").is_file()


def test_inspect_cli_errors(best: str, tmp_path: Path, capsys) -> None:
    assert main(["inspect", best, "--images", str(tmp_path / "no.png"), "--out", "x"]) == 2
    assert "no.png: no such file or folder" in capsys.readouterr().err
    (tmp_path / "empty").mkdir()  # a folder is read as predict reads one ("Is a directory: 3")
    assert main(["inspect", best, "--images", str(tmp_path / "empty"), "--out", "x"]) == 2
    assert f"{tmp_path / 'empty'}" in capsys.readouterr().err
    (tmp_path / "junk.png").write_bytes(b"not a png")
    assert main(["inspect", best, "--images", str(tmp_path / "junk.png"), "--out", "x"]) == 2
    assert "cannot read image" in capsys.readouterr().err
    assert main(["inspect", str(tmp_path / "nothing"), "--out", str(tmp_path / "o")]) == 2
    assert "nothing" in capsys.readouterr().err
    assert main(["inspect", best, "--data", "synthetic", "--out", "o", "--num-images", "0"]) == 2
    assert "error: --num-images 0: expected a positive number\n" in capsys.readouterr().err
    # the option at fault alone: --top 5, never given, was named beside --batch-size 0
    assert main(["predict", best, str(tmp_path / "junk.png"), "--batch-size", "0"]) == 2
    assert capsys.readouterr().err.endswith("error: --batch-size 0: expected a positive number\n")


def test_bf16_predictions_agree_with_fp32s(best: str) -> None:
    """RESULTS.md's check of bf16 inference on the main job's checkpoint, on a tiny trained
    model: bf16 and fp32 agree on top-1 for >= 99.5% of the images, and accuracy moves by
    <= 0.1 point."""
    import torch

    from vitkit.config import DataConfig
    from vitkit.data import BatchOptions
    from vitkit.data.run_data import batches_of, build_data
    from vitkit.eval.metrics import evaluate
    from vitkit.io.api import load

    model = load(best)
    data = build_data(DataConfig(dataset="synthetic"), model.cfg, seed=0)
    options = BatchOptions.evaluation(model.cfg, batch_size=64)
    predicted, correct = {}, {}
    for dtype in (None, torch.bfloat16):
        results = [
            evaluate(model, batches_of(images, options).epoch(0), model.cfg.num_classes,
                     autocast=dtype, predictions=True)
            for images in (data.train, data.test)
        ]  # fmt: skip
        predicted[dtype] = torch.cat([r.predictions for r in results])  # 160 images
        correct[dtype] = sum(r.accuracy * r.count for r in results)
    agree = (predicted[None] == predicted[torch.bfloat16]).double().mean().item()
    assert len(predicted[None]) == 160
    assert agree >= 0.995 and abs(correct[None] - correct[torch.bfloat16]) / 160 <= 0.001


def test_eval_fewshot_and_inspect_take_a_precision(best: str, tmp_path: Path, capsys) -> None:
    """``--precision`` of the verbs that run a checkpoint, said with its reason; bf16 gives
    this model's figures (its predictions agree: above)."""
    assert main(["eval", best, "--data", "synthetic", "--no-flip"]) == 0
    fp32 = capsys.readouterr().out
    no_bf16 = "auto: this CPU has no native bf16 (neither AVX512_BF16 nor AMX-BF16)"
    assert f"precision fp32 ({no_bf16})" in fp32.splitlines()
    assert main(["eval", best, "--data", "synthetic", "--no-flip", "--precision", "bf16"]) == 0
    bf16 = capsys.readouterr().out
    assert "precision bf16 (--precision bf16)" in bf16.splitlines()
    top1 = [re.search(r"top-1 ([0-9.]+)", out)[1] for out in (fp32, bf16)]
    assert top1[0] == top1[1]
    argv = ["fewshot", best, "--data", "synthetic", "--shots", "4", "--seeds", "1"]
    assert main([*argv, "--precision", "bf16"]) == 0
    assert "precision bf16 (--precision bf16)" in capsys.readouterr().out.splitlines()
    out = tmp_path / "inspect"
    argv = ["inspect", best, "--data", "synthetic", "--out", str(out), "--max-maps", "2"]
    assert main([*argv, "--num-images", "8", "--precision", "bf16"]) == 0
    assert "precision bf16 (--precision bf16)" in capsys.readouterr().out.splitlines()
    distances = json.loads((out / "attention_distance.json").read_text())
    assert all(d > 0 for layer in distances["mean_attention_distance_px"] for d in layer)


@pytest.mark.slow
def test_eval_fast_prints_the_same_figures(best: str, capsys) -> None:
    assert main(["eval", best, "--data", "synthetic", "--no-flip"]) == 0
    eager = capsys.readouterr().out
    assert main(["eval", best, "--data", "synthetic", "--fast", "--no-flip"]) == 0
    fast = capsys.readouterr().out
    assert (
        "engine torch, eager (auto: this CPU has no native bf16, where openvino was not measured)"
        in eager.splitlines()
    )
    assert "engine torch, compiled by " in fast and "(--fast: torch, compiled; backend auto" in fast
    figures = [line for line in eager.splitlines() if not line.startswith("engine ")]
    assert [line for line in fast.splitlines() if not line.startswith("engine ")] == figures
    assert "top-1" in eager


def test_train_reports_time_to_accuracy_only_for_a_recipe_with_targets(
    tmp_path: Path, capsys
) -> None:
    """smoke declares no targets: the run ends with its best accuracy and when it came; a recipe
    that declares them (fmnist-speed) gets its time to accuracy, with and without flips."""
    import dataclasses

    from vitkit.cli.training import _summary
    from vitkit.compose import Request, compose
    from vitkit.eval.metrics import Evaluation
    from vitkit.recipes import RECIPES
    from vitkit.train.loop import RunResult

    args = ["train", "--recipe", "smoke", "--no-progress", "--run-dir", str(tmp_path)]
    assert main([*args, "--set", "data.test_flip=True"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert not any(line.startswith("time to") for line in out)
    best = max(
        (r for r in map(json.loads, (tmp_path / "metrics.jsonl").read_text().splitlines())
         if r.get("split") == "test"),
        key=lambda r: r["accuracy"],
    )  # fmt: skip
    assert f"best test accuracy {best['accuracy']:.4f} at step {best['step']}," in out[-1]

    composed = compose(Request(recipe="smoke", sets=("data.test_flip=true",)))
    timed = dataclasses.replace(composed, recipe=RECIPES["fmnist-speed"])
    final = Evaluation(loss=0.1, accuracy=1.0, top5=1.0, count=32)
    result = RunResult("test", final, best=1.0)
    ended = dataclasses.replace(result, ended_early="ended early at step 3 (train.early_stop)")
    said = _summary(timed, ended, tmp_path)
    assert said[0] == "ended early at step 3 (train.early_stop)"  # said first, as the loop says it
    line = _summary(timed, result, tmp_path)[-1]
    assert line.startswith("time to accuracy") and "at 15 min" in line
    assert "each test image with its mirror" in line and "(one view: 90% " in line


def test_eval_and_fewshot_read_a_folder_with_workers(
    best: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--workers N`` decodes in N processes and changes nothing of what is printed; a
    negative number is one line."""
    import numpy as np
    from PIL import Image

    classes = get_recipe("smoke").model.num_classes
    rng = np.random.default_rng(0)
    for split in ("train", "test"):
        for k in range(4 * classes):
            path = tmp_path / "data" / split / f"c{k % classes}" / f"{k}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            Image.fromarray(rng.integers(0, 256, (20, 24, 3), dtype=np.uint8)).save(path)
    data = str(tmp_path / "data")
    outs = {}
    for workers in ("0", "2"):
        assert main(["eval", best, "--data", data, "--workers", workers]) == 0
        evaluated = capsys.readouterr().out
        fewshot = ["fewshot", best, "--data", data, "--shots", "1,2", "--workers", workers]
        assert main(fewshot) == 0
        outs[workers] = evaluated + capsys.readouterr().out
    assert outs["0"] == outs["2"] and "top-1" in outs["0"] and "2-shot" in outs["0"]
    assert main(["eval", best, "--data", data, "--workers", "-1"]) == 2
    assert capsys.readouterr().err.strip().endswith("--workers -1: expected a number >= 0")


def test_inspect_titles_each_map_with_the_predicted_probability(
    best: str, tmp_path: Path, monkeypatch
) -> None:
    """Each attention map is titled "true -> predicted p%", p the model's softmax probability of
    the class it predicts for that image."""
    import torch

    import vitkit.inspect
    from vitkit.io.api import load

    seen: dict = {}

    def keep(model, images, out_dir, *, titles, **kwargs) -> dict:
        seen.update(images=images, titles=titles)
        return {}

    monkeypatch.setattr(vitkit.inspect, "inspect_model", keep)
    argv = ["inspect", best, "--data", "synthetic", "--out", str(tmp_path), "--max-maps", "3"]
    assert main([*argv, "--num-images", "8"]) == 0
    with torch.no_grad():
        probs = load(best).eval()(seen["images"][:3]).softmax(dim=1)  # (3, K)
    assert len(seen["titles"]) == 3  # the maps drawn
    for title, p in zip(seen["titles"], probs, strict=False):
        true, predicted = title.split(" -> ")
        name, share = predicted.rsplit(" ", 1)
        assert share == f"{p.max().item():.0%}" and name == f"class_{p.argmax().item()}"
        assert true.startswith("class_")  # the image's own class, before the arrow


def test_inspect_draws_each_class_in_turn_at_random_the_same_every_time(
    best: str, tmp_path: Path, monkeypatch
) -> None:
    """inspect showed each class's first images in the split's order (on a folder of photos,
    one wallpaper's rotations); it shows ``sample_images``' seeded draw."""
    import torch

    import vitkit.inspect
    from vitkit.config import DataConfig
    from vitkit.data import BatchOptions, subset
    from vitkit.data.run_data import batches_of, build_data
    from vitkit.io.api import load

    seen: list = []
    monkeypatch.setattr(
        vitkit.inspect, "inspect_model", lambda model, images, *a, **k: seen.append(images) or {}
    )
    argv = ["inspect", best, "--data", "synthetic", "--out", str(tmp_path), "--num-images", "8"]
    assert main(argv) == 0 and main(argv) == 0
    assert torch.equal(seen[0], seen[1])
    cfg = load(best).cfg
    test = build_data(DataConfig(dataset="synthetic"), cfg, seed=0).test
    options = BatchOptions.evaluation(cfg, batch_size=256)

    def images(indices: torch.Tensor) -> torch.Tensor:
        return torch.cat([x for x, _ in batches_of(subset(test, indices), options).epoch(0)])

    assert torch.equal(seen[0], images(vitkit.inspect.sample_images(test.labels, 8)))
    first = [(test.labels == k).nonzero().flatten()[:2] for k in range(4)]  # each class's first
    assert not torch.equal(seen[0], images(torch.stack(first, 1).flatten()))  # in turn


def test_inspect_shows_a_folders_photos_once_before_any_twice(
    best: str, tmp_path: Path, monkeypatch
) -> None:
    """A folder whose classes hold the same photos (one wallpaper in its 4 rotations) showed one
    photo several times: inspect draws by the files' names, each once while there are enough."""
    from PIL import Image

    import vitkit.inspect

    for k in range(4):  # the smoke model's 4 classes, each the same 8 photos
        (tmp_path / "photos" / f"class_{k}").mkdir(parents=True)
        for i in range(8):
            Image.new("RGB", (20, 20), (30 * i, 240 - 30 * i, 90)).save(
                tmp_path / "photos" / f"class_{k}" / f"{i:04d}.png"
            )
    seen: list = []
    monkeypatch.setattr(
        vitkit.inspect, "inspect_model", lambda model, images, *a, **k: seen.append(images) or {}
    )
    data = str(tmp_path / "photos")
    argv = ["inspect", best, "--data", data, "--out", str(tmp_path / "o"), "--num-images", "8"]
    assert main(argv) == 0
    (images,) = seen  # (8, C, H, W): 8 different photos
    assert len({tuple(image.flatten().tolist()) for image in images}) == 8


def _accuracies(lines: list[str]) -> dict[str, str]:
    """Per-class lines of ``vitkit eval`` (two spaces, a name, its top-1 or --): name -> it."""
    return dict(line.split() for line in lines if re.fullmatch(r"  \S+ +([0-9.]+|--)", line))


def test_eval_of_many_classes_prints_the_best_and_worst_unless_asked_for_every_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A 64-class checkpoint on a shard of 240 images of most of its classes, a quarter of them
    labelled as it predicts them (so that its classes' top-1 differ): the 10 best and the 10
    worst classes with images, and a line saying so; ``--per-class`` prints all 64, a class
    without images as --."""
    import torch

    import vitkit
    from helpers import png_bytes, top1_predictions, write_tar
    from vitkit.config import ModelConfig

    classes = [f"class{k:02d}" for k in range(64)]
    cfg = ModelConfig(image_size=16, patch_size=8, hidden_size=16, num_layers=1, num_heads=2,
                      mlp_dim=32, num_classes=len(classes))  # fmt: skip
    model = vitkit.create_model(cfg)
    with torch.no_grad():  # predictions that depend on the image, some of them right
        model.head.weight.normal_(0, 5.0, generator=torch.Generator().manual_seed(0))
    checkpoint = str(vitkit.save(model, tmp_path / "ckpt", class_names=classes))
    root = tmp_path / "shards"
    root.mkdir()
    (root / "classes.txt").write_text("".join(f"{name}\n" for name in classes))
    labels = [i % 60 for i in range(240)]  # none of the last 4 classes, but as predicted
    for _ in range(2):  # the labels, then a quarter of them as the checkpoint predicts them
        members = {}
        for i, label in enumerate(labels):
            members[f"{i:04d}.png"], members[f"{i:04d}.cls"] = png_bytes(i), str(label).encode()
        write_tar(root / "images.tar", members)
        names, predicted = top1_predictions(Path(checkpoint), f"wds:{root}")
        by_key = dict(zip((name.rpartition(":")[2] for name in names), predicted.tolist(),
                          strict=True))  # fmt: skip
        labels = [by_key[f"{i:04d}"] if i < 60 else i % 60 for i in range(240)]
    argv = ["eval", checkpoint, "--data", f"wds:{root}", "--workers", "0"]

    assert main(argv) == 0
    out = capsys.readouterr().out.splitlines()
    assert main([*argv, "--per-class"]) == 0
    every = _accuracies(capsys.readouterr().out.splitlines())
    assert list(every) == classes
    ranked = sorted((k for k in classes if every[k] != "--"), key=lambda k: -float(every[k]))
    assert 50 < len(ranked) < 64 and len({every[k] for k in ranked}) > 5

    head = out.index(
        f"the 10 best of the {len(ranked)} classes with images; {64 - len(ranked)} of the 64 "
        "have none here (--per-class prints every class):"
    )
    best, worst = out[head + 1 : head + 11], out[head + 12 :]
    assert out[head + 11] == "the 10 worst:" and len(worst) == 10
    assert len(_accuracies(out)) == 20  # no other class is printed
    assert [line.split()[0] for line in best] == ranked[:10]
    worst_first = sorted(ranked[10:], key=lambda name: float(every[name]))
    assert [line.split()[0] for line in worst] == worst_first[:10]
    assert all(line == f"  {line.split()[0]:<24} {every[line.split()[0]]}" for line in best + worst)


@pytest.mark.parametrize("count", [50, 51])
def test_eval_prints_every_class_up_to_fifty(count: int) -> None:
    from vitkit.cli.evaluation import _per_class

    names = [f"c{k}" for k in range(count)]
    accuracies = [k / count for k in range(count)]
    lines = _per_class(names, accuracies, [1] * count, every=False)
    assert len(lines) == (count if count <= 50 else 22)
    assert len(_per_class(names, accuracies, [1] * count, every=True)) == count
