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
