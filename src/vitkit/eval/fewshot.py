"""Few-shot linear evaluation in closed form [P §4.1; big_vision evaluators/fewshot_lsr.py].

The paper solves "a regularized least-squares regression problem that maps the (frozen)
representation of a subset of training images to {-1, 1}^K target vectors" (PAPER.md A5). As
big_vision's evaluator: features are the frozen model's ``pre_logits``; for ``shots`` examples per
class, drawn per seed (nested across shot counts), each dimension is standardised with the
subset's mean and std and a constant bias feature appended; the ridge solution
``W = (XᵀX + λI)⁻¹XᵀY`` (or its dual when N < D), in float64, maps to ``Y = 2 * onehot - 1``,
and a test image's class is the argmax of ``x W``. λ = 2^10, shots (1, 5, 10, 25), 3 seeds.
``sampling``: ``'vitkit'`` (default) or big_vision's draws exactly; ``preprocess``: ``'resize'``
(default, the whole image) or big_vision's ``resize(256)|central_crop(224)`` scaled::

    from vitkit.eval.fewshot import fewshot_model

    result = fewshot_model(model, train_set, test_set, image_size=32)
    result[5]  # 5-shot test accuracy: {"mean": float, "std": float, "per_seed": [float] * 3}
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from ..config import size_hw
from ..config.fewshot import L2, PREPROCESSINGS, SAMPLINGS, SEEDS, SHOTS, Preprocessing, Sampling
from ..data import BatchOptions, subset
from ..data.device import to_input
from ..data.run_data import Images, batches_of
from ..data.transforms import central_crop
from ..errors import ConfigError
from ..model import ResNetClassifier, VisionTransformer
from ..runtime.mode import eval_mode
from .metrics import between_batches, model_device

log = logging.getLogger(__name__)

BIAS_CONSTANT = 100.0  # large, so the bias weight pays almost nothing to the L2 penalty
STD_EPS = 1e-5
# big_vision's few-shot preprocessing, resize(256)|central_crop(224): the crop is 7/8 of the resize
# (vitkit's resize antialiases where big_vision's TF resize does not)
RESIZE_OF_CROP = 256 / 224


@torch.inference_mode()
def _forward_pre_logits(
    model: VisionTransformer | ResNetClassifier,
    images: Tensor,
    device: torch.device,
    autocast: torch.dtype | None,
    crop: tuple[int, int] | None,
) -> Tensor:
    x = to_input(images, device)  # (B, C, H, W)
    if crop is not None:
        x = central_crop(x, crop)  # (B, C, S_h, S_w)
    with torch.autocast(device.type, dtype=autocast, enabled=autocast is not None):
        features = model.intermediates(x)["pre_logits"]  # (B, D)
    return features.float().cpu()


def extract_features(
    model: VisionTransformer | ResNetClassifier,
    batches: Iterable[tuple[Tensor, Tensor]],
    *,
    autocast: torch.dtype | None = None,
    crop: int | tuple[int, int] | None = None,
) -> tuple[Tensor, Tensor]:
    """Frozen ``pre_logits`` features of every image in ``batches`` (float images, labels).

    The model runs in eval mode under ``torch.inference_mode`` and gets its own mode back
    afterwards; ``crop``: the centre window of this size of every image is what it sees. Returns
    float32 features (N, D) and int64 labels (N,), in the batches' order.
    """
    device = model_device(model)
    window = None if crop is None else size_hw(crop)
    features, labels = [], []
    with eval_mode(model):
        for images, y in batches:  # (B, C, H, W), (B,)
            features.append(_forward_pre_logits(model, images, device, autocast, window))
            labels.append(torch.as_tensor(y, dtype=torch.int64).cpu())
    if not features:
        raise ConfigError("no batches to extract features from: the iterable was empty")
    # concatenated outside inference mode, so callers get ordinary tensors
    return torch.cat(features), torch.cat(labels)  # (N, D), (N,)


def _check_labels(labels: Tensor, num_classes: int, what: str) -> None:
    if labels.ndim != 1 or labels.dtype != torch.int64:
        raise ConfigError(
            f"{what} must be an int64 tensor (N,), found {labels.dtype} of shape "
            f"{tuple(labels.shape)}"
        )
    if labels.numel() and (labels.min() < 0 or labels.max() >= num_classes):
        raise ConfigError(
            f"{what} must lie in [0, {num_classes}) for num_classes={num_classes}, found values "
            f"from {int(labels.min())} to {int(labels.max())}"
        )


def _check_positive_int(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name}={value!r} is not valid: expected a positive integer")


def _check_choice(name: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(
            f"{name}={value!r} is not valid: expected one of {', '.join(map(repr, allowed))}"
        )


def fewshot_indices(
    labels: Tensor,
    shots: int,
    seed: int,
    *,
    num_classes: int | None = None,
    sampling: Sampling = "vitkit",
) -> Tensor:
    """Indices of ``shots`` examples of every class, drawn without replacement (int64 (K*shots,)).

    Classes come in order 0, ..., K-1 (K = ``num_classes``, or ``labels.max() + 1``), each class's
    indices (in dataset order) permuted and the first ``shots`` taken: ``sampling='vitkit'`` draws
    the permutations from one ``torch.Generator`` seeded with ``seed``, ``'big_vision'`` from one
    ``np.random.default_rng(seed)``, as big_vision's evaluator does. The same seed gives the same
    indices, and for one seed a smaller ``shots`` gives a prefix of each class's draw. Raises
    ``ValueError`` naming the class when one has fewer than ``shots`` examples (big_vision would
    take them all).
    """
    _check_positive_int("shots", shots)
    _check_choice("sampling", sampling, SAMPLINGS)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"seed={seed!r} is not valid: expected an integer >= 0")
    if num_classes is None:
        num_classes = int(labels.max()) + 1 if labels.numel() else 0
    _check_positive_int("num_classes", num_classes)
    _check_labels(labels, num_classes, "labels")
    # group example indices by class once (stable sort keeps dataset order within a class)
    by_class = torch.argsort(labels, stable=True).split(
        torch.bincount(labels, minlength=num_classes).tolist()
    )  # K x (n_k,)
    for k, members in enumerate(by_class):
        if len(members) < shots:
            raise ConfigError(
                f"class {k} has {len(members)} training examples, fewer than shots={shots}"
            )
    if sampling == "big_vision":  # every class's permutation from the one numpy generator
        rng = np.random.default_rng(seed)
        drawn = [torch.from_numpy(rng.permutation(m.numpy())) for m in by_class]  # K x (n_k,)
    else:
        g = torch.Generator().manual_seed(seed)
        drawn = [m[torch.randperm(len(m), generator=g)] for m in by_class]  # K x (n_k,)
    return torch.cat([d[:shots] for d in drawn])  # (K * shots,)


def solve_ridge(x: Tensor, y: Tensor, l2: float, *, dual: bool | None = None) -> Tensor:
    """The ridge regression weights W (D, C) minimising ``|xW - y|² + l2 |W|²``, in float64.

    Primal ``(xᵀx + λI)⁻¹xᵀy`` or dual ``xᵀ(xxᵀ + λI)⁻¹y``, equal for any λ > 0; ``dual=None``
    takes the smaller system (dual when N < D), as big_vision does.
    """
    if not (math.isfinite(l2) and l2 > 0):  # inf and nan too: no factorisation of them
        raise ConfigError(f"l2={l2!r} is not valid: expected a finite number > 0")
    x, y = x.double(), y.double()  # (N, D), (N, C)
    N, D = x.shape
    if dual is None:
        dual = N < D
    # λ > 0 makes either Gram matrix symmetric positive definite: Cholesky, no explicit inverse
    if dual:
        L = torch.linalg.cholesky(x @ x.T + l2 * torch.eye(N, dtype=x.dtype))  # (N, N)
        return x.T @ torch.cholesky_solve(y, L)  # (D, C)
    L = torch.linalg.cholesky(x.T @ x + l2 * torch.eye(D, dtype=x.dtype))  # (D, D)
    return torch.cholesky_solve(x.T @ y, L)  # (D, C)


def _design(x: Tensor, mean: Tensor, std: Tensor) -> Tensor:
    """Features (M, D) -> standardised features with the constant bias column (M, D + 1)."""
    z = (x.double() - mean) / std  # (M, D)
    return torch.cat([z, z.new_full((len(z), 1), BIAS_CONSTANT)], dim=1)  # (M, D + 1)


@dataclass(frozen=True, eq=False)
class LinearClassifier:
    """A closed-form few-shot classifier: standardise, append the bias feature, project.

    ``mean`` and ``std`` (D,) are the training subset's (``std`` already includes the 1e-5), and
    ``weight`` (D + 1, K) maps standardised features plus the bias feature to class scores; all
    float64.
    """

    mean: Tensor
    std: Tensor
    weight: Tensor

    def scores(self, x: Tensor) -> Tensor:
        """Class scores (M, K), float64, of features (M, D)."""
        return _design(x, self.mean, self.std) @ self.weight  # (M, K)

    def predict(self, x: Tensor) -> Tensor:
        """Predicted labels (M,), int64: the argmax of the scores."""
        return self.scores(x).argmax(dim=1)


def ridge_classifier(
    x: Tensor, labels: Tensor, num_classes: int, l2: float = L2
) -> LinearClassifier:
    """Fit the closed-form least-squares classifier of big_vision's fewshot_lsr to features
    ``x`` (N, D) with int64 ``labels`` (N,): targets 2·onehot - 1, ridge strength ``l2``."""
    if x.ndim != 2 or len(x) == 0:
        raise ConfigError(f"x must be a non-empty (N, D) tensor, found shape {tuple(x.shape)}")
    if labels.shape != x.shape[:1]:
        raise ConfigError(
            f"labels must have shape ({len(x)},) to match x, found {tuple(labels.shape)}"
        )
    _check_positive_int("num_classes", num_classes)
    _check_labels(labels, num_classes, "labels")
    x = x.double()  # (N, D)
    mean = x.mean(dim=0)  # (D,)
    std = x.std(dim=0, correction=0) + STD_EPS  # (D,), population std as jnp.std
    y = 2.0 * F.one_hot(labels, num_classes).double() - 1.0  # (N, K) in {-1, 1}
    weight = solve_ridge(_design(x, mean, std), y, l2)  # (D + 1, K)
    return LinearClassifier(mean=mean, std=std, weight=weight)


def _check_shots_seeds(shots: Sequence[int], seeds: int) -> None:
    if not shots:
        raise ConfigError("shots must name at least one shot count, found none")
    for k in shots:
        _check_positive_int("shots", k)
    if len(set(shots)) != len(shots):
        raise ConfigError(f"shots={tuple(shots)} repeats a shot count")
    _check_positive_int("seeds", seeds)


def _subsets(
    labels: Tensor, shots: Sequence[int], seeds: int, num_classes: int, sampling: Sampling
) -> dict[tuple[int, int], Tensor]:
    """{(shots, seed): training indices} for every shot count and seed."""
    return {
        (k, s): fewshot_indices(labels, k, s, num_classes=num_classes, sampling=sampling)
        for k in shots
        for s in range(seeds)
    }


def _accuracies(
    train_x: Tensor,
    train_y: Tensor,
    subsets: dict[tuple[int, int], Tensor],
    test_x: Tensor,
    test_y: Tensor,
    num_classes: int,
    l2: float,
) -> dict[int, dict]:
    """Fit one classifier per subset (rows of ``train_x``) and summarise test accuracy per shots."""
    per_shots: dict[int, list[float]] = {}
    for (k, _), rows in subsets.items():
        clf = ridge_classifier(train_x[rows], train_y[rows], num_classes, l2)
        accuracy = (clf.predict(test_x) == test_y).double().mean().item()
        per_shots.setdefault(k, []).append(accuracy)
    result = {}
    for k, accs in per_shots.items():
        mean = sum(accs) / len(accs)
        std = math.sqrt(sum((a - mean) ** 2 for a in accs) / len(accs))  # population: 0 for 1 seed
        result[k] = {"mean": mean, "std": std, "per_seed": accs}
    return result


def fewshot_evaluate(
    train_x: Tensor,
    train_y: Tensor,
    test_x: Tensor,
    test_y: Tensor,
    *,
    num_classes: int,
    shots: Sequence[int] = SHOTS,
    seeds: int = SEEDS,
    l2: float = L2,
    sampling: Sampling = "vitkit",
) -> dict[int, dict]:
    """Few-shot linear accuracy from precomputed features.

    For every shot count and seed s in ``range(seeds)``: fit ``ridge_classifier`` on
    ``fewshot_indices(train_y, shots, s, sampling=sampling)`` and measure top-1 accuracy on the
    test features. Returns
    ``{shots: {"mean": float, "std": float, "per_seed": [float, ...]}}`` (std over seeds,
    population).
    """
    _check_shots_seeds(shots, seeds)
    _check_positive_int("num_classes", num_classes)
    for name, x, y in (("train", train_x, train_y), ("test", test_x, test_y)):
        if x.ndim != 2 or y.shape != x.shape[:1]:
            raise ConfigError(
                f"{name} features must be (N, D) with labels (N,), found "
                f"{tuple(x.shape)} and {tuple(y.shape)}"
            )
        _check_labels(y, num_classes, f"{name} labels")
    if train_x.shape[1] != test_x.shape[1]:
        raise ConfigError(
            f"train and test features differ in width: {train_x.shape[1]} and {test_x.shape[1]}"
        )
    subsets = _subsets(train_y, shots, seeds, num_classes, sampling)
    return _accuracies(train_x, train_y, subsets, test_x, test_y, num_classes, l2)


def _dataset_labels(dataset: Any) -> Tensor:
    labels = getattr(dataset, "labels", None)
    if isinstance(labels, Tensor):
        return labels.to(torch.int64)
    return torch.tensor([dataset[i][1] for i in range(len(dataset))], dtype=torch.int64)


def _num_classes(train_set: Any, labels: Tensor) -> int:
    classes = getattr(train_set, "classes", None)
    return len(classes) if classes else int(labels.max()) + 1


def big_vision_sizes(
    image_size: int | tuple[int, int],
) -> tuple[tuple[int, int], tuple[int, int]]:
    """big_vision's few-shot preprocessing at a model's resolution: the (height, width) an image
    is resized to, and the centre window then taken ((256, 256) and (224, 224) at 224)."""
    h, w = size_hw(image_size)
    return (round(h * RESIZE_OF_CROP), round(w * RESIZE_OF_CROP)), (h, w)


def check_shots(train_set: Any, shots: Sequence[int]) -> None:
    """Fail now, with the error ``fewshot_model`` would give later, if some class of
    ``train_set`` has fewer than ``max(shots)`` examples (a training run checks before it starts)."""
    labels = _dataset_labels(train_set)
    fewshot_indices(labels, max(shots), 0, num_classes=_num_classes(train_set, labels))


def fewshot_model(
    model: VisionTransformer | ResNetClassifier,
    train_set: Images,
    test_set: Images,
    *,
    shots: Sequence[int] = SHOTS,
    seeds: int = SEEDS,
    l2: float = L2,
    image_size: int | tuple[int, int] | None,
    batch_size: int = 256,
    autocast: torch.dtype | None = None,
    num_workers: int = 0,
    sampling: Sampling = "vitkit",
    preprocess: Preprocessing = "resize",
    between: Callable[[], None] | None = None,
) -> dict[int, dict]:
    """Few-shot linear accuracy of ``model``'s frozen features, as ``fewshot_evaluate``.

    Only the training examples some subset uses are run through the model (at most
    ``num_classes * max(shots) * seeds`` of them), and the whole test set, each image once. The
    result equals extracting every training feature and calling ``fewshot_evaluate``.
    ``num_classes`` is ``len(train_set.classes)`` (or the largest label + 1 for a dataset without
    ``classes``). ``preprocess='resize'``: images resized to ``image_size`` (None: an array's own
    size); ``'big_vision'``: resized to ``image_size``·8/7, then its centre ``image_size``
    (``big_vision_sizes``). Images are read by ``num_workers`` processes, in page-locked memory
    for a GPU, and scaled (and cropped) on the model's device; ``autocast``: a dtype to compute
    the features in; ``between``: called between two batches (``between_batches``).
    """
    _check_shots_seeds(shots, seeds)
    _check_choice("sampling", sampling, SAMPLINGS)
    _check_choice("preprocess", preprocess, PREPROCESSINGS)
    crop = None
    if preprocess == "big_vision":
        if image_size is None:
            raise ConfigError("preprocess='big_vision' crops to the model's image_size: give it")
        image_size, crop = big_vision_sizes(image_size)
    labels = _dataset_labels(train_set)  # (N,)
    if not len(labels):
        raise ConfigError("the training set is empty: few-shot evaluation needs labelled examples")
    num_classes = _num_classes(train_set, labels)
    subsets = _subsets(labels, shots, seeds, num_classes, sampling)
    used = torch.cat(list(subsets.values())).unique()  # (M,) sorted dataset indices
    log.info("few-shot: features of %d of %d training examples", len(used), len(labels))

    options = BatchOptions(
        batch_size=batch_size,
        train=False,
        image_size=image_size,
        uint8=True,
        num_workers=num_workers,
        pin_memory=model_device(model).type == "cuda",
    )

    def features(dataset: Images) -> tuple[Tensor, Tensor]:
        batches = between_batches(batches_of(dataset, options).epoch(0), between)
        return extract_features(model, batches, autocast=autocast, crop=crop)

    train_x, train_y = features(subset(train_set, used))  # (M, D), (M,)
    assert torch.equal(train_y, labels[used]), "the subset's labels disagree with the dataset's"
    test_x, test_y = features(test_set)  # (T, D), (T,)
    _check_labels(test_y, num_classes, "test labels")
    # row of dataset index i in train_x is searchsorted(used, i): re-index every subset
    rows = {key: torch.searchsorted(used, idx) for key, idx in subsets.items()}
    return _accuracies(train_x, train_y, rows, test_x, test_y, num_classes, l2)
