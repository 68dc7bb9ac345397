"""Model presets (rope_ref.preset): published config values and the behaviour each model's code implies.

Expected numbers are transcribed from the public configs cited in each preset's docstring or derived here
by hand (closed forms, explicit loops), never read back from rope_ref.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from fresh_interpreter import modules_loaded_by

import rope_ref
from rope_ref import chatglm, preset, preset_names
from rope_ref.presets import preset_doc

ISSUE_NAMES = {
    "llama-2-7b",
    "llama-3.1-8b",
    "mistral-7b",
    "qwen2.5-7b",
    "qwen2.5-7b-yarn",
    "phi-3.5-mini",
    "gpt-j-6b",
    "gpt-neox-20b",
    "chatglm-6b",
    "chatglm2-6b",
    "chatglm2-6b-32k",
    "chatglm3-6b-32k",
    "glm-4-9b",
    "deepseek-v2-lite",
}

# name: (head_dim, layout, rotary_dim, base, scaling class name or None), from the cited config.json files.
PUBLISHED = {
    "llama-2-7b": (128, "half", 128, 1e4, None),
    "llama-3.1-8b": (128, "half", 128, 5e5, "Llama3"),
    "mistral-7b": (128, "half", 128, 1e4, None),
    "qwen2.5-7b": (128, "half", 128, 1e6, None),
    "qwen2.5-7b-yarn": (128, "half", 128, 1e6, "YaRN"),
    "phi-3.5-mini": (96, "half", 96, 1e4, "LongRoPE"),
    "gpt-j-6b": (256, "interleaved", 64, 1e4, None),
    "gpt-neox-20b": (96, "half", 24, 1e4, None),
    "chatglm-6b": (64, "half", 64, 1e4, None),
    "chatglm2-6b": (128, "interleaved", 64, 1e4, None),
    "chatglm3-6b": (128, "interleaved", 64, 1e4, None),
    "chatglm2-6b-32k": (128, "interleaved", 64, 1e4, "Linear"),
    "chatglm3-6b-32k": (128, "interleaved", 64, 5e5, None),
    "glm-4-9b": (128, "interleaved", 64, 5e6, None),
    "deepseek-v2-lite": (64, "interleaved", 64, 1e4, "YaRN"),
}


def test_names_cover_the_issue_and_are_stable():
    names = preset_names()
    assert ISSUE_NAMES <= set(names)
    assert set(names) == set(PUBLISHED)
    assert preset_names() == names


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_published_values(name):
    cfg = preset(name)
    head_dim, layout, rotary_dim, base, scaling = PUBLISHED[name]
    assert isinstance(cfg, rope_ref.RopeConfig)
    assert (cfg.head_dim, cfg.layout, cfg.rotary_dim, cfg.base) == (head_dim, layout, rotary_dim, base)
    assert (type(cfg.scaling).__name__ if cfg.scaling is not None else None) == scaling
    assert preset(name) == cfg  # a fresh, equal config each call


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_every_preset_cites_its_public_config(name):
    doc = preset_doc(name)
    assert "config.json" in doc or "THUDM/chatglm-6b" in doc
    assert "/" in doc  # an owner/repo of the source


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(ValueError, match="unknown preset 'llama-9'") as info:
        preset("llama-9")
    for name in PUBLISHED:
        assert name in str(info.value)
    with pytest.raises(TypeError, match="name"):
        preset(7)
    with pytest.raises(ValueError, match="known presets"):
        preset_doc("nope")


def rotate_loop(v, position, pairs, base, rotary_dim):
    """RoFormer eq. 34 on the listed channel pairs with theta_i = base^(-2i/rotary_dim)."""
    out = list(v)
    for i, (a, b) in enumerate(pairs):
        theta = position * base ** (-2.0 * i / rotary_dim)
        c, s = math.cos(theta), math.sin(theta)
        out[a] = v[a] * c - v[b] * s
        out[b] = v[b] * c + v[a] * s
    return out


def interleaved_pairs(rotary_dim):
    return [(2 * i, 2 * i + 1) for i in range(rotary_dim // 2)]


def half_pairs(rotary_dim):
    return [(i, i + rotary_dim // 2) for i in range(rotary_dim // 2)]


def test_chatglm2_32k_divides_positions_by_rope_ratio():
    # chatglm2-6b-32k: seq_idx = arange(seq_len) / rope_ratio with rope_ratio 16, base 10000.
    x = np.random.default_rng(0).standard_normal(128)
    for m in (0, 5, 1000, 32767):
        got = rope_ref.apply(x, m, preset("chatglm2-6b-32k"))
        want = rotate_loop(list(x), m / 16, interleaved_pairs(64), 1e4, 64)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-11)


@pytest.mark.parametrize(("name", "ratio"), [("chatglm3-6b-32k", 50), ("glm-4-9b", 500)])
def test_chatglm3_and_glm4_multiply_the_base(name, ratio):
    x = np.random.default_rng(ratio).standard_normal(128)
    for m in (1, 77, 30000):
        got = rope_ref.apply(x, m, preset(name))
        want = rotate_loop(list(x), m, interleaved_pairs(64), 10000.0 * ratio, 64)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-11)
        assert np.array_equal(got[64:], x[64:])  # second half of the head passes through


def test_gpt_j_rotates_64_of_256_channels_in_adjacent_pairs():
    x = np.random.default_rng(1).standard_normal(256)
    got = rope_ref.apply(x, 123, preset("gpt-j-6b"))
    want = rotate_loop(list(x[:64]), 123, interleaved_pairs(64), 1e4, 64) + list(x[64:])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


def test_gpt_neox_20b_rotates_a_quarter_of_the_head_by_halves():
    x = np.random.default_rng(2).standard_normal(96)
    got = rope_ref.apply(x, 456, preset("gpt-neox-20b"))
    want = rotate_loop(list(x[:24]), 456, half_pairs(24), 1e4, 24) + list(x[24:])
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


def test_chatglm_6b_preset_is_the_per_half_rotation_of_apply_2d():
    x = np.random.default_rng(3).standard_normal((5, 128))
    pos, blk = np.array([0, 1, 2, 2, 2]), np.array([0, 0, 1, 2, 3])
    cfg = preset("chatglm-6b")
    got = chatglm.apply_2d(x, pos, blk)
    np.testing.assert_array_equal(got[:, :64], rope_ref.apply(x[:, :64], pos, cfg))
    np.testing.assert_array_equal(got[:, 64:], rope_ref.apply(x[:, 64:], blk, cfg))


def test_llama_3_1_frequency_bands():
    inv = rope_ref.inv_freq(preset("llama-3.1-8b"))
    theta = 500000.0 ** (-np.arange(0, 128, 2) / 128)
    wavelength = 2 * math.pi / theta
    high = wavelength < 8192 / 4  # kept
    low = wavelength > 8192 / 1  # divided by 8
    assert high.sum() > 0 and low.sum() > 0
    np.testing.assert_allclose(inv[high], theta[high], rtol=1e-15)
    np.testing.assert_allclose(inv[low], theta[low] / 8, rtol=1e-15)
    mid = ~(high | low)
    assert np.all((inv[mid] < theta[mid]) & (inv[mid] > theta[mid] / 8))


def test_qwen2_5_yarn_attention_factor():
    assert rope_ref.attention_factor(preset("qwen2.5-7b-yarn")) == pytest.approx(
        0.1 * math.log(4) + 1, rel=1e-15
    )
    assert rope_ref.attention_factor(preset("qwen2.5-7b")) == 1.0


def test_phi_3_5_longrope_switches_at_4096():
    cfg = preset("phi-3.5-mini")
    theta = 10000.0 ** (-np.arange(0, 96, 2) / 96)
    short = rope_ref.inv_freq(cfg, 4096)
    long = rope_ref.inv_freq(cfg, 4097)
    # Published first and last factors of microsoft/Phi-3.5-mini-instruct's config.json.
    assert short[0] == theta[0] / 1.0 and short[-1] == pytest.approx(
        theta[-1] / 2.8399994373321533, rel=1e-15
    )
    assert long[0] == pytest.approx(theta[0] / 1.0800000429153442, rel=1e-15)
    assert long[-1] == pytest.approx(theta[-1] / 64.83999633789062, rel=1e-15)
    # factor 131072 / 4096 = 32: sqrt(1 + ln 32 / ln 4096) = sqrt(1 + 5/12).
    assert rope_ref.attention_factor(cfg, 4097) == pytest.approx(math.sqrt(17 / 12), rel=1e-14)


def test_deepseek_v2_lite_yarn():
    cfg = preset("deepseek-v2-lite")
    assert rope_ref.attention_factor(cfg) == pytest.approx(1.0, abs=1e-15)  # mscale == mscale_all_dim
    inv = rope_ref.inv_freq(cfg)
    theta = 10000.0 ** (-np.arange(0, 64, 2) / 64)
    # YaRN band edges (arXiv 2309.00071): pair i = 64 ln(4096 / (2 pi r)) / (2 ln 10000) for r = 32, 1.
    low = math.floor(64 * math.log(4096 / (2 * math.pi * 32)) / (2 * math.log(10000)))
    high = math.ceil(64 * math.log(4096 / (2 * math.pi * 1)) / (2 * math.log(10000)))
    assert (low, high) == (10, 23)
    np.testing.assert_allclose(inv[: low + 1], theta[: low + 1], rtol=1e-15)
    np.testing.assert_allclose(inv[high:], theta[high:] / 40, rtol=1e-15)


def test_import_is_light_and_exposes_the_new_names():
    code = (
        "import rope_ref\n"
        "assert callable(rope_ref.chatglm.position_ids) and callable(rope_ref.chatglm.apply_2d)\n"
        "assert rope_ref.preset('glm-4-9b').base == 5e6 and 'glm-4-9b' in rope_ref.preset_names()"
    )
    assert modules_loaded_by(code, ["torch", "cupy", "jax", "matplotlib"]) == []


# Raw config.json dicts, transcribed from the sources each preset's docstring cites (RoPE keys only).
_RAW_CONFIGS = {
    "gpt-neox-20b": {"model_type": "gpt_neox", "hidden_size": 6144, "num_attention_heads": 64,
                     "rotary_pct": 0.25, "rotary_emb_base": 10000, "max_position_embeddings": 2048},
    "gpt-j-6b": {"model_type": "gptj", "n_embd": 4096, "n_head": 16, "rotary_dim": 64, "n_positions": 2048},
    "chatglm2-6b": {"_name_or_path": "THUDM/chatglm2-6b", "model_type": "chatglm", "hidden_size": 4096,
                    "num_attention_heads": 32, "kv_channels": 128, "seq_length": 32768},
    "chatglm2-6b-32k": {"_name_or_path": "THUDM/chatglm2-6b-32k", "model_type": "chatglm",
                        "hidden_size": 4096, "num_attention_heads": 32, "kv_channels": 128,
                        "rope_ratio": 16, "seq_length": 32768},
    "chatglm3-6b-32k": {"_name_or_path": "THUDM/chatglm3-6b-32k", "model_type": "chatglm",
                        "hidden_size": 4096, "num_attention_heads": 32, "kv_channels": 128,
                        "rope_ratio": 50, "seq_length": 32768},
    "glm-4-9b": {"_name_or_path": "THUDM/glm-4-9b-chat", "model_type": "chatglm", "hidden_size": 4096,
                 "num_attention_heads": 32, "kv_channels": 128, "rope_ratio": 500, "original_rope": True,
                 "seq_length": 131072},
    "deepseek-v2-lite": {"model_type": "deepseek_v2", "hidden_size": 2048, "num_attention_heads": 16,
                         "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rope_theta": 10000,
                         "max_position_embeddings": 163840,
                         "rope_scaling": {"type": "yarn", "factor": 40, "beta_fast": 32, "beta_slow": 1,
                                          "mscale": 0.707, "mscale_all_dim": 0.707,
                                          "original_max_position_embeddings": 4096}},
}  # fmt: skip


@pytest.mark.parametrize("name", sorted(_RAW_CONFIGS))
def test_from_hf_of_the_raw_config_is_the_preset(name):
    # No layout given: each of these configs fixes it (model_type / original_rope).
    assert rope_ref.RopeConfig.from_hf(_RAW_CONFIGS[name]) == preset(name)
