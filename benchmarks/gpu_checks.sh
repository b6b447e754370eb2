#!/usr/bin/env bash
# The checks one lease of a lent CUDA machine runs (../.library/device): the `-m gpu` tests, the
# throughput harness against timm (eager and compiled in one run), the compile variants, a
# profile of the compiled step, and `vitkit train` end to end. Each step has its own time limit
# and writes its log under $OUT (default /tmp/gpu-out); the last lines printed are a summary: each
# step's exit status, then one line per figure with the machine it was measured on. Run from the
# repository root, with the wheels the machine lacks in .whl/ (`make gpu-wheels`):
#
#     bash benchmarks/gpu_checks.sh [tests] [harness] [variants] [profile] [e2e] [compiled] \
#         [parallel] [resume] [jpeg]
#
# (default: tests harness e2e). The interpreter is $PYTHON (default python3). To fit one call
# of a lease: HARNESS_TASKS (default "train infer"), VARIANTS (compile_variants.py's --variants,
# in the order they warm up; default all) and each step's time limit in seconds, TESTS_S,
# HARNESS_S, VARIANTS_S, PROFILE_S (defaults 200, 300, 570, 300), and COMPILE_CAP, the seconds
# each variant may take to warm up (default 120).
#
# Dry mode, on a CPU: `GPU_CHECKS_DRY=1 OUT=/tmp/dry bash benchmarks/gpu_checks.sh [steps]` runs
# every step with the same command lines at tiny sizes (the Fashion-MNIST model or ViT-Ti/16 at
# 32 px, batch 4, a few steps), so that a renamed flag, a moved module or a missing import fails
# here and not on the lease (tests/test_gpu_checks.py). Every torch.compile goes through Dynamo to
# the eager backend there; what only CUDA runs is parsed and skipped with a line saying so (the
# `-m gpu` tests are collected, not run; nvidia-smi is not called; CUDA graphs and the capturable
# AdamW are timed as the plain step). No wheels are installed, and run directories go under $OUT.
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/src"
PY=${PYTHON:-python3}
O=${OUT:-/tmp/gpu-out}
mkdir -p "$O"
if [ "${GPU_CHECKS_DRY:-0}" = 1 ]; then
    # the sizes: the harness's Fashion-MNIST model (28 px, 0.8M parameters), ViT-Ti/16 at 32 px
    dry=1 R=$O/runs dev=cpu model=fmnist e2e_model=ViT-Ti/16 image=32 classes=10 batch=4
    peak=64 rounds=1 min_time=0.01 iters=1 warmup=1 profiled=2 cap=60 e2e_steps=2 e2e_log=1
    par_steps=4st res_steps=4 res_save=2 jpeg_files=40 shard=10 jpeg_steps=4 jpeg_log=2
    collect=(--collect-only) gpu_tests=$(grep -l "pytest.mark.gpu" tests/test_*.py | tr '\n' ' ')
    # Dynamo traces every compiled model as on the lease, then hands the graphs to eager:
    # Inductor's minutes on 2 cores are not what this mode checks
    export TORCH_COMPILE_OVERRIDE_BACKENDS=">=0:eager"
    # one thread a process: tiny sizes gain nothing from a second, and lose much on busy cores
    export OMP_NUM_THREADS=1
    gpu=cpu driver=none
    echo "nvidia-smi: skipped (dry run on the CPU)"
else
    # run directories in /tmp, not under $OUT: its files come back, checkpoints would not fit
    dry=0 R=/tmp dev=cuda model=ViT-B/16 e2e_model=ViT-B/16 image=224 classes=100 batch=256
    peak=8192 rounds=3 min_time=1 iters=10 warmup=3 profiled=5 e2e_steps=80 e2e_log=4
    cap=${COMPILE_CAP:-120}
    par_steps=30st res_steps=2000 res_save=500 jpeg_files=3000 shard=500 jpeg_steps=60 jpeg_log=10
    collect=() gpu_tests=tests
    if compgen -G ".whl/*.whl" >/dev/null; then
        $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target /tmp/site .whl/*.whl && export PYTHONPATH="$PYTHONPATH:/tmp/site"
    fi
    IFS=, read -r gpu driver < <(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)
    driver=${driver# }
fi
mkdir -p "$R"
steps=${*:-tests harness e2e}
versions=$($PY -c "import sys, torch; print('python', sys.version.split()[0], 'torch',
    torch.__version__ + ', CUDA', torch.version.cuda if torch.cuda.is_available() else 'none')")
machine="$gpu, driver $driver, ${versions#* * }"  # the summary's figures end with it
{
    [ $dry = 1 ] || nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,power.limit --format=csv
    echo "$versions"
    nproc
} 2>&1 | tee "$O/env.txt"
summary=()
runs=()  # the run directories of this call's e2e steps, whose figures the summary prints
run() {  # run NAME LIMIT_S COMMAND...: the command's output in $O/NAME.log, its status in the summary
    local name=$1 limit=$2 t0 rc
    shift 2
    t0=$(date +%s)
    timeout "$limit" "$@" >"$O/$name.log" 2>&1
    rc=$?
    summary+=("$name: exit $rc in $(($(date +%s) - t0)) s")
    tail -n 25 "$O/$name.log"
}
train() {  # train NAME LIMIT_S DATA STEPS LOG_EVERY EXTRA...: `vitkit train` of $e2e_model
    local name=$1 limit=$2 data=$3 duration=$4 log=$5
    shift 5
    rm -rf "${R:?}/$name"
    runs+=("$R/$name")
    run "$name" "$limit" $PY -m vitkit train --model "$e2e_model" --data "$data" --no-progress \
        --set "model.image_size=$image" --set "train.batch_size=$batch" \
        --set "train.duration=${duration}st" --set "train.log_every=${log}st" \
        --set "train.eval_every=${duration}st" --set "train.save_every=${duration}st" \
        --run-dir "$R/$name" "$@"
}
e2e() {  # e2e NAME EXTRA_SETTINGS...: ViT-B/16 on synthetic 224-px images, 100 classes, batch 256
    # Stochastic depth off: its masks are drawn inside the compiled graph, where Inductor's CUDA
    # generator is not eager's, so `compiled` would compare two streams of random draws (third
    # lease: 0.018 apart on the first window in fp32, 0.21 by step 80; bf16 against fp32 on one
    # stream, 0.027). The loader's draws and mixing's are outside the graph, the same in both.
    local name=$1
    shift
    train "$name" 150 synthetic $e2e_steps $e2e_log --set model.num_classes=$classes \
        --set model.drop_path_rate=0 "$@"
}
smoke() {  # smoke NAME DURATION EXTRA...: the smoke recipe on the GPU, 40 log windows (compiled
    # there by train.compile auto, unless EXTRA says otherwise)
    local name=$1 duration=$2
    shift 2
    [ "$name" = res_cut ] || rm -rf "${R:?}/$name"
    run "$name" 180 $PY -m vitkit train --recipe smoke --no-progress \
        --set "train.device=$dev" --set "train.duration=$duration" \
        --set "train.log_every=$(((${duration%st} + 39) / 40))st" \
        --set "train.eval_every=$duration" --run-dir "$R/$name" "$@"
}
losses() {  # losses RUN...: each logged training loss of the first run against the others'
    $PY - "$@" <<'PY'
import json, sys
runs = [[r for r in map(json.loads, open(f"{d}/metrics.jsonl")) if "loss" in r and "split" not in r]
        for d in sys.argv[1:]]
for d, rows in zip(sys.argv[2:], runs[1:]):
    diffs = [abs(a["loss"] - b["loss"]) for a, b in zip(runs[0], rows)]
    same = [a["step"] for a in runs[0]] == [b["step"] for b in rows]
    print(f"{d}: {len(rows)} windows (same steps: {same}), largest loss difference to {sys.argv[1]}: {max(diffs):.3g}")
PY
}
for step in $steps; do
    case $step in
    tests)  # dry: collected, not run (they need CUDA); only the files that hold `gpu` tests
        # shellcheck disable=SC2086
        run gpu_tests "${TESTS_S:-200}" $PY -m pytest -m gpu -q -p no:cacheprovider \
            "${collect[@]}" $gpu_tests
        [ $dry = 1 ] && echo "gpu tests: collected only (they need CUDA)"
        ;;
    harness)  # ViT-B/16 bf16, vitkit and timm, eager and compiled, in the same run
        # shellcheck disable=SC2086
        run harness "${HARNESS_S:-300}" $PY benchmarks/throughput.py --device $dev \
            --models $model --tasks ${HARNESS_TASKS:-train infer} --precisions bf16 \
            --batch $batch --train-batch $batch \
            --contenders vitkit timm vitkit-compiled timm-compiled --rounds $rounds \
            --min-time $min_time --peak-sizes $peak --out "$O/harness.md" --json "$O/harness.json"
        ;;
    variants)  # compile modes, the whole step as one CUDA graph, SDPA backends: vs timm compiled
        # shellcheck disable=SC2086
        run variants "${VARIANTS_S:-570}" $PY benchmarks/compile_variants.py --device $dev \
            --model $model --batch $batch --precision bf16 --compile-cap $cap --rounds $rounds \
            --iters $iters --warmup $warmup --json "$O/variants.json" \
            ${VARIANTS:+--variants $VARIANTS}
        ;;
    profile)  # the compiled step's device time by kind of work
        run profile "${PROFILE_S:-300}" $PY benchmarks/step_profile.py --device $dev \
            --model $model \
            --batch $batch --precision bf16 --warmup $warmup --steps $profiled \
            --json "$O/profile.json"
        ;;
    e2e) e2e e2e_eager --set train.compile=false ;;  # train.compile auto compiles on CUDA
    compiled)  # and, after `e2e` in the same call, its 20 logged losses against the eager run's
        e2e e2e_compiled --set train.compile=true
        [ -f "$R/e2e_eager/metrics.jsonl" ] \
            && losses "$R/e2e_eager" "$R/e2e_compiled" | tee "$O/compiled_vs_eager.txt"
        ;;
    parallel)  # the smoke recipe alone, under torchrun with DDP, with FSDP: the same losses?
        # (eager, all three: auto leaves torchrun's runs eager, and the first lease's were eager)
        for mode in one ddp fsdp; do
            extra=(--set train.compile=false)
            [ "$mode" != one ] && extra+=(--nproc 1 --set "train.parallel=$mode")
            smoke "par_$mode" $par_steps "${extra[@]}"
        done
        losses "$R/par_one" "$R/par_ddp" "$R/par_fsdp" | tee "$O/parallel.txt"
        ;;
    resume)  # SIGKILLed after its checkpoint at step $res_save, then resumed: the uninterrupted losses?
        # (the default step: compiled on CUDA, a choice the resume must keep from config.json)
        smoke res_whole ${res_steps}st
        rm -rf "$R/res_cut"
        $PY -m vitkit train --recipe smoke --no-progress --set train.device=$dev \
            --set train.duration=${res_steps}st --set train.save_every=${res_save}st \
            --set train.log_every=$(((res_steps + 39) / 40))st --set train.eval_every=${res_steps}st \
            --run-dir "$R/res_cut" >"$O/res_killed.log" 2>&1 &
        pid=$!
        cut=$(printf "%s/res_cut/checkpoints/step_%08d" "$R" $res_save)
        for _ in $(seq 1800); do [ -d "$cut" ] && break; sleep 0.1; done  # compiling first
        kill -9 $pid
        wait $pid 2>/dev/null
        $PY -c "import json, sys; print('killed after step',
            json.loads(open(sys.argv[1]).readlines()[-1])['step'])" "$R/res_cut/metrics.jsonl"
        smoke res_cut ${res_steps}st --set train.save_every=${res_save}st
        losses "$R/res_whole" "$R/res_cut" | tee "$O/resume.txt"
        ;;
    jpeg)  # ViT-B/16 from 3,000 JPEGs of 300-500 px as a folder, then as wds shards
        run make_jpegs 120 $PY benchmarks/make_jpeg_folder.py "$R/jpegs" --files $jpeg_files
        run pack 60 $PY -m vitkit data pack "$R/jpegs" "$R/shards" --shard-size $shard
        train e2e_folder 150 "$R/jpegs" $jpeg_steps $jpeg_log
        train e2e_wds 150 "wds:$R/shards" $jpeg_steps $jpeg_log
        ;;
    *) summary+=("$step: unknown step") ;;
    esac
done
printf '%s\n' "${summary[@]}"
$PY benchmarks/gpu_figures.py "$machine" "$O" "${runs[@]}"
# The lease brings back at most 8 files from $OUT (../.library/device/README.md): every log, table
# and figure goes back in one archive. In the dry run the loose files stay too, for the test.
(cd "$O" && find . -maxdepth 1 -type f ! -name logs.tar.gz -printf '%P\n' | sort \
    | tar czf logs.tar.gz -T -)
[ $dry = 1 ] || find "$O" -maxdepth 1 -type f ! -name logs.tar.gz -delete
