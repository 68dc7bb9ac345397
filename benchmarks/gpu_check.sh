#!/usr/bin/env bash
# Every GPU step of the project in one command (issues 7, 8, 33), for a machine with a CUDA GPU:
#   1. quiet GPU, timed: benchmarks/bench_gpu_qk.py (bf16 q+k of (1, 4096, 32/8, 128): our CuPy and Triton
#      kernels and the GPU peers as fractions of the measured device-to-device copy, with launch sweeps),
#      benchmarks/bench_cupy.py
#   2. in parallel, untimed: the GPU tests (pytest), the conformance suites `cupy` and `torch:cuda`
#      (fp32/fp16/bf16) and `torch:triton` (fp32/fp16/bf16/fp64), and the GPU peers' conformance
#      (`rope-ref ecosystem`, one process per peer, merged into one page)
#   3. quiet GPU, timed: benchmarks/bench_torch.py (CPU and GPU tables, torch.compile included)
# Each step runs under `timeout`, its log in <results>/logs-<gpu>/; after each phase the results so far
# are packed into <copy-to>/gpu-results.tgz (when --copy-to is given) so a later hang loses nothing.
# Reports: <results>/{bench-*,conformance-*,ecosystem-gpu-*}-<gpu>.json. Exit status: 0 all passed, 1 a
# step failed or an adapter's steps were skipped, 2 nothing GPU-capable is usable.
#
#   bash benchmarks/gpu_check.sh [--wheels DIR] [--results DIR] [--copy-to DIR] [--peer-golden DIR] [--quick]
#                                [--dry-run]
#
# --wheels DIR: packages the machine lacks, installed with `pip --no-index --target` into a temporary
#   site that goes on PYTHONPATH; DIR/*.whl are wheels, and a DIR/<name>/ folder holding packages is put on
#   PYTHONPATH as it is. How DIR was made for the device machine (issue 33; python 3.12, x86-64):
#     pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux2014_x86_64 -d .whl array-api-compat==1.16.0 liger-kernel==0.8.5 setuptools==80.9.0
#     (setuptools >= 77 builds this project's PEP 639 metadata, in case the machine's is older)
#     flash-attn's Triton rotary (no wheel: the sdist builds the CUDA extension): from a checkout of
#     Dao-AILab/flash-attention at v2.8.3.post1, flash_attn/{layers,ops,ops/triton}/{__init__,rotary}.py
#     copied to .whl/flash_attn_rotary/flash_attn/ with an __init__.py that only sets __version__ (the
#     real one imports the compiled flash_attn_2_cuda, which the rotary path never uses), and a
#     flash_attn-2.8.3.post1.dist-info/METADATA (Name, Version) beside it so the peer reports its version.
# (pytest runs with -p no:benchmark: the device image's pytest-benchmark refuses xdist with an error.)
# --peer-golden DIR: also run the GPU peers on the golden set in DIR (pages then merge into a main page
#   computed on that set; ecosystem-gpu-<gpu>-alt.json).
# --quick: skip the sweeps of bench_gpu_qk.py, fewer rounds of bench_torch.py (a shorter run).
# --dry-run: print each step's command instead of running it, as if cupy, torch+CUDA and triton were usable
#   (checks the script's own logic on a machine without a GPU).
# The project itself is installed editable (--no-deps --no-build-isolation) when it is not importable.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
export PYTHONUNBUFFERED=1
wheels="" out=docs/results copy_to="" quick=0 dry=0 peer_golden=""
while [ $# -gt 0 ]; do
  case "$1" in
    --wheels) wheels=$2; shift 2 ;;
    --results) out=$2; shift 2 ;;
    --copy-to) copy_to=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --peer-golden) peer_golden=$2; shift 2 ;;
    --dry-run) dry=1; shift ;;
    *) echo "gpu_check: unknown argument $1" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
t_start=$(date +%s)
elapsed() { echo $(( $(date +%s) - t_start )); }

if [ -n "$wheels" ]; then
  site=$(mktemp -d /tmp/rope-ref-site.XXXX)
  if compgen -G "$wheels/*.whl" >/dev/null; then
    python -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$site" \
      "$wheels"/*.whl || { echo "gpu_check: installing the wheels in $wheels failed"; exit 2; }
  fi
  extra="$site"
  for d in "$wheels"/*/; do  # folders holding a package (not, say, a golden set carried beside them)
    compgen -G "$d*/__init__.py" >/dev/null && extra="$extra:$(cd "$d" && pwd)"
  done
  export PYTHONPATH="$extra${PYTHONPATH:+:$PYTHONPATH}"
  echo "gpu_check: PYTHONPATH=$PYTHONPATH"
fi
if ! python -c "import rope_ref.backends, rope_ref.peers" 2>/dev/null; then
  echo "== installing rope-ref (editable, no dependencies)"
  python -m pip install -q --no-deps --no-build-isolation -e . || { echo "gpu_check: install failed"; exit 2; }
fi
rr=(rope-ref)
command -v rope-ref >/dev/null || rr=(python -m rope_ref.cli)

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1 | tr -c 'A-Za-z0-9\n' '-' | tr -s '-')
gpu=${gpu:-unknown-gpu}
gpu=${gpu%-}
logs="$out/logs-$gpu"
mkdir -p "$logs"
summary="$logs/summary.txt"
: > "$summary"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem,temperature.gpu,power.draw \
  --format=csv > "$out/gpu-$gpu.csv" 2>/dev/null || true
python - <<'EOF' > "$logs/environment.txt" 2>&1
import importlib, platform, sys
print("python", sys.version.split()[0], platform.machine())
for m in ("numpy", "torch", "triton", "cupy", "mpmath", "array_api_compat", "flash_attn", "liger_kernel",
          "flashinfer", "vllm", "transformer_engine", "rope_ref"):
    try:
        print(m, getattr(importlib.import_module(m), "__version__", "?"))
    except Exception as exc:  # noqa: BLE001
        print(m, "NOT IMPORTABLE:", type(exc).__name__, str(exc).splitlines()[0][:200] if str(exc) else "")
import torch
print("cuda", torch.version.cuda, "device", torch.cuda.get_device_name() if torch.cuda.is_available() else None)
EOF
cat "$logs/environment.txt"

have_cupy=0 have_torch=0 have_triton=0
if [ "$dry" = 1 ]; then
  have_cupy=1 have_torch=1 have_triton=1
else
have_cupy=0
python -c "import rope_ref.backends.cupy as c, sys; ok, why = c.available(); print('cupy:', ok, why); sys.exit(0 if ok else 1)" \
  && have_cupy=1
have_torch=0
python -c "import torch, sys; print('torch', torch.__version__); sys.exit(0 if torch.cuda.is_available() else 1)" \
  && have_torch=1
have_triton=0
[ "$have_torch" = 1 ] && python -c "import triton" 2>/dev/null && have_triton=1
fi
if [ "$have_cupy" = 0 ] && [ "$have_torch" = 0 ]; then
  echo "gpu_check: neither cupy nor a CUDA-enabled torch is usable"
  exit 2
fi
status=0
[ "$have_cupy" = 1 ] || { echo "== cupy steps skipped (cupy is not usable)"; status=1; }
[ "$have_torch" = 1 ] || { echo "== torch steps skipped (torch without CUDA)"; status=1; }
[ "$have_torch" = 0 ] || [ "$have_triton" = 1 ] || { echo "== Triton steps skipped (no triton)"; status=1; }

# step NAME SECONDS CMD...: run in the foreground under timeout, log to $logs/NAME.log and the terminal
step() {
  local name=$1 limit=$2 t0 rc
  shift 2
  t0=$(date +%s)
  echo "== $name (limit ${limit}s, at $(elapsed)s)"
  if [ "$dry" = 1 ]; then echo "  would run: $*"; return 0; fi
  timeout -k 10 "$limit" "$@" 2>&1 | tee "$logs/$name.log"
  rc=${PIPESTATUS[0]}
  echo "$name rc=$rc $(( $(date +%s) - t0 ))s" | tee -a "$summary"
  [ "$rc" = 0 ] || status=1
}
# bg NAME SECONDS CMD...: the same in the background (output only in the log); `join` waits for them all
pids=() names=() starts=()
bg() {
  local name=$1 limit=$2
  shift 2
  echo "== $name started in the background (limit ${limit}s, at $(elapsed)s)"
  # many jobs share the cores: two threads each for torch/OpenMP
  if [ "$dry" = 1 ]; then echo "  would run: $*"; return 0; fi
  OMP_NUM_THREADS=2 timeout -k 10 "$limit" "$@" > "$logs/$name.log" 2>&1 &
  pids+=($!) names+=("$name") starts+=("$(date +%s)")
}
join() {
  local i rc
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}"
    rc=$?
    echo "${names[$i]} rc=$rc $(( $(date +%s) - starts[i] ))s (ended by $(elapsed)s)" | tee -a "$summary"
    tail -n 4 "$logs/${names[$i]}.log" | sed "s/^/  ${names[$i]}: /"
    [ "$rc" = 0 ] || status=1
  done
  pids=() names=() starts=()
}
pack() {
  [ -n "$copy_to" ] || return 0
  mkdir -p "$copy_to"
  tar czf "$copy_to/gpu-results.tgz" "$out"/*"$gpu"* 2>/dev/null
  cp "$summary" "$copy_to/summary.txt" 2>/dev/null
  echo "(packed $(du -h "$copy_to/gpu-results.tgz" | cut -f1) at $(elapsed)s)"
}

# -- 1. quiet GPU: the q+k bandwidth table, the CuPy benchmark -----------------------------------------------
sweep=(--sweep)
[ "$quick" = 1 ] && sweep=()
step bench-gpu-qk 130 python benchmarks/bench_gpu_qk.py "${sweep[@]}" --json "$out/bench-gpu-qk-$gpu.json"
[ "$have_cupy" = 1 ] && step bench-cupy 40 python benchmarks/bench_cupy.py --json "$out/bench-cupy-$gpu.json"
pack

# -- 2. correctness, in parallel --------------------------------------------------------------------------
tests=()
[ "$have_cupy" = 1 ] && tests+=(tests/backends/test_cupy_backend.py)
[ "$have_torch" = 1 ] && tests+=(tests/backends/test_torch_backend.py tests/backends/test_torch_conformance.py
  tests/backends/test_torch_multiaxis.py tests/peers/test_gpu_peers_kernel_shapes.py)
bg pytest-gpu 190 python -m pytest -q -rs -p no:cacheprovider -p no:benchmark -n 4 "${tests[@]}"
if [ "$have_triton" = 1 ]; then  # the Triton kernel file runs the whole suite per precision: own process
  bg pytest-triton 190 python -m pytest -q -rs -p no:cacheprovider -p no:benchmark -n 4 tests/backends/test_torch_triton_kernel.py \
    tests/backends/test_torch_triton.py
fi
suite() {  # suite BACKEND PRECISION: one conformance run with its JSON report
  local tag=${1//:/-}
  bg "conformance-$tag-$2" 190 "${rr[@]}" conformance run --backend "$1" --precision "$2" -q \
    --json-report "$out/conformance-$tag-$2-$gpu.json"
}
if [ "$have_cupy" = 1 ]; then for p in fp32 fp16 bf16; do suite cupy $p; done; fi
if [ "$have_torch" = 1 ]; then for p in fp32 fp16 bf16; do suite torch:cuda $p; done; fi
if [ "$have_triton" = 1 ]; then for p in fp32 fp16 bf16 fp64; do suite torch:triton $p; done; fi
eco="/tmp/rope-ref-ecosystem-$gpu"
rm -rf "$eco"
runnable=()
if [ "$have_torch" = 1 ]; then  # one process per GPU peer that can run; the others only say why not
  idle=()
  for peer in flash-attn liger-kernel vllm transformer-engine flashinfer; do
    if [ "$dry" = 1 ] && [ "$peer" != vllm ] || python -c "import sys; from rope_ref.peers import peer_status as s; ok, why = s('$peer'); print('$peer:', ok, why); sys.exit(0 if ok else 1)"; then
      runnable+=("$peer")
    else
      idle+=("$peer")
    fi
  done
  for peer in "${runnable[@]}"; do
    bg "ecosystem-$peer" 190 "${rr[@]}" ecosystem --peers "$peer" --out "$eco/main/$peer" --timeout 60
    [ -z "$peer_golden" ] || bg "ecosystem-$peer-alt" 190 "${rr[@]}" ecosystem --peers "$peer" \
      --out "$eco/alt/$peer" --timeout 60 --golden "$peer_golden"
  done
  if [ "${#idle[@]}" -gt 0 ]; then
    bg ecosystem-not-run 120 "${rr[@]}" ecosystem --peers "$(IFS=,; echo "${idle[*]}")" --out "$eco/main/not-run"
    [ -z "$peer_golden" ] || bg ecosystem-not-run-alt 120 "${rr[@]}" ecosystem \
      --peers "$(IFS=,; echo "${idle[*]}")" --out "$eco/alt/not-run" --golden "$peer_golden"
  fi
fi
join
merge_pages() {  # merge_pages KIND NAME [--golden DIR]: the per-peer pages of $eco/KIND into one
  local kind=$1 name=$2 f merge=()
  shift 2
  for f in "$eco/$kind"/*/ecosystem.json; do [ -f "$f" ] && merge+=(--merge "$f"); done
  [ "${#merge[@]}" -gt 0 ] || [ "$dry" = 1 ] || return 0
  step "ecosystem-merge-$kind" 40 "${rr[@]}" ecosystem "${merge[@]}" "$@" --out "$eco/$kind/merged" \
    --machine "$machine"
  cp "$eco/$kind/merged/ecosystem.json" "$out/$name.json" 2>/dev/null
  cp "$eco/$kind/merged/ecosystem.md" "$out/$name.md" 2>/dev/null
}
if [ "$have_torch" = 1 ]; then
  machine="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n1), $(python -c 'import torch; print("torch", torch.__version__)')"
  merge_pages main "ecosystem-gpu-$gpu"
  [ -z "$peer_golden" ] || merge_pages alt "ecosystem-gpu-$gpu-alt" --golden "$peer_golden"
fi
pack

# -- 3. quiet GPU: the torch benchmark ----------------------------------------------------------------------
if [ "$have_torch" = 1 ]; then
  rounds=15
  [ "$quick" = 1 ] && rounds=5
  step bench-torch 100 python benchmarks/bench_torch.py --rounds "$rounds" --json "$out/bench-torch-$gpu.json"
  if [ ! -s "$out/bench-torch-$gpu.json" ]; then  # the full run failed: keep at least the GQA tables
    step bench-torch-gqa 60 python benchmarks/bench_torch.py --gqa-only --rounds "$rounds" \
      --json "$out/bench-torch-gqa-$gpu.json"
  fi
fi
pack
echo "== summary (status $status, $(elapsed)s)"
cat "$summary"
exit $status
