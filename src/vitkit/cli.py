"""``vitkit <verb>``: the command line.

Each verb imports what it needs when it runs, so ``vitkit --help`` never imports torch. Every
error a user can cause is one line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

EXAMPLES = {
    "presets": "vitkit presets 'ViT-B/*'",
    "summary": "vitkit summary ViT-B/16   |   vitkit summary runs/b16",
    "convert": "vitkit convert ViT-B_16.npz runs/b16   |   vitkit convert timm_b16.pth hf_b16 --format hf",
}


def _presets(args: argparse.Namespace) -> None:
    import torch

    from .model import VisionTransformer
    from .model.flops import count_flops
    from .presets import PRESETS, list_models

    names = list_models(args.pattern)
    if not names:
        raise ValueError(f"no preset matches {args.pattern!r}; try `vitkit presets` for all")
    rows = []
    for name in names:
        cfg = PRESETS[name].build()
        with torch.device("meta"):
            params = VisionTransformer(cfg).num_params()
        aliases = ", ".join(PRESETS[name].aliases)
        rows.append(
            (name, f"{params:,}", f"{count_flops(cfg) / 1e9:.2f}", str(cfg.image_size), aliases)
        )
    header = ("model", "params", "GFLOPs", "res", "aliases")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    for row in [header, *rows]:
        cells = [row[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(row[1:4], widths[1:], strict=True)
        ]
        print("  ".join([*cells, row[4]]))


def _summary(args: argparse.Namespace) -> None:
    from pathlib import Path

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
    print(
        f"GFLOPs       {count_flops(cfg) / 1e9:.2f} per image at {cfg.image_size}x{cfg.image_size}"
    )
    print(
        f"tokens       {cfg.grid_size}x{cfg.grid_size} patches + {cfg.num_prefix_tokens} class token"
    )
    with torch.inference_mode():
        x = torch.randn(1, cfg.in_chans, cfg.image_size, cfg.image_size)
        out = model.eval()(x)
    print(f"forward      {tuple(x.shape)} -> {tuple(out.shape)}")


def _convert(args: argparse.Namespace) -> None:
    from .io.api import load, save

    model = load(args.src, image_size=args.image_size, num_heads=args.num_heads, posemb=args.posemb)
    out = save(model, args.dst, format=args.format)
    print(
        f"wrote {out} ({args.format}): {model.num_params():,} parameters, {model.cfg.image_size}px"
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vitkit",
        description="The Vision Transformer (Dosovitskiy et al., ICLR 2021) on PyTorch.",
    )
    verbs = parser.add_subparsers(dest="verb", required=True, metavar="VERB")

    def verb(
        name: str, help: str, run: Callable[[argparse.Namespace], None]
    ) -> argparse.ArgumentParser:
        p = verbs.add_parser(name, help=help, description=help, epilog=f"example: {EXAMPLES[name]}")
        p.set_defaults(run=run)
        return p

    p = verb("presets", "list the model presets: parameters, GFLOPs, resolution, aliases", _presets)
    p.add_argument("pattern", nargs="?", default="*", help="glob over preset names (default: all)")

    p = verb(
        "summary", "print a model's config, size and cost (preset name or checkpoint)", _summary
    )
    p.add_argument("model", help="preset name, alias, or checkpoint path")

    p = verb("convert", "convert a checkpoint of any supported format to ours (or to HF)", _convert)
    p.add_argument("src", help="official/big_vision .npz, timm .pth/.safetensors, HF or vitkit dir")
    p.add_argument("dst", help="output directory")
    p.add_argument("--format", choices=("vitkit", "hf"), default="vitkit", help="output format")
    p.add_argument("--image-size", type=int, default=None, help="resize position embeddings")
    p.add_argument(
        "--num-heads", type=int, default=None, help="heads, if the checkpoint lacks them"
    )
    p.add_argument(
        "--posemb",
        choices=("learn", "sincos2d", "none"),
        default=None,
        help="big_vision fixed posemb",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        args.run(args)
    except (ValueError, OSError, ImportError) as e:
        # User errors: ValueError (ConfigError, CheckpointError), OSError (missing files).
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        print(f"vitkit {args.verb}: error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"vitkit {args.verb}: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
