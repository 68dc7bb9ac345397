"""Edges of the frequency module: argument checks of default_inv_freq, the seq_len limit, cos_sin(axes=)."""

from __future__ import annotations

import numpy as np
import pytest

import rope_ref
from rope_ref.frequencies import MAX_ROTARY_DIM

CFG = rope_ref.RopeConfig(16, layout="half", base=10000.0)


@pytest.mark.parametrize(
    "base,rotary_dim,error,match",
    [
        (1.0, 8, ValueError, "base"),
        (-5.0, 8, ValueError, "base"),
        (0.0, 8, ValueError, "base"),
        (10000.0, 7, ValueError, "rotary_dim"),
        (10000.0, MAX_ROTARY_DIM + 2, ValueError, "rotary_dim"),
        (10000.0, 0, ValueError, "rotary_dim"),
        (10000.0, 8.0, TypeError, "rotary_dim"),
    ],
)
def test_default_inv_freq_refuses_bad_arguments(base, rotary_dim, error, match):
    with pytest.raises(error, match=match):
        rope_ref.default_inv_freq(base, rotary_dim)


def test_default_inv_freq_accepts_a_base_below_one_and_the_largest_width():
    # base in (0, 1) is a valid (if odd) exponential table: theta_1 = base^(-2/d) > 1.
    assert rope_ref.default_inv_freq(0.5, 4)[1] == pytest.approx(2.0**0.5, rel=1e-15)
    assert rope_ref.default_inv_freq(10000.0, 2)[0] == 1.0


def test_seq_len_limit_is_exactly_two_to_the_forty_plus_one():
    dyn = rope_ref.RopeConfig(16, layout="half", scaling=rope_ref.DynamicNTK(2.0, 64))
    rope_ref.inv_freq(dyn, seq_len=2**40 + 1)  # the largest position plus one: accepted
    with pytest.raises(ValueError, match="got 1099511627778$"):
        rope_ref.inv_freq(dyn, seq_len=2**40 + 2)  # short numbers are shown as they are


@pytest.mark.parametrize(
    "ids,axes,shape,expand",
    [
        (np.arange(5), "bhsd", (1, 1, 5, 8), lambda t: t[None, None]),
        (np.arange(5), "bshd", (1, 5, 1, 8), lambda t: t[None, :, None]),
        (np.arange(10).reshape(2, 5), "bhsd", (2, 1, 5, 8), lambda t: t[:, None]),
        (np.arange(10).reshape(2, 5), "bshd", (2, 5, 1, 8), lambda t: t[:, :, None]),
        (np.arange(10).reshape(2, 5), "sbhd", (5, 2, 1, 8), lambda t: np.swapaxes(t, 0, 1)[:, :, None]),
        (np.arange(7), "thd", (7, 1, 8), lambda t: t[:, None]),
    ],
)
def test_cos_sin_with_axes_places_the_ids(ids, axes, shape, expand):
    cos, sin = rope_ref.cos_sin(ids, CFG, axes=axes)
    want_cos, want_sin = rope_ref.cos_sin(ids, CFG)  # (..., 8) in the ids' own layout
    assert cos.shape == shape and sin.shape == shape
    assert np.array_equal(cos, expand(want_cos)) and np.array_equal(sin, expand(want_sin))


def test_cos_sin_with_axes_takes_full_rank_ids_as_they_are():
    ids = np.arange(30.0).reshape(2, 3, 5)  # (B, H, S): one axis per leading axis of x
    cos, _ = rope_ref.cos_sin(ids, CFG, axes="bhsd")
    assert cos.shape == (2, 3, 5, 8) and np.array_equal(cos, rope_ref.cos_sin(ids, CFG)[0])
    with pytest.raises(ValueError, match="axes"):
        rope_ref.cos_sin(np.zeros((2, 3, 5)), CFG, axes="thd")  # 3-D ids cannot be placed on (T, H)
