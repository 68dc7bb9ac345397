"""Hypothesis strategies shared by the oracle's tests."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import rope_ref


@st.composite
def configs(draw, max_head_dim: int = 32) -> rope_ref.RopeConfig:
    """A random valid RopeConfig (no scaling)."""
    head_dim = 2 * draw(st.integers(1, max_head_dim // 2))
    rotary_dim = 2 * draw(st.integers(1, head_dim // 2))
    layout = draw(st.sampled_from(rope_ref.LAYOUTS))
    base = draw(st.sampled_from([10000.0, 500000.0, 2.0, 1.5e6, 10.0]))
    return rope_ref.RopeConfig(head_dim, layout=layout, rotary_dim=rotary_dim, base=base)


finite = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False)
positions_st = st.floats(-1e5, 1e5, allow_nan=False, allow_infinity=False)


def vectors(head_dim: int, lead: tuple[int, ...] = ()):
    return hnp.arrays(np.float64, lead + (head_dim,), elements=finite)
