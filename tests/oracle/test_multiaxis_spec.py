"""``rope_ref.multiaxis``: the spec's validation at the constructor, ``stack_positions``, ``cos_sin``'s own
checks, the stream-wide ``seq_len`` of a dynamic scaling, the attention factor on cos *and* sin, ChatGLM-6B's
``chatglm_2d`` and ``from_hf``.

Tables of different sizes per stream, streams with different maxima, and expected values from the formulas
(HF's dynamic-NTK base, YaRN's ``0.1 ln s + 1``, ``base^(-2j/d)``) written out here.
"""

import math

import numpy as np
import pytest

import rope_ref
from rope_ref import multiaxis
from rope_ref.scaling import DynamicNTK, YaRN

SMALL, TINY = rope_ref.RopeConfig(8, layout="half"), rope_ref.RopeConfig(4, layout="half")  # 4 and 2 pairs


@pytest.mark.parametrize(
    ("head_dim", "kwargs", "error", "match"),
    [
        (7, {"streams": [0, 0]}, ValueError, "head_dim must be a positive even integer, got 7"),
        (0, {"streams": [0]}, ValueError, "head_dim must be a positive even integer"),
        (8, {"streams": []}, ValueError, "1..head_dim/2=4 pairs, got 0"),
        (8, {"streams": [0] * 5}, ValueError, "1..head_dim/2=4 pairs, got 5"),
        (8, {"streams": [0, 1], "tables": (SMALL,)}, ValueError, "streams must lie in 0..0"),
        (8, {"streams": [0, 2], "tables": (SMALL, SMALL)}, ValueError, "streams must lie in 0..1"),
        (8, {"streams": [0, 1], "tables": (SMALL, TINY), "freq_index": [3, 3]}, ValueError,
         "freq_index\\[1\\]=3 is outside stream 1's table of 2"),
        (8, {"streams": [1, 0], "tables": (SMALL, TINY), "freq_index": [2, 0]}, ValueError,
         "freq_index\\[0\\]=2 is outside stream 1's table of 2"),
        (8, {"streams": [0, 0], "tables": (SMALL,), "freq_index": [0, 4]}, ValueError, "freq_index\\[1\\]=4"),
        (8, {"streams": [0, 0, 0], "blocks": 2}, ValueError, "blocks=2 must divide"),
        (8, {"streams": [0, 0], "blocks": 0}, ValueError, "blocks"),
        (8, {"streams": "00"}, TypeError, "streams must be a sequence of ints"),
        (8, {"streams": [0, 0], "tables": ()}, TypeError, "tables"),
    ],
)  # fmt: skip
def test_spec_validation(head_dim, kwargs, error, match):
    args = {"layout": "half", "tables": (SMALL,)} | kwargs
    with pytest.raises(error, match=match):
        multiaxis.MultiAxisRope(head_dim, **args)


def test_one_table_serves_every_stream():
    spec = multiaxis.MultiAxisRope(8, layout="half", streams=[0, 2, 1, 2], tables=SMALL)
    assert spec.n_streams == 3 and spec.tables == (SMALL, SMALL, SMALL)
    x = np.arange(1.0, 9.0)
    got = multiaxis.apply(x, [0, 0, 4], spec)  # only the pairs of stream 2 (pairs 1 and 3) turn
    assert np.array_equal(got[[0, 2, 4, 6]], x[[0, 2, 4, 6]])
    for i, (a, b) in ((1, (1, 5)), (3, (3, 7))):
        c, s = math.cos(4 * 10000.0 ** (-2 * i / 8)), math.sin(4 * 10000.0 ** (-2 * i / 8))
        assert got[a] == pytest.approx(x[a] * c - x[b] * s, rel=1e-14)
        assert got[b] == pytest.approx(x[b] * c + x[a] * s, rel=1e-14)


def test_valid_per_stream_freq_index():
    spec = multiaxis.MultiAxisRope(8, layout="half", streams=[1, 0], tables=(SMALL, TINY), freq_index=[1, 3])
    phi, amp = spec.pair_frequencies()
    np.testing.assert_allclose(phi, [10000.0 ** (-2 / 4), 10000.0 ** (-6 / 8)], rtol=1e-15)
    assert amp.tolist() == [1.0, 1.0]


@pytest.mark.parametrize(
    ("layout", "blocks", "a", "b"),
    [
        ("half", 1, [0, 1, 2, 3], [4, 5, 6, 7]),
        ("interleaved", 1, [0, 2, 4, 6], [1, 3, 5, 7]),
        ("half", 2, [0, 1, 4, 5], [2, 3, 6, 7]),
        ("interleaved", 2, [0, 2, 4, 6], [1, 3, 5, 7]),
    ],
)
def test_pair_indices_by_hand(layout, blocks, a, b):
    spec = multiaxis.MultiAxisRope(
        12, layout=layout, streams=[0] * 4, tables=(SMALL,), freq_index=[0] * 4, blocks=blocks
    )
    got_a, got_b = spec.pair_indices()
    assert got_a.tolist() == a and got_b.tolist() == b and spec.rotary_dim == 8


def test_stack_positions():
    got = multiaxis.stack_positions([1, 2, 3], 5, [[7], [8]])
    assert got.dtype == np.float64 and got.shape == (3, 2, 3)
    assert got[0].tolist() == [[1, 2, 3]] * 2 and got[1].tolist() == [[5] * 3] * 2
    assert got[2].tolist() == [[7] * 3, [8] * 3]
    with pytest.raises(ValueError, match="the positions streams do not broadcast together"):
        multiaxis.stack_positions([1, 2], [1, 2, 3])
    with pytest.raises(ValueError, match="ids\\[1\\]"):
        multiaxis.stack_positions([1, 2], [np.nan, 1], name="ids")


def test_positions_may_not_enlarge_x():
    spec = multiaxis.chatglm_2d(8)
    with pytest.raises(ValueError, match="does not broadcast against x.shape\\[:-1\\] = \\(3,\\)"):
        multiaxis.apply(np.zeros((3, 8)), np.zeros((2, 5, 3)), spec)
    with pytest.raises(ValueError, match="does not broadcast"):
        multiaxis.apply(np.zeros((3, 8)), np.zeros((2, 3, 1)), spec)


def test_cos_sin_checks_its_own_arguments():
    spec = multiaxis.chatglm_2d(8)
    with pytest.raises(ValueError, match="leading axis of n_streams=2"):
        multiaxis.cos_sin(np.zeros((3, 4)), spec)
    with pytest.raises(ValueError, match="leading axis of n_streams=2"):
        multiaxis.cos_sin(5.0, spec)
    with pytest.raises(TypeError, match="MultiAxisRope"):
        multiaxis.cos_sin(np.zeros((2, 4)), TINY)


def test_attention_factor_scales_cos_and_sin():
    yarn = rope_ref.RopeConfig(8, layout="half", scaling=YaRN(16.0, original_max_position=64))
    spec = multiaxis.MultiAxisRope(8, layout="half", streams=[0, 0, 1, 1], tables=(yarn, SMALL))
    cos, sin = multiaxis.cos_sin([[3], [5]], spec)
    amp = 0.1 * math.log(16.0) + 1.0
    phi, _ = spec.pair_frequencies()
    want_cos = [
        amp * math.cos(3 * phi[0]),
        amp * math.cos(3 * phi[1]),
        math.cos(5 * phi[2]),
        math.cos(5 * phi[3]),
    ]
    want_sin = [
        amp * math.sin(3 * phi[0]),
        amp * math.sin(3 * phi[1]),
        math.sin(5 * phi[2]),
        math.sin(5 * phi[3]),
    ]
    np.testing.assert_allclose(cos[0], want_cos, rtol=1e-14)
    np.testing.assert_allclose(sin[0], want_sin, rtol=1e-14)


def test_dynamic_seq_len_is_the_maximum_over_every_stream():
    # HF dynamic_rope_update on (S, ...) ids: seq_len = max(all streams) + 1 = 101 > L0 = 32.
    ntk = rope_ref.RopeConfig(8, layout="half", scaling=DynamicNTK(2.0, original_max_position=32))
    spec = multiaxis.MultiAxisRope(8, layout="half", streams=[0, 0, 1, 1], tables=(ntk, ntk))
    pos = np.array([[5, 2], [100, 7]])
    cos, sin = multiaxis.cos_sin(pos, spec)
    base = 10000.0 * (2.0 * 101 / 32 - 1.0) ** (8 / 6)
    theta = [base ** (-2.0 * j / 8) for j in range(4)]  # freq_index defaults to the pair index
    for n in range(2):
        m = [pos[0, n], pos[0, n], pos[1, n], pos[1, n]]
        np.testing.assert_allclose(
            cos[n], [math.cos(mi * t) for mi, t in zip(m, theta, strict=True)], rtol=1e-10
        )
        np.testing.assert_allclose(
            sin[n], [math.sin(mi * t) for mi, t in zip(m, theta, strict=True)], rtol=1e-10
        )
    x = np.ones((2, 8))
    assert np.array_equal(multiaxis.apply(x, pos, spec), multiaxis.apply(x, pos, spec, seq_len=101))


def test_apply_leaves_its_input_alone():
    x = np.random.default_rng(4).standard_normal((3, 8))
    before = x.copy()
    out = multiaxis.apply(x, np.array([[1, 2, 3], [4, 5, 6]]), multiaxis.chatglm_2d(8))
    assert np.array_equal(x, before) and not np.shares_memory(out, x)


def test_chatglm_2d_base_and_head_dim():
    spec = multiaxis.chatglm_2d(16, base=500.0)
    phi, _ = spec.pair_frequencies()
    np.testing.assert_allclose(phi, [500.0 ** (-2.0 * j / 8) for j in range(4)] * 2, rtol=1e-15)
    assert spec.streams == (0,) * 4 + (1,) * 4 and spec.blocks == 2
    for bad in (6, 10, 0, -8):
        with pytest.raises(ValueError, match="head_dim must be a positive multiple of 4"):
            multiaxis.chatglm_2d(bad)


CHATGLM = {"position_encoding_2d": True, "hidden_size": 4096, "num_attention_heads": 32, "rope_theta": 500.0}


def test_from_hf_chatglm_reads_theta_and_head_size():
    assert multiaxis.from_hf(CHATGLM) == multiaxis.chatglm_2d(128, 500.0)
    assert multiaxis.from_hf(CHATGLM, layout="half") == multiaxis.chatglm_2d(128, 500.0)
    plain = {k: v for k, v in CHATGLM.items() if k != "rope_theta"}
    assert multiaxis.from_hf(dict(plain, num_attention_heads=16)) == multiaxis.chatglm_2d(256, 10000.0)


@pytest.mark.parametrize(
    ("config", "layout", "match"),
    [
        (CHATGLM, "interleaved", "layout='interleaved' contradicts position_encoding_2d"),
        (dict(CHATGLM, hidden_size=4100), None, "hidden_size \\(4100\\) is not divisible by num_att"),
        ({k: v for k, v in CHATGLM.items() if k != "num_attention_heads"}, None, "key 'num_attention_heads'"),
        ({k: v for k, v in CHATGLM.items() if k != "hidden_size"}, None, "missing the key 'hidden_size'"),
    ],
)  # fmt: skip
def test_from_hf_chatglm_refuses(config, layout, match):
    with pytest.raises(ValueError, match=match):
        multiaxis.from_hf(config, layout=layout)
