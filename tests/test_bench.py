"""The benchmark harness (benchmarks/throughput.py) on the Fashion-MNIST model: every row measured,
ratios and fractions of peak computed from the timings, memory peaks seen, and the contenders'
logits equal to the reference path's (vitkit eager fp32)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "throughput.py"
LINUX = Path("/proc/self/clear_refs").exists()


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("throughput", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["throughput"] = module  # dataclasses resolve their annotations through it
    spec.loader.exec_module(module)
    yield module
    del sys.modules["throughput"]


SMOKE = ["--models", "fmnist", "--rounds", "2", "--iters", "1", "--batch", "2"]
SMOKE += ["--train-batch", "4", "--peak-sizes", "64"]


def test_smoke_run_rows_and_parity_with_timm(bench, tmp_path, capsys) -> None:
    out, raw = tmp_path / "bench.md", tmp_path / "bench.json"
    bench.main([*SMOKE, "--contenders", "vitkit", "timm", "--out", str(out), "--json", str(raw)])
    printed = capsys.readouterr().out
    assert printed.strip() == out.read_text().strip()
    assert "Command: `" in printed and "Matmul peak" in printed
    rows = json.loads(raw.read_text())["rows"]
    keys = {(r["task"], r["precision"], r["batch"], r["contender"]) for r in rows}
    assert keys == {
        (task, precision, batch, contender)
        for task, batch in (("infer", 2), ("train", 4))
        for precision in ("fp32", "bf16")
        for contender in ("vitkit", "timm")
    }
    assert len([line for line in printed.splitlines() if line.startswith("| fmnist |")]) == 8
    for r in rows:
        assert len(r["seconds"]) == 2 and r["images_per_s"] > 0 and r["fraction_of_peak"] > 0
        assert r["ratio_to_timm"] > 0 and (r["contender"] != "timm" or r["ratio_to_timm"] == 1.0)
        assert (r["max_abs_diff"] is None) == (r["task"] == "train")
        assert (r["peak_bytes"] is not None) == LINUX
        if r["task"] == "infer" and r["precision"] == "fp32":
            assert r["max_abs_diff"] <= 1e-4  # the same weights give the reference path's logits


def test_transformers_contender_holds_the_same_weights(bench) -> None:
    pytest.importorskip("transformers")
    subject = bench.make_subject("fmnist")
    rows = bench.measure(
        subject,
        "infer",
        "fp32",
        2,
        ["transformers", "torchvision"],  # torchvision has no Fashion-MNIST model: no row
        rounds=1,
        iters=1,
        warmup=1,
        min_time=0.0,
        device=torch.device("cpu"),
    )
    assert [r.contender for r in rows] == ["transformers"]
    assert rows[0].max_abs_diff <= 1e-4


def test_logits_are_not_trivial(bench) -> None:
    """The parity check compares O(1) logits, not the zeros of a freshly initialised head."""
    subject = bench.make_subject("fmnist")
    model = bench.build_vitkit(subject, "fp32").eval()
    with torch.no_grad():
        assert model(torch.randn(4, 1, 28, 28)).abs().mean() > 0.1


@pytest.mark.skipif(not LINUX, reason="peak RSS is read from /proc")
def test_peak_memory_sees_an_allocation(bench) -> None:
    def step() -> None:
        torch.ones(16 * 2**20)  # 64 MiB, written: resident

    assert bench.peak_memory(step, torch.device("cpu")) >= 60 * 2**20


def test_ratio_and_fraction_of_peak(bench) -> None:
    def row(contender: str, seconds: list[float]):
        return bench.Row("fmnist", "infer", "fp32", 10, contender, 10**9, 2, seconds)

    ours, peer = row("vitkit", [1.0, 2.0, 1.0]), row("timm", [2.0, 2.0, 4.0])
    summary = {s["contender"]: s for s in bench.summarize([ours, peer], {"fp32": 100.0})}
    assert summary["vitkit"]["images_per_s"] == 20.0  # median of 20, 10, 20 (2 x 10 images)
    assert summary["vitkit"]["ratio_to_timm"] == 2.0  # median of per-round ratios 2, 1, 4
    assert summary["vitkit"]["fraction_of_peak"] == pytest.approx(0.2)  # 20 GFLOP/s of 100
    assert summary["timm"]["ratio_to_timm"] == 1.0
    assert summary["vitkit"]["mfu"] is None and "MFU" not in bench.table(list(summary.values()))
    on_gpu = bench.summarize([ours, peer], {"fp32": 100.0}, datasheet=1000.0)  # GFLOP/s
    assert on_gpu[0]["mfu"] == pytest.approx(0.02)  # 20 GFLOP/s of a 1000 GFLOP/s datasheet peak
    assert bench.table(on_gpu).splitlines()[2].endswith("| 2.0 |")
    assert bench.datasheet_peak(torch.device("cpu")) is None


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the error without a GPU")
def test_cuda_without_a_gpu_is_one_clear_error(bench) -> None:
    with pytest.raises(SystemExit, match="--device cuda: torch sees no CUDA device here"):
        bench.main(["--device", "cuda", "--models", "fmnist"])


def test_plan_quick_full_and_compile(bench) -> None:
    jobs, batches, names = bench.plan(bench.parse_args([]))
    assert jobs == list(bench.QUICK) and batches == [32]
    assert names == ["vitkit", "vitkit-fast", "timm"]
    jobs, batches, names = bench.plan(bench.parse_args(["--full"]))
    assert len(jobs) == 8 and batches == [1, 32] and names == list(bench.CONTENDERS)
    _, _, names = bench.plan(bench.parse_args(["--models", "fmnist", "--compile"]))
    assert names == ["vitkit", "vitkit-fast", "timm", "vitkit-compiled", "timm-compiled"]


@pytest.mark.slow
def test_compiled_and_fast_contenders_match_reference(bench) -> None:
    rows = bench.measure(
        bench.make_subject("fmnist"),
        "infer",
        "fp32",
        2,
        ["vitkit-compiled", "vitkit-fast"],
        rounds=1,
        iters=1,
        warmup=1,
        min_time=0.0,
        device=torch.device("cpu"),
    )
    assert [r.contender for r in rows] == ["vitkit-compiled", "vitkit-fast"]
    assert all(r.max_abs_diff <= 1e-4 for r in rows)


def test_matmul_peak_is_the_faster_of_the_paths(bench) -> None:
    for precision in ("fp32", "bf16"):
        gflops, path = bench.matmul_peak(precision, torch.device("cpu"), [128], repeats=1)
        assert gflops > 0 and path in bench.MATMUL_PATHS
    a, b = torch.randn(64, 32), torch.randn(32, 48)
    for make in bench.MATMUL_PATHS.values():  # every path computes the product it times
        call = make(a, b)
        if call is not None:
            torch.testing.assert_close(call(), a @ b, rtol=1e-5, atol=1e-5)


def test_onnxruntime_contender_times_the_exported_graph(bench) -> None:
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    subject = bench.make_subject("fmnist")
    assert bench.build_onnx(subject, "bf16") is None  # the exported graph is fp32
    common = {"rounds": 1, "iters": 1, "warmup": 1, "min_time": 0.0}
    cpu = torch.device("cpu")
    rows = bench.measure(subject, "infer", "fp32", 3, ["onnxruntime"], device=cpu, **common)
    assert [r.contender for r in rows] == ["onnxruntime"]
    assert rows[0].max_abs_diff <= 1e-4 and rows[0].seconds[0] > 0
    assert bench.measure(subject, "train", "fp32", 3, ["onnxruntime"], device=cpu, **common) == []


def test_every_benchmark_script_imports(monkeypatch) -> None:
    """Each script of benchmarks/ loads (its imports name what vitkit still has) without running:
    benchmarks/verify_folder.py imported a function that had moved, and nothing noticed."""
    import importlib.util
    import sys

    monkeypatch.syspath_prepend(str(SCRIPT.parent))  # as run: a script's folder is on the path
    for script in sorted(SCRIPT.parent.glob("*.py")):
        name = f"bench_{script.stem}"
        spec = importlib.util.spec_from_file_location(name, script)
        assert spec is not None and spec.loader is not None
        module = sys.modules[name] = importlib.util.module_from_spec(spec)  # dataclasses look it up
        try:
            spec.loader.exec_module(module)
        finally:
            del sys.modules[name]


def test_cpu_table_prints_the_peak_and_each_rows_share_of_it(monkeypatch, capsys) -> None:
    """benchmarks/cpu_table.py: the GEMM peak of each precision before the rows, an MFU beside
    each contender (its FLOPs over the peak of its precision), training measured a pair at a
    time; the datasheet's peak only where the CPU's model is one it lists."""
    import importlib.util

    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    path = SCRIPT.parent / "cpu_table.py"
    spec = importlib.util.spec_from_file_location("bench_cpu_table", path)
    assert spec is not None and spec.loader is not None
    table = sys.modules["bench_cpu_table"] = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(table)
        table.main(["--models", "fmnist", "--rows", "train:2", "--rounds", "1",
                    "--min-time", "0", "--peak-shapes", "64x64x64", "32x16x48"])  # fmt: skip
        printed = capsys.readouterr().out
        peaks = {
            line.split()[2].rstrip(":"): float(line.split()[3].replace(",", ""))
            for line in printed.splitlines()
            if line.startswith("GEMM peak ")
        }
        assert set(peaks) == {"fp32", "bf16", "int8"} and all(v > 0 for v in peaks.values())
        rows = [line.split("|") for line in printed.splitlines() if "| train | 2 |" in line]
        contenders = [r[5].strip() for r in rows]
        assert contenders == [
            "vitkit fp32",
            "timm fp32",
            "vitkit bf16",
            "timm bf16",
            "vitkit default",
        ]
        flops = 3 * table.count_flops(table.make_subject("fmnist").cfg) / 1e9
        for r in rows:  # MFU = img/s x GFLOP an image / the peak at the contender's precision
            precision = table.precision_of(r[5].strip(), r[4].strip())
            # as printed: the peak to three digits (a tiny product's is a few GFLOP/s), the MFU
            # to 0.1
            assert float(r[10]) == pytest.approx(
                100 * float(r[6]) * flops / peaks[precision], rel=0.006, abs=0.051
            )
        assert table.datasheet_peaks("AMD EPYC", 2)[0] is None
        assert "without a model number" in table.datasheet_peaks("AMD EPYC", 2)[1]
        assert table.datasheet_peaks("AMD EPYC 9654 96-Core Processor", 2)[0] is None
        # the datasheet's peak is per core: two hyperthreads of one core count once
        monkeypatch.setattr(table.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3})
        assert table.physical_cores(2, {0: "0-1", 1: "0-1", 2: "2-3", 3: "2-3"}.get) == 2
        assert table.physical_cores(4, {0: "0-1", 1: "0-1", 2: "2-3", 3: "2-3"}.get) == 2
        assert table.physical_cores(4, str) == 4 and table.physical_cores(1, str) == 1
        found, why = table.datasheet_peaks("Intel(R) Xeon(R) Platinum 8480+", 2)
        assert found == {"bf16": 1024 * 3.8 * 2, "int8": 2048 * 3.8 * 2, "fp32": 64 * 3.8 * 2}
        assert "8480 at 3.8 GHz x 2 cores" in why
    finally:
        del sys.modules["bench_cpu_table"]


def test_step_profile_puts_each_kernel_in_its_kind(monkeypatch) -> None:
    """benchmarks/step_profile.py's kinds: a ViT's products, its attention (the explicit path's
    bmm and softmax, the fused kernels), the loss's log-softmax apart from attention's softmax."""
    import importlib.util

    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location(
        "bench_step_profile", SCRIPT.parent / "step_profile.py"
    )
    assert spec is not None and spec.loader is not None
    profile = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(profile)
    kinds = {
        "aten::addmm": "GEMM",
        "aten::mm": "GEMM",
        "sm90_xmma_gemm_bf16bf16_bf16f32": "GEMM",
        "aten::bmm": "attention",
        "aten::_softmax": "attention",
        "aten::_softmax_backward_data": "attention",
        "pytorch_flash::flash_fwd_kernel": "attention",
        "aten::_log_softmax": profile.ELEMENTWISE,
        "triton_per_fused__log_softmax_nll_loss_0": profile.ELEMENTWISE,
        "aten::_fused_adamw_": "optimizer",
        "aten::_to_copy": "copies",
        "aten::native_layer_norm": profile.ELEMENTWISE,
        # names from the H200's compiled ViT-B/16 step (RESULTS.md, issue 47)
        "nvjet_sm90_tst_192x192_64x3_1x2_h_bz_coopB_NNN": "GEMM",
        "cudnn_generated_fort_native_sdpa_sm90_flash_bprop_wgmma_f16_knob_26": "attention",
        "void cudnn::fusion::convert_dq_to_16bits<true>(void const*, void*": "attention",
        "void cudnn::fusion::compute_dot_do_o_specialized<true, 64>(void": "attention",
        "void cutlass__5x_cudnn::Kernel<cutlass_tensorop_bf16_s16816fprop_optimized": "GEMM",
        "void cudnn::engines_precompiled::nchwToNhwcKernel<__nv_bfloat16": "copies",
        "triton_per_fused__to_copy_add_native_layer_norm_backward_view_12": profile.ELEMENTWISE,
        "triton_poi_fused_clone_permute_stack_14": "copies",
        "triton_poi_fused_gelu_gelu_backward_view_10": profile.ELEMENTWISE,
    }
    assert {name: profile.kind_of(name) for name in kinds} == kinds


def test_attention_alone_times_the_models_own_attention(monkeypatch) -> None:
    """benchmarks/compile_variants.py's micro-benchmark gives SDPA the model's shape: ViT-B/16's
    197 tokens (14 x 14 patches and the class token), 12 heads of 64. It once took the grid's side
    for its number of patches and timed 15 tokens on the H200."""
    from vitkit.presets import get_config

    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location(
        "bench_compile_variants", SCRIPT.parent / "compile_variants.py"
    )
    assert spec is not None and spec.loader is not None
    variants = sys.modules["bench_compile_variants"] = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(variants)
        shapes: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
        sdpa = variants.F.scaled_dot_product_attention

        def seen(q, k, v, *args, **kwargs):
            shapes.append((tuple(q.shape), tuple(q.stride())))
            return sdpa(q, k, v, *args, **kwargs)

        monkeypatch.setattr(variants.F, "scaled_dot_product_attention", seen)
        cfg = get_config("ViT-B/16")
        ms = variants.attention_alone(cfg, 1, torch.device("cpu"), ["sdpa-math"], 1, 1)
        assert set(ms) == {"default", "default, q/k/v views", "sdpa-math"}
        assert all(isinstance(t, float) and t > 0 for t in ms.values())
        assert {shape for shape, _ in shapes} == {(1, 12, 197, 64)}
        # contiguous q, and q as the model passes it: a view of (B, N, 3, heads, head_dim)
        assert {stride for _, stride in shapes} == {(151296, 12608, 64, 1), (453888, 64, 2304, 1)}
    finally:
        del sys.modules["bench_compile_variants"]
