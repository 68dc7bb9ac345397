"""ChatGLM-6B on any Array API namespace: the position ids and the 2D rotary (``chatglm_*`` operations).

Semantics are :mod:`rope_ref.chatglm`, where the source of every rule is cited (THUDM/chatglm-6b
``modeling_chatglm.py``). :class:`ChatGLM` is a mixin of
:class:`~rope_ref.backends.array_api.ArrayAPIBackend`: it uses the backend's ``_ns``,
``_angle_positions`` and ``_rotate``.
"""

from __future__ import annotations

from typing import Any

from ._array_api_namespace import array_api_size, widest_float

__all__ = ["ChatGLM"]


class ChatGLM:
    """Mixin: ChatGLM-6B position ids and 2D rotary with standard functions of the input's namespace."""

    def chatglm_position_ids(
        self, input_ids, *, bos_token_id, mask_token_id, gmask_token_id, position_encoding_2d
    ):
        """ChatGLM-6B ``get_position_ids`` (final released version), vectorised over the batch.

        Same rules as :func:`rope_ref.chatglm.position_ids`: context length = first index of bos; mask
        position = first [gMASK] if the row has one, else first [MASK]; 2D overwrites positions from the
        context length on for both mask kinds, 1D only for [MASK] rows; block ids 0 then 1, 2, 3, ...
        First occurrences come from ``argmax`` (the standard returns the first maximal index).
        """
        xp, device = self._ns(input_ids)
        ids = input_ids
        if ids.ndim != 2:
            raise ValueError(f"input_ids must have shape (batch, seq), got shape {tuple(ids.shape)}")
        batch, seq = ids.shape
        i64 = xp.int64

        def first(token: int) -> tuple[Any, Any]:
            hit = ids == token
            found = xp.any(hit, axis=-1)
            if seq == 0:
                return found, xp.zeros((batch,), dtype=i64, device=device)
            return found, xp.astype(xp.argmax(xp.astype(hit, xp.int8), axis=-1), i64)

        has_bos, context = first(int(bos_token_id))
        has_gmask, gmask_pos = first(int(gmask_token_id))
        has_mask, mask_pos = first(int(mask_token_id))
        if not bool(xp.all(has_bos)):
            row = int(xp.argmax(xp.astype(~has_bos, xp.int8)))
            raise ValueError(f"input_ids row {row} has no bos (<sop>) token {bos_token_id}")
        if not bool(xp.all(has_gmask | has_mask)):
            row = int(xp.argmax(xp.astype(~(has_gmask | has_mask), xp.int8)))
            raise ValueError(f"input_ids row {row} has neither a [gMASK] nor a [MASK] token")
        mask_position = xp.where(has_gmask, gmask_pos, mask_pos)
        j = xp.reshape(xp.arange(seq, dtype=i64, device=device), (1, seq))
        after = j >= context[:, None]
        overwrite = after if position_encoding_2d else after & ~has_gmask[:, None]
        pos = xp.where(overwrite, mask_position[:, None], j)
        if not position_encoding_2d:
            return pos
        block = xp.where(after, j - context[:, None] + 1, xp.zeros_like(j))
        return xp.stack([pos, block], axis=1)

    def chatglm_apply_2d(self, x, position_ids, block_position_ids, *, base, precision):
        """ChatGLM-6B 2D rotary: each half of a head is a half-layout RoPE over head_dim/2 channels.

        ``precision="float64"``: the backend's own arithmetic (activation dtype, widest-float angles).
        ``precision="chatglm-6b-fp16"``: the released model's fp16 table and fp16 rotation, as
        :func:`rope_ref.chatglm.fp16_cos_sin` describes (needs a float16 dtype; the standard has none,
        so array-api-strict reports it unsupported).
        """
        from rope_ref.config import RopeConfig

        xp, device = self._ns(x)
        if x.ndim == 0 or x.shape[-1] == 0 or x.shape[-1] % 4:
            raise ValueError(f"x.shape[-1] (head_dim) must be a positive multiple of 4, got {tuple(x.shape)}")
        half = x.shape[-1] // 2
        if precision == "float64":
            cfg = RopeConfig(half, layout="half", base=base)
            parts = []
            for sl, ids in ((slice(0, half), position_ids), (slice(half, None), block_position_ids)):
                pos = self._angle_positions(xp, ids, device)
                parts.append(self._rotate(x[..., sl], pos, cfg, None, negate=False))
            return xp.concat(parts, axis=-1)
        if precision != "chatglm-6b-fp16":
            raise ValueError(f"precision must be 'float64' or 'chatglm-6b-fp16', got {precision!r}")
        f16 = getattr(xp, "float16", None)
        if f16 is None:
            raise NotImplementedError(f"{xp.__name__} has no float16, needed by precision='chatglm-6b-fp16'")
        x16 = xp.astype(x, f16)
        lead = x.ndim - 1
        parts = []
        for sl, ids in ((slice(0, half), position_ids), (slice(half, None), block_position_ids)):
            cos16, sin16 = self._chatglm_fp16_table(xp, device, ids, half, float(base))
            pad = (1,) * (lead - ids.ndim)
            cos16 = xp.reshape(cos16, pad + tuple(cos16.shape))
            sin16 = xp.reshape(sin16, pad + tuple(sin16.shape))
            q = x16[..., sl]
            quarter = half // 2
            rotated = xp.concat([-q[..., quarter:], q[..., :quarter]], axis=-1)
            parts.append(q * cos16 + rotated * sin16)  # each op rounded to float16, as eager PyTorch
        return xp.concat(parts, axis=-1)

    def _chatglm_fp16_table(self, xp: Any, device: Any, ids: Any, dim: int, base: float) -> tuple[Any, Any]:
        """Released ``RotaryEmbedding(dim, base, precision=torch.half)``: fp32 inv_freq -> fp16, fp16 angles.

        The product of two float16 values is exact in float32 (11 + 11 significant bits), so rounding
        it once to float16 reproduces the fp16 einsum; cos/sin are taken in the widest float, rounded.
        """
        f16, f32 = xp.float16, xp.float32
        idx = self._angle_positions(xp, ids, device)
        if array_api_size(idx) and (
            bool(xp.any(idx != xp.floor(idx))) or bool(xp.any(idx < 0)) or bool(xp.any(idx > 65504))
        ):
            raise ValueError("ChatGLM fp16 ids must be integers in [0, 65504] (they index the cos/sin table)")
        exponent = xp.arange(0, dim, 2, dtype=f32, device=device) / dim
        inv16 = xp.astype(1.0 / xp.pow(xp.asarray(base, dtype=f32, device=device), exponent), f16)
        t16 = xp.astype(idx, f16)
        freqs16 = xp.astype(xp.astype(t16, f32)[..., None] * xp.astype(inv16, f32), f16)
        emb = xp.astype(xp.concat([freqs16, freqs16], axis=-1), widest_float(xp, device))
        return xp.astype(xp.cos(emb), f16), xp.astype(xp.sin(emb), f16)
