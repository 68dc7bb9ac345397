"""The exact trig kernel's preallocated-scratch form computes the formulas' operations, in order.

``rope_ref._exact_trig._block`` writes every intermediate into preallocated arrays (``out=``), which made
it about twice as fast. ``_reference_block`` below is the kernel as it was written before, with NumPy
temporaries: the two must agree bit for bit on every input, at every block size, including signed zeros,
tiny and huge angles and the rows where the table look-up wraps. The families named ``whole-*`` take the
shorter step 1 for positions whose Veltkamp low half is zero (``_WholePositions``), which the reference
does not have.
"""

from __future__ import annotations

import numpy as np
import pytest

from rope_ref import _exact_trig as et


def _reference_block(m, mh, ml, theta, w1, w1h, w1l, w2, w2h, w2l, w3, out_cos, out_sin) -> None:
    """cos and sin of ``m * (w1 + w2 + w3) * pi/2`` for one block (inputs broadcast to the outputs)."""
    half_pi, sin_hi, sin_lo, cos_hi, cos_lo, sin_h, sin_l, cos_h, cos_l = et._constants()
    # 1. u = m * w in quarter turns: exact products of the two leading parts, a rounded third.
    p = m * w1
    pe = et._two_product_error(p, mh, ml, w1h, w1l)
    q = m * w2
    qe = et._two_product_error(q, mh, ml, w2h, w2l)
    k = np.rint(p)
    f0 = p - k  # exact: k is the integer nearest p
    s1, e1 = et._two_sum(f0, q)
    s2, e2 = et._two_sum(s1, pe)
    lo = ((e1 + e2) + qe) + m * w3
    fh, fl = et._fast_two_sum(s2, lo)
    # 2. table row and the remainder tau in quarter turns (fh - j/128 is exact).
    j = np.rint(fh * et._TABLE_STEPS)
    tau = fh - j * (1.0 / et._TABLE_STEPS)
    # t = tau * pi/2 as a double-double (th, tl).
    th = tau * half_pi[0]
    tauh, taul = et._split(tau)
    tl = et._two_product_error(th, tauh, taul, half_pi[2], half_pi[3]) + (tau * half_pi[1] + fl * half_pi[0])
    th, tl = et._fast_two_sum(th, tl)
    # 3. polynomials: sm = sin t - t, cm = cos t - 1 (the -th*tl term carries tl to first order).
    t2 = th * th
    sm = (th * t2) * (et._S3 + t2 * (et._S5 + t2 * et._S7))
    cm = t2 * (et._C2 + t2 * (et._C4 + t2 * (et._C6 + t2 * et._C8))) - th * tl
    tail = tl + sm  # sin t = th + tail
    # 4. with a = J pi/256, J = j + 128 (k mod 4) (the quadrant folded into the table row):
    #    sin(a + t) = S + C t + S (cos t - 1) + C (sin t - t),
    #    cos(a + t) = C - S t + C (cos t - 1) - S (sin t - t); the products C t and S t are exact.
    quadrant = k - 4.0 * np.floor(k * 0.25)
    row = (j + quadrant * et._TABLE_STEPS).astype(np.intp) + et._TABLE_PAD
    sa, sa_lo, ca, ca_lo = sin_hi[row], sin_lo[row], cos_hi[row], cos_lo[row]
    thh, thl = et._split(th)
    a = ca * th
    s, se = et._two_sum(sa, a)
    np.add(
        s,
        (((se + et._two_product_error(a, cos_h[row], cos_l[row], thh, thl)) + sa_lo) + sa * cm)
        + (ca * tail + ca_lo * th),
        out=out_sin,
    )
    b = sa * th
    c, ce = et._two_sum(ca, -b)
    np.add(
        c,
        (((ce - et._two_product_error(b, sin_h[row], sin_l[row], thh, thl)) + ca_lo) + ca * cm)
        - (sa * tail + sa_lo * th),
        out=out_cos,
    )
    # 6. tiny angles (zero included): Dekker's products would underflow. There cos = 1 and sin is the
    #    product rounded once (|x**3 / 6| is far below half an ulp of x), with the sign of a zero kept.
    tiny = np.abs(p) < et._TINY
    if tiny.any():
        np.copyto(out_sin, m * theta, where=tiny)
        np.copyto(out_cos, 1.0, where=tiny)




def _reference(m, theta):
    """cos and sin of ``m * theta`` by ``_reference_block`` on the whole broadcast shape at once."""
    m = np.asarray(m, dtype=np.float64)
    theta = np.asarray(theta, dtype=np.float64)
    shape = np.broadcast_shapes(m.shape, theta.shape)
    w1, w2, w3 = et._theta_parts(theta)
    mh, ml = et._split(m)
    w1h, w1l = et._split(w1)
    w2h, w2l = et._split(w2)
    cos, sin = np.empty(shape), np.empty(shape)
    _reference_block(m, mh, ml, theta, w1, w1h, w1l, w2, w2h, w2l, w3, cos, sin)
    return cos, sin


_RNG = np.random.default_rng(2026)
_THETA = 10000.0 ** (-np.arange(64) / 64)
CASES = {
    "arange": (np.arange(3000.0)[:, None], _THETA),
    "negative-fractional": (np.arange(-1500.0, 1500.0, 0.37)[:, None], _THETA),
    "normal-1e6": (_RNG.standard_normal((500, 1)) * 1e6, _THETA),
    "zeros-tiny-limit": (
        np.array([0.0, -0.0, 1e-300, -1e-300, 5e-324, 2.0**40, -(2.0**40), 1.0, 3.0])[:, None],
        _THETA,
    ),
    "huge-angles": (_RNG.uniform(-(2.0**40), 2.0**40, (200, 1)), _RNG.uniform(0, 2.0**8, 40)),
    "tiny-both": (_RNG.standard_normal((40, 1)) * 1e-160, _RNG.standard_normal(30) * 1e-160),
    "integers-3d": (_RNG.integers(-(2**30), 2**30, (100, 3, 1)).astype(np.float64), _RNG.uniform(-3, 3, 17)),
    "scalar": (np.float64(12345.678), np.float64(0.001)),
    "vector-scalar": (np.arange(7.0), 0.5),
    "long-last-axis": (np.arange(3.0)[:, None, None], _RNG.uniform(0, 1, (1, 5000, 2))),
    "wide-first-axis": (_RNG.uniform(-1e4, 1e4, (1, 9000)), _RNG.uniform(0, 1, (3, 1))),
    "whole-signed-zeros": (np.concatenate([[-0.0, 0.0], np.arange(-3000.0, 3000.0)])[:, None], _THETA),
    "whole-up-to-2**26": (
        np.concatenate([[2.0**26 - 1, -(2.0**26 - 1), 2.0**26, 3 * 2.0**30],
                        _RNG.integers(-(2**26), 2**26, 500)]).astype(np.float64)[:, None],
        _RNG.uniform(0, 2, 33),
    ),
    "whole-zero-theta": (np.arange(-40.0, 41.0)[:, None], np.array([0.0, -0.0, 0.5, -1.25, 3.0])),
    "whole-tiny-products": (np.arange(-20.0, 2000.0, 7.0)[:, None], np.array([1e-300, 5e-324, 2e-152, 1e-3])),
    "whole-theta-along-blocks": (np.arange(-2.0, 3.0)[:, None, None], _RNG.uniform(-1, 1, (1, 5000, 2))),
    "whole-positions-along-blocks": (_RNG.integers(-(10**6), 10**6, (1, 9000)).astype(np.float64),
                                     _RNG.uniform(0, 1, (3, 1))),
}
#: Families whose every position splits exactly: the shorter step 1 must run for them.
WHOLE = [case for case in CASES if case.startswith("whole-")]


@pytest.mark.parametrize("block", [1, 100, 4096, 1 << 14, 1 << 20])
@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.slow
def test_scratch_kernel_equals_the_formulas_with_temporaries(monkeypatch, case, block):
    monkeypatch.setattr(et, "_BLOCK", block)
    m, theta = CASES[case]
    got = et.cos_sin_of_product(m, theta)
    want = _reference(m, theta)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape and g.tobytes() == w.tobytes(), case


@pytest.mark.parametrize("case", WHOLE)
def test_shorter_step_equals_the_formulas_at_the_default_block(case):
    """The quick run's check of the ``whole-*`` families (the sweep over block sizes above is slow)."""
    m, theta = CASES[case]
    for got, want in zip(et.cos_sin_of_product(m, theta), _reference(m, theta), strict=True):
        assert got.shape == want.shape and got.tobytes() == want.tobytes(), case


@pytest.mark.parametrize("case", [*WHOLE, "arange", "negative-fractional", "integers-3d"])
def test_the_shorter_step_runs_exactly_for_positions_that_split_exactly(monkeypatch, case):
    """The ``whole-*`` families (and ``arange``) take ``_WholePositions``; fractional positions and
    integers of 27 bits or more (``integers-3d`` reaches 2**30) keep the general step 1."""
    calls = []
    real = et._WholePositions.products

    def spy(self, *args):
        calls.append(args[0].shape)
        return real(self, *args)

    monkeypatch.setattr(et._WholePositions, "products", spy)
    et.cos_sin_of_product(*CASES[case])
    assert bool(calls) == (case in (*WHOLE, "arange")), case


def test_a_table_row_past_the_end_raises_as_indexing_did():
    """``theta`` far above 1 with the largest positions can push the table row past the end; the reference
    (NumPy indexing) raises IndexError there, and so must the scratch kernel (it never wraps upward)."""
    m = _RNG.uniform(-(2.0**40), 2.0**40, (4000, 1))
    theta = _RNG.uniform(100.0, 2.0**8, 64)
    try:
        want = _reference(m, theta)
    except IndexError:
        with pytest.raises(IndexError):
            et.cos_sin_of_product(m, theta)
    else:
        got = et.cos_sin_of_product(m, theta)
        assert all(g.tobytes() == w.tobytes() for g, w in zip(got, want, strict=True))
