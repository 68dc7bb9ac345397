"""Tests for rope_ref.decay and ``rope-ref decay`` (RoFormer §3.4.3, eqs. 35-37).

Expected values never come from the code under test: they are written-out loops (cmath), mpmath,
closed forms (f(0) = (d/2 + 1)/2) and the published/fixed-point table in shared/notes/performance.md §1.
"""

from __future__ import annotations

import cmath
import csv
import math

import mpmath
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

import rope_ref
from rope_ref import RopeConfig, Scaling
from rope_ref.cli import main
from rope_ref.decay import abel_bound, config_label, plot_decay, relative_upper_bound, score_curve

CFG = RopeConfig(128, layout="half")


def loop_bound(r: float, d: int, base: float = 10000.0) -> float:
    """(1/(d/2)) sum_{j=1}^{d/2} |sum_{i<j} e^{i r theta_i}|, one term at a time, pure Python."""
    half = d // 2
    total = 0.0
    for j in range(1, half + 1):
        s = complex(0.0, 0.0)
        for i in range(j):
            s += cmath.exp(1j * r * base ** (-2.0 * i / d))
        total += abs(s)
    return total / half


def mp_bound(r, d: int, base=10000) -> mpmath.mpf:
    with mpmath.workdps(40):
        r = mpmath.mpf(r)
        acc = mpmath.mpc(0)
        total = mpmath.mpf(0)
        for i in range(d // 2):
            acc += mpmath.expj(r * mpmath.power(base, -mpmath.mpf(2 * i) / d))
            total += abs(acc)
        return total / (d // 2)


class HalfFreq(Scaling):
    """Test-only scaling: every inverse frequency halved, so f_scaled(r) = f(r / 2)."""

    def inv_freq(self, base, rotary_dim, seq_len):
        return 0.5 * base ** (-np.arange(0, rotary_dim, 2) / rotary_dim)

    def attention_factor(self, rotary_dim, seq_len):
        return 1.5

    def __repr__(self):
        return "HalfFreq()"


class LengthProbe(Scaling):
    """Test-only length-dependent scaling: records the seq_len it is asked for."""

    length_dependent = True

    def __init__(self):
        self.seen = []
        self.factor_seen = []

    def inv_freq(self, base, rotary_dim, seq_len):
        self.seen.append(seq_len)
        return base ** (-np.arange(0, rotary_dim, 2) / rotary_dim)

    def attention_factor(self, rotary_dim, seq_len):
        self.factor_seen.append(seq_len)
        return 1.0


# --- relative_upper_bound ------------------------------------------------------------------------


@pytest.mark.parametrize("d", [2, 4, 64, 128, 256])
def test_bound_at_zero_is_half_of_d_over_2_plus_1(d):
    # Every S_j(0) = j, so the mean of |S_j| over j = 1..d/2 is (d/2 + 1)/2 exactly.
    value = relative_upper_bound(0, RopeConfig(d, layout="interleaved"))
    assert value == (d / 2 + 1) / 2
    assert relative_upper_bound(0, CFG) == 32.5


def test_bound_at_zero_with_scaling_and_partial_rotary():
    cfg = RopeConfig(128, layout="half", rotary_dim=64, scaling=HalfFreq())
    assert relative_upper_bound([0.0], cfg)[0] == 16.5


@pytest.mark.parametrize("r", [1, 2.5, 7, 50, 100, 236, 257.25])
def test_bound_matches_independent_loop(r):
    assert relative_upper_bound(r, CFG) == pytest.approx(loop_bound(r, 128), rel=1e-12)


@pytest.mark.parametrize(("r", "d", "base"), [(10, 64, 10000), (123.5, 128, 10000), (4096, 128, 500000),
                                               (19306, 128, 10000), (-77.25, 32, 10000)])
def test_bound_matches_mpmath(r, d, base):
    got = relative_upper_bound(np.array([r]), RopeConfig(d, layout="half", base=base))[0]
    # float64 phases r*theta carry ~r*1e-16 absolute error, so allow a little more at large r.
    assert got == pytest.approx(float(mp_bound(r, d, base)), rel=1e-11)


# f(m) for d = 128, base 1e4, published to 3 decimals in shared/notes/performance.md §1 (computed there
# independently from the blog's Mathematica recipe). The note's 12.630 and 7.589 are 12.6295 and 7.5885
# by mpmath, so the tolerance is 1e-3.
NOTES_TABLE = {0: 32.500, 1: 31.538, 2: 28.956, 4: 22.604, 8: 19.817, 10: 17.954, 16: 15.775, 20: 15.242,
               32: 13.384, 50: 12.630, 64: 10.090, 100: 10.227, 128: 9.273, 150: 7.589, 200: 7.245,
               250: 6.548, 256: 6.543}


def test_bound_matches_published_table():
    m = np.array(list(NOTES_TABLE))
    np.testing.assert_allclose(relative_upper_bound(m, CFG), list(NOTES_TABLE.values()), atol=1e-3, rtol=0)


def test_bound_other_settings_from_notes():
    d64 = relative_upper_bound([10, 50, 100, 200, 256], RopeConfig(64, layout="half"))
    np.testing.assert_allclose(d64, [8.81, 5.73, 7.47, 3.86, 3.84], atol=6e-3)
    d256 = relative_upper_bound([10, 50, 100, 200, 256], RopeConfig(256, layout="half"))
    np.testing.assert_allclose(d256, [36.2, 22.6, 18.6, 13.8, 12.7], atol=6e-2)
    b5e5 = relative_upper_bound([10, 100, 256, 4096], RopeConfig(128, layout="half", base=5e5))
    np.testing.assert_allclose(b5e5, [20.9, 13.7, 12.2, 7.17], atol=6e-2)


def test_decay_by_window_means_not_monotone():
    f = relative_upper_bound(np.arange(257), CFG)
    windows = f[:256].reshape(8, 32).mean(axis=1)
    assert np.all(np.diff(windows) < 0), windows
    # Step by step it is not monotone: the notes count 115 of 256 unit steps going up. Counted with a
    # margin far above float64 error (values ~10, error ~1e-13), so a near-flat step cannot flip it.
    steps = np.diff(f)
    assert int(np.sum(steps > 1e-9)) <= 115 <= int(np.sum(steps > -1e-9))
    # 236 is a minimiser up to rounding (not "the" argmin, which a 1-ulp tie could move).
    assert f[236] <= f.min() + 1e-9 and f[236] == pytest.approx(6.415, abs=1e-3)


def test_bound_rises_again_far_out():
    f = relative_upper_bound([1000, 2000, 5000, 10000], CFG)
    np.testing.assert_allclose(f, [4.47, 5.05, 7.60, 3.86], atol=6e-3)
    assert f[2] > f[0]  # no decay beyond a few hundred positions
    far = relative_upper_bound(np.arange(20001), CFG)
    assert far[19306] <= far.min() + 1e-9 and far.min() == pytest.approx(1.33, abs=5e-3)
    assert far[19306] == pytest.approx(loop_bound(19306.0, 128), rel=1e-10)


def test_bound_is_even_real_shaped_and_chunk_invariant():
    r = np.linspace(-300.0, 300.0, 240).reshape(3, 80, 1)
    big = relative_upper_bound(r, CFG)
    assert big.shape == r.shape and big.dtype == np.float64
    np.testing.assert_array_equal(relative_upper_bound(r, CFG, max_bytes=1), big)
    np.testing.assert_allclose(relative_upper_bound(-r, CFG), big, rtol=1e-13)
    for idx in [(0, 0, 0), (1, 40, 0), (2, 79, 0)]:
        assert big[idx] == pytest.approx(loop_bound(float(r[idx]), 128), rel=1e-12)
    assert relative_upper_bound(np.array([], dtype=np.float64), CFG).shape == (0,)
    assert relative_upper_bound(np.float32(3.0), CFG).shape == ()


def test_bound_uses_config_frequencies():
    # Halving every theta_i turns f(r) into f(r/2); the attention factor does not enter the bound.
    r = np.arange(0.0, 300.0, 3.0)
    scaled = RopeConfig(128, layout="half", scaling=HalfFreq())
    want_half = [loop_bound(x / 2, 128) for x in r[::10]]
    np.testing.assert_allclose(relative_upper_bound(r[::10], scaled), want_half, rtol=1e-12)
    # rotary_dim < head_dim: only the rotated width counts (d = rotary_dim).
    partial = RopeConfig(256, layout="half", rotary_dim=64)
    want = [loop_bound(x, 64) for x in r[:6]]
    np.testing.assert_allclose(relative_upper_bound(r[:6], partial), want, rtol=1e-12)


def test_length_dependent_scaling_sees_max_abs_distance_plus_one():
    probe = LengthProbe()
    cfg = RopeConfig(16, layout="half", scaling=probe)
    probe.seen.clear()  # RopeConfig validates the scaling by evaluating it; count only what follows
    relative_upper_bound([-700.5, 3, 10], cfg)
    relative_upper_bound([1, 2], cfg, seq_len=4096)
    assert probe.seen == [701, 4096]


def test_explicit_seq_len_reaches_every_length_dependent_call():
    probe = LengthProbe()
    cfg = RopeConfig(16, layout="half", scaling=probe)
    one = np.ones(16)
    calls = [
        lambda **kw: score_curve([1.0, -900.0], cfg, **kw),
        lambda **kw: abel_bound(one, one, [2.0, -30.0], cfg, **kw),  # tables shared by both sides
        lambda **kw: abel_bound(np.ones((3, 16)), one, -30.0, cfg, **kw),  # the bound side on its own
    ]
    for call, implicit in zip(calls, [901, 31, 31], strict=True):
        for kw, want in (({"seq_len": 4096}, 4096), ({}, implicit)):
            probe.seen.clear()
            probe.factor_seen.clear()
            call(**kw)
            assert probe.seen and set(probe.seen) == {want}
    probe.factor_seen.clear()
    score_curve([5.0], cfg, seq_len=777)
    assert probe.factor_seen == [777]  # the attention factor of the score sees the same length


def test_bound_rejects_bad_input():
    with pytest.raises(TypeError, match="cfg"):
        relative_upper_bound([1.0], {"head_dim": 128})
    with pytest.raises(ValueError, match="distances"):
        relative_upper_bound([1.0, np.nan], CFG)
    with pytest.raises(TypeError, match="distances"):
        relative_upper_bound("12", CFG)
    with pytest.raises(ValueError, match="max_bytes"):
        relative_upper_bound([1.0], CFG, max_bytes=0)


def test_oracle_backend_method():
    from rope_ref.conformance.oracle_backend import OracleBackend

    np.testing.assert_array_equal(OracleBackend().decay_upper_bound([0, 64], CFG)[0], 32.5)


# --- abel_bound ----------------------------------------------------------------------------------


def _abel_by_hand(q, k, r, cfg):
    """Exact side and bound of eq. 37 written out with explicit pairs and loops."""
    half = cfg.rotary_dim // 2
    if cfg.layout == "half":
        pairs = [(i, i + half) for i in range(half)]
    else:
        pairs = [(2 * i, 2 * i + 1) for i in range(half)]
    theta = [cfg.base ** (-2.0 * i / cfg.rotary_dim) for i in range(half)]
    h = [complex(q[a], q[b]) * complex(k[a], -k[b]) for a, b in pairs] + [0j]
    exact = abs(sum(h[i] * cmath.exp(1j * r * theta[i]) for i in range(half)))
    step = max(abs(h[i + 1] - h[i]) for i in range(half))
    sums = sum(abs(sum(cmath.exp(1j * r * theta[i]) for i in range(j))) for j in range(1, half + 1))
    return exact, step * sums


vec = arrays(np.float64, 16, elements=st.floats(-10, 10, allow_nan=False, width=64))


@settings(max_examples=100, deadline=None)
@given(
    q=vec,
    k=vec,
    r=st.floats(-5000, 5000, allow_nan=False),
    layout=st.sampled_from(["half", "interleaved"]),
    rotary_dim=st.sampled_from([4, 8, 16]),
    base=st.sampled_from([10.0, 10000.0, 5e5]),
)
@pytest.mark.slow
def test_abel_exact_never_exceeds_bound(q, k, r, layout, rotary_dim, base):
    cfg = RopeConfig(16, layout=layout, rotary_dim=rotary_dim, base=base)
    exact, bound = abel_bound(q, k, r, cfg)
    assert exact <= bound * (1 + 1e-12) + 1e-12
    want_exact, want_bound = _abel_by_hand(q, k, r, cfg)
    assert exact == pytest.approx(want_exact, rel=1e-9, abs=1e-9)
    assert bound == pytest.approx(want_bound, rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_abel_bound_matches_hand_loops_for_fixed_vectors(layout):
    # Partial rotary (12 of 16 channels, large pass-through values that must not enter), base 500.
    cfg = RopeConfig(16, layout=layout, rotary_dim=12, base=500.0)
    rng = np.random.default_rng(11)
    q, k = rng.standard_normal((2, 16))
    q[12:], k[12:] = 40.0, -30.0
    for r in (0.0, 3.5, -40.0, 1234.0):
        exact, bound = abel_bound(q, k, r, cfg)
        want_exact, want_bound = _abel_by_hand(q, k, r, cfg)
        assert exact == pytest.approx(want_exact, rel=1e-12)
        assert bound == pytest.approx(want_bound, rel=1e-12)
        assert exact <= bound


def test_abel_bound_returns_writable_arrays_of_their_own():
    # Both sides come back as fresh arrays, not read-only broadcast views of one row.
    cfg = RopeConfig(8, layout="half")
    for q, r in ((np.ones((3, 8)), 2.0), (np.ones(8), np.array([1.0, 5.0]))):
        res = abel_bound(q, np.ones(8), r, cfg)
        assert not np.shares_memory(res.exact, res.bound)
        for side in res:
            assert side.flags.writeable and side.shape == np.broadcast_shapes(q.shape[:-1], np.shape(r))
            side[0] = -1.0
            assert side[-1] > 0.0


def test_abel_exact_side_bounds_the_rotated_score():
    # eq. 35: (R_m q)^T (R_n k) = Re[sum h_i e^{i(m-n) theta_i}], so |score| <= exact.
    rng = np.random.default_rng(5)
    q, k = rng.standard_normal((2, 64))
    for layout in ("half", "interleaved"):
        cfg = RopeConfig(64, layout=layout)
        for m, n in [(7, 3), (100, 250), (0, 0)]:
            score = rope_ref.apply(q, m, cfg) @ rope_ref.apply(k, n, cfg)
            exact, bound = abel_bound(q, k, m - n, cfg)
            assert abs(score) <= exact * (1 + 1e-12) <= bound


def test_abel_follows_layout_and_broadcasts():
    rng = np.random.default_rng(1)
    q, k = rng.standard_normal((2, 3, 32))
    half, inter = RopeConfig(32, layout="half"), RopeConfig(32, layout="interleaved")
    perm = rope_ref.layout_permutation(half)
    r = np.array([1.0, 40.0, 900.0])
    a = abel_bound(q[..., perm], k[..., perm], r, half)
    b = abel_bound(q, k, r, inter)
    np.testing.assert_allclose(a.exact, b.exact, rtol=1e-12)
    np.testing.assert_allclose(a.bound, b.bound, rtol=1e-12)
    assert a.exact.shape == (3,)
    grid = abel_bound(q[0], k[0], r[:, None] + np.zeros((3, 4)), inter)
    assert grid.bound.shape == (3, 4)
    with pytest.raises(ValueError, match="head_dim"):
        abel_bound(q[..., :30], k, 1.0, inter)
    with pytest.raises(TypeError, match="q"):
        abel_bound(np.ones(32, dtype=np.int64), k[0], 1.0, inter)


# --- score_curve ---------------------------------------------------------------------------------


def test_score_curve_all_ones_is_two_sum_cos():
    r = np.array([0.0, 1.0, 10.0, -33.5, 256.0])
    theta = 10000.0 ** (-np.arange(64) / 64)
    want = [2 * sum(math.cos(x * t) for t in theta) for x in r]
    np.testing.assert_allclose(score_curve(r, CFG), want, rtol=1e-12, atol=1e-10)
    assert score_curve(0, CFG) == pytest.approx(128.0)


def test_score_curve_default_ones_span_the_head_with_partial_rotary():
    """head_dim 12, rotary_dim 8: the default q = k = ones(12) give 2 sum_i cos(r theta_i) over the 4 pairs
    plus 12 - 8 = 4 from the channels that are not rotated."""
    cfg = RopeConfig(12, layout="half", rotary_dim=8)
    r = np.array([0.0, 3.0, -17.25])
    theta = [10000.0 ** (-2 * i / 8) for i in range(4)]
    want = [2 * sum(math.cos(x * t) for t in theta) + 4.0 for x in r]
    np.testing.assert_allclose(score_curve(r, cfg), want, rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_score_curve_matches_rotated_dot_products(layout):
    # Partial rotary and an attention factor of 1.5: score = apply(q, m) . apply(k, n), averaged over rows.
    cfg = RopeConfig(32, layout=layout, rotary_dim=24, scaling=HalfFreq())
    rng = np.random.default_rng(2)
    q, k = rng.standard_normal((2, 5, 32))
    r = np.array([0.0, 3.0, -17.0, 400.5])
    want = [np.mean(np.sum(rope_ref.apply(q, x + 9, cfg) * rope_ref.apply(k, 9, cfg), axis=-1)) for x in r]
    np.testing.assert_allclose(score_curve(r, cfg, q, k), want, rtol=1e-11, atol=1e-11)


@pytest.mark.slow
def test_score_curve_random_average():
    r = np.arange(0.0, 64.0)
    ones = 2 * np.cos(np.outer(r, 10000.0 ** (-np.arange(64) / 64))).sum(axis=1)
    samples = 20000
    avg = score_curve(r, CFG, samples=samples, seed=3, correlation=0.5)
    # E[h_i] = 2 rho per pair, so the mean curve is rho times the all-ones curve. One sample's score has
    # variance <= sum_i E|z_q|^2 |z_k|^2 <= 8 n (n = 64 pairs, unit-variance keys): allow 5 standard
    # errors of the mean, sqrt(8 n / samples) each (about 0.57 here, not a tuned constant).
    np.testing.assert_allclose(avg, 0.5 * ones, rtol=0, atol=5 * math.sqrt(8 * 64 / samples))
    np.testing.assert_array_equal(avg, score_curve(r, CFG, samples=samples, seed=3, correlation=0.5))
    assert not np.array_equal(avg, score_curve(r, CFG, samples=samples, seed=4, correlation=0.5))
    with pytest.raises(ValueError, match="correlation"):
        score_curve(r, CFG, samples=2, correlation=1.5)
    with pytest.raises(ValueError, match="samples"):
        score_curve(r, CFG, np.ones(128), np.ones(128), samples=2)
    with pytest.raises(ValueError, match="both"):
        score_curve(r, CFG, np.ones(128))


# --- plot and command ----------------------------------------------------------------------------

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_config_label_adds_the_rotary_width_and_the_scaling_only_when_they_matter():
    assert config_label(RopeConfig(128, layout="half")) == "d=128 base=10000"
    assert config_label(RopeConfig(128, layout="half", rotary_dim=64)) == "d=128 base=10000 rotary=64"
    partial = RopeConfig(96, layout="interleaved", base=5e5, rotary_dim=32, scaling=HalfFreq())
    assert config_label(partial) == "d=96 base=500000 rotary=32 HalfFreq()"


@pytest.mark.slow
def test_plot_decay_writes_png(tmp_path):
    path = tmp_path / "d.png"
    cfgs = [CFG, RopeConfig(128, layout="half", base=5e5), RopeConfig(64, layout="half", scaling=HalfFreq())]
    fig = plot_decay(cfgs, 256, path=str(path))
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and 1000 < len(data) < 200_000
    labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    assert labels == ["d=128 base=10000", "d=128 base=500000", "d=64 base=10000 HalfFreq()"]
    assert config_label(RopeConfig(128, layout="half", rotary_dim=64)) == "d=128 base=10000 rotary=64"
    line = fig.axes[0].get_lines()[1]
    np.testing.assert_allclose(line.get_xdata(), np.arange(257.0), rtol=0, atol=0)
    want = [loop_bound(x, 128, 5e5) for x in range(0, 257, 8)]
    np.testing.assert_allclose(line.get_ydata()[::8], want, rtol=1e-12)
    with pytest.raises(ValueError, match="labels"):
        plot_decay(cfgs, 10, labels=["a"])
    with pytest.raises(ValueError, match="max_distance"):
        plot_decay(CFG, -1)


def test_command_writes_png_and_csv(tmp_path, capsys):
    png, table = tmp_path / "d.png", tmp_path / "d.csv"
    rc = main(["decay", "--head-dim", "128", "--base", "10000", "--base", "1e6", "--max-distance", "256",
               "--out", str(png), "--csv", str(table)])
    assert rc == 0
    assert png.read_bytes()[:8] == PNG_MAGIC
    out = capsys.readouterr().out
    assert "32.5000" in out and "r=256" in out
    with open(table, newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == ["distance", "d=128 base=10000", "d=128 base=1e+06"]
    values = np.array(rows[1:], dtype=np.float64)
    np.testing.assert_array_equal(values[:, 0], np.arange(257.0))
    np.testing.assert_allclose(values[::8, 1], [loop_bound(x, 128) for x in range(0, 257, 8)], rtol=1e-12)
    np.testing.assert_allclose(values[:, 1][list(NOTES_TABLE)], list(NOTES_TABLE.values()), atol=1e-3)
    want_1e6 = [loop_bound(x, 128, 1e6) for x in range(0, 257, 8)]
    np.testing.assert_allclose(values[::8, 2], want_1e6, rtol=1e-12)


def test_command_fractional_step_and_bad_scaling(tmp_path, capsys):
    table = tmp_path / "f.csv"
    argv = ["decay", "--head-dim", "64", "--max-distance", "2", "--step", "0.5", "--csv", str(table)]
    assert main(argv) == 0
    with open(table, newline="") as fh:
        rows = list(csv.reader(fh))[1:]
    assert [float(r[0]) for r in rows] == [0.0, 0.5, 1.0, 1.5, 2.0]
    assert float(rows[0][1]) == 16.5
    assert main(["decay", "--head-dim", "64", "--scaling", "bogus:2"]) == 2
    assert "bogus" in capsys.readouterr().err


def test_plot_decay_draws_each_config_with_its_label():
    wide, narrow = RopeConfig(16, layout="half"), RopeConfig(8, layout="interleaved", base=500.0)
    ax = plot_decay([wide, narrow], 6, step=2.0).axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["d=16 base=10000", "d=8 base=500"]
    for line, (d, base) in zip(ax.get_lines(), [(16, 10000.0), (8, 500.0)], strict=True):
        assert list(line.get_xdata()) == [0.0, 2.0, 4.0, 6.0]
        want = [loop_bound(x, d, base) for x in (0, 2, 4, 6)]
        np.testing.assert_allclose(line.get_ydata(), want, rtol=1e-12)
    ax = plot_decay((wide, narrow), 6, labels=("x", "y")).axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["x", "y"]
    for labels in (["x"], ["x", "y", "z"]):
        with pytest.raises(ValueError, match=f"^labels has {len(labels)} entries for 2 configs$"):
            plot_decay([wide, narrow], 6, labels=labels)


def test_plot_window_draws_moving_means(tmp_path):
    fig = plot_decay(CFG, 100, window=10, path=str(tmp_path / "w.png"))
    line = fig.axes[0].get_lines()[0]
    f = [loop_bound(x, 128) for x in range(101)]
    want = [sum(f[i : i + 10]) / 10 for i in range(92)]
    np.testing.assert_allclose(line.get_ydata(), want, rtol=1e-12)
    np.testing.assert_allclose(line.get_xdata(), np.arange(92) + 4.5)
    with pytest.raises(ValueError, match="window"):
        plot_decay(CFG, 5, window=7)


def test_command_scaling_specs(tmp_path):
    from rope_ref.cli.decay import parse_scaling
    from rope_ref.scaling import Linear, Llama3, YaRN

    assert parse_scaling("linear:4") == (Linear(4.0), None)
    assert parse_scaling("yarn:8:4096@5e5") == (YaRN(8.0, 4096), 500000.0)
    assert parse_scaling("llama3:8:8192")[0] == Llama3(8.0, 1.0, 4.0, 8192)
    for bad in ["linear", "linear:x", "yarn:8:4096.5", "ntk:2@big", "llama3:8:1:4"]:
        with pytest.raises(ValueError, match="scaling"):
            parse_scaling(bad)
    # Position interpolation by 4 stretches the curve: f_PI(r) = f(r / 4) (Chen et al. 2023, eq. 4).
    table = tmp_path / "s.csv"
    argv = ["decay", "--head-dim", "64", "--scaling", "linear:4", "--max-distance", "40", "--csv", str(table)]
    assert main(argv) == 0
    with open(table, newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0][2] == "d=64 base=10000 Linear(factor=4.0)"
    values = np.array(rows[1:], dtype=np.float64)
    want = [loop_bound(x / 4, 64) for x in range(41)]
    np.testing.assert_allclose(values[:, 2], want, rtol=1e-12)
