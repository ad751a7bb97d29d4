#!/usr/bin/env bash
# Every GPU measurement of issue 28 in one go, ~9 minutes on one H100/H200, the baselines rerun in the same call:
#   1. MC rewards at K=30 in bf16, uat-hf vs the authors' loop (benchmarks/mc_dropout.py);
#   2. transformer_base at the paper's S/K (S=100, K=3, 4,096-token training batches, ~1,024-token dev batches),
#      bf16 then fp32: static vs MultiUAT vs MultiDDS-S, median of 3 interleaved repeats, 200 steps each;
#   3. NLLB-200-distilled-600M-sized M2M100 config (random weights, 256,206-entry vocabulary), bf16, K=30, N=8:
#      the CUDA peak inside an update against the peak inside a training step, and the times;
#   4. one MultiUAT update and one MultiDDS-S update on transformer_base (K=30, N=4), profiled (torch.profiler).
# Results under $OUT (at most 8 files come back from the device tool): summary.txt (every table, with the card),
# all.log (everything printed), and one JSON per measurement.
#
#   bash benchmarks/gpu_targets.sh            # on the GPU machine, from the repository root
#   SMOKE=1 bash benchmarks/gpu_targets.sh    # the same commands, 2 steps, tiny sizes, on the CPU (~minutes)
set -u
OUT=${OUT:-$PWD/gpu_targets_out}
mkdir -p "$OUT"
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
export HF_DATASETS_DISABLE_PROGRESS_BARS=1
PY=${PYTHON:-python3}
SUMMARY=$OUT/summary.txt

if [ "${SMOKE:-0}" = 1 ]; then  # every command, minimal sizes: checks that the script runs, measures nothing
    SMALL=(--preset tiny --examples 300 --vocab 1000 --max-tokens 256 --dev-batch-tokens 128)
    BASE=("${SMALL[@]}" --steps 4 --update-every 2 --mc-samples 2 --repeats 1)
    NLLB=(--preset nllb-600m-config --examples 300 --vocab 1000 --corpora 8 --max-tokens 64 --dev-batch-tokens 64
          --steps 3 --update-every 2 --mc-samples 2 --repeats 1)
    MC=(--preset tiny --vocab 1000 --ks 2 --repeats 1)
    PROFILE=("${SMALL[@]}" --steps 3 --mc-samples 2)
    LIMIT=600
else
    BASE=(--preset transformer_base --max-tokens 4096 --dev-batch-tokens 1024 --steps 200 --update-every 100
          --mc-samples 3 --repeats 3)
    NLLB=(--preset nllb-600m-config --corpora 8 --max-tokens 4096 --dev-batch-tokens 1024 --steps 20
          --update-every 10 --mc-samples 30 --repeats 1)
    MC=(--ks 10 30 --repeats 3)
    PROFILE=(--preset transformer_base --max-tokens 4096 --dev-batch-tokens 1024 --steps 3 --mc-samples 30)
    LIMIT=0  # per-step limits below
fi

# step NAME SECONDS SCRIPT ARGS...: run one measurement under a time limit; its table goes to summary.txt.
step() {
    local name=$1 limit=$2 start rc
    shift 2
    [ "$LIMIT" != 0 ] && limit=$LIMIT
    echo "== $name: $PY $*" | tee -a "$SUMMARY"
    start=$(date +%s)
    timeout "$limit" "$PY" "$@" > "$OUT/$name.log" 2>&1
    rc=$?
    grep -v -e "examples/s" -e "it/s]" -e "Warning" "$OUT/$name.log" | tail -n 40 >> "$SUMMARY"
    echo "-- $name: rc=$rc, $(( $(date +%s) - start )) s" | tee -a "$SUMMARY"
    { echo "######## $name"; cat "$OUT/$name.log"; } >> "$OUT/all.log"
    rm -f "$OUT/$name.log"
}

{
    date -u
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || echo "no nvidia-smi"
    "$PY" -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__,
'cuda', torch.cuda.is_available() and torch.cuda.get_device_name())"
} 2>&1 | tee -a "$SUMMARY"

step mc_dropout_bf16 60 benchmarks/mc_dropout.py --precision bf16 "${MC[@]}"
step base_bf16 150 benchmarks/training_overhead.py "${BASE[@]}" --precision bf16 \
    --strategies proportional multiuat multidds-s --json "$OUT/base_bf16.json"
step base_fp32 170 benchmarks/training_overhead.py "${BASE[@]}" --precision fp32 \
    --strategies proportional multiuat multidds-s --json "$OUT/base_fp32.json"
step nllb_bf16 110 benchmarks/training_overhead.py "${NLLB[@]}" --precision bf16 --memory --no-analytic \
    --strategies proportional multiuat --json "$OUT/nllb_bf16.json"
step profile_base 60 benchmarks/profile_update.py "${PROFILE[@]}" --torch-profiler --json "$OUT/profile.json"
date -u | tee -a "$SUMMARY"
