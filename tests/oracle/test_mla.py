"""DeepSeek MLA (rope_ref.mla): decoupled rope part, YaRN tables, both mscale corrections.

Expected values restate the released code: DeepSeek's ``yarn_find_correction_range`` /
``yarn_linear_ramp_mask`` (floor/ceil, clamp, ramp over ``dim // 2``), the complex rotation of adjacent
pairs, HF's ``apply_rotary_pos_emb_interleave`` (``view(d//2, 2).transpose`` then ``rotate_half``) and
``softmax_scale = qk_head_dim**-0.5 * mscale**2`` evaluated here in 50-digit mpmath.
"""

import math

import mpmath
import numpy as np
import pytest

import rope_ref
from rope_ref import mla

# (name, rope_theta, factor, beta_fast, beta_slow, mscale, mscale_all_dim): the released config.json values
PRESETS = [
    ("deepseek-v2-lite", 10000.0, 40.0, 32.0, 1.0, 0.707, 0.707),
    ("deepseek-v3", 10000.0, 40.0, 32.0, 1.0, 1.0, 1.0),
    ("kimi-k2", 50000.0, 32.0, 1.0, 1.0, 1.0, 1.0),
]


def load(name):
    try:
        return mla.preset(name)
    except (
        ValueError
    ) as exc:  # pragma: no cover - depends on rope_ref.scaling.YaRN accepting beta_fast == beta_slow
        if "beta" in str(exc):
            pytest.skip(f"YaRN still refuses {name}'s betas: {exc}")
        raise


def deepseek_yarn_inv_freq(dim, base, factor, beta_fast, beta_slow, original=4096):
    """DeepSeek-V2/V3 released YaRN table (modeling_deepseek.py DeepseekV2YarnRotaryEmbedding)."""

    def corr_dim(rot):
        return (dim * math.log(original / (rot * 2 * math.pi))) / (2 * math.log(base))

    low = max(math.floor(corr_dim(beta_fast)), 0)
    high = min(math.ceil(corr_dim(beta_slow)), dim - 1)
    if low == high:
        high += 0.001
    out = []
    for i in range(dim // 2):
        ramp = min(max((i - low) / (high - low), 0.0), 1.0)
        extra = 1.0 / base ** (2 * i / dim)
        inter = extra / factor
        mask = 1.0 - ramp
        out.append(inter * (1 - mask) + extra * mask)
    return out


@pytest.mark.parametrize(("name", "base", "factor", "bf", "bs", "m", "m_all"), PRESETS)
def test_preset_tables_and_attention_factor(name, base, factor, bf, bs, m, m_all):
    cfg = load(name)
    assert (cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim, cfg.qk_head_dim) == (
        128,
        64,
        128,
        192,
    )
    assert cfg.rope.layout == "interleaved" and cfg.rope.head_dim == 64 and cfg.rope.base == base
    want = deepseek_yarn_inv_freq(64, base, factor, bf, bs)
    np.testing.assert_allclose(rope_ref.inv_freq(cfg.rope), want, rtol=1e-13)
    # mscale / mscale_all_dim on cos and sin: 1 for every released config.
    ratio = (0.1 * m * math.log(factor) + 1) / (0.1 * m_all * math.log(factor) + 1)
    assert rope_ref.attention_factor(cfg.rope) == pytest.approx(ratio, rel=1e-15)


@pytest.mark.parametrize(("name", "base", "factor", "bf", "bs", "m", "m_all"), PRESETS)
def test_softmax_scale_has_the_second_correction_once(name, base, factor, bf, bs, m, m_all):
    cfg = load(name)
    with mpmath.workdps(50):
        ms = mpmath.mpf(0.1) * mpmath.mpf(m_all) * mpmath.log(factor) + 1  # 0.1: the float64 constant
        exact = float(ms * ms / mpmath.sqrt(192))
    got = mla.softmax_scale(cfg)
    assert got == exact
    # HF's float evaluation (DeepseekV3Attention.__init__) agrees to a few ulp.
    hf = 192 ** (-0.5)
    hf_ms = 0.1 * m_all * math.log(factor) + 1.0
    hf = hf * hf_ms * hf_ms
    assert abs(hf - got) <= 4 * math.ulp(got)
    # The bug signatures are large: missing (HF DeepSeek-V2 up to v4.57) or applied twice.
    assert got / 192**-0.5 > 1.2
    assert abs(got * hf_ms * hf_ms - got) / got > 0.2


def test_mscale():
    assert mla.mscale(1.0, 0.707) == 1.0 and mla.mscale(0.5) == 1.0
    assert mla.mscale(40.0, 1.0) == pytest.approx(0.1 * math.log(40.0) + 1.0, rel=1e-16)
    for factor, m in ((40.0, 0.707), (40.0, 1.0), (32.0, 1.0), (4.0, 0.5)):
        assert mla.mscale(factor, m) == rope_ref.scaling.yarn_get_mscale(factor, m)


def test_softmax_scale_without_yarn_is_plain():
    rope = rope_ref.RopeConfig(64, layout="interleaved")
    cfg = mla.MLAConfig("plain", 128, 64, 128, rope, None)
    with mpmath.workdps(50):
        assert mla.softmax_scale(cfg) == float(1 / mpmath.sqrt(192))


def complex_ref(x, m, inv):
    out = []
    for j, f in enumerate(inv):
        z = complex(x[2 * j], x[2 * j + 1]) * complex(math.cos(m * f), math.sin(m * f))
        out += [z.real, z.imag]
    return out


def hf_interleave_ref(x, m, inv):
    """apply_rotary_pos_emb_interleave on one vector: de-interleave, then x*cos + rotate_half(x)*sin."""
    d = len(x)
    y = [x[2 * j] for j in range(d // 2)] + [x[2 * j + 1] for j in range(d // 2)]
    emb = [m * f for f in inv] * 2
    out = []
    for c in range(d):
        rot = -y[c + d // 2] if c < d // 2 else y[c - d // 2]
        out.append(y[c] * math.cos(emb[c]) + rot * math.sin(emb[c]))
    return out


@pytest.mark.parametrize("name", ["deepseek-v2-lite", "deepseek-v3", "kimi-k2"])
def test_rope_part_both_conventions(name):
    cfg = load(name)
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 192))
    pos = np.array([0, 1, 4095, 20000, 150000])
    released = mla.apply_rope_part(x, pos, cfg)
    hf = mla.apply_rope_part(x, pos, cfg, convention="hf")
    inv = list(rope_ref.inv_freq(cfg.rope))
    for t in range(5):
        assert np.array_equal(released[t, :128], x[t, :128]) and np.array_equal(hf[t, :128], x[t, :128])
        np.testing.assert_allclose(
            released[t, 128:], complex_ref(x[t, 128:], pos[t], inv), rtol=1e-10, atol=1e-10
        )
        np.testing.assert_allclose(
            hf[t, 128:], hf_interleave_ref(x[t, 128:], pos[t], inv), rtol=1e-10, atol=1e-10
        )
    # HF's output is the released one de-interleaved, so every q.k agrees.
    assert np.array_equal(hf[:, 128:], mla.to_half_layout(released[:, 128:]))
    k = rng.standard_normal((5, 192))
    for conv in ("released", "hf"):
        qk = [
            math.fsum(a * b for a, b in zip(q_, k_, strict=True))
            for q_, k_ in zip(
                mla.apply_rope_part(x, pos, cfg, convention=conv),
                mla.apply_rope_part(k, pos[::-1], cfg, convention=conv),
                strict=True,
            )
        ]
        if conv == "released":
            first = qk
        else:
            np.testing.assert_allclose(qk, first, rtol=1e-12, atol=1e-12)


def test_bad_inputs():
    cfg = load("deepseek-v3")
    with pytest.raises(ValueError, match="qk_nope_head_dim \\+ qk_rope_head_dim = 192"):
        mla.apply_rope_part(np.zeros((2, 64)), [0, 1], cfg)
    with pytest.raises(ValueError, match="convention"):
        mla.apply_rope_part(np.zeros((2, 192)), [0, 1], cfg, convention="neox")
    with pytest.raises(TypeError, match="MLAConfig"):
        mla.softmax_scale(cfg.rope)
    with pytest.raises(ValueError, match="unknown MLA preset"):
        mla.preset("deepseek-v4")


def test_softmax_scale_uses_mscale_all_dim_not_mscale():
    # A config whose two mscales differ (as some DeepSeek-V2 ports set them): the softmax correction
    # reads mscale_all_dim; cos/sin get mscale(f, 1.0) / mscale(f, 0.707).
    yarn = rope_ref.YaRN(40.0, original_max_position=4096, mscale=1.0, mscale_all_dim=0.707)
    cfg = mla.MLAConfig(
        "mixed", 128, 64, 128, rope_ref.RopeConfig(64, layout="interleaved", scaling=yarn), 0.707
    )
    with mpmath.workdps(50):
        ln40 = mpmath.log(40)
        right = float((mpmath.mpf(0.1) * mpmath.mpf(0.707) * ln40 + 1) ** 2 / mpmath.sqrt(192))
        wrong = float((mpmath.mpf(0.1) * ln40 + 1) ** 2 / mpmath.sqrt(192))
        factor = float((mpmath.mpf(0.1) * ln40 + 1) / (mpmath.mpf(0.1) * mpmath.mpf(0.707) * ln40 + 1))
    assert mla.softmax_scale(cfg) == right and abs(right - wrong) / right > 0.15
    assert rope_ref.attention_factor(cfg.rope) == pytest.approx(factor, rel=1e-15)


def test_softmax_scale_corrects_only_yarn():
    # A linear scaling has a factor but no mscale: the softmax scale stays qk_head_dim^-0.5.
    rope = rope_ref.RopeConfig(32, layout="interleaved", scaling=rope_ref.scaling.Linear(4.0))
    cfg = mla.MLAConfig("linear", 96, 32, 80, rope, 1.0)
    with mpmath.workdps(50):
        assert mla.softmax_scale(cfg) == float(1 / mpmath.sqrt(128))
    # mscale_all_dim 0 (or None) turns the correction off even under YaRN.
    yarn = rope_ref.YaRN(40.0, original_max_position=4096, mscale=0.707, mscale_all_dim=0.707)
    off = mla.MLAConfig("off", 96, 32, 80, rope_ref.RopeConfig(32, layout="interleaved", scaling=yarn), 0.0)
    with mpmath.workdps(50):
        assert mla.softmax_scale(off) == float(1 / mpmath.sqrt(128))


def test_to_half_layout_by_hand():
    x = np.arange(8.0)
    assert mla.to_half_layout(x).tolist() == [0.0, 2.0, 4.0, 6.0, 1.0, 3.0, 5.0, 7.0]
    assert mla.to_half_layout(np.arange(12.0).reshape(2, 6)).tolist() == [
        [0.0, 2.0, 4.0, 1.0, 3.0, 5.0],
        [6.0, 8.0, 10.0, 7.0, 9.0, 11.0],
    ]
    for bad in (np.zeros(7), np.zeros((3, 5)), np.float64(1.0)):
        with pytest.raises(ValueError, match="x_rope.shape\\[-1\\] must be even"):
            mla.to_half_layout(bad)


@pytest.mark.parametrize("convention", ["released", "hf"])
def test_rope_part_passes_seq_len_to_a_dynamic_scaling(convention):
    # Dynamic NTK (HF _compute_dynamic_ntk_parameters): base' = base * (f L / L0 - (f - 1))^(d / (d - 2)).
    ntk = rope_ref.scaling.DynamicNTK(2.0, original_max_position=32)
    cfg = mla.MLAConfig("ntk", 8, 16, 4, rope_ref.RopeConfig(16, layout="interleaved", scaling=ntk), None)
    x = np.random.default_rng(9).standard_normal((2, 24))
    pos = np.array([3, 5])
    got = mla.apply_rope_part(x, pos, cfg, convention=convention, seq_len=100)
    base = 10000.0 * (2.0 * 100 / 32 - 1.0) ** (16 / 14)
    inv = [base ** (-2.0 * i / 16) for i in range(8)]
    for t in range(2):
        want = complex_ref(x[t, 8:], pos[t], inv)
        if convention == "hf":
            want = mla.to_half_layout(np.array(want))
        np.testing.assert_allclose(got[t, 8:], want, rtol=1e-11, atol=1e-11)
    # Without seq_len the positions (max 5 < 32) leave the base unscaled.
    short = mla.apply_rope_part(x, pos, cfg, convention=convention)
    assert np.abs(short[1, 8:] - got[1, 8:]).max() > 1e-3


def test_apply_rope_part_wants_an_mla_config():
    with pytest.raises(TypeError, match="MLAConfig"):
        mla.apply_rope_part(np.zeros((2, 64)), [0, 1], rope_ref.RopeConfig(64, layout="interleaved"))
