"""``RopeConfig.from_hf`` agrees with transformers itself on every listed model family it ships.

For each family: build the transformers config class with realistic values (from the models' Hub
``config.json``), parse its ``to_dict()``, and compare inv_freq, attention factor and rotary width with
the inverse frequencies and ``attention_scaling`` of that model's own rotary embedding module (its
``compute_default_rope_parameters`` or ``ROPE_INIT_FUNCTIONS``), to 2e-6 relative: transformers
computes in float32, whose rounding of ``base ** (2i/d)`` is below ~1e-6 relative for these bases.
The layout is left to inference and checked against what the model's ``apply_rotary_pos_emb`` does.

InternLM2 and ChatGLM2/3 are Hub-code models that transformers does not ship (tested from raw
configs in ``tests/test_hf_config.py``). Kimi-K2 runs on transformers' DeepSeek-V3 classes.
"""

# ruff: noqa: E501  (the family table keeps one model per entry)
from __future__ import annotations

import importlib

import numpy as np
import pytest

import rope_ref
from rope_ref import RopeConfig
from rope_ref.hf_config import rope_configs_from_hf

transformers = pytest.importorskip("transformers", reason="transformers is not installed (test extra)")
torch = pytest.importorskip("torch", reason="transformers' rotary modules need torch")

RTOL = 2e-6

_PHI35_SHORT = [1.0, 1.02, 1.03, 1.03, 1.05, 1.05, 1.05, 1.05, 1.05, 1.07, 1.1, 1.11, 1.16, 1.16, 1.17, 1.29,
                1.34, 1.68, 1.79, 1.82, 1.85, 1.88, 1.91, 1.94, 1.99, 2.02, 2.02, 2.02, 2.02, 2.02, 2.02, 2.03,
                2.03, 2.03, 2.03, 2.03, 2.03, 2.03, 2.03, 2.03, 2.08, 2.09, 2.19, 2.22, 2.59, 2.73, 2.75, 2.84]
_PHI35_LONG = [1.08, 1.11, 1.14, 1.34, 1.59, 1.6, 1.62, 2.62, 3.23, 3.23, 4.79, 7.4, 7.7, 9.09, 12.2, 17.67,
               24.46, 28.57, 30.42, 30.84, 32.59, 32.93, 42.32, 44.96, 50.34, 50.45, 57.55, 57.93, 58.21, 60.14,
               62.61, 62.62, 62.71, 63.14, 63.14, 63.77, 63.93, 63.96, 63.97, 64.03, 64.07, 64.08, 64.12, 64.41,
               64.48, 64.51, 64.53, 64.84]  # fmt: skip
_LLAMA31 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 8192}  # fmt: skip
_DEEPSEEK_YARN = {"type": "yarn", "factor": 40, "beta_fast": 32, "beta_slow": 1, "mscale": 1.0,
                  "mscale_all_dim": 1.0, "original_max_position_embeddings": 4096}  # fmt: skip
_COMMON = {"num_hidden_layers": 2, "vocab_size": 1024}

# (id, module, config class, rotary class, config kwargs, layout the model's code uses)
FAMILIES = [
    ("gpt-neox-20b", "gpt_neox", "GPTNeoXConfig", "GPTNeoXRotaryEmbedding",
     dict(hidden_size=6144, num_attention_heads=64, rotary_pct=0.25, rotary_emb_base=10000,
          max_position_embeddings=2048), "half"),
    ("pythia-1b", "gpt_neox", "GPTNeoXConfig", "GPTNeoXRotaryEmbedding",
     dict(hidden_size=2048, num_attention_heads=8, rotary_pct=0.25, rotary_emb_base=10000,
          max_position_embeddings=2048), "half"),
    ("phi-2", "phi", "PhiConfig", "PhiRotaryEmbedding",
     dict(hidden_size=2560, num_attention_heads=32, partial_rotary_factor=0.4, rope_theta=10000.0,
          max_position_embeddings=2048), "half"),
    ("stablelm-2-1.6b", "stablelm", "StableLmConfig", "StableLmRotaryEmbedding",
     dict(hidden_size=2048, num_attention_heads=32, partial_rotary_factor=0.25, rope_theta=10000,
          max_position_embeddings=4096), "half"),
    ("falcon-7b", "falcon", "FalconConfig", "FalconRotaryEmbedding",
     dict(hidden_size=4544, num_attention_heads=71, rope_theta=10000.0, max_position_embeddings=2048), "half"),
    ("command-r", "cohere", "CohereConfig", "CohereRotaryEmbedding",
     dict(hidden_size=8192, num_attention_heads=64, rope_theta=8000000.0, max_position_embeddings=131072),
     "interleaved"),
    ("glm-4-9b", "glm", "GlmConfig", "GlmRotaryEmbedding",
     dict(hidden_size=4096, num_attention_heads=32, head_dim=128, partial_rotary_factor=0.5,
          rope_theta=10000.0, max_position_embeddings=131072), "interleaved"),
    ("glm-4-0414", "glm4", "Glm4Config", "Glm4RotaryEmbedding",
     dict(hidden_size=4096, num_attention_heads=32, head_dim=128, partial_rotary_factor=0.5,
          rope_theta=10000.0, max_position_embeddings=32768), "interleaved"),
    ("gemma-2-9b", "gemma2", "Gemma2Config", "Gemma2RotaryEmbedding",
     dict(hidden_size=3584, num_attention_heads=16, head_dim=256, rope_theta=10000.0,
          max_position_embeddings=8192), "half"),
    ("qwen2-7b", "qwen2", "Qwen2Config", "Qwen2RotaryEmbedding",
     dict(hidden_size=3584, num_attention_heads=28, rope_theta=1000000.0, max_position_embeddings=32768), "half"),
    ("qwen2.5-7b-yarn", "qwen2", "Qwen2Config", "Qwen2RotaryEmbedding",
     dict(hidden_size=3584, num_attention_heads=28, rope_theta=1000000.0, max_position_embeddings=131072,
          rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}), "half"),
    ("qwen3-8b", "qwen3", "Qwen3Config", "Qwen3RotaryEmbedding",
     dict(hidden_size=4096, num_attention_heads=32, head_dim=128, rope_theta=1000000,
          max_position_embeddings=40960), "half"),
    ("qwen1.5-moe", "qwen2_moe", "Qwen2MoeConfig", "Qwen2MoeRotaryEmbedding",
     dict(hidden_size=2048, num_attention_heads=16, rope_theta=1000000.0, max_position_embeddings=8192), "half"),
    ("mistral-nemo", "mistral", "MistralConfig", "MistralRotaryEmbedding",
     dict(hidden_size=5120, num_attention_heads=32, head_dim=128, rope_theta=1000000.0,
          max_position_embeddings=1024000), "half"),
    ("mixtral-8x7b", "mixtral", "MixtralConfig", "MixtralRotaryEmbedding",
     dict(hidden_size=4096, num_attention_heads=32, rope_theta=1e6, max_position_embeddings=32768), "half"),
    ("llama-2-7b", "llama", "LlamaConfig", "LlamaRotaryEmbedding",
     dict(hidden_size=4096, num_attention_heads=32, rope_theta=10000.0, max_position_embeddings=4096), "half"),
    ("llama-2-dynamic", "llama", "LlamaConfig", "LlamaRotaryEmbedding",
     dict(hidden_size=4096, num_attention_heads=32, rope_theta=10000.0, max_position_embeddings=4096,
          rope_scaling={"type": "dynamic", "factor": 2.0}), "half"),
    ("llama-2-linear", "llama", "LlamaConfig", "LlamaRotaryEmbedding",
     dict(hidden_size=4096, num_attention_heads=32, rope_theta=10000.0, max_position_embeddings=16384,
          rope_scaling={"type": "linear", "factor": 4.0}), "half"),
    ("llama-3-8b", "llama", "LlamaConfig", "LlamaRotaryEmbedding",
     dict(hidden_size=4096, num_attention_heads=32, rope_theta=500000.0, max_position_embeddings=8192), "half"),
    ("llama-3.1-8b", "llama", "LlamaConfig", "LlamaRotaryEmbedding",
     dict(hidden_size=4096, num_attention_heads=32, rope_theta=500000.0, max_position_embeddings=131072,
          rope_scaling=_LLAMA31), "half"),
    ("llama-3.2-1b", "llama", "LlamaConfig", "LlamaRotaryEmbedding",
     dict(hidden_size=2048, num_attention_heads=32, head_dim=64, rope_theta=500000.0,
          max_position_embeddings=131072, rope_scaling=dict(_LLAMA31, factor=32.0)), "half"),
    ("llama-4-scout", "llama4", "Llama4TextConfig", "Llama4TextRotaryEmbedding",
     dict(hidden_size=5120, num_attention_heads=40, head_dim=128, rope_theta=500000.0,
          max_position_embeddings=10485760, rope_scaling=dict(_LLAMA31, factor=16.0)), "interleaved"),
    ("phi-3.5-mini", "phi3", "Phi3Config", "Phi3RotaryEmbedding",
     dict(hidden_size=3072, num_attention_heads=32, rope_theta=10000.0, max_position_embeddings=131072,
          original_max_position_embeddings=4096,
          rope_scaling={"type": "longrope", "short_factor": _PHI35_SHORT, "long_factor": _PHI35_LONG}), "half"),
    ("phi-4-mini", "phi3", "Phi3Config", "Phi3RotaryEmbedding",
     dict(hidden_size=3072, num_attention_heads=24, partial_rotary_factor=0.75, rope_theta=10000.0,
          max_position_embeddings=131072, original_max_position_embeddings=4096,
          rope_scaling={"type": "longrope", "short_factor": _PHI35_SHORT, "long_factor": _PHI35_LONG}), "half"),
    ("deepseek-v2-lite", "deepseek_v2", "DeepseekV2Config", "DeepseekV2RotaryEmbedding",
     dict(hidden_size=2048, num_attention_heads=16, qk_nope_head_dim=128, qk_rope_head_dim=64,
          v_head_dim=128, kv_lora_rank=512, rope_theta=10000, max_position_embeddings=163840,
          rope_scaling=dict(_DEEPSEEK_YARN, mscale=0.707, mscale_all_dim=0.707)), "interleaved"),
    ("deepseek-v3", "deepseek_v3", "DeepseekV3Config", "DeepseekV3RotaryEmbedding",
     dict(hidden_size=7168, num_attention_heads=128, qk_nope_head_dim=128, qk_rope_head_dim=64,
          v_head_dim=128, kv_lora_rank=512, q_lora_rank=1536, rope_theta=10000,
          max_position_embeddings=163840, rope_scaling=_DEEPSEEK_YARN), "interleaved"),
    ("kimi-k2", "deepseek_v3", "DeepseekV3Config", "DeepseekV3RotaryEmbedding",
     dict(hidden_size=7168, num_attention_heads=64, qk_nope_head_dim=128, qk_rope_head_dim=64,
          v_head_dim=128, kv_lora_rank=512, q_lora_rank=1536, rope_theta=50000.0,
          max_position_embeddings=131072,
          rope_scaling=dict(_DEEPSEEK_YARN, factor=32.0, beta_fast=1.0, beta_slow=1.0)), "interleaved"),
    ("deepseek-v3-no-interleave", "deepseek_v3", "DeepseekV3Config", "DeepseekV3RotaryEmbedding",
     dict(hidden_size=7168, num_attention_heads=128, qk_nope_head_dim=128, qk_rope_head_dim=64,
          v_head_dim=128, kv_lora_rank=512, rope_theta=10000, max_position_embeddings=163840,
          rope_interleave=False, rope_scaling=_DEEPSEEK_YARN), "half"),
]  # fmt: skip


def _classes(module: str, config_cls: str, rotary_cls: str):
    conf = importlib.import_module(f"transformers.models.{module}.configuration_{module}")
    model = importlib.import_module(f"transformers.models.{module}.modeling_{module}")
    return getattr(conf, config_cls), getattr(model, rotary_cls)


def _compare(ours: RopeConfig, hf_inv, hf_factor: float) -> None:
    hf_inv = hf_inv.detach().double().numpy()
    assert ours.rotary_dim == 2 * hf_inv.size
    np.testing.assert_allclose(rope_ref.inv_freq(ours), hf_inv, rtol=RTOL, atol=0)
    assert rope_ref.attention_factor(ours) == pytest.approx(float(hf_factor), rel=RTOL)


@pytest.mark.parametrize("name,module,config_cls,rotary_cls,kwargs,layout", FAMILIES, ids=[f[0] for f in FAMILIES])
def test_family_matches_transformers(name, module, config_cls, rotary_cls, kwargs, layout):
    config_type, rotary_type = _classes(module, config_cls, rotary_cls)
    hf_config = config_type(**_COMMON, **kwargs)
    ours = RopeConfig.from_hf(hf_config.to_dict())
    assert ours.layout == layout
    rotary = rotary_type(config=hf_config)
    _compare(ours, rotary.inv_freq, rotary.attention_scaling)


def test_gemma3_both_ropes_match_transformers():
    config_type, rotary_type = _classes("gemma3", "Gemma3TextConfig", "Gemma3RotaryEmbedding")
    hf_config = config_type(
        num_hidden_layers=6,  # five sliding layers, then a full one
        vocab_size=1024,
        hidden_size=2560,
        num_attention_heads=8,
        head_dim=256,
        max_position_embeddings=131072,
        rope_theta=1000000.0,
        rope_local_base_freq=10000.0,
        rope_scaling={"rope_type": "linear", "factor": 8.0},
    )
    rotary = rotary_type(config=hf_config)
    ours = rope_configs_from_hf(hf_config.to_dict())
    assert set(ours) == {"full_attention", "sliding_attention"}
    for layer_type, cfg in ours.items():
        assert cfg.layout == "half"
        _compare(cfg, getattr(rotary, f"{layer_type}_inv_freq"), getattr(rotary, f"{layer_type}_attention_scaling"))
    assert ours["full_attention"].base == 1e6 and ours["sliding_attention"].base == 1e4


def test_gptj_matches_transformers_table():
    conf = importlib.import_module("transformers.models.gptj.configuration_gptj")
    model = importlib.import_module("transformers.models.gptj.modeling_gptj")
    hf_config = conf.GPTJConfig(n_embd=4096, n_head=16, rotary_dim=64, n_positions=2048, **_COMMON)
    ours = RopeConfig.from_hf(hf_config.to_dict())
    assert (ours.head_dim, ours.rotary_dim, ours.layout) == (256, 64, "interleaved")
    table = model.create_sinusoidal_positions(2, 64)  # cat(sin, cos) of position * inv_freq
    hf_inv = torch.asin(table[1, :32].double())  # every inv_freq <= 1 < pi / 2
    _compare(ours, hf_inv, 1.0)


def test_contradicting_layout_names_the_deciding_key():
    config_type, _ = _classes("deepseek_v3", "DeepseekV3Config", "DeepseekV3RotaryEmbedding")
    d = config_type(**_COMMON, hidden_size=1024, num_attention_heads=8, qk_rope_head_dim=64).to_dict()
    with pytest.raises(ValueError, match="rope_interleave=True"):
        RopeConfig.from_hf(d, layout="half")
    config_type, _ = _classes("cohere", "CohereConfig", "CohereRotaryEmbedding")
    with pytest.raises(ValueError, match="model_type='cohere'"):
        RopeConfig.from_hf(config_type(**_COMMON).to_dict(), layout="half")
