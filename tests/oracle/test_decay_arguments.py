"""The argument checks of rope_ref.decay: head widths, correlations, sample counts, seeds, distance grids
and broadcasting, each refused (or accepted at its limit) with its own message.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from rope_ref import RopeConfig, decay
from rope_ref.decay import decay_distances, score_curve


@pytest.mark.parametrize("head_dim", [384, 512])
def test_decay_accepts_head_dims_beyond_small_int_cache(head_dim):
    """Widths above 256 (not interned small ints) must compare by value."""
    cfg = RopeConfig(head_dim, layout="half")
    q = np.ones(head_dim)
    exact, bound = decay.abel_bound(q, q, 0.0, cfg)
    # r = 0: h_i = |q_pair|^2 = 2 for every pair, so exact = 2 * d/2 and the bound's max step is |0 - 2|.
    n = head_dim // 2
    assert exact == pytest.approx(2.0 * n, rel=1e-15)
    assert bound == pytest.approx(2.0 * n * (n + 1) / 2, rel=1e-15)
    assert decay.score_curve(0.0, cfg, q, q) == pytest.approx(float(head_dim), rel=1e-15)


@pytest.mark.parametrize("rho", [-1.5, -1.0000001, 1.0000001, 2.0])
def test_correlation_outside_minus_one_one_is_refused(rho):
    with pytest.raises(ValueError, match="correlation"):
        decay.score_curve([0.0, 1.0], RopeConfig(8, layout="half"), samples=4, correlation=rho)


def test_score_curve_refuses_empty_q_and_k():
    cfg = RopeConfig(16, layout="half")
    with pytest.raises(ValueError, match="at least one vector"):
        decay.score_curve([0.0, 1.0], cfg, np.ones((0, 16)), np.ones((0, 16)))


def test_zero_dimensional_q_is_a_value_error_naming_head_dim():
    cfg = RopeConfig(8, layout="half")
    with pytest.raises(ValueError, match="head_dim"):
        decay.abel_bound(np.float64(1.0), np.ones(8), 1.0, cfg)
    with pytest.raises(ValueError, match="head_dim"):
        decay.score_curve([1.0], cfg, np.ones(8), np.float64(1.0))


def test_more_than_max_samples_is_refused_before_any_work():
    """The limit is checked first: with q and k also given (another error), the samples message wins."""
    cfg = RopeConfig(8, layout="half")
    for samples in (10_000_001, 10**12):
        with pytest.raises(ValueError, match="samples must be <= 10000000"):
            decay.score_curve([0.0], cfg, np.ones(8), np.ones(8), samples=samples)


def test_negative_seed_is_refused():
    with pytest.raises(ValueError, match="seed"):
        decay.score_curve([0.0], RopeConfig(8, layout="half"), samples=2, seed=-1)


def test_decay_distances_allow_just_under_ten_million_points():
    grid = decay.decay_distances(9_999_999.0)  # ratio 9999999 < 10^7: 10^7 points
    assert grid.shape == (10_000_000,) and grid[-1] == 9_999_999.0
    del grid
    with pytest.raises(ValueError, match="10\\^7"):
        decay.decay_distances(10_000_000.0)
    with pytest.raises(ValueError, match="10\\^7"):
        decay.decay_distances(1e308, 1e-10)  # inf ratio


def test_decay_broadcast_errors_are_value_errors_with_their_own_message():
    cfg = RopeConfig(16, layout="half")
    q3, k4 = np.ones((3, 16)), np.ones((4, 16))
    with pytest.raises(ValueError, match=r"q of shape \(3, 16\) and k of shape \(4, 16\) do not broadcast"):
        decay.abel_bound(q3, k4, 1.0, cfg)
    with pytest.raises(ValueError, match=r"distance of shape \(5,\) does not broadcast against q/k shape"):
        decay.abel_bound(q3, q3, np.arange(5.0), cfg)
    with pytest.raises(ValueError, match=r"q of shape \(3, 16\) and k of shape \(4, 16\) do not broadcast"):
        decay.score_curve([0.0], cfg, q3, k4)


def test_exactly_max_samples_is_within_the_limit():
    """10**7 samples is allowed (the limit is inclusive): with q and k also given, the error is the
    conflict of arguments, not the limit, and no sample is drawn."""
    cfg = RopeConfig(8, layout="half")
    with pytest.raises(ValueError, match="pass either q and k, or samples > 0, not both"):
        score_curve([0.0], cfg, np.ones(8), np.ones(8), samples=10_000_000)


def test_negative_sample_counts_are_refused():
    with pytest.raises(ValueError, match="samples"):
        score_curve([0.0, 1.0], RopeConfig(8, layout="half"), samples=-1)


def test_score_curve_wants_both_q_and_k_or_neither():
    import pytest

    from rope_ref import RopeConfig
    from rope_ref.decay import score_curve

    cfg = RopeConfig(8, layout="half")
    for q, k in ((np.ones(8), None), (None, np.ones(8))):
        with pytest.raises(ValueError, match="pass both q and k, or neither"):
            score_curve([0, 1], cfg, q=q, k=k)


U64 = 2.0**-53


@pytest.mark.parametrize(
    ("max_distance", "step", "count"),
    [(0.3, 0.1, 4), (0.7, 0.1, 8), (2.0, 0.5, 5), (1.0, 0.3, 4), (5.0, 1.0, 6), (0.9999999, 0.1, 10)],
)
def test_decay_distances_keep_the_last_grid_point(max_distance, step, count):
    """0.3 / 0.1 is 2.9999999999999996 in float64: the grid still ends at (about) 0.3."""
    grid = decay_distances(max_distance, step)
    assert grid.shape == (count,)
    np.testing.assert_allclose(grid, [i * step for i in range(count)], rtol=4 * U64, atol=0)
    assert grid[-1] <= max_distance * (1 + 1e-9)


@pytest.mark.parametrize(
    ("max_distance", "step", "message"),
    [
        (0.0, 1.0, "max_distance must be > 0, got 0.0"),
        (-3.0, 1.0, "max_distance must be > 0, got -3.0"),
        (4.0, 0.0, "step must be > 0, got 0.0"),
        (4.0, -0.5, "step must be > 0, got -0.5"),
        (float("nan"), 1.0, "max_distance must be finite, got nan"),
        (4.0, float("inf"), "step must be finite, got inf"),
    ],
)
def test_decay_distances_refuse_non_positive_ranges(max_distance, step, message):
    with pytest.raises(ValueError, match=f"^{message}$"):
        decay_distances(max_distance, step)
    with pytest.raises(ValueError, match=f"^{message}$"):
        decay.plot_decay(RopeConfig(8, layout="half"), max_distance, step=step)


def test_decay_distances_accept_the_smallest_positive_range():
    assert decay_distances(1e-3, 1e-3).tolist() == [0.0, 1e-3]
    assert decay_distances(0.5).tolist() == [0.0]  # default step 1: only r = 0 fits


@pytest.mark.parametrize("given", ["q", "k"])
def test_samples_refuse_either_vector(given):
    cfg = RopeConfig(8, layout="half")
    vectors = {given: np.ones(8)}
    with pytest.raises(ValueError, match="^pass either q and k, or samples > 0, not both$"):
        score_curve([0.0], cfg, samples=2, **vectors)


@pytest.mark.parametrize("window", [0, 7])
def test_plot_window_must_fit_the_distances(window):
    cfg = RopeConfig(8, layout="half")
    message = "window must be >= 1"
    if window:
        message = "window must be <= the number of distances \\(6\\), got 7"
    with pytest.raises(ValueError, match=message):
        decay.plot_decay(cfg, 5, window=window)


def test_each_vector_of_the_wrong_width_is_named():
    cfg = RopeConfig(8, layout="half")
    for q, k, name in ((np.ones(6), np.ones(8), "q"), (np.ones(8), np.ones((2, 6)), "k")):
        shape = re.escape(str(np.shape(q if name == "q" else k)))
        message = rf"^{name}.shape\[-1\] must equal head_dim=8, got {name}.shape={shape}$"
        with pytest.raises(ValueError, match=message):
            decay.abel_bound(q, k, 1.0, cfg)
        with pytest.raises(ValueError, match=message):
            score_curve([1.0], cfg, q, k)


@pytest.mark.parametrize(
    "call",
    [
        lambda cfg: decay.abel_bound(np.ones(8), np.ones(8), 1.0, cfg),
        lambda cfg: score_curve([1.0], cfg),
        lambda cfg: decay.config_label(cfg),
        lambda cfg: decay.plot_decay([RopeConfig(8, layout="half"), cfg], 4),
    ],
)
def test_every_public_function_refuses_a_config_that_is_not_a_rope_config(call):
    with pytest.raises(TypeError, match="cfg"):
        call({"head_dim": 8, "layout": "half"})
