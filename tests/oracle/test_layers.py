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


def test_gemma3_reads_each_of_its_parameters():
    """Every parameter distinct from its default and from the others: pattern 2 -> layers 1, 3 global."""
    model = layers.gemma3(5, 32, global_factor=2.0, rope_theta=3e5, rope_local_base_freq=2e4,
                          sliding_window_pattern=2)
    local = rope_ref.RopeConfig(32, layout="half", base=2e4)
    glob = rope_ref.RopeConfig(32, layout="half", base=3e5, scaling=rope_ref.Linear(2.0))
    assert model.ropes == (local, glob, local, glob, local) and model.name == "gemma3"


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: layers.gemma3(0, 8, global_factor=None), "num_layers"),
        (lambda: layers.gemma3(2, 8, global_factor=None, sliding_window_pattern=0), "sliding_window_pattern"),
        (lambda: layers.llama4(0, rope_ref.RopeConfig(8, layout="half")), "num_layers"),
        (lambda: layers.llama4(2, rope_ref.RopeConfig(8, layout="half"), interval=0), "interval"),
        (lambda: layers.llama4(2, rope_ref.RopeConfig(8, layout="half"), no_rope_layers=[1, 0.5]),
         r"no_rope_layers\[1\]"),
    ],
    ids=["gemma3-no-layers", "gemma3-pattern-0", "llama4-no-layers", "llama4-interval-0", "llama4-flag-half"],
)
def test_layer_builders_refuse_bad_counts_naming_the_argument(call, match):
    with pytest.raises((ValueError, TypeError), match=match):
        call()


def test_llama4_interval_sets_the_default_nope_layers():
    model = layers.llama4(6, rope_ref.RopeConfig(8, layout="half"), interval=2)
    assert [i for i in range(6) if model.rope(i) is None] == [1, 3, 5]
    assert layers.llama4(1, rope_ref.RopeConfig(8, layout="half"), interval=1).ropes == (None,)


_LLAMA4 = {"model_type": "llama4_text", "num_hidden_layers": 3, "hidden_size": 64, "num_attention_heads": 4,
           "rope_theta": 5e5}


def test_from_hf_reads_the_text_config_its_flags_and_its_name():
    """A wrapper's text_config gives the layers; explicit no_rope_layers win over the interval rule;
    the name is ``_name_or_path``, else the model type."""
    wrapped = {"model_type": "llama4", "_name_or_path": "meta/scout",
               "text_config": {**_LLAMA4, "no_rope_layers": [0, 1, 1], "no_rope_layer_interval": 2}}
    model = layers.from_hf(wrapped)
    assert model.name == "meta/scout" and model.num_layers == 3
    assert [model.rope(i) is None for i in range(3)] == [True, False, False]
    assert model.rope(1) == rope_ref.RopeConfig(16, layout="interleaved", base=5e5)
    assert layers.from_hf(_LLAMA4).name == "llama4_text"


def test_from_hf_layer_rope_theta_keeps_the_other_rope_parameters():
    cfg = {"model_type": "granite_swa", "head_dim": 16, "num_hidden_layers": 3, "max_position_embeddings": 64,
           "rope_parameters": {"rope_type": "linear", "factor": 3.0, "rope_theta": 1.0},
           "layer_rope_theta": [2e4, 7e4, 0]}
    model = layers.from_hf(cfg, layout="interleaved")
    linear = rope_ref.Linear(3.0)
    want = [rope_ref.RopeConfig(16, layout="interleaved", base=b, scaling=linear) for b in (2e4, 7e4)]
    assert model.ropes == (*want, None)


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"num_hidden_layers": None}, "missing the key 'num_hidden_layers'"),
        ({"layer_types": None}, "keyed by layer type but no layer_types list"),
        ({"layer_types": ["full_attention", "chunked_attention"]},
         r"layer_types names \['chunked_attention'\], which have no RoPE in the config "
         r"\(has \['full_attention', 'sliding_attention'\]\)"),
    ],
)
def test_from_hf_refuses_layers_it_cannot_place(change, match):
    cfg = {"model_type": "beam", "head_dim": 16, "num_hidden_layers": 2,
           "layer_types": ["sliding_attention", "full_attention"],
           "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                               "full_attention": {"rope_type": "default", "rope_theta": 1e6}}}
    cfg = {k: v for k, v in {**cfg, **change}.items() if v is not None}
    with pytest.raises(ValueError, match=match):
        layers.from_hf(cfg, layout="half")


def test_from_hf_refuses_a_config_with_one_rope_for_every_layer():
    cfg = {"model_type": "llama", "head_dim": 16, "num_hidden_layers": 2}
    with pytest.raises(ValueError, match="model_type 'llama' has one RoPE for every layer: use RopeConfig"):
        layers.from_hf(cfg)


@pytest.mark.parametrize("thetas", [[1e4, 2e4], [1e4, 2e4, 3e4, 4e4], "1e4"])
def test_from_hf_layer_rope_theta_needs_one_base_per_layer(thetas):
    cfg = {"model_type": "granite_swa", "head_dim": 16, "num_hidden_layers": 3, "layer_rope_theta": thetas}
    with pytest.raises(ValueError, match=r"^layer_rope_theta must be a list of num_hidden_layers=3 bases"):
        layers.from_hf(cfg, layout="half")
