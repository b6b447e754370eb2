"""The verbs about models and their weights: ``presets``, ``summary``, ``convert``, ``export``."""

from __future__ import annotations

import argparse
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

from ..config import Posemb
from ..errors import VitkitError
from .common import Verb, add_num_heads_argument, image_size_arg, resolution

if TYPE_CHECKING:
    from collections.abc import Callable

    from torch import Tensor

    from ..io.metadata import WeightsMeta


def _presets(args: argparse.Namespace) -> None:
    import torch

    from ..model import VisionTransformer
    from ..model.flops import count_flops
    from ..presets import PRESETS, list_models

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
            (name, f"{params:,}", f"{count_flops(cfg) / 1e9:.2f}", resolution(cfg), aliases)
        )
    header = ("model", "params", "GFLOPs", "res", "aliases")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    for row in [header, *rows]:
        cells = [row[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(row[1:4], widths[1:], strict=True)
        ]
        print("  ".join([*cells, row[4]]))


def _summary(args: argparse.Namespace) -> None:
    import torch

    from .. import create_model
    from ..io.api import load
    from ..model.flops import count_flops

    looks_like_path = (
        Path(args.model).exists()
        or "@" in args.model  # pretrained weights by name
        or args.model.endswith((".npz", ".safetensors", ".pth", ".pt", ".bin"))
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


def _carried(meta: WeightsMeta) -> dict[str, Any]:
    """What travels with the weights, as the keywords of ``save`` and ``export_onnx``."""
    return {
        "class_names": meta.class_names,
        "wnids": meta.wnids,
        "pretrained": meta.pretrained,
        "preprocess": meta.preprocess,
    }


def _convert(args: argparse.Namespace) -> None:
    from ..files import check_folder_to_write, check_output_file
    from ..io.api import load_with_meta, save

    # before the checkpoint is read: a file (official's .npz) or a folder (ours, HF's)
    if args.format == "official":
        check_output_file(Path(args.dst), ".npz")
    else:
        check_folder_to_write(Path(args.dst))
    size = None if args.image_size is None else image_size_arg(args.image_size)
    model, meta = load_with_meta(
        args.src, image_size=size, num_heads=args.num_heads, posemb=args.posemb
    )
    out = save(
        model,
        args.dst,
        format=args.format,
        **_carried(meta),
    )
    print(
        f"wrote {out} ({args.format}): {model.num_params():,} parameters, {resolution(model.cfg)}px"
    )


# How far OpenVINO's f32 logits may be from torch's on the check's random images: rounding only
OPENVINO_BOUND = 1e-4


# The largest batch export traces with: 10^8 filled the machine's memory in seconds.
MAX_EXPORT_BATCH = 1024


def _export(args: argparse.Namespace) -> None:
    import torch

    from ..files import check_output_file
    from ..io.api import load_with_meta

    if not 1 <= args.batch_size <= MAX_EXPORT_BATCH:
        raise VitkitError(
            f"--batch-size {args.batch_size}: expected 1 to {MAX_EXPORT_BATCH:,} (the batch the "
            "export is traced and checked with; the exported model takes any)"
        )
    if args.onnx is not None:
        check_output_file(Path(args.onnx), ".onnx")
        from ..io.export import require_onnx

        require_onnx()  # before loading and exporting, which take a while
    else:
        check_output_file(Path(args.openvino), ".xml")
        from ..runtime.openvino import require_openvino

        require_openvino()
    model, meta = load_with_meta(args.checkpoint)
    cfg = model.cfg
    g = torch.Generator().manual_seed(0)
    # A second batch size, unlike the one traced, proves the batch dimension dynamic.
    sizes = (args.batch_size, args.batch_size + 3)
    batches = [torch.rand(n, cfg.in_chans, *cfg.image_hw, generator=g) * 2 - 1 for n in sizes]
    said: list[str] = []  # what the check measured, for the line below

    def check(staged: Path, bound: float, *verify: Callable[[Path, Tensor], float]) -> None:
        """The staged export against the checkpoint on both batches, before it is renamed into
        place: a failed one replaces nothing (``verify``: the check's numbers, the first bounded)."""
        diffs = [max(v(staged, images) for images in batches) for v in verify]
        said.append(
            f"max |onnxruntime - torch| = {diffs[0]:.1e}"
            if args.onnx is not None
            else f"max |openvino f32 - torch| = {diffs[0]:.1e} (in bf16, OpenVINO's default "
            f"on a CPU with native bf16: {diffs[1]:.1e})"
        )
        if not diffs[0] <= bound:  # NaN too: a NaN weight makes every output NaN
            raise VitkitError(
                f"{args.onnx or args.openvino}: {said[0]} on batches of {sizes[0]} and {sizes[1]}, past "
                f"{bound:g}: the export does not compute what the checkpoint does; nothing written"
            )

    if args.onnx is not None:
        from ..io.export import export_onnx, verify_onnx

        out = export_onnx(
            model,
            args.onnx,
            opset=args.opset,
            # said, not bounded: opsets differ in what they fuse
            check=lambda staged: check(staged, float("inf"), partial(verify_onnx, model)),
            **_carried(meta),
        )
        files = [out, out.with_name(f"{out.name}.data")]
    else:
        from ..io.export import export_openvino, verify_openvino

        out = export_openvino(
            model,
            args.openvino,
            check=lambda staged: check(
                staged,
                OPENVINO_BOUND,
                partial(verify_openvino, model, bf16=False),
                partial(verify_openvino, model, bf16=True),
            ),
            **_carried(meta),
        )
        files = [out, out.with_suffix(".bin")]
    megabytes = sum(f.stat().st_size for f in files if f.exists()) / 1e6
    print(f"wrote {out} ({megabytes:.1f} MB): {said[0]} on batches of {sizes[0]} and {sizes[1]}")


def _pretrained(args: argparse.Namespace) -> None:
    """List the registry (which entries are cached), or download entries ahead of time."""
    from ..io.pretrained import find, is_cached, list_pretrained, weights_file

    if args.download:
        for name in args.download:  # every name checked before anything is fetched
            find(name)
        for name in args.download:
            path = weights_file(find(name), progress=not args.no_progress)
            print(f"{find(name).name}: {path}")
        return
    entries = list_pretrained(args.pattern)
    if not entries:
        raise VitkitError(
            f"no pretrained weights match {args.pattern!r}; `vitkit pretrained` lists them all"
        )
    rows = [
        (
            p.name,
            str(p.image_size),
            p.pretrained_on + (f" -> {p.fine_tuned_on}" if p.fine_tuned_on else ""),
            f"{100 * p.top1:.2f}%" if p.top1 is not None else "",
            p.size,
            "cached" if is_cached(p) else "",
        )
        for p in entries
    ]
    header = ("name", "res", "data", "top-1", "size", "")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def add_verbs(verb: Verb) -> None:
    p = verb(
        "presets",
        "list the model presets: parameters, GFLOPs, resolution, aliases",
        _presets,
        "vitkit presets 'ViT-B/*'   |   vitkit presets 'vit_base*'",
    )
    p.add_argument(
        "pattern", nargs="?", default="*", help="glob over preset names and aliases (default: all)"
    )

    p = verb(
        "pretrained",
        "the published weights by name (PRESET@TAG): list them, or download them ahead of time",
        _pretrained,
        "vitkit pretrained 'ViT-B/16@*'   |   vitkit pretrained --download ViT-B/16@in21k",
    )
    p.add_argument("pattern", nargs="?", default="*", help="glob over names (default: all)")
    p.add_argument(
        "--download", nargs="+", metavar="NAME", default=None, help="fetch these into the cache"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")

    p = verb(
        "summary",
        "print a model's config, size and cost (preset name or checkpoint)",
        _summary,
        "vitkit summary ViT-B/16   |   vitkit summary runs/b16",
    )
    p.add_argument("model", help="preset name, alias, or checkpoint path")

    p = verb(
        "convert",
        "convert a checkpoint of any supported format to ours or to HF, keeping its class "
        "names and preprocessing, or to the official vit_jax .npz (weights only)",
        _convert,
        "vitkit convert ViT-B_16.npz runs/b16   |   vitkit convert timm_b16.pth hf_b16 --format hf"
        "   |   vitkit convert runs/b16/best b16.npz --format official",
    )
    p.add_argument("src", help="official/big_vision .npz, timm .pth/.safetensors, HF or vitkit dir")
    p.add_argument("dst", help="output directory (an .npz file for --format official)")
    p.add_argument(
        "--format",
        choices=("vitkit", "hf", "official"),
        default="vitkit",
        help="output format: ours, Hugging Face, or the official vit_jax .npz that Google's "
        "code and timm read (tanh GELU: a model with exact GELU is written with a warning)",
    )
    p.add_argument(
        "--image-size",
        default=None,
        metavar="S|HxW",
        help="resize position embeddings to S x S or H x W images",
    )
    add_num_heads_argument(p)
    p.add_argument(
        "--posemb",
        choices=get_args(Posemb),
        default=None,
        help="big_vision fixed posemb",
    )

    p = verb(
        "export",
        "export a checkpoint to ONNX or OpenVINO's IR (dynamic batch; class names and "
        "preprocessing in its metadata) and check it against torch in fp32",
        _export,
        "vitkit export runs/fmnist/best --onnx fmnist.onnx   |   ... --openvino fmnist.xml",
    )
    p.add_argument("checkpoint", help="checkpoint directory or file (any format vitkit reads)")
    formats = p.add_mutually_exclusive_group(required=True)
    formats.add_argument("--onnx", metavar="OUT.onnx", help="the ONNX file to write")
    formats.add_argument(
        "--openvino",
        metavar="OUT.xml",
        help="OpenVINO's IR to write: OUT.xml and its fp32 weights OUT.bin (the openvino extra)",
    )
    p.add_argument(
        "--batch-size",
        type=int,
        default=2,
        help="batch checked against PyTorch (one 3 larger is checked too)",
    )
    p.add_argument("--opset", type=int, default=None, help="ONNX opset (default: torch's)")
