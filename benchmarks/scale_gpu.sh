#!/usr/bin/env bash
# The scale benchmark on one GPU, in one go: the Qwen3-0.6B-geometry sweep and knockout map at
# 32k and 128k tokens in bfloat16 for W8/S8, CSA and the full-attention twin (each kind in its own
# process; a kind that runs out of memory is recorded with its error, the others go on). The CPU
# run (python benchmarks/scale.py, T = 4096) stays the default; nothing in the tests needs a GPU.
#
#   bash benchmarks/scale_gpu.sh                       # -> benchmarks/results/scale_gpu.json
#   SEQ_LENS="1024" DEVICE=cpu bash benchmarks/scale_gpu.sh   # smoke test without a GPU
set -euo pipefail
cd "$(dirname "$0")/.."
SEQ_LENS=${SEQ_LENS:-"32768 131072"}
DEVICE=${DEVICE:-cuda}
OUT=${OUT:-benchmarks/results/scale_gpu.json}
export OMP_NUM_THREADS=1
# shellcheck disable=SC2086
python benchmarks/scale.py --device "$DEVICE" --dtype bfloat16 --seq-lens $SEQ_LENS --n-per-residue 2 --out "$OUT"
echo "results: $OUT"
