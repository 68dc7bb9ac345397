#!/usr/bin/env bash
# llama.cpp's host code (libllama and the GGUF converter) for the reproducers of llama.cpp's host-side findings.
#
# ggml-python (CI's llama.cpp peer) ships ggml's operators only. Three findings live in the code that chooses
# ggml's arguments: src/llama-context.cpp (the YaRN attention factor) and convert_hf_to_gguf.py's
# conversion/*.py (the Llama 3 frequency factors, YaRN's mscale). llama-cpp-python 0.3.36 vendors llama.cpp at
# a fixed commit: its source distribution is built here (libllama, ~10 min on 2 cores; no tools, no server, no
# network at run time) into its own virtual environment, and the vendored source tree (converter and gguf-py)
# is kept beside it for the converter's reproducer.
#
#   bash peers/envs/llama_cpp.sh [VENV_DIR]      # default .venv-llama-cpp
#   VENV_DIR/bin/python peers/reproducers/llama_cpp_host_yarn_attention_factor.py    # exits 1 while the bug is
#   VENV_DIR/bin/python peers/reproducers/llama_cpp_host_yarn_mscale_unread.py       # present, 0 once fixed
#   VENV_DIR/bin/python peers/reproducers/llama_cpp_host_llama3_factors.py
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV="${1:-${LLAMA_CPP_VENV:-.venv-llama-cpp}}"
VERSION=0.3.36

python3 -m venv "$VENV"
# shellcheck disable=SC1091
source "$VENV/bin/activate"
python -m pip install --quiet --upgrade pip
python -m pip install --quiet "numpy" "typing-extensions" "diskcache" "jinja2" "scikit-build-core" "pyyaml" \
    "torch==2.13.0" "transformers==5.23.0" "sentencepiece" "safetensors"   # gguf-py and the converter's imports
python -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$VERSION" -d "$VENV/sdist"
CMAKE_ARGS="-DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF \
-DLLAVA_BUILD=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_SERVER=OFF" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
    python -m pip install --quiet --no-deps --no-build-isolation "$VENV/sdist/llama_cpp_python-$VERSION.tar.gz"
mkdir -p "$VENV/src"
tar -xzf "$VENV/sdist/llama_cpp_python-$VERSION.tar.gz" -C "$VENV/src" \
    "llama_cpp_python-$VERSION/vendor/llama.cpp/conversion" "llama_cpp_python-$VERSION/vendor/llama.cpp/gguf-py"
# the reproducers find the vendored converter and gguf-py through this file
echo "$(cd "$VENV/src/llama_cpp_python-$VERSION/vendor/llama.cpp" && pwd)" > "$VENV/llama-cpp-src.txt"
python -c "import llama_cpp; print('llama_cpp', llama_cpp.__version__, 'imports OK')"
