#!/usr/bin/env bash
# The long-row experiment on a CUDA machine in one go, then its files packed for the trip back.
#
#   bash experiments/long_rows/gpu.sh                 # OUT=runs/long_rows_gpu, DEST=$OUT/packed (or $OUT on a device machine)
#   bash experiments/long_rows/gpu.sh --smoke --device cpu --eval-examples 4 --jobs 1 --members full w8s8
#
# Wheels in .whl/ (packages the machine lacks) are installed into /tmp/site first, where the project's imports fail. Arguments go to
# `python -m experiments.long_rows.gpu`.
set -uo pipefail
cd "$(dirname "$0")/../.."
RUN=${RUN:-runs/long_rows_gpu}
DEST=${OUT:-$RUN/packed}
export OMP_NUM_THREADS=1 PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
if ! python3 -c "import transformer_lens, beartype" 2>/dev/null && compgen -G ".whl/*.whl" >/dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
    export PYTHONPATH=/tmp/site:$PWD
else
    export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi
mkdir -p "$DEST"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | tee "$RUN.gpu.txt" || true
python3 -m experiments.long_rows.gpu --out "$RUN" "$@" 2>&1 | tee "$RUN.log"
code=${PIPESTATUS[0]}
cp "$RUN.log" "$RUN/gpu.log" 2>/dev/null; cp "$RUN.gpu.txt" "$RUN/gpu.txt" 2>/dev/null
python3 -m experiments.long_rows.pack "$RUN" "$DEST"
exit "$code"
