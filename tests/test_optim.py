"""The optimizers and their schedule (train/optim.py): warmup then cosine, weight decay off
biases, norms, position embeddings and the class token, Adam as one fused kernel, EMA as Polyak
averaging with a ramped decay, Muon on the blocks' matrices (resumed from its state, batched as
torch's)."""

from __future__ import annotations

import copy
import math

import pytest
import torch

import vitkit
from helpers import MUON_ROUNDING
from vitkit.config import OptimConfig
from vitkit.recipes import get_recipe
from vitkit.train.optim import learning_rate


def test_schedule_warmup_then_cosine() -> None:
    cfg = OptimConfig(lr=1.0, warmup="10st", schedule="cosine", end_lr=0.0)
    lrs = [learning_rate(s, cfg=cfg, total_steps=110, warmup_steps=10) for s in range(110)]
    assert lrs[0] == pytest.approx(0.1) and lrs[9] == pytest.approx(1.0)
    assert lrs[60] == pytest.approx(0.5 * (1 + math.cos(math.pi * 0.5)))
    assert lrs[-1] < 1e-3
    linear = OptimConfig(lr=1.0, schedule="linear", end_lr=1e-5)
    assert learning_rate(50, cfg=linear, total_steps=100, warmup_steps=0) == pytest.approx(
        0.5 + 0.5e-5
    )


def test_weight_decay_skips_biases_norms_posemb_cls() -> None:
    from vitkit.config import OptimConfig
    from vitkit.train.optim import param_groups, param_settings

    model = vitkit.create_model("ViT-mu/16", image_size=32, num_classes=3)
    cfg = OptimConfig(lr=1e-3, weight_decay=0.1)
    decay, no_decay = param_groups(param_settings(cfg, model), cfg)
    names = {id(p): n for n, p in model.named_parameters()}
    skipped = {names[id(p)] for p in no_decay["params"]}
    assert {"pos_embed", "cls_token", "norm.weight", "head.bias"} <= skipped
    assert all(p.ndim >= 2 for p in decay["params"])  # kernels only: no bias, no norm scale
    assert {n for n, p in model.named_parameters() if p.ndim == 1} <= skipped
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0


def test_adam_is_one_fused_kernel_outside_fsdp() -> None:
    from vitkit.train.optim import build_optimizer

    run = get_recipe("smoke")
    optimizer = build_optimizer(vitkit.create_model(run.model), run.optim)
    assert isinstance(optimizer, torch.optim.AdamW) and optimizer.defaults["fused"] is True


@pytest.mark.parametrize("fixed", [True, False])
def test_ema_is_polyak_averaging_with_the_ramped_decay(fixed: bool) -> None:
    from vitkit.train.parts import Average

    torch.manual_seed(0)
    model = vitkit.create_model(get_recipe("smoke").model)
    ema = vitkit.create_model(get_recipe("smoke").model)
    start = {k: v.clone() for k, v in ema.state_dict().items()}
    average = Average(ema, model, 0.9, fixed=fixed)
    for step, decay in [(0, 0.1), (100, 0.9)]:  # min(0.9, (1 + step) / (10 + step))
        with torch.no_grad():
            for p in model.parameters():
                p.add_(torch.randn_like(p))  # the model moves; the average follows it
        weights = {k: v.clone() for k, v in model.state_dict().items()}
        average.update(step)
        for key, value in ema.state_dict().items():
            expected = decay * start[key] + (1 - decay) * weights[key]
            torch.testing.assert_close(value, expected, rtol=1e-5, atol=1e-6)
        start = {k: v.clone() for k, v in ema.state_dict().items()}


def test_muon_takes_the_blocks_matrices_and_resumes_from_its_state() -> None:
    import torch.nn.functional as F

    from vitkit.config import replace
    from vitkit.train.optim import MuonWithAdamW, build_optimizer, set_learning_rate

    run = replace(get_recipe("smoke"), {"optim.name": "muon", "optim.weight_decay": 0.1})
    g = torch.Generator().manual_seed(1)
    batches = [(torch.randn(8, 3, 16, 16, generator=g), torch.randint(0, 4, (8,), generator=g))]
    batches *= 4

    def fresh():
        torch.manual_seed(0)
        model = vitkit.create_model(run.model).eval()  # no dropout: the steps are deterministic
        return model, build_optimizer(model, run.optim)

    def step(model, optimizer, batch) -> None:
        F.cross_entropy(model(batch[0]), batch[1]).backward()
        optimizer.step()
        optimizer.zero_grad()

    model, optimizer = fresh()
    for batch in batches[:3]:
        step(model, optimizer, batch)
    assert isinstance(optimizer, MuonWithAdamW)
    muon, adamw = optimizer.optimizers
    name = {id(p): n for n, p in model.named_parameters()}
    in_muon = {name[id(p)] for g in muon.param_groups for p in g["params"]}
    matrices = {n for n, p in model.named_parameters() if n.startswith("blocks.") and p.ndim == 2}
    assert in_muon == matrices and matrices
    in_adamw = {name[id(p)] for g in adamw.param_groups for p in g["params"]}
    assert in_adamw == set(name.values()) - matrices

    # The state numbers every parameter once, Muon's first, each with its momentum; loaded into
    # a fresh optimizer, the next step is the original's to the bit.
    state = copy.deepcopy(optimizer.state_dict())  # its tensors are the optimizer's own
    ids = [i for g in state["param_groups"] for i in g["params"]]
    assert ids == list(range(len(name))) and set(state["state"]) == set(ids)
    weights = {k: v.clone() for k, v in model.state_dict().items()}
    step(model, optimizer, batches[3])
    resumed, again = fresh()
    resumed.load_state_dict(weights)
    again.load_state_dict(state)
    step(resumed, again, batches[3])
    torch.testing.assert_close(resumed.state_dict(), model.state_dict(), rtol=0, atol=0)

    set_learning_rate(again, 0.123)
    assert all(g["lr"] == 0.123 for o in again.optimizers for g in o.param_groups)
    with pytest.raises(ValueError, match="another optimizer"):
        again.load_state_dict(torch.optim.AdamW(model.parameters()).state_dict())


@pytest.mark.parametrize("shape", [(128, 32), (32, 96), (32, 32)])  # tall, wide, square
def test_orthogonalize_in_bf16_is_within_half_the_rounding_bound_of_exact(
    shape: tuple[int, int],
) -> None:
    # The CUDA test (test_gpu.py) bounds the CPU's and the GPU's Muon updates by MUON_ROUNDING of
    # each other: that holds when each is within half of it of exact arithmetic, checked here for
    # the CPU on Gaussian (well-conditioned) matrices. Seen: 0.012-0.018 of the bound's 0.048.
    from vitkit.train.optim import orthogonalize

    a, b, c = coefficients = (3.4445, -4.775, 2.0315)
    g = torch.randn(8, *shape, generator=torch.Generator().manual_seed(0))  # (N, rows, columns)
    x = g.double().mT if shape[0] > shape[1] else g.double()
    x = x / x.norm(dim=(-2, -1), keepdim=True)
    for _ in range(5):  # the same iteration in float64
        gram = x @ x.mT
        x = a * x + (b * gram + c * gram @ gram) @ x
    exact = x.mT if shape[0] > shape[1] else x
    rounded = orthogonalize(g, coefficients, 5, 1e-7).double()
    assert (rounded - exact).abs().max().item() <= MUON_ROUNDING / 2


@pytest.mark.parametrize("nesterov", [True, False])
def test_batched_muon_takes_torch_muons_steps(nesterov: bool) -> None:
    # vitkit's Muon batches the Newton-Schulz iterations of same-shaped matrices; it must take
    # torch.optim.Muon's steps: the same momentum to the bit, the same update up to bf16 rounding
    # (the products run batched instead of one by one), and either's state loads into the other.
    from vitkit.train.optim import Muon, orthogonalize

    g = torch.Generator().manual_seed(0)
    shapes = [(48, 16), (48, 16), (16, 16), (16, 32), (32, 16), (16, 32)]  # tall, square, wide
    start = [torch.randn(s, generator=g) for s in shapes]
    grads = [[torch.randn(s, generator=g) for s in shapes] for _ in range(3)]
    ours_p = [torch.nn.Parameter(w.clone()) for w in start]
    theirs_p = [torch.nn.Parameter(w.clone()) for w in start]
    settings = dict(lr=0.02, momentum=0.9, weight_decay=0.1)
    ours = Muon(ours_p, **settings)
    theirs = torch.optim.Muon(theirs_p, **settings, adjust_lr_fn="match_rms_adamw")
    for group in (*ours.param_groups, *theirs.param_groups):
        group["nesterov"] = nesterov
    for step_grads in grads:
        before = [q.detach().clone() for q in theirs_p]
        for p, q, grad in zip(ours_p, theirs_p, step_grads, strict=True):
            p.grad, q.grad = grad.clone(), grad.clone()
        ours.step()
        theirs.step()
        for p, q, w in zip(ours_p, theirs_p, before, strict=True):
            assert torch.equal(ours.state[p]["momentum_buffer"], theirs.state[q]["momentum_buffer"])
            moved = (q - w).norm()  # weight decay + lr * scale * an approximately orthogonal matrix
            assert moved > 0.03
            assert (p - q).norm() < 0.01 * moved, "a different update from torch.optim.Muon's"
            p.data.copy_(q.detach())  # the next step from the same point

    # the iteration brings every singular value of each matrix near 1
    ortho = orthogonalize(torch.stack(grads[0][:2]), (3.4445, -4.775, 2.0315), 5, 1e-7)
    singular_values = torch.linalg.svdvals(ortho.float())
    assert singular_values.min() > 0.5 and singular_values.max() < 1.5

    # (copies: a loaded state keeps the very tensors of the state dict it was given)
    back = torch.optim.Muon(theirs_p, **settings, adjust_lr_fn="match_rms_adamw")
    back.load_state_dict(copy.deepcopy(ours.state_dict()))
    again = Muon(ours_p, **settings)
    again.load_state_dict(copy.deepcopy(theirs.state_dict()))
    for p, q in zip(ours_p, theirs_p, strict=True):
        assert torch.equal(back.state[q]["momentum_buffer"], again.state[p]["momentum_buffer"])
    # torch's state, continued by vitkit's Muon: the step torch takes from it
    for p, q, grad in zip(ours_p, theirs_p, grads[0], strict=True):
        p.grad, q.grad = grad.clone(), grad.clone()
    before = [q.detach().clone() for q in theirs_p]
    again.step()
    theirs.step()
    for p, q, w in zip(ours_p, theirs_p, before, strict=True):
        assert torch.equal(again.state[p]["momentum_buffer"], theirs.state[q]["momentum_buffer"])
        assert (p - q).norm() < 0.01 * (q - w).norm()
    again.param_groups[0]["adjust_lr_fn"] = "original"
    with pytest.raises(ValueError, match="match_rms_adamw"):
        again.step()
