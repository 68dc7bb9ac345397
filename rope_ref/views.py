"""Whether two strided views of memory share a byte: the in-place check of the q/k kernels.

An in-place ``apply_qk`` may be handed q and k as disjoint slices of one packed buffer (the usual case:
heads ``[0, Hq)`` and ``[Hq, Hq + Hk)`` of a qkv projection, whose byte ranges interleave token by
token). It must refuse q and k that share elements: a kernel that rotates q and then k in place would
rotate the shared elements twice, and a fused GPU kernel would race on them.

A view is described by plain integers, so any array library can use it: the address of element
``(0, ..., 0)``, the shape, the strides in bytes (any sign) and the item size. The exact answer comes from
NumPy's bounded Diophantine solver (:func:`numpy.shares_memory`) applied to two stand-in arrays that
have the views' address arithmetic; the stand-ins are never read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

__all__ = ["View", "views_overlap", "check_disjoint"]

_TOO_HARD = getattr(np, "exceptions", np).TooHardError  # numpy.exceptions from NumPy 1.25

#: Bound on the solver's work; beyond it the views are treated as possibly overlapping.
MAX_WORK = 1 << 20


class View(NamedTuple):
    """A strided view: ``address`` of element ``(0, ..., 0)``, ``shape``, byte ``strides``, ``itemsize``."""

    address: int
    shape: tuple[int, ...]
    strides: tuple[int, ...]
    itemsize: int


def _span(view: View) -> tuple[int, int] | None:
    """Lowest address and one past the highest byte of ``view``; None when it holds no element."""
    if any(n == 0 for n in view.shape):
        return None
    low = view.address + sum(min(0, st * (n - 1)) for n, st in zip(view.shape, view.strides, strict=True))
    high = view.address + sum(max(0, st * (n - 1)) for n, st in zip(view.shape, view.strides, strict=True))
    return low, high + view.itemsize


def _stand_in(base: np.ndarray, view: View, low: int) -> np.ndarray:
    """A uint8 array with ``view``'s byte addresses (relative to ``low``), one trailing axis per byte."""
    start = base[view.address - low :]
    return np.lib.stride_tricks.as_strided(
        start, shape=tuple(view.shape) + (view.itemsize,), strides=tuple(view.strides) + (1,), writeable=False
    )


def views_overlap(a: View, b: View) -> bool:
    """True when ``a`` and ``b`` share at least one byte (exact, not a bounding-range test).

    Raises ``ValueError`` if the solver gives up (more than :data:`MAX_WORK` steps), so that a caller
    never treats an unproven case as disjoint.
    """
    for name, view in (("a", a), ("b", b)):
        if len(view.shape) != len(view.strides) or view.itemsize < 1:
            raise ValueError(f"view {name} needs one stride per axis and itemsize >= 1, got {view}")
    span_a, span_b = _span(a), _span(b)
    if span_a is None or span_b is None:
        return False
    if span_a[1] <= span_b[0] or span_b[1] <= span_a[0]:
        return False
    low = min(span_a[0], span_b[0])
    size = max(span_a[1], span_b[1]) - low
    stub = np.zeros(1, np.uint8)
    base = np.lib.stride_tricks.as_strided(stub, shape=(size,), strides=(1,), writeable=False)
    try:
        return bool(np.shares_memory(_stand_in(base, a, low), _stand_in(base, b, low), max_work=MAX_WORK))
    except _TOO_HARD as err:
        raise ValueError("cannot decide whether the two views overlap (too many strides to search)") from err


def check_disjoint(q: View, k: View, names: Sequence[str] = ("q", "k")) -> None:
    """``ValueError`` naming both arguments when the in-place views ``q`` and ``k`` share elements."""
    if views_overlap(q, k):
        first, second = names
        raise ValueError(
            f"in place, {first} and {second} must not share memory: they overlap, so some elements would "
            "be rotated twice; pass disjoint views (e.g. the q and k heads of one packed buffer) or "
            "inplace=False"
        )
