#!/usr/bin/env bash
# The zoo at a larger width on one GPU, in one go: every member at d_model 256 with 8 KV heads
# (8 query heads of size 64), two seeds, the recipe rule's data, steps and schedule otherwise
# unchanged; then the same table as the CPU zoo. The CPU zoo (python -m experiments.zoo.train) stays the default.
#
#   bash experiments/zoo/train_gpu.sh                    # OUT=runs/zoo-gpu, JOBS=12 runs at a time
#   OUT=/tmp/z STEPS=20 DEVICE=cpu JOBS=2 bash experiments/zoo/train_gpu.sh   # smoke test without a GPU
#
# Writes OUT/checkpoints/zoo-NAME-d256-kv8-sN.{safetensors,json,metrics.jsonl} and
# OUT/results/zoo.{md,json,csv}. Runs share the GPU as separate processes (one CPU thread each);
# an interrupted pass resumes: shipped runs are skipped, unfinished ones continue from their checkpoint.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-runs/zoo-gpu}
JOBS=${JOBS:-12}
WIDTH=${WIDTH:-256}
KV_HEADS=${KV_HEADS:-8}
DEVICE=${DEVICE:-cuda}
N_PER_RESIDUE=${N_PER_RESIDUE:-256}
export OMP_NUM_THREADS=1
extra=()
if [[ -n "${STEPS:-}" ]]; then extra+=(--steps "$STEPS"); fi
python -m experiments.zoo.train --jobs "$JOBS" --width "$WIDTH" --kv-heads "$KV_HEADS" --device "$DEVICE" \
    --eval-examples "$N_PER_RESIDUE" --runs "$OUT/runs" --ship "$OUT/checkpoints" "${extra[@]}" ${MEMBERS:+--members $MEMBERS}
python -m experiments.zoo.table --checkpoints "$OUT/checkpoints" --out "$OUT/results" \
    --width "$WIDTH" --kv-heads "$KV_HEADS" --n-per-residue "$N_PER_RESIDUE"
echo "table: $OUT/results/zoo.md"
