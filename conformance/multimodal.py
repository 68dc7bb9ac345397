"""Issue 20 point 6: the multi-axis / M-RoPE / vision / MLA operations of the conformance protocol.

JSON forms stored in a case's ``params`` (``docs/golden-format.md``):

* ``spec`` (``multiaxis_apply``): ``{head_dim, layout, blocks, streams[], freq_index[], tables[]}``, each
  table a RoPE config dict as in a case's ``config``; it is :class:`rope_ref.multiaxis.MultiAxisRope`.
* ``mla`` (``mla_softmax_scale``): ``{name, qk_nope_head_dim, qk_rope_head_dim, v_head_dim, rope,
  mscale_all_dim}``; it is :class:`rope_ref.mla.MLAConfig`.

The runner hands backends the rope_ref objects; :func:`spec_from_dict` / :func:`mla_from_dict` rebuild
them, :func:`spec_to_dict` / :func:`mla_to_dict` write them (the catalogue).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "MULTIMODAL_OPS",
    "ID_OPS",
    "spec_to_dict",
    "spec_from_dict",
    "mla_to_dict",
    "mla_from_dict",
    "evaluate",
    "multiaxis_bounds",
    "pair_aux",
    "call",
]

#: Operations added by issue 20 (optional in the protocol: missing ones are "operation missing").
MULTIMODAL_OPS = (
    "multiaxis_apply",
    "mrope_position_ids",
    "mrope_decode_ids",
    "vision_ids",
    "mla_softmax_scale",
)
#: Those judged exactly (integer ids).
ID_OPS = ("mrope_position_ids", "mrope_decode_ids", "vision_ids")


def _config_dict(cfg) -> dict[str, Any]:
    from .catalogue import config_dict

    return config_dict(cfg)


def _config(d: dict[str, Any]):
    from .case import Case

    return Case("table", "inv_freq", dict(d), {}, {}, "tables", "table").rope_config()


def spec_to_dict(spec) -> dict[str, Any]:
    """A :class:`~rope_ref.multiaxis.MultiAxisRope` as the JSON object stored in ``params["spec"]``."""
    return {
        "head_dim": int(spec.head_dim),
        "layout": spec.layout,
        "blocks": int(spec.blocks),
        "streams": [int(s) for s in spec.streams],
        "freq_index": [int(k) for k in spec.freq_index],
        "tables": [_config_dict(t) for t in spec.tables],
    }


def spec_from_dict(d: dict[str, Any]):
    """The :class:`~rope_ref.multiaxis.MultiAxisRope` of a stored ``spec`` object."""
    from rope_ref.multiaxis import MultiAxisRope

    return MultiAxisRope(
        int(d["head_dim"]),
        layout=d["layout"],
        streams=d["streams"],
        tables=tuple(_config(t) for t in d["tables"]),
        freq_index=d["freq_index"],
        blocks=int(d["blocks"]),
    )


def mla_to_dict(cfg) -> dict[str, Any]:
    """A :class:`~rope_ref.mla.MLAConfig` as the JSON object stored in ``params["mla"]``."""
    return {
        "name": cfg.name,
        "qk_nope_head_dim": int(cfg.qk_nope_head_dim),
        "qk_rope_head_dim": int(cfg.qk_rope_head_dim),
        "v_head_dim": int(cfg.v_head_dim),
        "rope": _config_dict(cfg.rope),
        "mscale_all_dim": None if cfg.mscale_all_dim is None else float(cfg.mscale_all_dim),
    }


def mla_from_dict(d: dict[str, Any]):
    """The :class:`~rope_ref.mla.MLAConfig` of a stored ``mla`` object."""
    from rope_ref.mla import MLAConfig

    return MLAConfig(
        d["name"],
        int(d["qk_nope_head_dim"]),
        int(d["qk_rope_head_dim"]),
        int(d["v_head_dim"]),
        _config(d["rope"]),
        d["mscale_all_dim"],
    )


def _mrope_kwargs(params: dict[str, Any]) -> dict[str, Any]:
    return {
        "rule": params["rule"],
        "spatial_merge_size": params["spatial_merge_size"],
        "tokens_per_second": params["tokens_per_second"],
    }


def evaluate(op: str, inputs: dict[str, np.ndarray], params: dict[str, Any]) -> dict[str, np.ndarray]:
    """Expected tensors of a multimodal case, from the float64 oracle."""
    from rope_ref import mla, mrope, multiaxis, vision_rope

    if op == "multiaxis_apply":
        spec = spec_from_dict(params["spec"])
        return {"out": multiaxis.apply(inputs["x"], inputs["positions"], spec)}
    if op == "mrope_position_ids":
        ids, deltas = mrope.position_ids(
            inputs["input_ids"],
            inputs.get("image_grid_thw"),
            inputs.get("video_grid_thw"),
            inputs.get("attention_mask"),
            second_per_grid_ts=inputs.get("second_per_grid_ts"),
            **_mrope_kwargs(params),
        )
        return {"position_ids": np.asarray(ids, dtype=np.int64), "deltas": np.asarray(deltas, dtype=np.int64)}
    if op == "mrope_decode_ids":
        out = mrope.decode_position_ids(inputs["deltas"], params["cache_position"], params["n_new"])
        return {"out": np.asarray(out, dtype=np.int64)}
    if op == "vision_ids":
        if params["convention"] == "qwen2-vl":
            out = vision_rope.qwen2_vl_ids(inputs["grids"], params["spatial_merge_size"])
        else:
            out = vision_rope.pixtral_ids(inputs["grids"])
        return {"out": np.asarray(out, dtype=np.int64)}
    if op == "mla_softmax_scale":
        return {"value": np.array(mla.softmax_scale(mla_from_dict(params["mla"])), dtype=np.float64)}
    raise ValueError(f"unknown multimodal op {op!r}")


def pair_aux(inputs: dict[str, np.ndarray], params: dict[str, Any]) -> dict[str, np.ndarray]:
    """``aux`` of a ``multiaxis_apply`` case: per pair its frequency and attention factor (float64,
    ``(n_pairs,)``) at the resolved ``seq_len``, so that a foreign reader can compute the tolerance."""
    from rope_ref.multiaxis import _resolved_seq_len

    spec = spec_from_dict(params["spec"])
    pos = np.asarray(inputs["positions"], dtype=np.float64)
    phi, amp = spec.pair_frequencies(_resolved_seq_len(pos, spec, None))
    return {"pair_inv_freq": np.asarray(phi, dtype=np.float64), "pair_attention_factor": amp}


def call(backend, op: str, a: dict[str, Any], params: dict[str, Any]) -> Any:
    """Call ``backend``'s method for ``op`` with the converted inputs ``a`` (the runner's dispatch)."""
    from .protocol import Unsupported

    method = getattr(backend, op, None)
    if method is None:  # a backend class not derived from Backend
        raise Unsupported(f"{op} is not implemented", "operation")
    if op == "multiaxis_apply":
        return method(a["x"], a["positions"], spec_from_dict(params["spec"]))
    if op == "mrope_position_ids":
        return method(
            a["input_ids"],
            a.get("image_grid_thw"),
            a.get("video_grid_thw"),
            a.get("attention_mask"),
            a.get("second_per_grid_ts"),
            **_mrope_kwargs(params),
        )
    if op == "mrope_decode_ids":
        return method(a["deltas"], cache_position=params["cache_position"], n_new=params["n_new"])
    if op == "vision_ids":
        return method(
            a["grids"], convention=params["convention"], spatial_merge_size=params["spatial_merge_size"]
        )
    if op == "mla_softmax_scale":
        return method(mla_from_dict(params["mla"]))
    raise ValueError(f"unknown multimodal op {op!r}")


def multiaxis_bounds(v: np.ndarray, positions: np.ndarray, spec, terms) -> tuple:
    """Per-element tolerance, exact mask and pair-norm data of ``multiaxis_apply`` (``docs/tolerance.md``).

    The 1D rotation bound applied pair by pair: pair ``i`` has angle ``m^(s(i)) phi_i``, frequency ``phi_i``
    and attention factor ``A_i`` of its stream's table; ``terms`` is ``(u_a, u_r, floor, ROUND_SLACK,
    _phase_factor, _scaling_phase_factor)`` from :mod:`conformance.tolerance`.
    """
    from rope_ref import inv_freq
    from rope_ref.multiaxis import _resolved_seq_len

    u_a, u_r, floor, slack, phase_factor, scaling_phase_factor = terms

    seq_len = _resolved_seq_len(positions, spec, None)
    phi, amp = spec.pair_frequencies(seq_len)
    streams = np.asarray(spec.streams)
    k = phase_factor(phi)
    for s, table in enumerate(spec.tables):
        sel = streams == s
        if sel.any():
            extra = scaling_phase_factor(table, inv_freq(table, seq_len))
            k[sel] = k[sel] + extra[np.asarray(spec.freq_index)[sel]]
    lead = v.shape[:-1]
    m = np.moveaxis(positions, 0, -1)[..., streams]
    m = np.broadcast_to(m.reshape((1,) * (len(lead) - (m.ndim - 1)) + m.shape), lead + m.shape[-1:])
    theta = m * phi
    a, b = spec.pair_indices()
    amplitude = np.abs(amp) * np.hypot(v[..., a], v[..., b])
    pair_tol = amplitude * (k * np.abs(theta) * u_a + slack * u_r) + floor
    tol = np.zeros(v.shape, dtype=np.float64)
    tol[..., a] = pair_tol
    tol[..., b] = pair_tol
    exact = np.zeros(v.shape, dtype=bool)
    exact[..., spec.rotary_dim :] = True
    keep = (m == 0) & (amp == 1.0)
    exact[..., a] |= keep
    exact[..., b] |= keep
    tol[exact] = 0.0
    norm_tol = amplitude * slack * u_r + floor
    return tol, exact, (a, b, amplitude, norm_tol)
