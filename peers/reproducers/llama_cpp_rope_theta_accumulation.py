"""ggml's CPU rope builds theta_i = p * theta_scale**i by repeated float32 multiplication, so the angle of
pair i carries about i roundings (and the rounding of ``theta_scale = powf(base, -2/n_dims)`` raised to the
i-th power): up to ~40 float32 ulps of the angle for head_dim 128, where one correctly rounded product
``fl(p * fl(inv_freq_i))`` is within ~1 ulp. ``ggml/src/ggml-cpu/ops.cpp`` ``ggml_rope_cache_init``
(``theta *= theta_scale``).

Float64 confirmation: the angle ggml used is read back from its output (atan2 of a rotated unit vector)
and compared with p * base**(-2i/d) evaluated in float64. Exit status 1 while the bug is present.
"""

import sys

import numpy as np
from rope_ref.peers.llama_cpp_peer import RopeArgs, run_rope

d, base, p = 128, 10000.0, 4095
k = d // 2
i = np.arange(k)
e = np.zeros((k, 1, d), np.float32)
e[i, 0, i] = 1.0
y = run_rope(e, np.full(k, p, np.int32), RopeArgs(n_dims=d, mode="neox", freq_base=base))[:, 0, :]
got = np.arctan2(y[i, i + k].astype(np.float64), y[i, i].astype(np.float64))
exact = p * base ** (-2.0 * i / d)  # float64
err = np.abs(np.angle(np.exp(1j * (got - exact))))
ulp = np.spacing(exact.astype(np.float32)).astype(np.float64)
inv32 = (np.float32(1) / np.float32(base) ** (np.arange(0, d, 2, dtype=np.float32) / np.float32(d))).astype(
    np.float32
)
one_rounding = np.abs((np.float32(p) * inv32).astype(np.float64) - exact) / ulp
worst = err / ulp
print(
    f"position {p}, head_dim {d}: ggml's angle error up to {worst.max():.1f} float32 ulps "
    f"(pair {worst.argmax()}); "
    f"one float32 rounding of p * inv_freq: up to {one_rounding.max():.1f} ulps"
)
sys.exit(1 if worst.max() > 8 else 0)
