"""Positions from cu_seqlens and KV-cache offsets, and the inverse rotation (independent derivations)."""

from __future__ import annotations

import numpy as np
import pytest

import rope_ref
from rope_ref.positions import positions_from_cu_seqlens, positions_from_offset

LENGTHS = [400, 142, 169, 16, 25, 518, 156, 24, 504, 90, 4, 1, 2300]


def test_cu_seqlens_restart_per_sequence_with_offsets():
    cu = np.concatenate([[0], np.cumsum(LENGTHS)])
    offsets = np.arange(len(LENGTHS)) * 1000
    got = positions_from_cu_seqlens(cu, offsets)
    expected = []
    for length, start in zip(LENGTHS, offsets, strict=True):  # written out token by token
        expected.extend(start + s for s in range(length))
    assert got.dtype == np.float64 and got.tolist() == expected
    assert positions_from_cu_seqlens(cu)[LENGTHS[0]] == 0.0  # restart at the second sequence
    assert positions_from_cu_seqlens([0, 0, 3], 7).tolist() == [7.0, 8.0, 9.0]  # empty sequence allowed


@pytest.mark.parametrize(
    "cu,offsets,match",
    [
        ([1, 4], None, "start at 0"),
        ([0, 5, 3], None, "non-decreasing"),
        ([[0, 3]], None, "1-D"),
        ([0, 3, 5], [1], "2 entries"),
        ([0, 3, 5], -1, ">= 0"),
        ([0, 2.5], None, "integers"),
    ],
)
def test_cu_seqlens_bad_input_names_the_argument(cu, offsets, match):
    with pytest.raises(ValueError, match=match):
        positions_from_cu_seqlens(cu, offsets)


def test_offsets_scalar_and_per_batch():
    assert positions_from_offset(5, 3).tolist() == [5.0, 6.0, 7.0]
    assert positions_from_offset([0, 10], 2).tolist() == [[0.0, 1.0], [10.0, 11.0]]
    assert positions_from_offset(2, 2, batch=3).shape == (3, 2)
    for bad, match in ((-1, ">= 0"), (1.5, "integers"), ([[1]], "scalar or 1-D")):
        with pytest.raises(ValueError, match=match):
            positions_from_offset(bad, 4)
    with pytest.raises(TypeError, match="offset"):
        positions_from_offset("3", 4)


def test_varlen_apply_matches_per_sequence_apply():
    cfg = rope_ref.RopeConfig(64, layout="interleaved", rotary_dim=48)
    rng = np.random.default_rng(1)
    cu = np.concatenate([[0], np.cumsum(LENGTHS)])
    x = rng.standard_normal((int(cu[-1]), 3, 64))
    packed = rope_ref.apply(x, positions_from_cu_seqlens(cu), cfg, axes="thd")
    for j, length in enumerate(LENGTHS):
        seq = x[cu[j] : cu[j + 1]]
        alone = rope_ref.apply(seq, np.arange(length), cfg, axes="shd")
        assert np.array_equal(packed[cu[j] : cu[j + 1]], alone)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_inverse_rotation_is_the_transpose_and_round_trips(layout):
    cfg = rope_ref.RopeConfig(32, layout=layout, rotary_dim=24, base=50000.0)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((5, 32))
    m = np.array([0.0, 3.0, 257.0, 4097.5, -12.0])
    inv = rope_ref.apply(x, m, cfg, inverse=True)
    for row in range(5):  # R_m^T x, from the explicit matrix (RoFormer eq. 13)
        r = rope_ref.rotation_matrix(float(m[row]), cfg)
        np.testing.assert_allclose(inv[row], sum(r[k] * x[row, k] for k in range(32)), rtol=0, atol=1e-13)
    back = rope_ref.apply(rope_ref.apply(x, m, cfg), m, cfg, inverse=True)
    np.testing.assert_allclose(back, x, rtol=0, atol=1e-14)


def test_inverse_keeps_the_forward_sequence_length_for_dynamic_scalings():
    cfg = rope_ref.RopeConfig(64, layout="half", scaling=rope_ref.DynamicNTK(2.0, 64))
    x = np.ones((200, 64))
    m = np.arange(200.0)
    inv = rope_ref.apply(x, m, cfg, inverse=True)
    assert np.array_equal(inv, rope_ref.apply(x, -m, cfg, seq_len=200))
    assert not np.array_equal(inv, rope_ref.apply(x, -m, cfg))  # -m alone would see seq_len 1
    with pytest.raises(TypeError, match="inverse"):
        rope_ref.apply(x, m, cfg, inverse="yes")


def test_integer_helper_checks_dtype_rank_and_range_itself():
    from rope_ref.positions import _integers

    limit = 2**40
    assert _integers(np.array([limit, -limit]), "ids").tolist() == [limit, -limit]  # the bounds are inside
    assert _integers(np.array([3.0, -4.0]), "ids").dtype == np.int64
    with pytest.raises(TypeError, match="ids must hold integers, got dtype bool"):
        _integers(np.array([True, False]), "ids")
    with pytest.raises(ValueError, match=r"ids must be 1-D, got shape \(1, 2\)"):
        _integers(np.array([[0, 3]]), "ids", ndim=1)
    for bad in (limit + 1, -limit - 1):
        with pytest.raises(ValueError, match=r"ids must lie within \+-2\*\*40"):
            _integers(np.array([0, bad]), "ids")
    with pytest.raises(ValueError, match="ids must hold integers, got 2.5"):
        _integers(np.array([1.0, 2.5]), "ids")


def test_offset_helper_checks_batch_seq_len_and_the_last_position_itself():
    limit = 2**40
    rows = positions_from_offset([3, 100, 7], 2)  # 3 rows != 2 steps: written out by hand
    assert rows.dtype == np.float64 and rows.tolist() == [[3.0, 4.0], [100.0, 101.0], [7.0, 8.0]]
    assert positions_from_offset(9, 4, batch=2).tolist() == [[9.0, 10.0, 11.0, 12.0]] * 2
    assert positions_from_offset(limit - 2, 2)[-1] == float(limit - 1)
    with pytest.raises(ValueError, match="offset has 2 entries for batch=3"):
        positions_from_offset([1, 2], 5, batch=3)
    with pytest.raises(ValueError, match="batch"):
        positions_from_offset(1, 5, batch=0)
    with pytest.raises(TypeError, match="seq_len"):
        positions_from_offset(1, 2.0)
    with pytest.raises(ValueError, match="seq_len"):
        positions_from_offset(1, -1)
    with pytest.raises(ValueError, match="offset \\+ seq_len reaches 1099511627777"):
        positions_from_offset([0, limit - 1], 3)


def test_kernel_positions_reads_the_token_axis_and_returns_float64_ids():
    from rope_ref.positions import kernel_positions

    # 't' is the middle axis: 7 tokens, 2 heads (a token count read from axis 0 would see 2)
    ids = kernel_positions((2, 7, 4), "htd", cu_seqlens=[0, 3, 7], start_offsets=[5, 40])
    assert ids.tolist() == [5.0, 6.0, 7.0, 40.0, 41.0, 42.0, 43.0]
    with pytest.raises(ValueError, match="cu_seqlens ends at 2 but x has 7 tokens"):
        kernel_positions((2, 7, 4), "htd", cu_seqlens=[0, 2])
    explicit = kernel_positions((3, 2, 4), "shd", positions=np.arange(3, dtype=np.int32))
    assert explicit.dtype == np.float64 and explicit.tolist() == [0.0, 1.0, 2.0]
