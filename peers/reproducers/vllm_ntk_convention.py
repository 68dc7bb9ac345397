"""vLLM's fixed NTK (``rope_type: ntk``, ``NTKScalingRotaryEmbedding``, after kexue.fm/archives/9706)
scales inv_freq_i by factor**(-(2i + 2)/d) (base * factor, then / factor**(2/d)); the NTK-aware rule the
oracle follows (bloc97's NTK-aware scaled RoPE; HF's "ntk" at transformers commit 0044e3b) scales the base to
base * factor**(d / (d - 2)), i.e. inv_freq_i * factor**(-2i/(d - 2)). A divergence of conventions, not a bug.

Float64 comparison of vLLM's own _compute_inv_freq with the NTK-aware rule. Exit status 1 while they differ.
"""

import sys

import numpy as np
import torch
from vllm.config import VllmConfig, set_current_vllm_config
from vllm.model_executor.layers.rotary_embedding import get_rope

d, base, factor = 64, 10000.0, 4.0
with set_current_vllm_config(VllmConfig()):
    rope = get_rope(d, 4096, True, {"rope_type": "ntk", "factor": factor, "rope_theta": base}, torch.float32)
got = rope._compute_inv_freq(rope.base).double().numpy()
i = np.arange(d // 2)
ntk_aware = (base * factor ** (d / (d - 2))) ** (-2.0 * i / d)
print(
    f"inv_freq[0]: vLLM {got[0]:.6f}, NTK-aware {ntk_aware[0]:.6f}; max relative difference "
    f"{np.max(np.abs(got / ntk_aware - 1)):.3g}"
)
sys.exit(1 if np.max(np.abs(got / ntk_aware - 1)) > 1e-5 else 0)
