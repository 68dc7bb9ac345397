#!/usr/bin/env bash
# One command for the GPU steps of the CuPy adapter (issue 8): GPU tests, the conformance suite for
# `cupy` (fp32, fp16, bf16) and `torch:cuda` when torch sees a GPU, then the bandwidth benchmark.
# Reports go to docs/results/, named after the GPU. Exit status: non-zero if any step failed.
#
#   bash benchmarks/gpu_check.sh            # needs cupy-cuda12x or cupy-cuda13x and a CUDA GPU
set -uo pipefail
cd "$(dirname "$0")/.."
out=docs/results
mkdir -p "$out"
status=0

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1 | tr -c 'A-Za-z0-9\n' '-' | tr -s '-')
gpu=${gpu:-unknown-gpu}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$out/gpu-$gpu.csv" 2>/dev/null || true
python -c "import cupy; print('cupy', cupy.__version__)" || { echo "gpu_check: cupy is not importable"; exit 2; }

echo "== GPU tests"
python -m pytest -q -m gpu tests/test_cupy_backend.py -p no:cacheprovider || status=1

for p in fp32 fp16 bf16; do
  echo "== conformance: cupy $p"
  rope-ref conformance run --backend cupy --precision "$p" -q \
    --json-report "$out/conformance-cupy-$p-$gpu.json" || status=1
done

if python -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
  for p in fp32 fp16 bf16; do
    echo "== conformance: torch:cuda $p"
    rope-ref conformance run --backend torch:cuda --precision "$p" -q \
      --json-report "$out/conformance-torch-cuda-$p-$gpu.json" || status=1
  done
else
  echo "== conformance: torch:cuda skipped (torch without CUDA)"
fi

echo "== benchmark"
python benchmarks/bench_cupy.py --json "$out/bench-cupy-$gpu.json" || status=1
exit $status
