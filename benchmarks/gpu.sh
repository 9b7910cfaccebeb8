#!/usr/bin/env bash
# The benchmark suite on an accelerator, plus the paper-size CPU rows pinned to two cores.
#
#   bash benchmarks/gpu.sh OUT_DIR [PYTHON]          (CPU2=1 to add the 2-core CPU rows)
#
# Installs nothing: PYTHON (default python3) must already import jax with its CUDA plugin
# (e.g. `pip install -U "jax[cuda12]"` or the cuda13 wheels), equinox, optax, networkx, numpy
# and scipy. Run from the repository root (dgsgld is imported from the working tree).
# About 5 minutes on one H200: the full grid, PRNG options, the profile, memory and sparse
# sections on the GPU (NumPy baselines run on the host CPU), then the data-size benchmark. With CPU2=1, about 2 minutes more:
# the paper-size rows on the host CPU pinned to 2 cores (a quiet 2-core measurement).
set -euo pipefail
out=${1:?usage: bash benchmarks/gpu.sh OUT_DIR [PYTHON]}
py=${2:-python3}
mkdir -p "$out"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
"$py" -c "import jax; print(jax.__version__, jax.devices())" | tee "$out/devices.txt"
XLA_PYTHON_CLIENT_PREALLOCATE=false "$py" -m benchmarks.run --out "$out/gpu.json" \
    --sections grid,recompile,prng,profile,memory,sparse 2>&1 | tee "$out/gpu.log"
# Time per step against the local data size, each estimator, blackjax's SGLD (when installed)
# and the BNN on the same device: benchmarks/datasize.py.
XLA_PYTHON_CLIENT_PREALLOCATE=false "$py" -m benchmarks.datasize --rounds 3 \
    --out "$out/datasize.json" 2>&1 | tee "$out/datasize.log"
if [ "${CPU2:-0}" = 1 ] && command -v taskset >/dev/null; then
    JAX_PLATFORMS=cpu taskset -c 0,1 "$py" -m benchmarks.run --out "$out/cpu2.json" \
        --only paper --sections grid,prng 2>&1 | tee "$out/cpu2.log"
fi
