"""The oracle itself as a conformance backend (built-in name ``numpy``): float64 everywhere."""

from __future__ import annotations

from typing import Any

import numpy as np

import rope_ref

from .protocol import Backend, PrecisionPolicy

__all__ = ["OracleBackend", "make_backend", "available"]


class OracleBackend(Backend):
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

    def chatglm_position_ids(
        self, input_ids, *, bos_token_id, mask_token_id, gmask_token_id, position_encoding_2d
    ):
        return rope_ref.chatglm.position_ids(
            input_ids,
            bos_token_id=bos_token_id,
            mask_token_id=mask_token_id,
            gmask_token_id=gmask_token_id,
            position_encoding_2d=position_encoding_2d,
        )

    def chatglm_next_position_ids(
        self, input_ids, *, bos_token_id, mask_token_id, gmask_token_id, position_encoding_2d
    ):
        return rope_ref.chatglm.next_position_ids(
            input_ids,
            bos_token_id=bos_token_id,
            mask_token_id=mask_token_id,
            gmask_token_id=gmask_token_id,
            position_encoding_2d=position_encoding_2d,
        )

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

    def _rotated(self, x, cfg, axes, pos_kw, inverse, inplace, seq_len):
        from rope_ref.positions import kernel_positions

        ids = kernel_positions(np.shape(x), axes, **pos_kw)
        y = rope_ref.apply(x, ids, cfg, axes=axes, inverse=inverse, seq_len=seq_len)
        if inplace:
            x[...] = y
            return x
        return y

    def apply_axes(
        self,
        x,
        cfg,
        *,
        axes,
        positions=None,
        offset=None,
        cu_seqlens=None,
        start_offsets=None,
        max_seqlen=None,
        inverse=False,
        inplace=False,
        seq_len=None,
    ):
        pos_kw = dict(positions=positions, offset=offset, cu_seqlens=cu_seqlens, start_offsets=start_offsets)
        return self._rotated(x, cfg, axes, pos_kw, inverse, inplace, seq_len)

    def apply_qk(
        self,
        q,
        k,
        cfg,
        *,
        axes,
        positions=None,
        offset=None,
        cu_seqlens=None,
        start_offsets=None,
        max_seqlen=None,
        inverse=False,
        inplace=False,
        seq_len=None,
    ):
        rope_ref.axes.qk_head_axis(np.shape(q), np.shape(k), axes)
        if seq_len is None and cfg.scaling is not None:
            from rope_ref.positions import kernel_positions

            ids = kernel_positions(
                np.shape(q),
                axes,
                positions=positions,
                offset=offset,
                cu_seqlens=cu_seqlens,
                start_offsets=start_offsets,
            )
            seq_len = rope_ref.frequencies.resolve_seq_len(ids, cfg, None)
        pos_kw = dict(positions=positions, offset=offset, cu_seqlens=cu_seqlens, start_offsets=start_offsets)
        return (
            self._rotated(q, cfg, axes, pos_kw, inverse, inplace, seq_len),
            self._rotated(k, cfg, axes, pos_kw, inverse, inplace, seq_len),
        )

    def apply_qkv(
        self,
        qkv,
        cfg,
        *,
        axes,
        num_heads_q,
        num_heads_kv,
        positions=None,
        offset=None,
        cu_seqlens=None,
        start_offsets=None,
        max_seqlen=None,
        inverse=False,
        inplace=False,
        seq_len=None,
    ):
        h = rope_ref.axes.parse_axes(axes, np.ndim(qkv)).index("h")
        for name, n in (("num_heads_q", num_heads_q), ("num_heads_kv", num_heads_kv)):
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise ValueError(f"{name} must be an int >= 1, got {n!r}")
        if qkv.shape[h] != num_heads_q + 2 * num_heads_kv:
            raise ValueError(
                f"qkv.shape[{h}] = {qkv.shape[h]} does not split as num_heads_q + 2 * num_heads_kv = "
                f"{num_heads_q} + 2 * {num_heads_kv}"
            )
        out = qkv if inplace else np.array(qkv, copy=True)
        lead = (slice(None),) * h
        q = out[lead + (slice(0, num_heads_q),)]
        k = out[lead + (slice(num_heads_q, num_heads_q + num_heads_kv),)]
        self.apply_qk(
            q,
            k,
            cfg,
            axes=axes,
            positions=positions,
            offset=offset,
            cu_seqlens=cu_seqlens,
            start_offsets=start_offsets,
            inverse=inverse,
            inplace=True,
            seq_len=seq_len,
        )
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
