"""Write an ImageFolder of 300-500 px JPEGs with natural-image statistics, from photographs that
ship inside PyPI packages (no network at run time), for ``benchmarks/loader.py``.

    pip install scikit-image                       # its wheel carries the photographs
    .venv/bin/python benchmarks/make_jpeg_folder.py /tmp/jpegs          # 3,000 files, ~15 s
    .venv/bin/python benchmarks/make_jpeg_folder.py /tmp/jpegs --files 200 --classes 4   # smoke
    .venv/bin/python benchmarks/make_jpeg_folder.py /tmp/big --files 500 --sides 800 1200

The sources are the colour photographs bundled in scikit-image's wheel (``skimage/data``:
astronaut, chelsea, coffee, the Hubble deep field, an IHC slide, two motorcycle views, a retina,
a rocket) and, when scikit-learn is installed, its two sample photographs (china, flower). The
files are read with PIL from the installed package folder; the package itself is never imported.

Each output image is a random crop of a random source: its aspect ratio one of 1, 4:3, 3:4, 3:2,
2:3 (ImageNet's common shapes), its long side uniform between what keeps the short side at 300 px
and 500 px (``--sides``); the crop's size is uniform between the output's (or the largest box of
that shape in the source, when the source is smaller: chelsea's 451x300 and rocket's 640x427 are
upsampled a little) and the largest box of that shape in the source, resized with Lanczos, flipped
with p 0.5, its brightness scaled by U(0.8, 1.2); saved as baseline JPEG, quality 90, 4:2:0 chroma
(PIL's default, as most cameras and ImageNet's files). Files go to
``OUT/train/class_XX/NNNNNN.jpg``, round-robin over
the classes, so ``ImageFolderDataset(OUT, "train")`` reads them. The same ``--seed`` writes the
same bytes with the same Pillow.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import numpy as np
from PIL import Image, ImageEnhance

# (package, folder inside it, files): the colour photographs shipped in the packages' wheels.
SOURCES = (
    (
        "skimage",
        "data",
        (
            "astronaut.png",
            "chelsea.png",
            "coffee.png",
            "hubble_deep_field.jpg",
            "ihc.png",
            "motorcycle_left.png",
            "motorcycle_right.png",
            "retina.jpg",
            "rocket.jpg",
        ),
    ),
    ("sklearn", "datasets/images", ("china.jpg", "flower.jpg")),
)
ASPECTS = (1.0, 4 / 3, 3 / 4, 3 / 2, 2 / 3)  # width / height


def source_images() -> list[Path]:
    """The photographs found in the installed packages (their import is never run)."""
    found = []
    for package, folder, names in SOURCES:
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            continue
        base = Path(next(iter(spec.submodule_search_locations))) / folder
        found += [base / name for name in names if (base / name).is_file()]
    if not found:
        sys.exit("no source photographs: `pip install scikit-image` (its wheel carries them)")
    return found


def one_image(
    source: Image.Image, rng: np.random.Generator, sides: tuple[int, int] = (300, 500)
) -> Image.Image:
    """A random crop of ``source``, both sides within ``sides`` (see the module docstring)."""
    aspect = float(ASPECTS[rng.integers(len(ASPECTS))])
    elongation = max(aspect, 1 / aspect)  # so that the short side is sides[0] or more too
    long_side = int(rng.integers(round(sides[0] * elongation), sides[1] + 1))
    out_w, out_h = (
        (long_side, round(long_side / aspect))
        if aspect >= 1
        else (round(long_side * aspect), long_side)
    )
    sw, sh = source.size
    fit = min(sw / out_w, sh / out_h)  # the largest box of this shape, as a scale of the output
    scale = float(rng.uniform(min(fit, 1.0), fit))  # downsampled, unless the source is too small
    cw, ch = max(1, round(out_w * scale)), max(1, round(out_h * scale))
    left, top = int(rng.integers(0, sw - cw + 1)), int(rng.integers(0, sh - ch + 1))
    image = source.crop((left, top, left + cw, top + ch)).resize((out_w, out_h), Image.LANCZOS)
    if rng.random() < 0.5:
        image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return ImageEnhance.Brightness(image).enhance(float(rng.uniform(0.8, 1.2)))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="folder to write (OUT/train/<class>/<file>.jpg)")
    parser.add_argument("--files", type=int, default=3000)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--quality", type=int, default=90)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--sides", type=int, nargs=2, default=(300, 500), help="short side min, long side max"
    )
    args = parser.parse_args(argv)
    sources = []
    for path in source_images():
        with Image.open(path) as image:
            sources.append(image.convert("RGB"))
    rng = np.random.default_rng(args.seed)
    sizes, total = [], 0
    for k in range(args.files):
        image = one_image(sources[rng.integers(len(sources))], rng, tuple(args.sides))
        path = args.out / "train" / f"class_{k % args.classes:02d}" / f"{k:06d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        image.save(path, quality=args.quality)
        sizes.append(image.size)
        total += path.stat().st_size
    w, h = np.array(sizes).T
    print(
        f"wrote {args.files} JPEGs from {len(sources)} photographs to {args.out / 'train'}: "
        f"{args.classes} classes, width {w.min()}-{w.max()} (mean {w.mean():.0f}), height "
        f"{h.min()}-{h.max()} (mean {h.mean():.0f}), {total / args.files / 1024:.0f} KiB per file"
    )


if __name__ == "__main__":
    main()
