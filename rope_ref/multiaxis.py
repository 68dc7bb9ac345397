"""Multi-axis RoPE: every rotated pair takes its angle from one of several position streams.

RoFormer (arXiv 2104.09864) eq. 13-15 rotate pair ``i`` of a head by ``m * theta_i``, one position ``m``
per token. Multi-axis RoPE gives a token ``S`` positions ``m^(0) .. m^(S-1)`` (time, height, width, block,
...) and assigns every pair ``i`` a stream ``s(i)`` and a frequency ``phi_i``; pair ``i`` is rotated by
``m^(s(i)) * phi_i``. Channels outside the rotated pairs pass through. One mechanism covers:

* ChatGLM-6B's 2D positions (two half-heads, each a half-layout RoPE on its own stream: :func:`chatglm_2d`);
* M-RoPE of Qwen2-VL / Qwen2.5-VL / Qwen3-VL / GLM-4V (:mod:`rope_ref.mrope`);
* 2D vision RoPE of Qwen2-VL's ViT and Pixtral (:mod:`rope_ref.vision_rope`);
* plain 1D RoPE (one stream: :func:`from_config`), bit for bit :func:`rope_ref.apply`.

The rotation of each pair ``(a, b)`` is RoFormer eq. 34 exactly as :func:`rope_ref.apply` rounds it:
``y_a = x_a c - x_b s`` and ``y_b = x_b c + x_a s`` with ``c = A cos(m phi)``, ``s = A sin(m phi)`` (``A`` the
attention factor of the pair's frequency table; a pair at position 0 with ``A == 1`` is copied bit for bit).
cos and sin come only from :func:`rope_ref._exact_trig.cos_sin_of_product`. Spec: ``docs/multimodal.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import _exact_trig
from ._arrays import as_float64, as_positions, check_broadcast, check_int, check_real, set_fields
from .config import LAYOUTS, RopeConfig
from .frequencies import attention_factor, inv_freq, resolve_seq_len
from .hf_config import config_dict, rope_config_from_hf

__all__ = ["MultiAxisRope", "apply", "cos_sin", "from_config", "chatglm_2d", "stack_positions", "from_hf"]


def _int_tuple(values: Any, name: str) -> tuple[int, ...]:
    if isinstance(values, (str, bytes)) or not isinstance(values, (Sequence, np.ndarray)):
        raise TypeError(f"{name} must be a sequence of ints, got {type(values).__name__}")
    return tuple(check_int(v, f"{name}[{i}]") for i, v in enumerate(values))


@dataclass(frozen=True)
class MultiAxisRope:
    """A multi-axis RoPE of one attention head (immutable, validated).

    * ``head_dim``: channels per head; ``rotary_dim = 2 * n_pairs`` of them are rotated (the first ones),
      the rest pass through.
    * ``layout``: pairing inside each block, ``"half"`` (channel ``j`` with ``j + w/2``) or
      ``"interleaved"`` (``2j`` with ``2j + 1``), ``w`` the block width.
    * ``blocks``: the rotated channels split into this many equal contiguous blocks, each paired by the
      layout on its own (1 for every model except ChatGLM-6B's two half-heads). Pair ``i`` is pair
      ``i % (n_pairs / blocks)`` of block ``i // (n_pairs / blocks)``.
    * ``streams[i]``: the position stream of pair ``i`` (``0 .. n_streams - 1``).
    * ``tables[s]``: the :class:`~rope_ref.RopeConfig` whose :func:`rope_ref.inv_freq` (and attention
      factor) stream ``s`` reads; ``freq_index[i]`` picks pair ``i``'s entry in its stream's table.
    """

    head_dim: int
    layout: str
    streams: tuple[int, ...]
    tables: tuple[RopeConfig, ...]
    freq_index: tuple[int, ...]
    blocks: int = 1

    def __init__(
        self,
        head_dim: int,
        *,
        layout: str,
        streams: Sequence[int],
        tables: RopeConfig | Sequence[RopeConfig],
        freq_index: Sequence[int] | None = None,
        blocks: int = 1,
    ) -> None:
        head_dim = check_int(head_dim, "head_dim")
        if head_dim <= 0 or head_dim % 2:
            raise ValueError(f"head_dim must be a positive even integer, got {head_dim}")
        if not isinstance(layout, str) or layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        streams = _int_tuple(streams, "streams")
        n_pairs = len(streams)
        if n_pairs == 0 or 2 * n_pairs > head_dim:
            raise ValueError(
                f"streams must name one stream per rotated pair, 1..head_dim/2={head_dim // 2} pairs, "
                f"got {n_pairs}"
            )
        if isinstance(tables, RopeConfig):
            tables = (tables,) * (max(streams) + 1 if min(streams) >= 0 else 1)
        tables = tuple(tables)
        if not tables or not all(isinstance(t, RopeConfig) for t in tables):
            raise TypeError("tables must be a RopeConfig or a non-empty sequence of them, one per stream")
        bad = [s for s in streams if not 0 <= s < len(tables)]
        if bad:
            raise ValueError(f"streams must lie in 0..{len(tables) - 1} (one table per stream), got {bad[0]}")
        blocks = check_int(blocks, "blocks", minimum=1)
        if n_pairs % blocks:
            raise ValueError(f"blocks={blocks} must divide the number of rotated pairs {n_pairs}")
        per_block = n_pairs // blocks
        if freq_index is None:
            freq_index = tuple(i % per_block for i in range(n_pairs))
        freq_index = _int_tuple(freq_index, "freq_index")
        if len(freq_index) != n_pairs:
            raise ValueError(f"freq_index must have one entry per pair ({n_pairs}), got {len(freq_index)}")
        for i, (s, k) in enumerate(zip(streams, freq_index, strict=True)):
            if not 0 <= k < tables[s].n_pairs:
                raise ValueError(
                    f"freq_index[{i}]={k} is outside stream {s}'s table of {tables[s].n_pairs} frequencies"
                )
        set_fields(
            self,
            head_dim=head_dim,
            layout=layout,
            streams=streams,
            tables=tables,
            freq_index=freq_index,
            blocks=blocks,
        )

    @property
    def n_pairs(self) -> int:
        """Number of rotated pairs."""
        return len(self.streams)

    @property
    def n_streams(self) -> int:
        """Number of position streams (the leading axis of the positions :func:`apply` takes)."""
        return len(self.tables)

    @property
    def rotary_dim(self) -> int:
        """Rotated channels, ``2 * n_pairs``; channels ``rotary_dim:`` pass through."""
        return 2 * self.n_pairs

    def pair_indices(self) -> tuple[np.ndarray, np.ndarray]:
        """Channel indices ``(a, b)``: pair ``i`` rotates channels ``a[i]`` and ``b[i]``."""
        per_block = self.n_pairs // self.blocks
        width = 2 * per_block
        j = np.arange(per_block)
        a_parts, b_parts = [], []
        for k in range(self.blocks):
            if self.layout == "half":
                a_parts.append(k * width + j)
                b_parts.append(k * width + j + per_block)
            else:
                a_parts.append(k * width + 2 * j)
                b_parts.append(k * width + 2 * j + 1)
        return np.concatenate(a_parts), np.concatenate(b_parts)

    def pair_frequencies(self, seq_len: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(phi, A)``: per pair its frequency and attention factor, float64, shape ``(n_pairs,)``."""
        freqs = [inv_freq(t, seq_len) for t in self.tables]
        factors = [attention_factor(t, seq_len) for t in self.tables]
        phi = np.array([freqs[s][k] for s, k in zip(self.streams, self.freq_index, strict=True)])
        amp = np.array([factors[s] for s in self.streams], dtype=np.float64)
        return phi, amp

    def __repr__(self) -> str:
        return (
            f"MultiAxisRope(head_dim={self.head_dim}, layout={self.layout!r}, n_pairs={self.n_pairs}, "
            f"n_streams={self.n_streams}, blocks={self.blocks})"
        )


def _check_spec(spec: Any) -> MultiAxisRope:
    if not isinstance(spec, MultiAxisRope):
        raise TypeError(f"spec must be a rope_ref.multiaxis.MultiAxisRope, got {type(spec).__name__}")
    return spec


def stack_positions(*streams: Any, name: str = "positions") -> np.ndarray:
    """Stack per-stream position arrays (broadcast against each other) into one ``(S, ...)`` float64 array."""
    arrs = [as_positions(s, f"{name}[{i}]") for i, s in enumerate(streams)]
    try:
        arrs = np.broadcast_arrays(*arrs)
    except ValueError:
        raise ValueError(
            f"the {name} streams do not broadcast together: shapes {[a.shape for a in arrs]}"
        ) from None
    return np.stack(arrs, axis=0)


def _positions(positions: Any, spec: MultiAxisRope, lead: tuple[int, ...]) -> np.ndarray:
    pos = as_positions(positions)
    if pos.ndim == 0 or pos.shape[0] != spec.n_streams:
        raise ValueError(
            f"positions must have a leading axis of n_streams={spec.n_streams} (one row per stream), "
            f"got shape {pos.shape}"
        )
    check_broadcast(pos[0], lead)
    return pos


def _resolved_seq_len(pos: np.ndarray, spec: MultiAxisRope, seq_len: int | None) -> int | None:
    """HF ``dynamic_rope_update`` rule over all streams: ``max(position_ids) + 1`` (one length for all)."""
    lengths = {resolve_seq_len(pos, t, seq_len) for t in spec.tables}
    lengths.discard(None)
    return max(lengths) if lengths else seq_len


def cos_sin(
    positions: Any, spec: MultiAxisRope, *, seq_len: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``(A cos(m^(s(i)) phi_i), A sin(m^(s(i)) phi_i))``, shape ``positions.shape[1:] + (n_pairs,)``.

    ``positions`` has shape ``(n_streams, ...)``. cos and sin of the product come from
    :func:`rope_ref._exact_trig.cos_sin_of_product`; the attention factor multiplies both (HF semantics).
    """
    spec = _check_spec(spec)
    pos = as_positions(positions)
    if pos.ndim == 0 or pos.shape[0] != spec.n_streams:
        raise ValueError(f"positions must have a leading axis of n_streams={spec.n_streams}, got {pos.shape}")
    _, cos, sin, _ = _cos_sin(pos, spec, _resolved_seq_len(pos, spec, seq_len))
    return cos, sin


def _cos_sin(pos: np.ndarray, spec: MultiAxisRope, seq_len: int | None):
    phi, amp = spec.pair_frequencies(seq_len)
    m = np.moveaxis(pos, 0, -1)[..., np.asarray(spec.streams)]  # (..., n_pairs): m^(s(i))
    cos, sin = _exact_trig.cos_sin_of_product(m, phi)
    cos = np.array(cos, dtype=np.float64)
    sin = np.array(sin, dtype=np.float64)
    if np.any(amp != 1.0):
        cos = cos * amp
        sin = sin * amp
    return m, cos, sin, amp


def apply(x: Any, positions: Any, spec: MultiAxisRope, *, seq_len: int | None = None) -> np.ndarray:
    """Rotate ``x`` (``(..., head_dim)``) by multi-axis ``positions`` (``(n_streams, ...)``), float64.

    ``positions[s]`` is stream ``s`` and broadcasts against ``x.shape[:-1]``. Pair ``i`` = channels
    ``(a_i, b_i)`` of :meth:`MultiAxisRope.pair_indices` is rotated by ``m^(s(i)) * phi_i``:
    ``y_a = x_a c - x_b s``, ``y_b = x_b c + x_a s`` (one rounding per operation, as :func:`rope_ref.apply`);
    a pair whose position is 0 and whose attention factor is 1 is copied unchanged; channels
    ``rotary_dim:`` are copied. ``seq_len`` matters only for length-dependent scalings; by default it is
    ``max(positions) + 1`` over all streams (HF ``dynamic_rope_update``).
    """
    spec = _check_spec(spec)
    x = as_float64(x, "x")
    if x.ndim == 0 or x.shape[-1] != spec.head_dim:
        raise ValueError(f"x.shape[-1] must equal head_dim={spec.head_dim}, got x.shape={x.shape}")
    lead = x.shape[:-1]
    pos = _positions(positions, spec, lead)
    m, c, s, amp = _cos_sin(pos, spec, _resolved_seq_len(pos, spec, seq_len))
    pad = (1,) * (len(lead) - (pos.ndim - 1))
    m, c, s = (t.reshape(pad + t.shape) for t in (m, c, s))
    a, b = spec.pair_indices()
    xa, xb = x[..., a], x[..., b]
    ya = np.subtract(np.multiply(xa, c), np.multiply(xb, s))
    yb = np.add(np.multiply(xb, c), np.multiply(xa, s))
    # Position 0 (factor 1) is the identity bit for bit, signed zeros and infinities included.
    keep = (m == 0) & (amp == 1.0)
    if keep.any():
        ya = np.where(keep, xa, ya)
        yb = np.where(keep, xb, yb)
    out = x.copy()
    out[..., a] = ya
    out[..., b] = yb
    return out


def from_config(cfg: RopeConfig) -> MultiAxisRope:
    """Plain 1D RoPE as a one-stream instance: ``apply(x, pos[None], from_config(cfg)) == rope_ref.apply``."""
    if not isinstance(cfg, RopeConfig):
        raise TypeError(f"cfg must be a rope_ref.RopeConfig, got {type(cfg).__name__}")
    return MultiAxisRope(cfg.head_dim, layout=cfg.layout, streams=(0,) * cfg.n_pairs, tables=(cfg,))


def chatglm_2d(head_dim: int = 128, base: float = 10000.0) -> MultiAxisRope:
    """ChatGLM-6B's 2D RoPE: two half-heads, each a half-layout RoPE over ``head_dim / 2`` channels.

    Stream 0 (position ids) rotates ``x[..., :head_dim/2]``, stream 1 (block position ids) the rest, both
    with ``theta_i = base^(-2i/(head_dim/2))``. Released ``modeling_chatglm.py`` of THUDM/chatglm-6b
    (mirror yuanmeng1120/ChatGLM-6b-api @cbe6681c): ``SelfAttention.forward`` (``query.chunk(2, -1)``),
    ``RotaryEmbedding(hidden/(heads*2))``, ``apply_rotary_pos_emb_index``. See ``docs/chatglm.md``.
    """
    head_dim = check_int(head_dim, "head_dim")
    if head_dim <= 0 or head_dim % 4:
        raise ValueError(f"head_dim must be a positive multiple of 4, got {head_dim}")
    table = RopeConfig(head_dim // 2, layout="half", base=base)
    q = head_dim // 4
    return MultiAxisRope(
        head_dim, layout="half", streams=(0,) * q + (1,) * q, tables=(table, table), blocks=2
    )


def from_hf(config: Any, *, layout: str | None = None) -> MultiAxisRope:
    """The text RoPE of an HF config as a multi-axis spec: ChatGLM-6B (``position_encoding_2d``) is
    :func:`chatglm_2d` of ``hidden_size / num_attention_heads`` (base 10000, or ``rope_theta``); any
    other config is :func:`from_config` of :func:`rope_ref.hf_config.rope_config_from_hf`.

    ``config``: a ``config.json`` dict, a path to one or a ``PretrainedConfig``-like object
    (:func:`rope_ref.hf_config.config_dict`). M-RoPE, vision and MLA configs have their own
    ``from_hf`` (:data:`rope_ref.hf_config.FAMILIES`).
    """
    config = config_dict(config)
    if not config.get("position_encoding_2d"):
        return from_config(rope_config_from_hf(config, layout=layout))
    if layout not in (None, "half"):
        raise ValueError(f"layout={layout!r} contradicts position_encoding_2d (ChatGLM-6B pairs half-layout)")
    for key in ("hidden_size", "num_attention_heads"):
        if config.get(key) is None:
            raise ValueError(f"config is missing the key {key!r} (ChatGLM-6B head size)")
    hidden = check_int(config["hidden_size"], "hidden_size", minimum=1)
    heads = check_int(config["num_attention_heads"], "num_attention_heads", minimum=1)
    if hidden % heads:
        raise ValueError(f"hidden_size ({hidden}) is not divisible by num_attention_heads ({heads})")
    return chatglm_2d(hidden // heads, check_real(config.get("rope_theta", 10000.0), "rope_theta"))
