"""The shared input rules of the oracle (rope_ref._arrays), each checked at its helper with the bad input."""

from __future__ import annotations

import legacy_numpy
import numpy as np
import pytest

from rope_ref._arrays import (
    POSITION_LIMIT,
    as_float64,
    as_positions,
    check_broadcast_shape,
    check_input_ids,
    check_int,
    check_real,
    to_numpy,
)


def test_to_numpy_refuses_masked_arrays_matrices_strings_and_none():
    with pytest.raises(TypeError, match="x is a masked array"):
        to_numpy(np.ma.masked_array([1.0, 2.0], mask=[0, 1]), "x")
    with pytest.raises(TypeError, match="x is a np.matrix"):
        to_numpy(legacy_numpy.matrix([[1.0]]), "x")
    for bad in ("1.0", b"1", None):
        with pytest.raises(TypeError, match="x must be a numeric array, got"):
            to_numpy(bad, "x")
    arr = np.ones(3)
    assert to_numpy(arr, "x") is arr


def test_as_float64_takes_real_floats_only_and_converts_exactly():
    got = as_float64(np.array([0.1, 3.0], dtype=np.float32), "x")
    assert got.dtype == np.float64 and got.tolist() == [float(np.float32(0.1)), 3.0]
    assert as_float64(np.array([1.5], dtype=np.float16), "x").dtype == np.float64
    for bad in (np.array([1, 2]), np.array([True]), np.array([1j])):
        with pytest.raises(TypeError, match="x must be a real floating-point array"):
            as_float64(bad, "x")
    if np.dtype(np.longdouble).itemsize > 8:
        with pytest.raises(TypeError, match="float64 cannot hold exactly"):
            as_float64(np.array([1.0], dtype=np.longdouble), "x")


def test_as_positions_limits_both_signs_inclusive_for_ints_and_reals():
    assert as_positions(np.array([POSITION_LIMIT, -POSITION_LIMIT])).tolist() == [2.0**40, -(2.0**40)]
    assert as_positions(np.array([2.0**40, -(2.0**40)])).tolist() == [2.0**40, -(2.0**40)]
    for bad in (np.array([0, POSITION_LIMIT + 1]), np.array([-POSITION_LIMIT - 1, 0]),
                np.array([0.0, 2.0**41]), np.array([-(2.0**41), 0.0]),
                np.array([2**70, 1], dtype=object)):
        with pytest.raises(ValueError, match=r"positions must lie within \+-2\*\*40"):
            as_positions(bad)
    for bad in (np.nan, np.inf, -np.inf):
        with pytest.raises(ValueError, match="positions must be finite"):
            as_positions(np.array([1.0, bad]))
    with pytest.raises(TypeError, match="positions must be an integer or real floating-point array"):
        as_positions(np.array([True, False]))


def test_broadcast_shape_may_not_enlarge_the_leading_shape():
    check_broadcast_shape((1, 5), (3, 5))
    with pytest.raises(ValueError, match=r"ids of shape \(2, 3, 5\) does not broadcast"):
        check_broadcast_shape((2, 3, 5), (3, 5), "ids")
    with pytest.raises(ValueError, match="does not broadcast"):
        check_broadcast_shape((4,), (3, 5))


def test_input_ids_are_2d_integers():
    assert check_input_ids(np.array([[1, 2]], dtype=np.int32)).dtype == np.int64
    with pytest.raises(TypeError, match="input_ids must be an integer array"):
        check_input_ids(np.array([[1.0, 2.0]]))
    with pytest.raises(ValueError, match=r"shape \(batch, seq\)"):
        check_input_ids(np.array([1, 2]))


def test_check_int_and_check_real():
    assert check_int(np.int16(3), "n", minimum=3) == 3  # the minimum itself is accepted
    with pytest.raises(ValueError, match="n must be >= 4, got 3"):
        check_int(3, "n", minimum=4)
    assert check_int(np.int64(9), "m", maximum=9) == 9  # the maximum itself is accepted
    with pytest.raises(ValueError, match="^m must be <= 8, got 9$"):
        check_int(9, "m", minimum=2, maximum=8)
    for bad in (True, 2.0, "2"):
        with pytest.raises(TypeError, match="n must be an int"):
            check_int(bad, "n")
    assert check_real(np.float32(0.5), "r") == 0.5 and check_real(3, "r") == 3.0
    for bad in (True, "1.0", None):
        with pytest.raises(TypeError, match="r must be a real number"):
            check_real(bad, "r")
    for bad in (np.inf, -np.inf, np.nan):
        with pytest.raises(ValueError, match="r must be finite"):
            check_real(bad, "r")
    with pytest.raises(ValueError, match="r must be within the float64 range, got a 400-digit integer"):
        check_real(10**399, "r")
