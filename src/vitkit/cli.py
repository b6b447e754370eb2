"""``vitkit <verb>``: the command line.

Each verb imports what it needs when it runs, so ``vitkit --help`` never imports torch. Every
error a user can cause (``VitkitError``, and an ``OSError`` of a full disk or a folder we may not
write) is one line on stderr and exit status 2; anything else is a bug in vitkit and keeps its
traceback. ``--debug`` (or ``VITKIT_DEBUG=1``) shows the traceback of any error.
"""

from __future__ import annotations

import argparse
import errno
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import UserFileError, VitkitError

if TYPE_CHECKING:
    from .config import Dataset, RunConfig

EXAMPLES = {
    "train": "vitkit train --recipe fmnist --run-dir runs/fmnist --set train.duration=2ep",
    "finetune": "vitkit finetune --init-from runs/fmnist/best --set model.image_size=56 --run-dir runs/ft56",
    "eval": "vitkit eval runs/fmnist/best --data fashion_mnist",
    "predict": "vitkit predict runs/fmnist/best shoe.png shirt.jpg --top 3",
    "presets": "vitkit presets 'ViT-B/*'",
    "summary": "vitkit summary ViT-B/16   |   vitkit summary runs/b16",
    "convert": "vitkit convert ViT-B_16.npz runs/b16   |   vitkit convert timm_b16.pth hf_b16 --format hf",
    "fewshot": "vitkit fewshot runs/fmnist/best --data fashion_mnist --shots 1,5,10,25 --seeds 3",
    "inspect": "vitkit inspect runs/fmnist/best --out runs/fmnist/inspect   |   ... --images a.png b.png",
    "export": "vitkit export runs/fmnist/best --onnx fmnist.onnx",
}


def _presets(args: argparse.Namespace) -> None:
    import torch

    from .model import VisionTransformer
    from .model.flops import count_flops
    from .presets import PRESETS, list_models

    names = list_models(args.pattern)
    if not names:
        raise VitkitError(f"no preset matches {args.pattern!r}; try `vitkit presets` for all")
    rows = []
    for name in names:
        cfg = PRESETS[name].build()
        with torch.device("meta"):
            params = VisionTransformer(cfg).num_params()
        aliases = ", ".join(PRESETS[name].aliases)
        rows.append(
            (name, f"{params:,}", f"{count_flops(cfg) / 1e9:.2f}", _resolution(cfg), aliases)
        )
    header = ("model", "params", "GFLOPs", "res", "aliases")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    for row in [header, *rows]:
        cells = [row[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(row[1:4], widths[1:], strict=True)
        ]
        print("  ".join([*cells, row[4]]))


def _resolution(cfg: Any) -> str:
    """A config's image size as printed: '224' for a square, 'HxW' otherwise."""
    h, w = cfg.image_hw
    return str(h) if h == w else f"{h}x{w}"


def _summary(args: argparse.Namespace) -> None:
    import torch

    from . import create_model
    from .io.api import load
    from .model.flops import count_flops

    looks_like_path = Path(args.model).exists() or args.model.endswith(
        (".npz", ".safetensors", ".pth", ".pt", ".bin")
    )
    model = load(args.model) if looks_like_path else create_model(args.model)
    cfg = model.cfg
    print(f"model        {args.model}")
    for key, value in cfg.to_dict().items():
        print(f"  {key:<24} {value}")
    print(f"parameters   {model.num_params():,}")
    if cfg.arch == "vit":  # the FLOP count and the token grid are the transformer's
        (h, w), (gh, gw) = cfg.image_hw, cfg.grid
        print(f"GFLOPs       {count_flops(cfg) / 1e9:.2f} per image at {h}x{w}")
        print(f"tokens       {gh}x{gw} patches + {cfg.num_prefix_tokens} class token")
    with torch.inference_mode():
        x = torch.randn(1, cfg.in_chans, *cfg.image_hw)  # (1, C, H, W)
        out = model.eval()(x)
    print(f"forward      {tuple(x.shape)} -> {tuple(out.shape)}")


def _convert(args: argparse.Namespace) -> None:
    from .io.api import load, save

    size = None if args.image_size is None else _image_size_arg(args.image_size)
    model = load(args.src, image_size=size, num_heads=args.num_heads, posemb=args.posemb)
    out = save(model, args.dst, format=args.format)
    print(
        f"wrote {out} ({args.format}): {model.num_params():,} parameters, "
        f"{_resolution(model.cfg)}px"
    )


def _image_size_arg(text: str) -> int | tuple[int, int]:
    """``--image-size``: 'S' for S x S images, or 'HxW'."""
    try:
        sides = tuple(int(side) for side in text.lower().split("x"))
    except ValueError:
        sides = ()
    if len(sides) not in (1, 2):
        raise VitkitError(f"--image-size {text!r}: expected S or HxW, e.g. 384 or 384x512")
    return sides[0] if len(sides) == 1 else (sides[0], sides[1])


def _export(args: argparse.Namespace) -> None:
    import torch

    from .io.api import load
    from .io.export import export_onnx, require_onnx, verify_onnx

    require_onnx()  # before loading and exporting, which take a while
    if args.batch_size < 1:
        raise VitkitError(f"--batch-size must be at least 1, got {args.batch_size}")
    model = load(args.checkpoint)
    out = export_onnx(model, args.onnx, opset=args.opset)
    cfg = model.cfg
    g = torch.Generator().manual_seed(0)
    # A second batch size, unlike the one traced, proves the batch dimension dynamic.
    sizes = (args.batch_size, args.batch_size + 3)
    diff = max(
        verify_onnx(
            model,
            out,
            torch.rand(n, cfg.in_chans, *cfg.image_hw, generator=g) * 2 - 1,  # (n, C, H, W)
        )
        for n in sizes
    )
    files = [f for f in (out, out.with_name(f"{out.name}.data")) if f.exists()]
    megabytes = sum(f.stat().st_size for f in files) / 1e6
    print(
        f"wrote {out} ({megabytes:.1f} MB): max |onnxruntime - torch| = {diff:.1e} "
        f"on batches of {sizes[0]} and {sizes[1]}"
    )


def _run_config(args: argparse.Namespace) -> RunConfig:
    from .config import parse_set, replace
    from .recipes import get_recipe

    run = get_recipe(args.recipe)
    overrides = parse_set(args.set or [])
    if getattr(args, "objective", None) == "mpp":  # self-supervised: no label smoothing, no mixup
        overrides = {
            "train.objective": "mpp",
            "train.label_smoothing": 0.0,
            "train.mixup": 0.0,
            **overrides,
        }
    elif getattr(args, "objective", None):
        overrides = {"train.objective": args.objective, **overrides}
    return replace(run, overrides) if overrides else run


def _finetune_config(args: argparse.Namespace) -> RunConfig:
    """The recipe's run on the pre-trained architecture: new head for the recipe's classes, the
    recipe's resolution (posemb interpolated), dropout and friends from the recipe."""
    import dataclasses

    from .config import ConfigError, parse_set
    from .io.api import read

    run = _run_config(args)
    pretrained, _, _ = read(args.init_from, num_heads=args.num_heads)
    keep = ("num_classes", "image_size", "dropout_rate", "attention_dropout_rate", "drop_path_rate")
    fixed = [k for k in parse_set(args.set or []) if k.startswith("model.") and k[6:] not in keep]
    if fixed:
        raise ConfigError(
            f"{', '.join(fixed)}: fine-tuning keeps the pre-trained architecture; only "
            f"{', '.join(f'model.{k}' for k in keep)} can be set"
        )
    model = dataclasses.replace(
        pretrained, representation_size=None, **{k: getattr(run.model, k) for k in keep}
    )
    return dataclasses.replace(run, model=model, init_from=str(args.init_from))


def _torchrun(nproc: int, argv: Sequence[str]) -> None:
    """``--nproc N``: replace this process with ``torchrun --standalone --nproc-per-node N -m
    vitkit <the same arguments but --nproc>`` (torch.distributed.run, PyTorch's own launcher; it
    would take ``--nproc`` for an abbreviation of its ``--nproc-per-node``)."""
    import os

    if nproc < 1:
        raise VitkitError(f"--nproc {nproc}: expected a number of processes >= 1")
    rest, skip = [], False
    for arg in argv:
        if not skip and arg != "--nproc" and not arg.startswith("--nproc="):
            rest.append(arg)
        skip = arg == "--nproc"
    if _parser().parse_args(rest).nproc is not None:
        raise VitkitError("--nproc: write it in full (--nproc N or --nproc=N)")
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    command += [f"--nproc-per-node={nproc}", "-m", "vitkit", *rest]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, command)


def _train(args: argparse.Namespace) -> None:
    import logging
    import os

    from .runtime.clock import process_seconds
    from .train import distributed
    from .train.loop import StoppedError, train

    run = _finetune_config(args) if getattr(args, "init_from", None) else _run_config(args)
    if args.nproc is not None:
        if distributed.launched():
            raise VitkitError("--nproc starts torchrun: leave it out of a command torchrun runs")
        _torchrun(args.nproc, args.argv)
    main = os.environ.get("RANK", "0") == "0"  # the process that reports (torchrun's rank 0)
    if distributed.launched():  # rank 0's progress and evaluations go to the job's log
        logging.basicConfig(level=logging.INFO if main else logging.WARNING, format="%(message)s")
    try:
        with distributed.process_group(run.train.device):
            result = train(run, args.run_dir, progress=not args.no_progress)
    except StoppedError as e:
        if main:
            print(f"vitkit train: {e}; run the same command to resume", file=sys.stderr)
        raise SystemExit(128 + e.signum) from None
    except RuntimeError as e:
        if not distributed.lost_peer(e):
            raise
        raise VitkitError(
            f"lost contact with another process ({distributed.describe(e)}): one died or hung "
            f"(collectives wait {distributed.timeout_s():g} s, {distributed.TIMEOUT_ENV}); "
            "torchrun's report names it"
        ) from None
    if not main:
        return
    minutes = process_seconds() / 60  # the clock of metrics.jsonl's time_s
    if run.train.objective == "mpp":
        measured = (
            f"masked-patch colour accuracy {result['accuracy']:.4f} on {result['count']} "
            "test patches"
        )
    else:
        measured = (
            f"test accuracy {result['accuracy']:.4f} (top-5 {result['top5']:.4f}) on "
            f"{result['count']} images"
        )
    for shots, acc in result.get("fewshot", {}).items():
        measured += f"; {shots}-shot linear {acc['mean']:.4f}"
    print(
        f"{measured} {minutes:.1f} min after the process started; best weights in "
        f"{args.run_dir}/best"
    )
    if run.train.objective == "classification":
        from pathlib import Path

        from .train.report import time_to_accuracy

        def summary(key: str) -> str:
            timing = time_to_accuracy(Path(args.run_dir), key=key)
            reached = ", ".join(
                f"{100 * t:g}% at {s / 60:.1f} min"
                if s is not None
                else f"{100 * t:g}% not reached"
                for t, s in timing["seconds_to"].items()
            )
            at = timing["accuracy_at"]
            return (
                f"{reached}; at {timing['at_minutes']:g} min: {'—' if at is None else f'{at:.4f}'}"
            )

        flips = run.data.test_flip
        print(
            "time to accuracy (metrics.jsonl, from process start"
            + (", each test image with its mirror" if flips else "")
            + f"): {summary('accuracy')}"
            + (f" (one view: {summary('accuracy_one_view')})" if flips else "")
        )


def _eval(args: argparse.Namespace) -> None:
    from .eval.metrics import evaluate
    from .io.api import load as load_model
    from .io.api import read
    from .train.data import eval_batches

    model = load_model(args.checkpoint)
    _, _, extra = read(args.checkpoint)
    batches, classes = eval_batches(args.data, args.data_dir, model.cfg, batch_size=args.batch_size)
    if len(classes) != model.cfg.num_classes:
        raise VitkitError(
            f"the model has {model.cfg.num_classes} classes, {args.data} has {len(classes)}"
        )
    names = extra.get("class_names") or classes
    result = evaluate(
        _fast(model, args.fast), batches.epoch(0), model.cfg.num_classes, flip=args.flip
    )
    one_view = result.get("accuracy_one_view")
    print(
        f"top-1 {result['accuracy']:.4f}  top-5 {result['top5']:.4f}  ({result['count']} images"
        + (
            ""
            if one_view is None
            else f", each with its mirror image; top-1 without {one_view:.4f}"
        )
        + ")"
    )
    for name, acc in zip(names, result["per_class"], strict=False):
        print(f"  {name:<24} {acc:.4f}")


def _checkpoint(path: str) -> tuple[Any, list[str], Any]:
    """A checkpoint's model (eval mode), class names and preprocessing (the training run's, or
    the official one at the model's resolution)."""
    from .data import Preprocess
    from .io.api import load, read

    model = load(path)
    _, _, extra = read(path)
    names = extra.get("class_names") or [str(i) for i in range(model.cfg.num_classes)]
    pre = extra.get("preprocess")
    preprocess = (
        Preprocess.from_dict(pre)
        if pre
        else Preprocess(image_size=model.cfg.image_size, in_chans=model.cfg.in_chans)
    )
    return model, names, preprocess


def _read_image(path: str, preprocess: Any) -> Any:
    """An image file -> the float tensor (1, C, H, W) the model takes."""
    from PIL import Image, UnidentifiedImageError

    from .data import preprocess_for_inference

    try:
        with Image.open(path) as image:
            return preprocess_for_inference(image, preprocess)[None]
    except (UnidentifiedImageError, OSError) as e:
        raise VitkitError(f"cannot read image {path}: {e}") from None


def _predict(args: argparse.Namespace) -> None:
    import torch

    if args.top < 1:
        raise VitkitError(f"--top {args.top}: expected a positive number of classes")
    model, names, preprocess = _checkpoint(args.checkpoint)
    model = _fast(model, args.fast)
    for path in args.images:
        x = _read_image(path, preprocess)  # (1, C, H, W)
        with torch.inference_mode():
            probs = model(x).softmax(dim=-1)[0]
        top = probs.topk(min(args.top, probs.numel()))
        ranked = ", ".join(
            f"{names[i]} {p:.3f}"
            for p, i in zip(top.values.tolist(), top.indices.tolist(), strict=True)
        )
        print(f"{path}: {ranked}")


def _splits(dataset: Dataset, data_dir: str | None, cfg: Any) -> tuple[Any, Any, list[str]]:
    """The train and test splits of a dataset by name, checked against the model's channels."""
    from .config import DataConfig
    from .train.data import build_datasets

    return build_datasets(DataConfig(dataset=dataset, data_dir=data_dir), cfg, seed=0)


def _fewshot(args: argparse.Namespace) -> None:
    from .eval.fewshot import fewshot_model
    from .io.api import load

    try:
        shots = tuple(int(k) for k in args.shots.split(","))
    except ValueError:
        raise VitkitError(f"--shots {args.shots!r}: expected numbers like 1,5,10,25") from None
    if not shots or min(shots) < 1 or args.seeds < 1:
        raise VitkitError(f"--shots {args.shots} --seeds {args.seeds}: expected positive numbers")
    model = load(args.checkpoint)
    train_set, test_set, classes = _splits(args.data, args.data_dir, model.cfg)
    result = fewshot_model(
        model,
        train_set,
        test_set,
        shots=shots,
        seeds=args.seeds,
        l2=args.l2,
        image_size=model.cfg.image_size,
        batch_size=args.batch_size,
    )
    print(
        f"few-shot linear accuracy on {args.data} ({len(classes)} classes, {len(test_set)} test "
        f"images), pre-logits features, l2={args.l2:g}, mean +- std over {args.seeds} seeds:"
    )
    for k, r in result.items():
        print(f"  {k:>3}-shot  {r['mean']:.4f} +- {r['std']:.4f}")


def _inspect(args: argparse.Namespace) -> None:
    import torch

    from .data import Batches, subset
    from .inspect import inspect_model

    if args.num_images < 1 or args.max_maps < 1:
        raise VitkitError(
            f"--num-images {args.num_images} --max-maps {args.max_maps}: expected positive numbers"
        )
    model, names, preprocess = _checkpoint(args.checkpoint)
    if model.cfg.arch != "vit":
        raise VitkitError(f"{args.checkpoint} is a ResNet: inspection needs a Vision Transformer")
    if args.images:
        images = torch.cat([_read_image(p, preprocess) for p in args.images])
        titles = [Path(p).name for p in args.images]
    else:  # the first --num-images test images
        _, test_set, classes = _splits(args.data, args.data_dir, model.cfg)
        n = min(args.num_images, len(test_set))
        batches = Batches(
            subset(test_set, torch.arange(n)),
            batch_size=256,
            train=False,
            image_size=model.cfg.image_size,
        )
        parts = list(batches.epoch(0))
        images = torch.cat([x for x, _ in parts])[:n]
        labels = torch.cat([y for _, y in parts])[:n]
        titles = [classes[i] for i in labels.tolist()]
    with torch.inference_mode():
        if model.cfg.num_classes and len(names) == model.cfg.num_classes:
            predicted = model(images[: args.max_maps]).argmax(dim=1).tolist()
            titles = [f"{t} -> {names[p]}" for t, p in zip(titles, predicted, strict=False)]
    written = inspect_model(
        model, images, args.out, titles=titles, max_maps=args.max_maps, name=args.checkpoint
    )
    print(f"wrote {len(written)} files to {args.out}; open {Path(args.out) / 'index.html'}")


NPROC_HELP = (
    "data-parallel on N processes of this machine: runs this command under torchrun "
    "--standalone --nproc-per-node N (docs/DISTRIBUTED.md)"
)


FAST_HELP = (
    "compile the model with frozen weights (vitkit.optimize_for_inference): the same logits, "
    "faster once compiled (tens of seconds): worth it for many images"
)


def _fast(model: Any, fast: bool) -> Any:
    """``model``, or its compiled inference path with ``--fast``."""
    if not fast:
        return model
    from .runtime.inference import optimize_for_inference

    return optimize_for_inference(model)


def _checkpoint_and_data(p: argparse.ArgumentParser) -> None:
    """The arguments of the verbs that run a checkpoint over a dataset (eval, fewshot)."""
    p.add_argument("checkpoint", help="checkpoint directory or file (any format vitkit reads)")
    p.add_argument(
        "--data", default="fashion_mnist", help="fashion_mnist, cifar10, cifar100 or folder"
    )
    p.add_argument("--data-dir", default=None, help="dataset location (folder: its root)")


DEBUG_HELP = "show the traceback of any error (also VITKIT_DEBUG=1)"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vitkit",
        description="The Vision Transformer (Dosovitskiy et al., ICLR 2021) on PyTorch.",
    )
    parser.add_argument("--debug", action="store_true", help=DEBUG_HELP)
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")

    def verb(
        name: str, help: str, run: Callable[[argparse.Namespace], None]
    ) -> argparse.ArgumentParser:
        p = verbs.add_parser(name, help=help, description=help, epilog=f"example: {EXAMPLES[name]}")
        p.set_defaults(run=run)
        p.add_argument(  # after the verb too; SUPPRESS keeps a `vitkit --debug VERB` given before
            "--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP
        )
        return p

    p = verb("presets", "list the model presets: parameters, GFLOPs, resolution, aliases", _presets)
    p.add_argument("pattern", nargs="?", default="*", help="glob over preset names (default: all)")

    p = verb(
        "summary", "print a model's config, size and cost (preset name or checkpoint)", _summary
    )
    p.add_argument("model", help="preset name, alias, or checkpoint path")

    p = verb(
        "train",
        "train a model from a recipe (resumes if the run directory has a checkpoint)",
        _train,
    )
    p.add_argument("--recipe", default="fmnist", help="recipe name (default: fmnist, the main job)")
    p.add_argument(
        "--set", action="append", metavar="KEY=VALUE", help="override, e.g. optim.lr=3e-4"
    )
    p.add_argument("--run-dir", default="runs/fmnist", help="where checkpoints and metrics go")
    p.add_argument(
        "--objective",
        choices=("classification", "mpp"),
        default=None,
        help="mpp: masked patch prediction [P 4.6] on the recipe's images, labels unused "
        "(same as --set train.objective=mpp, label smoothing and mixup off)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--nproc", type=int, default=None, metavar="N", help=NPROC_HELP)

    p = verb(
        "finetune", "fine-tune pre-trained weights: new zero head, posemb resized [P B.1.1]", _train
    )
    p.add_argument(
        "--init-from", required=True, help="pre-trained checkpoint (any format vitkit reads)"
    )
    p.add_argument("--recipe", default="fmnist", help="recipe giving data, optimizer and duration")
    p.add_argument(
        "--set", action="append", metavar="KEY=VALUE", help="override, e.g. model.image_size=56"
    )
    p.add_argument("--run-dir", default="runs/finetune", help="where checkpoints and metrics go")
    p.add_argument(
        "--num-heads", type=int, default=None, help="heads, if the checkpoint lacks them"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--nproc", type=int, default=None, metavar="N", help=NPROC_HELP)

    p = verb("predict", "top-k classes of images, with the checkpoint's preprocessing", _predict)
    p.add_argument("checkpoint", help="checkpoint written by vitkit train (or any format)")
    p.add_argument("images", nargs="+", help="image files")
    p.add_argument("--top", type=int, default=5, help="how many classes to show")
    p.add_argument("--fast", action="store_true", help=FAST_HELP)

    p = verb(
        "eval", "evaluate a checkpoint on a dataset's test split: top-1, top-5, per class", _eval
    )
    _checkpoint_and_data(p)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--fast", action="store_true", help=FAST_HELP)
    p.add_argument(
        "--flip",
        action="store_true",
        help="average each image's class probabilities with its mirror image's "
        "(test-time augmentation, as data.test_flip in training)",
    )

    p = verb(
        "fewshot",
        "few-shot linear evaluation of frozen pre-logits features, closed form [P 4.1]",
        _fewshot,
    )
    _checkpoint_and_data(p)
    p.add_argument("--shots", default="1,5,10,25", help="examples per class, comma-separated")
    p.add_argument("--seeds", type=int, default=3, help="random subsets averaged per shot count")
    p.add_argument("--l2", type=float, default=2.0**10, help="ridge strength (big_vision: 2^10)")
    p.add_argument("--batch-size", type=int, default=256)

    p = verb(
        "inspect",
        "the paper's Fig. 7 and attention maps for a checkpoint: PNGs, data, index.html",
        _inspect,
    )
    p.add_argument("checkpoint", help="checkpoint directory or file (any format vitkit reads)")
    p.add_argument("--out", required=True, help="output directory (index.html goes there)")
    p.add_argument("--images", nargs="+", default=None, help="image files (default: test images)")
    p.add_argument("--data", default="fashion_mnist", help="dataset of the default test images")
    p.add_argument("--data-dir", default=None, help="dataset location (folder: its root)")
    p.add_argument(
        "--num-images", type=int, default=128, help="test images averaged for attention distance"
    )
    p.add_argument("--max-maps", type=int, default=16, help="images shown with attention maps")

    p = verb("convert", "convert a checkpoint of any supported format to ours (or to HF)", _convert)
    p.add_argument("src", help="official/big_vision .npz, timm .pth/.safetensors, HF or vitkit dir")
    p.add_argument("dst", help="output directory")
    p.add_argument("--format", choices=("vitkit", "hf"), default="vitkit", help="output format")
    p.add_argument(
        "--image-size",
        default=None,
        metavar="S|HxW",
        help="resize position embeddings to S x S or H x W images",
    )
    p.add_argument(
        "--num-heads", type=int, default=None, help="heads, if the checkpoint lacks them"
    )
    p.add_argument(
        "--posemb",
        choices=("learn", "sincos2d", "none"),
        default=None,
        help="big_vision fixed posemb",
    )

    p = verb(
        "export",
        "export a checkpoint to ONNX (dynamic batch) and check it with onnxruntime",
        _export,
    )
    p.add_argument("checkpoint", help="checkpoint directory or file (any format vitkit reads)")
    p.add_argument("--onnx", required=True, metavar="OUT.onnx", help="the ONNX file to write")
    p.add_argument(
        "--batch-size",
        type=int,
        default=2,
        help="batch checked against PyTorch (one 3 larger is checked too)",
    )
    p.add_argument("--opset", type=int, default=None, help="ONNX opset (default: torch's)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    if argv is None:  # the command line, not a caller in this process: jemalloc, once
        from .runtime.allocator import preload_jemalloc

        preload_jemalloc()
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    args.argv = argv  # --nproc runs the same arguments under torchrun
    debug = args.debug or os.environ.get("VITKIT_DEBUG", "0") not in ("", "0")
    try:
        args.run(args)
    except (VitkitError, OSError) as e:
        if debug or not (isinstance(e, VitkitError) or e.errno in ENVIRONMENT_ERRNOS):
            raise  # a bug in vitkit: its traceback says where
        print(f"vitkit {args.verb}{_rank()}: error: {_one_line(e)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        if debug:
            raise
        print(f"vitkit {args.verb}: interrupted", file=sys.stderr)
        return 130
    return 0


# Errors of the machine, not of vitkit: a full disk or quota, a folder we may not write.
ENVIRONMENT_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES})


def _one_line(e: BaseException) -> str:
    """The first line of an error's message (an ``OSError`` says which file)."""
    if isinstance(e, OSError) and not isinstance(e, UserFileError) and e.strerror:
        return f"{e.strerror}: {e.filename}" if e.filename else e.strerror
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _rank() -> str:
    """`` [rank R]`` in a process started by torchrun with several processes, else nothing."""
    import os

    world = os.environ.get("WORLD_SIZE", "1")
    return f" [rank {os.environ.get('RANK', '0')}]" if world != "1" else ""


if __name__ == "__main__":
    sys.exit(main())
