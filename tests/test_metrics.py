"""``vitkit.eval.metrics.evaluate``: its figures against direct computations, with and without
test-time flips, split into batches or summed over (simulated) processes."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from vitkit.eval.metrics import evaluate

K = 6


@pytest.fixture
def data() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(2 * 5 * 7, K))  # not mirror-symmetric
    images, labels = torch.randn(40, 2, 5, 7), torch.randint(0, K, (40,))
    return model, images, labels


def batches(images: torch.Tensor, labels: torch.Tensor, size: int):
    return zip(images.split(size), labels.split(size), strict=True)


def test_figures_match_a_direct_computation(data) -> None:
    model, images, labels = data
    result = evaluate(model, batches(images, labels, 16), K)
    logits = model(images).detach()
    assert result.count == 40
    assert result.loss == pytest.approx(F.cross_entropy(logits, labels).item(), rel=1e-5)
    assert result.accuracy == (logits.argmax(1) == labels).sum().item() / 40
    top5 = (logits.topk(5, 1).indices == labels[:, None]).any(1).float().mean().item()
    assert result.top5 == pytest.approx(top5)
    cells = Counter(zip(labels.tolist(), logits.argmax(1).tolist(), strict=True))
    assert result.confusion == [(t, p, n) for (t, p), n in sorted(cells.items())]
    per_class = [
        sum(n for (t, p), n in cells.items() if t == p == k)
        / max(1, sum(n for (t, _), n in cells.items() if t == k))
        for k in range(K)
    ]
    assert result.per_class == pytest.approx(per_class)
    assert result.per_class_images == [labels.tolist().count(k) for k in range(K)]
    assert result.accuracy_one_view is None


def test_flip_averages_the_probabilities_of_each_image_and_its_mirror(data) -> None:
    model, images, labels = data
    result = evaluate(model, batches(images, labels, 16), K, flip=True)
    with torch.no_grad():
        probs = (model(images).softmax(1) + model(images.flip(-1)).softmax(1)) / 2  # (B, K)
    assert result.accuracy == (probs.argmax(1) == labels).sum().item() / 40
    assert result.loss == pytest.approx(F.nll_loss(probs.log(), labels).item(), rel=1e-5)
    plain = evaluate(model, batches(images, labels, 16), K)
    assert result.accuracy_one_view == plain.accuracy
    assert result.accuracy != plain.accuracy  # this model does see the mirror differently


def test_flip_changes_nothing_for_a_mirror_symmetric_model(data) -> None:
    _, images, labels = data
    model = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2, K))
    flipped = evaluate(model, batches(images, labels, 16), K, flip=True)
    plain = evaluate(model, batches(images, labels, 16), K)
    assert flipped.confusion == plain.confusion
    assert flipped.loss == pytest.approx(plain.loss, rel=1e-5)


def test_reduce_sums_every_figure_over_processes(data) -> None:
    """Two processes holding the same half each add up to the whole evaluated once."""
    model, images, labels = data
    half = evaluate(
        model,
        batches(images[:20], labels[:20], 8),
        K,
        flip=True,
        reduce=lambda t: 2 * t,
        gather=lambda t: torch.cat([t, t]),
    )
    twice = evaluate(
        model,
        batches(torch.cat([images[:20]] * 2), torch.cat([labels[:20]] * 2), 8),
        K,
        flip=True,
    )
    assert half.count == twice.count == 40
    for key in ("accuracy", "accuracy_one_view", "top5", "confusion", "per_class",
                "per_class_images"):  # fmt: skip
        assert getattr(half, key) == getattr(twice, key)
    assert half.loss == pytest.approx(twice.loss, rel=1e-6)


def test_top5_is_left_out_with_five_classes_or_fewer(data) -> None:
    """Every label is in the top 5 of 5 classes: a top-5 of 1.0 there says nothing, so the
    evaluation, metrics.jsonl and the commands leave it out."""
    model, images, labels = data
    many = evaluate(model, batches(images, labels, 16), K)
    assert many.top5 is not None and "top5" in many.scalars()
    five = nn.Sequential(nn.Flatten(), nn.Linear(2 * 5 * 7, 5))
    few = evaluate(five, batches(images, labels % 5, 16), 5)
    assert few.top5 is None and "top5" not in few.scalars() and few.count == 40
