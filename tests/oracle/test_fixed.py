"""The CPU-independent reductions and exp of the oracle (rope_ref._fixed), at the helpers themselves.

The summation order is the documented pairwise tree (element i + h added to element i, h = ceil(n/2)),
checked on inputs where every other order gives another float; exp is checked against mpmath; the
Irwin-Hall draw against twelve uniforms added by hand.
"""

from __future__ import annotations

import mpmath
import numpy as np
import pytest

from rope_ref._fixed import IRWIN_HALL_TERMS, exp_basic, fixed_dot, fixed_sum, fixed_sum_in_place, irwin_hall


def _in_place_on_a_copy(a, axis=-1):
    return fixed_sum_in_place(np.array(a, dtype=np.float64), axis)


#: Both forms of the tree: the one that leaves its input alone and the one that works in it.
SUMS = pytest.mark.parametrize("sum_", [fixed_sum, _in_place_on_a_copy], ids=["fixed_sum", "in_place"])


@SUMS
def test_odd_length_sum_follows_the_tree_not_left_to_right(sum_):
    # n = 3: h = 2 gives [a + c, b], then (a + c) + b = 1; left to right (a + b) + c = 0 (1e16 + 1 rounds).
    assert sum_(np.array([1e16, 1.0, -1e16])) == 1.0
    # n = 5: h = 3 gives [x0 + x3, x1 + x4, x2]; then h = 2: [(x0 + x3) + x2, x1 + x4]; then their sum.
    x = np.array([1e16, 3.0, 1.0, -1e16, -1.0])
    assert sum_(x) == ((1e16 + -1e16) + 1.0) + (3.0 + -1.0) == 3.0
    assert sum_(np.array([2.5])) == 2.5
    assert fixed_dot(np.array([1e16, 1.0, -1e16]), np.ones(3)) == 1.0


def test_the_in_place_sum_works_in_its_input_without_copies():
    a = np.array([[1e16, 2.0], [1.0, 3.0], [-1e16, 4.0]])
    got = fixed_sum_in_place(a, axis=0)
    assert np.shares_memory(got, a)  # the result is row 0 of the work array
    np.testing.assert_array_equal(got, [1.0, 9.0])
    np.testing.assert_array_equal(a[1], [1.0, 3.0])  # rows past the first level's head are not touched


def test_sum_runs_over_the_given_axis_and_leaves_the_input_alone():
    a = np.array([[1e16, 2.0, 5.0], [1.0, 3.0, 7.0], [-1e16, 4.0, 11.0]])
    before = a.copy()
    np.testing.assert_array_equal(fixed_sum(a, axis=0), [1.0, 9.0, 23.0])
    np.testing.assert_array_equal(fixed_sum(a, axis=1), [1e16 + 5.0 + 2.0, 11.0, -1e16 + 11.0 + 4.0])
    np.testing.assert_array_equal(a, before)
    empty = fixed_sum(np.zeros((4, 0)), axis=-1)
    assert empty.shape == (4,) and not empty.any()


@SUMS
@pytest.mark.parametrize("axis", [1, -2])
def test_sum_over_a_middle_axis_follows_the_tree_in_every_lane(sum_, axis):
    # Lane (i, j) holds [1e16, 1, -1e16] scaled by (i + 1) and shifted by j along axis 1: the tree gives
    # (1e16 + -1e16) + 1 = 1 per unit of scale, left to right would give 0.
    base = np.array([1e16, 1.0, -1e16])
    a = np.stack([np.stack([base * (i + 1) + 0.0 * j for j in range(4)], axis=-1) for i in range(2)])
    assert a.shape == (2, 3, 4)
    np.testing.assert_array_equal(sum_(a, axis=axis), [[1.0] * 4, [2.0] * 4])
    empty = sum_(np.zeros((2, 0, 5)), axis=axis)
    assert empty.shape == (2, 5) and not empty.any()


@SUMS
@pytest.mark.parametrize("axis", [2, -3])
def test_an_axis_out_of_range_raises_numpys_axis_error(sum_, axis):  # AxisError is an IndexError
    with pytest.raises(IndexError, match=f"axis {axis} is out of bounds for array of dimension 2"):
        sum_(np.ones((3, 4)), axis=axis)


@pytest.mark.parametrize("x", [-745.0, -700.5, -30.25, -1.0, -1e-8, 0.0, 0.3465, 1.0, 10.0, 345.6, 709.7])
def test_exp_basic_is_within_a_few_ulp_of_mpmath(x):
    with mpmath.workdps(40):
        want = float(mpmath.exp(mpmath.mpf(x)))
    got = float(exp_basic(np.array([x]))[0])
    assert abs(got - want) <= 4 * np.spacing(want)


def test_exp_basic_ends_of_the_range():
    out = exp_basic(np.array([-np.inf, -746.5, -1e5, np.nan, 710.0, np.inf]))
    assert out[:3].tolist() == [0.0, 0.0, 0.0]
    assert np.isnan(out[3]) and out[4] == np.inf and out[5] == np.inf


def test_irwin_hall_is_twelve_uniforms_added_in_order():
    assert IRWIN_HALL_TERMS == 12
    got = irwin_hall(np.random.default_rng(5), (3, 4))
    rng = np.random.default_rng(5)
    total = np.zeros((3, 4))
    for _ in range(12):
        total += rng.random((3, 4))
    np.testing.assert_array_equal(got, total - 6.0)
