"""Training objectives: each returns ``{"loss": ..., **metrics}`` for one batch.

Classification is softmax cross-entropy (the official fine-tuning loss), with optional label
smoothing [P §4.3 tuned it on small datasets], mixup (big_vision's plain-ViT recipe, PAPER.md
A9) and CutMix (DeiT's; both in train/mixing.py). Masked patch prediction is the paper's
self-supervision [P §4.6, App. B.1.2]; its mask embedding and prediction head live in the
objective, not in the model, so the pre-trained backbone is saved and loaded like any other.

Shapes: B batch, C channels, N patches, T tokens, D width, K classes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..config import ModelConfig
from ..data.device import to_input
from ..errors import ConfigError
from ..eval.metrics import Evaluation, model_device
from ..model.vit import VisionTransformer
from ..runtime.mode import eval_mode
from .mixing import Mixing, draw, mix_images

NO_MIXING = Mixing()


def classification(
    model: Callable[[Tensor], Tensor],
    images: Tensor,
    labels: Tensor,
    *,
    label_smoothing: float,
    mixing: Mixing = NO_MIXING,
) -> dict[str, Tensor]:
    """Cross-entropy on ``model(images)``; with ``mixing`` on, the batch is mixed with a shuffled
    copy of itself (mixup or CutMix, train/mixing.py), and so are the targets: the loss mixes the
    two label-smoothed cross-entropies with λ, which is timm's ``SoftTargetCrossEntropy`` of its
    ``mixup_target`` (smoothed one-hot targets mixed with λ), the loss being linear in them."""
    mix = None
    if mixing.on:  # drawn on the device, so that no step waits for the host
        mix = draw(mixing, images.shape[0], images.shape[-2], images.shape[-1], images.device)
        images = mix_images(images, mix)  # (B, C, H, W)
    logits = model(images).float()  # (B, K)
    loss = F.cross_entropy(logits, labels, label_smoothing=label_smoothing)
    if mix is not None:
        loss = mix.lam * loss + (1 - mix.lam) * F.cross_entropy(
            logits, labels[mix.perm], label_smoothing=label_smoothing
        )
    accuracy = (logits.argmax(dim=1) == labels).float().mean()
    return {"loss": loss, "accuracy": accuracy.detach()}


def patch_colours(images: Tensor, patch: int, bits: int = 3) -> Tensor:
    """The masked-patch-prediction target: each patch's mean colour, ``bits`` bits per channel.

    ``images`` (B, C, H, W) in [-1, 1] -> class indices (B, N) in [0, 2**(bits*C)): the mean of each
    channel over the patch, scaled to [0, 1], cut into 2**bits equal levels; the levels are digits
    of one number, first channel most significant (512 colours for RGB at 3 bits, 8 intensities
    for grayscale).
    """
    levels = 2**bits
    mean = F.avg_pool2d((images.float() + 1) / 2, patch)  # (B, C, gh, gw) in [0, 1]
    digits = (mean * levels).floor().clamp_(0, levels - 1).long()
    C = images.shape[1]
    weights = levels ** torch.arange(C - 1, -1, -1, device=images.device)  # (C,)
    return (digits * weights[:, None, None]).sum(dim=1).flatten(1)  # (B, N)


def corrupt(
    tokens: Tensor, mask_token: Tensor, *, rate: float = 0.5
) -> tuple[Tensor, Tensor, Tensor]:
    """BERT-style corruption of patch embeddings [P App. B.1.2].

    In each image exactly ``round(rate * N)`` patches are chosen; of those, 80% become the
    learnable ``mask_token``, 10% the embedding of another patch drawn at random from the batch,
    and 10% stay as they are. Returns the corrupted tokens (B, N, D), the chosen patches (B, N)
    and what became of them (B, N): 0 untouched, 1 masked, 2 replaced, 3 chosen but kept. Draws
    come from the global RNG (saved with checkpoints) in a fixed order.
    """
    B, N, D = tokens.shape
    k = round(rate * N)
    order = torch.rand(B, N, device=tokens.device).argsort(dim=1)
    chosen = torch.zeros(B, N, dtype=torch.bool, device=tokens.device)
    chosen.scatter_(1, order[:, :k], True)
    u = torch.rand(B, N, device=tokens.device)
    masked = chosen & (u < 0.8)
    replaced = chosen & (u >= 0.8) & (u < 0.9)
    # another patch: an offset in [1, B*N) from this one, so never the patch itself
    offset = torch.randint(1, max(B * N, 2), (B, N), device=tokens.device)
    source = (torch.arange(B * N, device=tokens.device).view(B, N) + offset) % (B * N)
    out = torch.where(replaced[..., None], tokens.reshape(B * N, D)[source], tokens)
    out = torch.where(masked[..., None], mask_token.to(out.dtype).expand_as(out), out)
    kind = chosen.long() * 3
    kind[masked], kind[replaced] = 1, 2
    return out, chosen, kind


class MaskedPatchPrediction(nn.Module):
    """Masked patch prediction [P §4.6, App. B.1.2]: corrupt half of the patch embeddings, then
    predict each chosen patch's mean colour (3 bits per channel) from its output token with a
    2**(3*C)-way classifier. Owns the learnable mask embedding and that classifier."""

    def __init__(self, cfg: ModelConfig, *, bits: int = 3, rate: float = 0.5) -> None:
        super().__init__()
        if cfg.arch != "vit" or cfg.resnet is not None:
            raise ConfigError(
                "masked patch prediction needs a plain ViT: a hybrid's ResNet would see the masked "
                "patches' pixels through its neighbours"
            )
        self.patch, self.bits, self.rate = cfg.total_stride, bits, rate
        self.prefix = cfg.num_prefix_tokens
        self.mask_token = nn.Parameter(torch.empty(cfg.hidden_size))
        self.head = nn.Linear(cfg.hidden_size, 2 ** (bits * cfg.in_chans))
        nn.init.normal_(self.mask_token, std=0.02)  # as BERT's embeddings
        nn.init.zeros_(self.head.weight)  # as the ViT's head
        nn.init.zeros_(self.head.bias)

    def forward(self, model: nn.Module, images: Tensor) -> dict[str, Tensor]:
        assert isinstance(model, VisionTransformer)  # a plain ViT, checked in __init__
        targets = patch_colours(images, self.patch, self.bits)  # (B, N)
        tokens = model.embed_patches(images)  # (B, N, D)
        tokens, chosen, _ = corrupt(tokens, self.mask_token, rate=self.rate)
        grid = model.patch_embed.grid(images.shape[-2], images.shape[-1])
        encoded = model.encode(tokens, grid)[:, self.prefix :]  # (B, N, D)
        logits = self.head(encoded[chosen]).float()  # (M, 2**(bits*C)), M chosen patches
        loss = F.cross_entropy(logits, targets[chosen])
        accuracy = (logits.argmax(dim=1) == targets[chosen]).float().mean()
        return {"loss": loss, "accuracy": accuracy.detach(), "patches": chosen.sum()}


class Objective(nn.Module):
    """The model and its training objective as one module: ``forward(images, labels)`` returns the
    objective's ``{"loss": ..., **metrics}``.

    One module holds every trained parameter (the model's, then masked patch prediction's) and one
    call makes the whole training forward pass, which is what a data-parallel wrapper needs: DDP
    averages the gradients of what its module owns, FSDP gathers shards in its forward.
    ``forward_fn`` is the model's forward to classify with (``torch.compile(model)``), by default
    the model itself.
    """

    def __init__(
        self,
        model: nn.Module,
        mpp: MaskedPatchPrediction | None = None,
        *,
        label_smoothing: float = 0.0,
        mixing: Mixing = NO_MIXING,
        forward_fn: Callable[[Tensor], Tensor] | None = None,
    ) -> None:
        super().__init__()
        self.model = model
        self.mpp = mpp
        # a plain attribute, not a submodule: a compiled model is the same parameters once more
        self._classify = partial(
            classification,
            model if forward_fn is None else forward_fn,
            label_smoothing=label_smoothing,
            mixing=mixing,
        )

    def forward(self, images: Tensor, labels: Tensor) -> dict[str, Tensor]:
        if self.mpp is not None:
            return self.mpp(self.model, images)
        return self._classify(images, labels)


@torch.no_grad()
def evaluate_mpp(
    model: nn.Module,
    objective: MaskedPatchPrediction,
    batches: Iterable[tuple[Tensor, Tensor]],
    *,
    seed: int = 0,
    reduce: Callable[[Tensor], Tensor] | None = None,
) -> Evaluation:
    """Mean loss and colour accuracy of the chosen patches over ``batches`` (images, unused
    labels) on ``model``'s device; the corruption is drawn from ``seed`` (the same patches every
    evaluation) without touching the global RNG (nor the GPU's, which draws it on CUDA).
    ``reduce`` sums a tensor over processes when each evaluates its part of the batches (each
    then draws its own corruption)."""
    device = model_device(model)
    loss_sum, hits, count = 0.0, 0.0, 0
    cuda = [device] if device.type == "cuda" else []
    with eval_mode(model), torch.random.fork_rng(devices=cuda):
        torch.manual_seed(seed)
        for images, _ in batches:
            out = objective(model, to_input(images, device))  # (B, C, H, W) in [-1, 1]
            n = int(out["patches"])
            if n:  # a process's empty part of the last batch: its mean loss is NaN
                loss_sum += out["loss"].item() * n
                hits += out["accuracy"].item() * n
                count += n
    if reduce is not None:
        totals = reduce(torch.tensor([loss_sum, hits, count], dtype=torch.float64))
        loss_sum, hits, count = totals[0].item(), totals[1].item(), int(totals[2])
    return Evaluation(loss=loss_sum / max(count, 1), accuracy=hits / max(count, 1), count=count)
