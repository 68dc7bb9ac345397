"""Axis names for activations, and positions placed on the right axis of them.

One vocabulary, shared with the conformance protocol: an axes string names every axis of ``x``, one
letter each, and ends with ``d`` (the head dimension). ``b`` batch, ``s`` sequence, ``h`` heads,
``t`` packed tokens (varlen: all sequences of a batch concatenated, as flash-attention's
``cu_seqlens`` inputs), ``d`` head dim. The common ones:

* ``"bshd"``: HF with ``unsqueeze_dim=2``, flash-attention, vLLM ``(B, S, H, D)``;
* ``"bhsd"``: HF ``apply_rotary_pos_emb`` default (``unsqueeze_dim=1``), SDPA ``(B, H, S, D)``;
* ``"sbhd"``: Megatron / ChatGLM ``(S, B, H, D)``;
* ``"thd"``: packed varlen ``(T, H, D)``;
* ``"shd"``, ``"hsd"``: one sequence without a batch axis.

:func:`positions_for_axes` turns HF-style ``(B, S)`` ids, per-token ``(S,)`` / ``(T,)`` ids or a scalar
into float64 positions that broadcast against ``x.shape[:-1]`` (so the oracle never has to guess
which axis a ``(B, S)`` array belongs to: with q ``(8, 8, 16, 128)`` in ``bhsd`` and ids ``(8, 16)``,
plain broadcasting would put the ids on the heads and sequence axes without an error).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._arrays import as_positions

__all__ = [
    "AXES",
    "LETTERS",
    "parse_axes",
    "positions_for_axes",
    "qk_head_axis",
    "qkv_heads",
    "suggest_axes",
    "shape_mismatch_message",
]

#: The named conventions (any string following the rules of :func:`parse_axes` is accepted too).
AXES = ("bshd", "bhsd", "sbhd", "thd", "shd", "hsd")

#: What each letter means.
LETTERS = {"b": "batch", "s": "sequence", "h": "heads", "t": "packed tokens", "d": "head dim"}


def parse_axes(axes: Any, ndim: int | None = None) -> str:
    """Validate an axes string (and, given ``ndim``, that it names every axis of ``x``).

    Rules: letters from ``b s h t d``, each at most once, ``d`` last, exactly one position axis
    (``s`` or ``t``), and ``t`` (already flattened tokens) never together with ``b``.
    """
    if not isinstance(axes, str):
        raise TypeError(f"axes must be a str such as {AXES}, got {type(axes).__name__} {axes!r:.60}")
    unknown = sorted(set(axes) - set(LETTERS))
    if unknown:
        raise ValueError(
            f"axes={axes!r} has unknown letters {unknown}; use b (batch), s (sequence), h (heads), "
            f"t (packed tokens), d (head dim), e.g. one of {AXES}"
        )
    if len(set(axes)) != len(axes):
        raise ValueError(f"axes={axes!r} names an axis twice")
    if not axes.endswith("d"):
        raise ValueError(f"axes={axes!r} must end with 'd' (the head dimension is the last axis of x)")
    if ("s" in axes) == ("t" in axes):
        raise ValueError(f"axes={axes!r} must have exactly one position axis: 's' (sequence) or 't' (tokens)")
    if "t" in axes and "b" in axes:
        raise ValueError(f"axes={axes!r}: 't' is packed tokens of the whole batch, so there is no 'b' axis")
    if ndim is not None and len(axes) != ndim:
        raise ValueError(
            f"axes={axes!r} names {len(axes)} axes but x has {ndim} (x.ndim must equal len(axes))"
        )
    return axes


def _placed(pos: np.ndarray, axes: str, x_shape: tuple[int, ...]) -> np.ndarray:
    """``pos`` reshaped onto the axes it belongs to, or a ValueError describing the mismatch."""
    lead = x_shape[:-1]
    seq_letter = "s" if "s" in axes else "t"
    seq_axis = axes.index(seq_letter)
    named = ", ".join(f"{letter}={n}" for letter, n in zip(axes, x_shape, strict=True))

    def fail(expect: str) -> ValueError:
        return ValueError(
            f"positions of shape {pos.shape} do not fit x of shape {tuple(x_shape)} with axes={axes!r} "
            f"({named}): expected {expect}"
        )

    def fits(got: int, want: int) -> bool:
        return got == want or got == 1

    if pos.ndim == 0:
        return pos
    if pos.ndim == 1:  # per-token ids shared over batch and heads
        if not fits(pos.shape[0], lead[seq_axis]):
            raise fail(f"({lead[seq_axis]},) per-token ids on axis {seq_letter!r}")
        shape = [1] * len(lead)
        shape[seq_axis] = pos.shape[0]
        return pos.reshape(shape)
    if pos.ndim == 2 and "b" in axes:  # HF position_ids (B, S)
        b_axis = axes.index("b")
        want = (lead[b_axis], lead[seq_axis])
        if not (fits(pos.shape[0], want[0]) and fits(pos.shape[1], want[1])):
            raise fail(f"HF-style (B, S) = {want} ids")
        shape = [1] * len(lead)
        shape[b_axis], shape[seq_axis] = pos.shape
        if b_axis > seq_axis:  # sbhd: the array's (B, S) order is the reverse of x's
            pos = pos.T
        return pos.reshape(shape)
    if pos.ndim == len(lead):  # already one entry (or 1) per leading axis of x
        if all(fits(p, n) for p, n in zip(pos.shape, lead, strict=True)):
            return pos
        raise fail(f"a shape that broadcasts to x.shape[:-1] = {tuple(lead)}")
    forms = [f"a scalar, ({lead[seq_axis]},) per-token ids"]
    if "b" in axes:
        forms.append(f"({lead[axes.index('b')]}, {lead[seq_axis]}) HF-style (B, S) ids")
    forms.append(f"an array broadcasting to {tuple(lead)}")
    raise fail(" or ".join(forms))


def positions_for_axes(positions: Any, axes: str, x_shape: tuple[int, ...]) -> np.ndarray:
    """Float64 positions for ``x`` (shape ``x_shape``, axes ``axes``), broadcastable to ``x_shape[:-1]``.

    Accepts a scalar, per-token ids ``(S,)`` (``(T,)`` for ``thd``), HF-style ``(B, S)`` ids (whatever
    the order of ``b`` and ``s`` in ``axes``), or an array with one axis per leading axis of ``x``.
    Raises ``ValueError`` naming ``axes``, the positions' shape and x's shape when they do not fit.
    """
    x_shape = tuple(int(n) for n in x_shape)
    axes = parse_axes(axes, len(x_shape))
    pos = as_positions(positions)
    return _placed(pos, axes, x_shape)


def qk_head_axis(q_shape: tuple[int, ...], k_shape: tuple[int, ...], axes: Any) -> int:
    """The head axis ``h`` of q and k rotated together (GQA/MQA), or a ``ValueError``.

    ``axes`` must name every axis of q and include ``h``; k has the same axes and sizes except the heads,
    and its head count ``Hk`` divides q's ``Hq`` (each k head serves ``Hq / Hk`` q heads). Shared by the
    oracle backend and every adapter's ``apply_qk`` / ``apply_qkv``, so that all report the same errors.
    """
    q_shape, k_shape = tuple(q_shape), tuple(k_shape)
    axes = parse_axes(axes, len(q_shape))
    if "h" not in axes:
        raise ValueError(f"axes={axes!r} has no head axis 'h'")
    if len(k_shape) != len(q_shape):
        raise ValueError(f"k has {len(k_shape)} axes but q has {len(q_shape)} (axes={axes!r})")
    h = axes.index("h")
    if q_shape[:h] + q_shape[h + 1 :] != k_shape[:h] + k_shape[h + 1 :]:
        raise ValueError(f"q {q_shape} and k {k_shape} must agree on every axis but the heads")
    hq, hk = q_shape[h], k_shape[h]
    if hk == 0 or hq % hk:
        raise ValueError(f"k heads ({hk}) must divide q heads ({hq}) (GQA/MQA), axes={axes!r}")
    return h


def qkv_heads(shape: tuple[int, ...], axes: Any, num_heads_q: Any, num_heads_kv: Any) -> tuple[int, int, int]:
    """``(h, Hq, Hk)`` of a packed qkv of ``shape`` whose head axis ``h`` holds ``Hq + 2 Hk`` heads (q, k, v).

    ``axes`` must name every axis and include ``h``; both counts are ints >= 1 and ``Hk`` divides ``Hq``
    (GQA/MQA); a ``ValueError`` naming the argument otherwise. Shared by the oracle backend, the adapters'
    ``apply_qkv`` and the peers' glue (:mod:`rope_ref.kernel_args`).
    """
    axes = parse_axes(axes, len(shape))
    if "h" not in axes:
        raise ValueError(f"axes={axes!r} has no head axis 'h' to split")
    for name, n in (("num_heads_q", num_heads_q), ("num_heads_kv", num_heads_kv)):
        if isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) or n < 1:
            raise ValueError(f"{name} must be an int >= 1, got {n!r}")
    hq, hk = int(num_heads_q), int(num_heads_kv)
    h = axes.index("h")
    if shape[h] != hq + 2 * hk:
        raise ValueError(
            f"qkv.shape[{h}] = {shape[h]} does not split as num_heads_q + 2 * num_heads_kv = {hq} + 2 * {hk}"
        )
    if hq % hk:
        raise ValueError(f"num_heads_kv ({hk}) must divide num_heads_q ({hq}) (GQA/MQA)")
    return h, hq, hk


def suggest_axes(positions_shape: tuple[int, ...], x_shape: tuple[int, ...]) -> list[str]:
    """The named conventions under which ids of ``positions_shape`` fit ``x_shape`` (HF (B, S) first)."""
    x_shape = tuple(int(n) for n in x_shape)
    out = []
    for axes in AXES:
        if len(axes) != len(x_shape):
            continue
        try:
            _placed(np.zeros(positions_shape), axes, x_shape)
        except ValueError:
            continue
        out.append(axes)
    return out


def shape_mismatch_message(positions_shape: tuple[int, ...], x_shape: tuple[int, ...]) -> str:
    """The error text for positions that do not broadcast against ``x.shape[:-1]``, with the fix.

    ``"positions (8, 16) vs x (8, 8, 16, 128): positions must broadcast against x.shape[:-1] =
    (8, 8, 16); for HF-style (B, S) ids pass axes='bhsd'"``. Also used for shapes that broadcast by
    accident (see :func:`ambiguous_hf_ids`).
    """
    positions_shape, x_shape = tuple(positions_shape), tuple(x_shape)
    text = (
        f"positions {positions_shape} vs x {x_shape}: positions must broadcast against "
        f"x.shape[:-1] = {x_shape[:-1]}"
    )
    hint = _hint(positions_shape, x_shape)
    return text + (f"; {hint}" if hint else "")


def _hint(positions_shape: tuple[int, ...], x_shape: tuple[int, ...]) -> str:
    fits = suggest_axes(positions_shape, x_shape)
    if not fits:
        return f"name x's axes with axes= (one of {AXES}) to place per-token or (B, S) ids"
    kind = {1: "per-token ids", 2: "HF-style (B, S) ids"}.get(len(positions_shape), "these positions")
    options = " or ".join(f"axes={a!r}" for a in fits)
    return f"for {kind} pass {options}"


def ambiguous_hf_ids(positions_shape: tuple[int, ...], x_shape: tuple[int, ...]) -> str | None:
    """A warning text when 2-D ids broadcast against ``x.shape[:-1]`` but are likely HF ``(B, S)`` ids.

    Plain NumPy broadcasting aligns ``(B, S)`` with the *last two* leading axes of x: for a 4-D x
    that is ``(H, S)`` in ``bhsd`` and ``(S, H)`` in ``bshd``. It only fits when sizes coincide, and
    then it is silently wrong. Returns ``None`` when the shapes are not of that kind.
    """
    positions_shape, x_shape = tuple(positions_shape), tuple(x_shape)
    if len(positions_shape) != 2 or len(x_shape) != 4:
        return None
    if positions_shape[0] == 1 or positions_shape[0] != x_shape[0]:
        return None
    return (
        f"positions {positions_shape} look like HF-style (B, S) ids but broadcast onto x.shape[1:3] = "
        f"{x_shape[1:3]} of x {x_shape}; pass axes= ('bhsd' or 'bshd') to place them on batch and sequence"
    )
