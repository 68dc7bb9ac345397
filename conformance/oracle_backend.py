"""The oracle itself as a conformance backend (built-in name ``numpy``): float64 everywhere."""

from __future__ import annotations

from typing import Any

import numpy as np

import rope_ref
from rope_ref.axes import qkv_heads

from .protocol import Backend, KernelCall, KernelShapeCalls, PrecisionPolicy

__all__ = ["OracleBackend", "make_backend", "available"]


class OracleBackend(KernelShapeCalls, Backend):
    """rope_ref's float64 NumPy functions behind the backend protocol."""

    name = "numpy"
    version = rope_ref.__version__
    device = "cpu"
    precision = PrecisionPolicy("float64", "float64", "float64")

    def from_numpy(self, array: np.ndarray, dtype: str | None = None) -> np.ndarray:
        return np.array(array, dtype=np.float64 if dtype is not None else array.dtype, copy=True)

    def to_numpy(self, array: Any) -> np.ndarray:
        return np.asarray(array)

    def inv_freq(self, cfg, seq_len=None):
        return rope_ref.inv_freq(cfg, seq_len)

    def attention_factor(self, cfg, seq_len=None):
        return rope_ref.attention_factor(cfg, seq_len)

    def cos_sin(self, positions, cfg, seq_len=None):
        return rope_ref.cos_sin(positions, cfg, seq_len=seq_len)

    def apply(self, x, positions, cfg, seq_len=None):
        return rope_ref.apply(x, positions, cfg, seq_len=seq_len)

    def apply_vjp(self, x, positions, cfg, grad_out, seq_len=None):
        # The Jacobian of apply is the (scaled) rotation R; its transpose rotates by -angle.
        pos = np.asarray(positions, dtype=np.float64)
        seq_len = rope_ref.frequencies.resolve_seq_len(pos, cfg, seq_len)
        return rope_ref.apply(grad_out, -pos, cfg, seq_len=seq_len)

    # ChatGLM-6B ids: the token ids and the 2D flag (keyword-only, as in the protocol) go straight through.
    def chatglm_position_ids(self, input_ids, **tokens):
        return rope_ref.chatglm.position_ids(input_ids, **tokens)

    def chatglm_next_position_ids(self, input_ids, **tokens):
        return rope_ref.chatglm.next_position_ids(input_ids, **tokens)

    def chatglm_apply_2d(self, x, position_ids, block_position_ids, *, base, precision):
        return rope_ref.chatglm.apply_2d(x, position_ids, block_position_ids, base=base, precision=precision)

    def multiaxis_apply(self, x, positions, spec):
        return rope_ref.multiaxis.apply(x, positions, spec)

    def mrope_position_ids(self, input_ids, image_grid, video_grid, attention_mask, second_per_grid_ts, **kw):
        from rope_ref import mrope

        return mrope.position_ids(
            input_ids, image_grid, video_grid, attention_mask, second_per_grid_ts=second_per_grid_ts, **kw
        )

    def mrope_decode_ids(self, deltas, *, cache_position, n_new):
        from rope_ref import mrope

        return mrope.decode_position_ids(deltas, cache_position, n_new)

    def vision_ids(self, grids, *, convention, spatial_merge_size):
        from rope_ref import vision_rope

        if convention == "qwen2-vl":
            return vision_rope.qwen2_vl_ids(grids, spatial_merge_size)
        return vision_rope.pixtral_ids(grids)

    def mla_softmax_scale(self, cfg):
        from rope_ref import mla

        return mla.softmax_scale(cfg)

    # -- kernel shapes (issue 16): rope_ref.apply with axes / inverse on ids from rope_ref.positions --------
    inplace_ops = frozenset({"apply_axes", "apply_qk", "apply_qkv"})

    def _ids(self, x, call: KernelCall) -> np.ndarray:
        from rope_ref.positions import kernel_positions

        where = call.where()
        del where["max_seqlen"]  # the oracle's ids need no bound on the sequence length
        return kernel_positions(np.shape(x), call.axes, **where)

    def _axes_call(self, x, cfg, call: KernelCall):
        ids = self._ids(x, call)
        y = rope_ref.apply(x, ids, cfg, axes=call.axes, inverse=call.inverse, seq_len=call.seq_len)
        if call.inplace:
            x[...] = y
            return x
        return y

    def _qk_call(self, q, k, cfg, call: KernelCall):
        rope_ref.axes.qk_head_axis(np.shape(q), np.shape(k), call.axes)
        if call.seq_len is None and cfg.scaling is not None:
            call = call.replace(seq_len=rope_ref.frequencies.resolve_seq_len(self._ids(q, call), cfg, None))
        return self._axes_call(q, cfg, call), self._axes_call(k, cfg, call)

    def _qkv_call(self, qkv, cfg, num_heads_q, num_heads_kv, call: KernelCall):
        h, hq, hk = qkv_heads(np.shape(qkv), call.axes, num_heads_q, num_heads_kv)
        out = qkv if call.inplace else np.array(qkv, copy=True)
        lead = (slice(None),) * h
        q, k = out[lead + (slice(0, hq),)], out[lead + (slice(hq, hq + hk),)]
        self._qk_call(q, k, cfg, call.replace(inplace=True))
        return out

    def decay_upper_bound(self, distances, cfg):
        # RoFormer §3.4.3 relative upper bound; see rope_ref.decay.
        from rope_ref.decay import relative_upper_bound

        return relative_upper_bound(distances, cfg)


def available(**_: Any) -> tuple[bool, str]:
    return True, ""


def make_backend(precision: str | None = None) -> OracleBackend:
    if precision not in (None, "fp64", "float64"):
        raise ValueError(f"the numpy oracle backend computes in float64 only, got precision={precision!r}")
    return OracleBackend()
