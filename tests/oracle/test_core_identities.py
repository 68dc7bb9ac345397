"""Mathematical identities of the rotation (RoFormer §3.2-3.4), checked with hypothesis.

Each test compares against an independent formulation (explicit matrix, complex numbers, the
relative-position property) rather than against values produced by the function under test.
"""

from __future__ import annotations

import mpmath
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import configs, finite, positions_st, scaled_configs, vectors

import rope_ref
from rope_ref import RopeConfig


def explicit_rotation(x: np.ndarray, m: float, cfg: RopeConfig) -> np.ndarray:
    """R_{Theta,m} x built pair by pair from the definition (RoFormer eq. 13), independent of apply."""
    d = cfg.rotary_dim
    y = np.array(x, dtype=np.float64)
    for i in range(d // 2):
        theta = m * cfg.base ** (-2.0 * i / d)
        a, b = (i, i + d // 2) if cfg.layout == "half" else (2 * i, 2 * i + 1)
        c, s = np.cos(theta), np.sin(theta)
        y[..., a] = x[..., a] * c - x[..., b] * s
        y[..., b] = x[..., b] * c + x[..., a] * s
    return y


@given(cfg=configs(), data=st.data())
def test_elementwise_matrix_complex_and_explicit_forms_agree(cfg, data):
    x = data.draw(vectors(cfg.head_dim, (3,)))
    m = data.draw(positions_st)
    scale = 1 + np.abs(x).max() * (1 + abs(m))
    y = rope_ref.apply(x, m, cfg)
    np.testing.assert_allclose(y, x @ rope_ref.rotation_matrix(m, cfg).T, rtol=0, atol=1e-13 * scale)
    np.testing.assert_allclose(y, rope_ref.apply_complex(x, m, cfg), rtol=0, atol=1e-13 * scale)
    np.testing.assert_allclose(y, explicit_rotation(x, m, cfg), rtol=0, atol=1e-12 * scale)


def mp_scaled_table(cfg: RopeConfig, seq_len: int) -> tuple[list, mpmath.mpf]:
    """``(inv_freq, attention factor)`` of ``cfg`` at ``seq_len``, from the published formulas in mpmath.

    Written from the papers and HF ``modeling_rope_utils.py`` (``shared/notes/peers.md`` §1.1), reading
    only the scaling's parameters: PI divides theta by the factor; NTK-aware and dynamic NTK change the
    base; YaRN ramps linearly in the pair index between floor/ceil correction indices; Llama 3 blends by
    wavelength; LongRoPE divides by the short or long factors around the original context.
    """
    s, d, base = cfg.scaling, cfg.rotary_dim, mpmath.mpf(cfg.base)
    with mpmath.workdps(40):

        def theta(b) -> list:
            return [mpmath.power(b, -mpmath.mpf(2 * i) / d) for i in range(d // 2)]

        def mscale(scale, m=1):
            return 1 if scale <= 1 else mpmath.mpf("0.1") * m * mpmath.log(scale) + 1

        one = mpmath.mpf(1)
        if isinstance(s, rope_ref.Linear):
            return [t / s.factor for t in theta(base)], one
        if isinstance(s, rope_ref.NTKAware):
            return theta(base * mpmath.mpf(s.alpha) ** (mpmath.mpf(d) / (d - 2))), one
        if isinstance(s, rope_ref.DynamicNTK):
            length, l0 = max(seq_len, s.original_max_position), s.original_max_position
            scaled = base * (mpmath.mpf(s.factor) * length / l0 - (s.factor - 1)) ** (mpmath.mpf(d) / (d - 2))
            return theta(scaled), one
        if isinstance(s, rope_ref.YaRN):

            def corr(r):
                return d * mpmath.log(s.original_max_position / (r * 2 * mpmath.pi)) / (2 * mpmath.log(base))

            low = max(mpmath.floor(corr(s.beta_fast)), 0)
            high = min(mpmath.ceil(corr(s.beta_slow)), d - 1)
            if low == high:
                high += mpmath.mpf(0.001)
            ramp = [min(max((i - low) / (high - low), 0), 1) for i in range(d // 2)]
            freqs = [t / s.factor * w + t * (1 - w) for t, w in zip(theta(base), ramp, strict=True)]
            if s.mscale and s.mscale_all_dim:
                return freqs, mscale(s.factor, s.mscale) / mscale(s.factor, s.mscale_all_dim)
            return freqs, mscale(s.factor)
        if isinstance(s, rope_ref.Llama3):
            l0, lo, hi = s.original_max_position, s.low_freq_factor, s.high_freq_factor
            out = []
            for t in theta(base):
                wavelen = 2 * mpmath.pi / t
                if wavelen < l0 / mpmath.mpf(hi):
                    out.append(t)
                elif wavelen > l0 / mpmath.mpf(lo):
                    out.append(t / s.factor)
                else:
                    smooth = (l0 / wavelen - lo) / (hi - lo)
                    out.append((1 - smooth) * t / s.factor + smooth * t)
            return out, one
        if isinstance(s, rope_ref.LongRoPE):
            ext = s.long_factor if seq_len > s.original_max_position else s.short_factor
            assert s.factor is None and s.explicit_attention_factor is None  # strategies use neither
            return [t / e for t, e in zip(theta(base), ext, strict=True)], one
    raise AssertionError(f"no independent formula for {s!r}")


def explicit_pairs(cfg: RopeConfig) -> list[tuple[int, int]]:
    """The rotated channel pairs, from the layout's definition (``rope_ref.config.LAYOUTS``)."""
    half = cfg.rotary_dim // 2
    if cfg.layout == "half":
        return [(i, i + half) for i in range(half)]
    return [(2 * i, 2 * i + 1) for i in range(half)]


@given(cfg=scaled_configs(), data=st.data())
def test_forms_agree_under_every_scaling_type(cfg, data):
    # Expected: the scaled table from the published formulas (mpmath), rotated pair by pair.
    x = data.draw(vectors(cfg.head_dim, (2,)))
    m = data.draw(st.floats(-300, 300, allow_nan=False))
    seq_len = data.draw(st.sampled_from([None, 1, 64, 65, 500]))
    resolved = seq_len if seq_len is not None else max(int(np.floor(m)) + 1, 1)
    freqs, factor = mp_scaled_table(cfg, resolved)
    expected = np.array(x)
    with mpmath.workdps(40):
        for w, (a, b) in zip(freqs, explicit_pairs(cfg), strict=True):
            c, s = float(factor * mpmath.cos(m * w)), float(factor * mpmath.sin(m * w))
            expected[..., a] = x[..., a] * c - x[..., b] * s
            expected[..., b] = x[..., b] * c + x[..., a] * s
    tol = 1e-12 * (1 + np.abs(x).max() * (1 + abs(m)))
    np.testing.assert_allclose(rope_ref.apply(x, m, cfg, seq_len=seq_len), expected, rtol=0, atol=tol)
    np.testing.assert_allclose(rope_ref.apply_complex(x, m, cfg, seq_len=seq_len), expected, rtol=0, atol=tol)
    r = rope_ref.rotation_matrix(m, cfg, seq_len=seq_len)
    np.testing.assert_allclose(x @ r.T, expected, rtol=0, atol=tol)


@given(cfg=configs(), data=st.data())
def test_each_pair_norm_is_preserved(cfg, data):
    x = data.draw(vectors(cfg.head_dim, (2,)))
    m = data.draw(positions_st)
    y = rope_ref.apply(x, m, cfg)
    a, b = (np.array(v) for v in zip(*explicit_pairs(cfg), strict=True))
    before = np.hypot(x[..., a], x[..., b])
    after = np.hypot(y[..., a], y[..., b])
    np.testing.assert_allclose(after, before, rtol=1e-14, atol=1e-300)


@given(cfg=configs(), data=st.data())
def test_position_zero_is_bitwise_identity(cfg, data):
    x = data.draw(vectors(cfg.head_dim, (4,)))
    x[0, 0] = -0.0  # signed zeros must survive too
    y = rope_ref.apply(x, 0, cfg)
    assert np.array_equal(y.view(np.int64), x.view(np.int64))


def test_position_zero_identity_survives_mixed_batch():
    cfg = RopeConfig(8, layout="half")
    x = np.full((3, 8), -0.0)
    x[:, 4:] = -1.0
    y = rope_ref.apply(x, np.array([0, 1, 0]), cfg)
    assert np.array_equal(y[[0, 2]].view(np.int64), x[[0, 2]].view(np.int64))
    assert not np.array_equal(y[1], x[1])


@given(cfg=configs(), data=st.data())
def test_composition_adds_positions_and_negative_inverts(cfg, data):
    x = data.draw(vectors(cfg.head_dim, (2,)))
    a = data.draw(positions_st)
    b = data.draw(positions_st)
    scale = 1 + np.abs(x).max() * (1 + abs(a) + abs(b))
    twice = rope_ref.apply(rope_ref.apply(x, a, cfg), b, cfg)
    np.testing.assert_allclose(twice, rope_ref.apply(x, a + b, cfg), rtol=0, atol=1e-12 * scale)
    back = rope_ref.apply(rope_ref.apply(x, a, cfg), -a, cfg)
    np.testing.assert_allclose(back, x, rtol=0, atol=1e-12 * scale)


@given(cfg=configs(), data=st.data())
def test_scores_depend_only_on_relative_position(cfg, data):
    q = data.draw(vectors(cfg.head_dim))
    k = data.draw(vectors(cfg.head_dim))
    m = data.draw(st.integers(-5000, 5000))
    n = data.draw(st.integers(-5000, 5000))
    shift = data.draw(st.integers(-5000, 5000))
    s1 = rope_ref.apply(q, m, cfg) @ rope_ref.apply(k, n, cfg)
    s2 = rope_ref.apply(q, m + shift, cfg) @ rope_ref.apply(k, n + shift, cfg)
    s3 = q @ rope_ref.apply(k, n - m, cfg)  # RoFormer eq. 16: q^T R_{n-m} k
    tol = 1e-11 * (1 + np.abs(q).sum() * np.abs(k).max()) * (1 + abs(m) + abs(n) + abs(shift))
    assert abs(s1 - s2) <= tol
    assert abs(s1 - s3) <= tol


@given(cfg=configs(max_head_dim=16), m=positions_st, n=positions_st)
def test_rotation_matrices_compose(cfg, m, n):
    rm = rope_ref.rotation_matrix(m, cfg)
    rn = rope_ref.rotation_matrix(n, cfg)
    tol = 1e-12 * (1 + abs(m) + abs(n))
    np.testing.assert_allclose(rm.T @ rn, rope_ref.rotation_matrix(n - m, cfg), rtol=0, atol=tol)
    np.testing.assert_allclose(rm.T @ rm, np.eye(cfg.head_dim), rtol=0, atol=1e-14)


@given(cfg=configs(), data=st.data())
def test_layout_permutation_relation(cfg, data):
    x = data.draw(vectors(cfg.head_dim, (3,)))
    m = data.draw(positions_st)
    perm = rope_ref.layout_permutation(cfg)
    half = cfg.replace(layout="half")
    inter = cfg.replace(layout="interleaved")
    np.testing.assert_allclose(
        rope_ref.apply(x[..., perm], m, half),
        rope_ref.apply(x, m, inter)[..., perm],
        rtol=0,
        atol=1e-13 * (1 + np.abs(x).max() * (1 + abs(m))),
    )
    inv = rope_ref.inverse_layout_permutation(cfg)
    assert np.array_equal(x[..., perm][..., inv], x)


def test_layout_permutation_matches_hf_llama_conversion_for_head_dim_8():
    # HF convert_llama_weights_to_hf.py `permute` maps a head's rows to [0 2 4 6 1 3 5 7] (peers.md §8).
    assert rope_ref.layout_permutation(RopeConfig(8, layout="half")).tolist() == [0, 2, 4, 6, 1, 3, 5, 7]
    assert rope_ref.layout_permutation(RopeConfig(8, layout="half", rotary_dim=4)).tolist() == [
        0,
        2,
        1,
        3,
        4,
        5,
        6,
        7,
    ]


@given(cfg=configs(), data=st.data())
def test_pass_through_channels_are_bit_identical(cfg, data):
    x = data.draw(vectors(cfg.head_dim, (2, 3)))
    m = data.draw(positions_st)
    y = rope_ref.apply(x, m, cfg)
    rd = cfg.rotary_dim
    assert np.array_equal(y[..., rd:].view(np.int64), x[..., rd:].view(np.int64))


@pytest.mark.parametrize("head_dim", [4, 8, 64, 128])
def test_the_two_layouts_differ_on_generic_input(head_dim):
    x = np.random.default_rng(1).standard_normal((5, head_dim))
    pos = np.arange(1, 6)
    half = rope_ref.apply(x, pos, RopeConfig(head_dim, layout="half"))
    inter = rope_ref.apply(x, pos, RopeConfig(head_dim, layout="interleaved"))
    assert np.abs(half - inter).max() > 0.1


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_large_blocked_and_non_contiguous_inputs_match_the_explicit_form(layout):
    # Big enough to cross several processing blocks; a transposed (non-contiguous) view too.
    cfg = RopeConfig(16, layout=layout, rotary_dim=12)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 700, 5, 16))
    pos = rng.uniform(-3000, 3000, size=(3, 700, 1))
    expected = np.empty_like(x)
    for idx in np.ndindex(x.shape[:-1]):
        expected[idx] = explicit_rotation(x[idx], pos[idx[0], idx[1], 0], cfg)
    np.testing.assert_allclose(rope_ref.apply(x, pos, cfg), expected, rtol=0, atol=1e-11)
    xt = np.ascontiguousarray(np.swapaxes(x, 1, 2)).swapaxes(1, 2)  # same values, other strides
    np.testing.assert_allclose(rope_ref.apply(xt, pos, cfg), expected, rtol=0, atol=1e-11)
    xs = np.stack([x, -x], axis=-1).reshape(x.shape[:-1] + (32,))[..., ::2]  # last-axis stride 2, same values
    assert xs.strides[-1] == 2 * x.itemsize and np.array_equal(xs, x)
    np.testing.assert_allclose(rope_ref.apply(xs, pos, cfg), expected, rtol=0, atol=1e-11)


def test_positions_broadcast_per_row_and_per_head():
    cfg = RopeConfig(8, layout="interleaved")
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 4, 3, 8))
    pos = rng.integers(0, 100, size=(2, 4, 1))
    y = rope_ref.apply(x, pos, cfg)
    for b in range(2):
        for s in range(4):
            for h in range(3):
                np.testing.assert_allclose(
                    y[b, s, h], explicit_rotation(x[b, s, h], pos[b, s, 0], cfg), atol=1e-12
                )
    seq_only = rope_ref.apply(x, np.arange(4)[:, None], cfg)
    np.testing.assert_allclose(seq_only[1, 2, 0], explicit_rotation(x[1, 2, 0], 2, cfg), atol=1e-12)


@given(
    m=st.floats(-50, 50, allow_nan=False),
    x=st.lists(finite, min_size=2, max_size=2),
)
def test_sinusoidal_embedding_matches_its_definition(m, x):
    pe = rope_ref.sinusoidal_embedding(m, 6)
    for i in range(3):
        w = 10000.0 ** (2 * i / 6)
        assert pe[2 * i] == pytest.approx(np.sin(m / w), abs=1e-12)
        assert pe[2 * i + 1] == pytest.approx(np.cos(m / w), abs=1e-12)


def test_attention_matches_an_explicit_loop_and_is_shift_invariant():
    cfg = RopeConfig(8, layout="half", rotary_dim=6)
    rng = np.random.default_rng(4)
    # v has the full head width, so rotating v by mistake would change the output.
    q, k, v = rng.standard_normal((3, 8)), rng.standard_normal((5, 8)), rng.standard_normal((5, 8))
    qp, kp = np.array([4, 5, 6]), np.arange(5)
    mask = kp[None, :] <= qp[:, None] - 2
    out, probs = rope_ref.attention(q, k, v, qp, kp, cfg, mask=mask)
    for i in range(3):
        scores = np.array(
            [
                explicit_rotation(q[i], qp[i], cfg) @ explicit_rotation(k[j], kp[j], cfg) / np.sqrt(8)
                if mask[i, j]
                else -np.inf
                for j in range(5)
            ]
        )
        w = np.exp(scores - scores.max())
        np.testing.assert_allclose(probs[i], w / w.sum(), atol=1e-12)
        np.testing.assert_allclose(out[i], (w / w.sum()) @ v, atol=1e-12)
    shifted, _ = rope_ref.attention(q, k, v, qp + 1000, kp + 1000, cfg, mask=mask)
    np.testing.assert_allclose(shifted, out, atol=1e-10)
    with pytest.raises(ValueError, match="mask"):
        rope_ref.attention(q, k, v, qp, kp, cfg, mask=np.zeros((3, 5), bool))


@pytest.mark.parametrize(
    "qp, kp",
    [(np.arange(4), np.arange(32)), (np.array([3, 31, 9, 20]), np.arange(32) // 2)],
    ids=["largest-on-the-keys", "largest-on-the-queries"],
)
def test_attention_rotates_q_and_k_with_one_table_under_length_dependent_scaling(qp, kp):
    # HF builds one cos/sin table per forward pass from the largest position id, whichever of q and k
    # holds it: with a largest position of 31 (q at 0..3 and k at 0..31, or q up to 31 and k at 0..15)
    # both must use seq_len = 32, not one of them 4 or 16 (which would leave dynamic NTK unscaled).
    cfg = RopeConfig(8, layout="half", scaling=rope_ref.DynamicNTK(4.0, 16))
    rng = np.random.default_rng(5)
    q, k, v = rng.standard_normal((4, 8)), rng.standard_normal((32, 8)), rng.standard_normal((32, 8))
    _, probs = rope_ref.attention(q, k, v, qp, kp, cfg)
    # Dynamic NTK at L = 32, L0 = 16, factor 4: base' = base * (4 * 32 / 16 - 3)^(8/6), written out.
    scaled = RopeConfig(8, layout="half", base=10000.0 * 5.0 ** (8 / 6))
    qr = np.array([explicit_rotation(q[i], qp[i], scaled) for i in range(4)])
    kr = np.array([explicit_rotation(k[j], kp[j], scaled) for j in range(32)])
    scores = qr @ kr.T / np.sqrt(8)
    w = np.exp(scores - scores.max(axis=-1, keepdims=True))
    np.testing.assert_allclose(probs, w / w.sum(axis=-1, keepdims=True), atol=1e-12)
    _, probs_short = rope_ref.attention(q, k, v, qp, kp, cfg, seq_len=4)
    assert np.abs(probs_short - probs).max() > 1e-4  # the length really matters here


@pytest.mark.parametrize(
    "change, exc, match",
    [
        ({"v": np.zeros((3, 8))}, ValueError, r"v.shape\[-2\] must equal k.shape\[-2\]=5"),
        ({"v": np.zeros((7, 8))}, ValueError, r"v.shape\[-2\] must equal k.shape\[-2\]=5"),
        ({"mask": np.ones((3, 5), dtype=np.int64)}, TypeError, "mask must be boolean or floating-point"),
        ({"mask": np.ones((4, 5), dtype=bool)}, ValueError, r"mask of shape \(4, 5\) does not broadcast"),
        ({"mask": np.array([[0.0] * 5, [-np.inf] * 5, [0.0] * 5])}, ValueError, "no finite score"),
        ({"mask": np.array([[True] * 5, [False] * 5, [True] * 5])}, ValueError, "no key to attend to"),
        ({"mask": np.array([[True], [True], [False]])}, ValueError, "no key to attend to"),
        ({"q": np.zeros(8), "qp": 0}, ValueError, "at least 2 dimensions"),
        ({"v": np.zeros(5)}, ValueError, "at least 2 dimensions"),
    ],
    ids=[
        "v-short", "v-long", "int-mask", "mask-shape", "all-minus-inf-row", "all-false-row",
        "all-false-row-after-broadcast", "q-1d", "v-1d",
    ],
)
def test_attention_refuses_bad_shapes_and_masks(change, exc, match):
    cfg = RopeConfig(8, layout="half", rotary_dim=6)
    args = {"q": np.ones((3, 8)), "k": np.ones((5, 8)), "v": np.ones((5, 8)), "qp": np.arange(3),
            "kp": np.arange(5), "mask": None} | change
    with pytest.raises(exc, match=match):
        rope_ref.attention(args["q"], args["k"], args["v"], args["qp"], args["kp"], cfg, mask=args["mask"])


def test_attention_probabilities_sum_to_one_over_keys():
    cfg = RopeConfig(8, layout="interleaved")
    rng = np.random.default_rng(6)
    q, k, v = rng.standard_normal((2, 3, 8)), rng.standard_normal((2, 5, 8)), rng.standard_normal((2, 5, 2))
    mask = np.tril(np.ones((3, 5), dtype=bool), k=2)  # True: may attend
    _, probs = rope_ref.attention(q, k, v, np.arange(3), np.arange(5), cfg, mask=mask)
    np.testing.assert_allclose(probs.sum(axis=-1), 1.0, rtol=0, atol=1e-15)
    assert np.all(probs[..., ~mask] == 0.0) and np.all(probs[..., mask] > 0.0)


def _softmax_by_hand(q, k, v, qp, kp, cfg, add):
    """probs and output of one batch row, from explicit rotations and an explicit softmax."""
    qr = np.array([explicit_rotation(q[i], qp[i], cfg) for i in range(len(q))])
    kr = np.array([explicit_rotation(k[j], kp[j], cfg) for j in range(len(k))])
    scores = qr @ kr.T / np.sqrt(cfg.head_dim) + add
    w = np.exp(scores - scores.max(axis=-1, keepdims=True))
    probs = w / w.sum(axis=-1, keepdims=True)
    return probs, probs @ v


def test_attention_adds_a_float_mask_and_survives_scores_past_exp_overflow():
    """Batched q (2, 3, 8) at per-batch positions, k (5, 8) shared, v with 3 features; a float mask
    (3, 5) is ADDED to the scores; batch 0's q scaled so its scores reach ~1e3 (exp overflows without
    the max subtracted), batch 1's unscaled so the mask shows. Partial rotary (6 of 8): the scale is
    sqrt(head_dim) = sqrt(8)."""
    cfg = RopeConfig(8, layout="interleaved", rotary_dim=6, base=500.0)
    rng = np.random.default_rng(11)
    q = rng.standard_normal((2, 3, 8)) * np.array([1500.0, 1.0])[:, None, None]  # batch 0: scores ~ 1e3
    k, v = rng.standard_normal((5, 8)), rng.standard_normal((5, 3))
    qp, kp = np.array([[2, 9, 4], [0, 30, 7]]), np.array([6, 1, 8, 3, 12])
    add = np.array([[0.0, -2.5, 1.0, 0.0, -700.0], [3.0, 0.0, 0.0, -1.0, 0.0], [0.0, 0.0, -4.0, 2.0, 0.5]])
    out, probs = rope_ref.attention(q, k[None], v[None], qp, kp, cfg, mask=add)
    assert out.shape == (2, 3, 3) and probs.shape == (2, 3, 5)
    for b in range(2):
        want_probs, want_out = _softmax_by_hand(q[b], k, v, qp[b], kp, cfg, add)
        np.testing.assert_allclose(probs[b], want_probs, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(out[b], want_out, rtol=1e-9, atol=1e-12)
    assert np.isfinite(out).all()


def test_attention_rotates_queries_and_keys_by_their_own_positions_at_equal_lengths():
    """Sq == Sk with different position values: k must turn by k_positions, q by q_positions."""
    cfg = RopeConfig(8, layout="half", base=100.0)
    rng = np.random.default_rng(12)
    q, k, v = rng.standard_normal((4, 8)), rng.standard_normal((4, 8)), rng.standard_normal((4, 2))
    qp, kp = np.array([0, 3, 7, 12]), np.array([5, 1, 9, 2])
    out, probs = rope_ref.attention(q, k, v, qp, kp, cfg)
    want_probs, want_out = _softmax_by_hand(q, k, v, qp, kp, cfg, 0.0)
    np.testing.assert_allclose(probs, want_probs, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(out, want_out, rtol=1e-9, atol=1e-12)


def test_attention_names_the_positions_it_refuses():
    cfg = RopeConfig(8, layout="half")
    q, k = np.ones((2, 8)), np.ones((3, 8))
    with pytest.raises(ValueError, match="^k_positions must be finite, got nan"):
        rope_ref.attention(q, k, k, np.arange(2), np.array([0.0, np.nan, 1.0]), cfg)
    with pytest.raises(ValueError, match="^q_positions must be finite, got inf"):
        rope_ref.attention(q, k, k, np.array([np.inf, 1.0]), np.arange(3), cfg)


@pytest.mark.parametrize("bad", ["q", "k", "v"])
@pytest.mark.parametrize("dtype", [np.int64, np.complex128])
def test_attention_names_each_array_it_refuses(bad, dtype):
    """q (2, 8), k (3, 8) and v (3, 5) differ in shape; the one with a non-real dtype is named."""
    cfg = RopeConfig(8, layout="half")
    arrays = {"q": np.ones((2, 8)), "k": np.ones((3, 8)), "v": np.ones((3, 5))}
    arrays[bad] = arrays[bad].astype(dtype)
    match = f"^{bad} must be a real floating-point array, got dtype {np.dtype(dtype)}$"
    with pytest.raises(TypeError, match=match):
        rope_ref.attention(arrays["q"], arrays["k"], arrays["v"], np.arange(2), np.arange(3), cfg)


def test_sinusoidal_embedding_uses_its_base_width_and_limits():
    from rope_ref.sinusoidal import MAX_D_MODEL

    pe = rope_ref.sinusoidal_embedding([3.0], 8, base=500.0)
    with mpmath.workdps(40):
        for i in range(4):  # PE(m, 2i) = sin(m / base^(2i/d)), PE(m, 2i+1) = cos(...), Vaswani et al. §3.5
            angle = 3 / mpmath.power(500, mpmath.mpf(2 * i) / 8)
            assert pe[0, 2 * i] == pytest.approx(float(mpmath.sin(angle)), rel=4e-16, abs=1e-300)
            assert pe[0, 2 * i + 1] == pytest.approx(float(mpmath.cos(angle)), rel=4e-16, abs=1e-300)
    for d_model, exc in ((7, ValueError), (MAX_D_MODEL + 2, ValueError), (8.0, TypeError)):
        with pytest.raises(exc, match="d_model"):
            rope_ref.sinusoidal_embedding(0.0, d_model)
    for base in (1.0, 0.5):
        with pytest.raises(ValueError, match="base must be a finite number > 1"):
            rope_ref.sinusoidal_embedding(0.0, 8, base=base)
