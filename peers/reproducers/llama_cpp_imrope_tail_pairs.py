"""ggml's IMROPE (Qwen3-VL interleaved M-RoPE) gives pairs 61 and 62 of a 128-dim head (sections 24/20/20)
the fourth position row, which llama.cpp's mtmd fills with 0 for image tokens ("last pos dim is unused");
Qwen3-VL's ``apply_interleaved_mrope`` gives every pair past the h/w slots the temporal position.
``ggml/src/ggml-cpu/ops.cpp`` ``ggml_mrope_cache_init``: ``sector % 3 == 1 && sector < 3 * sections[1]`` is
h, ``% 3 == 2 && < 3 * sections[2]`` w, ``% 3 == 0 && < 3 * sections[0]`` t, else the fourth row.

Float64 confirmation: the pair angles ggml used (atan2 of rotated unit vectors) against Qwen3-VL's rule
evaluated in float64. Exit status 1 while the bug is present.
"""

import sys

import numpy as np
from rope_ref.peers.llama_cpp_peer import RopeArgs, run_rope

d, base, sections = 128, 5_000_000.0, (24, 20, 20, 0)
t, h, w = 3003, 3004, 3005  # one image token
k = d // 2
i = np.arange(k)
e = np.zeros((k, 1, d), np.float32)
e[i, 0, i] = 1.0
pos = np.stack([np.full(k, v, np.int32) for v in (t, h, w, 0)])  # mtmd: fourth row 0 for image tokens
args = RopeArgs(n_dims=d, mode="neox", freq_base=base)
y = run_rope(e, pos, args, sections=sections, multi_mode="imrope")[:, 0, :].astype(np.float64)
got = np.arctan2(y[i, i + k], y[i, i])
stream = np.zeros(k, dtype=int)  # Qwen3-VL: h at 1, 4, .. < 60; w at 2, 5, .. < 60; t elsewhere
stream[1 : 3 * sections[1] : 3] = 1
stream[2 : 3 * sections[2] : 3] = 2
want = np.array([t, h, w])[stream] * base ** (-2.0 * i / d)
err = np.abs(np.angle(np.exp(1j * (got - want))))
bad = np.flatnonzero(err > 100 * np.spacing(want.astype(np.float32)) + 1e-7)  # far beyond float32
print(f"pairs whose angle differs from Qwen3-VL's rule: {bad.tolist()} (worst {err.max():.3g} rad)")
sys.exit(1 if bad.size else 0)
