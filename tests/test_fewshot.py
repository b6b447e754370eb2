"""Few-shot linear evaluation (PAPER.md A5): the closed-form ridge solution against a direct
least-squares solve and against a numpy re-statement of big_vision's ``fewshot_lsr``, the
per-class sampling (ours and big_vision's), accuracy on easy and impossible problems, and the
feature extraction from a model (with big_vision's resize and central crop)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import Tensor

from helpers import randomize, tiny
from vitkit.data import Batches, BatchOptions, synthetic
from vitkit.data.transforms import resize
from vitkit.eval.fewshot import (
    big_vision_sizes,
    extract_features,
    fewshot_evaluate,
    fewshot_indices,
    fewshot_model,
    ridge_classifier,
    solve_ridge,
)
from vitkit.model import VisionTransformer

L2 = 2.0**10


def reference_weight(x: Tensor, labels: Tensor, num_classes: int, l2: float) -> Tensor:
    """Ridge weights as an ordinary least-squares problem: [X; √λ I] W ≈ [Y; 0], in float64."""
    x = x.double()
    X = (x - x.mean(0)) / (x.std(0, correction=0) + 1e-5)  # (N, D)
    X = torch.cat([X, torch.full((len(X), 1), 100.0, dtype=X.dtype)], dim=1)  # (N, D + 1)
    Y = 2.0 * F.one_hot(labels, num_classes).double() - 1.0  # (N, K)
    A = torch.cat([X, math.sqrt(l2) * torch.eye(X.shape[1], dtype=X.dtype)])  # (N + D + 1, D + 1)
    B = torch.cat([Y, torch.zeros(X.shape[1], num_classes, dtype=Y.dtype)])  # (N + D + 1, K)
    return torch.linalg.lstsq(A, B, driver="gelsd").solution  # (D + 1, K)


@pytest.mark.parametrize(("n", "d"), [(80, 12), (7, 40)], ids=["primal N>=D", "dual N<D"])
@pytest.mark.parametrize("l2", [L2, 0.5])
def test_ridge_equals_least_squares(n: int, d: int, l2: float) -> None:
    g = torch.Generator().manual_seed(0)
    x = 3.0 * torch.randn(n, d, generator=g) + torch.randn(d, generator=g)  # unstandardised
    labels = torch.randint(0, 4, (n,), generator=g)
    clf = ridge_classifier(x, labels, 4, l2)
    expected = reference_weight(x, labels, 4, l2)
    assert clf.weight.dtype == torch.float64
    assert clf.weight.shape == (d + 1, 4)
    torch.testing.assert_close(clf.weight, expected, rtol=1e-8, atol=1e-10)
    # scores are the design matrix times W; predictions their argmax
    z = torch.randn(5, d, generator=g)
    X = torch.cat([(z.double() - clf.mean) / clf.std, torch.full((5, 1), 100.0)], dim=1)
    torch.testing.assert_close(clf.scores(z), X.double() @ expected, rtol=1e-8, atol=1e-9)
    assert torch.equal(clf.predict(z), (X.double() @ expected).argmax(1))


@pytest.mark.parametrize(("n", "d"), [(30, 10), (10, 30), (16, 16)])
def test_primal_and_dual_agree(n: int, d: int, monkeypatch: pytest.MonkeyPatch) -> None:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, d, generator=g, dtype=torch.float64)
    y = torch.randn(n, 3, generator=g, dtype=torch.float64)
    for l2 in (1e-2, 1.0, L2):
        primal = solve_ridge(x, y, l2, dual=False)
        dual = solve_ridge(x, y, l2, dual=True)
        torch.testing.assert_close(primal, dual, rtol=1e-9, atol=1e-12)
        torch.testing.assert_close(solve_ridge(x, y, l2), primal, rtol=1e-9, atol=1e-12)
    # left to itself it factorises the smaller Gram matrix: N x N when N < D, else D x D
    factorised = []
    cholesky = torch.linalg.cholesky
    monkeypatch.setattr(
        torch.linalg, "cholesky", lambda a: factorised.append(a.shape) or cholesky(a)
    )
    solve_ridge(x, y, L2)
    assert factorised == [(min(n, d), min(n, d))]


def test_ridge_rejects_bad_input() -> None:
    x = torch.randn(6, 3)
    with pytest.raises(ValueError, match="l2"):
        ridge_classifier(x, torch.zeros(6, dtype=torch.int64), 2, l2=0.0)
    with pytest.raises(ValueError, match=r"\[0, 2\)"):
        ridge_classifier(x, torch.full((6,), 2), 2)
    with pytest.raises(ValueError, match=r"shape \(6,\)"):
        ridge_classifier(x, torch.zeros(5, dtype=torch.int64), 2)


# class sizes 10, 7, 5, 12, interleaved
LABELS = torch.tensor([0] * 10 + [1] * 7 + [2] * 5 + [3] * 12)[
    torch.randperm(34, generator=torch.Generator().manual_seed(0))
]


def test_fewshot_indices_draw_shots_per_class() -> None:
    idx = fewshot_indices(LABELS, 5, seed=0)
    assert idx.dtype == torch.int64 and idx.shape == (20,)
    assert len(set(idx.tolist())) == 20  # no duplicates
    assert torch.bincount(LABELS[idx], minlength=4).tolist() == [5, 5, 5, 5]
    assert LABELS[idx].tolist() == sorted(LABELS[idx].tolist())  # grouped by class, in order


def test_fewshot_indices_are_seeded() -> None:
    assert torch.equal(fewshot_indices(LABELS, 4, seed=3), fewshot_indices(LABELS, 4, seed=3))
    draws = {tuple(fewshot_indices(LABELS, 4, seed=s).tolist()) for s in range(5)}
    assert len(draws) == 5
    # one seed's subsets are nested across shot counts, as big_vision's
    small, large = fewshot_indices(LABELS, 2, seed=1), fewshot_indices(LABELS, 5, seed=1)
    assert torch.equal(small, large.reshape(4, 5)[:, :2].flatten())


def test_fewshot_indices_errors() -> None:
    with pytest.raises(ValueError, match="class 2 has 5 training examples, fewer than shots=6"):
        fewshot_indices(LABELS, 6, seed=0)
    with pytest.raises(ValueError, match="class 4 has 0"):
        fewshot_indices(LABELS, 1, seed=0, num_classes=5)
    with pytest.raises(ValueError, match="shots"):
        fewshot_indices(LABELS, 0, seed=0)


def clusters(
    num_classes: int, per_class: int, dim: int, g: torch.Generator, spread: float
) -> tuple[Tensor, Tensor]:
    centres = spread * torch.randn(num_classes, dim, generator=g)  # (K, D)
    labels = torch.arange(num_classes).repeat(per_class)  # (N,)
    x = centres[labels] + torch.randn(len(labels), dim, generator=g)  # (N, D)
    return x, labels


def test_accuracy_on_separated_clusters_and_random_labels() -> None:
    g = torch.Generator().manual_seed(0)
    K = 5
    centres_x, centres_y = clusters(K, 60, 32, g, spread=4.0)
    train_x, train_y, test_x, test_y = (
        centres_x[:150],
        centres_y[:150],
        centres_x[150:],
        centres_y[150:],
    )
    result = fewshot_evaluate(
        train_x, train_y, test_x, test_y, num_classes=K, shots=(1, 5, 10), seeds=3
    )
    assert list(result) == [1, 5, 10]
    for r in result.values():
        assert len(r["per_seed"]) == 3
        assert r["mean"] == pytest.approx(sum(r["per_seed"]) / 3)
        assert r["std"] == pytest.approx(torch.tensor(r["per_seed"]).std(correction=0).item())
    assert result[1]["mean"] > 0.9
    assert result[5]["mean"] > 0.98 and result[10]["mean"] > 0.98

    # labels independent of the features: chance accuracy, 1/K
    noise_x = torch.randn(2000, 32, generator=g)
    noise_y = torch.randint(0, K, (2000,), generator=g)
    chance = fewshot_evaluate(
        noise_x[:500], noise_y[:500], noise_x[500:], noise_y[500:], num_classes=K, shots=(10, 25)
    )
    for r in chance.values():
        assert abs(r["mean"] - 1 / K) < 0.06


def test_fewshot_evaluate_rejects_bad_input() -> None:
    x, y = torch.randn(20, 4), torch.arange(20) % 2
    with pytest.raises(ValueError, match="repeats"):
        fewshot_evaluate(x, y, x, y, num_classes=2, shots=(1, 1))
    with pytest.raises(ValueError, match="seeds"):
        fewshot_evaluate(x, y, x, y, num_classes=2, shots=(1,), seeds=0)
    with pytest.raises(ValueError, match="width"):
        fewshot_evaluate(x, y, x[:, :3], y, num_classes=2, shots=(1,))


@pytest.mark.parametrize("representation_size", [None, 16], ids=["pooled", "tanh-repr"])
def test_features_are_pre_logits(representation_size: int | None) -> None:
    model = randomize(
        VisionTransformer(tiny(num_classes=3, representation_size=representation_size))
    )
    model.train()
    data = synthetic(num_classes=3, per_class=4, image_size=32, channels=3, seed=0)
    batches = Batches(data, BatchOptions(batch_size=5, train=False))
    features, labels = extract_features(model, batches.epoch(0))
    assert model.training  # its mode given back
    assert features.dtype == torch.float32 and labels.dtype == torch.int64
    assert features.shape == (12, representation_size or 64) and not features.requires_grad
    assert torch.equal(labels, data.labels)
    model.eval()
    with torch.no_grad():
        images = torch.cat([images for images, _ in batches.epoch(0)])
        expected = model.forward_head(model.forward_features(images), pre_logits=True)
    torch.testing.assert_close(features, expected, rtol=1e-5, atol=1e-6)


class Plain:
    """A dataset with only ``len`` and indexing: no ``labels``, ``classes`` or ``subset``."""

    def __init__(self, data) -> None:
        self.data = data

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> tuple[Tensor, int]:
        return self.data[index]


@pytest.mark.parametrize("wrap", [False, True], ids=["ArrayDataset", "plain"])
def test_fewshot_model_equals_full_extraction(wrap: bool) -> None:
    model = randomize(VisionTransformer(tiny(num_classes=3)))
    data = synthetic(num_classes=3, per_class=16, image_size=32, channels=3, seed=0)
    train, test = data.subset(torch.arange(36)), data.subset(torch.arange(36, 48))
    seen = []
    model.patch_embed.register_forward_hook(lambda m, args, out: seen.append(len(args[0])))
    result = fewshot_model(
        model,
        Plain(train) if wrap else train,
        Plain(test) if wrap else test,
        shots=(1, 5),
        seeds=2,
        l2=L2,
        image_size=32,
        batch_size=8,
    )
    # only the examples the subsets use went through the model: at most 3 classes x 5 x 2 seeds
    assert sum(seen) - len(test) <= 30 < len(train)

    def every_feature(dataset) -> tuple[Tensor, Tensor]:
        return extract_features(
            model, Batches(dataset, BatchOptions(batch_size=7, train=False)).epoch(0)
        )

    (train_x, train_y), (test_x, test_y) = every_feature(train), every_feature(test)
    expected = fewshot_evaluate(
        train_x, train_y, test_x, test_y, num_classes=3, shots=(1, 5), seeds=2, l2=L2
    )
    assert result == expected
    assert set(result) == {1, 5} and len(result[5]["per_seed"]) == 2


# ---- big_vision's evaluator (big_vision/evaluators/fewshot_lsr.py), re-stated in numpy


def big_vision_draw(labels: np.ndarray, num_classes: int, shots: int, seed: int) -> np.ndarray:
    """big_vision's subset: one ``default_rng(seed)``, each class's positions permuted in turn,
    the first ``shots`` of each."""
    rng = np.random.default_rng(seed)
    per_class = [rng.permutation(np.where(labels == k)[0]) for k in range(num_classes)]
    return np.concatenate([p[:shots] for p in per_class])


def big_vision_lsr(
    x: np.ndarray, y: np.ndarray, num_classes: int, l2: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """big_vision's cache and solve in float64: whiten with the subset's mean and std (+1e-5),
    append the constant 100, targets 2·onehot - 1, eigendecomposition of the smaller Gram matrix,
    then W = lhs diag(1 / (eigs + l2)) rhs. Returns (W (D + 1, K), mean, std)."""
    mean = x.mean(axis=0, keepdims=True)
    std = x.std(axis=0, keepdims=True) + 1e-5
    z = np.pad((x - mean) / std, ((0, 0), (0, 1)), constant_values=100.0)  # (N, D + 1)
    t = 2.0 * np.eye(num_classes)[y] - 1.0  # (N, K)
    n, d = z.shape
    if n >= d:
        eigs, q = np.linalg.eigh(z.T @ z)
        rhs, lhs = q.T @ (z.T @ t), q
    else:
        eigs, q = np.linalg.eigh(z @ z.T)
        rhs, lhs = q.T @ t, z.T @ q
    return (lhs * (1.0 / (eigs + l2))[None]) @ rhs, mean, std


def big_vision_accuracy(
    train_x: np.ndarray,
    train_y: np.ndarray,
    test_x: np.ndarray,
    test_y: np.ndarray,
    *,
    num_classes: int,
    l2: float,
) -> float:
    w, mean, std = big_vision_lsr(train_x, train_y, num_classes, l2)
    z = np.pad((test_x - mean) / std, ((0, 0), (0, 1)), constant_values=100.0)
    return float(np.mean(np.argmax(z @ w, axis=1) == test_y))


@pytest.mark.parametrize(("n", "d"), [(90, 20), (12, 40)], ids=["primal N>=D", "dual N<D"])
@pytest.mark.parametrize("l2", [2.0**-4, 1.0, 2.0**10, 2.0**16])
def test_ridge_matches_big_vision_fewshot_lsr(n: int, d: int, l2: float) -> None:
    g = torch.Generator().manual_seed(2)
    x = 2.0 * torch.randn(n, d, generator=g) + torch.randn(d, generator=g)  # (N, D)
    labels = torch.arange(n) % 6  # (N,)
    clf = ridge_classifier(x, labels, 6, l2)
    w, mean, std = big_vision_lsr(x.double().numpy(), labels.numpy(), 6, l2)
    np.testing.assert_allclose(clf.weight.numpy(), w, rtol=1e-6, atol=1e-6 * np.abs(w).max())
    np.testing.assert_allclose(clf.mean.numpy(), mean[0], rtol=1e-12)
    np.testing.assert_allclose(clf.std.numpy(), std[0], rtol=1e-12)


def test_big_vision_sampling_is_its_draws() -> None:
    labels = LABELS.numpy()
    for seed in range(4):
        for shots in (1, 3, 5):
            ours = fewshot_indices(LABELS, shots, seed, sampling="big_vision")
            assert ours.tolist() == big_vision_draw(labels, 4, shots, seed).tolist()
    # the two samplings are different draws; ours stays what runs recorded: one torch generator,
    # each class's members permuted in turn
    vitkit = fewshot_indices(LABELS, 5, 1)
    assert not torch.equal(vitkit, fewshot_indices(LABELS, 5, 1, sampling="big_vision"))
    g = torch.Generator().manual_seed(1)
    members = [LABELS.eq(k).nonzero().flatten() for k in range(4)]
    expected = torch.cat([m[torch.randperm(len(m), generator=g)][:5] for m in members])
    assert torch.equal(vitkit, expected)
    with pytest.raises(ValueError, match="sampling='numpy' is not valid"):
        fewshot_indices(LABELS, 1, 0, sampling="numpy")  # type: ignore[arg-type]


def test_fewshot_evaluate_with_big_vision_sampling_is_its_evaluator() -> None:
    """Per seed and shot count, the accuracy big_vision's ``compute_fewshot_metrics`` gives."""
    g = torch.Generator().manual_seed(3)
    K = 4
    x, y = clusters(K, 30, 24, g, spread=1.0)  # overlapping: accuracies well below 1
    train_x, train_y, test_x, test_y = x[:80], y[:80], x[80:], y[80:]
    result = fewshot_evaluate(
        train_x,
        train_y,
        test_x,
        test_y,
        num_classes=K,
        shots=(1, 5, 10),
        seeds=3,
        sampling="big_vision",
    )
    tx, ty = train_x.double().numpy(), train_y.numpy()
    for shots, r in result.items():
        expected = []
        for seed in range(3):
            rows = big_vision_draw(ty, K, shots, seed)
            expected.append(
                big_vision_accuracy(
                    tx[rows],
                    ty[rows],
                    test_x.double().numpy(),
                    test_y.numpy(),
                    num_classes=K,
                    l2=L2,
                )
            )
        assert r["per_seed"] == expected
    assert 0.3 < result[10]["mean"] < 1.0


def test_big_vision_preprocessing_resizes_then_crops_the_centre(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import vitkit.eval.fewshot as fewshot

    assert big_vision_sizes(224) == ((256, 256), (224, 224))
    assert big_vision_sizes((32, 48)) == ((37, 55), (32, 48))
    model = randomize(VisionTransformer(tiny(num_classes=3)))
    data = synthetic(num_classes=3, per_class=8, image_size=(40, 50), channels=3, seed=0)
    train, test = data.subset(torch.arange(15)), data.subset(torch.arange(15, 24))
    seen: list[Tensor] = []  # the features fewshot_model extracts: training subset, then test

    def extract(*args, **kwargs) -> tuple[Tensor, Tensor]:
        features = extract_features(*args, **kwargs)
        seen.append(features[0])
        return features

    monkeypatch.setattr(fewshot, "extract_features", extract)
    result = fewshot_model(
        model,
        train,
        test,
        shots=(1, 4),
        seeds=2,
        image_size=32,
        batch_size=8,
        sampling="big_vision",
        preprocess="big_vision",
    )

    def by_hand(dataset) -> tuple[Tensor, Tensor]:
        images = resize(dataset.images, 37)[..., 2:34, 2:34]  # (37 - 32) // 2 = 2
        batches = [(images.float().sub(127.5).div(127.5), dataset.labels)]
        return extract_features(model, batches)

    (train_x, train_y), (test_x, test_y) = by_hand(train), by_hand(test)
    torch.testing.assert_close(seen[-1], test_x)
    expected = fewshot_evaluate(
        train_x,
        train_y,
        test_x,
        test_y,
        num_classes=3,
        shots=(1, 4),
        seeds=2,
        sampling="big_vision",
    )
    for k in (1, 4):
        assert result[k]["per_seed"] == pytest.approx(expected[k]["per_seed"])
    plain = fewshot_model(model, train, test, shots=(4,), seeds=2, image_size=32, batch_size=8)
    assert set(plain) == {4}
    with pytest.raises(ValueError, match="preprocess='crop' is not valid"):
        fewshot_model(model, train, test, image_size=32, preprocess="crop")  # type: ignore[arg-type]
