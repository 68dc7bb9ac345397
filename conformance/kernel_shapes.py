"""The shapes real kernels are called with, as conformance operations: how the runner presents
them to a backend, calls it and checks what it wrote (their cases and oracle evaluation are
:mod:`conformance.cases.kernel_shapes`, their tolerance :mod:`rope_ref.tolerance`).

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

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rope_ref.case import placed_positions, v_heads_index

__all__ = [
    "KERNEL_OPS",
    "ACTIVATIONS",
    "OUTPUTS",
    "placed_positions",
    "present",
    "Presented",
    "call",
    "VIEW_KINDS",
]

#: Operations added by issue 16.
KERNEL_OPS = ("apply_axes", "apply_qk", "apply_qkv", "round_trip")
#: Activation inputs of each (converted with the backend's I/O dtype).
ACTIVATIONS = {"apply_axes": ("x",), "round_trip": ("x",), "apply_qk": ("q", "k"), "apply_qkv": ("qkv",)}
#: Expected outputs of each, in the order a backend returns them.
OUTPUTS = {"apply_axes": ("out",), "round_trip": ("out",), "apply_qk": ("q", "k"), "apply_qkv": ("out",)}
VIEW_KINDS = ("transpose", "slice", "strided", "packed")


def _qkv_heads(params: dict[str, Any]) -> tuple[int, int]:
    return int(params["num_heads_q"]), int(params["num_heads_kv"])


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
    v = v_heads_index(case.params, qkv.ndim)
    got = outputs["out"][v]
    bad = ~((got == qkv[v]) | (np.isnan(got) & np.isnan(qkv[v])))
    if bad.any():
        return (
            f"V changed: {int(bad.sum())} of {bad.size} V elements differ from the input (must be bit-exact)"
        )
    return None
