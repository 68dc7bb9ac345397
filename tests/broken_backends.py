"""A correct float32 NumPy backend written independently of the oracle's rotation code, and broken copies.

:class:`Float32Backend` is what a careful port looks like: float32 positions times float32 inverse
frequencies (HF ``_compute_default_rope_parameters`` style), float32 cos/sin and rotation, output
rounded to the declared I/O dtype. Each broken subclass makes one deviation, reproducing a real bug from
``docs/known-bugs.md``: usually a single changed line in one hook; :class:`ScalingDropped` (three hooks) and
:class:`LongRoPEWrongSide` (two hooks) make their one deviation in each hook that sees the scaling.
``targets`` names the bug classes each one is built to trip. The conformance suite must fail every one of
them, at every I/O dtype, in a case of its target class (``test_broken_backends.py``).

Scaled frequencies come from the config's own scaling object (cast to float32), so the broken
scalings deviate from correct values, not from a second implementation of the formulas.
"""

from __future__ import annotations

import math

import numpy as np
from rope_ref.conformance.protocol import Backend, PrecisionPolicy

F32 = np.float32


def round_bf16(values: np.ndarray) -> np.ndarray:
    """Round float32 values to the nearest bfloat16 (ties to even), returned as float32."""
    bits = np.asarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32)


def _round_io(y: np.ndarray, io_dtype: str) -> np.ndarray:
    if io_dtype == "bfloat16":
        return round_bf16(y.astype(np.float32))
    return y.astype(io_dtype)


class Float32Backend(Backend):
    """Correct: every angle is float32(position) * float32(inv_freq), all arithmetic in float32."""

    name = "float32-numpy"
    version = "test"
    device = "cpu"
    targets: tuple[str, ...] = ()  # correct: no bug class to trip

    def __init__(self, io_dtype: str = "float32") -> None:
        self.precision = PrecisionPolicy(io_dtype, "float32", "float32")

    # -- arrays -------------------------------------------------------------------------------------------
    def from_numpy(self, array, dtype=None):
        if dtype is None or dtype == "bfloat16":
            return np.array(array, copy=True)
        return np.array(array, dtype=dtype, copy=True)

    def to_numpy(self, array):
        return np.asarray(array)

    # -- hooks the broken subclasses override ------------------------------------------------------------
    def _rope_type(self, cfg) -> str:
        return "default" if cfg.scaling is None else cfg.scaling.to_hf()["rope_type"]

    def _default_inv_freq(self, base: float, rotary_dim: int) -> np.ndarray:
        # HF _compute_default_rope_parameters: 1 / base ** (arange(0, dim, 2) / dim), in float32.
        return F32(1.0) / (F32(base) ** (np.arange(0, rotary_dim, 2, dtype=F32) / F32(rotary_dim)))

    def _inv_freq(self, cfg, seq_len) -> np.ndarray:
        if cfg.scaling is None:
            return self._default_inv_freq(cfg.base, cfg.rotary_dim)
        return np.asarray(cfg.scaling.inv_freq(cfg.base, cfg.rotary_dim, seq_len), dtype=F32)

    def _factor(self, cfg, seq_len) -> float:
        return (
            1.0 if cfg.scaling is None else float(F32(cfg.scaling.attention_factor(cfg.rotary_dim, seq_len)))
        )

    def _positions(self, positions: np.ndarray) -> np.ndarray:
        return np.asarray(positions).astype(F32)

    def _angles(self, pos32: np.ndarray, omega32: np.ndarray) -> np.ndarray:
        return pos32[..., None] * omega32

    def _pairs(self, cfg, layout: str) -> tuple[np.ndarray, np.ndarray]:
        n = cfg.rotary_dim // 2
        if layout == "half":
            return np.arange(n), np.arange(n) + n
        return np.arange(0, 2 * n, 2), np.arange(1, 2 * n, 2)

    def _block(self, cfg) -> slice:
        return slice(0, cfg.rotary_dim)

    def _sin_sign(self) -> float:
        return 1.0

    def _rotated_heads(self, out: np.ndarray, x: np.ndarray) -> np.ndarray:
        return out

    # -- helpers --------------------------------------------------------------------------------------------
    def _seq_len(self, cfg, positions: np.ndarray, seq_len):
        if seq_len is not None or cfg.scaling is None or not cfg.scaling.length_dependent:
            return seq_len
        return int(np.floor(np.max(np.abs(positions)))) + 1 if np.size(positions) else None

    def _table(self, positions, cfg, seq_len, sign: float = 1.0):
        pos = np.asarray(positions)
        seq_len = self._seq_len(cfg, pos, seq_len)
        theta = self._angles(self._positions(sign * pos), self._inv_freq(cfg, seq_len))
        factor = F32(self._factor(cfg, seq_len))
        return factor * np.cos(theta), factor * np.sin(theta) * F32(self._sin_sign())

    def _rotate(self, x, positions, cfg, seq_len, sign: float = 1.0):
        x32 = np.asarray(x, dtype=F32)
        pos = np.broadcast_to(np.asarray(positions), x32.shape[:-1])
        cos, sin = self._table(
            pos, cfg, seq_len if seq_len is not None else self._seq_len(cfg, pos, None), sign
        )
        block = x32[..., self._block(cfg)]
        a, b = self._pairs(cfg, cfg.layout)
        xa, xb = block[..., a], block[..., b]
        rot = block.copy()
        rot[..., a] = xa * cos - xb * sin
        rot[..., b] = xb * cos + xa * sin
        out = x32.copy()
        out[..., self._block(cfg)] = rot
        out = self._rotated_heads(out, x32)
        return _round_io(out, self.precision.io_dtype)

    # -- operations ---------------------------------------------------------------------------------------
    def inv_freq(self, cfg, seq_len=None):
        return self._inv_freq(cfg, seq_len)

    def attention_factor(self, cfg, seq_len=None):
        return self._factor(cfg, seq_len)

    def cos_sin(self, positions, cfg, seq_len=None):
        return self._table(positions, cfg, seq_len)

    def apply(self, x, positions, cfg, seq_len=None):
        return self._rotate(x, positions, cfg, seq_len)

    def apply_vjp(self, x, positions, cfg, grad_out, seq_len=None):
        # The transpose of a rotation by t is the rotation by -t (same scaling, same seq_len).
        pos = np.broadcast_to(np.asarray(positions), np.shape(grad_out)[:-1])
        return self._rotate(grad_out, positions, cfg, self._seq_len(cfg, pos, seq_len), sign=-1.0)

    def chatglm_position_ids(self, input_ids, **params):
        from rope_ref import chatglm

        return chatglm.position_ids(input_ids, **params)

    def chatglm_next_position_ids(self, input_ids, **params):
        from rope_ref import chatglm

        return chatglm.next_position_ids(input_ids, **params)

    def _chatglm_ids(self, position_ids, block_position_ids):
        return position_ids, block_position_ids

    def chatglm_apply_2d(self, x, position_ids, block_position_ids, *, base, precision):
        from rope_ref import RopeConfig, chatglm

        pos, blk = self._chatglm_ids(position_ids, block_position_ids)
        if precision != "float64":
            return chatglm.apply_2d(x, pos, blk, base=base, precision=precision)
        half = np.shape(x)[-1] // 2
        cfg = RopeConfig(half, layout="half", base=base)
        return np.concatenate(
            [self._rotate(x[..., :half], pos, cfg, None), self._rotate(x[..., half:], blk, cfg, None)],
            axis=-1,
        )

    # -- multi-axis operations (issue 20) -------------------------------------------------------------------
    def _ma_spec(self, spec):
        """The spec the port actually builds from the model's settings (broken subclasses change it)."""
        return spec

    def multiaxis_apply(self, x, positions, spec):
        # Pair i rotates channels (a_i, b_i) of its block by float32(m^(s(i))) * float32(phi_i) (HF
        # apply_multimodal_rotary_pos_emb: one cos/sin table per stream, then picked per pair).
        spec = self._ma_spec(spec)
        x32 = np.asarray(x, dtype=F32)
        pos = np.asarray(positions)
        lengths = [self._seq_len(t, pos, None) for t in spec.tables]
        seq_len = max((n for n in lengths if n is not None), default=None)
        tables = [self._inv_freq(t, seq_len) for t in spec.tables]
        factors = [F32(self._factor(t, seq_len)) for t in spec.tables]
        streams = np.asarray(spec.streams)
        phi = np.array([tables[s][k] for s, k in zip(spec.streams, spec.freq_index, strict=True)], dtype=F32)
        amp = np.array([factors[s] for s in spec.streams], dtype=F32)
        m = np.moveaxis(pos, 0, -1)[..., streams]
        m = m.reshape((1,) * (x32.ndim - m.ndim) + m.shape)
        theta = self._positions(m) * phi
        cos, sin = amp * np.cos(theta), amp * np.sin(theta)
        per = spec.n_pairs // spec.blocks
        j = np.arange(per)
        starts = [2 * per * k for k in range(spec.blocks)]
        if spec.layout == "half":
            a = np.concatenate([s + j for s in starts])
            b = a + per
        else:
            a = np.concatenate([s + 2 * j for s in starts])
            b = a + 1
        xa, xb = x32[..., a], x32[..., b]
        out = x32.copy()
        out[..., a] = xa * cos - xb * sin
        out[..., b] = xb * cos + xa * sin
        return _round_io(out, self.precision.io_dtype)

    def mrope_position_ids(self, input_ids, image_grid_thw, video_grid_thw, attention_mask, seconds, **kw):
        from rope_ref import mrope

        return mrope.position_ids(
            input_ids, image_grid_thw, video_grid_thw, attention_mask, second_per_grid_ts=seconds, **kw
        )

    def mrope_decode_ids(self, deltas, *, cache_position, n_new):
        # Qwen2VLModel.forward: arange(n_new) + cache_position + rope_deltas, the same in all 3 streams.
        row = np.arange(n_new)[None, :] + cache_position + np.asarray(deltas).reshape(-1, 1)
        return np.tile(row[None], (3, 1, 1)).astype(np.int64)

    def vision_ids(self, grids, *, convention, spatial_merge_size):
        from rope_ref import vision_rope

        if convention == "qwen2-vl":
            return vision_rope.qwen2_vl_ids(grids, spatial_merge_size)
        return vision_rope.pixtral_ids(grids)

    def _mscale(self, factor: float, m: float) -> float:
        return 0.1 * m * math.log(factor) + 1.0 if factor > 1.0 else 1.0

    def mla_softmax_scale(self, cfg):
        # HF DeepseekV3Attention.__init__, in Python floats.
        scale = cfg.qk_head_dim**-0.5
        if cfg.rope.scaling is not None and cfg.mscale_all_dim:
            ms = self._mscale(float(cfg.rope.scaling.to_hf()["factor"]), float(cfg.mscale_all_dim))
            scale = scale * ms * ms
        return scale

    def decay_upper_bound(self, distances, cfg):
        r = np.asarray(distances)
        omega = self._inv_freq(cfg, self._seq_len(cfg, np.abs(r), None))
        theta = self._angles(self._positions(r), omega)
        partial = np.cumsum(np.cos(theta), axis=-1) + 1j * np.cumsum(np.sin(theta), axis=-1)
        return np.abs(partial).astype(F32).mean(axis=-1)

    # -- kernel shapes (issue 16): views, offsets, varlen, q/k pairs, packed qkv, in place -----------------
    inplace_ops = frozenset({"apply_axes", "apply_qk", "apply_qkv"})

    def _read(self, x) -> np.ndarray:
        """The values of the view handed in (a careful port reads through the strides)."""
        return np.asarray(x)

    def _write(self, view, y) -> None:
        """In place: write ``y`` into exactly the elements of ``view``."""
        view[...] = y

    def _row_offsets(self, offset, batch: int, seq: int) -> np.ndarray:
        """``(B, S)`` offsets: row b's offset for every token of row b."""
        off = np.broadcast_to(np.asarray(offset, dtype=np.int64).reshape(-1), (batch,))
        return np.repeat(off[:, None], seq, axis=1)

    def _token_ids(self, cu: np.ndarray, starts: np.ndarray) -> np.ndarray:
        """Varlen ids: token t of sequence j is at ``starts[j] + t - cu[j]`` (restart per sequence)."""
        t = np.arange(int(cu[-1]))
        seq = np.searchsorted(cu, t, side="right") - 1
        return starts[seq] + t - cu[seq]

    def _k_heads(self, hq: int, hk: int) -> np.ndarray:
        """Which input k head feeds output k head j (itself)."""
        return np.arange(hk)

    def _qkv_rotated(self, hq: int, hk: int) -> int:
        """How many leading heads of a packed qkv are rotated (q and k, not V)."""
        return hq + hk

    def _sign(self, inverse: bool) -> float:
        return -1.0 if inverse else 1.0

    def _place(self, ids: np.ndarray, axes: str, shape) -> np.ndarray:
        letters = axes[:-1]
        lead = tuple(shape[:-1])
        ids = np.asarray(ids)
        if ids.ndim == 2:  # HF (B, S), whatever the order of b and s in x
            arr = ids if letters.index("b") < letters.index("s") else ids.T
            sizes = iter(arr.shape)
            sh = [next(sizes) if c in "bs" else 1 for c in letters]
        else:
            seq = "s" if "s" in letters else "t"
            arr, sh = ids, [ids.shape[0] if c == seq else 1 for c in letters]
        return np.broadcast_to(arr.reshape(sh), lead)

    def _kernel_ids(self, shape, axes, positions, offset, cu_seqlens, start_offsets) -> np.ndarray:
        if positions is not None:
            return self._place(positions, axes, shape)
        if offset is not None:
            b, s = shape[axes.index("b")], shape[axes.index("s")]
            return self._place(self._row_offsets(offset, b, s) + np.arange(s)[None, :], axes, shape)
        cu = np.asarray(cu_seqlens, dtype=np.int64)
        if int(cu[-1]) != shape[axes.index("t")]:
            raise ValueError(f"cu_seqlens ends at {int(cu[-1])}, x has {shape[axes.index('t')]} tokens")
        starts = np.broadcast_to(np.asarray(0 if start_offsets is None else start_offsets), (cu.size - 1,))
        return self._place(self._token_ids(cu, starts.astype(np.int64)), axes, shape)

    def _kernel_rotate(self, x, pos, cfg, seq_len, inverse):
        seq_len = self._seq_len(cfg, pos, seq_len)  # from the forward positions, also when inverse
        return self._rotate(x, pos, cfg, seq_len, sign=self._sign(inverse))

    def _finish(self, view, y, inplace):
        if inplace:
            self._write(view, y)
            return view
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
        values = self._read(x)
        pos = self._kernel_ids(values.shape, axes, positions, offset, cu_seqlens, start_offsets)
        return self._finish(x, self._kernel_rotate(values, pos, cfg, seq_len, inverse), inplace)

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
        qv, kv = self._read(q), self._read(k)
        h = axes.index("h")
        hq, hk = qv.shape[h], kv.shape[h]
        if hq % hk:
            raise ValueError(f"k heads ({hk}) must divide q heads ({hq})")
        pos_q = self._kernel_ids(qv.shape, axes, positions, offset, cu_seqlens, start_offsets)
        seq_len = self._seq_len(cfg, pos_q, seq_len)
        pos_k = self._kernel_ids(kv.shape, axes, positions, offset, cu_seqlens, start_offsets)
        k_in = np.take(kv, self._k_heads(hq, hk), axis=h)
        qo = self._kernel_rotate(qv, pos_q, cfg, seq_len, inverse)
        ko = self._kernel_rotate(k_in, pos_k, cfg, seq_len, inverse)
        return self._finish(q, qo, inplace), self._finish(k, ko, inplace)

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
        values = self._read(qkv)
        h = axes.index("h")
        if values.shape[h] != num_heads_q + 2 * num_heads_kv:
            raise ValueError(f"qkv has {values.shape[h]} heads, not {num_heads_q} + 2 * {num_heads_kv}")
        n = self._qkv_rotated(num_heads_q, num_heads_kv)
        part = np.take(values, np.arange(n), axis=h)
        pos = self._kernel_ids(part.shape, axes, positions, offset, cu_seqlens, start_offsets)
        out = np.array(values, copy=True)
        index = (slice(None),) * h + (slice(0, n),)
        out[index] = self._kernel_rotate(part, pos, cfg, seq_len, inverse)
        return self._finish(qkv, out, inplace)


# -- the broken backends: one deviation each (``targets``: bug classes it must fail) ---------------------


class WrongLayout(Float32Backend):
    """Pairs (i, i + d/2) and (2i, 2i + 1) swapped (vLLM #49290, vllm-metal #44)."""

    targets = ("layout",)

    def _pairs(self, cfg, layout):
        return super()._pairs(cfg, "interleaved" if layout == "half" else "half")


class FlippedDirection(Float32Backend):
    """Rotates by -angle: x cos + y sin (TransformerLens #364)."""

    targets = ("rotation_direction",)

    def _sin_sign(self):
        return -1.0


class OffByOnePosition(Float32Backend):
    """Positions start at 1 (arange(1, S + 1), a wrong past length)."""

    targets = ("position_offset",)

    def _positions(self, positions):
        return super()._positions(np.asarray(positions) + 1)


class ExponentOverHeadDim(Float32Backend):
    """theta_i = base^(-2i/head_dim) instead of base^(-2i/rotary_dim) (pie #603, HF #48630)."""

    targets = ("inv_freq_exponent",)

    def _inv_freq(self, cfg, seq_len):
        if cfg.scaling is None:
            return self._default_inv_freq(cfg.base, cfg.head_dim)[: cfg.rotary_dim // 2]
        return super()._inv_freq(cfg, seq_len)


class PositionsBF16(Float32Backend):
    """Positions cast to bfloat16 (gpt-neox PR #1016: 257 becomes 256)."""

    targets = ("precision_positions",)

    def _positions(self, positions):
        return round_bf16(super()._positions(positions))


class PositionsFP16(Float32Backend):
    """Positions cast to float16 (Megatron-LM #535: 2049 becomes 2048)."""

    targets = ("precision_positions",)

    def _positions(self, positions):
        return super()._positions(positions).astype(np.float16).astype(F32)


class AnglesFP16(Float32Backend):
    """The angle product pos * inv_freq computed in float16 (gpt-neox #1003)."""

    targets = ("precision_angles",)

    def _angles(self, pos32, omega32):
        return (pos32.astype(np.float16)[..., None] * omega32.astype(np.float16)).astype(F32)


class AnglesBF16(Float32Backend):
    """The angle product computed in bfloat16 under autocast (HF PR #29285)."""

    targets = ("precision_angles",)

    def _angles(self, pos32, omega32):
        return round_bf16(round_bf16(pos32)[..., None] * round_bf16(omega32))


class WrongPartialBlock(Float32Backend):
    """Rotates the last rotary_dim channels instead of the first (cascadia #69)."""

    targets = ("partial_rotary",)

    def _block(self, cfg):
        return slice(cfg.head_dim - cfg.rotary_dim, cfg.head_dim)


class ScalingDropped(Float32Backend):
    """The rope_scaling dict is ignored (`type` vs `rope_type`, mlxcel #1355)."""

    targets = (
        "scaling_linear",
        "scaling_ntk",
        "scaling_dynamic",
        "scaling_yarn",
        "scaling_llama3",
        "scaling_longrope",
    )

    def _rope_type(self, cfg):
        return "default"

    def _inv_freq(self, cfg, seq_len):
        return self._default_inv_freq(cfg.base, cfg.rotary_dim)

    def _factor(self, cfg, seq_len):
        return 1.0


class LinearTwice(Float32Backend):
    """Linear scaling applied to inv_freq and again to the positions (sglang PR #33558)."""

    targets = ("scaling_linear",)

    def _inv_freq(self, cfg, seq_len):
        inv = super()._inv_freq(cfg, seq_len)
        return inv / F32(cfg.scaling.factor) if self._rope_type(cfg) == "linear" else inv


class YarnFactorDropped(Float32Backend):
    """YaRN's attention factor (mscale) left out of cos and sin (vLLM PR #46280)."""

    targets = ("yarn_attention_factor",)

    def _factor(self, cfg, seq_len):
        return 1.0 if self._rope_type(cfg) == "yarn" else super()._factor(cfg, seq_len)


class YarnFactorTwice(Float32Backend):
    """YaRN's attention factor applied to cos/sin and again to the output (DeepSeek ports)."""

    targets = ("yarn_attention_factor",)

    def _factor(self, cfg, seq_len):
        f = super()._factor(cfg, seq_len)
        return f * f if self._rope_type(cfg) == "yarn" else f


class DynamicNTKLeak(Float32Backend):
    """Dynamic NTK keeps the longest sequence length it has seen (HF #25306: the base never shrinks)."""

    targets = ("scaling_dynamic_state",)

    _longest = 0

    def _inv_freq(self, cfg, seq_len):
        if self._rope_type(cfg) == "dynamic" and seq_len is not None:
            self._longest = seq_len = max(seq_len, self._longest)
        return super()._inv_freq(cfg, seq_len)


class LongRoPEWrongSide(Float32Backend):
    """LongRoPE switches to long factors at seq_len == original context (`>=` for `>`, llama.cpp #24823)."""

    targets = ("scaling_longrope_switch",)

    def _inv_freq(self, cfg, seq_len):
        bump = self._rope_type(cfg) == "longrope" and seq_len is not None
        return super()._inv_freq(cfg, seq_len + 1 if bump else seq_len)

    def _factor(self, cfg, seq_len):
        bump = self._rope_type(cfg) == "longrope" and seq_len is not None
        return super()._factor(cfg, seq_len + 1 if bump else seq_len)


class ChatGLMIdsSwapped(Float32Backend):
    """ChatGLM-6B position ids and block position ids swapped between the two halves."""

    targets = ("chatglm_2d",)

    def _chatglm_ids(self, position_ids, block_position_ids):
        return block_position_ids, position_ids


class BatchRow0Positions(Float32Backend):
    """Batch row 0's positions used for every row (HF PR #29109, ChatGLM-Tuning #11)."""

    targets = ("per_row_positions",)

    def _positions(self, positions):
        pos = np.asarray(positions)
        return super()._positions(np.broadcast_to(pos[:1], pos.shape) if pos.ndim >= 2 else pos)


class OnlyHead0(Float32Backend):
    """Only head 0 of x (batch, heads, seq, head_dim) rotated (aprender PR #2079)."""

    targets = ("heads",)

    def _rotated_heads(self, out, x):
        return np.concatenate([out[:, :1], x[:, 1:]], axis=1) if out.ndim == 4 else out


#: Every broken backend, one per bug listed in the conformance issue (plus two precision variants).
BROKEN = (
    WrongLayout,
    FlippedDirection,
    OffByOnePosition,
    ExponentOverHeadDim,
    PositionsBF16,
    PositionsFP16,
    AnglesFP16,
    AnglesBF16,
    WrongPartialBlock,
    ScalingDropped,
    LinearTwice,
    YarnFactorDropped,
    YarnFactorTwice,
    DynamicNTKLeak,
    LongRoPEWrongSide,
    ChatGLMIdsSwapped,
    BatchRow0Positions,
    OnlyHead0,
)


# -- broken backends for the families of issue 15 (one per family; ``targets`` as above) -----------------


class InterleavedPathUnscaled(Float32Backend):
    """The interleaved (GPT-J) kernel path builds its own default tables: the scaling is lost there only."""

    targets = ("crossed_axes",)

    def _table(self, positions, cfg, seq_len, sign: float = 1.0):
        if cfg.layout == "interleaved" and cfg.scaling is not None:
            from rope_ref import RopeConfig

            cfg = RopeConfig(cfg.head_dim, layout=cfg.layout, rotary_dim=cfg.rotary_dim, base=cfg.base)
        return super()._table(positions, cfg, seq_len, sign)


class NegativePositionsWrap(Float32Backend):
    """Positions index a cos/sin cache of 8192 rows: -k reads row 8192 - k (Python negative indexing).

    Only the positions the caller passes are looked up; the backward pass (autograd of the lookup)
    rotates by minus the looked-up angle, so it never indexes with the negated positions itself.
    """

    targets = ("negative_positions",)

    def _table(self, positions, cfg, seq_len, sign: float = 1.0):
        pos = np.asarray(positions)
        return super()._table(np.where(pos < 0, pos + 8192, pos), cfg, seq_len, sign)


class SeqLenIgnored(Float32Backend):
    """An explicit seq_len is dropped: length-dependent scalings always see max(positions) + 1."""

    targets = ("explicit_seq_len",)

    def _table(self, positions, cfg, seq_len, sign: float = 1.0):
        return super()._table(positions, cfg, None, sign)


class YarnBetasDefault(Float32Backend):
    """YaRN's beta_fast/beta_slow read from the wrong config keys, so the defaults 32 and 1 always apply."""

    targets = ("scaling_parameters",)

    def _inv_freq(self, cfg, seq_len):
        if self._rope_type(cfg) != "yarn":
            return super()._inv_freq(cfg, seq_len)
        from rope_ref.scaling import scaling_from_hf

        hf = {k: v for k, v in cfg.scaling.to_hf().items() if k not in ("beta_fast", "beta_slow")}
        return np.asarray(scaling_from_hf(hf).inv_freq(cfg.base, cfg.rotary_dim, seq_len), dtype=F32)


class ScaledExponentOverHeadDim(Float32Backend):
    """With rotary_dim < head_dim, the scaled table's exponent runs over head_dim (Phi-4-mini ports): the
    scaling's per-pair ratio is applied to base^(-2i/head_dim) instead of base^(-2i/rotary_dim)."""

    targets = ("scaling_partial_rotary",)

    def _inv_freq(self, cfg, seq_len):
        scaled = super()._inv_freq(cfg, seq_len)
        if cfg.scaling is None or cfg.rotary_dim == cfg.head_dim:
            return scaled
        ratio = scaled / self._default_inv_freq(cfg.base, cfg.rotary_dim)
        return self._default_inv_freq(cfg.base, cfg.head_dim)[: cfg.rotary_dim // 2] * ratio


class CacheKeyedWithoutBase(Float32Backend):
    """Tables cached by (rotary_dim, scaling, seq_len), not by base: Gemma 3's local layer (base 1e4) gets
    the global layer's base-1e6 table when both have the same head_dim."""

    targets = ("table_cache_state",)

    def __init__(self, io_dtype: str = "float32") -> None:
        super().__init__(io_dtype)
        self._cache: dict = {}

    def _table(self, positions, cfg, seq_len, sign: float = 1.0):
        pos = np.asarray(positions)
        seq_len = self._seq_len(cfg, pos, seq_len)
        key = (cfg.rotary_dim, None if cfg.scaling is None else repr(cfg.scaling.to_hf()), seq_len)
        if key not in self._cache:  # the rotary module's table cache; the inv_freq accessor is uncached
            self._cache[key] = super()._inv_freq(cfg, seq_len)
        theta = self._angles(self._positions(sign * pos), self._cache[key])
        factor = F32(self._factor(cfg, seq_len))
        return factor * np.cos(theta), factor * np.sin(theta) * F32(self._sin_sign())


class RowTileTailDropped(Float32Backend):
    """Rows (every leading axis, heads included) go in tiles of 64; once there is more than one tile the
    last partial tile is never launched (grid = rows // 64), so its rows come back unrotated."""

    targets = ("kernel_tails",)

    def _rotated_heads(self, out, x):
        rows = int(np.prod(out.shape[:-1]))
        if rows <= 64 or rows % 64 == 0:
            return out
        flat, keep = out.reshape(rows, -1).copy(), x.reshape(rows, -1)
        flat[rows - rows % 64 :] = keep[rows - rows % 64 :]
        return flat.reshape(out.shape)


class NextBlockIdStale(Float32Backend):
    """ChatGLM-6B decoding: the block id of the new token counted before it was appended (seq_len - 1)."""

    targets = ("chatglm_incremental",)

    def chatglm_next_position_ids(self, input_ids, **params):
        out = np.array(super().chatglm_next_position_ids(input_ids, **params), copy=True)
        if out.ndim == 3:
            out[:, 1] -= 1
        return out


#: The broken backends of the issue-15 families (each fails its own family).
BROKEN_ISSUE15 = (
    InterleavedPathUnscaled,
    NegativePositionsWrap,
    SeqLenIgnored,
    YarnBetasDefault,
    ScaledExponentOverHeadDim,
    CacheKeyedWithoutBase,
    RowTileTailDropped,
    NextBlockIdStale,
)
BROKEN = BROKEN + BROKEN_ISSUE15


# -- issue 20: multi-axis RoPE (docs/multimodal.md §10) ------------------------------------------------------


def _respec(spec, *, layout=None, streams=None, tables=None, rotary_pairs=None):
    """``spec`` with some fields replaced (``rotary_pairs``: stretch the stream table to that many pairs)."""
    from rope_ref.multiaxis import MultiAxisRope

    streams = tuple(spec.streams if streams is None else streams)
    if rotary_pairs is not None:
        streams = tuple(streams[i * len(streams) // rotary_pairs] for i in range(rotary_pairs))
    return MultiAxisRope(
        spec.head_dim,
        layout=layout or spec.layout,
        streams=streams,
        tables=spec.tables if tables is None else tables,
        freq_index=None if rotary_pairs is not None or tables is not None else spec.freq_index,
        blocks=spec.blocks,
    )


class MultiAxisPairingIgnored(Float32Backend):
    """The multi-axis kernel hard-codes rotate_half: GLM-4V's interleaved pairs are rotated as halves
    (vLLM's M-RoPE Triton kernel ignored is_neox_style=False, #49290; vllm-ascend #12765)."""

    targets = ("mrope_pairing_flag",)

    def _ma_spec(self, spec):
        return _respec(spec, layout="half")


class SectionsOutOfOrder(Float32Backend):
    """mrope_section applied to the streams as (H, T, W): the first section reads the height ids."""

    targets = ("mrope_section_order",)

    def _ma_spec(self, spec):
        if spec.n_streams != 3:
            return spec
        return _respec(spec, streams=[(1, 0, 2)[s] for s in spec.streams])


class InterleavedReadAsBlocked(Float32Backend):
    """Qwen3-VL's interleaved sections (pairs cycle T, H, W) laid out as contiguous blocks T..., H..., W...
    (vLLM's interleaved M-RoPE under torch.compile, PR #40680)."""

    targets = ("mrope_interleaved_vs_blocked",)

    def _ma_spec(self, spec):
        return _respec(spec, streams=sorted(spec.streams))


class PartialRotaryDropped(Float32Backend):
    """partial_rotary_factor dropped in the M-RoPE path: the table is built over head_dim and every channel
    is rotated, sections stretched to head_dim/2 pairs (maxtext #4616: 256 channels instead of 64)."""

    targets = ("mrope_partial_rotary",)

    def _ma_spec(self, spec):
        from rope_ref import RopeConfig

        if spec.rotary_dim == spec.head_dim:
            return spec
        full = tuple(RopeConfig(spec.head_dim, layout=t.layout, base=t.base) for t in spec.tables)
        return _respec(spec, tables=full, rotary_pairs=spec.head_dim // 2)


class MLARopeYarnDropped(Float32Backend):
    """The MLA rope part built with plain RoPE: YaRN's frequency interpolation lost on the decoupled path."""

    targets = ("mla_rope_yarn",)

    def _ma_spec(self, spec):
        from rope_ref import RopeConfig

        if all(t.scaling is None for t in spec.tables):
            return spec
        plain = tuple(
            RopeConfig(t.head_dim, layout=t.layout, rotary_dim=t.rotary_dim, base=t.base) for t in spec.tables
        )
        return _respec(spec, tables=plain)


class MergeWindowIgnored(Float32Backend):
    """Qwen2-VL ViT ids listed row-major (Pixtral's order) instead of window by window."""

    targets = ("vision_merge_window_order",)

    def vision_ids(self, grids, *, convention, spatial_merge_size):
        from rope_ref import vision_rope

        if convention != "qwen2-vl":
            return super().vision_ids(grids, convention=convention, spatial_merge_size=spatial_merge_size)
        g = np.asarray(grids)
        return np.concatenate([np.tile(vision_rope.pixtral_ids([[h, w]]), t) for t, h, w in g], axis=1)


class TemporalScalingMissing(Float32Backend):
    """Qwen2.5-VL videos given Qwen2-VL's t ids (t = k): second_per_grid_ts x tokens_per_second ignored."""

    targets = ("mrope_temporal_scaling",)

    def mrope_position_ids(self, input_ids, image_grid_thw, video_grid_thw, attention_mask, seconds, **kw):
        if kw["rule"] == "qwen2.5-vl":
            kw, seconds = {**kw, "rule": "qwen2-vl"}, None
        return super().mrope_position_ids(
            input_ids, image_grid_thw, video_grid_thw, attention_mask, seconds, **kw
        )


class LeftPaddingIgnored(Float32Backend):
    """M-RoPE ids computed without the attention mask: left padding counted as text tokens."""

    targets = ("mrope_left_padding",)

    def mrope_position_ids(self, input_ids, image_grid_thw, video_grid_thw, attention_mask, seconds, **kw):
        return super().mrope_position_ids(input_ids, image_grid_thw, video_grid_thw, None, seconds, **kw)


class DecodeDeltasIgnored(Float32Backend):
    """Decoding ignores mrope_position_deltas: new tokens get cache_position + j in all three streams."""

    targets = ("mrope_decode_deltas",)

    def mrope_decode_ids(self, deltas, *, cache_position, n_new):
        return super().mrope_decode_ids(
            np.zeros_like(np.asarray(deltas)), cache_position=cache_position, n_new=n_new
        )


class SecondMscaleMissing(Float32Backend):
    """MLA softmax scale left at qk_head_dim^-0.5: the mscale(f, mscale_all_dim)^2 correction dropped
    (HF PR #47435, llama.cpp #7118)."""

    targets = ("mla_second_mscale",)

    def _mscale(self, factor: float, m: float) -> float:
        return 1.0


class SecondMscaleSquaredTwice(Float32Backend):
    """MLA softmax scale multiplied by mscale^4: the squared correction applied again (Megatron-LM #1429)."""

    targets = ("mla_second_mscale",)

    def _mscale(self, factor: float, m: float) -> float:
        return super()._mscale(factor, m) ** 2


#: The broken backends of the issue-20 families (each fails its own family).
BROKEN_ISSUE20 = (
    MultiAxisPairingIgnored,
    SectionsOutOfOrder,
    InterleavedReadAsBlocked,
    PartialRotaryDropped,
    MLARopeYarnDropped,
    MergeWindowIgnored,
    TemporalScalingMissing,
    LeftPaddingIgnored,
    DecodeDeltasIgnored,
    SecondMscaleMissing,
    SecondMscaleSquaredTwice,
)
BROKEN = BROKEN + BROKEN_ISSUE20


# -- issue 16: the shapes real kernels see (one realistic bug per family) ------------------------------------


def _contiguous(view: np.ndarray) -> np.ndarray:
    """The memory from ``view``'s first element read (or written) as if ``view`` were C-contiguous."""
    strides, step = [], view.itemsize
    for n in reversed(view.shape):
        strides.append(step)
        step *= n
    return np.lib.stride_tricks.as_strided(view, shape=view.shape, strides=tuple(reversed(strides)))


class IgnoresStrides(Float32Backend):
    """A kernel that indexes ``x`` as if it were contiguous: a transposed q or one sliced out of a packed
    projection is read from the wrong addresses (issue 16: 94% wrong elements, max error 6.3)."""

    targets = ("strided_views",)

    def _read(self, x):
        return np.array(_contiguous(np.asarray(x)))


class KHeadFromQIndex(Float32Backend):
    """A fused q/k kernel that derives k's head from q's head index (``h * Hq/Hk mod Hk``) instead of its
    own: with GQA, k heads are rotated from the wrong input head."""

    targets = ("gqa_heads",)

    def _k_heads(self, hq, hk):
        return (np.arange(hk) * (hq // hk)) % hk


class RotatesV(Float32Backend):
    """A packed-qkv kernel whose head loop runs over all ``Hq + 2 Hk`` heads: V is rotated too."""

    targets = ("packed_qkv",)

    def _qkv_rotated(self, hq, hk):
        return hq + 2 * hk


class NoRestartPerSequence(Float32Backend):
    """Varlen positions taken as the global token index: sequences after the first do not restart at 0."""

    targets = ("varlen",)

    def _token_ids(self, cu, starts):
        t = np.arange(int(cu[-1]))
        return starts[np.searchsorted(cu, t, side="right") - 1] + t


class WritesPastSlice(Float32Backend):
    """An in-place kernel that writes its result as one contiguous block from the view's first element:
    past the end of q when q is a slice of a packed buffer, over the rows between a strided view's."""

    targets = ("inplace",)

    def _write(self, view, y):
        _contiguous(view)[...] = y


class OffsetPerToken(Float32Backend):
    """The cache offset indexed per token instead of per sequence (``offset[s]`` for token s, wrapping at
    the batch size; ``start_offsets[t]`` for packed token t)."""

    targets = ("cache_offset",)

    def _row_offsets(self, offset, batch, seq):
        off = np.broadcast_to(np.asarray(offset, dtype=np.int64).reshape(-1), (batch,))
        return np.broadcast_to(off[np.arange(seq) % batch][None, :], (batch, seq))


class AxesAsBshd(Float32Backend):
    """HF ``(B, S)`` ids always laid on the first two axes, as if x were ``bshd``: wrong for ``sbhd``
    (batch and sequence swapped) and ``bhsd`` (ids on the heads)."""

    targets = ("axes_convention",)

    def _place(self, ids, axes, shape):
        ids = np.asarray(ids)
        if ids.ndim == 2:
            lead = tuple(shape[:-1])
            return np.broadcast_to(ids.reshape(ids.shape + (1,) * (len(lead) - 2)), lead)
        return super()._place(ids, axes, shape)


class InverseSignIgnored(Float32Backend):
    """``inverse=True`` ignored: the de-rotation rotates forward again."""

    targets = ("inverse_rotation",)

    def _sign(self, inverse):
        return 1.0


BROKEN_ISSUE16 = (
    IgnoresStrides,
    KHeadFromQIndex,
    RotatesV,
    NoRestartPerSequence,
    WritesPastSlice,
    OffsetPerToken,
    AxesAsBshd,
    InverseSignIgnored,
)
BROKEN = BROKEN + BROKEN_ISSUE16


# -- the runner's own checks: outputs a correct rotation but in a form the protocol forbids -----------------
# Each makes one mistake of packaging, not of RoPE arithmetic; the runner must record it as its kind.


class IntegerOutput(Float32Backend):
    """``apply`` returns its (rounded) result as int32, as after an accidental ``.int()``: a dtype failure."""

    def apply(self, x, positions, cfg, seq_len=None):
        return np.rint(super().apply(x, positions, cfg, seq_len)).astype(np.int32)


class OutputNotCastBack(Float32Backend):
    """Computes in float32 and forgets the final cast to the declared I/O dtype (``.type_as(x)``)."""

    def apply(self, x, positions, cfg, seq_len=None):
        return super().apply(x, positions, cfg, seq_len).astype(np.float32)


class Bfloat16LowBitsKept(Float32Backend):
    """Declares bfloat16 I/O and returns float32 values cut to 16 significand bits: bits 8-15 kept."""

    def apply(self, x, positions, cfg, seq_len=None):
        y = super().apply(x, positions, cfg, seq_len)  # bfloat16 values, as float32
        bits = y.view(np.uint32) | np.uint32(0x0100)  # one bit bfloat16 does not have
        return bits.view(np.float32)


class FloatPositionIds(Float32Backend):
    """ChatGLM position ids returned as float32 (an integer operation judged by the exact rule)."""

    def chatglm_position_ids(self, input_ids, **params):
        return np.asarray(super().chatglm_position_ids(input_ids, **params), dtype=np.float32)


class ExtraTableOutput(Float32Backend):
    """``cos_sin`` returns ``(cos, sin, tan)``: one output more than the protocol's two."""

    def cos_sin(self, positions, cfg, seq_len=None):
        cos, sin = super().cos_sin(positions, cfg, seq_len)
        return cos, sin, sin / cos


class WrongCosNaNSin(Float32Backend):
    """cos off by 1% and one NaN in sin: the failure kind must say non-finite."""

    def cos_sin(self, positions, cfg, seq_len=None):
        cos, sin = super().cos_sin(positions, cfg, seq_len)
        sin = np.array(sin, copy=True)
        sin.reshape(-1)[-1] = np.nan
        return cos * F32(1.01), sin


RUNNER_FAILURE_PATHS = (
    IntegerOutput,
    OutputNotCastBack,
    Bfloat16LowBitsKept,
    FloatPositionIds,
    ExtraTableOutput,
    WrongCosNaNSin,
)
