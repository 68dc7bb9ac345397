"""llama.cpp's converter computes Llama 3's ``rope_freqs`` over ``head_dim``, not the rotary dimension.

conversion/llama.py ``LlamaModel.generate_extra_tensors`` (llama.cpp as vendored by llama-cpp-python 0.3.36):
``dim = head_dim``; ``freqs = 1 / base ** (arange(0, dim, 2) / dim)``. With ``partial_rotary_factor`` below 1
the model rotates ``rotary_dim = head_dim * partial_rotary_factor`` dimensions, whose frequencies are
``base ** (-2i / rotary_dim)`` (HF ``_compute_llama3_parameters`` over ``_compute_default_rope_parameters``'
``dim``); libllama reads the first ``n_rot / 2`` factors of the tensor, which belong to other frequencies.
(The other half of the earlier finding, ``original_max_position_embeddings`` read from the config's top level,
is fixed in this version: it now comes from ``rope_parameters``; checked here too.)

Runs the vendored converter's own method on a config with head_dim 128, partial_rotary_factor 0.5,
rope_theta 500000, llama3 factor 8 / 1 / 4, original_max_position_embeddings 4096 (inside rope_parameters),
and compares with a float64 restatement of HF's rule. Exit status 1 while the bug is present, 0 once fixed, 2
without llama.cpp's source (``bash peers/envs/llama_cpp.sh``).
"""

import math
import sys
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _llama_cpp_host import vendored_source  # noqa: E402

vendored_source()
from conversion.llama import LlamaModel  # noqa: E402  (the vendored converter)

head_dim, partial, theta = 128, 0.5, 500000.0
rope = {"rope_type": "llama3", "rope_theta": theta, "factor": 8.0, "low_freq_factor": 1.0,
        "high_freq_factor": 4.0, "original_max_position_embeddings": 4096, "partial_rotary_factor": partial}
stub = types.SimpleNamespace(
    rope_parameters=rope,
    hparams={"head_dim": head_dim, "hidden_size": 4096, "num_attention_heads": 32,
             "partial_rotary_factor": partial, "rope_parameters": rope},
    format_tensor_name=lambda *_: "rope_freqs.weight",
)
[(_, tensor)] = list(LlamaModel.generate_extra_tensors(stub))
got = [float(v) for v in tensor.tolist()]


def hf_factors(dim: int, old_context_len: float) -> list[float]:
    """1 / (the factor HF divides inv_freq by), float64, for the frequencies base**(-2i/dim)."""
    out = []
    low_wavelen, high_wavelen = old_context_len / 1.0, old_context_len / 4.0
    for i in range(dim // 2):
        wavelen = 2 * math.pi * theta ** (2 * i / dim)
        if wavelen < high_wavelen:
            out.append(1.0)
        elif wavelen > low_wavelen:
            out.append(8.0)
        else:
            smooth = (old_context_len / wavelen - 1.0) / (4.0 - 1.0)
            out.append(1 / ((1 - smooth) / 8.0 + smooth))
    return out


rotary_dim = int(head_dim * partial)
want = hf_factors(rotary_dim, 4096)
over_head_dim_4096 = hf_factors(head_dim, 4096)
context_ok = all(math.isclose(a, b, rel_tol=1e-6) for a, b in zip(got, over_head_dim_4096, strict=False))
print(f"converter: {len(got)} factors; libllama reads n_rot/2 = {rotary_dim // 2}")
print(f"original_max_position_embeddings read from rope_parameters (4096, not 8192): {context_ok}")
bad = [i for i in range(rotary_dim // 2) if not math.isclose(got[i], want[i], rel_tol=1e-6)]
print(f"pairs whose factor differs from HF's over rotary_dim {rotary_dim}: {len(bad)} of {rotary_dim // 2}"
      + (f", e.g. pair {bad[0]}: converter {got[bad[0]]:.6f}, HF {want[bad[0]]:.6f}" if bad else ""))
sys.exit(1 if bad else 0)
