"""The verbs that run a checkpoint: ``eval``, ``predict``, ``fewshot``, ``inspect``."""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import DATA_SPECS
from ..config.fewshot import L2, PREPROCESSINGS, SAMPLINGS, SEEDS, SHOTS
from ..config.inference import ENGINES, INFERENCE_PRECISIONS, InferenceConfig
from ..config.keys import default_of, spec_of
from ..errors import ConfigError, VitkitError
from .common import (
    Verb,
    add_device_argument,
    add_workers_argument,
    image_inputs,
    require_positive,
    resolve_device,
    resolve_workers,
)

if TYPE_CHECKING:
    from ..inference import Inference


def _help(name: str) -> str:
    """The documentation ``InferenceConfig`` declares for its key ``name``."""
    field = InferenceConfig.__dataclass_fields__[name]
    spec = spec_of(field)
    assert spec is not None  # every field is a key()
    return spec.doc


# an InferenceConfig key -> the argument that sets it
_FLAGS = {
    "engine": "--engine",
    "precision": "--precision",
    "compile": "--fast",
    "int8_calibration": "--int8-calibration",
    "int8_max_change": "--int8-max-change",
}


def _setting(p: argparse.ArgumentParser, flag: str, key: str, **kwargs: Any) -> None:
    """``flag`` on ``p``, setting ``InferenceConfig``'s ``key``: its default and its doc."""
    default = default_of(InferenceConfig, key)
    p.add_argument(flag, default=default, help=_help(key) + " (default: %(default)s)", **kwargs)


def _inference_arguments(p: argparse.ArgumentParser, *, int8: bool, fast: bool) -> None:
    """``--precision`` (with ``int8`` and its settings where ``int8``), and ``--engine`` and
    ``--fast`` where ``fast``, on a verb that runs a checkpoint; their defaults are
    ``InferenceConfig``'s."""
    choices = (
        INFERENCE_PRECISIONS if int8 else tuple(c for c in INFERENCE_PRECISIONS if c != "int8")
    )
    if int8:
        _setting(p, "--precision", "precision", choices=choices)
    else:  # the key's doc offers int8, which these verbs (their intermediates) do not take
        default = default_of(InferenceConfig, "precision")
        p.add_argument(
            "--precision",
            default=default,
            choices=choices,
            help="the arithmetic: auto (bf16 on CUDA, and on a CPU with native bf16 when a batch "
            "is large enough to gain; else fp32), fp32 or bf16 (default: %(default)s)",
        )
    if fast:  # the verbs that run the whole model, not its intermediates
        _setting(p, "--engine", "engine", choices=ENGINES)
        p.add_argument("--fast", action="store_true", help=_help("compile"))
    if int8:
        _setting(p, "--int8-calibration", "int8_calibration", type=int, metavar="N")
        _setting(p, "--int8-max-change", "int8_max_change", type=float, metavar="POINTS")


def _settings(args: argparse.Namespace) -> InferenceConfig:
    """The verb's ``InferenceConfig``, checked before torch is imported; a bad value is one
    line naming its argument."""
    given = {key: getattr(args, key.replace("compile", "fast"), None) for key in _FLAGS}
    try:
        return InferenceConfig(**{k: v for k, v in given.items() if v is not None})
    except ConfigError as e:
        message = str(e)
        for key, flag in _FLAGS.items():
            message = message.replace(f"inference.{key}", flag)
        raise ConfigError(message) from None


def _open(args: argparse.Namespace) -> Inference:
    """The checkpoint the verb runs, opened on ``--device`` with the verb's settings (checked
    before torch is imported)."""
    settings = _settings(args)
    from ..inference import Inference

    device = resolve_device(args.device)
    return Inference.open(args.checkpoint, settings, device=device)


def _data_spec(spec: str | None) -> str | None:
    """``--data`` (None: the checkpoint's data), checked before torch is imported."""
    from ..compose import check_data_exists
    from ..config import normalise_data

    if spec is not None:
        spec = normalise_data(spec)
        check_data_exists(spec)
    return spec


def _split(
    args: argparse.Namespace, spec: str | None, checkpoint: Inference, *, head: bool = True
) -> Any:
    """The split a verb runs the checkpoint over (``spec``: ``_data_spec``'s), checked against
    its classes when the verb uses the checkpoint's ``head`` and put in the order of the classes
    the checkpoint names when they are the split's in another order (see
    ``data.run_data.evaluation_split``); says which, and the order, on stdout."""
    from ..data.run_data import evaluation_split

    cfg = checkpoint.model.cfg
    split = evaluation_split(spec, checkpoint.meta.run, cfg, source=args.checkpoint)
    print(f"{args.verb} {args.checkpoint} on {split.name}")
    if head:  # without it (few-shot: features only), any data and any classes
        split = _in_the_heads_classes(args, split, checkpoint)
    for note in split.notes:
        print(f"  {note}")
    return split


def _in_the_heads_classes(args: argparse.Namespace, split: Any, checkpoint: Inference) -> Any:
    """``split`` checked against the checkpoint's classes, in their order when it names them."""
    from ..data.run_data import another_order

    classes = checkpoint.model.cfg.num_classes
    if classes and len(split.classes) != classes:
        raise VitkitError(
            f"{args.checkpoint} has {classes} classes, {split.name} has {len(split.classes)}"
        )
    names = checkpoint.meta.class_names
    if names and another_order(list(names), split.classes):  # the head's order, by name
        split = split.in_class_order(list(names), "the checkpoint records")
    elif names and list(names) != split.classes:
        warnings.warn(
            f"the class names of {split.name} differ from the checkpoint's (labels are matched "
            f"by position): {split.classes[:3]}... against {list(names)[:3]}...",
            stacklevel=3,
        )
    return split


def _has_a_head(args: argparse.Namespace, checkpoint: Inference, to: str) -> None:
    """A ``VitkitError`` for a headless checkpoint (num_classes=0: features only), before any
    data is read: its features are few-shot's (``vitkit fewshot``)."""
    if checkpoint.model.cfg.num_classes < 1:
        raise VitkitError(
            f"{args.checkpoint} has no classifier head (num_classes=0) to {to}: expected a "
            "classifier; its features are few-shot's (vitkit fewshot)"
        )


def _eval(args: argparse.Namespace) -> None:
    from ..data import BatchOptions
    from ..data.run_data import batches_of
    from ..eval.metrics import evaluate

    spec = _data_spec(args.data)
    checkpoint = _open(args)
    model, names, device = checkpoint.model, checkpoint.names, checkpoint.device
    _has_a_head(args, checkpoint, "evaluate")
    split = _split(args, spec, checkpoint)
    real = _real_entries(args, model, split)  # before the model runs: a name that fails, fails now
    options = BatchOptions.evaluation(
        model.cfg,
        batch_size=args.batch_size,
        num_workers=resolve_workers(args.workers),
        uint8=True,  # scaled on the device, copied from page-locked memory to a GPU
        pin_memory=device.type == "cuda",
    )
    batches = batches_of(split.dataset, options)
    flip = args.flip
    if flip is None:  # as the run evaluated, when the checkpoint records its run
        flip = checkpoint.meta.run is not None and checkpoint.meta.run.data.test_flip
    # int8 calibrated on the training images of the data evaluated, checked on its images
    views = len(split.dataset) * (2 if flip else 1)  # the forward passes' images
    checkpoint.prepare(min(args.batch_size, len(split.dataset)), images=views, calibration=split)
    result = evaluate(
        checkpoint,
        batches.epoch(0),
        model.cfg.num_classes,
        flip=flip,
        predictions=real is not None,
    )
    one_view, top5 = result.accuracy_one_view, result.top5
    print(
        f"top-1 {result.accuracy:.4f}"
        + ("" if top5 is None else f"  top-5 {top5:.4f}")
        + f"  ({result.count} images"
        + (
            ""
            if one_view is None
            else f", each with its mirror image; top-1 without {one_view:.4f}"
        )
        + ")"
    )
    if real is not None:
        print(_real_line(real, result.predictions))
    for line in _per_class(names, result.per_class, result.per_class_images, every=args.per_class):
        print(line)


PER_CLASS_ALL = 50  # up to this many classes, eval prints every one
PER_CLASS_ENDS = 10  # above it, the best and the worst this many (21,843 lines say nothing)


def _per_class(
    names: list[str], accuracies: list[float], images: list[int], *, every: bool
) -> list[str]:
    """What ``vitkit eval`` prints per class: every class (``every``, or up to ``PER_CLASS_ALL``
    of them; "--" for a class without images), else a line saying what is shown, the
    ``PER_CLASS_ENDS`` best and the as many worst of the classes with images."""
    rows = list(zip(names, accuracies, images, strict=False))
    if every or len(rows) <= PER_CLASS_ALL:
        return [f"  {name:<24} {f'{acc:.4f}' if n else '--'}" for name, acc, n in rows]
    ranked = sorted((row for row in rows if row[2]), key=lambda row: -row[1])  # ties: in order
    best = ranked[:PER_CLASS_ENDS]
    worst = sorted(ranked[len(best) :], key=lambda row: row[1])[:PER_CLASS_ENDS]
    none = len(rows) - len(ranked)
    absent = f"; {none:,} of the {len(rows):,} have none here" if none else ""
    return [
        f"the {len(best)} best of the {len(ranked):,} classes with images{absent} "
        "(--per-class prints every class):",
        *(f"  {name:<24} {acc:.4f}" for name, acc, _ in best),
        f"the {len(worst)} worst:",
        *(f"  {name:<24} {acc:.4f}" for name, acc, _ in worst),
    ]


def _real_entries(args: argparse.Namespace, model: Any, split: Any) -> Any:
    """With ``--real``, the ReaL labels' entry of every image of ``split`` (``eval.real``), the
    model checked to be a 1000-class one; else None."""
    if not args.real:
        return None
    from ..eval.real import real_entries_for

    return real_entries_for(model.cfg.num_classes, split.dataset, split.name, args.checkpoint)


def _real_line(entries: Any, predictions: Any) -> str:
    """What ``vitkit eval --real`` prints: ReaL accuracy and the images it counts."""
    from ..eval.real import real_accuracy

    real = real_accuracy(entries, predictions)
    accuracy = "--" if real.counted == 0 else f"{real.accuracy:.4f}"
    return (
        f"ReaL {accuracy}  ({real.counted} images; {real.left_out} left out, whose ReaL label "
        "set is empty)"
    )


def _predict(args: argparse.Namespace) -> None:
    import json
    import sys

    from ..data.bounds import printable

    require_positive(args, "top", "batch_size")
    paths = image_inputs(args.inputs)  # before loading the model: a mistyped input fails at once
    checkpoint = _open(args)
    wnids = checkpoint.meta.wnids  # each class's WordNet id, where they are ImageNet's
    wnid_of = dict(zip(checkpoint.class_names, wnids, strict=True)) if wnids else {}
    _has_a_head(args, checkpoint, "predict")
    # said on stderr: --json's stdout is the JSON alone; int8 calibrated on the checkpoint's data
    checkpoint.prepare(min(args.batch_size, len(paths)), images=len(paths), say=sys.stderr)
    predictions = checkpoint.ranked(paths, top=args.top, batch_size=args.batch_size)
    # a file's name as a terminal may show it: a newline in it made a second, fake result row
    shown = {p: printable(str(p)) for p in paths}
    width = max(len(name) for name in shown.values()) + 1  # the path column, with its colon
    entries: list[dict[str, Any]] = []
    failed = 0
    for path, result in predictions:
        if isinstance(result, str):
            failed += 1
            entries.append({"path": str(path), "error": result})
        elif args.json:
            top = [
                {"label": label, **({"wnid": wnid_of[label]} if wnid_of else {}), "prob": p}
                for label, p in result
            ]
            entries.append({"path": str(path), "top": top})
        else:  # a row as soon as its batch is done
            pairs = "  ".join(f"{printable(label)} {p:.3f}" for label, p in result)
            print(f"{f'{shown[path]}:':<{width}} {pairs}", flush=True)
    if args.json:
        print(json.dumps(entries, indent=2))
    if failed:
        raise VitkitError(f"{failed} of {len(paths)} images could not be read (see the warnings)")


def _fewshot(args: argparse.Namespace) -> None:
    import json
    import math

    from ..config import data_names
    from ..eval.fewshot import fewshot_model
    from ..files import atomic_write_text, check_output_file

    if args.json is not None:
        check_output_file(Path(args.json), ".json")
    if not (math.isfinite(args.l2) and args.l2 > 0):  # before torch and the data
        raise VitkitError(f"--l2 {args.l2}: expected a finite number > 0 (big_vision's: 1024)")
    try:
        shots = tuple(int(k) for k in args.shots.split(","))
    except ValueError:
        raise VitkitError(f"--shots {args.shots!r}: expected numbers like 1,5,10,25") from None
    if not shots or min(shots) < 1:
        raise VitkitError(f"--shots {args.shots}: expected positive numbers")
    require_positive(args, "seeds")
    given = args.data or [None]  # none: the checkpoint's data
    specs = [_data_spec(spec) for spec in given]  # every one before torch
    if len(set(specs)) < len(specs):
        raise VitkitError(f"--data names a dataset twice: {', '.join(map(str, specs))}")
    checkpoint = _open(args)
    model = checkpoint.model
    names = data_names([spec or checkpoint.meta.trained_on or "data" for spec in specs])
    rows = []
    autocast = checkpoint.prepare(args.batch_size, intermediates=True).autocast
    for name, spec in zip(names, specs, strict=True):  # each dataset's features once
        split = _split(args, spec, checkpoint, head=False)
        if split.train is None:
            raise VitkitError(
                f"few-shot evaluation draws its examples from training images, and {split.name} "
                "has none beside it: give a folder with train/ and test/ (or val/)"
            )
        result = fewshot_model(
            model,
            split.train,
            split.dataset,
            shots=shots,
            seeds=args.seeds,
            l2=args.l2,
            image_size=model.cfg.image_size,
            batch_size=args.batch_size,
            num_workers=resolve_workers(args.workers),
            sampling=args.sampling,
            preprocess=args.preprocess,
            autocast=autocast,
        )
        rows.append(
            {
                "name": name,
                "data": split.name,
                "classes": len(split.classes),
                "train_images": len(split.train),
                "test_images": len(split.dataset),
                "accuracy": result,
            }
        )
    settings = {
        "checkpoint": args.checkpoint,
        "features": "pre_logits",
        "l2": args.l2,
        "seeds": args.seeds,
        "shots": list(shots),
        "sampling": args.sampling,
        "preprocess": args.preprocess,
        "image_size": model.cfg.image_size,  # the model's; see preprocess
    }
    for line in _fewshot_table(rows, settings, model.cfg.image_size):
        print(line)
    if args.json is not None:
        atomic_write_text(
            Path(args.json), json.dumps({**settings, "datasets": rows}, indent=2) + "\n"
        )
        print(f"wrote {args.json}")


def _fewshot_table(
    rows: list[dict[str, Any]], settings: dict[str, Any], image_size: int | tuple[int, int]
) -> list[str]:
    """One table of few-shot accuracy: a row per dataset, a column per shot count, each cell
    the mean +- the standard deviation over seeds."""
    from ..config import size_hw
    from ..eval.fewshot import big_vision_sizes

    h, w = size_hw(image_size)
    if settings["preprocess"] == "big_vision":
        (rh, rw), _ = big_vision_sizes(image_size)
        seen = f"images resized to {rh}x{rw} and their centre {h}x{w} taken (big_vision's)"
    else:
        seen = f"images resized to {h}x{w}"
    head = ["data", "classes", "train", "test", *(f"{k}-shot" for k in settings["shots"])]
    table = [head] + [
        [
            row["name"],
            str(row["classes"]),
            str(row["train_images"]),
            str(row["test_images"]),
            *(f"{r['mean']:.4f} +- {r['std']:.4f}" for r in row["accuracy"].values()),
        ]
        for row in rows
    ]
    widths = [max(len(line[i]) for line in table) for i in range(len(head))]
    return [
        f"few-shot linear accuracy of the pre-logits features (l2={settings['l2']:g}; "
        f"{settings['sampling']} sampling, mean +- std over {settings['seeds']} seeds; {seen}):",
        *(
            "  ".join(
                cell.ljust(width) if i == 0 else cell.rjust(width)
                for i, (cell, width) in enumerate(zip(line, widths, strict=True))
            ).rstrip()
            for line in table
        ),
    ]


def _inspect(args: argparse.Namespace) -> None:
    import torch

    from ..data import BatchOptions, subset
    from ..data.image_file import read_image
    from ..data.run_data import batches_of
    from ..files import check_folder_to_write
    from ..inspect import inspect_model, sample_images
    from ..model import VisionTransformer

    require_positive(args, "num_images", "max_maps")
    check_folder_to_write(Path(args.out))  # before the model's work, not after it
    spec = _data_spec(args.data)
    checkpoint = _open(args)
    model, names, device = checkpoint.model, checkpoint.names, checkpoint.device
    if not isinstance(model, VisionTransformer):
        raise VitkitError(f"{args.checkpoint} is a ResNet: inspection needs a Vision Transformer")
    if args.images:  # files, folders and globs, as predict reads them
        files = image_inputs(args.images)
        images = torch.cat([read_image(p, checkpoint.preprocess) for p in files])
        titles = [p.name for p in files]
        described = "image files"
    else:  # --num-images of the split, drawn from each class in turn
        split = _split(args, spec, checkpoint)
        key_of = getattr(split.dataset, "key_of", None)  # a file's name, where the split has files
        keys = [key_of(i) for i in range(len(split.dataset))] if key_of else None
        chosen = sample_images(split.dataset.labels, args.num_images, keys=keys)
        options = BatchOptions.evaluation(model.cfg, batch_size=256)
        batches = batches_of(subset(split.dataset, chosen), options)
        parts = list(batches.epoch(0))
        images = torch.cat([x for x, _ in parts])
        labels = torch.cat([y for _, y in parts])
        titles = [split.classes[i] for i in labels.tolist()]
        described = f"{split.name}, drawn at random (seed 0) from each class in turn"
    batch = min(len(images), INSPECT_BATCH)
    autocast = checkpoint.prepare(batch, intermediates=True).autocast
    with (
        torch.inference_mode(),
        torch.autocast(device.type, dtype=autocast, enabled=autocast is not None),
    ):
        if model.cfg.num_classes and len(names) == model.cfg.num_classes:
            logits = model(images[: args.max_maps].to(device)).float()  # (n, K)
            probs, predicted = logits.softmax(dim=1).max(dim=1)  # (n,), (n,)
            titles = [
                f"{t} -> {names[k]} {p:.0%}"
                for t, k, p in zip(titles, predicted.tolist(), probs.tolist(), strict=False)
            ]
    written = inspect_model(
        model,
        images,
        args.out,
        titles=titles,
        max_maps=args.max_maps,
        batch_size=batch,
        name=args.checkpoint,
        images_from=described,
        autocast=autocast,
    )
    print(f"wrote {len(written)} files to {args.out}; open {Path(args.out) / 'index.html'}")


INSPECT_BATCH = 64  # images per forward pass: one batch's attention (L x (b, H, T, T)) is held

DATA_HELP = (
    f"what to run on: {DATA_SPECS}; a folder's test/ split, else its val/, or the folder itself "
    "when it holds class folders (default: the data the checkpoint was trained on: its test "
    "split, else its validation split)"
)


def _data_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", default=None, metavar="SPEC", help=DATA_HELP)


def _checkpoint_and_data(p: argparse.ArgumentParser) -> None:
    """The arguments of the verbs that run a checkpoint over a dataset (eval, fewshot)."""
    p.add_argument("checkpoint", help="checkpoint directory or file (any format vitkit reads)")
    _data_arguments(p)


def add_verbs(verb: Verb) -> None:
    p = verb(
        "predict",
        "top-k classes of images, with the checkpoint's preprocessing",
        _predict,
        "vitkit predict runs/fmnist/best shoe.png photos/ 'more/**/*.jpg' --top 3 --json",
    )
    p.add_argument("checkpoint", help="checkpoint written by vitkit train (or any format)")
    p.add_argument(
        "inputs",
        nargs="+",
        metavar="INPUT",
        help="image files, folders (every image below, recursively) or quoted globs ('**' too)",
    )
    p.add_argument("--top", type=int, default=5, help="how many classes to show")
    p.add_argument("--batch-size", type=int, default=64, help="images per forward pass")
    p.add_argument(
        "--json",
        action="store_true",
        help='a JSON list of {"path", "top": [{"label", "prob"}, ...]} (or "error") on stdout; '
        'each label with its "wnid" where the checkpoint records them (ImageNet-21k heads)',
    )
    add_device_argument(p)
    _inference_arguments(p, int8=True, fast=True)

    p = verb(
        "eval",
        "evaluate a checkpoint on a dataset's test split: top-1, top-5, per class",
        _eval,
        "vitkit eval runs/fmnist/best   |   vitkit eval runs/digits/best --data digits/test   |   "
        "vitkit eval ViT-B/16@in21k-in1k-384 --data imagenet/val --real",
    )
    _checkpoint_and_data(p)
    p.add_argument("--batch-size", type=int, default=256)
    add_device_argument(p)
    _inference_arguments(p, int8=True, fast=True)
    add_workers_argument(p)
    p.add_argument(
        "--flip",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="average each image's class probabilities with its mirror image's (test-time "
        "augmentation, data.test_flip in training; default: as the checkpoint's run evaluated)",
    )
    p.add_argument(
        "--real",
        action="store_true",
        help="also ImageNet ReaL accuracy (the reassessed validation labels the paper reports): "
        "images joined to their labels by file name, ILSVRC2012_val_NNNNNNNN.*, in any order or "
        "any part of the 50,000; a 1000-class model",
    )
    p.add_argument(
        "--per-class",
        action="store_true",
        help=f"print every class's top-1 (default: every class up to {PER_CLASS_ALL} of them, "
        f"else the {PER_CLASS_ENDS} best and the {PER_CLASS_ENDS} worst)",
    )

    p = verb(
        "fewshot",
        "few-shot linear evaluation of frozen pre-logits features, closed form [P 4.1], on one "
        "or several datasets",
        _fewshot,
        "vitkit fewshot runs/fmnist/best --data /data/pets --data cifar100:/data/cifar "
        "--shots 1,5,10,25 --seeds 3 --json fewshot.json",
    )
    p.add_argument("checkpoint", help="checkpoint directory or file (any format vitkit reads)")
    p.add_argument(
        "--data",
        action="append",
        default=None,
        metavar="SPEC",
        help="repeatable: each dataset's features are extracted once and it is one row of the "
        "table; shots are drawn from its train split. " + DATA_HELP,
    )
    p.add_argument(
        "--shots", default=",".join(map(str, SHOTS)), help="examples per class, comma-separated"
    )
    p.add_argument(
        "--seeds", type=int, default=SEEDS, help="random subsets averaged per shot count"
    )
    p.add_argument("--l2", type=float, default=L2, help="ridge strength (big_vision: 2^10)")
    p.add_argument(
        "--sampling",
        choices=SAMPLINGS,
        default=SAMPLINGS[0],
        help="how each seed's subset of a class is drawn: vitkit (a torch generator, as "
        "train.fewshot) or big_vision (np.random.default_rng(seed).permutation per class)",
    )
    p.add_argument(
        "--preprocess",
        choices=PREPROCESSINGS,
        default=PREPROCESSINGS[0],
        help="resize: the whole image resized to the model's resolution; big_vision: its "
        "resize(256)|central_crop(224), at the model's resolution S resized to S*8/7, centre S",
    )
    p.add_argument("--json", default=None, metavar="FILE", help="also write the results as JSON")
    p.add_argument("--batch-size", type=int, default=256)
    add_device_argument(p)
    _inference_arguments(p, int8=False, fast=False)
    add_workers_argument(p)

    p = verb(
        "inspect",
        "the paper's Fig. 7 and attention maps for a checkpoint: PNGs, data, index.html",
        _inspect,
        "vitkit inspect runs/fmnist/best --out runs/fmnist/inspect   |   ... --images a.png b.png",
    )
    p.add_argument("checkpoint", help="checkpoint directory or file (any format vitkit reads)")
    p.add_argument("--out", required=True, help="output directory (index.html goes there)")
    p.add_argument(
        "--images",
        nargs="+",
        default=None,
        help="image files, folders or quoted globs, as predict takes them (default: images of --data)",
    )
    _data_arguments(p)
    p.add_argument(
        "--num-images", type=int, default=128, help="test images averaged for attention distance"
    )
    p.add_argument("--max-maps", type=int, default=16, help="images shown with attention maps")
    add_device_argument(p)
    _inference_arguments(p, int8=False, fast=False)
