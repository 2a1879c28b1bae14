#!/usr/bin/env bash
# The first CUDA run in one go (issue 43): every backend family on the GPU in float32 and bfloat16
# against CPU float32 (scripts/gpu_check.py), the suite's cuda-marked tests, and the fleet's CUDA-graph
# check; one JSON per part under OUT. Well under 10 minutes on one GPU.
#
#   bash scripts/gpu_check.sh                    # OUT=gpu_check (a folder)
#   DEVICE=cpu bash scripts/gpu_check.sh         # the dry run: the same steps on CPU (the cuda tests skip)
#
# Wheels in .whl/ (packages the machine lacks) are installed into /tmp/site first, where the project's imports fail.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu_check}
DEVICE=${DEVICE:-cuda}
export OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
if ! python3 -c "import transformer_lens, beartype" 2>/dev/null && compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site:$PWD
else
    export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
mkdir -p "$OUT"
python3 scripts/gpu_check.py --device "$DEVICE" --out "$OUT/backends.json" 2>&1 | tee "$OUT/backends.log"
python3 -m pytest -q -m cuda -p no:cacheprovider tests/test_cuda.py --junitxml "$OUT/cuda_tests.xml" 2>&1 | tail -15 | tee "$OUT/cuda_tests.log"
echo "results: $OUT/"
