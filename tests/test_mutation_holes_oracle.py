"""Oracle behaviours found untested by a second mutation run (issue 21, fresh sample ``--salt s5``).

Each test here fails on at least one mutant that survived the module's configured test subset. Expected
values are derived independently of ``rope_ref``: closed forms, mpmath, hand-counted shapes, and the
documented contracts (``docs/decay.md``: the work arrays of one chunk stay under ``max_bytes``).
Chunk sizes are observed by wrapping the trig kernel that every chunk calls; the wrapper computes the
same values, so results are unchanged.
"""

from __future__ import annotations

import json
import math
import warnings

import mpmath
import numpy as np
import pytest

import rope_ref
from rope_ref import RopeConfig, decay

U64 = 2.0**-53


# -- decay: chunking keeps the documented memory budget ------------------------------------------------


@pytest.fixture
def chunks(monkeypatch):
    """Shapes of the ``cos_sin_of_product`` tables that rope_ref.decay builds, one entry per chunk."""
    seen: list[tuple[int, ...]] = []
    real = decay.cos_sin_of_product

    def recording(m, theta):
        c, s = real(m, theta)
        seen.append(c.shape)
        return c, s

    monkeypatch.setattr(decay, "cos_sin_of_product", recording)
    return seen


def test_relative_upper_bound_chunks_stay_under_max_bytes(chunks):
    """docs/decay.md: "The work arrays of one chunk stay under max_bytes". Each chunk holds at least the
    cos and sin tables of its (rows, d/2) angles at once, so 2 * rows * (d/2) * 8 bytes <= max_bytes."""
    cfg = RopeConfig(64, layout="half")  # 32 pairs
    r = np.arange(3000.0)
    max_bytes = 1 << 16
    got = decay.relative_upper_bound(r, cfg, max_bytes=max_bytes)
    assert sum(shape[0] for shape in chunks) == r.size
    assert all(shape[1] == 32 for shape in chunks)
    assert all(2 * shape[0] * 32 * 8 <= max_bytes for shape in chunks), chunks[:3]
    # Chunking does not change any value: one big chunk gives the same bits.
    np.testing.assert_array_equal(got, decay.relative_upper_bound(r, cfg, max_bytes=1 << 40))


def test_relative_upper_bound_one_distance_per_chunk_when_budget_is_tiny(chunks):
    cfg = RopeConfig(8, layout="half")
    decay.relative_upper_bound(np.arange(5.0), cfg, max_bytes=1)
    assert [shape[0] for shape in chunks] == [1, 1, 1, 1, 1]


def test_default_budget_is_32_mib_and_fits_small_inputs_in_one_chunk(chunks):
    """1000 distances at d = 128: each (1000, 64) work array is 512 KiB, so even two dozen of them fit the
    documented default of 32 MiB: one chunk each for the bound, the Abel bound and the score curve."""
    assert decay.DEFAULT_MAX_BYTES == 32 * 2**20
    cfg = RopeConfig(128, layout="half")
    r = np.arange(1000.0)
    decay.relative_upper_bound(r, cfg)
    assert chunks == [(1000, 64)]
    chunks.clear()
    decay.score_curve(r, cfg)
    assert chunks == [(1000, 64)]
    chunks.clear()
    q = np.ones(128)
    decay.abel_bound(q, q, r, cfg)
    # abel_bound: one chunk for its exact side and one inside relative_upper_bound for the bound side.
    assert sorted(chunks) == [(1000, 64), (1000, 64)]


def test_abel_bound_chunks_stay_under_the_default_budget(chunks):
    """q of shape (128, 64) against 400 distances: lead (400, 128), 32 pairs, so 4096 angles per row. A
    chunk holds at least cos, sin and the two products h_re*c, h_im*s at once: 4 * rows * 4096 * 8 bytes
    must stay under 32 MiB, i.e. at most 256 rows per chunk, so 400 rows need two chunks or more."""
    cfg = RopeConfig(64, layout="interleaved")
    rng = np.random.default_rng(21)
    q = rng.standard_normal((128, 64))
    k = rng.standard_normal((128, 64))
    r = np.arange(400.0)[:, None] * 3.0
    got = decay.abel_bound(q, k, r, cfg)
    exact_chunks = [shape for shape in chunks if len(shape) == 3]
    assert sum(shape[0] for shape in exact_chunks) == 400
    assert all(shape[1:] == (128, 32) for shape in exact_chunks)
    assert all(4 * shape[0] * 128 * 32 * 8 <= decay.DEFAULT_MAX_BYTES for shape in exact_chunks), exact_chunks
    # Spot values against the explicit sum over pairs (eq. 37's left side), written out here.
    for row, col in [(0, 0), (399, 127), (200, 5)]:
        h = (q[col, 0::2] + 1j * q[col, 1::2]) * (k[col, 0::2] - 1j * k[col, 1::2])
        theta = 10000.0 ** (-np.arange(32) / 32)
        want = abs(sum(h[i] * complex(math.cos(r[row, 0] * theta[i]), math.sin(r[row, 0] * theta[i]))
                       for i in range(32)))
        assert got.exact[row, col] == pytest.approx(want, rel=1e-9, abs=1e-9)


def test_abel_bound_one_row_per_chunk_when_a_row_exceeds_the_budget(chunks):
    """A row of 6000 q/k pairs times 32 frequencies (1.5 MiB per work array, two dozen of them) already
    exceeds 32 MiB: chunks then hold one row each, never two."""
    cfg = RopeConfig(64, layout="half")
    q = np.ones((6000, 64))
    decay.abel_bound(q, q, np.array([[1.0], [2.0], [3.0]]), cfg)
    exact_chunks = [shape for shape in chunks if len(shape) == 3]
    assert [shape[0] for shape in exact_chunks] == [1, 1, 1]


# -- decay: validation and defaults --------------------------------------------------------------------


def test_chunks_use_the_whole_budget_at_24_work_arrays_per_row(chunks):
    """Each distance row is budgeted as 24 float64 work arrays of d/2 entries (the trig kernel's
    temporaries included), and chunks are as large as that budget allows: no more chunks than needed."""
    cfg = RopeConfig(64, layout="half")  # 32 pairs: 24 * 8 * 32 = 6144 bytes per distance
    decay.relative_upper_bound(np.arange(25.0), cfg, max_bytes=6144 * 10)
    assert [shape[0] for shape in chunks] == [10, 10, 5]
    chunks.clear()
    cfg128 = RopeConfig(128, layout="half")  # 64 pairs: 32 MiB // (24 * 8 * 64) = 2730 distances
    decay.score_curve(np.arange(3000.0), cfg128)
    assert [shape[0] for shape in chunks] == [2730, 270]
    chunks.clear()
    # abel_bound: q (128, 64) gives 128 * 32 angles per distance row: 32 MiB // (24 * 8 * 4096) = 42 rows.
    q = np.ones((128, 64))
    decay.abel_bound(q, q, np.arange(100.0)[:, None], cfg)
    assert [shape[0] for shape in chunks if len(shape) == 3] == [42, 42, 16]

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


@pytest.mark.parametrize("rho", [-1.0, 1.0])
def test_correlation_plus_minus_one_is_accepted(rho):
    """rho = -1: k = -q exactly, so every h_i = -|q_pair|^2 and the score at r = 0 is minus q.q."""
    cfg = RopeConfig(8, layout="half")
    plus = decay.score_curve([0.0, 3.0], cfg, samples=16, seed=2, correlation=1.0)
    got = decay.score_curve([0.0, 3.0], cfg, samples=16, seed=2, correlation=rho)
    np.testing.assert_allclose(got, rho * plus, rtol=4 * U64, atol=0)


def test_score_curve_refuses_empty_q_and_k():
    cfg = RopeConfig(16, layout="half")
    with pytest.raises(ValueError, match="at least one vector"):
        decay.score_curve([0.0, 1.0], cfg, np.ones((0, 16)), np.ones((0, 16)))


def test_plot_decay_default_figure_size_is_7_by_4_inches():
    fig = decay.plot_decay(RopeConfig(16, layout="half"), 10)
    np.testing.assert_array_equal(fig.get_size_inches(), [7.0, 4.0])


def test_pass_through_product_averages_row_dot_products():
    """Three rows with different pass-through parts: the mean of the row dot products, 14 / 3 + 0 here."""
    cfg = RopeConfig(8, layout="half", rotary_dim=4)
    q = np.zeros((3, 8))
    k = np.zeros((3, 8))
    q[:, 4:] = [[1.0, 2.0, 0.0, 0.0], [0.0, 0.0, 3.0, 0.0], [0.0, 0.0, 0.0, 1.0]]
    k[:, 4:] = [[4.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 5.0], [0.0, 0.0, 0.0, 5.0]]
    # Row dot products 6, 3 and 5: the mean is 14/3 at every distance (the rotated part is zero).
    got = decay.score_curve([0.0, 7.0, 100.0], cfg, q, k)
    np.testing.assert_allclose(got, 14.0 / 3.0, rtol=4 * U64, atol=0)


def test_zero_dimensional_q_is_a_value_error_naming_head_dim():
    cfg = RopeConfig(8, layout="half")
    with pytest.raises(ValueError, match="head_dim"):
        decay.abel_bound(np.float64(1.0), np.ones(8), 1.0, cfg)
    with pytest.raises(ValueError, match="head_dim"):
        decay.score_curve([1.0], cfg, np.ones(8), np.float64(1.0))


def test_plot_decay_line_width_thin_for_raw_curves_thicker_for_moving_means():
    cfg = RopeConfig(16, layout="half")
    assert decay.plot_decay(cfg, 20).axes[0].get_lines()[0].get_linewidth() == 0.8
    assert decay.plot_decay(cfg, 20, window=2).axes[0].get_lines()[0].get_linewidth() == 1.2


def test_more_than_max_samples_is_refused_before_any_work():
    """The limit is checked first: with q and k also given (another error), the samples message wins."""
    cfg = RopeConfig(8, layout="half")
    for samples in (10_000_001, 10**12):
        with pytest.raises(ValueError, match="samples must be <= 10000000"):
            decay.score_curve([0.0], cfg, np.ones(8), np.ones(8), samples=samples)



def _irwin_hall_by_hand(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """12 uniforms added in order, minus 6 (the documented draw of rope_ref._fixed.irwin_hall)."""
    total = np.zeros(shape)
    for _ in range(12):
        total = total + rng.random(shape)
    return total - 6.0


def test_sampled_curve_draws_q_then_eps_per_chunk_of_2_16_rows_at_head_dim_8():
    """docs: chunk c draws its q rows, then its eps rows. At head_dim 8 the 32 MiB budget holds 65536 rows
    of 8 float64 arrays, so 65540 samples are two chunks (65536 + 4); the stream is consumed in that order."""
    cfg = RopeConfig(8, layout="half")
    samples, seed, rho = 65540, 7, 0.6
    rng = np.random.default_rng(seed)
    sums = np.zeros(4, dtype=np.complex128)
    for count in (65536, 4):
        q = _irwin_hall_by_hand(rng, (count, 8))
        k = rho * q + math.sqrt(1 - rho * rho) * _irwin_hall_by_hand(rng, (count, 8))
        zq, zk = q[:, :4] + 1j * q[:, 4:], k[:, :4] + 1j * k[:, 4:]
        sums += (zq * np.conj(zk)).sum(axis=0)
    h = sums / samples
    r = np.array([0.0, 2.0, 37.0])
    theta = 10000.0 ** (-np.arange(4) / 4)
    want = [sum((h[i] * complex(math.cos(x * theta[i]), math.sin(x * theta[i]))).real for i in range(4))
            for x in r]
    got = decay.score_curve(r, cfg, samples=samples, seed=seed, correlation=rho)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


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


def test_plot_decay_axes_png_size_and_window_limits(tmp_path):
    cfg = RopeConfig(16, layout="half")
    with pytest.raises(ValueError, match="at least one"):
        decay.plot_decay([], 10)
    fig = decay.plot_decay(cfg, 5, window=6, path=str(tmp_path / "a.png"))  # 6 distances, one mean
    line = fig.axes[0].get_lines()[0]
    assert list(line.get_xdata()) == [2.5]
    png = (tmp_path / "a.png").read_bytes()
    # IHDR: width and height big-endian at bytes 16..24; 7 x 4 inches at the default 100 dpi.
    assert int.from_bytes(png[16:20], "big") == 700 and int.from_bytes(png[20:24], "big") == 400
    ax = decay.plot_decay(cfg, 20, step=0.5, log_x=True).axes[0]
    assert ax.get_xscale() == "symlog" and ax.xaxis.get_transform().linthresh == 1.0
    ax = decay.plot_decay(cfg, 20, step=2.0, log_x=True).axes[0]
    assert ax.xaxis.get_transform().linthresh == 2.0
    assert ax.xaxis.get_gridlines()[0].get_alpha() == 0.3
    assert decay.plot_decay(cfg, 20).axes[0].get_xscale() == "linear"


# -- scaling ---------------------------------------------------------------------------------------------


def _mp_theta(base: float, d: int) -> list:
    with mpmath.workdps(40):
        return [mpmath.power(mpmath.mpf(base), -mpmath.mpf(2 * i) / d) for i in range(d // 2)]


def test_longrope_and_yarn_derive_a_fractional_factor_by_true_division():
    """HF: factor = max_position_embeddings / original_max_position_embeddings, a float (6000/4096 =
    1.46484375 exactly), never floor division (which would give 1 and drop the attention factor)."""
    n = 8
    d = {"rope_type": "longrope", "short_factor": [1.0] * n, "long_factor": [2.0] * n,
         "original_max_position_embeddings": 4096}
    longrope = rope_ref.scaling_from_hf(d, max_position_embeddings=6000)
    assert longrope.factor == 1.46484375
    want = math.sqrt(1 + math.log(1.46484375) / math.log(4096))
    assert longrope.attention_factor() == pytest.approx(want, rel=4 * U64)
    yarn = rope_ref.scaling_from_hf({"rope_type": "yarn", "original_max_position_embeddings": 4096},
                                    max_position_embeddings=6000)
    assert yarn.factor == 1.46484375
    assert yarn.attention_factor() == pytest.approx(0.1 * math.log(1.46484375) + 1, rel=4 * U64)


@pytest.mark.parametrize(("seq_len", "d"), [(128, 16), (1000, 64), (65, 4)])
def test_dynamic_ntk_scaled_base_closed_form(seq_len, d):
    """base' = base * (1 + factor (L - L0) / L0)^(d / (d - 2)) (HF _compute_dynamic_ntk_parameters)."""
    scaling = rope_ref.DynamicNTK(2.0, 64)
    with mpmath.workdps(40):
        growth = 1 + mpmath.mpf(2) * (seq_len - 64) / 64
        want = float(10000 * growth ** (mpmath.mpf(d) / (d - 2)))
    assert scaling.scaled_base(10000.0, d, seq_len) == pytest.approx(want, rel=2 * U64)
    assert scaling.scaled_base(10000.0, d, 64) == 10000.0
    assert scaling.scaled_base(10000.0, d, None) == 10000.0
    # The table is the default table of that base.
    got = rope_ref.inv_freq(RopeConfig(d, layout="half", scaling=scaling), seq_len)
    with mpmath.workdps(40):
        base_mp = 10000 * growth ** (mpmath.mpf(d) / (d - 2))
        want_t = [float(mpmath.power(base_mp, -mpmath.mpf(2 * i) / d)) for i in range(d // 2)]
    np.testing.assert_allclose(got, want_t, rtol=2 * U64, atol=0)


def test_ntk_scaled_base_closed_form_and_overflow():
    with mpmath.workdps(40):
        want = float(10000 * mpmath.mpf(8) ** (mpmath.mpf(128) / 126))
    assert rope_ref.NTKAware(8.0).scaled_base(10000.0, 128) == pytest.approx(want, rel=2 * U64)
    with pytest.raises(ValueError, match="overflows float64"):
        rope_ref.NTKAware(1e10).scaled_base(1e300, 4)  # 1e300 * 1e20
    with pytest.raises(ValueError, match="overflows float64"):
        rope_ref.DynamicNTK(1e300, 1).scaled_base(1e300, 4, 10)


@pytest.mark.parametrize("values", [5, 2.0, {1.0, 2.0}, "12", b"12", {"a": 1.0}, (v for v in [1.0])])
def test_longrope_factor_lists_must_be_sequences(values):
    with pytest.raises(TypeError, match="short_factor must be a sequence of numbers"):
        rope_ref.LongRoPE(values, [1.0], 2)
    with pytest.raises(TypeError, match="long_factor must be a sequence of numbers"):
        rope_ref.LongRoPE([1.0], values, 2)


def test_longrope_factor_lists_accept_tuples_lists_and_arrays():
    for values in ([1.0, 2.0], (1.0, 2.0), np.array([1.0, 2.0])):
        assert rope_ref.LongRoPE(values, values, 2).short_factor == (1.0, 2.0)


# -- rotation: the table cache and blocking (results never depend on them; memory and reuse do) ----------


def _tables_key_args(n_pos: int, n_freq: int):
    pos = np.arange(float(n_pos))
    freqs = 10000.0 ** (-np.arange(n_freq) / n_freq)
    return pos, freqs


def test_table_cache_keeps_small_tables_and_hands_back_the_same_frozen_object():
    from rope_ref.rotation import _TableCache

    # Budget 768 bytes: a table set counts 3 * positions * pairs * 2 * 8 bytes and is cached when that is
    # at most a quarter of the budget (192 bytes): 1 position x 4 pairs is exactly 192.
    cache = _TableCache(768)
    pos, freqs = _tables_key_args(1, 4)
    first = cache.get(pos, freqs, 1.0, "half")
    assert cache.get(pos.copy(), freqs.copy(), 1.0, "half") is first
    assert all(not a.flags.writeable for a in first.parts)
    assert not first.zero.flags.writeable
    # Any difference in the key (factor, layout, positions, frequencies) is a different entry.
    assert cache.get(pos, freqs, 0.5, "half") is not first
    assert cache.get(pos, freqs, 1.0, "interleaved") is not first
    assert cache.get(pos + 1, freqs, 1.0, "half") is not first
    assert cache.get(pos, freqs * 2, 1.0, "half") is not first
    # 2 positions x 4 pairs (384 bytes counted) is over a quarter of the budget: built, never cached.
    pos2, _ = _tables_key_args(2, 4)
    big = cache.get(pos2, freqs, 1.0, "half")
    assert cache.get(pos2, freqs, 1.0, "half") is not big
    assert all(a.flags.writeable for a in big.parts)


def test_table_cache_evicts_least_recently_used_and_counts_bytes():
    from rope_ref.rotation import _TableCache

    pos, freqs = _tables_key_args(1, 4)
    # One half-layout table set holds two (1, 8) float64 arrays and a (1, 1) bool: 128 + 1 bytes.
    cache = _TableCache(1000)
    a = cache.get(pos, freqs, 1.0, "half")
    assert a.nbytes == 2 * 8 * 8 + 1 and cache._bytes == a.nbytes
    cache.get(pos + 1, freqs, 1.0, "half")
    assert cache._bytes == 2 * a.nbytes and len(cache._items) == 2
    # Budget 768: five sets (645 bytes) fit, a sixth (774) evicts the least recently used one.
    small = _TableCache(768)
    sets = [small.get(pos + k, freqs, 1.0, "half") for k in range(5)]
    assert small.get(pos, freqs, 1.0, "half") is sets[0]  # set 0 is now the most recently used
    sixth = small.get(pos + 5, freqs, 1.0, "half")
    assert len(small._items) == 5 and small._bytes == 5 * 129
    assert small.get(pos, freqs, 1.0, "half") is sets[0] and small.get(pos + 5, freqs, 1.0, "half") is sixth
    assert small.get(pos + 2, freqs, 1.0, "half") is sets[2]
    assert small.get(pos + 1, freqs, 1.0, "half") is not sets[1]  # set 1 was evicted
    # Exactly at the budget is not over it: six sets of 129 bytes in a 774-byte cache all stay.
    exact = _TableCache(774)
    six = [exact.get(pos + k, freqs, 1.0, "half") for k in range(6)]
    assert exact._bytes == 774 and all(exact.get(pos + k, freqs, 1.0, "half") is six[k] for k in range(6))
    # A factor != 1 has no zero mask; its bytes are just the two tables.
    f = _TableCache(1000).get(pos, freqs, 0.5, "half")
    assert f.zero is None and f.nbytes == 2 * 8 * 8



def test_table_cache_threshold_is_a_quarter_of_the_budget_counting_48_bytes_per_entry():
    """A table set is counted as 3 * positions * pairs * 2 * 8 bytes: 1 position x 8 pairs is 384, cached
    when 384 <= budget // 4, so with a budget of 1536 but not 1535."""
    from rope_ref.rotation import _TableCache

    pos, freqs = _tables_key_args(1, 8)
    at = _TableCache(1536)
    assert at.get(pos, freqs, 1.0, "half") is at.get(pos, freqs, 1.0, "half")
    below = _TableCache(1535)
    assert below.get(pos, freqs, 1.0, "half") is not below.get(pos, freqs, 1.0, "half")
    pos3, _ = _tables_key_args(3, 8)  # 1152 counted bytes
    assert _TableCache(4608).get(pos3, freqs, 1.0, "half") is not None
    at3 = _TableCache(4608)
    assert at3.get(pos3, freqs, 1.0, "half") is at3.get(pos3, freqs, 1.0, "half")
    below3 = _TableCache(4607)
    assert below3.get(pos3, freqs, 1.0, "half") is not below3.get(pos3, freqs, 1.0, "half")


def test_layout_compared_by_value_not_identity():
    """A layout string built at run time (not the interned literal) must select the same kernel."""
    from rope_ref.rotation import _TableCache, _Tables

    half = "".join(["ha", "lf"])
    pos, freqs = _tables_key_args(2, 4)
    tables = _Tables(pos, freqs, 1.0, half)
    assert tables.parts[1].dtype == np.float64 and tables.parts[0].shape == (2, 8)
    np.testing.assert_array_equal(tables.parts[1][:, 4:], -tables.parts[1][:, :4])
    assert _TableCache(1 << 20).get(pos[:1], freqs, 1.0, half).parts[1].dtype == np.float64
    cfg = RopeConfig(8, layout=half)
    x = np.random.default_rng(3).standard_normal((5, 8))
    want = rope_ref.apply(x, 7.0, RopeConfig(8, layout="half"))
    np.testing.assert_array_equal(rope_ref.apply(x, 7.0, cfg), want)


@pytest.fixture
def fresh_cache(monkeypatch):
    from rope_ref import rotation

    cache = rotation._TableCache(rotation._TABLE_CACHE_BYTES)
    monkeypatch.setattr(rotation, "_TABLE_CACHE", cache)
    return cache


def test_tables_shared_and_cached_only_when_small_next_to_x(fresh_cache):
    """Broadcast or small positions: one cached table set. Positions nearly as large as x: tables per block,
    nothing cached (so peak memory stays a few blocks)."""
    cfg = RopeConfig(8, layout="half")
    x = np.ones((200, 8))
    rope_ref.apply(x, np.arange(200.0), cfg)  # 200 * 8 table entries > 1600 // 4
    assert len(fresh_cache._items) == 0
    rope_ref.apply(x, 3.0, cfg)
    assert len(fresh_cache._items) == 1
    # Exactly at the limit: x (4, 4, 8) has 128 elements; positions (4, 1) times 8 channels is 32 = 128 // 4.
    rope_ref.apply(np.ones((4, 4, 8)), np.arange(4.0)[:, None], cfg)
    assert len(fresh_cache._items) == 2
    # Over the limit: positions (5, 1) on x (5, 2, 8): 40 > 80 // 4.
    rope_ref.apply(np.ones((5, 2, 8)), np.arange(5.0)[:, None], cfg)
    assert len(fresh_cache._items) == 2


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize(
    ("shape", "blocks"),
    # 8 elements per row: 8192 rows per block. (3, 40000, 4): rows along axis 1 hold 12 elements, 5461 of
    # them per block (65532 elements), 7 full blocks and 1773 rows left.
    [((20000, 8), [8192, 8192, 3616]), ((3, 40000, 4), [5461] * 7 + [1773])],
)
def test_blocks_hold_at_most_2_16_elements_and_no_more_blocks_than_needed(monkeypatch, layout, shape, blocks):
    """Blocking runs over the longest leading axis in blocks of 2**16 elements (512 KiB of float64)."""
    from rope_ref import rotation

    seen = []
    name = "_rotate_half_block" if layout == "half" else "_rotate_interleaved_block"
    real = getattr(rotation, name)

    def recording(out, x, *rest):
        seen.append(x.shape)
        return real(out, x, *rest)

    monkeypatch.setattr(rotation, name, recording)
    cfg = RopeConfig(shape[-1], layout=layout)
    x = np.ones(shape)
    y = rope_ref.apply(x, 2.0, cfg)
    axis = int(np.argmax(shape[:-1]))
    assert [s[axis] for s in seen] == blocks
    assert all(math.prod(s) <= 1 << 16 for s in seen)
    np.testing.assert_array_equal(y, np.broadcast_to(y[(0,) * (len(shape) - 1)], shape))

@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_position_zero_is_the_identity_in_every_block_when_positions_broadcast(layout):
    """20000 rows span several blocks; the scalar position 0 broadcasts along them. Every row must come
    back bit for bit, including -0.0 (x*1 - y*0 would give +0.0) and an infinity's partner (inf*0 is NaN)."""
    cfg = RopeConfig(8, layout=layout)
    x = np.random.default_rng(31).standard_normal((20000, 8))
    x[::997, 0] = -0.0
    x[19999, 1] = -0.0
    x[15000] = [np.inf, 2.0, -3.0, 4.0, 5.0, -np.inf, 7.0, 8.0]
    for pos in (0, np.zeros(1), np.zeros(20000)):
        with np.errstate(invalid="ignore"):  # inf * 0 in the formula, before the identity copy
            y = rope_ref.apply(x, pos, cfg)
        assert np.array_equal(y, x) and np.array_equal(np.signbit(y), np.signbit(x))
    # Per-batch positions (3, 1) broadcast along a blocked axis of 20000: batch 1 is at position 0.
    xb = np.stack([x, x, x])
    with np.errstate(invalid="ignore"):
        y = rope_ref.apply(xb, np.array([[5.0], [0.0], [7.0]]), cfg)
    assert np.array_equal(y[1], x) and np.array_equal(np.signbit(y[1]), np.signbit(x))


def test_interleaved_rotation_with_an_infinite_input_uses_the_plain_formula():
    """An infinity makes the complex kernel raise (0 * inf); the block is recomputed pair by pair with
    y_a = x_a c - x_b s, y_b = x_b c + x_a s. The finite pairs must still be rotated exactly so."""
    cfg = RopeConfig(8, layout="interleaved")
    m = 3.0
    x = np.array([[np.inf, 1.0, 2.0, -3.0, 0.5, 4.0, -1.5, 2.5], [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]])
    with np.errstate(invalid="ignore"):
        y = rope_ref.apply(x, m, cfg)
    with mpmath.workdps(40):
        for row in range(2):
            for i in range(1, 4):
                ang = m * mpmath.power(10000, -mpmath.mpf(2 * i) / 8)
                c, s = mpmath.cos(ang), mpmath.sin(ang)
                a, b = x[row, 2 * i], x[row, 2 * i + 1]
                want_a, want_b = float(a * c - b * s), float(b * c + a * s)
                tol = 8 * U64 * (abs(a) + abs(b))
                assert abs(y[row, 2 * i] - want_a) <= tol and abs(y[row, 2 * i + 1] - want_b) <= tol
    # Pair 0 of row 0: inf * cos(3) - 1 * sin(3) with cos(3) < 0 is -inf; 1 * cos(3) + inf * sin(3) is +inf.
    assert y[0, 0] == -np.inf and y[0, 1] == np.inf



# -- frequencies ---------------------------------------------------------------------------------------


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


# -- scaling, continued: reprs, HF dict edges, overflow, fresh tables -------------------------------------


def test_scaling_reprs_show_only_non_default_fields():
    yarn = rope_ref.YaRN
    assert repr(yarn(4.0, 4096)) == "YaRN(factor=4.0, original_max_position=4096)"
    assert repr(yarn(4.0, 4096, beta_fast=16.0)) == (
        "YaRN(factor=4.0, original_max_position=4096, beta_fast=16.0, beta_slow=1.0)")
    assert repr(yarn(4.0, 4096, beta_slow=2.0)) == (
        "YaRN(factor=4.0, original_max_position=4096, beta_fast=32.0, beta_slow=2.0)")
    assert repr(yarn(4.0, 4096, mscale=0.5, mscale_all_dim=0.0, attention_factor=1.5, truncate=False)) == (
        "YaRN(factor=4.0, original_max_position=4096, mscale=0.5, mscale_all_dim=0.0, attention_factor=1.5, "
        "truncate=False)")
    lr = rope_ref.LongRoPE([1.0, 2.0], [3.0, 4.0], 64)
    assert repr(lr) == "LongRoPE(short_factor=<2 values>, long_factor=<2 values>, original_max_position=64)"
    assert repr(rope_ref.LongRoPE([1.0], [3.0], 64, factor=2.0, attention_factor=1.25)) == (
        "LongRoPE(short_factor=<1 values>, long_factor=<1 values>, original_max_position=64, factor=2.0, "
        "attention_factor=1.25)")


def test_to_hf_writes_optional_keys_only_when_set():
    assert rope_ref.YaRN(4.0, 64).to_hf() == {
        "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "beta_fast": 32.0,
        "beta_slow": 1.0, "truncate": True}
    full = rope_ref.YaRN(4.0, 64, mscale=1.0, mscale_all_dim=0.5, attention_factor=2.0).to_hf()
    assert (full["mscale"], full["mscale_all_dim"], full["attention_factor"]) == (1.0, 0.5, 2.0)
    assert rope_ref.LongRoPE([1.0], [2.0], 64).to_hf() == {
        "rope_type": "longrope", "short_factor": [1.0], "long_factor": [2.0],
        "original_max_position_embeddings": 64}
    lr = rope_ref.LongRoPE([1.0], [2.0], 64, factor=3.0, attention_factor=1.5).to_hf()
    assert (lr["factor"], lr["attention_factor"]) == (3.0, 1.5)
    assert rope_ref.NTKAware(2.0).to_hf() == {"rope_type": "ntk", "factor": 2.0}
    assert rope_ref.Llama3(8.0, 1.0, 4.0, 8192).to_hf() == {
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192}


def test_yarn_get_mscale_is_one_up_to_scale_one():
    from rope_ref.scaling import yarn_get_mscale

    for scale in (0.25, 1.0):
        assert yarn_get_mscale(scale) == 1.0
        assert yarn_get_mscale(scale, 7.0) == 1.0
    assert yarn_get_mscale(math.e, 0.5) == pytest.approx(1.05, rel=4 * U64)
    assert yarn_get_mscale(2.0) == pytest.approx(1 + 0.1 * math.log(2.0), rel=4 * U64)


def test_yarn_mscale_zero_and_beta_equal_are_accepted():
    assert rope_ref.YaRN(4.0, 64, mscale=0.0, mscale_all_dim=0.0).mscale == 0.0
    assert rope_ref.YaRN(4.0, 64, beta_fast=2.0, beta_slow=2.0).beta_slow == 2.0
    with pytest.raises(ValueError, match="mscale_all_dim must be >= 0"):
        rope_ref.YaRN(4.0, 64, mscale_all_dim=-0.5)
    with pytest.raises(ValueError, match="beta_slow must be > 0"):
        rope_ref.YaRN(4.0, 64, beta_fast=1.0, beta_slow=0.0)
    with pytest.raises(ValueError, match="attention_factor must be > 0"):
        rope_ref.LongRoPE([1.0], [1.0], 64, attention_factor=-1.0)
    # mscale 2 against mscale_all_dim 1: (0.2 ln 4 + 1) / (0.1 ln 4 + 1).
    got = rope_ref.YaRN(4.0, 64, mscale=2.0, mscale_all_dim=1.0).attention_factor()
    assert got == pytest.approx((0.2 * math.log(4) + 1) / (0.1 * math.log(4) + 1), rel=4 * U64)
    assert rope_ref.YaRN(4.0, 64, mscale=0.0, mscale_all_dim=1.0).attention_factor() == pytest.approx(
        0.1 * math.log(4) + 1, rel=4 * U64)


def test_llama3_band_factors_must_be_ordered_and_positive():
    with pytest.raises(ValueError, match="low_freq_factor must be < high_freq_factor"):
        rope_ref.Llama3(8.0, 4.0, 4.0, 8192)
    with pytest.raises(ValueError, match="high_freq_factor must be > 0"):
        rope_ref.Llama3(8.0, 1.0, 0.0, 8192)
    assert rope_ref.Llama3(1.0, 0.5, 0.75, 8192).factor == 1.0


def test_tables_overflowing_float64_are_value_errors():
    with pytest.raises(ValueError, match="overflows float64"):
        RopeConfig(4, layout="half", scaling=rope_ref.LongRoPE([1e-310, 1.0], [1.0, 1.0], 64))


def test_each_call_returns_a_fresh_table():
    cfg = RopeConfig(8, layout="half", scaling=rope_ref.Linear(2.0))
    first = rope_ref.inv_freq(cfg)
    first[:] = -1.0
    np.testing.assert_allclose(rope_ref.inv_freq(cfg), [float(t) / 2 for t in _mp_theta(10000.0, 8)],
                               rtol=2 * U64, atol=0)


@pytest.mark.parametrize(
    ("d", "kwargs", "error", "match"),
    [
        ([("rope_type", "linear")], {}, TypeError, "rope_scaling must be a dict or None, got list"),
        ({"rope_type": 3}, {}, TypeError, "rope_type must be a string, got int"),
        ({"rope_type": "linear", "factor": 2.0, "zeta": 1, "alpha": 2}, {}, ValueError,
         r"unknown keys \['alpha', 'zeta'\]"),
        ({"rope_type": "linear", "factor": None}, {}, ValueError, "missing the key 'factor'"),
        ({"rope_type": "dynamic", "factor": 2.0}, {"max_position_embeddings": 0}, ValueError,
         "max_position_embeddings"),
        ({"rope_type": "dynamic", "factor": 2.0}, {"max_position_embeddings": 4096.0}, TypeError,
         "max_position_embeddings"),
        ({"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": None}, {}, ValueError,
         "missing the key 'original_max_position_embeddings'"),
        ({"rope_type": "longrope", "short_factor": [1.0], "long_factor": None,
          "original_max_position_embeddings": 64}, {}, ValueError, "missing the key 'long_factor'"),
    ],
)
def test_scaling_from_hf_refusals(d, kwargs, error, match):
    with pytest.raises(error, match=match):
        rope_ref.scaling_from_hf(d, **kwargs)


def test_scaling_from_hf_defaults():
    # rope_theta and partial_rotary_factor may sit in any rope dict; truncate defaults to True.
    d = {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 64, "rope_theta": 1e4,
         "partial_rotary_factor": 0.5, "beta_fast": 0, "beta_slow": 0}
    assert rope_ref.scaling_from_hf(d) == rope_ref.YaRN(2.0, 64)
    assert rope_ref.scaling_from_hf(dict(d, truncate=False)).truncate is False
    # LongRoPE without max_position_embeddings keeps factor None (attention factor 1).
    lr = {"rope_type": "longrope", "short_factor": [1.0], "long_factor": [2.0],
          "original_max_position_embeddings": 64}
    assert rope_ref.scaling_from_hf(lr).factor is None
    assert rope_ref.scaling_from_hf(lr, max_position_embeddings=256).factor == 4.0
    assert rope_ref.scaling_from_hf(dict(lr, factor=8.0), max_position_embeddings=256).factor == 8.0
    # The dict's original context wins over max_position_embeddings as the fallback (llama3, yarn).
    l3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}
    assert rope_ref.scaling_from_hf(l3, max_position_embeddings=512).original_max_position == 512
    l3o = dict(l3, original_max_position_embeddings=128)
    assert rope_ref.scaling_from_hf(l3o, max_position_embeddings=512).original_max_position == 128
    assert rope_ref.scaling_from_hf({"type": "default"}) is None
    assert rope_ref.scaling_from_hf({"rope_type": "ntk", "factor": 3.0}) == rope_ref.NTKAware(3.0)


# -- rotation: inverse, axes, single vectors -----------------------------------------------------------------


def _rotated_by_hand(x: np.ndarray, m: float, layout: str, rotary_dim: int | None = None) -> np.ndarray:
    """RoFormer eq. 34 pair by pair at 40 digits, base 10000, rounded once per element."""
    d = rotary_dim or x.shape[-1]
    n = d // 2
    out = np.array(x, dtype=np.float64)
    with mpmath.workdps(40):
        for i, w in enumerate(_mp_theta(10000.0, d)):
            a, b = (i, i + n) if layout == "half" else (2 * i, 2 * i + 1)
            c, s = mpmath.cos(m * w), mpmath.sin(m * w)
            xa, xb = mpmath.mpf(float(x[a])), mpmath.mpf(float(x[b]))
            out[a], out[b] = float(xa * c - xb * s), float(xb * c + xa * s)
    return out


def _close(got: np.ndarray, want: np.ndarray, m: float) -> None:
    tol = 8 * U64 * (1 + abs(m)) * float(np.abs(want).max() + 1)
    np.testing.assert_allclose(got, want, rtol=0, atol=tol)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_inverse_rotates_by_minus_m(layout):
    cfg = RopeConfig(8, layout=layout, rotary_dim=6)
    x = np.random.default_rng(41).standard_normal((3, 8))
    pos = np.array([2.0, 17.5, 300.0])
    for flag in (True, np.bool_(True)):
        y = rope_ref.apply(x, pos, cfg, inverse=flag)
        for row in range(3):
            _close(y[row], _rotated_by_hand(x[row], -pos[row], layout, 6), pos[row])
    forward = rope_ref.apply(x, pos, cfg)
    np.testing.assert_array_equal(rope_ref.apply(x, pos, cfg, inverse=np.bool_(False)), forward)
    for bad in (1, 0, "yes", None):
        with pytest.raises(TypeError, match="inverse must be a bool"):
            rope_ref.apply(x, pos, cfg, inverse=bad)


def test_inverse_keeps_the_forward_sequence_length():
    """Dynamic NTK: the inverse of a forward pass over positions up to 1000 uses the table of length 1001."""
    cfg = RopeConfig(8, layout="half", scaling=rope_ref.DynamicNTK(2.0, 64))
    x = np.random.default_rng(42).standard_normal((2, 8))
    pos = np.array([3.0, 1000.0])
    inv = rope_ref.apply(x, pos, cfg, inverse=True)
    np.testing.assert_array_equal(inv, rope_ref.apply(x, -pos, cfg, seq_len=1001))
    assert not np.allclose(inv, rope_ref.apply(x, -pos, cfg))  # negated positions alone see length 1


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_single_vector_and_hf_ids_with_axes(layout):
    cfg = RopeConfig(8, layout=layout)
    v = np.arange(1.0, 9.0)
    _close(rope_ref.apply(v, 9.0, cfg), _rotated_by_hand(v, 9.0, layout), 9.0)
    _close(rope_ref.apply_complex(v, 9.0, cfg), _rotated_by_hand(v, 9.0, layout), 9.0)
    # x (B=2, H=3, S=4, D=8) with HF (B, S) ids: every head of (b, s) rotates by ids[b, s].
    x = np.random.default_rng(43).standard_normal((2, 3, 4, 8))
    ids = np.array([[0.0, 1.0, 2.0, 3.0], [10.0, 11.0, 40.0, 7.0]])
    y = rope_ref.apply(x, ids, cfg, axes="bhsd")
    yc = rope_ref.apply_complex(x, ids, cfg, axes="bhsd")
    for b, h, s in [(0, 0, 0), (0, 2, 3), (1, 1, 2), (1, 2, 3)]:
        want = _rotated_by_hand(x[b, h, s], ids[b, s], layout)
        _close(y[b, h, s], want, ids[b, s])
        _close(yc[b, h, s], want, ids[b, s])
    # Per-token ids (S,) broadcast over B and H; positions with fewer axes than x broadcast on the left.
    y1 = rope_ref.apply_complex(x, ids[1], cfg, axes="bhsd")
    _close(y1[0, 1, 2], _rotated_by_hand(x[0, 1, 2], 40.0, layout), 40.0)
    y2 = rope_ref.apply_complex(x, ids[1], cfg)
    _close(y2[1, 0, 3], _rotated_by_hand(x[1, 0, 3], 7.0, layout), 7.0)


def test_empty_x_and_zero_dimensional_x():
    cfg = RopeConfig(8, layout="interleaved", rotary_dim=4)
    out = rope_ref.apply(np.ones((0, 8)), np.zeros(0), cfg)
    assert out.shape == (0, 8) and out.dtype == np.float64
    with pytest.raises(ValueError, match="head_dim"):
        rope_ref.apply(np.float64(1.0), 0.0, cfg)


def test_apply_caches_table_sets_up_to_a_quarter_of_64_mib(fresh_cache):
    """The table cache of apply may keep 64 MiB; one set is cached when counted at <= 16 MiB. With 4 pairs
    a position counts 3 * 4 * 2 * 8 = 192 bytes, so 87381 positions (16777152 bytes) are cached and 87382
    (16777344 > 16777216) are not. x has 4 rows per position, so the table is small next to x."""
    cfg = RopeConfig(8, layout="half")
    for count, cached in ((87381, 1), (87382, 0)):
        fresh_cache._items.clear()
        fresh_cache._bytes = 0
        rope_ref.apply(np.ones((4, count, 8)), np.arange(float(count)), cfg)
        assert len(fresh_cache._items) == cached, count


def test_scaling_from_hf_compares_rope_types_by_value():
    """Strings parsed from config.json are equal to, not the same objects as, the literals in the code."""
    text = """[
        {"rope_type": "linear", "factor": 2.0},
        {"rope_type": "ntk", "factor": 2.0},
        {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 64},
        {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 64},
        {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
         "original_max_position_embeddings": 64},
        {"rope_type": "longrope", "short_factor": [1.0], "long_factor": [2.0],
         "original_max_position_embeddings": 64},
        {"rope_type": "default"}
    ]"""
    got = [rope_ref.scaling_from_hf(d) for d in json.loads(text)]
    assert got == [rope_ref.Linear(2.0), rope_ref.NTKAware(2.0), rope_ref.DynamicNTK(2.0, 64),
                   rope_ref.YaRN(2.0, 64), rope_ref.Llama3(8.0, 1.0, 4.0, 64),
                   rope_ref.LongRoPE([1.0], [2.0], 64), None]


def test_widest_rotary_table_itself_is_accepted(monkeypatch):
    """The limit is inclusive. Checked with the limit lowered to 8 (a 2**20-wide table takes seconds)."""
    from rope_ref import frequencies

    monkeypatch.setattr(frequencies, "MAX_ROTARY_DIM", 8)
    np.testing.assert_allclose(rope_ref.default_inv_freq(10000.0, 8), [float(t) for t in _mp_theta(1e4, 8)],
                               rtol=2 * U64, atol=0)
    with pytest.raises(ValueError, match=r"in \[2, 8\], got 10"):
        rope_ref.default_inv_freq(10000.0, 10)


def test_default_table_cache_keeps_512_entries():
    from rope_ref.frequencies import _default_inv_freq_cached

    assert _default_inv_freq_cached.cache_info().maxsize == 512


def test_decay_broadcast_errors_are_value_errors_with_their_own_message():
    cfg = RopeConfig(16, layout="half")
    q3, k4 = np.ones((3, 16)), np.ones((4, 16))
    with pytest.raises(ValueError, match=r"q of shape \(3, 16\) and k of shape \(4, 16\) do not broadcast"):
        decay.abel_bound(q3, k4, 1.0, cfg)
    with pytest.raises(ValueError, match=r"distance of shape \(5,\) does not broadcast against q/k shape"):
        decay.abel_bound(q3, q3, np.arange(5.0), cfg)
    with pytest.raises(ValueError, match=r"q of shape \(3, 16\) and k of shape \(4, 16\) do not broadcast"):
        decay.score_curve([0.0], cfg, q3, k4)


def test_plot_decay_grid_and_labels():
    cfg = RopeConfig(16, layout="half")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # e.g. "grid() is false, but line properties are supplied"
        ax = decay.plot_decay(cfg, 20).axes[0]
    assert ax.xaxis.get_gridlines()[0].get_visible() and ax.yaxis.get_gridlines()[0].get_visible()
    plain = "relative upper bound (1/(d/2)) sum |S_j|"
    assert ax.get_ylabel() == plain and ax.get_xlabel() == "relative distance m - n"
    assert ax.get_title() == "RoPE long-term decay (RoFormer §3.4.3)"
    ax2 = decay.plot_decay(cfg, 20, window=3, title="T").axes[0]
    assert ax2.get_ylabel() == plain + "\nmoving mean over 3 distances" and ax2.get_title() == "T"


@pytest.mark.parametrize(
    ("make", "name"),
    [
        (lambda: rope_ref.Llama3(8.0, -1.0, 4.0, 8192), "low_freq_factor must be > 0"),
        (lambda: rope_ref.Llama3(8.0, -4.0, -1.0, 8192), "low_freq_factor must be > 0"),
        (lambda: rope_ref.YaRN(4.0, 64, beta_fast=32.0, beta_slow=-1.0), "beta_slow must be > 0"),
        (lambda: rope_ref.YaRN(4.0, 64, beta_fast=-1.0, beta_slow=-2.0), "beta_fast must be > 0"),
    ],
)
def test_negative_where_a_positive_value_is_required_is_refused(make, name):
    with pytest.raises(ValueError, match=name):
        make()


def test_positions_broadcast_along_the_block_axis_share_one_cached_table(fresh_cache):
    """x (3, 3, 8), positions (1, 3): the block axis is 0 and the positions broadcast along it, so one table
    set is shared (and cached) even though 3 positions x 8 channels exceed x.size // 4."""
    cfg = RopeConfig(8, layout="half")
    x = np.random.default_rng(51).standard_normal((3, 3, 8))
    y = rope_ref.apply(x, np.array([[1.0, 2.0, 3.0]]), cfg)
    assert len(fresh_cache._items) == 1
    _close(y[2, 1], _rotated_by_hand(x[2, 1], 2.0, "half"), 2.0)


def test_apply_complex_options_are_keyword_only():
    cfg = RopeConfig(8, layout="half")
    x = np.ones((2, 8))
    got = rope_ref.apply_complex(x=x, positions=[1.0, 2.0], cfg=cfg, seq_len=4)
    _close(got[1], _rotated_by_hand(x[1], 2.0, "half"), 2.0)
    with pytest.raises(TypeError):
        rope_ref.apply_complex(x, [1.0, 2.0], cfg, 4)


def test_yarn_high_index_is_clamped_to_d_minus_1():
    """base 100, L0 = 10**6, d = 8: corr(beta_slow = 1) = 8 ln(10**6 / 2 pi) / (2 ln 100) = 10.40, ceil 11,
    clamped to d - 1 = 7 (HF: min(high, dim - 1)); beta_fast = 10**6 puts low below 0, clamped to 0."""
    scaling = rope_ref.YaRN(4.0, 10**6, beta_fast=1e6, beta_slow=1.0)
    assert scaling.correction_range(100.0, 8) == (0.0, 7.0)
    np.testing.assert_allclose(scaling.ramp(100.0, 8), [0.0, 1 / 7, 2 / 7, 3 / 7], rtol=2 * U64, atol=0)
