"""cos and sin of the exact angle m * theta: within 1 ulp of mpmath, and almost always correctly rounded.

The reference is mpmath's cos/sin of the exact product ``mpf(m) * mpf(theta)`` at 300 bits, rounded
to float64. ``benchmarks/measure_trig_accuracy.py`` measures 10^6 pairs (figures in ``docs/spec.md``);
this file pins a smaller sample and the hard cases.
"""

from __future__ import annotations

from fractions import Fraction

import mpmath
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import rope_ref
from rope_ref import _exact_trig
from rope_ref._arrays import POSITION_LIMIT
from rope_ref._exact_trig import ANGLE_LIMIT, cos_sin_of_product

MP = mpmath.MPContext()
MP.prec = 300
THETAS = np.concatenate(
    [rope_ref.default_inv_freq(b, d) for b in (1e4, 5e5, 1e6, 1e7, 12.5e6) for d in (64, 96, 128, 256)]
)


def _reference(m: float, theta: float) -> tuple:
    angle = MP.mpf(m) * MP.mpf(theta)
    return MP.cos(angle), MP.sin(angle)


def _ulp_error(got: float, exact) -> float:
    """|got - exact| in units of the ulp of the correctly rounded value."""
    rounded = float(exact)
    if rounded == 0.0:
        return 0.0 if got == 0.0 else float("inf")
    return float(abs(MP.mpf(got) - exact) / MP.mpf(np.spacing(abs(rounded))))


def _check(m: np.ndarray, theta: np.ndarray) -> tuple[int, int, float]:
    """(values, values not correctly rounded, worst error in ulp) of the kernel on these pairs."""
    cos, sin = cos_sin_of_product(m, theta)
    missed, worst = 0, 0.0
    for i in range(m.size):
        for got, exact in zip((cos[i], sin[i]), _reference(float(m[i]), float(theta[i])), strict=True):
            if got != float(exact):
                missed += 1
            worst = max(worst, _ulp_error(float(got), exact))
    return 2 * m.size, missed, worst


def _log_uniform_positions(rng: np.random.Generator, n: int) -> np.ndarray:
    m = np.exp(rng.uniform(0.0, np.log(float(POSITION_LIMIT)), n))
    m = np.where(rng.random(n) < 0.4, np.round(m), m)  # integers and fractions
    return np.where(rng.random(n) < 0.3, -m, m)  # negative positions (KV-cache shifts)


def test_random_sample_within_one_ulp_and_correctly_rounded():
    rng = np.random.default_rng(20261122)
    m = _log_uniform_positions(rng, 4000)
    theta = THETAS[rng.integers(0, THETAS.size, m.size)]
    values, missed, worst = _check(m, theta)
    assert worst < 1.0, worst
    assert missed <= values // 1000, (missed, values)  # the goal: >= 99.9% correctly rounded


def test_small_integer_positions_every_pair_of_a_real_table():
    theta = rope_ref.default_inv_freq(500000.0, 128)
    m = np.repeat(np.arange(0.0, 4097.0, 97.0), theta.size)
    values, missed, worst = _check(m, np.tile(theta, m.size // theta.size))
    assert worst < 1.0 and missed <= values // 1000


def _pi_half_convergents(limit: float) -> list[int]:
    """Numerators p of continued-fraction convergents p/q of pi/2: integers closest to multiples of pi/2."""
    x, h0, h1, k0, k1 = MP.pi / 2, 0, 1, 1, 0
    out = []
    while True:
        a = int(MP.floor(x))
        h0, h1 = h1, a * h1 + h0
        k0, k1 = k1, a * k1 + k0
        if h1 > limit:
            return out
        out.append(h1)
        x = 1 / (x - a)


def test_angles_nearest_to_multiples_of_half_pi():
    # Integer angles m * 1.0 closest to k pi / 2: cos or sin is tiny there, so the reduction must keep
    # the reduced argument's relative accuracy (absolute error far below 2**-100).
    m = np.array([float(p) for p in _pi_half_convergents(float(POSITION_LIMIT))] * 2)
    m[len(m) // 2 :] *= -1
    values, missed, worst = _check(m, np.ones_like(m))
    assert worst < 1.0 and missed == 0, (worst, missed)


@given(
    m=st.floats(-float(POSITION_LIMIT), float(POSITION_LIMIT), allow_nan=False),
    theta=st.sampled_from(THETAS.tolist()),
)
def test_any_position_and_table_entry(m, theta):
    values, missed, worst = _check(np.array([m]), np.array([theta]))
    assert worst < 1.0


def test_exact_special_values_and_symmetry():
    cos, sin = cos_sin_of_product(np.array([0.0, 1.0, -1.0]), 0.5)
    assert cos[0] == 1.0 and sin[0] == 0.0
    assert cos[1] == cos[2] and sin[1] == -sin[2]  # even and odd, bit for bit
    c, s = cos_sin_of_product(np.arange(6.0)[:, None], np.array([1.0, 0.25]))
    assert c.shape == s.shape == (6, 2)


def test_angle_limit_is_enforced_with_its_value():
    with pytest.raises(ValueError, match=r"2\*\*48"):
        cos_sin_of_product(np.array([2.0**40]), np.array([2.0**9]))
    cos_sin_of_product(np.array([2.0**40]), np.array([2.0**8]))  # exactly at the limit: accepted
    assert ANGLE_LIMIT == 2.0**48


def test_cos_sin_error_is_position_independent():
    # The old oracle took cos/sin of fl(m theta), off by up to |m theta| * 2**-53: at m = 2**31 that is
    # ~2e-7. The new one is within an ulp of the exact angle's cos/sin at every position.
    cfg = rope_ref.RopeConfig(128, layout="half", base=10000.0)
    m = 2.0**31 + 0.5
    cos, sin = rope_ref.cos_sin(np.array([m]), cfg)
    theta = rope_ref.inv_freq(cfg)
    for i in (0, 1, 17, 63):
        c, s = _reference(m, float(theta[i]))
        assert _ulp_error(float(cos[0, i]), c) < 1.0 and _ulp_error(float(sin[0, i]), s) < 1.0


@pytest.mark.parametrize(("m", "theta"), [(-0.0, 0.5), (0.0, -0.25), (-3.0, 0.0), (-0.0, 0.0), (0.0, 0.0)])
def test_zero_angle_keeps_the_sign_of_its_zero(m, theta):
    """sin(+-0) = +-0 (IEEE-754 and mpmath): the zero product m * theta keeps its sign, cos is 1."""
    cos, sin = cos_sin_of_product(np.array([m]), np.array([theta]))
    negative = (m < 0 or np.signbit(m)) != (theta < 0 or np.signbit(theta))
    assert cos[0] == 1.0 and sin[0] == 0.0 and bool(np.signbit(sin[0])) == negative


def test_scalar_inputs_give_zero_dimensional_correctly_rounded_results():
    cos, sin = cos_sin_of_product(12345.678, 0.001)
    assert cos.shape == sin.shape == () and cos.dtype == sin.dtype == np.float64
    c, s = _reference(12345.678, 0.001)
    assert (float(cos), float(sin)) == (float(c), float(s))


@pytest.mark.parametrize("block", [1, 3, 5])
def test_blocks_of_any_size_give_the_same_bits(monkeypatch, block):
    """Blocking over the longest axis (7 rows, the last block partial) changes no bit of the answer."""
    from rope_ref import _exact_trig

    m = np.array([0.0, 1.0, -3.5, 1e6, 2.0**30 + 0.25, 17.0, -1e9])[:, None]
    theta = np.array([1.0, 0.0123, 1e-4])
    for a, b in ((m, theta), (theta[:, None], m[:, 0])):  # the longest axis first, then last
        whole = cos_sin_of_product(a, b)
        monkeypatch.setattr(_exact_trig, "_BLOCK", block)
        blocked = cos_sin_of_product(a, b)
        monkeypatch.undo()
        assert all(x.tobytes() == w.tobytes() for x, w in zip(blocked, whole, strict=True))
    for i in (1, 3, 4, 6):
        c, s = _reference(float(m[i, 0]), float(theta[1]))
        assert (blocked[0][1, i], blocked[1][1, i]) == (float(c), float(s))


def test_angle_check_at_the_helper_uses_magnitudes_and_skips_empty_inputs():
    from rope_ref._exact_trig import check_angle_range

    check_angle_range(np.array([-(2.0**40)]), np.array([-(2.0**8)]))  # exactly 2**48: accepted
    for m, theta in (([-(2.0**40)], [2.0**8 * (1 + 2**-52)]), ([2.0**40], [-(2.0**9)])):
        with pytest.raises(ValueError, match=r"reaches 2\.81475e\+14 rad|reaches 5\.6295e\+14 rad"):
            check_angle_range(np.array(m), np.array(theta))
    check_angle_range(np.array([]), np.array([1e300]))  # nothing to rotate
    check_angle_range(np.array([1e300]), np.empty(0))


def test_quarter_turns_split_two_over_pi_times_theta_into_three_parts():
    from rope_ref._exact_trig import _quarter_turns

    for theta in (1.0, 0.1, 1e-4, 3.0e5):
        w = _quarter_turns(theta)
        exact = MP.mpf(theta) * 2 / MP.pi
        assert abs(w[1]) <= np.spacing(abs(w[0])) and abs(w[2]) <= np.spacing(abs(w[1]))
        assert abs(MP.mpf(w[0]) + MP.mpf(w[1]) + MP.mpf(w[2]) - exact) <= abs(exact) * MP.mpf(2) ** -155


def test_a_table_row_past_the_end_raises_at_the_block():
    """Inputs no position reaches (a reduced fraction near 0.85 in quadrant 3 -> row 558 of 515):
    the block refuses rather than wrapping round the table."""
    from rope_ref import _exact_trig

    one = np.ones(1)
    w1, w2 = np.array([3.25]), np.array([0.6])  # k = 3, f = 0.85
    parts = (one, one, 0 * one, one, w1, *_exact_trig._split(w1), w2, *_exact_trig._split(w2), 0 * one)
    with pytest.raises(IndexError):
        _exact_trig._block(*parts, np.empty(1), np.empty(1), _exact_trig._Scratch(1))
    ok = (one, one, 0 * one, one, np.array([3.125]), *_exact_trig._split(np.array([3.125])), 0 * one,
          0 * one, 0 * one, 0 * one)  # 3.125 quarter turns: cos, sin of 3.125 pi / 2
    cos, sin = np.empty(1), np.empty(1)
    _exact_trig._block(*ok, cos, sin, _exact_trig._Scratch(1))
    assert (cos[0], sin[0]) == (float(MP.cospi(MP.mpf(3.125) / 2)), float(MP.sinpi(MP.mpf(3.125) / 2)))


@pytest.mark.parametrize(
    ("m", "theta"), [(1e-160, 1e-160), (2.0**-270, 3 * 2.0**-271), (-(2.0**-250), 2.0**-251)]
)
def test_tiny_angles_give_cos_one_and_the_product_rounded_once(m, theta):
    """Below 2**-500 quarter turns Dekker's products would underflow: sin is fl(m * theta), cos 1."""
    cos, sin = cos_sin_of_product(np.array([m, 1.0]), np.array([theta]))
    c, s = _reference(m, theta)
    assert (cos[0], sin[0]) == (float(c), float(s)) == (1.0, m * theta)
    c1, s1 = _reference(1.0, theta)
    assert (cos[1], sin[1]) == (float(c1), float(s1))


def test_polynomials_use_taylors_coefficients_up_to_the_documented_degrees():
    """sin t - t to degree 7 and cos t - 1 to degree 8 (module docstring, step 3): (-1)^k / n! rounded,
    the truncation below 2**-75 at |t| <= pi/512."""
    from math import factorial, pi

    from rope_ref import _exact_trig as et

    assert (et._S3, et._S5, et._S7) == tuple((-1) ** k / factorial(2 * k + 1) for k in (1, 2, 3))
    assert (et._C2, et._C4, et._C6, et._C8) == tuple((-1) ** k / factorial(2 * k) for k in (1, 2, 3, 4))
    t = pi / 512
    assert max(t**9 / factorial(9), t**10 / factorial(10)) < 2.0**-75 < t**8 / factorial(8)


# -- the error-free transformations, each at its helper (function form and in-place form) --------


def _significant_bits(x: float) -> int:
    """Bits from the leading to the trailing one of |x| (0 for zero)."""
    if x == 0.0:
        return 0
    top = Fraction(abs(x)).numerator  # x in lowest terms: the numerator holds its significant bits
    return top.bit_length() - (top & -top).bit_length() + 1


def _eft_inputs(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Random magnitudes over 40 binades of either sign, and mantissas next to 1, 1 + 2**-27 and 2."""
    rng = np.random.default_rng(seed)
    a = rng.uniform(1.0, 2.0, 600) * 2.0 ** rng.integers(-20, 20, 600) * rng.choice([-1.0, 1.0], 600)
    near = np.concatenate([c + np.arange(-50, 50) * 2.0**-52 for c in (1.0, 1.0 + 2.0**-27, 2.0 - 2.0**-40)])
    a = np.concatenate([a, near, [0.0, -0.0, 3.0, 2.0**-30]])
    return a, rng.permutation(a) * rng.uniform(0.5, 4.0, a.size)


def _in_place(helper, n_out: int, n_scratch: int):
    """The ``*_into`` helper as a function returning its outputs (fresh output and scratch arrays)."""

    def run(*args):
        outs = [np.empty_like(args[0]) for _ in range(n_out + n_scratch)]
        helper(*outs, *args)
        return tuple(outs[:n_out])

    return run


@pytest.mark.parametrize(
    "split", [_exact_trig._split, _in_place(_exact_trig._split_into, 2, 0)], ids=["split", "split_into"]
)
def test_veltkamp_split_gives_two_halves_of_at_most_26_bits(split):
    """a = hi + lo exactly, each with at most 26 significant bits (53 = 27 + 26, Dekker 1971), so every
    product of two halves is exact in float64."""
    a, _ = _eft_inputs(31)
    hi, lo = split(a)
    for x, h, l in zip(a.tolist(), hi.tolist(), lo.tolist(), strict=True):
        assert Fraction(h) + Fraction(l) == Fraction(x), x
        assert _significant_bits(h) <= 26 and _significant_bits(l) <= 26, (x, h, l)


@pytest.mark.parametrize(
    "two_sum", [_exact_trig._two_sum, _in_place(_exact_trig._two_sum_into, 2, 1)], ids=["two_sum", "into"]
)
def test_two_sum_is_the_rounded_sum_and_its_exact_error(two_sum):
    a, b = _eft_inputs(32)
    s, e = two_sum(a, b)
    assert np.array_equal(s, a + b)
    for x, y, got_s, got_e in zip(a.tolist(), b.tolist(), s.tolist(), e.tolist(), strict=True):
        assert Fraction(got_s) + Fraction(got_e) == Fraction(x) + Fraction(y), (x, y)
    # FastTwoSum: exact when |a| >= |b|
    big, small = np.maximum(np.abs(a), np.abs(b)) * np.sign(a), np.minimum(np.abs(a), np.abs(b))
    s, e = _exact_trig._fast_two_sum(big, small)
    for x, y, got_s, got_e in zip(big.tolist(), small.tolist(), s.tolist(), e.tolist(), strict=True):
        assert got_s == x + y and Fraction(got_s) + Fraction(got_e) == Fraction(x) + Fraction(y), (x, y)


@pytest.mark.parametrize(
    "error",
    [_exact_trig._two_product_error, _in_place(_exact_trig._two_product_error_into, 1, 1)],
    ids=["two_product_error", "into"],
)
def test_two_product_error_is_the_exact_rounding_error_of_the_product(error):
    a, b = _eft_inputs(33)
    p = a * b
    (ah, al), (bh, bl) = _exact_trig._split(a), _exact_trig._split(b)
    got = error(p, ah, al, bh, bl)
    got = got[0] if isinstance(got, tuple) else got
    for x, y, q, err in zip(a.tolist(), b.tolist(), p.tolist(), got.tolist(), strict=True):
        assert Fraction(err) == Fraction(x) * Fraction(y) - Fraction(q), (x, y)
