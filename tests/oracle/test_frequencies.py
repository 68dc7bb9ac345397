"""The frequency tables of the oracle (rope_ref.frequencies): the argument checks and limits of inv_freq
and default_inv_freq, the seq_len a length-dependent scaling sees, the options of angles and cos_sin, and
ids placed on axes. Expected values come from mpmath."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest
from mp_reference import U64, _mp_theta

import rope_ref
from rope_ref import RopeConfig
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


class _BadAtOneLength(rope_ref.Scaling):
    """Test-only length-dependent scaling: a valid table except at seq_len == 100, where it gives ``bad``."""

    length_dependent = True

    def __init__(self, bad):
        self.bad = bad

    def inv_freq(self, base, rotary_dim, seq_len):
        theta = base ** (-np.arange(0, rotary_dim, 2) / rotary_dim)
        return theta * self.bad if seq_len == 100 else theta

    def attention_factor(self, rotary_dim, seq_len):
        return 1.0


@pytest.mark.parametrize("bad", [-1.0, 0.0, np.inf, np.nan])
def test_inv_freq_refuses_non_positive_or_non_finite_tables(bad):
    cfg = RopeConfig(8, layout="half", scaling=_BadAtOneLength(bad))  # valid at the lengths checked on build
    assert rope_ref.inv_freq(cfg, 99)[0] == 1.0
    with pytest.raises(ValueError, match="positive normal range"), np.errstate(invalid="ignore"):
        rope_ref.inv_freq(cfg, 100)


def test_seq_len_message_shows_numbers_below_10_20_in_full():
    dyn = RopeConfig(16, layout="half", scaling=rope_ref.DynamicNTK(2.0, 64))
    with pytest.raises(ValueError, match="got 10000000000000000005$"):
        rope_ref.inv_freq(dyn, seq_len=10**19 + 5)
    with pytest.raises(ValueError, match="got 99999999999999999999$"):
        rope_ref.inv_freq(dyn, seq_len=10**20 - 1)
    with pytest.raises(ValueError, match="got an integer of 21 digits$"):
        rope_ref.inv_freq(dyn, seq_len=10**20)


def test_angles_takes_seq_len_by_keyword_only_and_positions_cfg_by_name():
    cfg = RopeConfig(8, layout="half")
    got = rope_ref.angles(positions=[2.0], cfg=cfg, seq_len=4)
    want = [2.0 * float(t) for t in _mp_theta(10000.0, 8)]
    np.testing.assert_allclose(got[0], want, rtol=2 * U64, atol=0)
    with pytest.raises(TypeError):
        rope_ref.angles([2.0], cfg, 4)


def test_widest_rotary_table_is_2_to_the_20():
    from rope_ref.frequencies import MAX_ROTARY_DIM

    assert MAX_ROTARY_DIM == 1 << 20
    with pytest.raises(ValueError, match=r"an even integer in \[2, 1048576\], got 1048578"):
        rope_ref.default_inv_freq(10000.0, (1 << 20) + 2)


def test_cos_sin_with_axes_accepts_a_scalar_id():
    cfg = RopeConfig(8, layout="half")
    cos, sin = rope_ref.cos_sin(3.0, cfg, axes="bhsd")
    assert cos.shape in ((4,), (1, 1, 1, 4))  # a scalar comes back unplaced today; both broadcast
    want = [float(mpmath.cos(3 * t)) for t in _mp_theta(10000.0, 8)]
    np.testing.assert_allclose(cos.reshape(-1), want, rtol=0, atol=4 * U64)


def test_cos_sin_with_axes_places_ids_on_an_x_with_unit_head_axes():
    """docs: the ids are placed on an x whose other axes (heads) have size 1; a misfit names that x."""
    cfg = RopeConfig(8, layout="half")
    with pytest.raises(ValueError, match=r"x of shape \(1, 1, 1\) with axes='thd' \(t=1, h=1, d=1\)"):
        rope_ref.cos_sin(np.zeros((2, 3, 4, 5)), cfg, axes="thd")
    with pytest.raises(ValueError, match=r"x of shape \(1, 1, 1\) with axes='shd' \(s=1, h=1, d=1\)"):
        rope_ref.cos_sin(np.zeros((2, 3, 4, 5)), cfg, axes="shd")
    with pytest.raises(ValueError, match=r"shape \(2, 3, 4, 5\) do not fit x of shape \(1, 1, 1, 1\)"):
        rope_ref.cos_sin(np.zeros((2, 3, 4, 5)), cfg, axes="bhsd")


def test_cos_sin_attention_factor_of_exactly_two_doubles_cos_and_sin():
    cfg = RopeConfig(8, layout="half", scaling=rope_ref.YaRN(4.0, 64, attention_factor=2.0))
    cos, sin = rope_ref.cos_sin([0.0, 1.0], cfg)
    np.testing.assert_array_equal(cos[0], 2.0)
    np.testing.assert_allclose(np.hypot(cos, sin), 2.0, rtol=8 * U64, atol=0)


def test_widest_rotary_table_itself_is_accepted(monkeypatch):
    """The limit is inclusive. Checked with the limit lowered to 8 (a 2**20-wide table takes seconds)."""
    from rope_ref import frequencies

    monkeypatch.setattr(frequencies, "MAX_ROTARY_DIM", 8)
    np.testing.assert_allclose(rope_ref.default_inv_freq(10000.0, 8), [float(t) for t in _mp_theta(1e4, 8)],
                               rtol=2 * U64, atol=0)
    with pytest.raises(ValueError, match=r"in \[2, 8\], got 10"):
        rope_ref.default_inv_freq(10000.0, 10)


def test_empty_positions_with_a_length_dependent_scaling():
    from rope_ref.frequencies import resolve_seq_len

    cfg = RopeConfig(8, layout="half", scaling=rope_ref.DynamicNTK(2.0, 16))
    assert resolve_seq_len(np.zeros(0), cfg, None) is None
    assert rope_ref.apply(np.zeros((0, 8)), np.zeros(0), cfg).shape == (0, 8)


def test_angles_and_cos_sin_take_their_options_by_keyword_only():
    cfg = RopeConfig(8, layout="half")
    pos = [1.0, 2.0]
    np.testing.assert_array_equal(rope_ref.angles(pos, cfg, seq_len=4), rope_ref.angles(pos, cfg))
    for func in (rope_ref.angles, rope_ref.cos_sin):
        with pytest.raises(TypeError):
            func([1.0, 2.0], cfg, 4)


class _LengthScaled(rope_ref.scaling_base.Scaling):
    """Default table; attention factor seq_len / 64 (length dependent, to see which length it gets)."""

    length_dependent = True

    def inv_freq(self, base, rotary_dim, seq_len):
        return rope_ref.default_inv_freq(base, rotary_dim)

    def attention_factor(self, rotary_dim, seq_len):
        return 1.0 if seq_len is None else seq_len / 64


class _ZeroPairs(_LengthScaled):
    """A zero-frequency scaling whose table at seq_len 100 has a negative entry."""

    zero_frequencies = True

    def inv_freq(self, base, rotary_dim, seq_len):
        table = np.zeros(rotary_dim // 2)
        table[0] = -1.0 if seq_len == 100 else 1.0
        return table

    def validate(self, base, rotary_dim):
        pass


def test_cos_sin_uses_the_attention_factor_at_the_resolved_length():
    cfg = RopeConfig(8, layout="half", scaling=_LengthScaled())
    cos, sin = rope_ref.cos_sin([0.0, 127.0], cfg)  # seq_len = 128: factor 2 on cos and sin
    assert cos[0].tolist() == [2.0] * 4 and sin[0].tolist() == [0.0] * 4
    cos32, sin32 = rope_ref.cos_sin([0.0, 127.0], cfg, seq_len=32)  # explicit: factor 0.5
    np.testing.assert_array_equal(cos32 * 4, cos)
    np.testing.assert_array_equal(sin32 * 4, sin)
    assert rope_ref.attention_factor(cfg, 192) == 3.0
    with pytest.raises(ValueError, match="seq_len must be >= 1"):
        rope_ref.attention_factor(cfg, 0)


def test_zero_frequency_tables_may_hold_zeros_but_not_negatives():
    cfg = RopeConfig(8, layout="half", scaling=_ZeroPairs())
    assert rope_ref.inv_freq(cfg, 99).tolist() == [1.0, 0.0, 0.0, 0.0]
    with pytest.raises(ValueError, match="negative or non-finite frequencies"):
        rope_ref.inv_freq(cfg, 100)


def test_resolved_length_floors_fractional_positions_and_an_explicit_one_wins():
    from rope_ref.frequencies import resolve_seq_len

    cfg = RopeConfig(8, layout="half", scaling=rope_ref.DynamicNTK(2.0, 16))
    assert resolve_seq_len(np.array([0.0, 40.5]), cfg, None) == 41  # floor(40.5) + 1, not 42
    assert resolve_seq_len(np.array([0.0, 40.0]), cfg, None) == 41
    assert resolve_seq_len(np.array([0.0, 40.0]), cfg, 100) == 100
    assert resolve_seq_len(np.array([-5.0]), cfg, None) == 1
    with pytest.raises(ValueError, match="seq_len must be >= 1"):
        resolve_seq_len(np.array([3.0]), cfg, 0)
    pos = np.array([1.0, 2.0])  # angles honour an explicit seq_len for a length-dependent scaling
    long = RopeConfig(8, layout="half", base=10000.0 * 19.0 ** (8 / 6))  # (1 + 2 (160 - 16) / 16)^(d/(d-2))
    want = pos[:, None] * rope_ref.inv_freq(long)
    np.testing.assert_allclose(rope_ref.angles(pos, cfg, seq_len=160), want, rtol=1e-13, atol=0)


def test_default_table_is_a_fresh_array_each_call():
    first = rope_ref.default_inv_freq(500.0, 8)
    first[:] = -1.0
    assert rope_ref.default_inv_freq(500.0, 8)[0] == 1.0
