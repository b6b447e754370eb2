"""A folder of real photographs like the one a newcomer trained on (issue 46): 4 classes (the
photo turned by 0, 90, 180 or 270 degrees), 2,720 training, 480 validation and 760 test images of
224-512 px, cut from the wallpapers Debian ships (photos and renders, free to use), with the junk
files a real folder has (a truncated JPEG, a text file).

    apt-get install gnome-backgrounds plasma-workspace-wallpapers mate-backgrounds \\
        lomiri-wallpapers debian-edu-artwork
    .venv/bin/python benchmarks/photo_folder.py /tmp/photos

Each wallpaper goes to one split only (a seeded draw), so no test photo shares its source with a
training one; each crop is a random box of 224-512 px on its shorter side, of aspect 3:4 to 4:3,
saved as a JPEG of quality 90 once per class.
"""

from __future__ import annotations

import argparse
import hashlib
import random
from pathlib import Path

from PIL import Image

SOURCES = ("/usr/share/backgrounds", "/usr/share/wallpapers", "/usr/share/desktop-base")
SPLITS = {"train": 2720, "val": 480, "test": 760}  # images, 4 classes each
CLASSES = {"rot_000": None, "rot_090": Image.Transpose.ROTATE_90,
           "rot_180": Image.Transpose.ROTATE_180, "rot_270": Image.Transpose.ROTATE_270}  # fmt: skip
MIN_SIDE = 720  # a wallpaper smaller than this on its shorter side is left out


def wallpapers(roots: list[str]) -> list[Path]:
    """Every distinct raster wallpaper under ``roots`` at least ``MIN_SIDE`` px on its shorter
    side, in a fixed order (the same bytes once)."""
    seen, found = set(), []
    for root in roots:
        for path in sorted(Path(root).rglob("*")):
            if path.suffix.lower() not in (".jpg", ".jpeg", ".png", ".webp") or path.is_symlink():
                continue
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            if digest in seen:
                continue
            with Image.open(path) as image:
                if min(image.size) < MIN_SIDE:
                    continue
            seen.add(digest)
            found.append(path)
    return found


def crop(image: Image.Image, rng: random.Random) -> Image.Image:
    """A random box of 224-512 px on its shorter side, aspect 3:4 to 4:3."""
    short = rng.randint(224, 512)
    long = int(short * rng.uniform(1.0, 4 / 3))
    w, h = (long, short) if rng.random() < 0.5 else (short, long)
    x, y = rng.randint(0, image.width - w), rng.randint(0, image.height - h)
    return image.crop((x, y, x + w, y + h))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    sources = wallpapers(list(SOURCES))
    rng.shuffle(sources)
    total = sum(SPLITS.values())
    start = 0
    for split, count in SPLITS.items():
        share = round(len(sources) * count / total)
        chosen = sources[start : start + share] if split != "test" else sources[start:]
        start += share
        crops = count // len(CLASSES)
        for i in range(crops):
            with Image.open(chosen[i % len(chosen)]) as wallpaper:
                picture = crop(wallpaper.convert("RGB"), rng)
            for name, turn in CLASSES.items():
                folder = args.out / split / name
                folder.mkdir(parents=True, exist_ok=True)
                turned = picture if turn is None else picture.transpose(turn)
                turned.save(folder / f"{i:04d}.jpg", quality=90)
        print(f"{split}: {len(chosen)} wallpapers, {crops * len(CLASSES)} images")
    # what a real folder also holds
    good = (args.out / "train" / "rot_000" / "0000.jpg").read_bytes()
    (args.out / "train" / "rot_000" / "truncated.jpg").write_bytes(good[: len(good) // 3])
    (args.out / "train" / "notes.txt").write_text("holiday photos\n")


if __name__ == "__main__":
    main()
