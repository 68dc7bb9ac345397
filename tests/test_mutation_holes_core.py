"""Oracle behaviours that once survived a mutation run (issue 21): each test here fails on that mutant.

Expected values are derived independently of ``rope_ref``: explicit rotation matrices and scaling formulas
evaluated with mpmath at 40 digits, hand-written ChatGLM-6B position ids (``docs/chatglm.md``), and
algebraic identities. Tolerances are float64 error bounds: a few unit roundoffs u = 2^-53 times the
magnitude, with the angle's relative error amplified by ``|angle|``.
"""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

import rope_ref
from rope_ref import DynamicNTK, LongRoPE, RopeConfig, YaRN, chatglm
from rope_ref.decay import decay_distances, score_curve

U64 = 2.0**-53
DPS = 40


# -- independent derivations ------------------------------------------------------------------------


def mp_default_freqs(base: float, rotary_dim: int) -> list[mpmath.mpf]:
    """theta_i = base^(-2i/d) at 40 digits (RoFormer eq. 15)."""
    with mpmath.workdps(DPS):
        return [
            mpmath.power(mpmath.mpf(base), -mpmath.mpf(2 * i) / rotary_dim) for i in range(rotary_dim // 2)
        ]


def mp_yarn_freqs(base: float, d: int, factor: float, l0: int, fast: float = 32.0, slow: float = 1.0) -> list:
    """HF ``_compute_yarn_parameters`` inverse frequencies (truncate=True), written out in mpmath."""
    with mpmath.workdps(DPS):

        def corr(rotations: float) -> mpmath.mpf:
            return d * mpmath.log(l0 / (rotations * 2 * mpmath.pi)) / (2 * mpmath.log(base))

        low = max(mpmath.floor(corr(fast)), 0)
        high = min(mpmath.ceil(corr(slow)), d - 1)
        assert low != high, "pick parameters with a non-degenerate ramp"
        out = []
        for i, theta in enumerate(mp_default_freqs(base, d)):
            ramp = min(max((i - low) / (high - low), 0), 1)
            out.append(theta / factor * ramp + theta * (1 - ramp))
        return out


def mp_rotation(position: float, freqs: list, factor: float, head_dim: int, layout: str) -> np.ndarray:
    """The explicit block-diagonal R (RoFormer eq. 13) times the attention factor, rounded to float64."""
    n = len(freqs)
    r = np.eye(head_dim)
    with mpmath.workdps(DPS):
        for i, w in enumerate(freqs):
            a, b = (i, i + n) if layout == "half" else (2 * i, 2 * i + 1)
            ang = mpmath.mpf(position) * w
            c, s = float(factor * mpmath.cos(ang)), float(factor * mpmath.sin(ang))
            r[a, a], r[a, b], r[b, a], r[b, b] = c, -s, s, c
    return r


def rotation_tol(x: np.ndarray, position: float, freqs: list, factor: float) -> float:
    """Float64 bound for a rotated element: ``A |x| (8 u (1 + |m theta_max|))``."""
    top = max(abs(float(position * w)) for w in freqs)
    return abs(factor) * float(np.abs(x).max()) * 8 * U64 * (1 + top) + 1e-300


# -- attention factor below 1 --------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("factor", [0.5, 0.25, 1.5])
def test_yarn_explicit_attention_factor_scales_cos_sin_and_rotation(layout, factor):
    """``factor != 1`` (not ``> 1``): A = 0.5 halves cos and sin, so every pair's radius halves too."""
    cfg = RopeConfig(8, layout=layout, scaling=YaRN(4.0, 64, attention_factor=factor))
    freqs = mp_yarn_freqs(10000.0, 8, 4.0, 64)
    positions = np.array([0.0, 1.0, 7.0, 100.0, 2049.5])
    cos, sin = rope_ref.cos_sin(positions, cfg)
    for row, m in enumerate(positions):
        with mpmath.workdps(DPS):
            want_c = [float(factor * mpmath.cos(m * w)) for w in freqs]
            want_s = [float(factor * mpmath.sin(m * w)) for w in freqs]
        tol = rotation_tol(np.ones(1), m, freqs, factor)
        np.testing.assert_allclose(cos[row], want_c, rtol=0, atol=tol)
        np.testing.assert_allclose(sin[row], want_s, rtol=0, atol=tol)
    np.testing.assert_allclose(np.hypot(cos, sin), factor, rtol=8 * U64, atol=0)
    x = np.random.default_rng(11).standard_normal((positions.size, 8))
    y = rope_ref.apply(x, positions, cfg)
    y_complex = rope_ref.apply_complex(x, positions, cfg)
    for row, m in enumerate(positions):
        r = mp_rotation(m, freqs, factor, 8, layout)
        tol = rotation_tol(x[row], m, freqs, factor)
        np.testing.assert_allclose(y[row], r @ x[row], rtol=0, atol=tol)
        np.testing.assert_allclose(y_complex[row], r @ x[row], rtol=0, atol=tol)
        np.testing.assert_allclose(rope_ref.rotation_matrix(m, cfg), r, rtol=0, atol=tol / np.abs(x).max())
    # Position 0 is not the identity when A != 1: it scales by A.
    np.testing.assert_allclose(y[0], factor * x[0], rtol=2 * U64, atol=0)


# -- rope_ref.angles() resolves seq_len for length-dependent scalings ----------------------------------


def test_angles_use_max_position_plus_one_for_dynamic_ntk():
    d, base, factor, l0 = 16, 10000.0, 2.0, 64
    cfg = RopeConfig(d, layout="half", base=base, scaling=DynamicNTK(factor, l0))
    positions = np.array([3.0, 1000.0, 20.0])  # not sorted: the maximum is in the middle
    with mpmath.workdps(DPS):
        length = 1001  # HF dynamic_rope_update: max(position_ids) + 1
        scaled = base * (1 + mpmath.mpf(factor) * (length - l0) / l0) ** (mpmath.mpf(d) / (d - 2))
        freqs = mp_default_freqs(scaled, d)
        want = np.array([[float(m * w) for w in freqs] for m in positions])
    got = rope_ref.angles(positions, cfg)
    np.testing.assert_allclose(got, want, rtol=8 * U64, atol=0)
    # An explicit seq_len wins; seq_len <= L0 leaves the base alone.
    plain = np.array([[float(m * w) for w in mp_default_freqs(base, d)] for m in positions])
    np.testing.assert_allclose(rope_ref.angles(positions, cfg, seq_len=l0), plain, rtol=8 * U64, atol=0)


def test_angles_pick_longrope_long_factors_past_the_original_context():
    short, long = [1.0, 1.5, 2.0, 3.0], [4.0, 5.0, 6.0, 8.0]
    cfg = RopeConfig(8, layout="half", scaling=LongRoPE(short, long, 64))
    base_freqs = mp_default_freqs(10000.0, 8)
    for positions, ext in (([1.0, 63.0], short), ([1.0, 64.0, 2.0], long)):
        want = np.array([[float(m * w / e) for w, e in zip(base_freqs, ext, strict=True)] for m in positions])
        np.testing.assert_allclose(rope_ref.angles(positions, cfg), want, rtol=8 * U64, atol=0)


# -- blocked rotation with broadcast tables ------------------------------------------------------------


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_many_rows_with_one_scalar_position(layout):
    """20000 rows span several blocks; the (1, n) table broadcasts and must not be sliced per block."""
    cfg = RopeConfig(8, layout=layout)
    freqs = mp_default_freqs(10000.0, 8)
    y = rope_ref.apply(np.ones((20000, 8)), 5, cfg)
    want = mp_rotation(5.0, freqs, 1.0, 8, layout) @ np.ones(8)
    np.testing.assert_allclose(
        y, np.broadcast_to(want, y.shape), rtol=0, atol=rotation_tol(np.ones(8), 5, freqs, 1)
    )


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_blocked_axis_broadcast_per_batch_positions(layout):
    """x (3, 20000, 8) is blocked along axis 1 while positions (3, 1) broadcast along it."""
    cfg = RopeConfig(8, layout=layout)
    freqs = mp_default_freqs(10000.0, 8)
    rng = np.random.default_rng(12)
    x = rng.standard_normal((3, 20000, 8))
    pos = np.array([[2.0], [-7.0], [301.0]])
    y = rope_ref.apply(x, pos, cfg)
    for b in range(3):
        r = mp_rotation(pos[b, 0], freqs, 1.0, 8, layout)
        np.testing.assert_allclose(y[b], x[b] @ r.T, rtol=0, atol=4 * rotation_tol(x[b], pos[b, 0], freqs, 1))


# -- ChatGLM-6B ----------------------------------------------------------------------------------------

BOS, MASK, GMASK = chatglm.BOS_TOKEN_ID, chatglm.MASK_TOKEN_ID, chatglm.GMASK_TOKEN_ID


def test_chatglm_first_occurrence_of_each_special_token_wins():
    """``seq.index(bos)`` and ``seq.index(mask_token)`` take the first occurrence (released model)."""
    rows = np.array(
        [
            [5, 6, GMASK, 7, GMASK, BOS, 8, BOS, 9],  # [gMASK] at 2 and 4, <sop> at 5 and 7
            [MASK, 5, MASK, BOS, 6, BOS, 7, 8, 9],  # no [gMASK]: [MASK] at 0 and 2, <sop> at 3 and 5
        ]
    )
    got = chatglm.position_ids(rows)
    want = np.array(
        [
            [[0, 1, 2, 3, 4, 2, 2, 2, 2], [0, 0, 0, 0, 0, 1, 2, 3, 4]],
            [[0, 1, 2, 0, 0, 0, 0, 0, 0], [0, 0, 0, 1, 2, 3, 4, 5, 6]],
        ]
    )
    np.testing.assert_array_equal(got, want)
    one_d = chatglm.position_ids(rows, position_encoding_2d=False)
    np.testing.assert_array_equal(one_d, [[0, 1, 2, 3, 4, 5, 6, 7, 8], [0, 1, 2, 0, 0, 0, 0, 0, 0]])
    np.testing.assert_array_equal(chatglm.next_position_ids(rows), [[[2], [4]], [[0], [6]]])
    np.testing.assert_array_equal(chatglm.next_position_ids(rows, position_encoding_2d=False), [[2], [0]])


def _fp16_midpoint_margin(v: float) -> float:
    """Distance of ``v`` from the nearest float16 rounding midpoint, in float32 ulps of ``v``."""
    h = np.float16(v)
    lo = h if float(h) <= v else np.nextafter(h, np.float16(-np.inf))
    hi = np.nextafter(lo, np.float16(np.inf))
    mid = (float(lo) + float(hi)) / 2
    return abs(v - mid) / float(np.spacing(np.float32(abs(v))))


def released_fp16_table(
    positions: np.ndarray, dim: int, base: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The released ``RotaryEmbedding(precision=half)`` table, derived with mpmath.

    Returns ``(cos, sin, uncertain)``: ``uncertain`` marks entries whose exact value lies within 2 float32
    ulps of a float16 midpoint, where a float32 libm that is not correctly rounded may round the other
    way (one float16 ulp). The float16 inverse frequencies are checked to be far from such midpoints.
    """
    n = dim // 2
    inv16 = []
    with mpmath.workdps(DPS):
        for i in range(n):
            exact = float(mpmath.power(mpmath.mpf(base), -mpmath.mpf(2 * i) / dim))
            assert _fp16_midpoint_margin(exact) > 4, "choose a base whose fp16 inv_freq is unambiguous"
            inv16.append(np.float16(np.float32(exact)))
    cos = np.empty(positions.shape + (dim,), dtype=np.float16)
    sin = np.empty_like(cos)
    uncertain = np.zeros(cos.shape, dtype=bool)
    for idx in np.ndindex(positions.shape):
        t16 = np.float16(positions[idx])
        for i in range(n):
            ang = np.float16(float(t16) * float(inv16[i]))  # exact product, rounded once to fp16
            with mpmath.workdps(DPS):
                c, s = float(mpmath.cos(float(ang))), float(mpmath.sin(float(ang)))
            for j in (i, i + n):
                cos[idx + (j,)] = np.float16(np.float32(c))
                sin[idx + (j,)] = np.float16(np.float32(s))
                uncertain[idx + (j,)] = min(_fp16_midpoint_margin(c), _fp16_midpoint_margin(s)) < 2
    return cos, sin, uncertain


def _fp16_ulp(v: np.ndarray) -> np.ndarray:
    return np.spacing(np.abs(v).astype(np.float16)).astype(np.float64)


@pytest.mark.parametrize("base", [500.0, 123456.0])
def test_chatglm_fp16_table_and_rotation_use_the_given_base(base):
    """``apply_2d(..., base=b, precision="chatglm-6b-fp16")`` must build its table with ``b``."""
    positions = np.array([0, 1, 3, 17, 250, 1999])
    cos, sin, uncertain = released_fp16_table(positions, 16, base)
    got_c, got_s = chatglm.fp16_cos_sin(positions, 16, base)
    for got, want in ((got_c, cos), (got_s, sin)):
        assert got.dtype == np.float16
        assert np.array_equal(got[~uncertain], want[~uncertain])
        assert np.all(np.abs(got.astype(np.float64) - want) <= _fp16_ulp(want))
    # The rotation: x (6 rows, head_dim 32); first half by position_ids, second by block ids.
    x = np.random.default_rng(13).standard_normal((6, 32)).astype(np.float16).astype(np.float64)
    blk = positions[::-1].copy()
    got = chatglm.apply_2d(x, positions, blk, base=base, precision="chatglm-6b-fp16")
    blk_c, blk_s, _ = released_fp16_table(blk, 16, base)
    want = np.empty_like(x)
    for part, c, s in ((slice(0, 16), cos, sin), (slice(16, 32), blk_c, blk_s)):
        q = x[:, part]
        rot = np.concatenate([-q[:, 8:], q[:, :8]], axis=-1)
        want[:, part] = q * c.astype(np.float64) + rot * s.astype(np.float64)
    radius = np.abs(x).max()
    # Three fp16 roundings of size <= |x|, plus one fp16 ulp of a table entry: a few fp16 ulps of |x|.
    np.testing.assert_allclose(got, want, rtol=0, atol=4 * 2.0**-10 * radius)


# -- decay ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rho", [0.0, 0.3, 0.6, 0.95, -0.8])
def test_score_curve_samples_use_unit_variance_keys(rho):
    """k = rho q + sqrt(1 - rho^2) eps: the score is linear in k, so for one seed (same q and eps draws)
    score(rho) = rho * score(rho=1) + sqrt(1 - rho^2) * score(rho=0) exactly up to rounding. Without the
    sqrt the noise term has weight 1 - rho^2 and Var(k_j) = rho^2 + (1 - rho^2)^2 != 1."""
    cfg = RopeConfig(16, layout="half", rotary_dim=12)
    r = np.array([0.0, 1.0, 5.0, 40.5])
    kwargs = {"samples": 64, "seed": 9}
    full = score_curve(r, cfg, correlation=1.0, **kwargs)
    noise = score_curve(r, cfg, correlation=0.0, **kwargs)
    got = score_curve(r, cfg, correlation=rho, **kwargs)
    scale = np.abs(full).max() + np.abs(noise).max()
    np.testing.assert_allclose(got, rho * full + math.sqrt(1 - rho * rho) * noise, rtol=0, atol=1e-13 * scale)
    # The noise term is far above the tolerance, so a wrong weight (0.91 instead of 0.95 at rho=0.3) shows.
    assert np.abs(noise).max() > 1e-6 * scale


def test_score_curve_sample_mean_is_within_five_standard_errors():
    """E[score(r)] = rho * (all-ones curve); the bound is 5 standard errors, derived not tuned.

    One sample's score is sum_i Re(h_i e^{i r theta_i}) with h_i = z_q conj(z_k) per pair; with
    E|z_q|^2 |z_k|^2 <= 8 for unit-variance keys, Var <= 8 n (n pairs), so SE <= sqrt(8 n / samples).
    """
    cfg = RopeConfig(32, layout="half")
    n, samples, rho = 16, 20000, 0.5
    r = np.arange(0.0, 48.0, 3.0)
    ones = [2 * sum(math.cos(x * 10000.0 ** (-2 * i / 32)) for i in range(n)) for x in r]
    got = score_curve(r, cfg, samples=samples, seed=5, correlation=rho)
    np.testing.assert_allclose(got, rho * np.array(ones), rtol=0, atol=5 * math.sqrt(8 * n / samples))


@pytest.mark.parametrize(
    ("max_distance", "step", "count"),
    [(0.3, 0.1, 4), (0.7, 0.1, 8), (2.0, 0.5, 5), (1.0, 0.3, 4), (5.0, 1.0, 6)],
)
def test_decay_distances_keep_the_last_grid_point(max_distance, step, count):
    """0.3 / 0.1 is 2.9999999999999996 in float64: the grid still ends at (about) 0.3."""
    grid = decay_distances(max_distance, step)
    assert grid.shape == (count,)
    np.testing.assert_allclose(grid, [i * step for i in range(count)], rtol=4 * U64, atol=0)
    assert grid[-1] <= max_distance * (1 + 1e-9)


# -- validation ----------------------------------------------------------------------------------------

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


@pytest.mark.parametrize(
    ("make", "name"),
    [
        (lambda: YaRN(4.0, 64, beta_fast=32.0, beta_slow=0.0), "beta_slow"),
        (lambda: YaRN(4.0, 64, beta_fast=0.0, beta_slow=-1.0), "beta_fast"),
        (lambda: YaRN(4.0, 64, attention_factor=0.0), "attention_factor"),
        (lambda: YaRN(4.0, 0), "original_max_position"),
        (lambda: DynamicNTK(2.0, 0), "original_max_position"),
        (lambda: rope_ref.Llama3(8.0, 0.0, 4.0, 64), "low_freq_factor"),
        (lambda: LongRoPE([1.0, 1.0], [1.0, 1.0], 0), "original_max_position"),
        (lambda: decay_distances(0.0), "max_distance"),
        (lambda: decay_distances(1.0, 0.0), "step"),
    ],
)
def test_zero_where_a_positive_value_is_required_is_refused(make, name):
    with pytest.raises(ValueError, match=name):
        make()


def test_yarn_zero_width_ramp_guard():
    """low == high == 0 here (L0 = 1: every correction index is negative). HF adds 0.001 to high, so pair
    0 keeps theta_0 and every other pair is divided by the factor; without the guard 0/0 gives NaN."""
    d, base, factor = 8, 10000.0, 4.0
    scaling = YaRN(factor, 1)
    assert scaling.correction_range(base, d) == (0.0, 0.0)  # the degenerate case, checked by hand:
    assert math.ceil(d * math.log(1 / (2 * math.pi)) / (2 * math.log(base))) == 0
    cfg = RopeConfig(d, layout="half", base=base, scaling=scaling)
    want = [float(w) / (1.0 if i == 0 else factor) for i, w in enumerate(mp_default_freqs(base, d))]
    np.testing.assert_allclose(rope_ref.inv_freq(cfg), want, rtol=4 * U64, atol=0)
