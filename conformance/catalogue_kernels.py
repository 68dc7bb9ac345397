"""The catalogue's kernel-shape families (issue 16; operations in :mod:`conformance.kernel_shapes`).

Each family targets one bug class, runs at every I/O dtype, in both layouts, with partial rotary where it
applies. Shapes are small except the varlen family, whose sequence lengths are those of a real packed
batch plus a length-1 sequence and one longer than 2048 (so float16 positions and per-sequence restarts
show). Positions reach 2049 and 70000 where precision matters.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .case import Case
from .catalogue import DTYPE_SHORT, IO_DTYPES, _case, _normal, make_config, quantize

__all__ = ["kernel_shape_cases", "VARLEN_LENGTHS"]

#: Packed sequence lengths of the varlen family: a real batch's, a length-1 sequence and one over 2048.
VARLEN_LENGTHS = (400, 142, 169, 16, 25, 518, 156, 24, 504, 90, 4, 1, 2100)
#: Per-sequence start offsets (cached prefixes) of the varlen family, one per length above.
VARLEN_STARTS = (0, 5, 100, 2048, 0, 7, 1, 3000, 0, 0, 9, 2047, 1)


def _cu(lengths: Sequence[int]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


def _ids_bs(batch: int, seq: int) -> np.ndarray:
    """HF (B, S) ids: row 0 from 17, row 1 far out (4001 + 3 s), further rows in between."""
    rows = [np.arange(seq) + 17, 4001 + 3 * np.arange(seq)]
    rows += [np.arange(seq) * 5 + 600 * b for b in range(2, batch)]
    return np.stack(rows[:batch]).astype(np.int64)


def _kernel(
    name: str,
    op: str,
    config: dict[str, Any],
    activations: dict[str, tuple[int, ...]],
    positions: dict[str, Any],
    params: dict[str, Any],
    *,
    bug_class: str,
    description: str,
) -> list[Case]:
    """One case per I/O dtype: ids ``{op}-{name}-{fp64|fp32|fp16|bf16}``; activations drawn once per name."""
    base = {n: _normal(f"kernel/{name}/{n}", shape) for n, shape in activations.items()}
    fixed = {k: np.asarray(v, dtype=np.int64) for k, v in positions.items()}
    params = {"seq_len": None, "inverse": False, "inplace": False, "view": None, **params}
    return [
        _case(
            f"{op}-{name}-{DTYPE_SHORT[dt]}",
            op,
            config,
            {**{n: quantize(v, dt) for n, v in base.items()}, **fixed},
            bug_class=bug_class,
            tolerance="rotation",
            params=dict(params),
            io_dtype=dt,
            description=description,
        )
        for dt in IO_DTYPES
    ]


def _cfg(layout: str, head_dim: int = 16, rotary_dim: int | None = None, scaling: dict | None = None):
    return make_config(head_dim, layout, rotary_dim, scaling=scaling)


def _axes_conventions() -> list[Case]:
    ids = _ids_bs(2, 9)
    tokens = np.array([0, 1, 2, 3, 4, 0, 1, 2, 2048, 2049, 2050, 5000, 5001])
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048}
    rows = [
        ("bshd-ids-half", "bshd", (2, 9, 3, 16), _cfg("half"), ids),
        ("bhsd-ids-interleaved-partial", "bhsd", (2, 3, 9, 16), _cfg("interleaved", rotary_dim=8), ids),
        ("sbhd-ids-half-partial", "sbhd", (9, 2, 3, 16), _cfg("half", rotary_dim=8), ids),
        ("thd-ids-interleaved", "thd", (13, 3, 16), _cfg("interleaved"), tokens),
        ("bshd-ids-yarn-interleaved", "bshd", (2, 9, 3, 16), _cfg("interleaved", scaling=yarn), ids),
    ]
    out = []
    for name, axes, shape, cfg, pos in rows:
        out += _kernel(
            name,
            "apply_axes",
            cfg,
            {"x": shape},
            {"positions": pos},
            {"axes": axes, "form": "ids"},
            bug_class="axes_convention",
            description=f"apply_axes on {axes} with {'(T,) per-token' if axes == 'thd' else 'HF (B, S)'} ids",
        )
    return out


def _offsets() -> list[Case]:
    out = _kernel(
        "bshd-offset-scalar-half",
        "apply_axes",
        _cfg("half"),
        {"x": (2, 7, 3, 16)},
        {},
        {"axes": "bshd", "form": "offset", "offset": 1000},
        bug_class="cache_offset",
        description="a scalar KV-cache offset: token s at 1000 + s in every row",
    )
    rows = [
        ("bhsd-offset-rows-interleaved", "bhsd", (2, 3, 7, 16), [3, 2500], _cfg("interleaved")),
        ("sbhd-offset-rows-half-partial", "sbhd", (7, 2, 3, 16), [2049, 40], _cfg("half", rotary_dim=8)),
        ("bshd-decode-rows-interleaved", "bshd", (4, 1, 3, 16), [0, 17, 2049, 70000], _cfg("interleaved")),
    ]
    for name, axes, shape, offset, cfg in rows:
        out += _kernel(
            name,
            "apply_axes",
            cfg,
            {"x": shape},
            {"offset": offset},
            {"axes": axes, "form": "offset"},
            bug_class="cache_offset",
            description=f"a per-row KV-cache offset {offset} on {axes}: token s of row b at offset[b] + s",
        )
    return out


def _strided() -> list[Case]:
    ids = _ids_bs(2, 9)
    tokens = np.array([0, 1, 2, 3, 4, 0, 1, 2, 2048, 2049, 2050, 5000, 5001])
    rows = [
        (
            "bshd-transposed-half",
            "bshd",
            (2, 9, 4, 16),
            _cfg("half"),
            ids,
            {"kind": "transpose", "storage": "bhsd"},
            "a bshd view of a contiguous (B, H, S, D) tensor",
        ),
        (
            "bhsd-transposed-interleaved-partial",
            "bhsd",
            (2, 4, 9, 16),
            _cfg("interleaved", rotary_dim=8),
            ids,
            {"kind": "transpose", "storage": "bshd"},
            "a bhsd view of a contiguous (B, S, H, D) tensor",
        ),
        (
            "bshd-q-of-packed-half",
            "bshd",
            (2, 9, 4, 16),
            _cfg("half"),
            ids,
            {"kind": "slice", "axis": "h", "before": 0, "after": 4},
            "q sliced out of a packed (B, S, 8, D) buffer",
        ),
        (
            "thd-k-of-packed-interleaved",
            "thd",
            (13, 2, 16),
            _cfg("interleaved"),
            tokens,
            {"kind": "slice", "axis": "h", "before": 4, "after": 2},
            "k sliced out of a packed (T, 8, D) buffer",
        ),
        (
            "bshd-stride2-half-partial",
            "bshd",
            (2, 9, 3, 16),
            _cfg("half", rotary_dim=8),
            ids,
            {"kind": "strided", "axis": "s", "step": 2},
            "every other token of a buffer (sequence stride 2)",
        ),
    ]
    out = []
    for name, axes, shape, cfg, pos, view, what in rows:
        out += _kernel(
            name,
            "apply_axes",
            cfg,
            {"x": shape},
            {"positions": pos},
            {"axes": axes, "form": "ids", "view": view},
            bug_class="strided_views",
            description=f"non-contiguous input: {what}; entries outside the view hold NaN",
        )
    return out


def _gqa() -> list[Case]:
    pos5 = np.array([[0, 1, 2047, 2048, 9000]])
    tokens = np.array([0, 1, 2, 0, 2049, 70000])
    out = _kernel(
        "bshd-32-8-half",
        "apply_qk",
        _cfg("half", head_dim=16),
        {"q": (1, 5, 32, 16), "k": (1, 5, 8, 16)},
        {"positions": pos5},
        {"axes": "bshd", "form": "ids"},
        bug_class="gqa_heads",
        description="GQA q (32 heads) and k (8 heads) rotated in one call",
    )
    out += _kernel(
        "thd-17-1-interleaved",
        "apply_qk",
        _cfg("interleaved", head_dim=16),
        {"q": (6, 17, 16), "k": (6, 1, 16)},
        {"positions": tokens},
        {"axes": "thd", "form": "ids"},
        bug_class="gqa_heads",
        description="MQA q (17 heads) and k (1 head) on packed tokens",
    )
    out += _kernel(
        "bhsd-16-4-half-partial-offset",
        "apply_qk",
        _cfg("half", rotary_dim=8),
        {"q": (2, 16, 5, 16), "k": (2, 4, 5, 16)},
        {"offset": [7, 3000]},
        {"axes": "bhsd", "form": "offset"},
        bug_class="gqa_heads",
        description="GQA q (16 heads) and k (4 heads), partial rotary, per-row cache offsets",
    )
    out += _kernel(
        "thd-varlen-16-4-interleaved",
        "apply_qk",
        _cfg("interleaved", head_dim=16),
        {"q": (9, 16, 16), "k": (9, 4, 16)},
        {"cu_seqlens": _cu([3, 1, 5])},
        {"axes": "thd", "form": "cu_seqlens"},
        bug_class="gqa_heads",
        description="GQA q (16 heads) and k (4 heads) on varlen packed sequences",
    )
    return out


def _packed() -> list[Case]:
    out = _kernel(
        "bshd-4-2-half",
        "apply_qkv",
        _cfg("half"),
        {"qkv": (2, 6, 8, 16)},
        {"positions": _ids_bs(2, 6)},
        {"axes": "bshd", "form": "ids", "num_heads_q": 4, "num_heads_kv": 2},
        bug_class="packed_qkv",
        description="packed (B, S, 4 + 2*2, D): q and k heads rotated, V bit-exact",
    )
    out += _kernel(
        "thd-8-1-interleaved-partial",
        "apply_qkv",
        _cfg("interleaved", rotary_dim=8),
        {"qkv": (9, 10, 16)},
        {"cu_seqlens": _cu([4, 1, 4]), "start_offsets": [0, 100, 2047]},
        {"axes": "thd", "form": "cu_seqlens", "num_heads_q": 8, "num_heads_kv": 1},
        bug_class="packed_qkv",
        description="packed varlen (T, 8 + 2*1, D) with start offsets, partial rotary, V bit-exact",
    )
    out += _kernel(
        "bhsd-4-4-interleaved-offset",
        "apply_qkv",
        _cfg("interleaved", head_dim=16),
        {"qkv": (1, 12, 5, 16)},
        {},
        {"axes": "bhsd", "form": "offset", "offset": 70, "num_heads_q": 4, "num_heads_kv": 4},
        bug_class="packed_qkv",
        description="packed MHA (B, 4 + 2*4, S, D) with a scalar cache offset, V bit-exact",
    )
    return out


def _varlen() -> list[Case]:
    cu = _cu(VARLEN_LENGTHS)
    total = int(cu[-1])
    out = _kernel(
        "thd-lengths-half",
        "apply_axes",
        _cfg("half", head_dim=4),
        {"x": (total, 1, 4)},
        {"cu_seqlens": cu},
        {"axes": "thd", "form": "cu_seqlens"},
        bug_class="varlen",
        description=f"{len(VARLEN_LENGTHS)} packed sequences (lengths {list(VARLEN_LENGTHS)}): positions "
        "restart at 0 in every sequence",
    )
    out += _kernel(
        "thd-lengths-starts-interleaved-partial",
        "apply_axes",
        _cfg("interleaved", head_dim=6, rotary_dim=4),
        {"x": (total, 1, 6)},
        {"cu_seqlens": cu, "start_offsets": VARLEN_STARTS},
        {"axes": "thd", "form": "cu_seqlens"},
        bug_class="varlen",
        description=f"the same packed sequences with per-sequence start offsets {list(VARLEN_STARTS)}",
    )
    out += _kernel(
        "thd-scalar-start-half",
        "apply_axes",
        _cfg("half", head_dim=16),
        {"x": (20, 2, 16)},
        {"cu_seqlens": _cu([5, 1, 14])},
        {"axes": "thd", "form": "cu_seqlens", "start_offset": 2045},
        bug_class="varlen",
        description="three packed sequences after a common cached prefix of 2045 tokens",
    )
    return out


def _inplace() -> list[Case]:
    ids = _ids_bs(2, 9)
    out = _kernel(
        "bshd-q-of-packed-inplace-half",
        "apply_axes",
        _cfg("half"),
        {"x": (2, 9, 4, 16)},
        {"positions": ids},
        {
            "axes": "bshd",
            "form": "ids",
            "inplace": True,
            "view": {"kind": "slice", "axis": "h", "before": 0, "after": 4},
        },
        bug_class="inplace",
        description="in place on q sliced out of a packed buffer: only q's heads may change",
    )
    out += _kernel(
        "bshd-stride2-inplace-interleaved-partial",
        "apply_axes",
        _cfg("interleaved", rotary_dim=8),
        {"x": (2, 9, 3, 16)},
        {"positions": ids},
        {"axes": "bshd", "form": "ids", "inplace": True, "view": {"kind": "strided", "axis": "s", "step": 2}},
        bug_class="inplace",
        description="in place on every other token of a buffer: the tokens between must not change",
    )
    out += _kernel(
        "bhsd-transposed-inplace-half",
        "apply_axes",
        _cfg("half"),
        {"x": (2, 4, 9, 16)},
        {"positions": ids},
        {"axes": "bhsd", "form": "ids", "inplace": True, "view": {"kind": "transpose", "storage": "bshd"}},
        bug_class="inplace",
        description="in place on a bhsd view of a contiguous (B, S, H, D) tensor",
    )
    out += _kernel(
        "bshd-packed-aliasing-inplace-half",
        "apply_qk",
        _cfg("half", head_dim=16),
        {"q": (2, 5, 8, 16), "k": (2, 5, 2, 16)},
        {"positions": _ids_bs(2, 5)},
        {"axes": "bshd", "form": "ids", "inplace": True, "view": {"kind": "packed"}},
        bug_class="inplace",
        description="in place on q and k that are adjacent head blocks of one packed buffer (aliasing)",
    )
    out += _kernel(
        "thd-qkv-inplace-interleaved",
        "apply_qkv",
        _cfg("interleaved", head_dim=16),
        {"qkv": (9, 6, 16)},
        {"cu_seqlens": _cu([2, 7])},
        {"axes": "thd", "form": "cu_seqlens", "num_heads_q": 4, "num_heads_kv": 1, "inplace": True},
        bug_class="inplace",
        description="packed varlen qkv rotated in place: V never written",
    )
    return out


def _inverse() -> list[Case]:
    ids = _ids_bs(2, 9)
    dynamic = {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 1024}
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048}
    tokens = np.array([0, 1, 2, 3, 1500, 1501, 2047, 2048, 2500, 2998, 2999, 3000])
    out = _kernel(
        "bshd-inverse-half",
        "apply_axes",
        _cfg("half"),
        {"x": (2, 9, 3, 16)},
        {"positions": ids},
        {"axes": "bshd", "form": "ids", "inverse": True},
        bug_class="inverse_rotation",
        description="the inverse rotation R(-m theta)",
    )
    out += _kernel(
        "thd-inverse-dynamic-interleaved",
        "apply_axes",
        _cfg("interleaved", scaling=dynamic),
        {"x": (12, 2, 16)},
        {"positions": tokens},
        {"axes": "thd", "form": "ids", "inverse": True},
        bug_class="inverse_rotation",
        description="inverse under dynamic NTK: the table of the forward positions (seq_len 3001), not of "
        "the negated ones",
    )
    out += _kernel(
        "bshd-yarn-half",
        "round_trip",
        _cfg("half", scaling=yarn),
        {"x": (2, 9, 3, 16)},
        {"positions": ids},
        {"axes": "bshd", "form": "ids"},
        bug_class="inverse_rotation",
        description="apply then inverse gives A^2 x (YaRN attention factor A)",
    )
    out += _kernel(
        "thd-varlen-interleaved-partial",
        "round_trip",
        _cfg("interleaved", rotary_dim=8),
        {"x": (20, 2, 16)},
        {"cu_seqlens": _cu([5, 1, 14]), "start_offsets": [0, 2049, 70000]},
        {"axes": "thd", "form": "cu_seqlens"},
        bug_class="inverse_rotation",
        description="apply then inverse on varlen packed sequences returns x",
    )
    return out


def kernel_shape_cases() -> list[Case]:
    """Every kernel-shape case, in manifest order."""
    return (
        _axes_conventions()
        + _offsets()
        + _strided()
        + _gqa()
        + _packed()
        + _varlen()
        + _inplace()
        + _inverse()
    )
