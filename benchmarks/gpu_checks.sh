#!/usr/bin/env bash
# The checks one lease of a lent CUDA machine runs (../.library/device): the `-m gpu` tests, the
# throughput harness against timm, and `vitkit train` end to end on synthetic images. Each step has
# its own time limit and writes its log under $OUT (default /tmp/gpu-out); the last lines printed
# are a short summary. Run from the repository root, with wheels the machine lacks in .whl/:
#
#     bash benchmarks/gpu_checks.sh [tests] [harness] [e2e] [compiled] [parallel] [resume] [jpeg]
#
# (default: the first three).
set -u
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/src"
O=${OUT:-/tmp/gpu-out}
mkdir -p "$O"
if compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl && export PYTHONPATH="$PYTHONPATH:/tmp/site"
fi
steps=${*:-tests harness e2e}
{
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,power.limit --format=csv
    python3 -c "import sys, torch; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name())"
    nproc
} 2>&1 | tee "$O/env.txt"
summary=()
run() {  # run NAME LIMIT_S COMMAND...: the command's output in $O/NAME.log, its status in the summary
    local name=$1 limit=$2 t0 rc
    shift 2
    t0=$(date +%s)
    timeout "$limit" "$@" >"$O/$name.log" 2>&1
    rc=$?
    summary+=("$name: exit $rc in $(($(date +%s) - t0)) s")
    tail -n 25 "$O/$name.log"
}
e2e() {  # e2e NAME EXTRA_SETTINGS...: ViT-B/16 on synthetic 224-px images, 100 classes, batch 256
    local name=$1
    shift
    rm -rf "/tmp/$name"
    run "$name" 150 python3 -m vitkit train --model ViT-B/16 --data synthetic --no-progress \
        --set model.num_classes=100 --set train.batch_size=256 --set train.duration=80st \
        --set train.log_every=20st --set train.eval_every=80st --set train.save_every=80st \
        --run-dir "/tmp/$name" "$@"
}
smoke() {  # smoke NAME DURATION EXTRA...: the smoke recipe on the GPU, 40 log windows
    local name=$1 duration=$2
    shift 2
    [ "$name" = res_cut ] || rm -rf "/tmp/$name"
    run "$name" 120 python3 -m vitkit train --recipe smoke --no-progress \
        --set train.device=cuda --set "train.duration=$duration" \
        --set "train.log_every=$(((${duration%st} + 39) / 40))st" \
        --set "train.eval_every=$duration" --run-dir "/tmp/$name" "$@"
}
losses() {  # losses RUN...: each logged training loss of the first run against the others'
    python3 - "$@" <<'PY'
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
    tests) run gpu_tests 200 python3 -m pytest -m gpu -q -p no:cacheprovider tests ;;
    harness)
        run harness 120 python3 benchmarks/throughput.py --device cuda --models ViT-B/16 \
            --tasks train infer --precisions bf16 --batch 256 --train-batch 256 \
            --contenders vitkit timm --rounds 3 --min-time 1 --peak-sizes 8192 --out "$O/harness.md"
        ;;
    e2e) e2e e2e_eager ;;
    compiled)
        run harness_compiled 200 python3 benchmarks/throughput.py --device cuda --models ViT-B/16 \
            --tasks train infer --precisions bf16 --batch 256 --train-batch 256 \
            --contenders vitkit-compiled timm-compiled --rounds 3 --min-time 1 --peak-sizes 8192 \
            --out "$O/harness_compiled.md"
        e2e e2e_compiled --set train.compile=true
        ;;
    parallel)  # the smoke recipe alone, under torchrun with DDP, with FSDP: the same losses?
        for mode in one ddp fsdp; do
            extra=()
            [ "$mode" != one ] && extra=(--nproc 1 --set "train.parallel=$mode")
            smoke "par_$mode" 30st "${extra[@]}"
        done
        losses /tmp/par_one /tmp/par_ddp /tmp/par_fsdp | tee "$O/parallel.txt"
        ;;
    resume)  # SIGKILLed after its checkpoint at step 500, then resumed: the uninterrupted losses?
        smoke res_whole 2000st
        rm -rf /tmp/res_cut
        python3 -m vitkit train --recipe smoke --no-progress --set train.device=cuda \
            --set train.duration=2000st --set train.log_every=50st --set train.save_every=500st \
            --set train.eval_every=2000st --run-dir /tmp/res_cut >"$O/res_killed.log" 2>&1 &
        pid=$!
        for _ in $(seq 600); do [ -d /tmp/res_cut/checkpoints/step_00000500 ] && break; sleep 0.1; done
        kill -9 $pid
        wait $pid 2>/dev/null
        python3 -c "import json; print('killed after step', json.loads(open('/tmp/res_cut/metrics.jsonl').readlines()[-1])['step'])"
        smoke res_cut 2000st --set train.save_every=500st
        losses /tmp/res_whole /tmp/res_cut | tee "$O/resume.txt"
        ;;
    jpeg)  # ViT-B/16 from 3,000 JPEGs of 300-500 px as a folder, then as wds shards
        run make_jpegs 120 python3 benchmarks/make_jpeg_folder.py /tmp/jpegs
        run pack 60 python3 -m vitkit data pack /tmp/jpegs /tmp/shards --shard-size 500
        for source in /tmp/jpegs wds:/tmp/shards; do
            name=e2e_${source%%:*}
            [ "$source" = /tmp/jpegs ] && name=e2e_folder
            rm -rf "/tmp/$name"
            run "$name" 150 python3 -m vitkit train --model ViT-B/16 --data "$source" \
                --no-progress --set train.batch_size=256 --set train.duration=60st \
                --set train.log_every=10st --set train.eval_every=60st \
                --set train.save_every=60st --run-dir "/tmp/$name"
        done
        ;;
    *) echo "unknown step $step" ;;
    esac
done
printf '%s\n' "${summary[@]}"
