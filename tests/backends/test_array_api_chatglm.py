"""ChatGLM-6B on the Array API backend (``backends/_array_api_chatglm.py``): position ids by hand, the
float64 rotation as an explicit per-pair loop, the released fp16 arithmetic re-done in NumPy float16
(``tests/backends/chatglm_cases.py``)."""

from __future__ import annotations

import numpy as np
import pytest
from chatglm_cases import BAD_ROWS, ROWS, ROWS_1D, ROWS_2D, TOKENS, fp16_tolerance, loop_2d, released_fp16
from rope_ref.conformance.registry import get_backend

NAMESPACES = ["numpy", "array_api_strict"]


def backend(ns: str):
    pytest.importorskip(ns)
    return get_backend(f"array-api:{ns}", "fp64")


@pytest.mark.parametrize("ns", NAMESPACES)
def test_position_ids_per_row_by_hand(ns):
    b = backend(ns)
    ids = b.from_numpy(np.array(ROWS))
    assert b.to_numpy(b.chatglm_position_ids(ids, position_encoding_2d=True, **TOKENS)).tolist() == ROWS_2D
    assert b.to_numpy(b.chatglm_position_ids(ids, position_encoding_2d=False, **TOKENS)).tolist() == ROWS_1D


@pytest.mark.parametrize("ns", NAMESPACES)
@pytest.mark.parametrize(("rows", "message"), BAD_ROWS)
def test_position_ids_refuse_a_row_without_bos_or_mask(ns, rows, message):
    b = backend(ns)
    with pytest.raises(ValueError, match=message):
        b.chatglm_position_ids(b.from_numpy(np.array(rows)), position_encoding_2d=True, **TOKENS)


def test_position_ids_refuse_other_ranks():
    b = backend("numpy")
    with pytest.raises(ValueError, match=r"input_ids must have shape \(batch, seq\), got shape \(3,\)"):
        b.chatglm_position_ids(np.array(ROWS[0][:3]), position_encoding_2d=True, **TOKENS)
    with pytest.raises(ValueError, match=r"got shape \(1, 3, 7\)"):
        b.chatglm_position_ids(np.array([ROWS]), position_encoding_2d=True, **TOKENS)


@pytest.mark.parametrize("ns", NAMESPACES)
def test_float64_path_is_two_half_head_ropes(ns):
    b = backend(ns)
    x = np.random.default_rng(5).standard_normal((4, 16))
    pos, blk = np.array([0, 3, 7, 2]), np.array([5, 0, 1, 9])
    got = b.to_numpy(
        b.chatglm_apply_2d(
            b.from_numpy(x), b.from_numpy(pos), b.from_numpy(blk), base=500.0, precision="float64"
        )
    )
    np.testing.assert_allclose(got, loop_2d(x, pos, blk, 500.0), rtol=0, atol=1e-14)


def test_fp16_path_is_the_released_arithmetic():
    b = backend("numpy")
    x = np.random.default_rng(6).standard_normal((5, 16))
    pos, blk = np.array([0, 1, 700, 2047, 9000]), np.array([3, 0, 1, 2, 40])
    got = b.to_numpy(b.chatglm_apply_2d(x, pos, blk, base=10000.0, precision="chatglm-6b-fp16"))
    assert got.dtype == np.float16
    want = released_fp16(x, pos, blk, 10000.0)
    np.testing.assert_allclose(
        got.astype(np.float64), want.astype(np.float64), rtol=0, atol=fp16_tolerance(want)
    )


@pytest.mark.parametrize("bad", [np.array([0.0, 2.5, 1.0]), np.array([0, 65505, 1]), np.array([0, -1, 1])])
def test_fp16_path_refuses_ids_outside_the_table(bad):
    b = backend("numpy")
    x = np.ones((3, 8))
    ok = np.arange(3)
    for pos, blk in ((bad, ok), (ok, bad)):
        with pytest.raises(ValueError, match=r"ChatGLM fp16 ids must be integers in \[0, 65504\]"):
            b.chatglm_apply_2d(x, pos, blk, base=10000.0, precision="chatglm-6b-fp16")
    assert (
        b.chatglm_apply_2d(x, np.array([0, 65504, 3]), ok, base=10000.0, precision="chatglm-6b-fp16").dtype
        == np.float16
    )


@pytest.mark.parametrize("precision", ["float64", "chatglm-6b-fp16"])
def test_head_dim_and_precision_are_checked(precision):
    b = backend("numpy")
    ids = np.arange(3)
    for width in (6, 0):
        with pytest.raises(ValueError, match="must be a positive multiple of 4"):
            b.chatglm_apply_2d(np.ones((3, width)), ids, ids, base=10000.0, precision=precision)
    with pytest.raises(ValueError, match="precision must be 'float64' or 'chatglm-6b-fp16', got 'float16'"):
        b.chatglm_apply_2d(np.ones((3, 8)), ids, ids, base=10000.0, precision="float16")


def test_position_ids_of_empty_rows():
    """No tokens: an empty batch gives empty ids; rows of length 0 have no bos (the argmax of nothing is
    never taken)."""
    b = backend("numpy")
    empty = b.chatglm_position_ids(np.zeros((0, 0), dtype=np.int64), position_encoding_2d=True, **TOKENS)
    assert empty.shape == (0, 2, 0)
    with pytest.raises(ValueError, match="input_ids row 0 has no bos"):
        b.chatglm_position_ids(np.zeros((2, 0), dtype=np.int64), position_encoding_2d=True, **TOKENS)


def test_fp16_path_broadcasts_ids_over_leading_axes():
    b = backend("numpy")
    x = np.random.default_rng(7).standard_normal((2, 3, 16))
    pos, blk = np.array([0, 5, 300]), np.array([2, 0, 1])
    got = b.chatglm_apply_2d(x, pos, blk, base=10000.0, precision="chatglm-6b-fp16")
    assert got.shape == x.shape and got.dtype == np.float16
    for i in range(2):
        want = released_fp16(x[i], pos, blk, 10000.0)
        np.testing.assert_allclose(got[i].astype(np.float64), want.astype(np.float64), rtol=0,
                                   atol=fp16_tolerance(want))  # fmt: skip


def test_fp16_path_needs_a_float16_and_a_head():
    b = backend("array_api_strict")
    xps = b.xp
    ids = xps.asarray([0, 1])
    with pytest.raises(NotImplementedError, match="has no float16, needed by precision='chatglm-6b-fp16'"):
        b.chatglm_apply_2d(xps.ones((2, 8)), ids, ids, base=10000.0, precision="chatglm-6b-fp16")
    with pytest.raises(ValueError, match=r"positive multiple of 4, got \(\)"):
        b.chatglm_apply_2d(xps.asarray(1.0), ids, ids, base=10000.0, precision="float64")
