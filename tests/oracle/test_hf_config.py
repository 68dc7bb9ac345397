"""``RopeConfig.from_hf``: real config.json dicts, written here by hand from their published files.

Sources (Hugging Face Hub ``config.json`` of each model; values cross-checked against copies quoted in
public repositories found with the code search): meta-llama/Llama-3.1-8B, Qwen/Qwen2.5-7B-Instruct
(with the ``rope_scaling`` block its model card tells users to add for 128K context),
microsoft/Phi-3.5-mini-instruct, deepseek-ai/DeepSeek-V2-Lite. Only the keys that matter for RoPE
(plus a few neighbours) are kept.
Expected values are derived independently in each test (closed forms, mpmath), never from rope-ref.
"""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import mpmath
import numpy as np
import pytest

import rope_ref
from rope_ref import Llama3, LongRoPE, RopeConfig, YaRN
from rope_ref.hf_config import rope_configs_from_hf

LLAMA_31_8B = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "max_position_embeddings": 131072,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "rope_scaling": {
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "rope_theta": 500000.0,
    "vocab_size": 128256,
}

QWEN25_7B_YARN = {
    "architectures": ["Qwen2ForCausalLM"],
    "hidden_size": 3584,
    "intermediate_size": 18944,
    "max_position_embeddings": 32768,
    "model_type": "qwen2",
    "num_attention_heads": 28,
    "num_hidden_layers": 28,
    "num_key_value_heads": 4,
    "rope_theta": 1000000.0,
    "rope_scaling": {"factor": 4.0, "original_max_position_embeddings": 32768, "type": "yarn"},
    "vocab_size": 152064,
}

PHI35_MINI = json.loads(Path(__file__).with_name("phi-3.5-mini-instruct.json").read_text(encoding="utf-8"))

DEEPSEEK_V2_LITE = {
    "architectures": ["DeepseekV2ForCausalLM"],
    "hidden_size": 2048,
    "kv_lora_rank": 512,
    "max_position_embeddings": 163840,
    "model_type": "deepseek_v2",
    "num_attention_heads": 16,
    "num_hidden_layers": 27,
    "num_key_value_heads": 16,
    "q_lora_rank": None,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "rope_scaling": {
        "beta_fast": 32,
        "beta_slow": 1,
        "factor": 40,
        "mscale": 0.707,
        "mscale_all_dim": 0.707,
        "original_max_position_embeddings": 4096,
        "type": "yarn",
    },
    "rope_theta": 10000,
    "v_head_dim": 128,
}


def _theta(base: float, d: int) -> np.ndarray:
    return np.array([float(mpmath.power(mpmath.mpf(base), -mpmath.mpf(2 * i) / d)) for i in range(d // 2)])


def test_layout_inferred_required_or_contradicted():
    assert RopeConfig.from_hf(LLAMA_31_8B).layout == "half"  # model_type 'llama': rotate_half
    assert RopeConfig.from_hf(DEEPSEEK_V2_LITE).layout == "interleaved"  # complex freqs_cis
    anonymous = {k: v for k, v in LLAMA_31_8B.items() if k != "model_type"}
    with pytest.raises(ValueError, match="layout is required"):
        RopeConfig.from_hf(anonymous)
    assert RopeConfig.from_hf(anonymous, layout="interleaved").layout == "interleaved"
    with pytest.raises(ValueError, match="layout"):
        RopeConfig.from_hf(LLAMA_31_8B, layout="neox")
    with pytest.raises(ValueError, match="model_type='deepseek_v2'"):
        RopeConfig.from_hf(DEEPSEEK_V2_LITE, layout="half")
    v3 = dict(DEEPSEEK_V2_LITE, model_type="deepseek_v3")
    with pytest.raises(ValueError, match=r"rope_interleave=True \(its default\)"):
        RopeConfig.from_hf(v3, layout="half")
    assert RopeConfig.from_hf(dict(v3, rope_interleave=False)).layout == "half"
    with pytest.raises(ValueError, match="rope_interleave=False"):
        RopeConfig.from_hf(dict(v3, rope_interleave=False), layout="interleaved")


def test_llama_31_8b():
    cfg = RopeConfig.from_hf(LLAMA_31_8B, layout="half")
    assert (cfg.head_dim, cfg.rotary_dim, cfg.base) == (128, 128, 500000.0)
    assert cfg.scaling == Llama3(8.0, 1.0, 4.0, 8192)
    theta = _theta(5e5, 128)
    got = rope_ref.inv_freq(cfg)
    wavelen = 2 * math.pi / theta
    short, long = wavelen < 8192 / 4, wavelen > 8192 / 1
    assert short.sum() > 0 and long.sum() > 0 and (~short & ~long).sum() > 0
    np.testing.assert_allclose(got[short], theta[short], rtol=1e-15)
    np.testing.assert_allclose(got[long], theta[long] / 8, rtol=1e-15)
    mid = np.flatnonzero(~short & ~long)
    for i in mid:  # smooth = (8192 / wavelen - 1) / 3; the blend, written as theta * (s + (1 - s) / 8)
        s = (8192 * theta[i] / (2 * math.pi) - 1) / 3
        assert got[i] == pytest.approx(theta[i] * (s + (1 - s) / 8), rel=1e-13)
    assert rope_ref.attention_factor(cfg) == 1.0


def test_qwen25_yarn_explicit_factor_wins():
    # max_position_embeddings / original = 1, but the explicit factor 4 is used (transformers PR #40320).
    cfg = RopeConfig.from_hf(QWEN25_7B_YARN, layout="half")
    assert (cfg.head_dim, cfg.rotary_dim, cfg.base) == (128, 128, 1e6)
    assert cfg.scaling == YaRN(4.0, 32768)
    assert rope_ref.attention_factor(cfg) == pytest.approx(0.1 * math.log(4) + 1, rel=1e-15)
    # Independent band edges: pairs with >= 32 rotations in 32768 tokens are untouched, <= 1 divided by 4.
    theta = _theta(1e6, 128)
    rotations = 32768 * theta / (2 * math.pi)
    got = rope_ref.inv_freq(cfg)
    np.testing.assert_array_equal(got[rotations >= 32], theta[rotations >= 32])
    np.testing.assert_allclose(got[rotations <= 1], theta[rotations <= 1] / 4, rtol=1e-15)


def test_yarn_factor_derived_only_when_missing():
    config = copy.deepcopy(QWEN25_7B_YARN)
    config["max_position_embeddings"] = 131072
    del config["rope_scaling"]["factor"]
    assert RopeConfig.from_hf(config, layout="half").scaling == YaRN(4.0, 32768)
    config["rope_scaling"]["factor"] = 2.0
    assert RopeConfig.from_hf(config, layout="half").scaling == YaRN(2.0, 32768)


def test_phi35_mini_longrope():
    cfg = RopeConfig.from_hf(PHI35_MINI, layout="half")
    assert (cfg.head_dim, cfg.rotary_dim, cfg.base) == (96, 96, 10000.0)
    scaling = cfg.scaling
    assert isinstance(scaling, LongRoPE)
    assert scaling.original_max_position == 4096 and scaling.factor == 32.0  # 131072 / 4096
    # ln 32 / ln 4096 = 5/12 exactly, so the attention factor is sqrt(17/12) (Phi-3 "long_mscale" 1.19024).
    assert rope_ref.attention_factor(cfg) == pytest.approx(math.sqrt(17 / 12), rel=1e-15)
    theta = _theta(1e4, 96)
    short = np.array(PHI35_MINI["rope_scaling"]["short_factor"])
    long = np.array(PHI35_MINI["rope_scaling"]["long_factor"])
    np.testing.assert_allclose(rope_ref.inv_freq(cfg, 4096), theta / short, rtol=1e-15)
    np.testing.assert_allclose(rope_ref.inv_freq(cfg, 4097), theta / long, rtol=1e-15)
    np.testing.assert_allclose(rope_ref.inv_freq(cfg), theta / short, rtol=1e-15)


def test_deepseek_v2_lite_yarn_mscale():
    cfg = RopeConfig.from_hf(DEEPSEEK_V2_LITE, layout="interleaved")
    # The rotary part of MLA is qk_rope_head_dim wide (HF DeepseekV2Config: head_dim = qk_rope_head_dim).
    assert (cfg.head_dim, cfg.rotary_dim, cfg.base) == (64, 64, 10000.0)
    assert cfg.scaling == YaRN(40.0, 4096, mscale=0.707, mscale_all_dim=0.707)
    assert rope_ref.attention_factor(cfg) == 1.0  # equal mscales cancel in HF's ratio
    # DeepSeek's separate softmax-scale correction, mscale(40, 0.707)^2, belongs to attention, not RoPE.


def test_rope_parameters_v5_format_and_partial_rotary():
    config = {
        "hidden_size": 2560,
        "num_attention_heads": 32,
        "max_position_embeddings": 2048,
        "partial_rotary_factor": 0.4,
        "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0},
    }
    cfg = RopeConfig.from_hf(config, layout="half")
    assert (cfg.head_dim, cfg.rotary_dim, cfg.base) == (80, 32, 10000.0)
    assert cfg.scaling == rope_ref.Linear(2.0)
    # The dict's partial_rotary_factor wins over the top-level one (transformers 5.23
    # convert_rope_params_to_dict: rope_parameters.setdefault("partial_rotary_factor", top_level)).
    config["rope_parameters"]["partial_rotary_factor"] = 0.5
    assert RopeConfig.from_hf(config, layout="half").rotary_dim == 40
    del config["partial_rotary_factor"]
    assert RopeConfig.from_hf(config, layout="half").rotary_dim == 40
    del config["rope_parameters"]["partial_rotary_factor"]
    assert RopeConfig.from_hf(config, layout="half").rotary_dim == 80


def test_default_and_head_dim_key():
    config = {"head_dim": 256, "hidden_size": 2048, "num_attention_heads": 8, "rope_theta": 1e4}
    cfg = RopeConfig.from_hf(config, layout="half")
    assert (cfg.head_dim, cfg.scaling) == (256, None)
    config["rope_scaling"] = {"rope_type": "default"}
    assert RopeConfig.from_hf(config, layout="half").scaling is None


def test_dynamic_uses_max_position_embeddings():
    config = {
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "rope_theta": 1e4,
        "max_position_embeddings": 4096,
    }
    config["rope_scaling"] = {"type": "dynamic", "factor": 2.0}
    assert RopeConfig.from_hf(config, layout="half").scaling == rope_ref.DynamicNTK(2.0, 4096)
    # HF's _compute_dynamic_ntk_parameters reads max_position_embeddings and ignores an
    # original_max_position_embeddings, at top level or inside the rope dict (peers.md §1.1).
    config["original_max_position_embeddings"] = 1024
    config["rope_scaling"] = {"type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 2048}
    assert RopeConfig.from_hf(config, layout="half").scaling == rope_ref.DynamicNTK(2.0, 4096)


def test_layer_typed_rope_parameters():
    config = {
        "head_dim": 128,
        "num_attention_heads": 8,
        "hidden_size": 1024,
        "max_position_embeddings": 131072,
        "rope_parameters": {
            "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
            "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
        },
    }
    full = RopeConfig.from_hf(config, layout="half", layer_type="full_attention")
    assert (full.base, full.scaling) == (1e6, rope_ref.Linear(8.0))
    sliding = RopeConfig.from_hf(config, layout="half", layer_type="sliding_attention")
    assert (sliding.base, sliding.scaling) == (1e4, None)
    with pytest.raises(ValueError, match="layer_type"):
        RopeConfig.from_hf(config, layout="half")


def _without(config: dict, *path: str) -> dict:
    out = copy.deepcopy(config)
    node = out
    for key in path[:-1]:
        node = node[key]
    del node[path[-1]]
    return out


def _with(config: dict, value, *path: str) -> dict:
    out = copy.deepcopy(config)
    node = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return out


@pytest.mark.parametrize(
    "config,key",
    [
        (_without(_without(LLAMA_31_8B, "model_type"), "rope_theta"), "rope_theta"),
        (_without(LLAMA_31_8B, "rope_scaling", "low_freq_factor"), "low_freq_factor"),
        (_without(LLAMA_31_8B, "rope_scaling", "rope_type"), "rope_type"),
        (_with(LLAMA_31_8B, "llama4", "rope_scaling", "rope_type"), "rope_type"),
        (_with(LLAMA_31_8B, 1.0, "rope_scaling", "low_freq"), "low_freq"),
        (_without(LLAMA_31_8B, "num_attention_heads"), "num_attention_heads"),
        (_with(PHI35_MINI, [1.0] * 47, "rope_scaling", "short_factor"), "short_factor"),
        (_with(PHI35_MINI, [1.0] * 64, "rope_scaling", "long_factor"), "long_factor"),
        (_without(PHI35_MINI, "rope_scaling", "long_factor"), "long_factor"),
        (_with(DEEPSEEK_V2_LITE, 0.5, "rope_scaling", "factor"), "factor"),
        (_with(DEEPSEEK_V2_LITE, 0.5, "rope_scaling", "beta_fast"), "beta_fast"),  # below beta_slow = 1
        (
            _with(LLAMA_31_8B, 0, "rope_scaling", "original_max_position_embeddings"),
            "original_max_position",
        ),
        (_with(LLAMA_31_8B, 1.5, "partial_rotary_factor"), "partial_rotary_factor"),
        (_with(LLAMA_31_8B, 4097, "hidden_size"), "hidden_size"),
        (
            {
                "hidden_size": 64,
                "num_attention_heads": 1,
                "rope_theta": 1e4,
                "rope_scaling": {"type": "dynamic", "factor": 2},
            },
            # Quoted: a bare max_position_embeddings would also match 'original_max_position_embeddings'.
            "'max_position_embeddings'",
        ),
    ],
)
def test_bad_configs_raise_naming_the_key(config, key):
    with pytest.raises(ValueError, match=key):
        RopeConfig.from_hf(config, layout=None if "model_type" in config else "half")


def test_inputs_not_mutated():
    before = copy.deepcopy(PHI35_MINI)
    RopeConfig.from_hf(PHI35_MINI, layout="half")
    assert PHI35_MINI == before


# -- issue 21: holes a mutant of hf_config.py could slip through -----------------------------------------


def test_qk_rope_head_dim_wins_over_head_dim():
    # DeepSeek MLA: the rotary part is qk_rope_head_dim wide whatever head_dim (here nope + rope) says.
    config = dict(DEEPSEEK_V2_LITE, head_dim=192)
    cfg = RopeConfig.from_hf(config)
    assert (cfg.head_dim, cfg.rotary_dim) == (64, 64)


def test_rope_type_wins_over_legacy_type():
    config = dict(LLAMA_31_8B, rope_scaling={"rope_type": "linear", "type": "dynamic", "factor": 2.0})
    assert RopeConfig.from_hf(config).scaling == rope_ref.Linear(2.0)
    config["rope_scaling"] = {"type": "dynamic", "factor": 2.0}
    assert RopeConfig.from_hf(config).scaling == rope_ref.DynamicNTK(2.0, 131072)


def test_rope_scaling_wins_over_rope_parameters():
    # transformers 5.23 convert_rope_params_to_dict: rope_parameters = rope_scaling or rope_parameters.
    config = dict(
        LLAMA_31_8B,
        rope_scaling={"rope_type": "linear", "factor": 2.0},
        rope_parameters={"rope_type": "linear", "factor": 3.0, "rope_theta": 1e4},
    )
    cfg = RopeConfig.from_hf(config)
    assert (cfg.scaling, cfg.base) == (rope_ref.Linear(2.0), 500000.0)
    config["rope_scaling"] = {}
    cfg = RopeConfig.from_hf(config)
    assert (cfg.scaling, cfg.base) == (rope_ref.Linear(3.0), 1e4)  # the dict's rope_theta wins


def test_rotary_width_truncates_like_transformers():
    # int(80 * 0.335) = int(26.8) = 26; round() would give 27 (odd, refused).
    config = {"model_type": "phi", "hidden_size": 2560, "num_attention_heads": 32, "rope_theta": 1e4}
    assert RopeConfig.from_hf(dict(config, partial_rotary_factor=0.335)).rotary_dim == 26
    assert RopeConfig.from_hf(dict(config, partial_rotary_factor=0.4)).rotary_dim == 32


def test_stray_layer_type_is_refused():
    with pytest.raises(ValueError, match="layer_type='full_attention' given"):
        RopeConfig.from_hf(LLAMA_31_8B, layer_type="full_attention")


def test_dynamic_needs_max_position_embeddings_even_with_original():
    config = {
        "model_type": "llama",
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "rope_theta": 1e4,
        "rope_scaling": {"type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 2048},
    }
    with pytest.raises(ValueError, match="'max_position_embeddings'"):
        RopeConfig.from_hf(config)


# -- real families from raw config.json (values from the Hub files) --------------------------------------


def test_gpt_neox_20b_raw_config():
    config = {
        "model_type": "gpt_neox",
        "hidden_size": 6144,
        "num_attention_heads": 64,
        "rotary_pct": 0.25,
        "rotary_emb_base": 10000,
        "max_position_embeddings": 2048,
        "use_parallel_residual": True,
    }
    cfg = RopeConfig.from_hf(config)
    assert (cfg.head_dim, cfg.rotary_dim, cfg.base, cfg.layout) == (96, 24, 1e4, "half")
    with pytest.raises(ValueError, match="model_type='gpt_neox'"):
        RopeConfig.from_hf(config, layout="interleaved")
    # rotary_pct is read, not just matched by the model type's default of 0.25.
    assert RopeConfig.from_hf(dict(config, rotary_pct=0.5)).rotary_dim == 48
    assert RopeConfig.from_hf(dict(config, rotary_pct=1.0)).rotary_dim == 96


def test_gptj_raw_config():
    config = {"model_type": "gptj", "n_embd": 4096, "n_head": 16, "rotary_dim": 64}
    cfg = RopeConfig.from_hf(config)
    assert (cfg.head_dim, cfg.rotary_dim, cfg.base, cfg.layout) == (256, 64, 1e4, "interleaved")


def test_chatglm3_raw_config():
    config = {
        "model_type": "chatglm",
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "kv_channels": 128,
        "rope_ratio": 50,
        "original_rope": True,
        "seq_length": 32768,
    }
    cfg = RopeConfig.from_hf(config)
    assert (cfg.head_dim, cfg.rotary_dim, cfg.base, cfg.layout) == (128, 64, 500000.0, "interleaved")
    with pytest.raises(ValueError, match="position_encoding_2d"):
        RopeConfig.from_hf(dict(config, position_encoding_2d=True))


def test_gemma3_raw_config_has_two_ropes():
    config = {
        "model_type": "gemma3_text",
        "head_dim": 256,
        "hidden_size": 2560,
        "num_attention_heads": 8,
        "rope_theta": 1000000.0,
        "rope_local_base_freq": 10000.0,
        "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
        "max_position_embeddings": 131072,
    }
    both = rope_configs_from_hf(config)
    assert both["full_attention"] == RopeConfig(256, layout="half", base=1e6, scaling=rope_ref.Linear(8.0))
    assert both["sliding_attention"] == RopeConfig(256, layout="half", base=1e4)
    with pytest.raises(ValueError, match="layer_type"):
        RopeConfig.from_hf(config)


@pytest.mark.parametrize(
    "extra,match",
    [
        ({"rope_mystery": 2}, "rope_mystery"),
        ({"rotary_base_scale": 2}, "rotary_base_scale"),
        ({"alibi": True}, "ALiBi"),
        ({"rope_scaling": {"rope_type": "default", "mrope_section": [16, 24, 24]}}, "mrope_section"),
    ],
)
def test_unknown_rotation_keys_are_refused(extra, match):
    with pytest.raises(ValueError, match=match):
        RopeConfig.from_hf(dict(LLAMA_31_8B, **extra))


def test_internlm2_and_kimi_k2_raw_configs():
    # Hub-code families transformers does not ship as such: InternLM2 (rotate_half) and Kimi-K2
    # (DeepSeek-V3 architecture, model_type kimi_k2, interleaved like DeepSeek's MLA rope).
    internlm2 = {
        "model_type": "internlm2",
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "rope_theta": 1000000,
        "max_position_embeddings": 32768,
        "rope_scaling": {"type": "dynamic", "factor": 2.0},
    }
    cfg = RopeConfig.from_hf(internlm2)
    assert (cfg.layout, cfg.head_dim, cfg.base) == ("half", 128, 1e6)
    assert cfg.scaling == rope_ref.DynamicNTK(2.0, 32768)
    kimi = {
        "model_type": "kimi_k2",
        "hidden_size": 7168,
        "num_attention_heads": 64,
        "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64,
        "rope_theta": 50000.0,
        "max_position_embeddings": 131072,
        "rope_scaling": {
            "type": "yarn",
            "factor": 32.0,
            "beta_fast": 1.0,
            "beta_slow": 1.0,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
            "original_max_position_embeddings": 4096,
        },
    }
    cfg = RopeConfig.from_hf(kimi)  # Kimi-K2 ships beta_fast == beta_slow == 1
    assert (cfg.layout, cfg.head_dim, cfg.rotary_dim, cfg.base) == ("interleaved", 64, 64, 50000.0)
    assert rope_ref.attention_factor(cfg) == 1.0  # equal mscales cancel


# -- issue 21, second mutation run (salt s5): each branch of hf_config.py pinned by a hand-built config ------

SMALL = {"model_type": "llama", "hidden_size": 512, "num_attention_heads": 8, "rope_theta": 1e4}  # head 64


def test_multimodal_wrapper_reads_text_config():
    # Llama 4 / Gemma 3 wrappers keep the language model's keys in text_config.
    wrapper = {"model_type": "llama4", "text_config": dict(SMALL, rope_theta=5e5, head_dim=128)}
    cfg = RopeConfig.from_hf(wrapper, layout="half")  # text model_type 'llama' decides half
    assert (cfg.head_dim, cfg.base, cfg.layout) == (128, 5e5, "half")
    # A rope key at top level means the top level is the text model: text_config is ignored then.
    flat = dict(SMALL, text_config={"head_dim": 32, "rope_theta": 1.0, "hidden_size": 7})
    assert (RopeConfig.from_hf(flat).head_dim, RopeConfig.from_hf(flat).base) == (64, 1e4)
    assert rope_configs_from_hf(wrapper) == {"default": cfg}


@pytest.mark.parametrize("key", ["rope_theta", "rope_scaling", "rope_parameters", "hidden_size", "head_dim"])
def test_any_top_level_rope_key_keeps_the_top_level(key):
    values = {"rope_theta": 2e4, "rope_scaling": {"rope_type": "default"},
              "rope_parameters": {"rope_theta": 2e4}, "hidden_size": 1024, "head_dim": 64}
    top = {"model_type": "llama", "num_attention_heads": 16, "hidden_size": 1024, "rope_theta": 2e4,
           key: values[key], "text_config": {"model_type": "gptj", "n_embd": 64, "n_head": 1}}
    cfg = RopeConfig.from_hf(top)
    assert (cfg.layout, cfg.head_dim) == ("half", 64)


def test_rope_dict_must_be_a_mapping():
    with pytest.raises(ValueError, match="must be a dict, got list"):
        RopeConfig.from_hf(dict(SMALL, rope_scaling=[("rope_type", "linear")]))
    with pytest.raises(TypeError, match="config must be a dict"):
        RopeConfig.from_hf([("model_type", "llama")])
    with pytest.raises(TypeError, match="config must be a dict"):
        rope_configs_from_hf([("model_type", "llama")])


def test_layer_typed_dict_with_a_none_entry_and_an_unknown_layer():
    config = dict(SMALL, rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0},
                                          "sliding_attention": None})
    sliding = RopeConfig.from_hf(config, layer_type="sliding_attention")
    assert (sliding.scaling, sliding.base) == (None, 1e4)
    with pytest.raises(ValueError, match="layer_type 'chunked' is not in rope_parameters"):
        RopeConfig.from_hf(config, layer_type="chunked")
    # A flat dict whose values are not all dicts is not keyed by layer type.
    flat = dict(SMALL, rope_parameters={"rope_type": "linear", "factor": 2.0})
    assert RopeConfig.from_hf(flat).scaling == rope_ref.Linear(2.0)
    assert list(rope_configs_from_hf(flat)) == ["default"]
    full = dict(SMALL, rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0},
                                        "sliding_attention": {}})
    both = rope_configs_from_hf(full)
    assert list(both) == ["full_attention", "sliding_attention"]
    assert both["full_attention"].scaling == rope_ref.Linear(2.0)
    assert both["sliding_attention"].scaling is None


def test_head_size_from_hidden_and_heads_and_its_errors():
    assert RopeConfig.from_hf(SMALL).head_dim == 64
    assert RopeConfig.from_hf(dict(SMALL, kv_channels=32)).head_dim == 32
    assert RopeConfig.from_hf(dict(SMALL, head_dim=None, kv_channels=32)).head_dim == 32
    with pytest.raises(ValueError, match="missing 'hidden_size'"):
        RopeConfig.from_hf({k: v for k, v in SMALL.items() if k != "hidden_size"})
    with pytest.raises(ValueError, match="head_dim"):
        RopeConfig.from_hf(dict(SMALL, head_dim=1))  # below the minimum of 2
    with pytest.raises(ValueError, match=r"hidden_size \(513\) is not divisible by num_attention_heads"):
        RopeConfig.from_hf(dict(SMALL, hidden_size=513))
    assert RopeConfig.from_hf(dict(SMALL, hidden_size=16, num_attention_heads=8)).head_dim == 2


def test_keys_matched_case_insensitively_and_rope_switches():
    for key in ("ROPE_mystery", "Rotary_extra"):
        with pytest.raises(ValueError, match=key):
            RopeConfig.from_hf(dict(SMALL, **{key: 1}))
    with pytest.raises(ValueError, match="use_rope=False"):
        RopeConfig.from_hf(dict(SMALL, use_rope=False))
    # Understood switches that do not change the rotation.
    ok = dict(SMALL, use_rope=True, alibi=False, position_encoding_2d=False, no_rope_layers=[1, 0],
              use_flash_rotary=True)
    assert RopeConfig.from_hf(ok) == RopeConfig.from_hf(SMALL)


def test_infer_layout_reasons():
    from rope_ref.hf_config import infer_layout

    v3 = {"model_type": "deepseek_v3"}
    assert infer_layout(v3) == ("interleaved", "rope_interleave=True (its default)")
    assert infer_layout({"model_type": "deepseek_v3", "rope_interleave": None}) == (
        "interleaved", "rope_interleave=True")
    llama = {"model_type": "llama", "rope_interleave": True}
    assert infer_layout(llama) == ("interleaved", "rope_interleave=True")
    glm = {"model_type": "chatglm"}
    assert infer_layout(glm) == ("interleaved", "original_rope=True (model_type 'chatglm')")
    assert infer_layout({"model_type": "chatglm", "original_rope": False}) == (
        "half", "original_rope=False (model_type 'chatglm')")
    assert infer_layout({"model_type": "cohere"}) == ("interleaved", "model_type='cohere'")
    assert infer_layout({"model_type": "mystery"}) == (None, "model_type='mystery'")
    assert infer_layout({}) == (None, "no model_type")
    with pytest.raises(ValueError, match=r"layout must be one of \('half', 'interleaved'\), got 3"):
        RopeConfig.from_hf(SMALL, layout=3)
    with pytest.raises(ValueError, match=r"layout is required: the config does not fix .*\(no model_type\)"):
        RopeConfig.from_hf({k: v for k, v in SMALL.items() if k != "model_type"})


def test_base_sources_in_order():
    no_theta = {k: v for k, v in SMALL.items() if k != "rope_theta"}
    assert RopeConfig.from_hf(no_theta).base == 10000.0  # llama's default
    assert RopeConfig.from_hf(dict(no_theta, model_type="mixtral")).base == 1e6
    assert RopeConfig.from_hf(dict(no_theta, model_type="cohere")).base == 5e5
    assert RopeConfig.from_hf(dict(no_theta, rotary_emb_base=123.0)).base == 123.0
    assert RopeConfig.from_hf(dict(SMALL, rotary_emb_base=123.0)).base == 1e4  # rope_theta first
    assert RopeConfig.from_hf(dict(SMALL, rope_parameters={"rope_theta": 77.0})).base == 77.0
    with pytest.raises(ValueError, match="model_type 'mystery' has no known default base"):
        RopeConfig.from_hf(dict(no_theta, model_type="mystery"), layout="half")
    with pytest.raises(TypeError, match="rope_theta"):
        RopeConfig.from_hf(dict(SMALL, rope_theta="1e4"))


def test_gemma3_bases_and_layer_checks():
    g = {"model_type": "gemma3_text", "head_dim": 64, "hidden_size": 256, "num_attention_heads": 4}
    both = rope_configs_from_hf(g)  # no rope_theta, no rope_local_base_freq: transformers' defaults
    assert (both["full_attention"].base, both["sliding_attention"].base) == (1e6, 1e4)
    both = rope_configs_from_hf(dict(g, rope_local_base_freq=2e4, rope_theta=3e6))
    assert (both["full_attention"].base, both["sliding_attention"].base) == (3e6, 2e4)
    with pytest.raises(ValueError, match="layer_type must be one of"):
        RopeConfig.from_hf(g, layer_type="chunked_attention")
    # A v5 Gemma 3 dict keyed by layer type: the sliding entry's own rope_theta and scaling are used.
    full = {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6}
    local = {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}
    v5 = dict(g, rope_parameters={"full_attention": full, "sliding_attention": local})
    sliding = RopeConfig.from_hf(v5, layer_type="sliding_attention")
    assert (sliding.base, sliding.scaling) == (1e4, rope_ref.Linear(2.0))


def test_chatglm_ratio_multiplies_base_or_interpolates_for_chatglm2_32k():
    glm = {"model_type": "chatglm", "hidden_size": 4096, "num_attention_heads": 32, "kv_channels": 128,
           "seq_length": 32768}
    assert RopeConfig.from_hf(glm).base == 1e4  # no rope_ratio: 1
    assert RopeConfig.from_hf(dict(glm, rope_ratio=500)).base == 5e6
    v32k = dict(glm, rope_ratio=16.0, _name_or_path="THUDM/ChatGLM2-6B-32k")
    cfg = RopeConfig.from_hf(v32k)
    assert (cfg.base, cfg.scaling, cfg.rotary_dim) == (1e4, rope_ref.Linear(16.0), 64)
    # ChatGLM2 with ratio 1 is plain.
    assert RopeConfig.from_hf(dict(v32k, rope_ratio=1.0)).scaling is None
    with pytest.raises(ValueError, match="ambiguous"):
        RopeConfig.from_hf(dict(v32k, rope_scaling={"rope_type": "linear", "factor": 2.0}))
    # seq_length stands in for max_position_embeddings (needed by dynamic NTK).
    dyn = RopeConfig.from_hf(dict(glm, rope_scaling={"rope_type": "dynamic", "factor": 2.0}))
    assert dyn.scaling == rope_ref.DynamicNTK(2.0, 32768)
    dyn = RopeConfig.from_hf(dict(glm, max_position_embeddings=8192,
                                  rope_scaling={"rope_type": "dynamic", "factor": 2.0}))
    assert dyn.scaling == rope_ref.DynamicNTK(2.0, 8192)
    with pytest.raises(ValueError, match="'max_position_embeddings'"):
        dynamic = {"rope_type": "dynamic", "factor": 2.0}
        RopeConfig.from_hf(dict(SMALL, seq_length=32768, rope_scaling=dynamic))


def test_rotary_width_sources():
    gptj = {"model_type": "gptj", "n_embd": 4096, "n_head": 16}
    assert RopeConfig.from_hf(gptj).rotary_dim == 64  # GPTJConfig default
    with pytest.raises(ValueError, match=r"rotary_dim \(512\) exceeds the head size \(256\)"):
        RopeConfig.from_hf(dict(gptj, rotary_dim=512))
    assert RopeConfig.from_hf(dict(gptj, rotary_dim=256)).rotary_dim == 256
    # rotary_dim without partial_rotary_factor gives the width directly (any family); with it, the factor.
    assert RopeConfig.from_hf(dict(SMALL, rotary_dim=32)).rotary_dim == 32
    assert RopeConfig.from_hf(dict(SMALL, rotary_dim=32, partial_rotary_factor=0.25)).rotary_dim == 16
    # Defaults by model type, and the (0, 1] range.
    assert RopeConfig.from_hf(dict(SMALL, model_type="stablelm")).rotary_dim == 16
    assert RopeConfig.from_hf(dict(SMALL, model_type="phi")).rotary_dim == 32
    assert RopeConfig.from_hf(dict(SMALL, model_type="glm")).rotary_dim == 32
    assert RopeConfig.from_hf(dict(SMALL, partial_rotary_factor=1.0)).rotary_dim == 64
    assert RopeConfig.from_hf(dict(SMALL, partial_rotary_factor=None, rotary_pct=0.5)).rotary_dim == 32
    for bad in (0.0, -0.5, 1.0000001):
        with pytest.raises(ValueError, match=r"partial_rotary_factor must be in \(0, 1\]"):
            RopeConfig.from_hf(dict(SMALL, partial_rotary_factor=bad))
    # int(64 * 0.02) = 1 and int(64 * 0.1) = 6.4 -> 6 is fine, 0.05 -> 3 is odd.
    for bad in (0.02, 0.05):
        with pytest.raises(ValueError, match="not a positive even integer"):
            RopeConfig.from_hf(dict(SMALL, partial_rotary_factor=bad))
    assert RopeConfig.from_hf(dict(SMALL, partial_rotary_factor=0.1)).rotary_dim == 6
    assert RopeConfig.from_hf(dict(SMALL, partial_rotary_factor=0.04)).rotary_dim == 2


def test_original_context_sources():
    yarn = {"rope_type": "yarn", "factor": 4.0}
    base = dict(SMALL, max_position_embeddings=8192)
    assert RopeConfig.from_hf(dict(base, rope_scaling=yarn)).scaling == YaRN(4.0, 8192)
    inner = dict(yarn, original_max_position_embeddings=2048)
    assert RopeConfig.from_hf(dict(base, rope_scaling=inner)).scaling == YaRN(4.0, 2048)
    top = dict(base, rope_scaling=inner, original_max_position_embeddings=1024)
    assert RopeConfig.from_hf(top).scaling == YaRN(4.0, 1024)  # the top level wins (Phi-3)
    # Not for linear: a top-level original context is not a key of its dict.
    linear = {"rope_type": "linear", "factor": 2.0}
    lin = dict(base, rope_scaling=linear, original_max_position_embeddings=1024)
    assert RopeConfig.from_hf(lin).scaling == rope_ref.Linear(2.0)
    llama3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}
    got = RopeConfig.from_hf(dict(base, rope_scaling=llama3, original_max_position_embeddings=4096))
    assert got.scaling == Llama3(8.0, 1.0, 4.0, 4096)


def test_longrope_lists_must_match_the_rotary_width():
    cfg = dict(SMALL, max_position_embeddings=8192, original_max_position_embeddings=4096,
               partial_rotary_factor=0.5)  # rotary width 32: 16 entries
    ok = {"rope_type": "longrope", "short_factor": [1.0] * 16, "long_factor": [2.0] * 16}
    got = RopeConfig.from_hf(dict(cfg, rope_scaling=ok))
    assert got.rotary_dim == 32 and got.scaling.factor == 2.0
    # (The two lists have equal lengths, checked by LongRoPE itself, so short_factor is named first.)
    with pytest.raises(ValueError, match=r"'short_factor' must have rotary_dim // 2 = 16 entries, got 32"):
        RopeConfig.from_hf(dict(cfg, rope_scaling=dict(ok, short_factor=[1.0] * 32, long_factor=[1.0] * 32)))


def test_nested_detection_needs_layer_type_key_present():
    # A Gemma 3 raw config: sliding layers get no rope dict even if rope_scaling is set.
    g = {"model_type": "gemma3", "head_dim": 64, "hidden_size": 256, "num_attention_heads": 4,
         "rope_scaling": {"rope_type": "linear", "factor": 8.0}, "rope_parameters": None}
    assert RopeConfig.from_hf(g, layer_type="sliding_attention").scaling is None
    assert RopeConfig.from_hf(g, layer_type="full_attention").scaling == rope_ref.Linear(8.0)


def test_gptj_rotary_dim_two_is_the_smallest_width():
    gptj = {"model_type": "gptj", "n_embd": 4096, "n_head": 16}
    assert RopeConfig.from_hf(dict(gptj, rotary_dim=2)).rotary_dim == 2
    with pytest.raises(ValueError, match="rotary_dim"):
        RopeConfig.from_hf(dict(gptj, rotary_dim=1))


def test_gemma3_sliding_layers_ignore_a_flat_rope_parameters_dict():
    # A flat (not layer-keyed) rope dict belongs to the global layers; the local ones use
    # rope_local_base_freq without scaling, whichever of rope_scaling / rope_parameters holds it.
    flat = {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6}
    g = {"model_type": "gemma3_text", "head_dim": 64, "hidden_size": 256, "num_attention_heads": 4,
         "rope_local_base_freq": 2e4, "rope_parameters": flat}
    sliding = RopeConfig.from_hf(g, layer_type="sliding_attention")
    assert (sliding.base, sliding.scaling) == (2e4, None)
    built = "".join(["sliding", "_attention"])  # equal, but not the interned literal
    assert RopeConfig.from_hf(g, layer_type=built) == sliding
    full = RopeConfig.from_hf(g, layer_type="full_attention")
    assert (full.base, full.scaling) == (1e6, rope_ref.Linear(8.0))


def test_longrope_lists_shorter_than_the_rotary_width_name_the_hf_key():
    cfg = dict(SMALL, max_position_embeddings=8192, original_max_position_embeddings=4096)  # 32 pairs
    short = {"rope_type": "longrope", "short_factor": [1.0] * 16, "long_factor": [2.0] * 16}
    with pytest.raises(ValueError, match=r"rope_scaling key 'short_factor' must have rotary_dim // 2 = 32"):
        RopeConfig.from_hf(dict(cfg, rope_scaling=short))


def test_config_is_positional_or_keyword_and_options_keyword_only():
    from rope_ref.hf_config import rope_config_from_hf

    assert rope_config_from_hf(config=SMALL) == RopeConfig.from_hf(SMALL)
    with pytest.raises(TypeError):
        rope_config_from_hf(SMALL, "half")


def test_chatglm2_ratio_with_an_explicit_default_rope_dict():
    # A "default" read from JSON is an equal string, not necessarily the same object.
    glm = {"model_type": "chatglm", "hidden_size": 4096, "num_attention_heads": 32, "kv_channels": 128,
           "seq_length": 32768, "rope_ratio": 16.0, "_name_or_path": "THUDM/chatglm2-6b-32k"}
    default = json.loads('{"rope_type": "default"}')
    cfg = RopeConfig.from_hf(dict(glm, rope_scaling=default))
    assert (cfg.base, cfg.scaling) == (1e4, rope_ref.Linear(16.0))


def test_model_type_defaults_apply_to_configs_read_from_json():
    # model_type strings parsed from config.json are equal to, not the same objects as, the code's literals.
    gptj = json.loads('{"model_type": "gptj", "n_embd": 4096, "n_head": 16}')
    assert RopeConfig.from_hf(gptj).rotary_dim == 64
    neox = json.loads('{"model_type": "gpt_neox", "hidden_size": 6144, "num_attention_heads": 64}')
    cfg = RopeConfig.from_hf(neox)  # no rotary_pct: GPT-NeoX's default fraction 0.25 of head size 96
    assert (cfg.rotary_dim, cfg.layout, cfg.base) == (24, "half", 1e4)
    stablelm = json.loads('{"model_type": "stablelm", "hidden_size": 2560, "num_attention_heads": 32}')
    assert RopeConfig.from_hf(stablelm).rotary_dim == 20
    glm4 = json.loads('{"model_type": "glm4", "hidden_size": 4096, "num_attention_heads": 32}')
    assert (RopeConfig.from_hf(glm4).rotary_dim, RopeConfig.from_hf(glm4).layout) == (64, "interleaved")


def test_rope_configs_from_hf_takes_layout_by_keyword_only():
    from rope_ref.hf_config import rope_configs_from_hf

    small = {"model_type": "llama", "hidden_size": 512, "num_attention_heads": 8, "rope_theta": 1e4}
    assert rope_configs_from_hf(small, layout="half") == {"default": RopeConfig(64, layout="half")}
    with pytest.raises(TypeError):
        rope_configs_from_hf(small, "half")


def test_zero_attention_heads_is_a_value_error_naming_the_key():
    cfg = {"model_type": "llama", "hidden_size": 512, "num_attention_heads": 0}
    with pytest.raises(ValueError, match="num_attention_heads"):
        RopeConfig.from_hf(cfg)


def test_default_bases_of_the_model_types_with_their_own():
    """transformers' config defaults (read from Llama4TextConfig, MixtralConfig, CohereConfig of
    transformers 5.23: rope_parameters["rope_theta"]) when a config has no rope_theta."""
    bare = {"hidden_size": 512, "num_attention_heads": 8}
    for model_type, base in (("llama4", 5e5), ("llama4_text", 5e5), ("mixtral", 1e6), ("cohere", 5e5)):
        assert RopeConfig.from_hf(dict(bare, model_type=model_type)).base == base, model_type


def test_hf_dynamic_config_read_from_json_needs_max_position_embeddings():
    raw = json.loads(
        '{"model_type": "llama", "hidden_size": 512, "num_attention_heads": 8, '
        '"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}'
    )
    message = r"missing the key 'max_position_embeddings' \(needed by dynamic NTK\)"
    with pytest.raises(ValueError, match=message):
        RopeConfig.from_hf(raw)


def test_paired_keys_with_different_values_each_win_where_documented():
    # The rope dict's partial_rotary_factor (0.25) beats the top-level one (0.5): 16 of 64 channels.
    cfg = RopeConfig.from_hf(dict(SMALL, partial_rotary_factor=0.5,
                                  rope_parameters={"rope_type": "default", "partial_rotary_factor": 0.25}))
    assert (cfg.head_dim, cfg.rotary_dim) == (64, 16)
    # The rope dict's rope_theta (5e5) beats the top-level one (1e4).
    inner = {"rope_type": "default", "rope_theta": 5e5}
    assert RopeConfig.from_hf(dict(SMALL, rope_parameters=inner)).base == 5e5
    # qk_rope_head_dim (32) beats head_dim (192), which beats kv_channels (96) and hidden / heads (64).
    mla = dict(SMALL, qk_rope_head_dim=32, head_dim=192, kv_channels=96)
    assert RopeConfig.from_hf(mla).head_dim == 32
    assert RopeConfig.from_hf(dict(SMALL, head_dim=192, kv_channels=96)).head_dim == 192
    assert RopeConfig.from_hf(dict(SMALL, kv_channels=96)).head_dim == 96
    # A top-level original context (1024) beats the dict's (2048); max_position_embeddings (8192) is the
    # fallback only, and YaRN's derived factor uses it: 8192 / 1024 = 8.
    yarn = {"rope_type": "yarn", "original_max_position_embeddings": 2048}
    got = RopeConfig.from_hf(dict(SMALL, max_position_embeddings=8192, original_max_position_embeddings=1024,
                                  rope_scaling=yarn)).scaling
    assert (got.original_max_position, got.factor) == (1024, 8.0)


def test_partial_rotary_factor_wins_over_rotary_pct():
    """transformers reads ``partial_rotary_factor`` (setdefault from the top level) before GPT-NeoX's
    ``rotary_pct``: with both present, 64 * 0.5 = 32 channels rotate, not 64 * 0.25 = 16."""
    config = {"model_type": "gpt_neox", "hidden_size": 512, "num_attention_heads": 8, "rope_theta": 10000.0,
              "partial_rotary_factor": 0.5, "rotary_pct": 0.25}
    assert rope_ref.RopeConfig.from_hf(config).rotary_dim == 32
