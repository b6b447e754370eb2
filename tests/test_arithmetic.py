"""What ``auto`` precision stands for (runtime/arithmetic.py), decided from what the machine
reports, over every kind of machine whatever the machine running the tests: CUDA, a CPU with
AMX-BF16, one with AVX512_BF16, one with neither; and read from this machine when nothing stands
in for it."""

from __future__ import annotations

import pytest
import torch

from vitkit.config import ConfigError, replace
from vitkit.model.flops import count_flops
from vitkit.presets import get_config
from vitkit.recipes import fmnist_vit, get_recipe
from vitkit.runtime import arithmetic
from vitkit.runtime.arithmetic import (
    RULES,
    CpuFeatures,
    cpu_features,
    decide_auto,
    inference_precision,
    precision_on,
)
from vitkit.runtime.machine import decide

CPU, CUDA = torch.device("cpu"), torch.device("cuda")
AMX = CpuFeatures(avx512_bf16=True, amx_bf16=True)
AVX512_BF16 = CpuFeatures(avx512_bf16=True)
NEITHER = CpuFeatures()


@pytest.mark.parametrize("task", ["train", "infer"])
def test_auto_over_every_kind_of_machine(task: arithmetic.Task) -> None:
    least = RULES["AVX512_BF16"].min_gflop[task]
    big, small = 10 * least, least / 2
    for cpu in (AMX, AVX512_BF16, NEITHER):  # CUDA's choice is bf16 whatever the CPU
        assert decide_auto(CUDA, task=task, gflop=small, cpu=cpu) == ("bf16", "auto on cuda")
    assert decide_auto(CPU, task=task, gflop=big, cpu=AMX) == (
        "bf16",
        f"auto: this CPU has AMX-BF16, and a forward pass of a batch is {big:.3g} GFLOP",
    )
    assert decide_auto(CPU, task=task, gflop=big, cpu=AVX512_BF16)[0] == "bf16"
    precision, why = decide_auto(CPU, task=task, gflop=small, cpu=AVX512_BF16)
    assert precision == "fp32"
    assert why == (
        f"auto: this CPU has AVX512_BF16, but a forward pass of a batch is {small:.2g} GFLOP, "
        f"under the {least:g} from which bf16 is faster"
    )
    assert decide_auto(CPU, task=task, gflop=least, cpu=AVX512_BF16)[0] == "bf16"  # inclusive
    for gflop in (small, big, 1e6):  # emulated bf16 is slower than fp32 at any size
        assert decide_auto(CPU, task=task, gflop=gflop, cpu=NEITHER) == (
            "fp32",
            "auto: this CPU has no native bf16 (neither AVX512_BF16 nor AMX-BF16)",
        )


def test_training_gains_from_smaller_batches_than_inference() -> None:
    """A training step amortises the casts over its backward pass too (RESULTS.md)."""
    least = RULES["AVX512_BF16"].min_gflop
    between = (least["train"] + least["infer"]) / 2
    assert least["train"] < least["infer"]
    assert decide_auto(CPU, task="train", gflop=between, cpu=AVX512_BF16)[0] == "bf16"
    assert decide_auto(CPU, task="infer", gflop=between, cpu=AVX512_BF16)[0] == "fp32"


def test_a_precision_that_is_set_is_kept_on_every_machine() -> None:
    for device in (CPU, CUDA):
        for cpu in (AMX, NEITHER):
            for precision in ("fp32", "bf16", "fp16"):
                assert precision_on(precision, device, gflop=1e3, cpu=cpu) == (precision, "set")
            assert inference_precision("fp32", device, gflop=1e3, cpu=cpu) == (
                "fp32",
                "--precision fp32",
            )
            assert inference_precision("bf16", device, gflop=0.0, cpu=cpu)[0] == "bf16"


def test_the_papers_models_and_the_main_jobs_on_a_cpu_with_native_bf16() -> None:
    """The rule as measured: ViT-S/16 and larger at 224 px train and infer in bf16 from batch 1;
    the main job's model (batch 256) trains in bf16; a test-sized model stays fp32."""
    for name in ("ViT-S/16", "ViT-B/16", "ViT-L/16"):
        gflop = count_flops(get_config(name)) / 1e9  # one image
        assert precision_on("auto", CPU, gflop=32 * gflop, cpu=AVX512_BF16)[0] == "bf16"
        assert inference_precision("auto", CPU, gflop=gflop, cpu=AVX512_BF16)[0] == "bf16"
    main_job = get_recipe("fmnist-speed")
    assert main_job.model == fmnist_vit()
    gflop = main_job.train.batch_size * count_flops(main_job.model) / 1e9
    assert precision_on("auto", CPU, gflop=gflop, cpu=AVX512_BF16)[0] == "bf16"
    tiny = get_recipe("smoke")
    gflop = tiny.train.batch_size * count_flops(tiny.model) / 1e9
    assert precision_on("auto", CPU, gflop=gflop, cpu=AMX)[0] == "fp32"


def test_a_run_decides_for_its_batch_on_each_process(monkeypatch: pytest.MonkeyPatch) -> None:
    """``machine.decide`` sizes the work by the batch one process computes: under torchrun,
    ``train.batch_size`` is split among the processes."""
    monkeypatch.setenv("VITKIT_CPU_BF16", "avx512_bf16")
    run = replace(get_recipe("fmnist-speed"), {"train.precision": "auto"})
    flops = count_flops(run.model)
    one = decide(run, CPU, image_flops=flops)["train.precision"]
    assert one[0] == "bf16" and f"{256 * flops / 1e9:.3g} GFLOP" in one[1]
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "64")  # 4 images a process
    assert decide(run, CPU, image_flops=flops)["train.precision"][0] == "fp32"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("none", NEITHER),
        ("avx512_bf16", AVX512_BF16),
        ("amx_bf16", CpuFeatures(amx_bf16=True)),
    ],
)
def test_what_the_cpu_reports_can_be_stood_in_for(
    monkeypatch: pytest.MonkeyPatch, value: str, expected: CpuFeatures
) -> None:
    monkeypatch.setenv("VITKIT_CPU_BF16", value)
    assert cpu_features() == expected


def test_a_stand_in_that_names_no_cpu_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VITKIT_CPU_BF16", "yes")
    with pytest.raises(ConfigError, match=r"VITKIT_CPU_BF16='yes': expected one of none, "):
        cpu_features()


@pytest.mark.parametrize("unset", [None, ""], ids=["unset", "empty"])
def test_this_machines_cpu_is_read_from_pytorch(
    monkeypatch: pytest.MonkeyPatch, unset: str | None
) -> None:
    """The real path, on whatever machine runs the suite: what PyTorch reports, and the decision
    that follows from it. ``VITKIT_CPU_BF16=`` (empty) is unset, as ``VITKIT_HOME=`` is (it
    was refused)."""
    if unset is None:
        monkeypatch.delenv("VITKIT_CPU_BF16")
    else:
        monkeypatch.setenv("VITKIT_CPU_BF16", unset)
    found = cpu_features()
    reported = torch.cpu.get_capabilities()
    assert found == CpuFeatures(
        avx512_bf16=bool(reported.get("avx512_bf16")), amx_bf16=bool(reported.get("amx_bf16"))
    )
    precision, why = decide_auto(CPU, task="train", gflop=10.0)
    assert precision == ("bf16" if found.native_bf16 else "fp32")
    assert (found.native_bf16 or "no native bf16") in why


def test_older_pytorch_is_read_through_its_probes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Before ``torch.cpu.get_capabilities``, PyTorch answered through private probes."""
    monkeypatch.delenv("VITKIT_CPU_BF16")
    monkeypatch.delattr(torch.cpu, "get_capabilities")
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: True, raising=False)
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: False, raising=False)
    assert cpu_features() == AVX512_BF16


@pytest.mark.parametrize("kind", ["none", "avx512_bf16", "amx_bf16"])
def test_each_kind_of_cpu_has_its_rule_decided_once_per_process(
    monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    """Every kind of CPU has a rule (``RULES``: AMX takes Zen 4's until an AMX machine measures
    its own; without native bf16 the attention path of a bf16 set by hand is Zen 4's, as it
    was). With a distinct rule standing in for each kind, a process takes its CPU's at its first
    call and keeps it, a model reads it when built, and a forward pass compiled whole
    (``fullgraph=True``, as the fast inference path compiles) probes nothing: a CPU read inside
    it would break the graph."""
    from dataclasses import replace as with_values

    from helpers import tiny
    from vitkit.model.layers import Attention
    from vitkit.model.vit import VisionTransformer

    for rule in RULES.values():
        assert rule.min_gflop["train"] < rule.min_gflop["infer"] and rule.measured
        assert rule.explicit_tokens["infer"] <= rule.explicit_tokens["train"]
    distinct = {  # each kind's own lengths, so that taking another kind's rule shows
        native: with_values(rule, explicit_tokens={"train": 100 + i, "infer": 10 + i})
        for i, (native, rule) in enumerate(RULES.items())
    }
    for native, rule in distinct.items():
        monkeypatch.setitem(RULES, native, rule)
    monkeypatch.setenv("VITKIT_CPU_BF16", kind)
    arithmetic.process_rule.cache_clear()
    rule = arithmetic.process_rule()
    assert (
        rule is distinct[{"none": None, "avx512_bf16": "AVX512_BF16", "amx_bf16": "AMX-BF16"}[kind]]
    )
    assert arithmetic.rule_for(cpu_features()) is rule
    other = "none" if kind != "none" else "amx_bf16"
    monkeypatch.setenv("VITKIT_CPU_BF16", other)  # later stand-ins change nothing in this process
    assert arithmetic.process_rule() is rule
    model = VisionTransformer(tiny()).eval()
    attentions = [m for m in model.modules() if isinstance(m, Attention)]
    assert attentions and all(a.explicit_tokens == rule.explicit_tokens for a in attentions)
    compiled = torch.compile(model, fullgraph=True, backend="eager")
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        torch.testing.assert_close(compiled(x), model(x))
