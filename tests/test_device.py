"""Where training computes (``train.device``): the device and process-group backend each process
takes, the user's error when CUDA is asked for and absent, a CPU run that is the same whether
asked for or chosen by ``auto``, and (on a GPU only) a smoke run on CUDA that resumes."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import vitkit
from helpers import stopped_copy
from vitkit import fit
from vitkit.config import ConfigError, replace
from vitkit.recipes import get_recipe
from vitkit.runtime.machine import choose_device
from vitkit.train.distributed import backend, resolve_device
from vitkit.train.loop import TIMING_KEYS

CUDA = torch.cuda.is_available()


def test_device_for_each_request_gpu_count_and_local_rank() -> None:
    cpu = torch.device("cpu")
    assert choose_device("auto", gpus=0, local_rank=None) == cpu
    assert choose_device("auto", gpus=0, local_rank=3) == cpu  # torchrun on CPUs
    assert choose_device("cpu", gpus=8, local_rank=2) == cpu
    assert choose_device("auto", gpus=2, local_rank=None) == torch.device("cuda", 0)
    assert choose_device("cuda", gpus=8, local_rank=5) == torch.device("cuda", 5)  # torchrun
    with pytest.raises(ValueError, match=r"train\.device='cuda' but PyTorch finds no GPU"):
        choose_device("cuda", gpus=0, local_rank=None)
    with pytest.raises(ValueError, match=r"LOCAL_RANK=2 but PyTorch sees 2 GPU\(s\)"):
        choose_device("auto", gpus=2, local_rank=2)
    with pytest.raises(ConfigError, match=r"train\.device='tpu' is not valid: expected 'auto'"):
        replace(get_recipe("smoke"), {"train.device": "tpu"})


def test_backend_follows_the_device() -> None:
    assert backend(torch.device("cuda", 3)) == "nccl"
    assert backend(torch.device("cpu")) == "gloo"


@pytest.mark.skipif(CUDA, reason="checks the machine without a GPU")
def test_cuda_requested_without_one_is_one_line(tmp_path: Path) -> None:
    assert resolve_device("auto") == torch.device("cpu")
    with pytest.raises(ValueError, match=r"train\.device='cuda'"):
        resolve_device("cuda")
    proc = subprocess.run(
        [sys.executable, "-m", "vitkit", "train", "--recipe", "smoke", "--set", "train.device=cuda",
         "--run-dir", str(tmp_path / "run"), "--no-progress"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.startswith("vitkit train: error: train.device='cuda' but PyTorch finds")
    assert len(proc.stderr.strip().splitlines()) == 1  # no traceback
    assert not (tmp_path / "run").exists()


def _log(run_dir: Path) -> list[dict]:
    """metrics.jsonl without the timings."""
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(x).items() if k not in TIMING_KEYS} for x in lines]


@pytest.mark.skipif(CUDA, reason="'auto' is CUDA on a machine with a GPU")
def test_cpu_asked_for_equals_auto_and_older_run_dirs_resume(tmp_path: Path) -> None:
    smoke = get_recipe("smoke")
    on_cpu = replace(smoke, {"train.device": "cpu"})
    fit(smoke, run_dir=tmp_path / "auto", progress=False)
    fit(on_cpu, run_dir=tmp_path / "cpu", progress=False)
    assert _log(tmp_path / "cpu") == _log(tmp_path / "auto")
    a, b = (vitkit.load(tmp_path / d / "best").state_dict() for d in ("auto", "cpu"))
    assert all(torch.equal(a[k], b[k]) for k in a)

    # A run directory written before train.device existed (no key in config.json: its default),
    # resumed with the device named: the device may change between resumes.
    old = stopped_copy(tmp_path / "auto", tmp_path / "old", step=4)
    config = json.loads((old / "config.json").read_text())
    del config["train"]["device"]
    (old / "config.json").write_text(json.dumps(config))
    state = torch.load(old / "checkpoints" / "step_00000004" / "state.pt", weights_only=True)
    assert state["cuda_rng"] is None  # a CPU run has no GPU generator
    fit(on_cpu, run_dir=old, progress=False)
    assert _log(old) == _log(tmp_path / "auto")


@pytest.mark.gpu
@pytest.mark.skipif(not CUDA, reason="needs a CUDA device")
def test_smoke_run_on_cuda_is_finite_and_resumes(tmp_path: Path) -> None:
    # dropout draws from the GPU's generator, which the checkpoint must carry for the resume
    run = replace(get_recipe("smoke"), {"train.device": "cuda", "model.dropout_rate": 0.1})
    full = tmp_path / "full"
    result = fit(run, run_dir=full, progress=False)
    records = _log(full)
    assert all(math.isfinite(r["loss"]) for r in records) and result.evaluation.accuracy > 0.25
    # train.compile auto: the step compiled on CUDA, recorded, and kept by the resume below
    assert json.loads((full / "config.json").read_text())["train"]["compile"] is True
    state = torch.load(full / "checkpoints" / "step_00000004" / "state.pt", weights_only=True)
    assert state["cuda_rng"].device.type == "cpu" and state["rng"].device.type == "cpu"
    assert all(t.device.type == "cpu" for t in state["optimizer"]["state"][0].values())
    assert next(vitkit.load(full / "best").parameters()).device.type == "cpu"

    resumed = stopped_copy(full, tmp_path / "resumed", step=4)
    fit(run, run_dir=resumed, progress=False)
    lines = [(d / "metrics.jsonl").read_text().splitlines() for d in (resumed, full)]
    kept = [[x for x in text if json.loads(x)["step"] <= 4] for text in lines]
    assert kept[0] == kept[1] and kept[0]  # timings too: resumed, not started over
    again = _log(resumed)
    assert [r["step"] for r in again] == [r["step"] for r in records]
    for x, y in zip(again, records, strict=True):  # GPU kernels may add in another order
        assert x.keys() == y.keys()
        for key, value in x.items():
            assert value == (
                pytest.approx(y[key], rel=1e-4, abs=1e-6) if key != "split" else y[key]
            )


def test_the_machine_decides_what_the_config_leaves_open(monkeypatch) -> None:
    """``auto`` precision is bf16 on CUDA and, on a CPU, what ``runtime.arithmetic`` decides for
    the run's batch (here one without native bf16: fp32); the workers of none are the cores per
    process less one, each with its origin; a decided run is left as it is."""
    import os

    from vitkit.config import replace
    from vitkit.model.flops import count_flops
    from vitkit.recipes import get_recipe
    from vitkit.runtime.machine import decide

    monkeypatch.setattr(os, "sched_getaffinity", lambda _: set(range(16)))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    run = replace(get_recipe("smoke"), {"train.precision": "auto", "data.num_workers": None})
    flops = count_flops(run.model)
    on_gpu = decide(run, torch.device("cuda", 1), image_flops=flops)
    assert on_gpu["train.precision"] == ("bf16", "auto on cuda")
    assert on_gpu["data.num_workers"] == (
        7,
        "none on this machine: 16 cores for 2 processes, less one each",
    )
    on_cpu = decide(run, torch.device("cpu"), image_flops=flops)["train.precision"]
    assert on_cpu == (
        "fp32",
        "auto: this CPU has no native bf16 (neither AVX512_BF16 nor AMX-BF16)",
    )
    decided = replace(
        run, {"train.precision": "fp32", "data.num_workers": 7, "train.compile": True}
    )
    assert decide(decided, torch.device("cuda"), image_flops=flops) == {}
    fixed = replace(run, {"train.precision": "fp16", "data.num_workers": 0, "train.compile": False})
    assert decide(fixed, torch.device("cuda"), image_flops=flops) == {}
