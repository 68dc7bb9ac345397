"""A minimal rope-ref conformance backend: RoPE in float32 NumPy.

Run it from this directory:
    rope-ref conformance run --backend minimal_backend:MinimalBackend --precision fp32
"""

import numpy as np
from rope_ref.conformance import Backend, PrecisionPolicy

import rope_ref


class MinimalBackend(Backend):
    name = "minimal-numpy"
    version = "0.1"
    device = "cpu"
    precision = PrecisionPolicy(io_dtype="float32", angle_dtype="float32", compute_dtype="float32")

    def __init__(self, precision=None):  # the registry passes --precision; only fp32 is offered here
        if precision not in (None, "fp32", "float32"):
            raise ValueError(f"MinimalBackend computes in float32 only, got precision={precision!r}")

    def from_numpy(self, array, dtype=None):
        return np.array(array, dtype=dtype or array.dtype)  # a copy: inputs are never modified

    def to_numpy(self, array):
        return np.asarray(array)

    def inv_freq(self, cfg, seq_len=None):
        # Scaled frequencies come from the oracle's table; a real port computes its own.
        return rope_ref.inv_freq(cfg, seq_len).astype(np.float32)

    def cos_sin(self, positions, cfg, seq_len=None):
        seq_len = rope_ref.frequencies.resolve_seq_len(np.asarray(positions, np.float64), cfg, seq_len)
        angle = np.asarray(positions, np.float32)[..., None] * self.inv_freq(cfg, seq_len)  # float32 angles
        factor = np.float32(rope_ref.attention_factor(cfg, seq_len))
        return factor * np.cos(angle), factor * np.sin(angle)

    def apply(self, x, positions, cfg, seq_len=None):
        cos, sin = self.cos_sin(np.broadcast_to(positions, x.shape[:-1]), cfg, seq_len)
        n = cfg.rotary_dim // 2
        if cfg.layout == "half":  # pairs (i, i + n): GPT-NeoX / HF rotate_half
            a, b = np.arange(n), np.arange(n) + n
        else:  # pairs (2i, 2i + 1): GPT-J / Meta
            a, b = np.arange(0, 2 * n, 2), np.arange(1, 2 * n, 2)
        out = x.copy()  # channels from rotary_dim on pass through unchanged
        out[..., a] = x[..., a] * cos - x[..., b] * sin
        out[..., b] = x[..., b] * cos + x[..., a] * sin
        return out.astype(np.float32)
