"""Per-layer RoPE (rope_ref.layers): Gemma 3 local/global layers, Llama 4 NoPE layers.

Expected layer kinds restate the released configs: Gemma 3 ``layer_types`` ("sliding_attention" unless
``(i + 1) % 6 == 0``), Llama 4 ``no_rope_layers`` (1 = RoPE, 0 = NoPE, default every 4th layer NoPE).
Rotations are checked against an explicit loop of the half-layout formula.
"""


import numpy as np
import pytest
from mp_reference import half_layout_loop as half_loop

import rope_ref
from rope_ref import layers


@pytest.mark.parametrize(
    ("name", "n_layers", "head_dim", "factor"),
    [
        ("gemma-3-1b", 26, 256, None),
        ("gemma-3-4b", 34, 256, 8.0),
        ("gemma-3-12b", 48, 256, 8.0),
        ("gemma-3-27b", 62, 128, 8.0),
    ],
)
def test_gemma3_local_and_global_layers(name, n_layers, head_dim, factor):
    model = layers.preset(name)
    assert model.num_layers == n_layers
    globals_ = [i for i in range(n_layers) if model.rope(i).base == 1e6]
    assert globals_ == list(range(5, n_layers, 6))  # layers 6, 12, 18, ... counting from 1
    rng = np.random.default_rng(n_layers)
    x = rng.standard_normal(head_dim)
    m = 20000
    for i in (0, 4, 5, 11):
        cfg = model.rope(i)
        assert cfg.layout == "half" and cfg.head_dim == head_dim
        got = model.apply(x, m, i)
        if (i + 1) % 6:
            assert cfg.base == 10000.0 and cfg.scaling is None
            want = half_loop(list(x), m, 10000.0)
        else:
            # linear scaling = positions divided by the factor
            want = half_loop(list(x), m / (factor or 1.0), 1e6)
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)


def test_gemma3_scaling_is_only_on_global_layers():
    model = layers.preset("gemma-3-27b")
    assert model.rope(5).scaling == rope_ref.Linear(8.0)
    assert model.rope(4).scaling is None
    assert layers.preset("gemma-3-1b").rope(5).scaling is None


def test_llama4_nope_layers_are_identity():
    model = layers.preset("llama-4-scout")
    nope = [i for i in range(48) if model.rope(i) is None]
    assert nope == [3, 7, 11, 15, 19, 23, 27, 31, 35, 39, 43, 47]
    x = np.random.default_rng(0).standard_normal((4, 128))
    pos = np.array([0, 5, 9000, 100000])
    out = model.apply(x, pos, 3)
    assert np.array_equal(out, x) and not np.shares_memory(out, x)  # a new array, as apply returns
    out[0, 0] = 123.0
    assert x[0, 0] != 123.0
    cfg = model.rope(0)
    assert cfg.layout == "interleaved" and cfg.base == 500000.0
    assert np.array_equal(model.apply(x, pos, 0), rope_ref.apply(x, pos, cfg))
    assert not np.allclose(model.apply(x, pos, 0)[1:], x[1:])


def test_llama4_default_pattern_and_explicit_flags():
    rope = rope_ref.RopeConfig(8, layout="interleaved")
    for flags in (None, []):
        model = layers.llama4(8, rope, no_rope_layers=flags)
        assert [model.rope(i) is None for i in range(8)] == [False, False, False, True] * 2
    model = layers.llama4(3, rope, no_rope_layers=[0, 1, 0])
    assert [model.rope(i) is None for i in range(3)] == [True, False, True]


def test_bad_inputs():
    model = layers.preset("gemma-3-1b")
    with pytest.raises(ValueError, match="layer_idx must be < num_layers=26"):
        model.rope(26)
    with pytest.raises(ValueError, match="layer_idx"):
        model.rope(-1)
    with pytest.raises(ValueError, match="no_rope_layers"):
        layers.llama4(3, rope_ref.RopeConfig(8, layout="half"), no_rope_layers=[1, 0])
    with pytest.raises(ValueError, match="no_rope_layers"):
        layers.llama4(2, rope_ref.RopeConfig(8, layout="half"), no_rope_layers=[1, 2])
    with pytest.raises(ValueError, match="unknown per-layer preset"):
        layers.preset("gemma-2")


def test_layer_apply_passes_seq_len_to_a_length_dependent_rope():
    cfg = rope_ref.RopeConfig(8, layout="half", scaling=rope_ref.DynamicNTK(3.0, 16))
    model = layers.llama4(4, cfg, no_rope_layers=[1, 0, 1, 1])
    x = np.random.default_rng(3).standard_normal((5, 8))
    pos = np.arange(5.0)
    got = model.apply(x, pos, 2, seq_len=64)
    assert np.array_equal(got, rope_ref.apply(x, pos, cfg, seq_len=64))
    assert not np.array_equal(got, rope_ref.apply(x, pos, cfg))  # seq_len 5 < 16: unscaled
    with pytest.raises(ValueError, match="layer_idx must be < num_layers=4, got 4"):
        model.rope(4)


def test_from_hf_reads_the_nope_interval_and_checks_the_layer_types_length():
    llama4 = {"model_type": "llama4_text", "num_hidden_layers": 6, "hidden_size": 64,
              "num_attention_heads": 4, "rope_theta": 5e5, "no_rope_layer_interval": 3}
    model = layers.from_hf(llama4)
    assert [i for i in range(6) if model.rope(i) is None] == [2, 5]  # (i + 1) % 3 == 0, not % 4
    gemma = {"model_type": "gemma3_text", "num_hidden_layers": 4, "hidden_size": 64, "num_attention_heads": 4,
             "head_dim": 16, "layer_types": ["sliding_attention", "full_attention", "sliding_attention"]}
    with pytest.raises(ValueError, match="layer_types must list num_hidden_layers=4 layer types"):
        layers.from_hf(gemma)


@pytest.mark.parametrize(("pattern", "global_layers"), [(3, [2, 5]), (2, [1, 3, 5]), (6, [5])])
def test_from_hf_reads_gemma3_sliding_window_pattern(pattern, global_layers):
    """No layer_types: layer i is global (base rope_theta) where (i + 1) % sliding_window_pattern == 0."""
    gemma = {"model_type": "gemma3_text", "num_hidden_layers": 7, "hidden_size": 64, "num_attention_heads": 4,
             "head_dim": 16, "rope_theta": 1e6, "rope_local_base_freq": 1e4,
             "sliding_window_pattern": pattern}
    model = layers.from_hf(gemma)
    assert [i for i in range(7) if model.rope(i).base == 1e6] == global_layers
    assert all(model.rope(i).base == 1e4 for i in range(7) if i not in global_layers)
