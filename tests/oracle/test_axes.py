"""``rope_ref.axes``: one axis vocabulary, positions placed on the batch and sequence axes it names."""

from __future__ import annotations

import numpy as np
import pytest

import rope_ref
from rope_ref.axes import (
    ambiguous_hf_ids,
    parse_axes,
    positions_for_axes,
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
