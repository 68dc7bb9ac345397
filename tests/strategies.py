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
#: seeds for numpy.random.default_rng
seeds = st.integers(0, 2**16)


def vectors(head_dim: int, lead: tuple[int, ...] = ()):
    return hnp.arrays(np.float64, lead + (head_dim,), elements=finite)


def _scalings(rotary_dim: int) -> list:
    pairs = rotary_dim // 2
    options = [
        rope_ref.Linear(2.0),
        rope_ref.Linear(3.0),
        rope_ref.YaRN(4.0, 64),
        rope_ref.YaRN(8.0, 32, mscale=1.0, mscale_all_dim=0.5),
        rope_ref.Llama3(8.0, 1.0, 4.0, 64),
        rope_ref.LongRoPE([1.0 + i / 10 for i in range(pairs)], [2.0 + i for i in range(pairs)], 64),
    ]
    if rotary_dim >= 4:
        options += [rope_ref.NTKAware(2.0), rope_ref.DynamicNTK(2.0, 64)]
    return options


@st.composite
def scaled_configs(draw, max_head_dim: int = 32) -> rope_ref.RopeConfig:
    """A random valid RopeConfig with one of the scaling types (attention factors != 1 included)."""
    cfg = draw(configs(max_head_dim))
    scaling = draw(st.sampled_from(_scalings(cfg.rotary_dim)))
    return cfg.replace(scaling=scaling)
