"""``rope_ref.axes``: one axis vocabulary, positions placed on the batch and sequence axes it names."""

from __future__ import annotations

import numpy as np
import pytest

import rope_ref
from rope_ref.axes import (
    ambiguous_hf_ids,
    parse_axes,
    positions_for_axes,
    qk_head_axis,
    qkv_heads,
    shape_mismatch_message,
    suggest_axes,
)

CFG = rope_ref.RopeConfig(128, layout="half")


def _per_token_reference(x: np.ndarray, ids: np.ndarray, b_axis: int, s_axis: int) -> np.ndarray:
    """Rotate x one (batch, seq) slice at a time with a scalar position: no broadcasting to get wrong."""
    out = np.empty_like(x, dtype=np.float64)
    for b in range(x.shape[b_axis]):
        for s in range(x.shape[s_axis]):
            index = [slice(None)] * x.ndim
            index[b_axis], index[s_axis] = b, s
            out[tuple(index)] = rope_ref.apply(x[tuple(index)], float(ids[b, s]), CFG)
    return out


@pytest.mark.parametrize("axes,b_axis,s_axis", [("bhsd", 0, 2), ("bshd", 0, 1), ("sbhd", 1, 0)])
def test_hf_ids_land_on_batch_and_sequence(axes, b_axis, s_axis):
    # The silent-wrong case from issue 18: q (8, 8, 16, 128) with ids (8, 16) and 8 heads.
    sizes = {"b": 8, "h": 8, "s": 16, "d": 128}
    x = np.random.default_rng(0).standard_normal([sizes[a] for a in axes])
    ids = np.arange(8 * 16).reshape(8, 16) * 3 + 7
    pos = positions_for_axes(ids, axes, x.shape)
    assert pos.dtype == np.float64
    np.testing.assert_allclose(
        rope_ref.apply(x, pos, CFG), _per_token_reference(x, ids, b_axis, s_axis), atol=1e-13
    )


def test_silent_wrong_broadcast_is_what_axes_prevents():
    x = np.random.default_rng(0).standard_normal((8, 8, 16, 128))
    ids = np.arange(8 * 16).reshape(8, 16)
    right = rope_ref.apply(x, positions_for_axes(ids, "bhsd", x.shape), CFG)
    wrong = rope_ref.apply(x, ids, CFG)  # broadcasts onto (heads, seq) without an error
    assert np.abs(right - wrong).max() > 1.0
    assert "axes=" in ambiguous_hf_ids(ids.shape, x.shape)


def test_per_token_and_scalar_positions():
    x = np.zeros((2, 16, 4, 128))
    assert positions_for_axes(np.arange(16), "bshd", x.shape).shape == (1, 16, 1)
    assert positions_for_axes(np.arange(16), "bhsd", (2, 4, 16, 128)).shape == (1, 1, 16)
    assert positions_for_axes(np.arange(16), "sbhd", (16, 2, 4, 128)).shape == (16, 1, 1)
    assert positions_for_axes(np.arange(10), "thd", (10, 4, 128)).shape == (10, 1)
    assert positions_for_axes(np.arange(10), "shd", (10, 4, 128)).shape == (10, 1)
    assert positions_for_axes(np.arange(10), "hsd", (4, 10, 128)).shape == (1, 10)
    assert positions_for_axes(3, "bshd", x.shape).shape == ()
    assert positions_for_axes(np.ones((1, 16)), "bshd", x.shape).shape == (1, 16, 1)  # batch 1 broadcasts
    full = np.ones((2, 16, 4))
    assert positions_for_axes(full, "bshd", x.shape).shape == (2, 16, 4)


@pytest.mark.parametrize(
    "axes,shape,pos,match",
    [
        ("bhsd", (2, 4, 16, 128), np.zeros((2, 15)), r"\(2, 15\).*\(2, 4, 16, 128\).*axes='bhsd'"),
        ("bhsd", (2, 4, 16, 128), np.zeros(15), "per-token"),
        ("bshd", (2, 16, 4, 128), np.zeros((2, 16, 4, 1, 1)), "positions of shape"),
        ("bsd", (2, 4, 16, 128), 0, "names 3 axes but x has 4"),
        ("bxsd", (2, 4, 16, 128), 0, "unknown letters"),
        ("bhds", (2, 4, 16, 128), 0, "must end with 'd'"),
        ("bhhd", (2, 4, 16, 128), 0, "twice"),
        ("bhtd", (2, 4, 16, 128), 0, "no 'b' axis"),
        ("bhd", (2, 4, 128), 0, "position axis"),
    ],
)
def test_errors_name_axes_and_shapes(axes, shape, pos, match):
    with pytest.raises(ValueError, match=match):
        positions_for_axes(pos, axes, shape)


def test_axes_type_and_bad_positions():
    with pytest.raises(TypeError, match="axes"):
        parse_axes(None)
    with pytest.raises(ValueError, match="finite"):
        positions_for_axes(np.array([np.nan]), "shd", (1, 2, 8))


def test_suggestions_for_shape_errors_without_axes():
    assert suggest_axes((8, 16), (8, 8, 16, 128)) == ["bhsd"]
    assert suggest_axes((8, 16), (8, 16, 8, 128)) == ["bshd"]
    msg = shape_mismatch_message((8, 16), (8, 4, 16, 128))
    assert msg.startswith("positions (8, 16) vs x (8, 4, 16, 128)")
    assert "for HF-style (B, S) ids pass axes='bhsd'" in msg
    assert "axes='bshd'" in shape_mismatch_message((16,), (2, 16, 4, 128))
    assert "name x's axes" in shape_mismatch_message((3, 5), (2, 4, 16, 128))
    assert ambiguous_hf_ids((16,), (8, 8, 16, 128)) is None


def test_qk_head_axis_at_the_helper():
    assert qk_head_axis((2, 5, 12, 16), (2, 5, 4, 16), "bshd") == 2
    assert qk_head_axis((2, 12, 5, 16), (2, 1, 5, 16), "bhsd") == 1
    for q, k, axes, match in [
        ((2, 5, 12, 16), (2, 5, 5, 16), "bshd", "k heads \\(5\\) must divide q heads \\(12\\)"),
        ((2, 5, 12, 16), (2, 5, 0, 16), "bshd", "k heads \\(0\\) must divide"),
        ((2, 5, 12, 16), (2, 6, 4, 16), "bshd", "must agree on every axis but the heads"),
        ((2, 5, 12, 16), (2, 5, 4, 8), "bshd", "must agree on every axis but the heads"),
        ((2, 5, 12, 16), (2, 5, 16), "bshd", "k has 3 axes but q has 4"),
        ((5, 16), (5, 16), "sd", "no head axis 'h'"),
    ]:
        with pytest.raises(ValueError, match=match):
            qk_head_axis(q, k, axes)


def test_qkv_heads_at_the_helper():
    assert qkv_heads((2, 5, 12 + 2 * 4, 16), "bshd", 12, 4) == (2, 12, 4)
    assert qkv_heads((7, 6 + 2 * 3, 16), "thd", np.int64(6), 3) == (1, 6, 3)
    for shape, args, match in [
        (
            (2, 5, 16, 16),
            (12, 4),
            "qkv.shape\\[2\\] = 16 does not split as num_heads_q \\+ 2 \\* num_heads_kv = 12 \\+ 2 \\* 4",
        ),
        ((2, 5, 7, 16), (3, 1), "does not split"),
        ((2, 5, 11, 16), (5, 3), "num_heads_kv \\(3\\) must divide num_heads_q \\(5\\)"),
        ((2, 5, 3, 16), (True, 1), "num_heads_q must be an int >= 1, got True"),
        ((2, 5, 3, 16), (1, np.bool_(True)), "num_heads_kv must be an int >= 1"),
        ((2, 5, 3, 16), (1.0, 1), "num_heads_q must be an int >= 1"),
        ((2, 5, 3, 16), (0, 1), "num_heads_q must be an int >= 1, got 0"),
        ((5, 3, 16), (1, 1), "no head axis 'h' to split"),
    ]:
        axes = "bshd" if len(shape) == 4 else "sbd"
        with pytest.raises(ValueError, match=match):
            qkv_heads(shape, axes, *args)


def test_ambiguous_hf_ids_by_shape():
    assert ambiguous_hf_ids((1, 16), (1, 8, 16, 128)) is None  # batch 1 broadcasts correctly
    assert ambiguous_hf_ids((4, 16), (8, 4, 16, 128)) is None  # not (B, S) of this x
    assert ambiguous_hf_ids((8, 16, 1), (8, 8, 16, 128)) is None
    assert ambiguous_hf_ids((8, 16), (8, 16, 128)) is None
    assert "x.shape[1:3] = (8, 16)" in ambiguous_hf_ids((8, 16), (8, 8, 16, 128))
