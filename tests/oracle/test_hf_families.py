"""``RopeConfig.from_hf`` agrees with transformers itself on every listed model family it ships.

For each family: build the transformers config class with realistic values (from the models' Hub
``config.json``), parse its ``to_dict()``, and compare inv_freq, attention factor and rotary width with
the inverse frequencies and ``attention_scaling`` of that model's own rotary embedding module (its
``compute_default_rope_parameters`` or ``ROPE_INIT_FUNCTIONS``), to 2e-6 relative: transformers
computes in float32, whose rounding of ``base ** (2i/d)`` is below ~1e-6 relative for these bases.
The layout is left to inference and checked against what the model's ``apply_rotary_pos_emb`` does.

InternLM2 and ChatGLM2/3 are Hub-code models that transformers does not ship (tested from raw
configs in ``tests/oracle/test_hf_config.py``). Kimi-K2 runs on transformers' DeepSeek-V3 classes.
"""

# ruff: noqa: E501  (the family table keeps one model per entry)
from __future__ import annotations

import importlib
import json
from pathlib import Path

import numpy as np
import pytest

import rope_ref
from rope_ref import RopeConfig
from rope_ref.hf_config import rope_configs_from_hf

transformers = pytest.importorskip("transformers", reason="transformers is not installed (test extra)")
torch = pytest.importorskip("torch", reason="transformers' rotary modules need torch")

RTOL = 2e-6

_COMMON = {"num_hidden_layers": 2, "vocab_size": 1024}

# (id, module, config class, rotary class, config kwargs, layout the model's code uses), one model per
# entry, with realistic values from each model's Hub config.json
_TABLE = json.loads(Path(__file__).with_name("hf_families.json").read_text(encoding="utf-8"))
FAMILIES = [tuple(f[k] for k in ("id", "module", "config_class", "rotary_class", "kwargs", "layout")) for f in _TABLE]


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
