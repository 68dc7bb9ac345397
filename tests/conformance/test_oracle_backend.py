"""``conformance.oracle_backend``: the oracle behind the backend protocol (conversions, the VJP, in
place, packed qkv, the precision it accepts, the vision conventions), checked against rope_ref's
functions called directly and against explicit slices of the packed layout."""

from __future__ import annotations

import numpy as np
import pytest
from rope_ref.conformance.oracle_backend import OracleBackend, make_backend

import rope_ref

B = OracleBackend()
DYN = rope_ref.RopeConfig(16, layout="half", scaling=rope_ref.DynamicNTK(2.0, 64))


def test_from_numpy_converts_activations_and_copies():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = B.from_numpy(a, "float32")
    assert out.dtype == np.float64 and not np.shares_memory(out, a)
    ids = np.arange(4)
    kept = B.from_numpy(ids, None)
    assert kept.dtype == ids.dtype and not np.shares_memory(kept, ids)


def test_vjp_rotates_grad_out_back_with_the_forward_length():
    rng = np.random.default_rng(4)
    x, g = rng.standard_normal((5, 16)), rng.standard_normal((5, 16))
    pos = np.array([0.0, 10, 70, 100, 200])  # beyond the original 64: the dynamic base depends on 201
    got = B.apply_vjp(x, pos, DYN, g)
    np.testing.assert_array_equal(got, rope_ref.apply(g, -pos, DYN, seq_len=201))
    assert not np.allclose(got, rope_ref.apply(g, -pos, DYN, seq_len=None))


def test_in_place_ops_and_writes():
    assert B.inplace_ops == frozenset({"apply_axes", "apply_qk", "apply_qkv"})
    x = np.random.default_rng(1).standard_normal((2, 5, 3, 16))
    want = rope_ref.apply(
        x,
        np.arange(5)[None, :, None] + np.array([0, 9])[:, None, None],
        rope_ref.RopeConfig(16, layout="half"),
    )
    out = B.apply_axes(
        x, rope_ref.RopeConfig(16, layout="half"), axes="bshd", offset=np.array([0, 9]), inplace=True
    )
    assert out is x
    np.testing.assert_allclose(x, want, rtol=0, atol=1e-15)


@pytest.mark.parametrize("inplace", [False, True])
def test_packed_qkv_rotates_q_then_k_blocks_and_keeps_v(inplace):
    cfg = rope_ref.RopeConfig(16, layout="interleaved")
    qkv = np.random.default_rng(2).standard_normal((4, 6 + 2 * 2, 16))  # thd: 6 q heads, 2 k, 2 v
    before = qkv.copy()
    ids = np.array([0, 7, 300, 5000])
    out = B.apply_qkv(qkv, cfg, axes="thd", num_heads_q=6, num_heads_kv=2, positions=ids, inplace=inplace)
    want_q = rope_ref.apply(before[:, :6], ids[:, None], cfg)
    want_k = rope_ref.apply(before[:, 6:8], ids[:, None], cfg)
    np.testing.assert_allclose(out[:, :6], want_q, rtol=0, atol=1e-12)
    np.testing.assert_allclose(out[:, 6:8], want_k, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(out[:, 8:], before[:, 8:])
    assert (out is qkv) is inplace
    if not inplace:
        np.testing.assert_array_equal(qkv, before)


@pytest.mark.parametrize("precision", ["fp32", "float32", "bf16", "fp16"])
def test_make_backend_is_float64_only(precision):
    assert isinstance(make_backend("fp64"), OracleBackend) and isinstance(make_backend(), OracleBackend)
    with pytest.raises(ValueError, match=f"computes in float64 only, got precision={precision!r}"):
        make_backend(precision)


def test_vision_conventions():
    grids = np.array([[1, 4, 6]])
    np.testing.assert_array_equal(
        B.vision_ids(grids, convention="qwen2-vl", spatial_merge_size=2),
        rope_ref.vision_rope.qwen2_vl_ids(grids, 2),
    )
    np.testing.assert_array_equal(
        B.vision_ids([(4, 6)], convention="pixtral", spatial_merge_size=1),
        rope_ref.vision_rope.pixtral_ids([(4, 6)]),
    )
