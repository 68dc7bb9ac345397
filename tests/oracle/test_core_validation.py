"""Bad input raises ValueError/TypeError naming the argument and value; nothing else ever escapes."""

from __future__ import annotations

import legacy_numpy
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import rope_ref
from rope_ref import DynamicNTK, RopeConfig


@pytest.mark.parametrize(
    ("kwargs", "exc", "pattern"),
    [
        ({"head_dim": 7}, ValueError, "head_dim.*7"),
        ({"head_dim": 0}, ValueError, "head_dim.*0"),
        ({"head_dim": -4}, ValueError, "head_dim.*-4"),
        ({"head_dim": 8.0}, TypeError, "head_dim.*float"),
        ({"head_dim": True}, TypeError, "head_dim.*bool"),
        ({"head_dim": 2**40}, ValueError, "head_dim.*65536.*1099511627776"),
        ({"rotary_dim": 3}, ValueError, "rotary_dim.*3"),
        ({"rotary_dim": 0}, ValueError, "rotary_dim.*0"),
        ({"rotary_dim": -2}, ValueError, "rotary_dim.*-2"),
        ({"rotary_dim": 10}, ValueError, "rotary_dim.*10"),
        ({"base": 1.0}, ValueError, "base.*1"),
        ({"base": 0.5}, ValueError, "base.*0.5"),
        ({"base": -10.0}, ValueError, "base.*-10"),
        ({"base": float("nan")}, ValueError, "base.*nan"),
        ({"base": float("inf")}, ValueError, "base.*inf"),
        ({"base": "10000"}, TypeError, "base.*str"),
        ({"layout": "neox"}, ValueError, "layout.*neox"),
        ({"layout": None}, TypeError, "layout.*None"),
        ({"scaling": 2.0}, TypeError, "scaling.*float"),
    ],
)
def test_config_rejects_bad_values_naming_them(kwargs, exc, pattern):
    args = {"head_dim": 8, "layout": "half"} | kwargs
    head_dim = args.pop("head_dim")
    with pytest.raises(exc, match=pattern):
        RopeConfig(head_dim, **args)


def test_layout_has_no_default():
    with pytest.raises(TypeError, match="layout"):
        RopeConfig(8)  # type: ignore[call-arg]


CFG = RopeConfig(8, layout="interleaved")


@pytest.mark.parametrize(
    ("x", "positions", "exc", "pattern"),
    [
        (np.zeros((2, 6)), [0, 1], ValueError, r"head_dim=8.*\(2, 6\)"),
        (np.zeros((2, 8), dtype=np.int64), [0, 1], TypeError, "x.*int64"),
        (np.zeros((2, 8), dtype=np.complex128), [0, 1], TypeError, "x.*complex"),
        (np.zeros((2, 8), dtype=bool), [0, 1], TypeError, "x.*bool"),
        ("hello", 0, TypeError, "x"),
        (None, 0, TypeError, "x"),
        (np.float64(1.0), 0, ValueError, "x.shape"),
        (np.zeros((2, 8)), [0, np.nan], ValueError, "positions.*nan"),
        (np.zeros((2, 8)), [0, np.inf], ValueError, "positions.*inf"),
        (np.zeros((2, 8)), [0, 1, 2], ValueError, r"positions.*\(3,\).*\(2,\)"),
        (np.zeros((2, 8)), np.zeros((3, 2)), ValueError, "positions.*broadcast"),
        (np.zeros((2, 8)), ["a", "b"], TypeError, "positions"),
        (np.zeros((2, 8)), [True, False], TypeError, "positions.*bool"),
        (np.zeros((2, 8)), np.array([2**60]), ValueError, "positions.*2\\*\\*40"),
        (np.zeros((2, 8)), np.array([2.0**40 + 1]), ValueError, "positions.*2\\*\\*40"),  # one rule
        (np.zeros((2, 8)), [0, 2**63 + 1], ValueError, "positions.*2\\*\\*40"),
        (np.zeros((2, 8)), [0, -(2**63)], ValueError, "positions.*-9223372036854775808"),
        (np.zeros((2, 8)), np.ma.masked_array([1, 2], mask=[0, 1]), TypeError, "positions.*masked"),
        (np.zeros((2, 8)), legacy_numpy.matrix([[1, 2]]), TypeError, "positions.*matrix"),
        (np.zeros((2, 8), dtype=np.longdouble), [0, 1], TypeError, "x.*float64 cannot hold"),
        (np.zeros((2, 8)), np.zeros(2, dtype=np.longdouble), TypeError, "positions.*float64 cannot hold"),
    ],
)
def test_apply_rejects_bad_input_naming_it(x, positions, exc, pattern):
    with pytest.raises(exc, match=pattern):
        rope_ref.apply(x, positions, CFG)


def test_cfg_must_be_a_ropeconfig():
    with pytest.raises(TypeError, match="cfg"):
        rope_ref.apply(np.zeros(8), 0, {"head_dim": 8})
    with pytest.raises(TypeError, match="seq_len"):
        rope_ref.inv_freq(CFG, seq_len=2.5)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_empty_arrays_work(layout):
    cfg = RopeConfig(8, layout=layout)
    assert rope_ref.apply(np.zeros((0, 8)), np.zeros(0), cfg).shape == (0, 8)
    assert rope_ref.apply(np.zeros((2, 0, 3, 8)), np.zeros((0, 1)), cfg).shape == (2, 0, 3, 8)
    cos, sin = rope_ref.cos_sin(np.zeros((0,)), cfg)
    assert cos.shape == sin.shape == (0, 4)


def test_float16_and_float32_inputs_are_widened_exactly():
    x = np.random.default_rng(0).standard_normal((3, 8)).astype(np.float16)
    y = rope_ref.apply(x, [1, 2, 3], CFG)
    assert y.dtype == np.float64
    np.testing.assert_array_equal(y, rope_ref.apply(x.astype(np.float64), [1, 2, 3], CFG))


garbage = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(),
    st.text(max_size=5),
    st.binary(max_size=5),
    st.lists(st.one_of(st.integers(-(2**70), 2**70), st.floats(), st.text(max_size=2)), max_size=4),
    st.lists(st.lists(st.floats(), max_size=3), max_size=3),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
    st.builds(lambda n, k: np.zeros((n, k)), st.integers(0, 3), st.integers(0, 10)),
    st.builds(lambda n: np.arange(n), st.integers(0, 5)),
)


@pytest.mark.slow  # a hypothesis fuzz of every argument: `pytest --full`
@given(x=garbage, positions=garbage, head_dim=garbage, rotary_dim=garbage, base=garbage, layout=garbage)
def test_garbage_only_ever_raises_value_or_type_error(x, positions, head_dim, rotary_dim, base, layout):
    try:
        cfg = RopeConfig(head_dim, layout=layout, rotary_dim=rotary_dim, base=base)
    except (ValueError, TypeError):
        cfg = CFG
    for fn in (
        lambda: rope_ref.apply(x, positions, cfg),
        lambda: rope_ref.apply_complex(x, positions, cfg),
        lambda: rope_ref.cos_sin(positions, cfg),
        lambda: rope_ref.rotation_matrix(positions, cfg),
        lambda: rope_ref.sinusoidal_embedding(positions, head_dim),
    ):
        try:
            fn()
        except (ValueError, TypeError):
            pass


def test_overflow_and_huge_inputs_give_clear_errors():
    # Issue "nothing lost": each of these used to end in a traceback, NaN or a 600-digit message.
    from rope_ref import decay

    dyn = rope_ref.RopeConfig(8, layout="half", scaling=rope_ref.DynamicNTK(2.0, 16))
    with pytest.raises(ValueError, match="an integer of 603 digits"):
        rope_ref.inv_freq(dyn, seq_len=2**2000)
    big = rope_ref.RopeConfig(128, layout="half", scaling=rope_ref.DynamicNTK(2.0, 4096))
    with pytest.raises(ValueError, match=r"2\*\*40"):
        rope_ref.apply(np.ones((1, 128)), [1.7e308], big)
    with pytest.raises(ValueError, match="at least one vector"):
        decay.score_curve([1.0], rope_ref.RopeConfig(8, layout="half"), np.ones((0, 8)), np.ones((0, 8)))
    for max_distance, step in ((1, 1e-300), (1e308, 1e-10)):
        with pytest.raises(ValueError, match="more than 10\\^7 points") as info:
            decay.decay_distances(max_distance, step)
        assert len(str(info.value)) < 120
    with pytest.raises(TypeError, match="rope_type must be a string"):
        rope_ref.scaling_from_hf({"rope_type": ["linear"], "factor": 2.0})
    tiny = rope_ref.RopeConfig(8, layout="half", scaling=rope_ref.LongRoPE([1e-300] * 4, [1.0] * 4, 16))
    with pytest.raises(ValueError, match=r"2\*\*48"):
        rope_ref.cos_sin([3.0], tiny)  # inverse frequencies of 1e300: beyond the exact reduction


CFG8 = RopeConfig(8, layout="half")


@pytest.mark.parametrize("width", [6, 10, 16])
@pytest.mark.parametrize("fn", [rope_ref.apply, rope_ref.apply_complex])
def test_x_narrower_or_wider_than_head_dim_is_refused(fn, width):
    with pytest.raises(ValueError, match="head_dim"):
        fn(np.ones((2, width)), 1, CFG8)


@pytest.mark.parametrize("position", [[5.0], np.array([5.0, 6.0]), np.zeros((1, 1))])
def test_rotation_matrix_refuses_array_positions(position):
    with pytest.raises(ValueError, match="scalar"):
        rope_ref.rotation_matrix(position, CFG8)


@pytest.mark.parametrize(
    "call",
    [
        lambda cfg: rope_ref.inv_freq(cfg, 0),
        lambda cfg: rope_ref.attention_factor(cfg, 0),
        lambda cfg: rope_ref.angles([1, 2], cfg, seq_len=0),
        lambda cfg: rope_ref.cos_sin([1, 2], cfg, seq_len=0),
        lambda cfg: rope_ref.apply(np.ones(8), 1, cfg, seq_len=0),
        lambda cfg: rope_ref.rotation_matrix(1.0, cfg, seq_len=0),
    ],
)
@pytest.mark.parametrize("scaling", [None, DynamicNTK(2.0, 64)])
def test_seq_len_zero_is_refused(call, scaling):
    with pytest.raises(ValueError, match="seq_len"):
        call(RopeConfig(8, layout="half", scaling=scaling))
