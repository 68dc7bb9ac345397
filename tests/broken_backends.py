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

    def decay_upper_bound(self, distances, cfg):
        r = np.asarray(distances)
        omega = self._inv_freq(cfg, self._seq_len(cfg, np.abs(r), None))
        theta = self._angles(self._positions(r), omega)
        partial = np.cumsum(np.cos(theta), axis=-1) + 1j * np.cumsum(np.sin(theta), axis=-1)
        return np.abs(partial).astype(F32).mean(axis=-1)


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
