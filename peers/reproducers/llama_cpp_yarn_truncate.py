"""llama.cpp ignores YaRN's ``truncate: false`` (gpt-oss): ggml's ``ggml_rope_yarn_corr_dims`` always floors
the start and ceils the end of the correction range, and ``convert_hf_to_gguf.py`` writes no ``truncate``.
The same bug was fixed in vLLM (vllm-project/vllm#27722, PR #28244) and SGLang (PR #14270).

Compares ggml's correction range with HF ``_compute_yarn_parameters`` with ``truncate=False`` (unrounded,
float64 restatement) for gpt-oss's parameters. Exit status 1 while the bug is present.
"""

import ctypes
import math
import sys

import ggml

n_dims, n_ctx_orig, base, beta_fast, beta_slow = 64, 4096, 150000.0, 32.0, 1.0
dims = (ctypes.c_float * 2)()
ggml.ggml_rope_yarn_corr_dims(n_dims, n_ctx_orig, base, beta_fast, beta_slow, dims)


def corr_dim(rot: float) -> float:  # HF find_correction_dim
    return n_dims * math.log(n_ctx_orig / (rot * 2 * math.pi)) / (2 * math.log(base))


want = (max(corr_dim(beta_fast), 0.0), min(corr_dim(beta_slow), n_dims - 1))
print(f"ggml correction range {tuple(dims)}, HF with truncate=False {want}")
sys.exit(1 if abs(dims[0] - want[0]) > 1e-4 or abs(dims[1] - want[1]) > 1e-4 else 0)
