#!/usr/bin/env bash
# One command for the GPU steps of the CuPy adapter (issue 8) and the torch adapter (issue 7):
#   cupy (when importable):        GPU tests, conformance `cupy` fp32/fp16/bf16, bench_cupy.py
#   torch (when it sees a GPU):    GPU tests of the torch adapter, conformance `torch:cuda`
#                                  fp32/fp16/bf16, bench_torch.py (incl. torch.compile of rt.apply)
#   triton (with a CUDA torch):    the Triton kernel's tests compiled on the GPU, conformance
#                                  `torch:triton` fp32/fp16/bf16/fp64 (bench_torch.py times it too)
# Reports go to docs/results/, named after the GPU. Exit status: 1 if any step failed or one adapter's
# steps had to be skipped (their results are missing), 2 if neither cupy nor a CUDA torch is usable.
#
#   bash benchmarks/gpu_check.sh            # needs a CUDA GPU and cupy-cuda12x/13x and/or torch+CUDA
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
out=docs/results
mkdir -p "$out"
status=0

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1 | tr -c 'A-Za-z0-9\n' '-' | tr -s '-')
gpu=${gpu:-unknown-gpu}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > "$out/gpu-$gpu.csv" 2>/dev/null || true

have_cupy=0
python -c "import cupy; print('cupy', cupy.__version__)" && have_cupy=1
have_torch=0
python -c "import torch, sys; print('torch', torch.__version__); sys.exit(0 if torch.cuda.is_available() else 1)" \
  && have_torch=1
if [ "$have_cupy" = 0 ] && [ "$have_torch" = 0 ]; then
  echo "gpu_check: neither cupy nor a CUDA-enabled torch is usable"
  exit 2
fi

if [ "$have_cupy" = 1 ]; then
  echo "== GPU tests: cupy"
  python -m pytest -q -m gpu tests/backends/test_cupy_backend.py -p no:cacheprovider || status=1
  for p in fp32 fp16 bf16; do
    echo "== conformance: cupy $p"
    rope-ref conformance run --backend cupy --precision "$p" -q \
      --json-report "$out/conformance-cupy-$p-$gpu.json" || status=1
  done
else
  echo "== cupy steps skipped (cupy is not importable)"; status=1
fi

if [ "$have_torch" = 1 ]; then
  echo "== GPU tests: torch"
  python -m pytest -q -m gpu tests/backends/test_torch_backend.py tests/backends/test_torch_conformance.py \
    -p no:cacheprovider || status=1
  for p in fp32 fp16 bf16; do
    echo "== conformance: torch:cuda $p"
    rope-ref conformance run --backend torch:cuda --precision "$p" -q \
      --json-report "$out/conformance-torch-cuda-$p-$gpu.json" || status=1
  done
  if python -c "import triton" 2>/dev/null; then
    echo "== GPU tests: the torch adapter's Triton kernel (compiled)"
    python -m pytest -q -rs tests/backends/test_torch_triton_kernel.py -p no:cacheprovider || status=1
    for p in fp32 fp16 bf16 fp64; do
      echo "== conformance: torch:triton $p"
      rope-ref conformance run --backend torch:triton --precision "$p" -q \
        --json-report "$out/conformance-torch-triton-$p-$gpu.json" || status=1
    done
  else
    echo "== Triton steps skipped (triton is not importable)"; status=1
  fi
else
  echo "== torch steps skipped (torch without CUDA)"; status=1
fi

if [ "$have_cupy" = 1 ]; then
  echo "== benchmark: cupy"
  python benchmarks/bench_cupy.py --json "$out/bench-cupy-$gpu.json" || status=1
fi
if [ "$have_torch" = 1 ]; then
  echo "== benchmark: torch (CPU and GPU tables; GPU includes torch.compile of rt.apply)"
  python benchmarks/bench_torch.py --json "$out/bench-torch-$gpu.json" || status=1
fi
exit $status
