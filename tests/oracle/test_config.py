"""RopeConfig (rope_ref.config): the limits inclusive where documented, replace() carrying every field,
n_pairs and the repr, and the scaling validated against the rotary width (not the head)."""

from __future__ import annotations

import pytest

from rope_ref import Linear, LongRoPE, RopeConfig
from rope_ref.config import MAX_HEAD_DIM


def test_limits_are_inclusive():
    assert RopeConfig(MAX_HEAD_DIM, layout="half").head_dim == 65536
    assert RopeConfig(8, layout="half", rotary_dim=8).rotary_dim == 8  # rotary_dim == head_dim
    assert RopeConfig(8, layout="half", base=1.0000001).base == 1.0000001
    with pytest.raises(ValueError, match="head_dim must be <= 65536"):
        RopeConfig(MAX_HEAD_DIM + 2, layout="half")
    with pytest.raises(TypeError, match="layout must be a str"):
        RopeConfig(8, layout=1)
    with pytest.raises(TypeError, match="scaling must be None or a rope_ref scaling"):
        RopeConfig(8, layout="half", scaling={"rope_type": "linear", "factor": 2.0})


def test_defaults_and_n_pairs_follow_the_rotary_width():
    full = RopeConfig(16, layout="interleaved")
    assert (full.rotary_dim, full.n_pairs, full.base, full.scaling) == (16, 8, 10000.0, None)
    part = RopeConfig(16, layout="interleaved", rotary_dim=4)
    assert part.n_pairs == 2


def test_replace_carries_every_field_it_is_not_told_to_change():
    cfg = RopeConfig(16, layout="interleaved", rotary_dim=12, base=5e5, scaling=Linear(3.0))
    half = RopeConfig(16, layout="half", rotary_dim=12, base=5e5, scaling=Linear(3.0))
    assert cfg.replace(layout="half") == half
    assert cfg.replace(base=1e4) == RopeConfig(16, layout="interleaved", rotary_dim=12, base=1e4,
                                               scaling=Linear(3.0))
    assert cfg.replace(scaling=None).rotary_dim == 12
    with pytest.raises(ValueError, match="rotary_dim must be <= head_dim"):
        cfg.replace(head_dim=8)  # validated again


def test_scaling_is_validated_against_the_rotary_width():
    # Lists of 4 entries fit rotary_dim 8 (4 pairs) on a head of 16 (8 pairs).
    scaling = LongRoPE([1.0, 2.0, 3.0, 4.0], [5.0, 6.0, 7.0, 8.0], 64)
    assert RopeConfig(16, layout="half", rotary_dim=8, scaling=scaling).n_pairs == 4
    with pytest.raises(ValueError, match="scaling does not fit this config: .*rotary_dim // 2 = 8"):
        RopeConfig(16, layout="half", scaling=scaling)


def test_repr_shows_a_partial_width_and_the_scaling():
    assert repr(RopeConfig(16, layout="half")) == "RopeConfig(head_dim=16, layout='half', base=10000)"
    assert repr(RopeConfig(16, layout="half", rotary_dim=8, scaling=Linear(2.0))) == (
        "RopeConfig(head_dim=16, layout='half', rotary_dim=8, base=10000, scaling=Linear(factor=2.0))"
    )

