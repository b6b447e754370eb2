"""The CUDA paths (``pytest -m gpu`` on a machine with a GPU; skipped elsewhere): the model, its
MAP and hybrid variants, evaluation, the fast inference path and the optimizers compute on the GPU
what they compute on the CPU, to the precision the GPU's kernels promise.

TF32 is off for every fp32 comparison (``torch.backends.cuda.matmul.allow_tf32`` and cuDNN's):
with it, a product keeps 10 mantissa bits and logits differ by ~1e-3. fp32 GPU kernels add in
another order than the CPU's, so fp32 logits agree to ~1e-5 relative (bounds below are 1e-4,
the same the fast path promises on CPUs); bf16 autocast keeps 8 bits, so its logits are held to
bf16's few percent.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator

import pytest
import torch

import vitkit
from helpers import MUON_ROUNDING, randomize, tiny
from vitkit.config import ResNetConfig

CUDA = torch.cuda.is_available()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not CUDA, reason="needs a CUDA device")]


@pytest.fixture(autouse=True)
def no_tf32() -> Iterator[None]:
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


MODELS = {
    "token": tiny(),
    "gap": tiny(classifier="gap"),
    "map": tiny(classifier="map"),
    "hybrid": tiny(patch_size=1, resnet=ResNetConfig(num_layers=(1, 1)), image_size=32),
    "non-square": tiny(image_size=(24, 40)),
}


def _images(cfg, n: int = 4) -> torch.Tensor:
    h, w = cfg.image_hw
    return torch.rand(n, cfg.in_chans, h, w, generator=torch.Generator().manual_seed(0)) * 2 - 1


@pytest.mark.parametrize("name", sorted(MODELS))
def test_logits_on_cuda_equal_the_cpus(name: str) -> None:
    cfg = MODELS[name]
    model = randomize(vitkit.create_model(cfg), std=0.05)
    x = _images(cfg)
    with torch.no_grad():
        expected = model(x)
        got = copy.deepcopy(model).cuda()(x.cuda()).cpu()
    torch.testing.assert_close(got, expected, rtol=1e-4, atol=1e-4)
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        half = copy.deepcopy(model).cuda()(x.cuda()).float().cpu()
    torch.testing.assert_close(half, expected, rtol=0.05, atol=0.05 * expected.abs().max().item())


def test_intermediates_and_attention_on_cuda() -> None:
    model = randomize(vitkit.create_model(tiny()), std=0.05)
    x = _images(model.cfg)
    with torch.no_grad():
        expected = model.intermediates(x, attention=True)
        got = copy.deepcopy(model).cuda().intermediates(x.cuda(), attention=True)
    assert got.keys() == expected.keys()
    for key in expected:
        torch.testing.assert_close(got[key].cpu(), expected[key], rtol=1e-4, atol=1e-4, msg=key)


def test_fast_inference_on_cuda_equals_eager() -> None:
    model = randomize(vitkit.create_model(tiny()), std=0.05).cuda()
    x = _images(model.cfg).cuda()
    with torch.no_grad():
        expected = model(x)
    fast = vitkit.optimize_for_inference(model, precision="fp32")
    torch.testing.assert_close(fast(x), expected, rtol=1e-4, atol=1e-4)


def test_evaluate_on_cuda_equals_the_cpus() -> None:
    from vitkit.eval.metrics import evaluate

    model = randomize(vitkit.create_model(tiny()), std=0.05)
    g = torch.Generator().manual_seed(1)
    batches = [(torch.rand(8, 3, 32, 32, generator=g) * 2 - 1, torch.arange(8) % 10)] * 3
    on_cpu = evaluate(model, batches, 10, flip=True)
    on_gpu = evaluate(copy.deepcopy(model).cuda(), batches, 10, flip=True)
    assert on_gpu.loss == pytest.approx(on_cpu.loss, rel=1e-4)
    assert on_gpu.confusion == on_cpu.confusion


@pytest.mark.parametrize("name", ["adam", "muon", "sgd"])
def test_optimizer_steps_on_cuda_follow_the_cpus(name: str) -> None:
    """Three steps of each optimizer, each step taken on both devices from the CPU's weights and
    optimizer state (so the momenta are not zero from the second step on). Adam and SGD, from the
    gradients each device computes, agree to fp32 rounding. Muon's Newton-Schulz iterations run in
    bf16, each device rounding in its own order: from the same gradients, an update entry may
    differ by MUON_ROUNDING (tests/helpers.py) x lr x 0.2 sqrt(max dim). Muon gets the same
    well-conditioned gradients on both devices (Gaussian draws): the model's own gradients of a
    batch of 8 are nearly low-rank, and orthogonalising a nearly rank-deficient matrix magnifies
    any rounding difference (on an H200: 0.086 of lr x 0.2 sqrt(128) for fc2's weight; on a CPU,
    rank-8 matrices with 1e-6 noise move by 0.14-0.2: not a device's fault, the function's).
    test_optim.py checks that the CPU's bf16 stays within half the bound of exact arithmetic on
    such matrices, so the two devices are within the bound of each other.
    From the same state, not along two trajectories: there the second step's gradients already
    come through weights that differ by that rounding, and both Muon's orthogonalisation and Adam
    turn a small change of a small gradient into a full-size step (seen on an H200)."""
    import torch.nn.functional as F

    from vitkit.config import OptimConfig
    from vitkit.train.optim import build_optimizer, muon_matrices

    lr, steps = 1e-3, 3
    cfg = OptimConfig(name=name, lr=lr, weight_decay=0.1, momentum=0.9)
    g = torch.Generator().manual_seed(2)
    x, y = torch.rand(8, 3, 32, 32, generator=g) * 2 - 1, torch.arange(8) % 10
    torch.manual_seed(0)
    on_cpu = randomize(vitkit.create_model(tiny()), std=0.05)
    on_gpu = copy.deepcopy(on_cpu).cuda()
    matrices = {n for n, p in on_cpu.named_parameters() if id(p) in muon_matrices(on_cpu)}
    cpu_optimizer, gpu_optimizer = build_optimizer(on_cpu, cfg), build_optimizer(on_gpu, cfg)
    for step in range(1, steps + 1):
        on_gpu.load_state_dict(on_cpu.state_dict())
        # a copy: Adam's step counts would be the CPU's own tensors, counted twice
        gpu_optimizer.load_state_dict(copy.deepcopy(cpu_optimizer.state_dict()))
        if name == "muon":  # the same well-conditioned gradients on both devices
            for p_cpu, p_gpu in zip(on_cpu.parameters(), on_gpu.parameters(), strict=True):
                p_cpu.grad = torch.randn(p_cpu.shape, generator=g)
                p_gpu.grad = p_cpu.grad.cuda()
        for model, optimizer, device in (
            (on_cpu, cpu_optimizer, "cpu"),
            (on_gpu, gpu_optimizer, "cuda"),
        ):
            if name != "muon":
                F.cross_entropy(model(x.to(device)), y.to(device)).backward()
            optimizer.step()
            optimizer.zero_grad()
        gpu_weights = on_gpu.state_dict()
        for key, cpu in on_cpu.state_dict().items():
            cpu, gpu = cpu.detach().clone(), gpu_weights[key].detach().cpu()
            if key.endswith("attn.qkv.bias"):  # keys' biases: softmax ignores them, so their
                D = cpu.shape[0] // 3  # gradient is rounding noise that Adam scales to full steps
                cpu[D : 2 * D] = gpu[D : 2 * D] = 0
            muon = name == "muon" and key in matrices
            bound = lr * 0.2 * max(cpu.shape) ** 0.5 * MUON_ROUNDING if muon else 1e-5
            diff = (gpu - cpu).abs().max().item()
            assert diff <= bound, (
                f"{key} at step {step}: largest difference {diff:.3g} > {bound:.3g}"
            )


def test_batches_reach_the_device_one_ahead_unchanged() -> None:
    """The training loop's input on CUDA (a side stream, one micro-batch ahead) delivers what
    the CPU path delivers, and reads nothing back to the host."""
    from vitkit.data import Batches, BatchOptions, synthetic
    from vitkit.data.device import on_device, to_input

    data = synthetic(num_classes=4, per_class=8, image_size=16, channels=3, seed=0)
    kwargs = {"batch_size": 8, "train": True, "seed": 3, "flip": True, "uint8": True}
    # scaled on the GPU, as on_device does (CUDA divides by 127.5 as a product with its
    # reciprocal, which can differ from the CPU's quotient in the last bit)
    on_cpu = [
        (to_input(x.cuda(), torch.device("cuda")).cpu(), y)
        for x, y in Batches(data, BatchOptions(**kwargs)).epoch(0)
    ]
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        on_gpu = [
            (x * 2, y + 0)  # work on the default stream while the next copy runs
            for x, y in on_device(Batches(data, BatchOptions(pin_memory=True, **kwargs)).epoch(0),
                                   torch.device("cuda"))
        ]  # fmt: skip
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert len(on_gpu) == len(on_cpu) == 4
    for (x, y), (u, v) in zip(on_gpu, on_cpu, strict=True):
        assert torch.equal(y.cpu(), v)
        assert torch.equal(x.cpu(), u * 2), f"largest difference {(x.cpu() - u * 2).abs().max()}"
