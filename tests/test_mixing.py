"""Mixup, CutMix and random erasing: CutMix's box, the mixed images and the loss equal timm's
``Mixup`` (batch mode, label smoothing) on the same draws; the switch and the probability are
honoured; random erasing has its definition's distribution; mixup alone draws as before; a run
with all of them resumes exactly; the keys exist, parse and are refused with mpp."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from timm.data.mixup import Mixup, cutmix_bbox_and_lam
from timm.loss import SoftTargetCrossEntropy

from helpers import logged_metrics, stopped_copy
from vitkit import fit
from vitkit.config import ConfigError, replace
from vitkit.recipes import get_recipe
from vitkit.train import objectives
from vitkit.train.erasing import erase_mask, random_erase
from vitkit.train.mixing import Mix, Mixing, cutmix_box, draw, mix_images
from vitkit.train.objectives import classification


def _centre(seed: int, height: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The box centre timm's ``rand_bbox`` draws after ``np.random.seed(seed)``."""
    np.random.seed(seed)
    return torch.tensor(np.random.randint(0, height)), torch.tensor(np.random.randint(0, width))


@pytest.mark.parametrize("shape", [(16, 16), (7, 12)])
def test_cutmix_box_and_corrected_lambda_equal_timms(shape: tuple[int, int]) -> None:
    H, W = shape
    lams = [0.0, 1.0, 0.5, 1 - 1 / 16, 0.75, *np.random.default_rng(0).random(60)]
    for seed, lam in enumerate(lams):
        np.random.seed(seed)
        box, lam_timm = cutmix_bbox_and_lam((2, 3, H, W), float(lam))
        cy, cx = _centre(seed, H, W)
        ours, lam_ours = cutmix_box(torch.tensor(float(lam), dtype=torch.float64), cy, cx, H, W)
        assert ours.tolist() == [int(v) for v in box], (lam, seed)
        assert lam_ours.item() == lam_timm


class _Linear(torch.nn.Module):
    def __init__(self, inputs: int, classes: int) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = torch.nn.Linear(inputs, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x.flatten(1))


@pytest.mark.parametrize("cut", [False, True])
@pytest.mark.parametrize("lam", [0.3, 0.83])
def test_mixed_images_and_loss_equal_timms(cut: bool, lam: float, monkeypatch) -> None:
    """timm's ``Mixup`` (its draws fixed: λ, the switch, numpy's seed for the box) and vitkit's
    classification given the same draws (partner = timm's flipped batch): the same images, and a
    loss equal to ``SoftTargetCrossEntropy`` of timm's smoothed, mixed targets."""
    B, C, H, W, K, smoothing = 6, 3, 9, 10, 5, 0.1
    g = torch.Generator().manual_seed(1)
    images = torch.rand(B, C, H, W, generator=g) * 2 - 1
    labels = torch.randint(K, (B,), generator=g)
    mixer = Mixup(mixup_alpha=0.8, cutmix_alpha=1.0, label_smoothing=smoothing, num_classes=K)
    monkeypatch.setattr(mixer, "_params_per_batch", lambda: (lam, cut))
    np.random.seed(7)
    mixed_timm, targets = mixer(images.clone(), labels)

    cy, cx = _centre(7, H, W)
    box, corrected = cutmix_box(torch.tensor(lam, dtype=torch.float64), cy, cx, H, W)
    mix = Mix(
        lam=corrected.float() if cut else torch.tensor(lam),
        perm=torch.arange(B - 1, -1, -1),  # timm pairs each image with the flipped batch's
        cutmix=torch.tensor(cut),
        box=box,
    )
    mixed = mix_images(images, mix)
    torch.testing.assert_close(mixed, mixed_timm, rtol=0, atol=0 if cut else 1e-6)
    if cut:
        assert not torch.equal(mixed, images)

    model = _Linear(C * H * W, K)
    monkeypatch.setattr(objectives, "draw", lambda *args: mix)
    out = classification(
        model, images, labels, label_smoothing=smoothing, mixing=Mixing(mixup=0.8, cutmix=1.0)
    )
    expected = SoftTargetCrossEntropy()(model(mixed_timm), targets)
    torch.testing.assert_close(out["loss"], expected, rtol=1e-6, atol=1e-6)


def _binomial_ok(hits: int, n: int, p: float) -> bool:
    return abs(hits / n - p) < 4 * math.sqrt(p * (1 - p) / n)  # 4 std: fails once in 16,000


def test_the_switch_and_the_probability_are_honoured() -> None:
    torch.manual_seed(0)
    n, device = 2000, torch.device("cpu")
    both = Mixing(mixup=0.8, cutmix=1.0, switch_prob=0.3)
    draws = [draw(both, 2, 32, 32, device) for _ in range(n)]
    assert _binomial_ok(sum(bool(d.cutmix) for d in draws), n, 0.3)
    some = Mixing(mixup=1.0, prob=0.7)
    mixed = sum(bool(draw(some, 2, 8, 8, device).lam < 1) for _ in range(n))
    assert _binomial_ok(mixed, n, 0.7)


def test_cutmix_pastes_a_box_whose_share_is_the_targets_weight() -> None:
    """CutMix alone: each mixed image is, pixel by pixel, itself or its partner (no blending),
    its partner's pixels a box shared by the batch, and 1 - their share is λ."""
    torch.manual_seed(3)
    B, H, W = 8, 12, 12
    images = torch.arange(B, dtype=torch.float32)[:, None, None, None].expand(B, 2, H, W)
    pasted_any = False
    for _ in range(20):
        mix = draw(Mixing(cutmix=1.0), B, H, W, torch.device("cpu"))
        mixed = mix_images(images, mix)
        own, other = mixed == images, mixed == images[mix.perm]
        assert bool((own | other).all())
        paired = mix.perm != torch.arange(B)  # an image paired with itself shows no box
        partner = (other & ~own)[paired]  # (B', C, H, W): where the partner shows
        box = partner[0, 0]
        assert bool((partner == box).all())  # one box, the same in every image and channel
        if box.any():
            pasted_any = True
            assert int(box.sum()) == int(box.any(1).sum()) * int(box.any(0).sum())  # a rectangle
        assert mix.lam.item() == pytest.approx(1 - box.float().mean().item())
    assert pasted_any


def test_mixup_alone_draws_what_it_drew_before() -> None:
    """``train.mixup`` without CutMix: the draws and images of vitkit before CutMix, bit for bit
    (so the runs written then resume exactly)."""
    images = torch.rand(8, 3, 4, 4, generator=torch.Generator().manual_seed(0))
    torch.manual_seed(5)
    alpha = torch.full((), 0.2)
    lam = torch.distributions.Beta(alpha, alpha, validate_args=False).sample()
    perm = torch.randperm(8)
    before = lam * images + (1 - lam) * images[perm]
    after_draws = torch.rand(3)
    torch.manual_seed(5)
    mix = draw(Mixing(mixup=0.2), 8, 4, 4, torch.device("cpu"))
    assert torch.equal(mix.lam, lam) and torch.equal(mix.perm, perm) and mix.box is None
    assert torch.equal(mix_images(images, mix), before)
    assert torch.equal(torch.rand(3), after_draws)  # the RNG is where it was


def test_random_erasing_has_its_definitions_distribution() -> None:
    """Per image with probability p: one box of area U(0.02, 1/3) of the image (up to rounding
    to pixels) and aspect h/w in [0.3, 1/0.3], in every channel, filled with N(0, 1) noise; the
    rest untouched."""
    torch.manual_seed(0)
    B, C, H, W, p = 600, 3, 20, 20, 0.6
    images = torch.full((B, C, H, W), 7.0)  # no N(0, 1) draw is 7.0
    erased = random_erase(images, prob=p, max_count=1)
    changed = erased != 7.0  # (B, C, H, W)
    assert torch.equal(erased[~changed], images[~changed])
    mask = changed[:, 0]
    assert bool((changed == mask[:, None]).all())  # every channel erased alike
    hit = mask.flatten(1).any(1)  # (B,)
    assert _binomial_ok(int(hit.sum()), B, p)
    fractions, aspects = [], []
    for m in mask[hit]:
        rows, cols = m.any(1).nonzero(), m.any(0).nonzero()
        h, w = int(rows.max() - rows.min() + 1), int(cols.max() - cols.min() + 1)
        assert h * w == int(m.sum()), "not one rectangle"
        assert h < H and w < W
        # some real h', w' within rounding of h, w have an area and aspect in range
        assert (h + 0.5) * (w + 0.5) >= 0.02 * H * W and (h - 0.5) * (w - 0.5) <= H * W / 3
        assert (h + 0.5) / (w - 0.5) >= 0.3 and (h - 0.5) / (w + 0.5) <= 1 / 0.3
        fractions.append(h * w / (H * W))
        aspects.append(h / w)
    assert min(fractions) < 0.05 and max(fractions) > 0.28  # the whole range is drawn
    assert min(aspects) < 0.5 and max(aspects) > 2
    noise = erased[changed]
    n = noise.numel()
    assert abs(noise.mean().item()) < 5 / math.sqrt(n)
    assert abs(noise.std().item() - 1) < 5 / math.sqrt(2 * n)


def test_random_erasing_counts_and_probability_bounds() -> None:
    torch.manual_seed(1)
    assert not erase_mask(50, 16, 16, prob=0.0).any()
    assert erase_mask(50, 16, 16, prob=1.0).flatten(1).any(1).all()
    # up to 3 boxes: some images get more than one rectangle
    masks = erase_mask(200, 16, 16, prob=1.0, max_count=3)
    not_rectangles = sum(int(m.sum()) != int(m.any(1).sum()) * int(m.any(0).sum()) for m in masks)
    assert not_rectangles > 20


def test_the_keys_exist_and_mpp_refuses_them() -> None:
    smoke = get_recipe("smoke")
    run = replace(
        smoke,
        {
            "train.cutmix": 1.0,
            "train.mixup_switch_prob": 0.25,
            "train.mixup_prob": 0.5,
            "data.random_erase": 0.25,
            "data.random_erase_count": 2,
        },
    )
    assert (run.train.cutmix, run.train.mixup_switch_prob, run.train.mixup_prob) == (1, 0.25, 0.5)
    assert (run.data.random_erase, run.data.random_erase_count) == (0.25, 2)
    assert (smoke.train.cutmix, smoke.train.mixup_switch_prob, smoke.train.mixup_prob) == (
        0,
        0.5,
        1,
    )
    assert (smoke.data.random_erase, smoke.data.random_erase_count) == (0, 1)
    with pytest.raises(ConfigError, match=r"train.mixup_switch_prob.*1\.5"):
        replace(smoke, {"train.mixup_switch_prob": 1.5})
    with pytest.raises(ConfigError, match=r"train\.cutmix"):
        replace(smoke, {"train.objective": "mpp", "train.cutmix": 1.0})
    with pytest.raises(ConfigError, match=r"data\.random_erase"):
        replace(smoke, {"train.objective": "mpp", "data.random_erase": 0.5})


def test_a_run_with_cutmix_and_erasing_resumes_exactly(tmp_path: Path) -> None:
    """Mixup, CutMix (switched, not every batch) and random erasing (up to 2 boxes): a run
    resumed from its step-4 checkpoint logs what the uninterrupted run does; without CutMix, or
    without erasing, a run logs other losses."""
    run = replace(
        get_recipe("smoke"),
        {
            "train.mixup": 0.8,
            "train.cutmix": 1.0,
            "train.mixup_prob": 0.9,
            "data.random_erase": 0.5,
            "data.random_erase_count": 2,
            "train.device": "cpu",
            "train.log_every": "1st",
            "train.save_every": "2st",
            "train.keep_last": 4,
        },
    )
    fit(run, run_dir=tmp_path / "full", progress=False)
    resumed = stopped_copy(tmp_path / "full", tmp_path / "resumed", step=4)
    (resumed / "metrics.jsonl").unlink()
    fit(run, run_dir=resumed, progress=False)
    full = logged_metrics(tmp_path / "full")
    assert logged_metrics(resumed) == [r for r in full if r["step"] > 4]
    # each of CutMix and erasing changes the run: it is wired from its key to the step
    for name, off in [("no_cutmix", "train.cutmix"), ("no_erasing", "data.random_erase")]:
        fit(replace(run, {off: 0.0}), run_dir=tmp_path / name, progress=False)
        other = logged_metrics(tmp_path / name)
        assert [r.get("loss") for r in other] != [r.get("loss") for r in full], off
