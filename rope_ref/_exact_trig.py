"""cos and sin of the exact product ``m * theta`` with IEEE-754 basic operations only.

The oracle's angle is the real number ``m * theta_i`` (a float64 position times a float64 inverse
frequency), not its float64 rounding. This module evaluates cos and sin of that exact product, within
one ulp and correctly rounded in all but about one case in 10^5 (measured figures in ``docs/spec.md``),
using only ``+ - * /``, ``rint``/``floor``, comparisons and table look-ups, vectorized with NumPy. Those
operations round the same way on every CPU, so the result does not depend on the machine, the NumPy
build or its SIMD dispatch (NumPy's ``np.sin``/``np.cos`` do).

Method (double-double arithmetic: Dekker, *A floating-point technique for extending the available
precision*, Numer. Math. 18, 1971; Muller et al., *Handbook of Floating-Point Arithmetic*, 2nd ed.,
§4.3-4.4):

1. **Reduction in quarter turns.** For each distinct theta, ``w = theta * 2/pi`` is precomputed with
   mpmath as a sum of three float64s ``w1 + w2 + w3`` (159 bits). ``u = m * w`` is formed with exact
   products (``TwoProduct`` with Veltkamp splitting; NumPy never fuses a multiply and an add), the
   nearest integer ``k`` is removed, and the fractional part ``f = u - k`` (``|f| <= 1/2``) is kept as
   a double-double. This is Cody-Waite / Payne-Hanek reduction specialised to a product with a fixed
   factor; the reduced argument's absolute error is below ``2**-100`` for every supported input.
2. **Table split.** ``j = rint(128 f)`` and the quadrant ``k mod 4`` pick ``sin, cos(J pi / 256)``,
   ``J = j + 128 (k mod 4)``, from a 515-entry table (double-doubles computed with mpmath's
   ``sinpi``/``cospi``), leaving ``t = (f - j/128) pi / 2``, ``|t| <= pi/512``.
3. **Short polynomials** for ``sin t - t`` (degree 7) and ``cos t - 1`` (degree 8): Taylor's
   coefficients; the truncation error is below ``2**-75``.
4. **Recombination.** ``sin(J pi/256 + t)`` and ``cos(J pi/256 + t)`` by the addition formulas with
   the leading product and sum exact, then one final rounding.

Supported range: ``|m * theta| <= ANGLE_LIMIT`` (radians); :func:`check_angle_range` refuses more.
"""

from __future__ import annotations

import functools

import numpy as np

from . import _mp

__all__ = ["ANGLE_LIMIT", "cos_sin_of_product", "check_angle_range"]

#: Largest |m * theta| (radians) for which the reduction is exact: k = rint(u) stays an exact integer
#: far below 2**53 and the three-part 2/pi keeps the reduced argument accurate to 2**-100.
ANGLE_LIMIT = float(2**48)

_SPLIT = 134217729.0  # 2**27 + 1, Veltkamp's splitting constant for float64
_TABLE_STEPS = 128  # table spacing: 1/128 quarter turn = pi/256 rad
_TABLE_PAD = _TABLE_STEPS // 2 + 1  # |j| <= 64 since |f| <= 1/2; one spare entry each side
_TINY = 2.0**-500  # quarter turns below which the angle is handled as tiny (no underflow in the products)
_BLOCK = 1 << 15  # elements per block: its work arrays (4 MiB, see _Scratch) stay in the L3 cache

# Taylor coefficients (float64 roundings; their error is far below the truncation error).
_S3, _S5, _S7 = -1.0 / 6.0, 1.0 / 120.0, -1.0 / 5040.0
_C2, _C4, _C6, _C8 = -0.5, 1.0 / 24.0, -1.0 / 720.0, 1.0 / 40320.0


def _split(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Veltkamp's split: ``a = hi + lo`` exactly, each half with at most 26 significant bits."""
    c = _SPLIT * a
    hi = c - (c - a)
    return hi, a - hi


def _two_product_error(p, ah, al, bh, bl):
    """Dekker's TwoProduct error term: ``a * b - p`` exactly, for ``p = fl(a * b)``."""
    return ((ah * bh - p) + ah * bl + al * bh) + al * bl


def _two_sum(a, b):
    """Knuth's TwoSum: ``s + e == a + b`` exactly, ``s = fl(a + b)``."""
    s = a + b
    bb = s - a
    return s, (a - (s - bb)) + (b - bb)


def _fast_two_sum(a, b):
    """``s + e == a + b`` exactly when ``|a| >= |b|`` (or a is zero)."""
    s = a + b
    return s, b - (s - a)


@functools.lru_cache(maxsize=1)
def _constants() -> tuple[np.ndarray, ...]:
    """``pi/2`` (a double-double and the split of its leading part) and the table of
    ``sin, cos(J pi/256)`` for ``J = -_TABLE_PAD .. 3 * 128 + _TABLE_PAD`` (row ``J + _TABLE_PAD``) as
    double-doubles, with the splits of their leading parts. ``sinpi``/``cospi`` make the entries at
    multiples of pi/2 exactly 0 and +-1."""
    mp = _mp.ctx()
    half_pi = mp.pi / 2
    p1 = _mp.to_float(half_pi)
    p2 = _mp.to_float(half_pi - mp.mpf(p1))
    size = 3 * _TABLE_STEPS + 2 * _TABLE_PAD + 1
    sin_hi, sin_lo, cos_hi, cos_lo = (np.empty(size) for _ in range(4))
    for row in range(size):
        turns = mp.mpf(row - _TABLE_PAD) / (2 * _TABLE_STEPS)  # J / 256, exact
        s, c = mp.sinpi(turns), mp.cospi(turns)
        sin_hi[row] = _mp.to_float(s)
        sin_lo[row] = _mp.to_float(s - mp.mpf(sin_hi[row]))
        cos_hi[row] = _mp.to_float(c)
        cos_lo[row] = _mp.to_float(c - mp.mpf(cos_hi[row]))
    sin_h, sin_l = _split(sin_hi)
    cos_h, cos_l = _split(cos_hi)
    p1h, p1l = _split(np.array(p1))
    return np.array([p1, p2, p1h, p1l]), sin_hi, sin_lo, cos_hi, cos_lo, sin_h, sin_l, cos_h, cos_l


@functools.lru_cache(maxsize=65536)
def _quarter_turns(theta: float) -> tuple[float, float, float]:
    """``theta * 2/pi`` as three float64s whose exact sum is within ``2**-159`` (relative) of it."""
    mp = _mp.ctx()
    w = _mp.exact(theta) * 2 / mp.pi
    w1 = _mp.to_float(w)
    rest = w - mp.mpf(w1)
    w2 = _mp.to_float(rest)
    w3 = _mp.to_float(rest - mp.mpf(w2))
    return w1, w2, w3


def _theta_parts(theta: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-element ``(w1, w2, w3)`` of :func:`_quarter_turns`, one mpmath evaluation per distinct theta."""
    values, inverse = np.unique(theta, return_inverse=True)
    parts = np.array([_quarter_turns(float(v)) for v in values.tolist()], dtype=np.float64).reshape(-1, 3)
    parts = parts[inverse.reshape(-1)].reshape(theta.shape + (3,))
    return parts[..., 0], parts[..., 1], parts[..., 2]


def check_angle_range(m: np.ndarray, theta: np.ndarray) -> None:
    """Refuse products ``|m * theta|`` beyond :data:`ANGLE_LIMIT`, naming the limit."""
    if m.size == 0 or theta.size == 0:
        return
    largest = float(np.max(np.abs(m))) * float(np.max(np.abs(theta)))
    if largest > ANGLE_LIMIT:
        raise ValueError(
            f"angle |position * inv_freq| reaches {largest:.6g} rad, beyond the oracle's exact argument "
            f"reduction limit of 2**48 = {ANGLE_LIMIT:.6g} rad"
        )


class _Scratch:
    """Preallocated work arrays of one :func:`cos_sin_of_product` call, viewed in each block's shape.

    Every intermediate of :func:`_block` is written into one of these with ``out=``: the operations and
    their order (hence every rounding) are those of the formulas, but no block allocates. Allocating
    the ~60 temporaries of a block made malloc return and re-fault pages on every block, which cost
    about half the time.
    """

    _FLOATS = 16

    def __init__(self, size: int) -> None:
        self._flat = np.empty((self._FLOATS, size), dtype=np.float64)
        self._rows = np.empty(size, dtype=np.intp)
        self._tiny = np.empty(size, dtype=bool)
        self._views: dict[tuple[int, ...], tuple[list[np.ndarray], np.ndarray]] = {}

    def views(self, shape: tuple[int, ...]) -> tuple[list[np.ndarray], np.ndarray]:
        got = self._views.get(shape)
        if got is None:
            n = int(np.prod(shape, dtype=np.int64))
            got = ([b[:n].reshape(shape) for b in self._flat], self._rows[:n].reshape(shape))
            self._views[shape] = got
        return got

    def tiny(self, shape: tuple[int, ...]) -> np.ndarray:
        return self._tiny[: int(np.prod(shape, dtype=np.int64))].reshape(shape)


class _WholePositions:
    """Step 1 of :func:`_block` when every position splits exactly (Veltkamp's low half ``ml`` is +0,
    e.g. integers below 2**26) and theta is finite: the same bits with fewer and faster operations.

    - ``TwoProductError(p, m, 0, bh, bl) = (((m bh - p) + m bl) + 0 bh) + 0 bl``, and ``(m bh - p) + m bl``
      is never -0 (``m bh - p`` is +0 or nonzero, ``p`` being the rounded product of the same signs), so
      the two zero products change nothing and are skipped (``mh`` is ``m`` bit for bit).
    - The outer products read dense copies of ``m`` and of the ``w`` parts: NumPy's broadcasting loops
      over a short last axis cost two to three times a dense loop. Parts that broadcast along the block
      axis are copied once per call, ``m`` once per block.
    - The tiny-angle mask of step 5 is ``(m == 0) | (w1 == 0)`` when the smallest nonzero ``|m|`` times
      the smallest nonzero ``|w1|`` rounds to ``_TINY`` or more (rounding is monotonic, so every other
      nonzero product does too); otherwise it is computed from ``p`` as in the general path.
    """

    def __init__(self, m: np.ndarray, w_parts: tuple[np.ndarray, ...], axis: int, size: int) -> None:
        # The w parts (w1, w1h, w1l, w2, w2h, w2l, w3) that are the same in every block.
        self._same_in_every_block = [w.shape[axis] == 1 for w in w_parts]
        w1 = w_parts[0]
        self._m_flat = np.empty(size, dtype=np.float64)
        self._dense: dict[tuple[int, tuple[int, ...]], np.ndarray] = {}
        m_nonzero, w_nonzero = np.abs(m[m != 0]), np.abs(w1[w1 != 0])
        self._mask_from_zeros = (
            m_nonzero.size == 0 or w_nonzero.size == 0 or float(m_nonzero.min() * w_nonzero.min()) >= _TINY
        )

    @staticmethod
    def applies(ml: np.ndarray, theta: np.ndarray) -> bool:
        """Whether every ``ml`` is zero (so ``m`` is finite) and every theta finite."""
        return not ml.any() and bool(np.isfinite(theta).all())

    def _w(self, index: int, w: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
        if w.shape == shape or not self._same_in_every_block[index]:
            return w
        key = (index, shape)
        dense = self._dense.get(key)
        if dense is None:
            dense = self._dense[key] = np.ascontiguousarray(np.broadcast_to(w, shape))
        return dense

    def products(self, m, w1, w1h, w1l, w2, w2h, w2l, w3, p, pe, q, qe, t, tiny_out):
        """``p, pe, q, qe`` of step 1 written in place; returns ``(tiny mask or None, m, w3)``, dense."""
        shape = p.shape
        zero = None
        if self._mask_from_zeros:
            m_zero, w1_zero = m == 0, w1 == 0  # small arrays when they broadcast
            zero = (m_zero, w1_zero) if m_zero.any() or w1_zero.any() else ()
        if m.shape != shape:
            dense_m = self._m_flat[: p.size].reshape(shape)
            np.copyto(dense_m, m)
            m = dense_m
        w1, w1h, w1l, w2, w2h, w2l, w3 = (
            self._w(i, w, shape) for i, w in enumerate((w1, w1h, w1l, w2, w2h, w2l, w3))
        )
        np.multiply(m, w1, out=p)
        np.multiply(m, w1h, out=pe)  # pe = (m w1h - p) + m w1l
        np.subtract(pe, p, out=pe)
        np.add(pe, np.multiply(m, w1l, out=t), out=pe)
        np.multiply(m, w2, out=q)
        np.multiply(m, w2h, out=qe)  # qe = (m w2h - q) + m w2l
        np.subtract(qe, q, out=qe)
        np.add(qe, np.multiply(m, w2l, out=t), out=qe)
        if zero is None:
            return np.less(np.abs(p, out=t), _TINY, out=tiny_out), m, w3
        return (np.logical_or(*zero, out=tiny_out) if zero else None), m, w3


def _two_product_error_into(out, t, p, ah, al, bh, bl):
    """:func:`_two_product_error` written into ``out`` (``t`` is scratch), the same operations in order."""
    np.multiply(ah, bh, out=out)
    np.subtract(out, p, out=out)
    np.multiply(ah, bl, out=t)
    np.add(out, t, out=out)
    np.multiply(al, bh, out=t)
    np.add(out, t, out=out)
    np.multiply(al, bl, out=t)
    np.add(out, t, out=out)
    return out


def _two_sum_into(s, e, t, a, b):
    """:func:`_two_sum` of ``a`` and ``b`` into ``s`` and ``e`` (``t`` is scratch; none may alias a or b)."""
    np.add(a, b, out=s)
    np.subtract(s, a, out=t)  # bb
    np.subtract(s, t, out=e)
    np.subtract(a, e, out=e)
    np.subtract(b, t, out=t)
    np.add(e, t, out=e)


def _split_into(hi, lo, a):
    """:func:`_split` of ``a`` into ``hi`` and ``lo``."""
    np.multiply(_SPLIT, a, out=hi)  # c
    np.subtract(hi, a, out=lo)  # c - a
    np.subtract(hi, lo, out=hi)  # c - (c - a)
    np.subtract(a, hi, out=lo)


def _recombine_into(out, op, values, other_split, row, t, cm, tail, free) -> None:
    """One side of step 4 of :func:`_block`: ``op`` is ``np.add`` for sin and ``np.subtract`` for cos.

    With ``(lead, lead_lo, other, other_lo)`` = ``(sa, sa_lo, ca, ca_lo)`` for sin and
    ``(ca, ca_lo, sa, sa_lo)`` for cos, ``prod = other th`` and ``(s, e) = TwoSum(lead, +-prod)``:
    ``out = s + ((((e op TwoProductError(prod, other_hl[row], thhl)) + lead_lo) + lead cm)
    op (other tail + other_lo th))``. ``free`` holds seven scratch arrays.
    """
    lead, lead_lo, other, other_lo = values
    th, thh, thl = t
    prod_b, neg_b, s_b, e_b, t_b, h_b, l_b = free
    prod = np.multiply(other, th, out=prod_b)
    _two_sum_into(s_b, e_b, t_b, lead, prod if op is np.add else np.negative(prod, out=neg_b))
    tab_h, tab_l = other_split
    hi, lo = np.take(tab_h, row, out=h_b, mode="wrap"), np.take(tab_l, row, out=l_b, mode="wrap")
    x = _two_product_error_into(neg_b, t_b, prod, hi, lo, thh, thl)
    op(e_b, x, out=x)
    np.add(x, lead_lo, out=x)
    np.add(x, np.multiply(lead, cm, out=t_b), out=x)
    y = np.multiply(other, tail, out=e_b)
    np.add(y, np.multiply(other_lo, th, out=t_b), out=y)
    op(x, y, out=x)
    np.add(s_b, x, out=out)


def _block(
    m, mh, ml, theta, w1, w1h, w1l, w2, w2h, w2l, w3, out_cos, out_sin, scratch: _Scratch,
    whole: _WholePositions | None = None,
) -> None:
    """cos and sin of ``m * (w1 + w2 + w3) * pi/2`` for one block (inputs broadcast to the outputs).

    The arithmetic is exactly that of the formulas in the comments, operation by operation, each one
    written into a preallocated array of ``scratch``. ``whole``: step 1 for positions that split exactly
    (:class:`_WholePositions`; the same bits with fewer operations).
    """
    half_pi, sin_hi, sin_lo, cos_hi, cos_lo, sin_h, sin_l, cos_h, cos_l = _constants()
    (p, pe, q, qe, k, a0, a1, a2, a3, a4, a5, a6, a7, a8, a9, a10), row = scratch.views(out_cos.shape)
    # 1. u = m * w in quarter turns: exact products of the two leading parts, a rounded third.
    #    p = m w1, pe = TwoProductError(p), q = m w2, qe = TwoProductError(q), k = rint(p), f0 = p - k.
    if whole is None:
        np.multiply(m, w1, out=p)
        tiny = np.less(np.abs(p, out=a0), _TINY, out=scratch.tiny(out_cos.shape))  # see step 5
        _two_product_error_into(pe, a0, p, mh, ml, w1h, w1l)
        np.multiply(m, w2, out=q)
        _two_product_error_into(qe, a0, q, mh, ml, w2h, w2l)
        m_dense, w3_dense = m, w3
    else:
        tiny, m_dense, w3_dense = whole.products(
            m, w1, w1h, w1l, w2, w2h, w2l, w3, p, pe, q, qe, a0, scratch.tiny(out_cos.shape)
        )
    any_tiny = tiny is not None and bool(tiny.any())
    np.rint(p, out=k)
    f0 = np.subtract(p, k, out=a1)  # exact: k is the integer nearest p
    s1, e1 = a2, a3
    _two_sum_into(s1, e1, a0, f0, q)
    s2, e2 = a1, a4  # f0 is dead
    _two_sum_into(s2, e2, a0, s1, pe)
    # lo = ((e1 + e2) + qe) + m * w3
    lo = np.add(e1, e2, out=a2)
    np.add(lo, qe, out=lo)
    np.add(lo, np.multiply(m_dense, w3_dense, out=a0), out=lo)
    # fh, fl = FastTwoSum(s2, lo): fh = s2 + lo, fl = lo - (fh - s2)
    fh, fl = a3, a4
    np.add(s2, lo, out=fh)
    np.subtract(fh, s2, out=fl)
    np.subtract(lo, fl, out=fl)
    # 2. table row and the remainder tau in quarter turns (fh - j/128 is exact):
    #    j = rint(fh * 128), tau = fh - j * (1/128).
    j = np.multiply(fh, _TABLE_STEPS, out=q)
    np.rint(j, out=j)
    tau = np.multiply(j, 1.0 / _TABLE_STEPS, out=a1)
    np.subtract(fh, tau, out=tau)
    # t = tau * pi/2 as a double-double (th, tl):
    #   th = tau * p1, tl = TwoProductError(th, split(tau), split(p1)) + (tau * p2 + fl * p1).
    th = np.multiply(tau, half_pi[0], out=a2)
    tauh, taul = a0, a5
    _split_into(tauh, taul, tau)
    tl = _two_product_error_into(a6, a3, th, tauh, taul, half_pi[2], half_pi[3])
    np.multiply(tau, half_pi[1], out=a0)
    np.multiply(fl, half_pi[0], out=a5)
    np.add(a0, a5, out=a0)
    np.add(tl, a0, out=tl)
    # (th, tl) = FastTwoSum(th, tl)
    np.add(th, tl, out=a0)
    np.subtract(a0, th, out=a5)
    np.subtract(tl, a5, out=tl)
    th = a0
    # 3. polynomials: sm = sin t - t, cm = cos t - 1 (the -th*tl term carries tl to first order).
    #    sm = (th t2)(S3 + t2 (S5 + t2 S7)), cm = t2 (C2 + t2 (C4 + t2 (C6 + t2 C8))) - th tl.
    t2 = np.multiply(th, th, out=a1)
    sm = np.multiply(t2, _S7, out=a2)
    np.add(_S5, sm, out=sm)
    np.multiply(t2, sm, out=sm)
    np.add(_S3, sm, out=sm)
    np.multiply(np.multiply(th, t2, out=a3), sm, out=sm)
    cm = np.multiply(t2, _C8, out=a3)
    np.add(_C6, cm, out=cm)
    np.multiply(t2, cm, out=cm)
    np.add(_C4, cm, out=cm)
    np.multiply(t2, cm, out=cm)
    np.add(_C2, cm, out=cm)
    np.multiply(t2, cm, out=cm)
    np.subtract(cm, np.multiply(th, tl, out=a4), out=cm)
    tail = np.add(tl, sm, out=a6)  # sin t = th + tail
    # 4. with a = J pi/256, J = j + 128 (k mod 4) (the quadrant folded into the table row):
    #    sin(a + t) = S + C t + S (cos t - 1) + C (sin t - t),
    #    cos(a + t) = C - S t + C (cos t - 1) - S (sin t - t); the products C t and S t are exact.
    #    quadrant = k - 4 floor(k / 4); row = (j + 128 quadrant) + pad (an index: exact either way).
    quadrant = np.multiply(k, 0.25, out=a1)
    np.floor(quadrant, out=quadrant)
    np.multiply(4.0, quadrant, out=quadrant)
    np.subtract(k, quadrant, out=quadrant)
    np.multiply(quadrant, _TABLE_STEPS, out=quadrant)
    np.add(j, quadrant, out=quadrant)
    np.copyto(row, quadrant, casting="unsafe")
    np.add(row, _TABLE_PAD, out=row)
    # Look-ups as NumPy indexing does them: a row past the end raises IndexError, a negative one wraps.
    # (Neither happens for |m| <= 2**40 and theta <= 1, where |j| <= 64; larger theta can get there.)
    if row.max() >= sin_hi.size:
        sin_hi[row]  # raises the IndexError that indexing raised before
    sa, sa_lo, ca, ca_lo = (np.take(t, row, out=o, mode="wrap") for t, o in
                            ((sin_hi, a2), (sin_lo, a5), (cos_hi, a7), (cos_lo, a8)))
    thh, thl = a1, a9
    _split_into(thh, thl, th)
    # sin: a = ca th; (s, se) = TwoSum(sa, a);
    #      out_sin = s + ((((se + TwoProductError(a, cos_hl[row], thhl)) + sa_lo) + sa cm)
    #                     + (ca tail + ca_lo th))
    # cos: b = sa th; (c, ce) = TwoSum(ca, -b);
    #      out_cos = c + ((((ce - TwoProductError(b, sin_hl[row], thhl)) + ca_lo) + ca cm)
    #                     - (sa tail + sa_lo th))
    t, free = (th, thh, thl), (p, a4, qe, a10, k, q, pe)
    _recombine_into(out_sin, np.add, (sa, sa_lo, ca, ca_lo), (cos_h, cos_l), row, t, cm, tail, free)
    _recombine_into(out_cos, np.subtract, (ca, ca_lo, sa, sa_lo), (sin_h, sin_l), row, t, cm, tail, free)
    # 5. tiny angles (zero included): Dekker's products would underflow. There cos = 1 and sin is the
    #    product rounded once (|x**3 / 6| is far below half an ulp of x), with the sign of a zero kept.
    if any_tiny:
        np.copyto(out_sin, m * theta, where=tiny)
        np.copyto(out_cos, 1.0, where=tiny)


def cos_sin_of_product(m, theta) -> tuple[np.ndarray, np.ndarray]:
    """``(cos(m * theta), sin(m * theta))`` of the exact real product, broadcast elementwise, float64.

    ``m`` and ``theta`` are float64 arrays (or scalars) that broadcast together; both must be finite
    and ``|m * theta| <= ANGLE_LIMIT``. Returns two new arrays of the broadcast shape.
    """
    m = np.asarray(m, dtype=np.float64)
    theta = np.asarray(theta, dtype=np.float64)
    shape = np.broadcast_shapes(m.shape, theta.shape)
    check_angle_range(m, theta)
    cos = np.empty(shape, dtype=np.float64)
    sin = np.empty(shape, dtype=np.float64)
    if cos.size == 0:
        return cos, sin
    w1, w2, w3 = _theta_parts(theta)
    ndim = len(shape)
    m = m.reshape((1,) * (ndim - m.ndim) + m.shape)
    w1, w2, w3 = (w.reshape((1,) * (ndim - w.ndim) + w.shape) for w in (w1, w2, w3))
    mh, ml = _split(m)
    w1h, w1l = _split(w1)
    w2h, w2l = _split(w2)
    theta = theta.reshape((1,) * (ndim - theta.ndim) + theta.shape)
    inputs = (m, mh, ml, theta, w1, w1h, w1l, w2, w2h, w2l, w3)
    if ndim == 0:
        _block(*inputs, cos, sin, _Scratch(1))
        return cos, sin
    # Block over the longest axis; inputs that broadcast along it are passed whole.
    axis = int(np.argmax(shape))
    step = max(1, _BLOCK * shape[axis] // cos.size)
    size = min(step, shape[axis]) * (cos.size // shape[axis])
    scratch = _Scratch(size)
    w_parts = (w1, w1h, w1l, w2, w2h, w2l, w3)
    whole = _WholePositions(m, w_parts, axis, size) if _WholePositions.applies(ml, theta) else None
    for start in range(0, shape[axis], step):
        sl = (slice(None),) * axis + (slice(start, start + step),)
        parts = [a if a.shape[axis] == 1 else a[sl] for a in inputs]
        _block(*parts, cos[sl], sin[sl], scratch, whole)
    return cos, sin
