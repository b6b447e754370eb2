"""data.auto_augment: timm's strings parsed and refused in one line, each policy's draws what its
definition says (RandAugment's magnitude noise, TrivialAugment's one op and uniform bins,
AutoAugment's sub-policies), reproducible from the generator, and a run that resumes exactly;
data.rand_augment=true is still torchvision's RandAugment(2, 10), pixel for pixel."""

from __future__ import annotations

import itertools
import math
import statistics
from collections import Counter
from pathlib import Path

import pytest
import torch

from vitkit.config import ConfigError, DataConfig, replace
from vitkit.config.augment import parse_auto_augment, why_not_new
from vitkit.data.autoaugment import IMAGENET_POLICY, Step, apply, auto_augment, plan


def g(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def image(seed: int = 0, channels: int = 3) -> torch.Tensor:
    return torch.randint(0, 256, (channels, 32, 32), generator=g(seed), dtype=torch.uint8)


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("rand-m9-mstd0.5-inc1", dict(magnitude=9, magnitude_std=0.5, increasing=True)),
        ("rand-m9-n2", dict(magnitude=9, num_ops=2)),
        ("rand-n3-m7", dict(magnitude=7, num_ops=3)),  # sections in any order
        ("rand", dict(magnitude=10, num_ops=2, prob=0.5, magnitude_max=10)),  # timm's defaults
        ("rand-m15-mmax20-p1.0", dict(magnitude=15, magnitude_max=20, prob=1.0)),
        ("rand-m9-mstd101", dict(magnitude_std=math.inf)),  # timm: > 100 is uniform
        ("original", dict(policy="original", magnitude_std=0.0)),
        ("original-mstd0.5", dict(policy="original", magnitude_std=0.5)),
        ("trivial", dict(policy="trivial")),
        ("ta_wide", dict(policy="trivial")),
    ],
)
def test_timms_strings_are_read(text: str, want: dict) -> None:
    parsed, want = parse_auto_augment(text), {"policy": "rand", **want}
    assert {k: getattr(parsed, k) for k in want} == want
    assert DataConfig(auto_augment=text).auto_augment == text


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("rand-mX", r"'mX' in 'rand-mX' is not a section: expected m<int>, n<int>, mstd<number>"),
        ("rand-m9-m8", r"sets m twice"),
        ("rand-m11", r"m=11 > mmax=10"),
        ("rand-n0", r"n=0"),
        ("rand-p2", r"p=2: expected a probability"),
        ("rand-tweights", r"'tweights' .* is not a section"),
        ("original-m9", r"'m9' in 'original-m9' is not a section: expected mstd<number>"),
        ("trivial-m9", r"expected 'trivial' alone"),
        ("v0", r"'v0' is not an augmentation vitkit has: expected rand\[-mM\]"),
        ("augmix-m5", r"not an augmentation vitkit has"),
        ("", r"not an augmentation vitkit has"),
    ],
)
def test_other_strings_are_refused_in_one_line(text: str, why: str) -> None:
    with pytest.raises(ConfigError, match=why) as info:
        DataConfig(auto_augment=text)
    assert f"data.auto_augment={text!r} is not valid: " in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("rand-n" + "9" * 5000, r"has n of 5,000 digits: expected n in \[1, 16\]"),
        ("rand-p" + "9" * 5000, r"has p=inf: expected a probability in \[0, 1\]"),
        ("rand-m" + "9" * 5000, r"has m=inf > mmax=10"),
    ],
)
def test_a_number_of_thousands_of_digits_is_refused_in_one_short_line(text: str, why: str) -> None:
    """n of more digits than int() reads was a ValueError traceback; every such number is one
    line that shows the string's start and its length, not all of it."""
    with pytest.raises(ConfigError, match=why) as info:
        DataConfig(auto_augment=text)
    message = str(info.value)
    assert message.startswith("data.auto_augment='rand-") and "(5,008 characters)" in message
    assert "\n" not in message and len(message) < 400


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("rand-n1000000000", "applies n=1,000,000,000 ops: expected n in [1, 16]"),
        ("rand-n17-m9", "applies n=17 ops: expected n in [1, 16]"),
        ("rand-m9-mmax101", "has mmax=101: expected mmax <= 100"),
        ("rand-m" + "9" * 400 + "-mmax" + "9" * 400, "has mmax=inf: expected mmax <= 100"),
    ],
)
def test_a_new_run_keeps_n_and_mmax_bounded(text: str, why: str) -> None:
    """Beyond the bounds of a new run (config/keys.py ``check_new``), yet a valid string: a run
    recorded with it before the bounds reads it and keeps it."""
    assert DataConfig(auto_augment=text).auto_augment == text
    assert why in str(why_not_new(text))
    assert why_not_new("rand-n16-m100-mmax100") is None
    assert why_not_new("original") is None and why_not_new("trivial") is None


def test_vitkit_config_shows_the_key_and_refuses_a_bad_string_in_one_line(capsys) -> None:
    from vitkit.cli import main

    aa = ["config", "--recipe", "smoke", "data.auto_augment"]
    assert main([*aa, "--set", "data.auto_augment=rand-m9-mstd0.5-inc1"]) == 0
    assert "data.auto_augment = rand-m9-mstd0.5-inc1    (--set)" in capsys.readouterr().out
    assert main([*aa, "--set", "data.auto_augment=rand-mX"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("vitkit config: error: data.auto_augment=rand-mX is not valid: 'mX'")
    assert err.count("\n") == 1
    both = ["--set", "data.auto_augment=trivial", "--set", "data.rand_augment=true"]
    assert main([*aa, *both]) == 2
    assert "with data.rand_augment=True (RandAugment(2, 10)): choose one" in capsys.readouterr().err


def test_rand_augment_and_auto_augment_together_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"data\.auto_augment='original' .* choose one"):
        DataConfig(rand_augment=True, auto_augment="original")


def _steps(text: str, n: int) -> list[list[Step]]:
    policy = parse_auto_augment(text)
    return [plan(policy, g(seed)) for seed in range(n)]


def test_rand_augment_magnitudes_are_noised_around_m_and_clipped() -> None:
    """timm's magnitude noise: every applied op's magnitude ~ N(m, mstd) clipped to [0, mmax]."""
    steps = [s for p in _steps("rand-m9-mstd0.5-p1", 2000) for s in p]
    assert len(steps) == 4000  # p=1: both ops of every image applied
    mags = [s.magnitude for s in steps]
    assert abs(statistics.fmean(mags) - 9) < 0.03 and abs(statistics.stdev(mags) - 0.5) < 0.03
    wide = [s.magnitude for p in _steps("rand-m9-mstd3-p1", 2000) for s in p]
    assert min(wide) >= 0 and max(wide) == 10  # clipped at mmax
    above = 1 - statistics.NormalDist(9, 3).cdf(10)  # the share clipped to 10: 0.37
    assert abs(wide.count(10.0) / len(wide) - above) < 0.03
    uniform = [s.magnitude for p in _steps("rand-m8-mstd101-p1", 2000) for s in p]
    assert min(uniform) >= 0 and max(uniform) <= 8 and abs(statistics.fmean(uniform) - 4) < 0.15
    assert {s.magnitude for p in _steps("rand-m9", 200) for s in p} == {9.0}  # no noise


def test_rand_augment_picks_its_ops_uniformly_applies_each_with_p_and_signs_half() -> None:
    plans = _steps("rand-m9-inc1", 3000)
    applied = Counter(len(p) for p in plans)  # Binomial(2, 0.5): 1/4, 1/2, 1/4
    assert all(abs(applied[k] / 3000 - q) < 0.03 for k, q in ((0, 0.25), (1, 0.5), (2, 0.25)))
    ops = Counter(s.op for p in plans for s in p)
    assert len(ops) == 15 and "PosterizeIncreasing" in ops and "Posterize" not in ops
    assert max(ops.values()) / min(ops.values()) < 1.5  # uniform: about 200 each
    rotations = [s.arg for p in plans for s in p if s.op == "Rotate"]
    assert {abs(a) for a in rotations} == {27.0}  # 30 degrees x m / 10
    assert abs(sum(a > 0 for a in rotations) / len(rotations) - 0.5) < 0.1
    # inc: the severity grows with m (factor 1 +- 0.9 m/10); without: 0.1 + 1.8 m/10
    assert {round(s.arg, 6) for p in plans for s in p if s.op == "ColorIncreasing"} == {0.19, 1.81}
    plain = {round(s.arg, 6) for p in _steps("rand-m9", 500) for s in p if s.op == "Color"}
    assert plain == {1.72}


def test_trivial_augment_applies_one_op_with_a_uniform_magnitude() -> None:
    plans = _steps("trivial", 6000)
    assert {len(p) for p in plans} == {1}
    ops = Counter(p[0].op for p in plans)
    assert len(ops) == 14 and max(ops.values()) / min(ops.values()) < 1.3  # ~430 each
    bins = Counter(round(p[0].magnitude * 30) for p in plans if p[0].arg is not None)
    assert sorted(bins) == list(range(31))
    expected = sum(bins.values()) / 31
    chi2 = sum((c - expected) ** 2 / expected for c in bins.values())
    assert chi2 < 60  # 30 degrees of freedom: p < 0.001 above 59.7
    for op, top in (("Rotate", 135.0), ("ShearX", 0.99), ("TranslateY", 32.0)):
        steps = [p[0] for p in plans if p[0].op == op]
        assert max(abs(s.arg) for s in steps) == pytest.approx(top)  # the range's end, signed
        assert all(abs(s.arg) == pytest.approx(top * s.magnitude) for s in steps)


def _by_hand(image: torch.Tensor, op: str, m: int, sign: int) -> torch.Tensor:
    """AutoAugment's op at magnitude m by its definition (timm's level rules), with
    torchvision's functional ops."""
    from torchvision.transforms.v2 import functional as F

    level = m / 10
    if op == "PosterizeOriginal":
        return F.posterize(image, int(4 * level) + 4)
    if op == "Rotate":
        return F.rotate(image, sign * 30 * level, interpolation="bilinear", fill=[128.0])
    if op == "Solarize":
        return torch.where(image >= int(256 * level), 255 - image, image)
    if op == "ShearX":
        shear = [math.degrees(math.atan(sign * 0.3 * level)), 0.0]
        return F.affine(image, 0.0, [0.0, 0.0], 1.0, shear, "bilinear", [128.0], [0.0, 0.0])
    if op == "Invert":
        return 255 - image
    enhance = {"Color": F.adjust_saturation, "Contrast": F.adjust_contrast}
    if op in enhance:
        return enhance[op](image, 1.8 * level + 0.1)
    if op == "Sharpness":
        return F.adjust_sharpness(image, 1.8 * level + 0.1)
    return {"AutoContrast": F.autocontrast, "Equalize": F.equalize}[op](image)


def test_auto_augment_gives_one_of_its_sub_policies_applied() -> None:
    """Every output is one of the ImageNet policy's sub-policies with each op on or off (and
    either sign of a signed op), computed by hand."""
    x = image(1)
    assert len(IMAGENET_POLICY) == 25 and {len(s) for s in IMAGENET_POLICY} == {2}
    assert IMAGENET_POLICY[0] == (("PosterizeOriginal", 0.4, 8), ("Rotate", 0.6, 9))
    outcomes = set()
    for sub_policy in IMAGENET_POLICY:
        for on in itertools.product((0, 1), repeat=2):
            signed = [
                use and op in ("Rotate", "ShearX")
                for (op, _, _), use in zip(sub_policy, on, strict=True)
            ]
            for signs in itertools.product(*[(1, -1) if s else (1,) for s in signed]):
                y = x
                for (op, _, m), use, sign in zip(sub_policy, on, signs, strict=True):
                    y = _by_hand(y, op, m, sign) if use else y
                outcomes.add(y.numpy().tobytes())
    policy = parse_auto_augment("original")
    outs = {auto_augment(x, policy, generator=g(seed)).numpy().tobytes() for seed in range(100)}
    assert outs <= outcomes  # each output is a sub-policy's
    assert len(outs) > 25  # many sub-policies and on/off patterns, not a few


def test_each_op_does_what_its_name_says_on_the_pixels() -> None:
    x, low = image(2), image(2) < 128
    assert torch.equal(apply(x, [Step("Invert", 4, None)]), 255 - x)
    solar = apply(x, [Step("Solarize", 5, 128)])
    assert torch.equal(solar[~low], 255 - x[~low]) and torch.equal(solar[low], x[low])
    assert torch.equal(apply(x, [Step("Solarize", 10, 256)]), x)  # 256 inverts nothing
    added = apply(x, [Step("SolarizeAdd", 10, 110)])
    assert torch.equal(added[low], (x[low].int() + 110).clamp(max=255).to(torch.uint8))
    assert torch.equal(added[~low], x[~low])
    assert torch.equal(apply(x, [Step("Posterize", 5, 2)]), x & 0b11000000)
    assert not apply(x, [Step("Posterize", 10, 0)]).any()  # 0 bits kept (timm's m10, inc)
    assert torch.equal(apply(x, [Step("Posterize", 0, 8)]), x)
    saturated = apply(x, [Step("SolarizeAdd", 10, 200)])  # saturates at 255, does not wrap
    assert torch.equal(saturated[low], (x[low].int() + 200).clamp(max=255).to(torch.uint8))
    assert (saturated[low & (x >= 56)] == 255).all() and (low & (x >= 56)).any()
    shifted = apply(x, [Step("TranslateX", 0.1, 3.0)])  # whole pixels: an exact shift
    assert torch.equal(shifted[:, :, 3:], x[:, :, :-3]) and (shifted[:, :, :3] == 128).all()
    grey = image(3, channels=1)  # greyscale images take every op
    for text in ("rand-m9-mstd0.5-inc1-p1", "original", "trivial"):
        for seed in range(40):
            out = auto_augment(grey, parse_auto_augment(text), generator=g(seed))
            assert out.shape == grey.shape and out.dtype == torch.uint8


@pytest.mark.parametrize("text", ["rand-m9-mstd0.5-inc1", "original", "trivial"])
def test_the_same_generator_gives_the_same_image_and_others_differ(text: str) -> None:
    x, policy = image(4), parse_auto_augment(text)
    state = torch.get_rng_state()
    outs = [auto_augment(x, policy, generator=g(seed)) for seed in range(8)]
    assert torch.equal(torch.get_rng_state(), state)  # the global RNG is not drawn from
    assert all(torch.equal(o, auto_augment(x, policy, generator=g(i))) for i, o in enumerate(outs))
    assert len({o.numpy().tobytes() for o in outs}) >= 4


def test_rand_augment_true_is_still_torchvisions_rand_augment_2_10() -> None:
    """``data.rand_augment=true`` as the code before ``auto_augment`` computed it: a seed drawn
    from the sample's generator seeds torchvision's RandAugment(2, 10) on a forked global RNG."""
    from torchvision.transforms import v2

    from vitkit.data.loader import Augment

    x = torch.stack([image(5), image(6)])  # (2, 3, 32, 32)
    before, gen = [], g(11)
    for im in x:
        seed = int(torch.randint(0, 2**62, (1,), generator=gen))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            before.append(v2.RandAugment(num_ops=2, magnitude=10)(im))
    now = Augment(None, 0, False, False, rand_augment=True).after_crop(x, g(11))
    assert torch.equal(now, torch.stack(before))
    assert not torch.equal(now, x)


def test_batches_draw_auto_augment_from_each_position(tmp_path: Path) -> None:
    """The loader's batches with auto_augment depend on (seed, epoch, batch) only: an epoch
    started at batch 1 serves what the whole epoch serves from there."""
    from vitkit.data import ArrayDataset, Batches, BatchOptions

    images = torch.stack([image(i) for i in range(12)])
    data = ArrayDataset(images, torch.arange(12) % 3, ["a", "b", "c"])
    options = BatchOptions(batch_size=4, train=True, seed=3, auto_augment="trivial", uint8=True)
    loader = Batches(data, options)
    full = [x for x, _ in loader.epoch(0)]
    assert all(
        torch.equal(a, b) for a, b in zip(full[1:], [x for x, _ in loader.epoch(0, 1)], strict=True)
    )
    assert not torch.equal(full[0], images[loader.order(0)[:4]])  # augmented
    with pytest.raises(ConfigError, match=r"'m' in 'rand-m' is not a section"):
        BatchOptions(batch_size=4, train=True, auto_augment="rand-m")


def test_per_sample_batches_are_the_same_however_many_workers_decode(tmp_path: Path) -> None:
    """Images read by index are augmented in the workers from (seed, epoch, index): the batches
    do not depend on the number of workers, and an epoch resumed at batch 1 repeats them."""
    from PIL import Image

    from vitkit.data import Batches, BatchOptions, ImageFolderDataset

    for i in range(6):
        path = tmp_path / "train" / f"c{i % 2}" / f"{i}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(image(i).permute(1, 2, 0).numpy()).save(path)
    data = ImageFolderDataset(tmp_path, "train")
    options = dict(batch_size=2, train=True, seed=1, image_size=24, inception_crop=True)
    options |= dict(auto_augment="rand-m9-mstd0.5-inc1", uint8=True)
    full = [x for x, _ in Batches(data, BatchOptions(**options)).epoch(0)]
    workers = Batches(data, BatchOptions(**options, num_workers=2))
    assert all(
        torch.equal(a, b) for a, b in zip(full, [x for x, _ in workers.epoch(0)], strict=True)
    )
    resumed = [x for x, _ in workers.epoch(0, start=1)]
    assert all(torch.equal(a, b) for a, b in zip(full[1:], resumed, strict=True))
    plain = [
        x for x, _ in Batches(data, BatchOptions(**{**options, "auto_augment": None})).epoch(0)
    ]
    assert not all(torch.equal(a, b) for a, b in zip(full, plain, strict=True))


def test_a_run_with_auto_augment_resumes_exactly(tmp_path: Path) -> None:
    from helpers import stopped_copy
    from vitkit import fit
    from vitkit.recipes import get_recipe
    from vitkit.train.loop import TIMING_KEYS

    run = replace(
        get_recipe("smoke"),
        {
            "data.auto_augment": "rand-m9-mstd0.5-inc1",
            "train.device": "cpu",
            "train.log_every": "1st",
            "train.save_every": "2st",
            "train.keep_last": 4,
            "train.duration": "6st",
        },
    )

    def records(run_dir: Path) -> list[dict]:
        import json

        lines = (run_dir / "metrics.jsonl").read_text().splitlines()
        return [{k: v for k, v in json.loads(x).items() if k not in TIMING_KEYS} for x in lines]

    fit(run, run_dir=tmp_path / "full", progress=False)
    resumed = stopped_copy(tmp_path / "full", tmp_path / "resumed", step=2)
    (resumed / "metrics.jsonl").unlink()
    fit(run, run_dir=resumed, progress=False)
    assert records(resumed) == [r for r in records(tmp_path / "full") if r["step"] > 2]


def _torchvisions(image: torch.Tensor, steps: list[Step]) -> torch.Tensor:
    """``steps`` applied to one image with torchvision's functional ops, as ``apply`` did
    before it took a batch at a time: the reference ``apply_each`` must equal."""
    from torchvision.transforms.v2 import InterpolationMode
    from torchvision.transforms.v2 import functional as F

    bilinear, grey = InterpolationMode.BILINEAR, [128.0]
    enhance = {"Color": F.adjust_saturation, "Contrast": F.adjust_contrast}
    enhance |= {"Brightness": F.adjust_brightness, "Sharpness": F.adjust_sharpness}
    H, W = image.shape[-2:]
    for step in steps:
        op, a = step.op.removesuffix("Increasing").removesuffix("Original"), step.arg
        if a is None:
            image = image if op == "Identity" else getattr(F, op.lower())(image)
        elif op == "Rotate":
            image = F.rotate(image, a, interpolation=bilinear, fill=grey)
        elif op == "Posterize":
            image = F.posterize(image, min(max(int(a), 0), 8))
        elif op == "Solarize":
            image = image if a >= 256 else F.solarize(image, a)
        elif op == "SolarizeAdd":
            brighter = (image.int() + int(a)).clamp(max=255).to(torch.uint8)
            image = torch.where(image < 128, brighter, image)
        elif op in enhance:
            image = enhance[op](image, a)
        elif op in ("ShearX", "ShearY"):
            shear = math.degrees(math.atan(a))
            shear_xy = [shear, 0.0] if op == "ShearX" else [0.0, shear]
            image = F.affine(image, 0.0, [0.0, 0.0], 1.0, shear_xy, bilinear, grey, [0.0, 0.0])
        else:
            pixels = a * (W if "X" in op else H) if op.endswith("Rel") else int(a)
            moved = [pixels, 0.0] if "X" in op else [0.0, pixels]
            image = F.affine(image, 0.0, moved, 1.0, [0.0, 0.0], bilinear, grey)
    return image


@pytest.mark.parametrize(
    "text", ["rand-m9-mstd0.5-inc1-p1", "rand-m9-mstd0.5", "original", "trivial"]
)
@pytest.mark.parametrize("shape", [(3, 32, 32), (1, 28, 28), (3, 20, 36)])
def test_a_batch_at_a_time_is_torchvisions_ops_on_each_image_alone(text, shape) -> None:
    """``apply_each`` groups a batch's images by op, each with its own argument (the affine
    ops one grid sample, the blends their float32 rounding): every image equals torchvision's
    ops on it alone, pixel for pixel, and what ``apply`` gives it alone."""
    from vitkit.data.autoaugment import apply_each, auto_augment_each

    policy, gen = parse_auto_augment(text), g(7)
    images = torch.randint(0, 256, (96, *shape), generator=gen, dtype=torch.uint8)
    plans = [plan(policy, gen) for _ in images]
    batch = apply_each(images, plans)
    for x, steps, y in zip(images, plans, batch, strict=True):
        assert torch.equal(y, _torchvisions(x, steps)), steps
        assert torch.equal(y, apply(x, steps))
    singles = [[step] for steps in plans for step in steps]  # each op alone, on new images
    more = torch.randint(0, 256, (len(singles), *shape), generator=gen, dtype=torch.uint8)
    for x, steps, y in zip(more, singles, apply_each(more, singles), strict=True):
        assert torch.equal(y, _torchvisions(x, steps)), steps
    # the loader's call: the plans drawn image after image from one generator
    each = auto_augment_each(images[:8], policy, generator=g(3))
    one, gen = [], g(3)
    one = [auto_augment(x, policy, generator=gen) for x in images[:8]]
    assert torch.equal(each, torch.stack(one))


def test_large_images_are_taken_a_few_at_a_time_with_the_same_result(monkeypatch) -> None:
    """An op takes at most ``_CHUNK_VALUES`` pixel values at once (a 224-px image alone): the
    batch comes out the same however it is cut."""
    from vitkit.data import autoaugment

    policy = parse_auto_augment("rand-m9-mstd0.5-inc1-p1")
    images = torch.randint(0, 256, (40, 3, 32, 32), generator=g(9), dtype=torch.uint8)
    whole = autoaugment.auto_augment_each(images, policy, generator=g(2))
    monkeypatch.setattr(autoaugment, "_CHUNK_VALUES", 3 * images[0].numel())  # 3 at a time
    assert torch.equal(autoaugment.auto_augment_each(images, policy, generator=g(2)), whole)
    monkeypatch.setattr(autoaugment, "_CHUNK_VALUES", 1)  # one at a time
    assert torch.equal(autoaugment.auto_augment_each(images, policy, generator=g(2)), whole)


def test_empty_batches_and_images_keep_their_shape() -> None:
    from vitkit.data.autoaugment import apply_each

    steps = [Step("Rotate", 9, 27.0), Step("Contrast", 9, 1.81)]
    empty = torch.empty(2, 3, 0, 5, dtype=torch.uint8)
    assert apply_each(empty, [steps, steps[:1]]).shape == (2, 3, 0, 5)
    assert apply_each(torch.empty(0, 3, 4, 4, dtype=torch.uint8), []).shape == (0, 3, 4, 4)
    with pytest.raises(ValueError, match="1 plans for 2 images"):
        apply_each(torch.zeros(2, 3, 4, 4, dtype=torch.uint8), [steps])
