"""Multi-axis RoPE for the torch adapter: every rotated pair takes its angle from one of several streams.

Semantics are :func:`rope_ref.multiaxis.apply` (spec: ``docs/multimodal.md``): pair ``i`` of a
:class:`~rope_ref.multiaxis.MultiAxisRope` is rotated by ``m^(s(i)) * phi_i`` (RoFormer, arXiv 2104.09864,
eq. 34 with the position of stream ``s(i)``), cos and sin times the attention factor of the pair's table;
channels ``rotary_dim:`` pass through. One mechanism covers M-RoPE (Qwen2-VL, Qwen2.5-VL, Qwen3-VL,
GLM-4V), 2D vision RoPE and ChatGLM-6B's 2D positions.

Implementation: per spec, a constant gather index (built once, :func:`_pair_plan`) picks each pair's
stream and its frequency from the per-stream tables; the tables are the oracle's float64 ``inv_freq``
rounded once to the angle dtype (:func:`~rope_ref.backends._torch_tables.freq_table`, so every scaling
is the oracle's). The angles ``m^(s(i)) * phi_i`` are one gather and one multiply; the rotation is the
1D adapter's (:func:`~rope_ref.backends._torch_core.rotate_tables`: the memory-free autograd Function,
the functional form under ``torch.compile``). ChatGLM-style ``blocks`` are a reshape of the rotated
channels into ``(blocks, 2 * n_pairs / blocks)``, each block paired by the layout on its own.
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from rope_ref.config import RopeConfig
from rope_ref.multiaxis import MultiAxisRope

from ._torch_checks import as_positions, check_angle_dtype, check_broadcast, check_x, resolve_compute_dtype
from ._torch_core import rotate_tables
from ._torch_tables import autocast_off, expand_tables, freq_table, seq_len_of

__all__ = ["multiaxis_apply", "multiaxis_tables"]


def _check_spec(spec: Any) -> MultiAxisRope:
    if not isinstance(spec, MultiAxisRope):
        raise TypeError(f"spec must be a rope_ref.multiaxis.MultiAxisRope, got {type(spec).__name__}")
    return spec


_Plan = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], bool]


@functools.lru_cache(maxsize=256)
def _plan(spec: MultiAxisRope) -> _Plan:
    """The gather tables of ``spec``, built once per spec (plain int tuples).

    ``(unique, pair_table, gather, shared)``: ``unique[k]`` is the first stream whose table is the
    ``k``-th distinct table; pair ``i`` reads distinct table ``pair_table[i]`` at row ``gather[i]`` of the
    distinct tables concatenated; ``shared``: all pairs read one table (one attention factor).
    """
    distinct = list(dict.fromkeys(spec.tables))
    unique = tuple(spec.tables.index(t) for t in distinct)
    table_of_stream = [distinct.index(t) for t in spec.tables]
    offsets = [0]
    for t in distinct:
        offsets.append(offsets[-1] + t.n_pairs)
    pair_table = tuple(table_of_stream[s] for s in spec.streams)
    gather = tuple(offsets[k] + f for k, f in zip(pair_table, spec.freq_index, strict=True))
    return unique, pair_table, gather, len(set(pair_table)) == 1


@torch.compiler.assume_constant_result
def _pair_plan(spec: MultiAxisRope) -> _Plan:
    """:func:`_plan` as a compile-time constant (int tuples, folded into the graph by Dynamo)."""
    return _plan(spec)


def _seq_len(pos: torch.Tensor, tables: tuple[RopeConfig, ...], seq_len: int | None) -> int | None:
    """One length for every table: HF ``dynamic_rope_update`` over all streams (the oracle's rule)."""
    lengths = [n for n in (seq_len_of(pos, t, seq_len) for t in tables) if n is not None]
    return max(lengths) if lengths else seq_len


def _check_positions(positions: Any, spec: MultiAxisRope, device: torch.device) -> torch.Tensor:
    pos = as_positions(positions, device)
    if pos.ndim == 0 or pos.shape[0] != spec.n_streams:
        raise ValueError(
            f"positions must have a leading axis of n_streams={spec.n_streams} (one row per stream), "
            f"got shape {tuple(pos.shape)}"
        )
    return pos


@functools.lru_cache(maxsize=64)
def _index_tensors(spec: MultiAxisRope, device: torch.device) -> tuple[torch.Tensor, ...]:
    """``(streams, gather, pair_table)`` as int64 tensors on ``device``, made once per (spec, device)."""
    _, pair_table, gather, _ = _plan(spec)
    with torch.inference_mode(False):  # normal tensors, even when first built under inference mode
        return tuple(
            torch.tensor(v, dtype=torch.long, device=device) for v in (spec.streams, gather, pair_table)
        )


def _indices(spec: MultiAxisRope, device: torch.device) -> tuple[torch.Tensor, ...]:
    """The gather indices: cached eagerly; under ``torch.compile`` constants of the graph."""
    if torch.compiler.is_compiling():
        _, pair_table, gather, _ = _pair_plan(spec)
        return tuple(
            torch.tensor(v, dtype=torch.long, device=device) for v in (spec.streams, gather, pair_table)
        )
    return _index_tensors(spec, torch.device(device))


def _tables(
    pos: torch.Tensor,
    spec: MultiAxisRope,
    seq_len: int | None,
    angle_dtype: torch.dtype,
    device: torch.device,
) -> tuple[torch.Tensor, torch.Tensor]:
    unique_streams, _, _, shared = _pair_plan(spec)
    unique = tuple(spec.tables[s] for s in unique_streams)
    length = _seq_len(pos, unique, seq_len)
    parts = [freq_table(t, length, angle_dtype, device) for t in unique]
    streams, gather, pair_table = _indices(spec, device)
    inv = parts[0][0] if len(parts) == 1 else torch.cat([p[0] for p in parts])
    phi = inv.index_select(0, gather)  # pair i: row gather[i] of its stream's table
    with autocast_off(device.type):
        # The stream choice per pair: a gather of the (converted) positions along the stream axis.
        m = pos.to(angle_dtype).movedim(0, -1).index_select(-1, streams)
        theta = m * phi
        cos, sin = torch.cos(theta), torch.sin(theta)
        factors = [p[1] for p in parts]
        if any(isinstance(f, torch.Tensor) for f in factors):  # runtime factors (compiled, length-dependent)
            amp = torch.stack([torch.as_tensor(f, dtype=torch.float64, device=device) for f in factors])
            amp = amp.index_select(0, pair_table).to(angle_dtype)
            cos, sin = cos * amp, sin * amp
        elif shared:
            if factors[0] != 1.0:
                cos, sin = cos * factors[0], sin * factors[0]
        elif any(f != 1.0 for f in factors):
            amp = torch.tensor(factors, dtype=angle_dtype, device=device).index_select(0, pair_table)
            cos, sin = cos * amp, sin * amp
    return cos, sin


def multiaxis_tables(
    positions: Any,
    spec: MultiAxisRope,
    *,
    seq_len: int | None = None,
    angle_dtype: torch.dtype = torch.float32,
    device: Any = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(A cos(m^(s(i)) phi_i), A sin(...))`` in ``angle_dtype``, shape ``positions.shape[1:] + (n_pairs,)``.

    ``positions`` has shape ``(n_streams, ...)``. Angles are formed in ``angle_dtype`` with autocast off
    (as :func:`~rope_ref.backends._torch_tables.angle_tables`): positions converted, times the frequency
    rounded once to ``angle_dtype``. ``device``: that of ``positions`` (CPU for non-tensors) by default.
    """
    spec = _check_spec(spec)
    angle_dtype = check_angle_dtype(angle_dtype)
    if device is None:
        device = positions.device if isinstance(positions, torch.Tensor) else torch.device("cpu")
    device = torch.device(device)
    return _tables(_check_positions(positions, spec, device), spec, seq_len, angle_dtype, device)


def multiaxis_apply(
    x: torch.Tensor,
    positions: Any,
    spec: MultiAxisRope,
    *,
    seq_len: int | None = None,
    angle_dtype: torch.dtype = torch.float32,
    compute_dtype: Any = None,
    autograd: str = "function",
) -> torch.Tensor:
    """Rotate ``x`` (``(..., head_dim)``, any float dtype, CPU or CUDA) by multi-axis ``positions``.

    ``positions`` (``(n_streams, ...)``, integer or real; ``positions[s]`` broadcasts against
    ``x.shape[:-1]`` after left-padding) as in :func:`rope_ref.multiaxis.apply`. Angles in
    ``angle_dtype`` (float32 default, float64 for a float64 check), rotation in ``compute_dtype`` (see
    :func:`~rope_ref.backends._torch_checks.resolve_compute_dtype`), result in ``x.dtype``. ``autograd``:
    ``"function"`` (saves only cos/sin; backward is the inverse rotation) or ``"native"`` (plain
    autograd). Length-dependent scalings see ``seq_len`` or ``max(positions) + 1`` over all streams.
    Traceable by ``torch.compile(fullgraph=True)``.
    """
    spec = _check_spec(spec)
    x = check_x(x, spec.head_dim)
    compute = resolve_compute_dtype(compute_dtype, x.dtype)
    angle_dtype = check_angle_dtype(angle_dtype)
    pos = _check_positions(positions, spec, x.device)
    check_broadcast(pos[0], tuple(x.shape[:-1]))
    cos, sin = _tables(pos, spec, seq_len, angle_dtype, x.device)
    rd = spec.rotary_dim
    if spec.blocks == 1:
        cos, sin = expand_tables(cos, sin, x.ndim)
        return rotate_tables(x, cos, sin, spec.layout, rd, compute, autograd)
    # Blocks (ChatGLM-6B's two half-heads): each block of 2 * per_block channels is its own RoPE.
    per_block = spec.n_pairs // spec.blocks
    xr = x[..., :rd].unflatten(-1, (spec.blocks, 2 * per_block))
    cos, sin = (t.unflatten(-1, (spec.blocks, per_block)) for t in (cos, sin))
    cos, sin = expand_tables(cos, sin, xr.ndim)
    y = rotate_tables(xr, cos, sin, spec.layout, 2 * per_block, compute, autograd).flatten(-2)
    if rd == x.shape[-1]:
        return y
    return torch.cat((y, x[..., rd:]), dim=-1)
