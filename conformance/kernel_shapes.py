"""Issue 16: the shapes real kernels are called with, as conformance operations.

Operations (optional in the protocol, :class:`~rope_ref.conformance.protocol.Backend`):

* ``apply_axes``: one tensor whose axes a case names (``bshd``, ``bhsd``, ``sbhd``, ``thd``), positions as
  HF ``(B, S)`` ids, per-token ``(T,)`` ids, a cache offset (int or ``(B,)``) or ``cu_seqlens`` (plus
  start offsets); ``inverse`` rotates by ``-m theta``;
* ``apply_qk``: q and k with different head counts (GQA) in one call, both outputs judged;
* ``apply_qkv``: a packed ``(..., Hq + 2 Hk, D)`` tensor, q and k heads rotated, V bit for bit unchanged;
* ``round_trip``: no backend method of its own: the runner calls ``apply_axes`` and then ``apply_axes``
  with ``inverse=True`` on the result, which must give back ``A^2 x`` (``x`` when the attention factor
  is 1) within the sum of the two rotations' bounds.

A case's ``params`` (``docs/golden-format.md``): ``axes``; ``form`` (``ids``, ``offset``, ``cu_seqlens``);
``offset`` / ``start_offset`` (a scalar offset, stored as a param; per-row ones are the inputs
``offset`` / ``start_offsets``); ``inverse``; ``inplace``; ``view``; ``num_heads_q`` / ``num_heads_kv``
(``apply_qkv``); ``seq_len``. ``view`` says how the runner presents the activations (:func:`present`):

* ``None``: a contiguous array;
* ``{"kind": "transpose", "storage": "bhsd"}``: stored contiguously in the ``storage`` axis order, handed as
  a permuted view in the case's ``axes`` order;
* ``{"kind": "slice", "axis": "h", "before": a, "after": c}``: handed as ``buf[.., a:a+n, ..]`` of a buffer
  with ``a + n + c`` entries on that axis (q or k sliced out of a packed projection);
* ``{"kind": "strided", "axis": "s", "step": k}``: handed as ``buf[.., ::k, ..]`` (non-unit stride);
* ``{"kind": "packed"}`` (``apply_qk``): q and k are the first two head blocks of one ``(.., Hq + 2 Hk, ..)``
  buffer (aliasing when in place).

Buffer entries outside the handed views hold NaN: a kernel that reads past a view (ignores its strides)
turns its output non-finite, and one that writes past it changes them, which the runner reports.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "KERNEL_OPS",
    "ACTIVATIONS",
    "OUTPUTS",
    "placed_positions",
    "evaluate",
    "auxiliary",
    "present",
    "Presented",
    "call",
    "bounds",
    "VIEW_KINDS",
]

#: Operations added by issue 16.
KERNEL_OPS = ("apply_axes", "apply_qk", "apply_qkv", "round_trip")
#: Activation inputs of each (converted with the backend's I/O dtype).
ACTIVATIONS = {"apply_axes": ("x",), "round_trip": ("x",), "apply_qk": ("q", "k"), "apply_qkv": ("qkv",)}
#: Expected outputs of each, in the order a backend returns them.
OUTPUTS = {"apply_axes": ("out",), "round_trip": ("out",), "apply_qk": ("q", "k"), "apply_qkv": ("out",)}
VIEW_KINDS = ("transpose", "slice", "strided", "packed")


def _rope(config: dict[str, Any]):
    from .case import Case

    return Case("kernel", "inv_freq", dict(config), {}, {}, "tables", "table").rope_config()


def _ids(inputs: dict[str, np.ndarray], params: dict[str, Any], shape: tuple[int, ...]) -> np.ndarray:
    """The ids the case's positions form stands for: ``(B, S)`` / ``(S,)`` / ``(T,)`` float64."""
    from rope_ref.positions import positions_from_cu_seqlens, positions_from_offset

    axes = params["axes"]
    form = params.get("form", "ids")
    if form == "ids":
        return np.asarray(inputs["positions"], dtype=np.float64)
    if form == "offset":
        offset = inputs["offset"] if "offset" in inputs else params["offset"]
        seq = shape[axes.index("s")]
        return positions_from_offset(offset, seq, batch=shape[axes.index("b")])
    if form == "cu_seqlens":
        starts = inputs.get("start_offsets", params.get("start_offset"))
        return positions_from_cu_seqlens(inputs["cu_seqlens"], starts)
    raise ValueError(f"unknown positions form {form!r}; expected ids, offset or cu_seqlens")


def _main_input(op: str) -> str:
    return ACTIVATIONS[op][0]


def placed_positions(inputs: dict[str, np.ndarray], params: dict[str, Any], shape: tuple[int, ...]):
    """Float64 positions broadcast over ``shape[:-1]`` (the activation's leading axes), and the seq_len a
    length-dependent scaling resolves from them (the forward positions, also for ``inverse``)."""
    from rope_ref.axes import positions_for_axes

    ids = _ids(inputs, params, shape)
    placed = positions_for_axes(ids, params["axes"], shape)
    return np.broadcast_to(placed, shape[:-1]).astype(np.float64)


def _seq_len(positions: np.ndarray, cfg, params: dict[str, Any]):
    from rope_ref.frequencies import resolve_seq_len

    return resolve_seq_len(positions, cfg, params.get("seq_len"))


def _rotate(v: np.ndarray, pos: np.ndarray, cfg, seq_len, inverse: bool) -> np.ndarray:
    import rope_ref

    return rope_ref.apply(v, -pos if inverse else pos, cfg, seq_len=seq_len)


def _qkv_heads(params: dict[str, Any]) -> tuple[int, int]:
    return int(params["num_heads_q"]), int(params["num_heads_kv"])


def evaluate(
    op: str, config: dict[str, Any], inputs: dict[str, np.ndarray], params: dict[str, Any]
) -> dict[str, np.ndarray]:
    """Expected tensors of a kernel-shape case, from the float64 oracle (:func:`rope_ref.apply` on positions
    placed by :mod:`rope_ref.axes` / :mod:`rope_ref.positions`)."""
    cfg = _rope(config)
    inverse = bool(params.get("inverse", False))
    if op in ("apply_axes", "round_trip"):
        x = np.asarray(inputs["x"], dtype=np.float64)
        pos = placed_positions(inputs, params, x.shape)
        seq_len = _seq_len(pos, cfg, params)
        y = _rotate(x, pos, cfg, seq_len, inverse)
        if op == "round_trip":
            y = _rotate(y, pos, cfg, seq_len, True)
        return {"out": y}
    if op == "apply_qk":
        q = np.asarray(inputs["q"], dtype=np.float64)
        k = np.asarray(inputs["k"], dtype=np.float64)
        pos_q = placed_positions(inputs, params, q.shape)
        seq_len = _seq_len(pos_q, cfg, params)
        pos_k = placed_positions(inputs, params, k.shape)
        return {"q": _rotate(q, pos_q, cfg, seq_len, inverse), "k": _rotate(k, pos_k, cfg, seq_len, inverse)}
    if op == "apply_qkv":
        qkv = np.asarray(inputs["qkv"], dtype=np.float64)
        pos = placed_positions(inputs, params, qkv.shape)
        seq_len = _seq_len(pos, cfg, params)
        out = _rotate(qkv, pos, cfg, seq_len, inverse)
        v = _v_index(params, qkv.ndim)
        out[v] = qkv[v]
        return {"out": out}
    raise ValueError(f"unknown kernel-shape op {op!r}")


def _v_index(params: dict[str, Any], ndim: int) -> tuple:
    """Index of the V heads of a packed ``qkv`` (its last ``num_heads_kv`` heads)."""
    hq, hk = _qkv_heads(params)
    h = params["axes"].index("h")
    return (slice(None),) * h + (slice(hq + hk, hq + 2 * hk),) + (slice(None),) * (ndim - h - 1)


def auxiliary(
    op: str, config: dict[str, Any], inputs: dict[str, np.ndarray], params: dict[str, Any]
) -> dict[str, np.ndarray]:
    """``inv_freq`` and ``attention_factor`` at the resolved seq_len (for readers in other languages)."""
    import rope_ref

    cfg = _rope(config)
    main = inputs[_main_input(op)]
    pos = placed_positions(inputs, params, np.shape(main))
    seq_len = _seq_len(pos, cfg, params)
    return {
        "inv_freq": np.asarray(rope_ref.inv_freq(cfg, seq_len), dtype=np.float64),
        "attention_factor": np.array(rope_ref.attention_factor(cfg, seq_len), dtype=np.float64),
    }


# -- presenting views to a backend -------------------------------------------------------------------------


@dataclass
class Presented:
    """What the runner hands a backend for one case: the views (by input name), the buffers behind them
    with a snapshot and the mask of buffer entries inside any view, and the positions keyword arguments."""

    views: dict[str, Any]
    buffers: list[tuple[Any, np.ndarray, np.ndarray]] = field(default_factory=list)
    positions: dict[str, Any] = field(default_factory=dict)


def _axis_slice(ndim: int, axis: int, sl: slice) -> tuple:
    return (slice(None),) * axis + (sl,) + (slice(None),) * (ndim - axis - 1)


def _storage(arr: np.ndarray, axes: str, view: dict[str, Any] | None):
    """``(buffer, index, perm)``: the NumPy buffer holding ``arr`` inside, the index of ``arr`` in it and the
    permutation from the buffer's axes to ``arr``'s (``None`` when not transposed)."""
    if view is None:
        return arr, (), None
    kind = view["kind"]
    if kind == "transpose":
        storage = view["storage"]
        if sorted(storage) != sorted(axes):
            raise ValueError(f"view storage {storage!r} is not a permutation of axes {axes!r}")
        buf = np.ascontiguousarray(np.transpose(arr, [axes.index(c) for c in storage]))
        return buf, (), tuple(storage.index(c) for c in axes)
    axis = axes.index(view["axis"])
    n = arr.shape[axis]
    if kind == "slice":
        before, after = int(view["before"]), int(view["after"])
        shape = list(arr.shape)
        shape[axis] = before + n + after
        index = _axis_slice(arr.ndim, axis, slice(before, before + n))
    elif kind == "strided":
        step = int(view["step"])
        shape = list(arr.shape)
        shape[axis] = n * step
        index = _axis_slice(arr.ndim, axis, slice(0, n * step, step))
    else:
        raise ValueError(f"unknown view kind {kind!r}; expected one of {VIEW_KINDS}")
    buf = np.full(shape, np.nan, dtype=arr.dtype)
    buf[index] = arr
    return buf, index, None


def _inside(shape: tuple[int, ...], index: tuple) -> np.ndarray:
    mask = np.zeros(shape, dtype=bool)
    mask[index] = True
    return mask


def present(backend, case, io_dtype: str | None) -> Presented:
    """Convert a case's inputs for ``backend`` and build the views its ``view`` param asks for."""
    p = case.params
    axes = p["axes"]
    view = p.get("view")
    acts = ACTIVATIONS[case.op]
    out = Presented({})
    if view is not None and view.get("kind") == "packed":
        q, k = (np.asarray(case.inputs[n]) for n in ("q", "k"))
        h = axes.index("h")
        hq, hk = q.shape[h], k.shape[h]
        shape = list(q.shape)
        shape[h] = hq + 2 * hk
        buf = np.full(shape, np.nan, dtype=q.dtype)
        qi = _axis_slice(q.ndim, h, slice(0, hq))
        ki = _axis_slice(q.ndim, h, slice(hq, hq + hk))
        buf[qi], buf[ki] = q, k
        converted = backend.from_numpy(buf, io_dtype)
        out.views = {"q": converted[qi], "k": converted[ki]}
        snapshot = np.array(backend.to_numpy(converted), copy=True)
        out.buffers.append((converted, snapshot, _inside(tuple(shape), qi) | _inside(tuple(shape), ki)))
    else:
        for name in acts:
            arr = np.asarray(case.inputs[name])
            buf, index, perm = _storage(arr, axes, view)
            converted = backend.from_numpy(buf, io_dtype)
            handed = converted
            if perm is not None:
                handed = backend.permute(converted, perm)
            elif index:
                handed = converted[index]
            out.views[name] = handed
            snapshot = np.array(backend.to_numpy(converted), copy=True)
            mask = np.ones(buf.shape, dtype=bool) if not index else _inside(buf.shape, index)
            out.buffers.append((converted, snapshot, mask))
    form = p.get("form", "ids")
    if form == "ids":
        out.positions["positions"] = backend.from_numpy(np.asarray(case.inputs["positions"]), None)
    elif form == "offset":
        out.positions["offset"] = (
            backend.from_numpy(np.asarray(case.inputs["offset"]), None)
            if "offset" in case.inputs
            else p["offset"]
        )
    elif form == "cu_seqlens":
        cu = np.asarray(case.inputs["cu_seqlens"])
        out.positions["cu_seqlens"] = backend.from_numpy(cu, None)
        out.positions["max_seqlen"] = int(np.max(np.diff(cu))) if cu.size > 1 else 0
        if "start_offsets" in case.inputs:
            out.positions["start_offsets"] = backend.from_numpy(
                np.asarray(case.inputs["start_offsets"]), None
            )
        elif p.get("start_offset") is not None:
            out.positions["start_offsets"] = int(p["start_offset"])
    else:
        raise ValueError(f"case {case.id!r}: unknown positions form {form!r}")
    return out


def call(backend, case, presented: Presented) -> Any:
    """Call the backend's method for the case; ``round_trip`` calls ``apply_axes`` twice."""
    p = case.params
    cfg = case.rope_config()
    kw: dict[str, Any] = dict(presented.positions)
    kw["axes"] = p["axes"]
    if p.get("seq_len") is not None:
        kw["seq_len"] = p["seq_len"]
    inplace = bool(p.get("inplace", False))
    inverse = bool(p.get("inverse", False))
    if inplace:
        kw["inplace"] = True
    if inverse:
        kw["inverse"] = True
    v = presented.views
    if case.op == "apply_axes":
        return backend.apply_axes(v["x"], cfg, **kw)
    if case.op == "round_trip":
        y = backend.apply_axes(v["x"], cfg, **kw)
        return backend.apply_axes(y, cfg, **{**kw, "inverse": True})
    if case.op == "apply_qk":
        return backend.apply_qk(v["q"], v["k"], cfg, **kw)
    if case.op == "apply_qkv":
        hq, hk = _qkv_heads(p)
        return backend.apply_qkv(v["qkv"], cfg, num_heads_q=hq, num_heads_kv=hk, **kw)
    raise ValueError(f"unknown kernel-shape op {case.op!r}")


def written(case, presented: Presented) -> Any:
    """What an in-place call is judged on: the views the backend was handed (a tuple for ``apply_qk``)."""
    names = ACTIVATIONS[case.op]
    views = tuple(presented.views[n] for n in names)
    return views if len(views) > 1 else views[0]


def buffer_problem(backend, presented: Presented, inplace: bool) -> str | None:
    """A message if an entry outside every view changed, or (out of place) any entry changed; else None."""
    for i, (buf, snapshot, inside) in enumerate(presented.buffers):
        now = np.asarray(backend.to_numpy(buf)).astype(np.float64)
        before = snapshot.astype(np.float64)
        same = (now == before) | (np.isnan(now) & np.isnan(before))
        outside_changed = ~same & ~inside
        if outside_changed.any():
            where = tuple(int(j) for j in np.argwhere(outside_changed)[0])
            return (
                f"wrote past the view: {int(outside_changed.sum())} buffer entries outside the handed "
                f"view(s) changed (first at buffer index {where})"
            )
        if not inplace and (~same).any():
            where = tuple(int(j) for j in np.argwhere(~same)[0])
            return f"changed its input buffer {i} at {where} although the case is not in place"
    return None


def v_problem(case, outputs: dict[str, np.ndarray]) -> str | None:
    """For ``apply_qkv``: a message if any V element differs from its input bit for bit."""
    if case.op != "apply_qkv":
        return None
    qkv = np.asarray(case.inputs["qkv"], dtype=np.float64)
    v = _v_index(case.params, qkv.ndim)
    got = outputs["out"][v]
    bad = ~((got == qkv[v]) | (np.isnan(got) & np.isnan(qkv[v])))
    if bad.any():
        return (
            f"V changed: {int(bad.sum())} of {bad.size} V elements differ from the input (must be bit-exact)"
        )
    return None


# -- tolerance ----------------------------------------------------------------------------------------------


def bounds(case, name: str, policy, rotation_bounds) -> tuple[np.ndarray, np.ndarray, list]:
    """``(tol, exact, norms)`` of output ``name``: ``conformance.tolerance._rotation_bounds`` applied to
    the placed positions (negated for ``inverse``; seq_len from the forward positions). ``round_trip``: the
    first rotation's bound carried through the second (``sqrt(2) A`` times it) plus the second's, whose
    input pairs have radius ``|A| r`` (the bound of ``|A| x``); no pair-norm check. ``apply_qkv``: V exact."""
    import rope_ref

    cfg = _rope(case.config)
    p = case.params
    inverse = bool(p.get("inverse", False))
    source = {"out": _main_input(case.op), "q": "q", "k": "k"}[name]
    v = np.asarray(case.inputs[source], dtype=np.float64)
    pos = placed_positions(case.inputs, p, v.shape)
    if case.op == "apply_qk":
        seq_len = _seq_len(placed_positions(case.inputs, p, np.shape(case.inputs["q"])), cfg, p)
    else:
        seq_len = _seq_len(pos, cfg, p)
    signed = -pos if inverse else pos
    tol, exact, (a, b, amp, ntol) = rotation_bounds(v, signed, cfg, seq_len, policy)
    if case.op == "round_trip":  # the intermediate's pairs have radius |A| r: the bound of |A| x
        factor = abs(rope_ref.attention_factor(cfg, seq_len))
        tol2, exact2, _ = rotation_bounds(factor * v, -signed, cfg, seq_len, policy)
        tol = math.sqrt(2.0) * factor * tol + tol2
        exact = exact & exact2
        tol[exact] = 0.0
        return tol, exact, []
    norms = [(slice(None), a, b, amp, ntol)]
    if case.op == "apply_qkv":
        vi = _v_index(p, v.ndim)
        tol[vi] = 0.0
        exact[vi] = True
        amp = amp.copy()
        ntol = np.array(ntol, copy=True)
        amp[vi] = np.hypot(v[..., a], v[..., b])[vi]
        ntol = np.broadcast_to(ntol, amp.shape).copy()
        ntol[vi] = 0.0
        norms = [(slice(None), a, b, amp, ntol)]
    return tol, exact, norms
