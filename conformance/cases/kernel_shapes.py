"""Kernel shapes (issue 16): the shapes real kernels are called with (operations ``apply_axes``,
``apply_qk``, ``apply_qkv``, ``round_trip``; how the runner presents them: :mod:`conformance.kernel_shapes`).

Each family targets one bug class, runs at every I/O dtype, in both layouts, with partial rotary where it
applies. Shapes are small except the varlen family, whose sequence lengths are those of a real packed
batch plus a length-1 sequence and one longer than 2048 (so float16 positions and per-sequence restarts
show). Positions reach 2049 and 70000 where precision matters.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

import rope_ref
from rope_ref.case import Case, config_from_dict, placed_positions, v_heads_index
from rope_ref.frequencies import resolve_seq_len

from .common import dtype_cases, longrope_scaling, make_config, seeded_normal, table_aux
from .operations import Evaluator, operation

__all__ = ["kernel_shape_cases", "VARLEN_LENGTHS", "VARLEN_STARTS"]

#: Packed sequence lengths of the varlen family: a real batch's, a length-1 sequence and one over 2048.
VARLEN_LENGTHS = (400, 142, 169, 16, 25, 518, 156, 24, 504, 90, 4, 1, 2100)
#: Per-sequence start offsets (cached prefixes) of the varlen family, one per length above.
VARLEN_STARTS = (0, 5, 100, 2048, 0, 7, 1, 3000, 0, 0, 9, 2047, 1)

# -- the oracle: rope_ref.apply on positions placed by rope_ref.axes / rope_ref.positions ----------------


def _rotated(config: dict[str, Any], inputs: dict, params: dict, name: str, seq_from: str | None = None):
    """Input ``name`` rotated by its placed positions (by ``-m theta`` for ``inverse``), as float64, with
    ``(x, positions, cfg, seq_len)``; seq_len from the positions placed for input ``seq_from`` (default:
    ``name``; the forward positions, also for ``inverse``)."""
    cfg = config_from_dict(config)
    v = np.asarray(inputs[name], dtype=np.float64)
    pos = placed_positions(inputs, params, v.shape)
    ref = pos if seq_from is None else placed_positions(inputs, params, np.shape(inputs[seq_from]))
    seq_len = resolve_seq_len(ref, cfg, params.get("seq_len"))
    signed = -pos if params.get("inverse", False) else pos
    return rope_ref.apply(v, signed, cfg, seq_len=seq_len), (v, pos, cfg, seq_len)


def _aux(main: str) -> Evaluator:
    """``aux`` of an operation whose positions are placed over input ``main``: ``inv_freq`` and
    ``attention_factor`` at the resolved seq_len (for readers in other languages)."""

    def aux(config: dict[str, Any] | None, inputs: dict, params: dict) -> dict[str, np.ndarray]:
        cfg = config_from_dict(config)
        pos = placed_positions(inputs, params, np.shape(inputs[main]))
        return table_aux(cfg, resolve_seq_len(pos, cfg, params.get("seq_len")))

    return aux


@operation("apply_axes", auxiliary=_aux("x"))
def _apply_axes(config: dict[str, Any] | None, inputs: dict, params: dict) -> dict[str, np.ndarray]:
    return {"out": _rotated(config, inputs, params, "x")[0]}


@operation("round_trip", auxiliary=_aux("x"))
def _round_trip(config: dict[str, Any] | None, inputs: dict, params: dict) -> dict[str, np.ndarray]:
    y, (_, pos, cfg, seq_len) = _rotated(config, inputs, params, "x")
    return {"out": rope_ref.apply(y, -pos, cfg, seq_len=seq_len)}


@operation("apply_qk", auxiliary=_aux("q"))
def _apply_qk(config: dict[str, Any] | None, inputs: dict, params: dict) -> dict[str, np.ndarray]:
    return {"q": _rotated(config, inputs, params, "q")[0], "k": _rotated(config, inputs, params, "k", "q")[0]}


@operation("apply_qkv", auxiliary=_aux("qkv"))
def _apply_qkv(config: dict[str, Any] | None, inputs: dict, params: dict) -> dict[str, np.ndarray]:
    out, (qkv, *_) = _rotated(config, inputs, params, "qkv")
    v = v_heads_index(params, qkv.ndim)
    out[v] = qkv[v]
    return {"out": out}


# -- the cases -------------------------------------------------------------------------------------------


def _cu(lengths: Sequence[int]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)


def _ids_bs(batch: int, seq: int) -> np.ndarray:
    """HF (B, S) ids: row 0 from 17, row 1 far out (4001 + 3 s), further rows in between."""
    rows = [np.arange(seq) + 17, 4001 + 3 * np.arange(seq)]
    rows += [np.arange(seq) * 5 + 600 * b for b in range(2, batch)]
    return np.stack(rows[:batch]).astype(np.int64)


def _cfg(layout: str, head_dim: int = 16, rotary_dim: int | None = None, scaling: dict | None = None):
    return make_config(head_dim, layout, rotary_dim, scaling=scaling)


def _family(bug_class: str, rows: Sequence[tuple]) -> list[Case]:
    """The cases of each row ``(name, op, config, activation shapes, positions inputs, params,
    description)``, one per I/O dtype: ids ``{op}-{name}-{fp64|fp32|fp16|bf16}``; activations drawn once
    per name."""
    out = []
    for name, op, config, activations, positions, params, description in rows:
        inputs = {n: seeded_normal(f"kernel/{name}/{n}", shape) for n, shape in activations.items()}
        inputs.update({k: np.asarray(v, dtype=np.int64) for k, v in positions.items()})
        params = {"seq_len": None, "inverse": False, "inplace": False, "view": None, **params}
        out += dtype_cases(
            op,
            name,
            config,
            inputs,
            activations=tuple(activations),
            bug_class=bug_class,
            tolerance="rotation",
            params=params,
            description=description,
        )
    return out


_TOKENS = np.array([0, 1, 2, 3, 4, 0, 1, 2, 2048, 2049, 2050, 5000, 5001])


def _axes_conventions() -> list[Case]:
    ids = _ids_bs(2, 9)
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048}
    layouts = (
        ("bshd-ids-half", "bshd", (2, 9, 3, 16), _cfg("half"), ids),
        ("bhsd-ids-interleaved-partial", "bhsd", (2, 3, 9, 16), _cfg("interleaved", rotary_dim=8), ids),
        ("sbhd-ids-half-partial", "sbhd", (9, 2, 3, 16), _cfg("half", rotary_dim=8), ids),
        ("thd-ids-interleaved", "thd", (13, 3, 16), _cfg("interleaved"), _TOKENS),
        ("bshd-ids-yarn-interleaved", "bshd", (2, 9, 3, 16), _cfg("interleaved", scaling=yarn), ids),
    )
    rows = []
    for name, axes, shape, cfg, pos in layouts:
        desc = f"apply_axes on {axes} with {'(T,) per-token' if axes == 'thd' else 'HF (B, S)'} ids"
        rows.append(
            (name, "apply_axes", cfg, {"x": shape}, {"positions": pos}, {"axes": axes, "form": "ids"}, desc)
        )
    return _family("axes_convention", rows)


def _offsets() -> list[Case]:
    rows = [
        (
            "bshd-offset-scalar-half",
            "apply_axes",
            _cfg("half"),
            {"x": (2, 7, 3, 16)},
            {},
            {"axes": "bshd", "form": "offset", "offset": 1000},
            "a scalar KV-cache offset: token s at 1000 + s in every row",
        )
    ]
    for name, axes, shape, offset, cfg in (
        ("bhsd-offset-rows-interleaved", "bhsd", (2, 3, 7, 16), [3, 2500], _cfg("interleaved")),
        ("sbhd-offset-rows-half-partial", "sbhd", (7, 2, 3, 16), [2049, 40], _cfg("half", rotary_dim=8)),
        ("bshd-decode-rows-interleaved", "bshd", (4, 1, 3, 16), [0, 17, 2049, 70000], _cfg("interleaved")),
    ):
        desc = f"a per-row KV-cache offset {offset} on {axes}: token s of row b at offset[b] + s"
        rows.append(
            (
                name,
                "apply_axes",
                cfg,
                {"x": shape},
                {"offset": offset},
                {"axes": axes, "form": "offset"},
                desc,
            )
        )
    return _family("cache_offset", rows)


def _strided() -> list[Case]:
    ids = _ids_bs(2, 9)
    # (name, axes, x shape, config, positions, view, what the view is)
    views = (
        ("bshd-transposed-half", "bshd", (2, 9, 4, 16), _cfg("half"), ids,
         {"kind": "transpose", "storage": "bhsd"}, "a bshd view of a contiguous (B, H, S, D) tensor"),
        ("bhsd-transposed-interleaved-partial", "bhsd", (2, 4, 9, 16), _cfg("interleaved", rotary_dim=8), ids,
         {"kind": "transpose", "storage": "bshd"}, "a bhsd view of a contiguous (B, S, H, D) tensor"),
        ("bshd-q-of-packed-half", "bshd", (2, 9, 4, 16), _cfg("half"), ids,
         {"kind": "slice", "axis": "h", "before": 0, "after": 4},
         "q sliced out of a packed (B, S, 8, D) buffer"),
        ("thd-k-of-packed-interleaved", "thd", (13, 2, 16), _cfg("interleaved"), _TOKENS,
         {"kind": "slice", "axis": "h", "before": 4, "after": 2},
         "k sliced out of a packed (T, 8, D) buffer"),
        ("bshd-stride2-half-partial", "bshd", (2, 9, 3, 16), _cfg("half", rotary_dim=8), ids,
         {"kind": "strided", "axis": "s", "step": 2}, "every other token of a buffer (sequence stride 2)"),
    )  # fmt: skip
    rows = []
    for name, axes, shape, cfg, pos, view, what in views:
        params = {"axes": axes, "form": "ids", "view": view}
        desc = f"non-contiguous input: {what}; entries outside the view hold NaN"
        rows.append((name, "apply_axes", cfg, {"x": shape}, {"positions": pos}, params, desc))
    return _family("strided_views", rows)


def _gqa() -> list[Case]:
    # (name, op, config, activation shapes, positions inputs, params, description)
    rows = (
        ("bshd-32-8-half", "apply_qk", _cfg("half", head_dim=16),
         {"q": (1, 5, 32, 16), "k": (1, 5, 8, 16)}, {"positions": np.array([[0, 1, 2047, 2048, 9000]])},
         {"axes": "bshd", "form": "ids"}, "GQA q (32 heads) and k (8 heads) rotated in one call"),
        ("thd-17-1-interleaved", "apply_qk", _cfg("interleaved", head_dim=16),
         {"q": (6, 17, 16), "k": (6, 1, 16)}, {"positions": np.array([0, 1, 2, 0, 2049, 70000])},
         {"axes": "thd", "form": "ids"}, "MQA q (17 heads) and k (1 head) on packed tokens"),
        ("bhsd-16-4-half-partial-offset", "apply_qk", _cfg("half", rotary_dim=8),
         {"q": (2, 16, 5, 16), "k": (2, 4, 5, 16)}, {"offset": [7, 3000]}, {"axes": "bhsd", "form": "offset"},
         "GQA q (16 heads) and k (4 heads), partial rotary, per-row cache offsets"),
        ("thd-varlen-16-4-interleaved", "apply_qk", _cfg("interleaved", head_dim=16),
         {"q": (9, 16, 16), "k": (9, 4, 16)}, {"cu_seqlens": _cu([3, 1, 5])},
         {"axes": "thd", "form": "cu_seqlens"},
         "GQA q (16 heads) and k (4 heads) on varlen packed sequences"),
    )  # fmt: skip
    return _family("gqa_heads", rows)


def _packed() -> list[Case]:
    # (name, op, config, activation shapes, positions inputs, params, description)
    rows = (
        ("bshd-4-2-half", "apply_qkv", _cfg("half"), {"qkv": (2, 6, 8, 16)}, {"positions": _ids_bs(2, 6)},
         {"axes": "bshd", "form": "ids", "num_heads_q": 4, "num_heads_kv": 2},
         "packed (B, S, 4 + 2*2, D): q and k heads rotated, V bit-exact"),
        ("thd-8-1-interleaved-partial", "apply_qkv", _cfg("interleaved", rotary_dim=8), {"qkv": (9, 10, 16)},
         {"cu_seqlens": _cu([4, 1, 4]), "start_offsets": [0, 100, 2047]},
         {"axes": "thd", "form": "cu_seqlens", "num_heads_q": 8, "num_heads_kv": 1},
         "packed varlen (T, 8 + 2*1, D) with start offsets, partial rotary, V bit-exact"),
        ("bhsd-4-4-interleaved-offset", "apply_qkv", _cfg("interleaved", head_dim=16),
         {"qkv": (1, 12, 5, 16)}, {},
         {"axes": "bhsd", "form": "offset", "offset": 70, "num_heads_q": 4, "num_heads_kv": 4},
         "packed MHA (B, 4 + 2*4, S, D) with a scalar cache offset, V bit-exact"),
    )  # fmt: skip
    return _family("packed_qkv", rows)


def _varlen() -> list[Case]:
    cu = _cu(VARLEN_LENGTHS)
    total = int(cu[-1])
    # (name, op, config, activation shapes, positions inputs, params, description)
    rows = (
        ("thd-lengths-half", "apply_axes", _cfg("half", head_dim=4), {"x": (total, 1, 4)}, {"cu_seqlens": cu},
         {"axes": "thd", "form": "cu_seqlens"},
         f"{len(VARLEN_LENGTHS)} packed sequences (lengths {list(VARLEN_LENGTHS)}): positions "
         "restart at 0 in every sequence"),
        ("thd-lengths-starts-interleaved-partial", "apply_axes",
         _cfg("interleaved", head_dim=6, rotary_dim=4), {"x": (total, 1, 6)},
         {"cu_seqlens": cu, "start_offsets": VARLEN_STARTS},
         {"axes": "thd", "form": "cu_seqlens"},
         f"the same packed sequences with per-sequence start offsets {list(VARLEN_STARTS)}"),
        ("thd-scalar-start-half", "apply_axes", _cfg("half", head_dim=16), {"x": (20, 2, 16)},
         {"cu_seqlens": _cu([5, 1, 14])}, {"axes": "thd", "form": "cu_seqlens", "start_offset": 2045},
         "three packed sequences after a common cached prefix of 2045 tokens"),
    )  # fmt: skip
    return _family("varlen", rows)


def _inplace() -> list[Case]:
    ids = {"positions": _ids_bs(2, 9)}
    slice_q = {"kind": "slice", "axis": "h", "before": 0, "after": 4}
    stride_2 = {"kind": "strided", "axis": "s", "step": 2}
    # (name, op, config, activation shapes, positions inputs, params, description)
    rows = (
        ("bshd-q-of-packed-inplace-half", "apply_axes", _cfg("half"), {"x": (2, 9, 4, 16)}, ids,
         {"axes": "bshd", "form": "ids", "inplace": True, "view": slice_q},
         "in place on q sliced out of a packed buffer: only q's heads may change"),
        ("bshd-stride2-inplace-interleaved-partial", "apply_axes", _cfg("interleaved", rotary_dim=8),
         {"x": (2, 9, 3, 16)}, ids, {"axes": "bshd", "form": "ids", "inplace": True, "view": stride_2},
         "in place on every other token of a buffer: the tokens between must not change"),
        ("bhsd-transposed-inplace-half", "apply_axes", _cfg("half"), {"x": (2, 4, 9, 16)}, ids,
         {"axes": "bhsd", "form": "ids", "inplace": True, "view": {"kind": "transpose", "storage": "bshd"}},
         "in place on a bhsd view of a contiguous (B, S, H, D) tensor"),
        ("bshd-packed-aliasing-inplace-half", "apply_qk", _cfg("half", head_dim=16),
         {"q": (2, 5, 8, 16), "k": (2, 5, 2, 16)}, {"positions": _ids_bs(2, 5)},
         {"axes": "bshd", "form": "ids", "inplace": True, "view": {"kind": "packed"}},
         "in place on q and k that are adjacent head blocks of one packed buffer (aliasing)"),
        ("thd-qkv-inplace-interleaved", "apply_qkv", _cfg("interleaved", head_dim=16), {"qkv": (9, 6, 16)},
         {"cu_seqlens": _cu([2, 7])},
         {"axes": "thd", "form": "cu_seqlens", "num_heads_q": 4, "num_heads_kv": 1, "inplace": True},
         "packed varlen qkv rotated in place: V never written"),
    )  # fmt: skip
    return _family("inplace", rows)


def _inverse() -> list[Case]:
    ids = {"positions": _ids_bs(2, 9)}
    dynamic = {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 1024}
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048}
    tokens = np.array([0, 1, 2, 3, 1500, 1501, 2047, 2048, 2500, 2998, 2999, 3000])
    # (name, op, config, activation shapes, positions inputs, params, description)
    rows = (
        ("bshd-inverse-half", "apply_axes", _cfg("half"), {"x": (2, 9, 3, 16)}, ids,
         {"axes": "bshd", "form": "ids", "inverse": True}, "the inverse rotation R(-m theta)"),
        ("thd-inverse-dynamic-interleaved", "apply_axes", _cfg("interleaved", scaling=dynamic),
         {"x": (12, 2, 16)}, {"positions": tokens}, {"axes": "thd", "form": "ids", "inverse": True},
         "inverse under dynamic NTK: the table of the forward positions (seq_len 3001), not of "
         "the negated ones"),
        ("bshd-yarn-half", "round_trip", _cfg("half", scaling=yarn), {"x": (2, 9, 3, 16)}, ids,
         {"axes": "bshd", "form": "ids"}, "apply then inverse gives A^2 x (YaRN attention factor A)"),
        ("thd-varlen-interleaved-partial", "round_trip", _cfg("interleaved", rotary_dim=8),
         {"x": (20, 2, 16)}, {"cu_seqlens": _cu([5, 1, 14]), "start_offsets": [0, 2049, 70000]},
         {"axes": "thd", "form": "cu_seqlens"},
         "apply then inverse on varlen packed sequences returns x"),
    )  # fmt: skip
    return _family("inverse_rotation", rows)


def kernel_shape_cases() -> list[Case]:
    """Every kernel-shape case, in manifest order."""
    families = (_axes_conventions, _offsets, _strided, _gqa, _packed, _varlen, _inplace, _inverse)
    return [case for family in families for case in family()]


# -- issue 29: inverse through the fused wrappers, explicit seq_len, the YaRN inverse with its factor ------


def _fused_inverse() -> list[Case]:
    """``inverse=True`` through ``apply_qk`` and ``apply_qkv`` (not only ``apply_axes``). The dynamic-NTK
    config is used by no earlier case, so a port whose table cache grows only (HF) sees a fresh length."""
    dyn = {"rope_type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 1024}
    # (name, op, config, activation shapes, positions inputs, params, description)
    rows = (
        ("bshd-gqa-inverse-half", "apply_qk", _cfg("half"), {"q": (1, 6, 4, 16), "k": (1, 6, 2, 16)},
         {"positions": np.array([[0, 1, 2047, 2048, 3000, 70000]])},
         {"axes": "bshd", "form": "ids", "inverse": True},
         "apply_qk with inverse=True: q (4 heads) and k (2 heads) both rotated by -m theta"),
        ("thd-varlen-inverse-dynamic-interleaved", "apply_qk", _cfg("interleaved", scaling=dyn),
         {"q": (9, 2, 16), "k": (9, 1, 16)}, {"cu_seqlens": _cu([4, 5]), "start_offsets": [0, 2995]},
         {"axes": "thd", "form": "cu_seqlens", "inverse": True},
         "apply_qk with inverse=True on varlen sequences under dynamic NTK (table of the forward positions)"),
        ("bshd-qkv-inverse-interleaved-partial", "apply_qkv", _cfg("interleaved", rotary_dim=8),
         {"qkv": (1, 5, 8, 16)}, {"positions": np.array([[3, 4, 2049, 2050, 9000]])},
         {"axes": "bshd", "form": "ids", "num_heads_q": 4, "num_heads_kv": 2, "inverse": True},
         "apply_qkv with inverse=True: q and k heads rotated by -m theta, V bit-exact"),
    )  # fmt: skip
    return _family("inverse_fused", rows)


def _chunk_seq_len() -> list[Case]:
    """A chunk of a long sequence with an explicit ``seq_len`` (the whole sequence): length-dependent
    tables follow ``seq_len``, not the chunk's ``max(positions) + 1``."""
    dyn = {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 2048}
    longrope = longrope_scaling(4, 16.0)
    chunk = np.arange(3000, 3008)
    # (name, op, config, activation shapes, positions inputs, params, description)
    rows = (
        ("bshd-chunk-dynamic-half", "apply_axes", _cfg("half", scaling=dyn), {"x": (1, 8, 2, 16)},
         {"positions": chunk[None, :]}, {"axes": "bshd", "form": "ids", "seq_len": 8192},
         "positions 3000..3007 of an 8192-token sequence, dynamic NTK (L0 2048): the table of seq_len 8192"),
        ("bhsd-chunk-offset-dynamic-interleaved", "apply_qk", _cfg("interleaved", scaling=dyn),
         {"q": (2, 2, 4, 16), "k": (2, 1, 4, 16)}, {"offset": [2500, 4000]},
         {"axes": "bhsd", "form": "offset", "seq_len": 6000},
         "a chunk at cache offsets [2500, 4000] of a 6000-token sequence, dynamic NTK: q and k share the "
         "table of seq_len 6000"),
        ("thd-chunk-longrope-half-partial", "apply_qkv", _cfg("half", rotary_dim=8, scaling=longrope),
         {"qkv": (7, 4, 16)}, {"cu_seqlens": _cu([3, 4]), "start_offsets": [100, 1000]},
         {"axes": "thd", "form": "cu_seqlens", "num_heads_q": 2, "num_heads_kv": 1, "seq_len": 9000},
         "packed chunks below L0 4096 of a 9000-token sequence: LongRoPE's long factors (seq_len 9000)"),
    )  # fmt: skip
    return _family("kernel_seq_len", rows)


def _yarn_inverse() -> list[Case]:
    """The inverse under YaRN judged directly: ``A R(-m theta) x`` with the config's own factor ``A``."""
    pair = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048, "mscale": 1.0,
            "mscale_all_dim": 0.5}  # fmt: skip
    explicit = {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 1024,
                "attention_factor": 0.75}  # fmt: skip
    # (name, op, config, activation shapes, positions inputs, params, description)
    rows = (
        ("bshd-inverse-yarn-mscale-half", "apply_axes", _cfg("half", scaling=pair), {"x": (2, 5, 2, 16)},
         {"positions": _ids_bs(2, 5)}, {"axes": "bshd", "form": "ids", "inverse": True},
         "inverse under YaRN with mscale 1 / mscale_all_dim 0.5: A = mscale ratio (1.065), not 1.139"),
        ("thd-inverse-yarn-factor-interleaved-partial", "apply_axes",
         _cfg("interleaved", rotary_dim=8, scaling=explicit), {"x": (6, 2, 16)},
         {"positions": np.array([0, 5, 1023, 1024, 4000, 8191])},
         {"axes": "thd", "form": "ids", "inverse": True},
         "inverse under YaRN with attention_factor 0.75 (not 0.1 ln 8 + 1)"),
    )  # fmt: skip
    return _family("inverse_attention_factor", rows)


def kernel_shape_inverse_and_seq_len_cases() -> list[Case]:
    """The kernel-shape cases of issue 29, in manifest order (after every earlier family)."""
    return _fused_inverse() + _chunk_seq_len() + _yarn_inverse()
