#!/usr/bin/env bash
# Study cells on one GPU in one device call (issue 38, items 2 and 3): study/run.py with --device cuda, the
# runs sharing the card through CUDA MPS, the new runs' archive packed into $OUT/archive.tar.gz.
#
#   bash study/gpu_study.sh --prepare       # here, once: the wheels the device image lacks, into .whl/ (ignored)
#   bash study/gpu_study.sh STUDY_ARGS...   # on the device (carry .whl, and .corpora for multilingual cells)
#   SMOKE=1 bash study/gpu_study.sh STUDY_ARGS...   # here, on the CPU: the same steps, 40-step recipes
#
# e.g. the known-answer cells' seeds 6-8 (30 runs, two waves of 15):
#   bash study/gpu_study.sh --setups misaligned duplicated --regimes A --seeds 6 7 8 \
#       --strategies proportional oracle multiuat-enteos multidds-s mixing-law
# The driver trains a group's runs, then scores and archives them: size the selection so that every group ends
# inside BUDGET seconds (default 540; the driver is stopped then, and a group still training archives nothing).
# JOBS runs at a time (default 15, one CPU core each). Back here: tar -xzf archive.tar.gz -C study/archive/unpacked/study, then
# python study/report.py. Multilingual cells read ../shared/corpora: copy the corpora they need into
# .corpora/ (ignored) and carry it; the script links it there.
set -u
OUT=${OUT:-$PWD/gpu_study_out}
PY=${PYTHON:-python3}
WHEELS="transformers==5.24.0 tokenizers==0.23.3 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19 fsspec==2026.9.0"

if [ "${1:-}" = --prepare ]; then  # the device has Python 3.12 and no internet: wheels of the CPU runs' versions
    grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo /.whl/ >> .git/info/exclude
    grep -qx '/.corpora/' .git/info/exclude 2>/dev/null || echo /.corpora/ >> .git/info/exclude
    for wheel in $WHEELS; do
        "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
            --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
            -d .whl "$wheel" || exit 1
    done
    ls .whl
    exit 0
fi

mkdir -p "$OUT"
ARCHIVE=$(mktemp -d)  # only this call's runs come back
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_DATASETS_DISABLE_PROGRESS_BARS=1
if [ "${SMOKE:-0}" = 1 ]; then
    RECIPES=$(mktemp -d)
    for recipe in study/recipes/*.yaml; do  # same recipes, 40 steps: checks the plumbing, measures nothing
        sed -e 's/^max_steps: .*/max_steps: 40/' -e 's/^save_steps: .*/save_steps: 20/' \
            -e 's/^warmup_steps: .*/warmup_steps: 4/' -e 's/^update_every: .*/update_every: 20/' \
            "$recipe" > "$RECIPES/$(basename "$recipe")"
    done
    DRIVER=(--recipes "$RECIPES" --runs "$(mktemp -d)" --jobs "${JOBS:-2}")
else
    SITE=/tmp/site
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl \
        || exit 1
    "$PY" -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir --target "$SITE" . || exit 1
    export PYTHONPATH=$SITE PATH=$SITE/bin:$PATH
    nvidia-cuda-mps-control -d 2>/dev/null && echo "CUDA MPS started"
    if [ -d .corpora ] && [ ! -e ../shared/corpora ]; then mkdir -p ../shared && ln -s "$PWD/.corpora" ../shared/corpora; fi
    DRIVER=(--device cuda --jobs "${JOBS:-15}")
fi
{ date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null
  "$PY" -c "import torch, transformers, datasets; print('torch', torch.__version__, 'transformers',
transformers.__version__, 'datasets', datasets.__version__)"; } 2>&1 | tee "$OUT/driver.log"
start=$(date +%s)
timeout --kill-after=20 "${BUDGET:-540}" "$PY" study/run.py --archive "$ARCHIVE" "${DRIVER[@]}" "$@" \
    >> "$OUT/driver.log" 2>&1
echo "driver: rc=$?, $(( $(date +%s) - start )) s" | tee -a "$OUT/driver.log"
grep -E "runs selected|: trained|: scored|error" "$OUT/driver.log" | tail -n 60
tar -czf "$OUT/archive.tar.gz" -C "$ARCHIVE/unpacked/study" . && echo "archive: $(find "$ARCHIVE" -name run.json | wc -l) runs"
