"""Sums, dot products and exp whose bits do not depend on the CPU, the BLAS or the thread count.

``np.sum``, ``@``/``np.dot``/``einsum`` and ``np.exp`` may reassociate or vectorize differently on
different machines (BLAS kernels and thread splits, NumPy's SIMD dispatch). The oracle's reductions
therefore use an explicit pairwise tree of elementwise additions (the order depends only on the
length of the summed axis) and an exp built from basic operations. Higham, *Accuracy and Stability
of Numerical Algorithms*, 2nd ed., §4.2 (pairwise summation: error bound ``ceil(log2 n) u sum|x_i|``).
"""

from __future__ import annotations

import numpy as np

__all__ = ["fixed_sum", "fixed_sum_in_place", "fixed_dot", "exp_basic", "irwin_hall"]


def fixed_sum(a: np.ndarray, axis: int = -1) -> np.ndarray:
    """Sum over ``axis`` by a pairwise tree: element ``i`` is added to element ``i + h`` (``h = ceil(n/2)``).

    Only elementwise ``np.add`` is used, whose roundings are the same everywhere. An empty axis sums
    to 0.0. The tree is walked along ``axis`` where it lies: summing the leading axis of a C-ordered
    array adds whole contiguous rows (the fast layout, see :mod:`rope_ref.decay`). ``a`` is not
    changed: the tree runs in a copy (:func:`fixed_sum_in_place`).
    """
    return fixed_sum_in_place(np.array(a, dtype=np.float64), axis)


def fixed_sum_in_place(a: np.ndarray, axis: int = -1) -> np.ndarray:
    """:func:`fixed_sum` with ``a`` (a float64 array) as its work array: the same additions in the same
    order, without copies. ``a`` is overwritten; the result may be a view of it."""
    axis = _axis_index(axis, a.ndim)
    n = a.shape[axis]
    if n == 0:
        return np.zeros(a.shape[:axis] + a.shape[axis + 1 :])
    lead = (slice(None),) * axis
    while n > 1:
        half = (n + 1) // 2
        a[lead + (slice(0, n - half),)] += a[lead + (slice(half, n),)]
        n = half
    return a[lead + (0,)]


def _axis_index(axis: int, ndim: int) -> int:
    """``axis`` as an index in ``range(ndim)``; an axis out of range raises NumPy's ``AxisError``."""
    np.moveaxis(np.empty((0,) * ndim), axis, 0)  # the check and the error NumPy gives
    return axis % ndim


def fixed_dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``sum_k a[..., k] * b[..., k]`` with broadcasting: products, then :func:`fixed_sum`."""
    return fixed_sum(np.multiply(a, b), axis=-1)


# exp: x = k ln2 + r with ln2 split in two parts (the first with 32 significant bits, so k * part1 is
# exact for |k| < 2**21), |r| <= ln2/2, then a Taylor polynomial of degree 17 (truncation < 2**-60).
_LN2_HI = 0.6931471806019545  # round(2**31 ln 2) / 2**31: 32 significant bits
_LN2_LO = -4.2009150726810846e-11  # ln 2 - _LN2_HI, rounded
_INV_LN2 = 1.4426950408889634
_EXP_COEFFS = tuple(1.0 / float(np.prod(np.arange(1, n + 1, dtype=np.float64))) for n in range(17, -1, -1))


def exp_basic(x: np.ndarray) -> np.ndarray:
    """``exp(x)`` for float64 ``x`` with basic operations only (within a few ulp; -inf gives 0).

    Cody-Waite reduction and a Horner polynomial, then ``ldexp`` (exact scaling by a power of two).
    NaN propagates; ``x > 709.78`` overflows to inf.
    """
    x = np.asarray(x, dtype=np.float64)
    safe = np.clip(np.where(np.isnan(x), 0.0, x), -746.0, 710.0)
    k = np.rint(safe * _INV_LN2)
    r = (safe - k * _LN2_HI) - k * _LN2_LO
    p = np.full_like(r, _EXP_COEFFS[0])
    for c in _EXP_COEFFS[1:]:
        p = p * r + c
    with np.errstate(over="ignore", under="ignore"):
        # Two ldexp steps keep the intermediate normal when k is near the ends of the range.
        half = np.floor(k * 0.5)
        out = np.ldexp(np.ldexp(p, half.astype(np.int64)), (k - half).astype(np.int64))
    out = np.where(x < -746.0, 0.0, out)
    return np.where(np.isnan(x), x, out)


#: Uniform terms of :func:`irwin_hall`: their sum has mean 6 and variance 1.
IRWIN_HALL_TERMS = 12


def irwin_hall(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Approximately N(0, 1) draws: the sum of 12 uniforms on [0, 1) minus 6 (tails cut at +-6).

    The uniforms are ``(53 random bits) * 2**-53``, exact, drawn term by term (the same stream as one
    ``rng.random((12, *shape))``) and added in a fixed order, so the values are the same bits on every
    machine. ``standard_normal`` is not: its ziggurat falls back to the C library's ``log``/``exp`` in
    the tails.
    """
    total = np.zeros(shape)
    for _ in range(IRWIN_HALL_TERMS):
        total += rng.random(shape)
    return total - 6.0
