"""Multi-axis RoPE (rope_ref.multiaxis): the one mechanism behind ChatGLM-6B 2D, M-RoPE and vision RoPE.

Expected values come from a plain restatement of the rule written here (loops over tokens and pairs,
``math.cos``/``math.sin``), never from the module under test; bitwise checks compare against
``rope_ref.apply`` and the ChatGLM-6B half-head split.
"""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rope_ref
from rope_ref import _exact_trig, chatglm, multiaxis
from rope_ref.scaling import DynamicNTK, Linear, YaRN


def loop_apply(x, pos, head_dim, layout, blocks, streams, phis, amp=1.0):
    """One vector: pair i = (a, b) of its block under the layout, angle pos[streams[i]] * phis[i]."""
    n_pairs = len(streams)
    per_block = n_pairs // blocks
    width = 2 * per_block
    out = list(x)
    for i in range(n_pairs):
        k, j = divmod(i, per_block)
        if layout == "half":
            a, b = k * width + j, k * width + j + per_block
        else:
            a, b = k * width + 2 * j, k * width + 2 * j + 1
        theta = pos[streams[i]] * phis[i]
        c, s = amp * math.cos(theta), amp * math.sin(theta)
        out[a] = x[a] * c - x[b] * s
        out[b] = x[b] * c + x[a] * s
    return out


CONFIGS = [
    rope_ref.RopeConfig(64, layout="half"),
    rope_ref.RopeConfig(64, layout="interleaved"),
    rope_ref.RopeConfig(96, layout="half", rotary_dim=32, base=500000.0),
    rope_ref.RopeConfig(128, layout="interleaved", rotary_dim=64),
    rope_ref.RopeConfig(64, layout="half", scaling=Linear(4.0)),
    rope_ref.RopeConfig(64, layout="interleaved", scaling=YaRN(8.0, original_max_position=256)),
    rope_ref.RopeConfig(64, layout="half", scaling=DynamicNTK(4.0, original_max_position=64)),
]


@pytest.mark.filterwarnings("ignore:invalid value")
@pytest.mark.parametrize("cfg", CONFIGS, ids=repr)
def test_one_stream_is_plain_rope_bit_for_bit(cfg):
    rng = np.random.default_rng(cfg.head_dim + cfg.rotary_dim)
    x = rng.standard_normal((3, 7, cfg.head_dim))
    x[0, 0, :4] = [-0.0, 0.0, -0.0, np.inf]
    pos = rng.integers(0, 3000, size=(3, 7))
    pos[:, 0] = 0
    got = multiaxis.apply(x, pos[None], multiaxis.from_config(cfg))
    assert np.array_equal(got, rope_ref.apply(x, pos, cfg), equal_nan=True)
    assert np.array_equal(np.signbit(got), np.signbit(rope_ref.apply(x, pos, cfg)))


@pytest.mark.parametrize("cfg", CONFIGS, ids=repr)
def test_equal_streams_are_plain_rope_bit_for_bit_whatever_the_assignment(cfg):
    rng = np.random.default_rng(7)
    streams = rng.integers(0, 3, size=cfg.n_pairs)
    spec = multiaxis.MultiAxisRope(cfg.head_dim, layout=cfg.layout, streams=streams, tables=(cfg,) * 3)
    x = rng.standard_normal((5, cfg.head_dim))
    pos = np.array([0, 1, 17, 4095, 70000])
    got = multiaxis.apply(x, np.stack([pos, pos, pos]), spec)
    assert np.array_equal(got, rope_ref.apply(x, pos, cfg))


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("blocks", [1, 2])
def test_matches_the_loop_restatement(layout, blocks):
    rng = np.random.default_rng(blocks)
    head_dim, n_pairs = 40, 16  # 8 pass-through channels
    tables = (
        rope_ref.RopeConfig(32, layout=layout, base=10000.0),
        rope_ref.RopeConfig(16, layout=layout, base=500.0),
        rope_ref.RopeConfig(32, layout=layout, base=1e6),
    )
    streams = rng.integers(0, 3, size=n_pairs)
    freq_index = [int(rng.integers(0, tables[s].n_pairs)) for s in streams]
    spec = multiaxis.MultiAxisRope(
        head_dim, layout=layout, streams=streams, tables=tables, freq_index=freq_index, blocks=blocks
    )
    x = rng.standard_normal((6, head_dim))
    pos = rng.integers(-50, 5000, size=(3, 6))
    got = multiaxis.apply(x, pos, spec)
    for t in range(6):
        # phi written out from the RoFormer formula of each table: base^(-2k/d)
        phis = [
            tables[s].base ** (-2.0 * k / tables[s].rotary_dim)
            for s, k in zip(streams, freq_index, strict=True)
        ]
        want = loop_apply(list(x[t]), pos[:, t], head_dim, layout, blocks, list(streams), phis)
        np.testing.assert_allclose(got[t], want, rtol=1e-12, atol=1e-12)
        assert np.array_equal(got[t, 2 * n_pairs :], x[t, 2 * n_pairs :])


def test_attention_factor_multiplies_cos_and_sin_per_stream_table():
    yarn = rope_ref.RopeConfig(16, layout="half", scaling=YaRN(16.0, original_max_position=64))
    plain = rope_ref.RopeConfig(16, layout="half")
    spec = multiaxis.MultiAxisRope(16, layout="half", streams=[0] * 4 + [1] * 4, tables=(yarn, plain))
    x = np.arange(1.0, 17.0)
    got = multiaxis.apply(x, [0, 0], spec)
    amp = 0.1 * math.log(16.0) + 1.0
    a = [0, 1, 2, 3, 8, 9, 10, 11]
    np.testing.assert_allclose(got[[0, 1, 2, 3, 8, 9, 10, 11]], amp * x[a], rtol=1e-14)
    assert np.array_equal(got[[4, 5, 6, 7, 12, 13, 14, 15]], x[[4, 5, 6, 7, 12, 13, 14, 15]])


def test_cos_sin_come_from_the_exact_trig_kernel(monkeypatch):
    calls = []
    real = _exact_trig.cos_sin_of_product

    def spy(m, theta):
        calls.append((np.shape(m), np.shape(theta)))
        return real(m, theta)

    monkeypatch.setattr(_exact_trig, "cos_sin_of_product", spy)
    spec = multiaxis.chatglm_2d(16)
    multiaxis.apply(np.ones((3, 16)), np.zeros((2, 3)), spec)
    assert calls == [((3, 8), (8,))]


def test_chatglm_2d_is_the_half_head_split_bit_for_bit():
    rng = np.random.default_rng(11)
    x = rng.standard_normal((4, 5, 128))
    pos = rng.integers(0, 2048, size=(4, 5))
    blk = rng.integers(0, 64, size=(4, 5))
    cfg = rope_ref.RopeConfig(64, layout="half")
    want = np.concatenate([rope_ref.apply(x[..., :64], pos, cfg), rope_ref.apply(x[..., 64:], blk, cfg)], -1)
    assert np.array_equal(chatglm.apply_2d(x, pos, blk), want)
    assert np.array_equal(multiaxis.apply(x, np.stack([pos, blk]), multiaxis.chatglm_2d(128)), want)
    # Broadcasting ids of different shapes, as apply_2d allows.
    got = chatglm.apply_2d(x, pos[:, :, None][..., 0], 3)
    assert np.array_equal(got[..., 64:], rope_ref.apply(x[..., 64:], 3, cfg))


def test_pair_indices():
    spec = multiaxis.chatglm_2d(16)
    a, b = spec.pair_indices()
    assert a.tolist() == [0, 1, 2, 3, 8, 9, 10, 11] and b.tolist() == [4, 5, 6, 7, 12, 13, 14, 15]
    cfg = rope_ref.RopeConfig(12, layout="interleaved", rotary_dim=8)
    a, b = multiaxis.from_config(cfg).pair_indices()
    assert a.tolist() == [0, 2, 4, 6] and b.tolist() == [1, 3, 5, 7]


@settings(deadline=None)
@given(
    seed=st.integers(0, 2**16),
    layout=st.sampled_from(["half", "interleaved"]),
    base_pos=st.lists(st.integers(-2000, 20000), min_size=6, max_size=6),
    shifts=st.lists(st.integers(-5000, 5000), min_size=3, max_size=3),
)
def test_relative_property_per_stream(seed, layout, base_pos, shifts):
    """For each stream, the q.k of its pairs depends only on that stream's position difference."""
    rng = np.random.default_rng(seed)
    cfg = rope_ref.RopeConfig(24, layout=layout, rotary_dim=20)
    streams = rng.integers(0, 3, size=10)
    spec = multiaxis.MultiAxisRope(24, layout=layout, streams=streams, tables=(cfg,) * 3)
    q, k = rng.standard_normal((2, 24))
    pq, pk = np.array(base_pos[:3]), np.array(base_pos[3:])
    shift = np.array(shifts)
    a, b = spec.pair_indices()

    def partial_dots(pos_q, pos_k):
        rq = multiaxis.apply(q, pos_q, spec)
        rk = multiaxis.apply(k, pos_k, spec)
        out = []
        for s in range(3):
            chans = [c for i in range(10) if streams[i] == s for c in (a[i], b[i])]
            out.append(math.fsum(rq[c] * rk[c] for c in chans))
        return out, rq, rk

    before, rq, rk = partial_dots(pq, pk)
    # Shift every stream by its own amount, on q and k alike: each stream's dot product is unchanged.
    after, _, _ = partial_dots(pq + shift, pk + shift)
    for s in range(3):
        scale = math.fsum(abs(q[c] * k[c]) for c in range(24)) + 1.0
        assert abs(before[s] - after[s]) <= 1e-9 * scale
    # ... and equals the unrotated dot product rotated by the difference alone (q at pq - pk, k at 0).
    ref, _, _ = partial_dots(pq - pk, np.zeros(3, dtype=int))
    for s in range(3):
        assert abs(before[s] - ref[s]) <= 1e-9 * (math.fsum(abs(q[c] * k[c]) for c in range(24)) + 1.0)
    # Pass-through channels are untouched.
    assert np.array_equal(rq[20:], q[20:]) and np.array_equal(rk[20:], k[20:])


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"streams": [0, 3]}, ValueError, "streams"),
        ({"streams": [0, -1], "tables": rope_ref.RopeConfig(4, layout="half")}, ValueError, "streams"),
        ({"streams": [0] * 5}, ValueError, "streams"),
        ({"streams": [0, 0], "freq_index": [0, 2]}, ValueError, "freq_index"),
        ({"streams": [0, 0], "freq_index": [0]}, ValueError, "freq_index"),
        ({"streams": [0, 0, 0], "blocks": 2}, ValueError, "blocks"),
        ({"streams": [0, 0], "layout": "neox"}, ValueError, "layout"),
        ({"streams": [0, 0], "tables": ["x"]}, TypeError, "tables"),
    ],
)
def test_bad_specs(kwargs, error, match):
    args = {"layout": "half", "tables": (rope_ref.RopeConfig(4, layout="half"),)} | kwargs
    with pytest.raises(error, match=match):
        multiaxis.MultiAxisRope(8, **args)


def test_bad_apply_arguments():
    spec = multiaxis.chatglm_2d(8)
    with pytest.raises(ValueError, match="n_streams=2"):
        multiaxis.apply(np.zeros((3, 8)), np.zeros((3, 3)), spec)
    with pytest.raises(ValueError, match="positions"):
        multiaxis.apply(np.zeros((3, 8)), np.zeros((2, 4)), spec)
    with pytest.raises(ValueError, match="head_dim=8"):
        multiaxis.apply(np.zeros((3, 6)), np.zeros((2, 3)), spec)
    with pytest.raises(TypeError, match="spec"):
        multiaxis.apply(np.zeros((3, 8)), np.zeros((2, 3)), rope_ref.RopeConfig(8, layout="half"))
    with pytest.raises(ValueError, match="finite"):
        multiaxis.apply(np.zeros((3, 8)), np.full((2, 3), np.nan), spec)


def test_cos_sin_table_per_pair():
    cfg = rope_ref.RopeConfig(16, layout="half", scaling=YaRN(4.0, original_max_position=32))
    pos = np.array([0, 3, 100])
    cos, sin = multiaxis.cos_sin(pos[None], multiaxis.from_config(cfg))
    want_cos, want_sin = rope_ref.cos_sin(pos, cfg)
    assert np.array_equal(cos, want_cos) and np.array_equal(sin, want_sin)
    spec = multiaxis.chatglm_2d(8)
    cos, sin = multiaxis.cos_sin([[5], [7]], spec)
    assert cos.shape == (1, 4)
    np.testing.assert_allclose(
        cos[0], [math.cos(5.0), math.cos(5.0 / 100), math.cos(7.0), math.cos(7.0 / 100)]
    )
    np.testing.assert_allclose(
        sin[0], [math.sin(5.0), math.sin(5.0 / 100), math.sin(7.0), math.sin(7.0 / 100)]
    )


def _preset_specs():
    from rope_ref import mla, mrope, vision_rope

    specs = [mrope.preset(n).rope for n in mrope.preset_names()]
    specs += [vision_rope.preset(n) for n in vision_rope.preset_names()]
    specs += [multiaxis.chatglm_2d(128), mla.preset("deepseek-v3").spec]
    return specs


PRESET_SPECS = _preset_specs()


@settings(deadline=None, max_examples=40)
@given(
    index=st.integers(0, len(PRESET_SPECS) - 1),
    seed=st.integers(0, 2**16),
    data=st.data(),
)
def test_relative_property_per_stream_for_every_preset(index, seed, data):
    spec = PRESET_SPECS[index]
    n = spec.n_streams
    pq = np.array(data.draw(st.lists(st.integers(0, 5000), min_size=n, max_size=n)))
    pk = np.array(data.draw(st.lists(st.integers(0, 5000), min_size=n, max_size=n)))
    shift = np.array(data.draw(st.lists(st.integers(-3000, 3000), min_size=n, max_size=n)))
    rng = np.random.default_rng(seed)
    q, k = rng.standard_normal((2, spec.head_dim))
    a, b = spec.pair_indices()

    def per_stream(pos_q, pos_k):
        rq, rk = multiaxis.apply(q, pos_q, spec), multiaxis.apply(k, pos_k, spec)
        return [
            math.fsum(
                rq[c] * rk[c] for i in range(spec.n_pairs) if spec.streams[i] == s for c in (a[i], b[i])
            )
            for s in range(n)
        ]

    scale = math.fsum(abs(v) for v in q * k) + 1.0
    before, after = per_stream(pq, pk), per_stream(pq + shift, pk + shift)
    diff_only = per_stream(pq - pk, np.zeros(n, dtype=int))
    for s in range(n):
        assert abs(before[s] - after[s]) <= 1e-9 * scale
        assert abs(before[s] - diff_only[s]) <= 1e-9 * scale
