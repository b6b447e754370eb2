"""Shared test helpers: tiny configs and random weights that make logit comparisons meaningful;
stand-ins of datasets (VTAB-1k task folders, ImageNet validation images named for ReaL)."""

from __future__ import annotations

import io
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tarfile
import zlib
from collections import Counter
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

from vitkit.config import ModelConfig
from vitkit.eval.real import ENTRIES
from vitkit.train.loop import TIMING_KEYS

# Muon's Newton-Schulz iteration in bf16 (train/optim.py orthogonalize): its last step adds aX, bAX
# and cA²X (|a|+|b|+|c| = 10.25, X's entries at most 1.2), each rounded to bf16 (2^-8), so an entry
# of the result may differ by this much between two orders of rounding (two devices), for a
# well-conditioned input; the update is the result times lr x 0.2 sqrt(max dim).
MUON_ROUNDING = (3.4445 + 4.775 + 2.0315) * 1.2 * 2**-8


def tiny(**overrides: Any) -> ModelConfig:
    """A 2-layer, 64-wide ViT on 32x32 images (4x4 patches of 8 pixels), 10 classes."""
    base: dict[str, Any] = dict(
        image_size=32,
        patch_size=8,
        hidden_size=64,
        num_layers=2,
        num_heads=4,
        mlp_dim=128,
        num_classes=10,
    )
    return ModelConfig(**{**base, **overrides})


def randomize(model: nn.Module, std: float = 0.2, seed: int = 0) -> nn.Module:
    """Re-draw every parameter so logits are O(1) and the (zero-initialised) head is not zero;
    returns the model in eval mode."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * std)
    return model.eval()


def stopped_copy(run_dir: Path, to: Path, step: int) -> Path:
    """A copy of the run directory ``run_dir`` as if killed after checkpoint ``step`` (later
    checkpoints removed): what a resumed run starts from."""
    shutil.copytree(run_dir, to)
    for later in (to / "checkpoints").iterdir():
        if int(later.name.removeprefix("step_")) > step:
            shutil.rmtree(later)
    return to


def file_size_limit(limit: int) -> Callable[[], None]:
    """A ``preexec_fn`` for ``subprocess``: the child's files may not grow past ``limit`` bytes
    (RLIMIT_FSIZE: a write past it fails with EFBIG, as one on a full disk with ENOSPC). Past it
    the kernel sends SIGXFSZ, which kills: ignored."""

    def limit_files() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return limit_files


# What makes each EXIF orientation's stored pixels from the upright picture: the inverse of the
# turn ``ImageOps.exif_transpose`` applies.
_STORED_AS = {
    2: Image.Transpose.FLIP_LEFT_RIGHT,
    3: Image.Transpose.ROTATE_180,
    4: Image.Transpose.FLIP_TOP_BOTTOM,
    5: Image.Transpose.TRANSPOSE,
    6: Image.Transpose.ROTATE_90,
    7: Image.Transpose.TRANSVERSE,
    8: Image.Transpose.ROTATE_270,
}


def exif_photo(path: Path, picture: Image.Image, orientation: int, fmt: str = "JPEG") -> Path:
    """``picture`` stored turned as a phone stores it, with the EXIF orientation tag (1-8) that
    turns it back, and another tag before it; a JPEG at quality 95 (or ``fmt``)."""
    turn = _STORED_AS.get(orientation)
    stored = picture if turn is None else picture.transpose(turn)
    exif = Image.Exif()
    exif[0x010F] = "vitkit test camera"
    exif[0x0112] = orientation
    stored.save(path, fmt, exif=exif.tobytes(), **({"quality": 95} if fmt == "JPEG" else {}))
    return path


def vtab_task_folder(root: Path, classes: int, fmt: str, seed: int, sizes: dict[str, int]) -> Path:
    """A stand-in VTAB-1k task folder: ``root/images/<list>/<i>.<ext>`` and ``root/<list>.txt``
    for the lists of ``sizes`` (train800, val200, test: their images), each class a colour plus
    noise; train800val200 lists train800's lines then val200's, as the release does."""
    rng = np.random.default_rng(seed)
    ext = {"PNG": "png", "JPEG": "jpg"}[fmt]
    lines: dict[str, list[str]] = {}
    for name, n in sizes.items():
        (root / "images" / name).mkdir(parents=True)
        lines[name] = []
        for i in range(n):
            label = i % classes
            colour = np.array([80 * label, 255 - 80 * label, 100])
            pixels = np.clip(colour + rng.integers(-20, 20, (12, 14, 3)), 0, 255).astype(np.uint8)
            Image.fromarray(pixels).save(root / "images" / name / f"{i}.{ext}", fmt)
            lines[name].append(f"images/{name}/{i}.{ext} {label}")
    lines["train800val200"] = lines["train800"] + lines["val200"]
    for name, listed in lines.items():
        (root / f"{name}.txt").write_text("\n".join(listed) + "\n")
    return root


# ImageNet ReaL stand-ins (tests/test_real.py, tests/test_transfer.py)


def timm_real_labels() -> list[list[int]]:
    """timm's copy of the ImageNet ReaL labels: entry i for ILSVRC2012_val_{i+1:08d}."""
    text = resources.files("timm.data").joinpath("_info/imagenet_real_labels.json").read_text()
    return json.loads(text)


def val_name(number: int, ext: str = "JPEG") -> str:
    """The file name of ImageNet validation image ``number`` (counted from 1)."""
    return f"ILSVRC2012_val_{number:08d}.{ext}"


def timm_real(numbers: list[int], predictions: torch.Tensor) -> tuple[float, int]:
    """(ReaL accuracy, images counted) as timm's ``RealLabelsImagenet`` computes them for the
    top-1 ``predictions`` of the validation images ``numbers`` (counted from 1), in order."""
    from timm.data import RealLabelsImagenet

    rest = sorted(set(range(1, ENTRIES + 1)) - set(numbers))
    filenames = [val_name(n) for n in [*numbers, *rest]]  # timm wants all 50,000 names
    real = RealLabelsImagenet(filenames, topk=(1,))
    logits = torch.nn.functional.one_hot(predictions, 1000).float()  # (n, 1000): top-1 is it
    for part in logits.split(64):
        real.add_result(part)
    return real.get_accuracy(k=1) / 100, len(real.is_correct[1])


def real_stand_in_numbers(count: int, seed: int) -> list[int]:
    """Validation images (numbered from 1) in a random order: a random part of the 50,000 with
    at least three whose label set is empty."""
    labels = timm_real_labels()
    rng = np.random.default_rng(seed)
    empty = [n for n in range(1, ENTRIES + 1) if not labels[n - 1]]
    some = rng.choice(np.arange(1, ENTRIES + 1), count - 3, replace=False).tolist()
    chosen = list(dict.fromkeys([*some, *rng.choice(empty, 3, replace=False).tolist()]))
    return [int(n) for n in rng.permutation(chosen)]


def png_bytes(seed: int) -> bytes:
    """A 12x10 PNG of noise, seeded."""
    pixels = np.random.default_rng(seed).integers(0, 256, (12, 10, 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="PNG")
    return out.getvalue()


def top1_predictions(checkpoint: Path, spec: str) -> tuple[list[str], torch.Tensor]:
    """The images ``vitkit eval`` evaluates on ``spec`` (each one's message name) and the
    checkpoint's top-1 prediction of each, in that order, through the library."""
    import vitkit
    from vitkit.data import BatchOptions
    from vitkit.data.run_data import batches_of, evaluation_split
    from vitkit.eval.metrics import evaluate

    model = vitkit.load(checkpoint)
    split = evaluation_split(spec, None, model.cfg, source=str(checkpoint))
    batches = batches_of(split.dataset, BatchOptions.evaluation(model.cfg, batch_size=64))
    result = evaluate(model, batches.epoch(0), 1000, predictions=True)
    names = [split.dataset.name_of(i) for i in range(len(split.dataset))]
    return names, result.predictions


def write_tar(path: Path, members: dict[str, bytes]) -> Path:
    """A tar file of ``members`` (name -> bytes), in order, its folder made: a test's shard."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def claimed_png(width: int, height: int) -> bytes:
    """A PNG whose header claims ``width`` x ``height`` RGB pixels and whose data holds one row:
    about a hundred bytes that PIL opens (the size is the header's) and fails to decode, after
    allocating the whole image, as a real PNG of that size that compresses well would be."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        crc = zlib.crc32(kind + body).to_bytes(4, "big")
        return len(body).to_bytes(4, "big") + kind + body + crc

    header = width.to_bytes(4, "big") + height.to_bytes(4, "big") + bytes([8, 2, 0, 0, 0])
    row = zlib.compress(b"\0" * (1 + 3 * width))  # a filter byte, then the row's pixels
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", row) + chunk(b"IEND", b"")


def padded_image(path: Path, size: int) -> Path:
    """A small PNG at ``path`` followed by zeros up to ``size`` bytes, sparse on disk (PIL reads
    the image and ignores what follows its end): a file larger than a byte bound that is
    otherwise a readable image."""
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((6, 5, 3), 90, dtype=np.uint8)).save(path, "PNG")
    with open(path, "r+b") as f:
        f.truncate(size)
    return path


def count_preparation(monkeypatch: Any) -> Counter[Any]:
    """From now on, count what preparing a run reads and decides: each file read as text (by its
    path: a run directory's config.json), ``"device"`` for each device chosen (every resolution
    of one chooses, ``runtime.machine.choose_device``) and ``"data"`` for each time a run's data
    is read (``data.run_data.build_data``)."""
    import vitkit.data.run_data
    import vitkit.runtime.machine

    seen: Counter[Any] = Counter()
    read_text = Path.read_text

    def counted_read(self: Path, *args: Any, **kwargs: Any) -> str:
        seen[self] += 1
        return read_text(self, *args, **kwargs)

    def counting(key: str, original: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any, **kwargs: Any) -> Any:
            seen[key] += 1
            return original(*args, **kwargs)

        return counted

    monkeypatch.setattr(Path, "read_text", counted_read)
    machine, run_data = vitkit.runtime.machine, vitkit.data.run_data
    monkeypatch.setattr(machine, "choose_device", counting("device", machine.choose_device))
    monkeypatch.setattr(run_data, "build_data", counting("data", run_data.build_data))
    return seen


# The committed run of the first training-state format, stopped and uninterrupted (its log).
RESUME_V1 = Path(__file__).parent / "data" / "resume_v1"
# What a run logs that is the same however often it was stopped and resumed.
DETERMINISTIC = ("step", "split", "lr", "loss", "accuracy", "top5")


def uninterrupted_log(fixture: Path) -> list[dict]:
    """A committed run's log, uninterrupted (``fixture/uninterrupted.jsonl``), as today's code
    writes it: the fixtures classify 2 or 4 classes, whose top-5 (1.0: every label) is no
    longer logged."""
    lines = (fixture / "uninterrupted.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k != "top5"} for line in lines]


def vitkit_train(*args: str) -> subprocess.Popen:
    """``vitkit train ARGS`` in a process of its own, its output piped."""
    return subprocess.Popen(
        [sys.executable, "-m", "vitkit", "train", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def pytree_lines(stderr: str) -> list[str]:
    """A command's lines of stderr from torch's pytree registry, about a peer's registrations that
    a user can do nothing about (issue 46 reported two from ``convert`` and ``export``): torch
    names the pytree in its deprecations and overwrites, not in its log of an Enum registered."""
    return [line for line in stderr.splitlines() if "pytree" in line or "Enum subclass" in line]


def deterministic_metrics(run_dir: Path) -> list[dict]:
    """A run's metrics.jsonl, each line's ``DETERMINISTIC`` fields."""
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [{k: r[k] for k in DETERMINISTIC if k in r} for r in map(json.loads, lines)]


def save_image_to(path: Path, image: Image.Image, **kwargs: Any) -> Path:
    """``image`` saved at ``path`` (its folders made), with PIL's ``kwargs``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path, **kwargs)
    return path


def grey_image(seed: int, size: tuple[int, int] = (6, 5)) -> Image.Image:
    """A grey noise image, mode L, of ``size`` (height, width)."""
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, size, dtype=np.uint8))


def colour_image(seed: int) -> Image.Image:
    """A 6x5 colour noise image, mode RGB."""
    return Image.fromarray(np.random.default_rng(seed).integers(0, 256, (6, 5, 3), dtype=np.uint8))


def one_line_error(capsys: Any, argv: list[str], expected: str = "") -> str:
    """Run ``vitkit argv``: it fails with exit status 2 and one line on stderr holding
    ``expected``; that line."""
    from vitkit.cli import main

    capsys.readouterr()  # what came before
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert expected in err, err
    return err


def vitkit_out(capsys: Any, *argv: str) -> str:
    """Run ``vitkit argv`` (the command line's parsing and its verb, in this process): it
    succeeds; its standard output."""
    from vitkit.cli import main

    capsys.readouterr()  # what came before
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def logged_metrics(run_dir: Path) -> list[dict]:
    """A run's metrics.jsonl without the timings (what is the same run to run)."""
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(x).items() if k not in TIMING_KEYS} for x in lines]


def random_checkpoint(path: Path, **overrides: Any) -> Path:
    """A random tiny ViT (``tiny(**overrides)``, weights ``randomize``d) saved at ``path``."""
    from vitkit import save
    from vitkit.model import VisionTransformer

    return save(randomize(VisionTransformer(tiny(**overrides))), path)


def in_a_child(code: str, *args: str, as_a_user: bool = False) -> Any:
    """What ``code`` prints as JSON on its last line, run by a fresh interpreter (``sys.argv[1:]``
    are ``args``) whose error fails the test with its stderr. For OpenVINO: loaded into the test
    process, it made a later torchao/Inductor compilation there end in SIGSEGV (after pyarrow was
    loaded too; tests/test_inference.py), so no test loads it here. ``as_a_user``: without root's
    right to read and search any file (dropped by util-linux's ``setpriv`` where the tests run as
    root; the test is skipped where it is missing), so that ``chmod 000`` refuses as it would a
    user."""
    prefix: list[str] = []
    if as_a_user and os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("as root, this needs util-linux's setpriv to drop the right to read")
        caps = "-dac_override,-dac_read_search"
        prefix = [setpriv, f"--bounding-set={caps}", f"--inh-caps={caps}"]
        if subprocess.run([*prefix, "true"], capture_output=True).returncode != 0:
            pytest.skip("setpriv cannot drop root's right to read here (no CAP_SETPCAP?)")
    done = subprocess.run(
        [*prefix, sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def bf16_from_any_size(monkeypatch: Any) -> None:
    """``auto`` takes bf16 on a CPU with native bf16 however small the work: every kind's rule
    with no least work (a test-sized model is far under the measured limits)."""
    from dataclasses import replace

    from vitkit.runtime import arithmetic

    for kind, rule in list(arithmetic.RULES.items()):
        monkeypatch.setitem(
            arithmetic.RULES, kind, replace(rule, min_gflop={"train": 0.0, "infer": 0.0})
        )
