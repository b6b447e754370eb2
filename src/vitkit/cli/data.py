"""The verbs about data: ``data pack`` (an image folder to tar shards, data/sources/shards.py)."""

from __future__ import annotations

import argparse

from ..config import DataConfig
from ..config.keys import default_of
from .common import DEBUG_HELP, Verb


def _pack(args: argparse.Namespace) -> None:
    from ..data.sources.shards import pack_folder

    written, skipped = pack_folder(
        args.folder,
        args.out,
        shard_size=args.shard_size,
        splits=args.split,
        seed=args.seed,
        max_bad_fraction=args.max_bad_fraction,
    )
    for split in dict.fromkeys(p.split for p in written):
        shards = [p for p in written if p.split == split]
        samples = sum(p.samples for p in shards)
        print(
            f"{split}: {samples:,} images in {len(shards)} shard{'s' if len(shards) > 1 else ''}, "
            f"{shards[0].path.name} .. {shards[-1].path.name}"
        )
    if skipped:
        print(f"left out {len(skipped)} unreadable image(s): {', '.join(p for p, _ in skipped)}")
    print(
        f"wrote {args.out} (classes.txt beside the shards): train on it with --data wds:{args.out}"
    )


def add_verbs(verb: Verb) -> None:
    p = verb(
        "data",
        "work on datasets: `vitkit data pack` writes an image folder as tar shards (wds:DIR)",
        lambda args: args.data_run(args),
        "vitkit data pack photos/ shards/ --shard-size 1000",
    )
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    pack = actions.add_parser(
        "pack",
        help="write an image folder as webdataset tar shards",
        description="Write an image folder (DIR/<class>/<image>, or DIR/{train,val,test}/...) as "
        "OUT/{split}-000000.tar, ... (KEY.<image suffix> with the file's own bytes, KEY.cls) "
        "and OUT/classes.txt, in a seeded random order; each shard is written beside its name "
        "and renamed.",
        epilog="example: vitkit data pack photos/ shards/ --shard-size 1000   |   "
        "vitkit data pack photos/val shards/ --split val",
    )
    pack.set_defaults(data_run=_pack)
    pack.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=DEBUG_HELP)
    pack.add_argument("folder", help="the image folder (as --data DIR reads it)")
    pack.add_argument("out", help="the folder to write the shards to (created if needed)")
    pack.add_argument("--shard-size", type=int, required=True, metavar="N", help="images per shard")
    pack.add_argument(
        "--split",
        action="append",
        choices=("train", "val", "test"),
        default=None,
        help="the splits to write (repeatable; default: all of the folder's); for one tree of "
        "class folders, the split to call it (default train)",
    )
    pack.add_argument(
        "--seed", type=int, default=0, help="the order of the samples in the shards (default 0)"
    )
    pack.add_argument(
        "--max-bad-fraction",
        type=float,
        default=default_of(DataConfig, "max_bad_fraction"),
        help="the fraction of a split's images that may be unreadable (left out and named)",
    )
