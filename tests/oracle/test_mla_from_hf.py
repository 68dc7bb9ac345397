"""``rope_ref.mla.from_hf``: the three head sizes and ``mscale_all_dim`` reach the MLA config.

The configs give every paired value a different number (``qk_nope_head_dim`` 96, ``qk_rope_head_dim``
32, ``v_head_dim`` 80; ``mscale`` 1.0 beside ``mscale_all_dim`` 0.707) and come in both spellings,
transformers 4.x ``rope_scaling`` and 5.x ``rope_parameters``. The softmax scale is derived here in
50-digit mpmath from HF ``DeepseekV3Attention.__init__``.
"""

import math

import mpmath
import numpy as np
import pytest

import rope_ref
from rope_ref import mla

YARN = {
    "factor": 40,
    "original_max_position_embeddings": 4096,
    "beta_fast": 32,
    "beta_slow": 1,
    "mscale": 1.0,
    "mscale_all_dim": 0.707,
}


def config(rope_key="rope_scaling", **sizes):
    out = {
        "model_type": "deepseek_v3",
        "hidden_size": 2048,
        "num_attention_heads": 16,
        "qk_nope_head_dim": 96,
        "qk_rope_head_dim": 32,
        "v_head_dim": 80,
        "max_position_embeddings": 163840,
        **sizes,
    }
    if rope_key == "rope_scaling":
        out["rope_theta"] = 10000
        out["rope_scaling"] = {"type": "yarn", **YARN}
    else:
        out["rope_parameters"] = {"rope_type": "yarn", "rope_theta": 10000, **YARN}
    return out


def exact_softmax_scale(qk_head_dim, factor, m_all):
    with mpmath.workdps(50):
        ms = mpmath.mpf(0.1) * mpmath.mpf(m_all) * mpmath.log(factor) + 1
        return float(ms * ms / mpmath.sqrt(qk_head_dim))


@pytest.mark.parametrize("rope_key", ["rope_scaling", "rope_parameters"])
def test_head_sizes_and_mscale_all_dim(rope_key):
    cfg = mla.from_hf(config(rope_key))
    assert (cfg.qk_nope_head_dim, cfg.qk_rope_head_dim, cfg.v_head_dim, cfg.qk_head_dim) == (96, 32, 80, 128)
    assert cfg.mscale_all_dim == 0.707
    assert cfg.rope.head_dim == 32 and cfg.rope.layout == "interleaved"
    assert mla.softmax_scale(cfg) == exact_softmax_scale(128, 40, 0.707)
    # cos/sin carry mscale(40, 1.0) / mscale(40, 0.707).
    ratio = (0.1 * math.log(40) + 1) / (0.1 * 0.707 * math.log(40) + 1)
    assert rope_ref.attention_factor(cfg.rope) == pytest.approx(ratio, rel=1e-15)


def test_the_rope_part_is_the_last_qk_rope_head_dim_channels():
    cfg = mla.from_hf(config())
    x = np.random.default_rng(5).standard_normal((2, 128))
    out = mla.apply_rope_part(x, [0, 7], cfg)
    assert np.array_equal(out[:, :96], x[:, :96]) and not np.allclose(out[1, 96:], x[1, 96:])
    with pytest.raises(ValueError, match="qk_nope_head_dim \\+ qk_rope_head_dim = 128"):
        mla.apply_rope_part(np.zeros((2, 176)), [0, 7], cfg)  # nope + v


def test_a_key_only_rope_part_has_no_nope_channels():
    cfg = mla.from_hf(config(qk_nope_head_dim=0))
    assert cfg.qk_nope_head_dim == 0 and cfg.qk_head_dim == 32
    assert mla.softmax_scale(cfg) == exact_softmax_scale(32, 40, 0.707)


def test_without_scaling_there_is_no_correction():
    plain = config()
    del plain["rope_scaling"]
    cfg = mla.from_hf(plain)
    assert cfg.mscale_all_dim is None
    with mpmath.workdps(50):
        assert mla.softmax_scale(cfg) == float(1 / mpmath.sqrt(128))


@pytest.mark.parametrize("key", ["qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"])
def test_missing_keys_are_named(key):
    bad = config()
    del bad[key]
    with pytest.raises(ValueError, match=f"config is missing the key '{key}'"):
        mla.from_hf(bad)


@pytest.mark.parametrize(
    ("sizes", "match"),
    [
        ({"qk_nope_head_dim": -1}, "qk_nope_head_dim"),
        ({"qk_rope_head_dim": 0}, "qk_rope_head_dim"),
        ({"v_head_dim": 0}, "v_head_dim"),
    ],
)
def test_bad_sizes_are_named(sizes, match):
    with pytest.raises(ValueError, match=match):
        mla.from_hf(config(**sizes))


def test_bad_mscale_all_dim_is_named():
    bad = config()
    bad["rope_scaling"]["mscale_all_dim"] = "big"
    with pytest.raises((TypeError, ValueError), match="mscale_all_dim"):
        mla.from_hf(bad)
