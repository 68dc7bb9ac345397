"""``from_hf`` gaps the transformers zoo exposed (issue 31), closed: transformers 5.x text sub-configs
and fallback ``mrope_section`` (M-RoPE), the towers' own ``*_vision`` model types and the "axial" vision
rotaries (``rope_ref.vision_rope.axial``), SAM 2's memory-attention rotary. Each expected value is
restated from the transformers modelling file the rule cites.
"""

from __future__ import annotations

import numpy as np
import pytest

from rope_ref import layers, mrope, multiaxis, vision_rope
from rope_ref.hf_config import model_families


def _angles(spec, rows, cols):
    """Per-pair angle of each (row, column) patch: rotate unit pairs and read the angle back."""
    d = spec.head_dim
    pos = np.stack([np.asarray(rows), np.asarray(cols)])[:, None, None, :]
    x = np.zeros((1, 1, len(rows), d))
    if spec.layout == "half":
        x[..., : d // 2] = 1.0
        y = multiaxis.apply(x, pos, spec)
        return np.arctan2(y[..., d // 2 :], y[..., : d // 2])[0, 0]
    x[..., 0::2] = 1.0
    y = multiaxis.apply(x, pos, spec)
    return np.arctan2(y[..., 1::2], y[..., 0::2])[0, 0]


def _close(angle, want):
    """Equal angles modulo 2 pi."""
    np.testing.assert_allclose(np.angle(np.exp(1j * (angle - want))), 0.0, atol=1e-12)


@pytest.mark.parametrize(
    "model_type,sections",
    [("qwen2_vl_text", [16, 24, 24]), ("qwen3_vl_text", [24, 20, 20]), ("glm4v_text", [8, 12, 12])],
)
def test_mrope_text_subconfig_with_fallback_sections(model_type, sections):
    cfg = {
        "model_type": model_type,
        "hidden_size": 1024,
        "num_attention_heads": 8,
        "head_dim": 128,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
    }
    if model_type == "glm4v_text":
        cfg["rope_parameters"]["partial_rotary_factor"] = 0.5
    model = mrope.from_hf(cfg)
    with_sections = dict(cfg, rope_parameters={**cfg["rope_parameters"], "mrope_section": sections})
    assert model.rope == mrope.from_hf(with_sections).rope
    assert model_families(cfg)[0] == "mrope"


def test_mrope_unknown_type_still_refused():
    with pytest.raises(ValueError, match="model_type must be one of"):
        mrope.from_hf({"model_type": "llama_text", "hidden_size": 64, "num_attention_heads": 2})


def test_qwen2_vl_tower_model_type():
    """transformers 5.x: Qwen2VLVisionConfig.model_type is "qwen2_vl_vision"; same rule as before."""
    tower = {"model_type": "qwen2_vl_vision", "patch_size": 14, "embed_dim": 1280, "num_heads": 16}
    assert vision_rope.from_hf(tower) == vision_rope.qwen2_vl(80)


def _tower(model_type, theta=10000.0):
    return {
        "model_type": model_type,
        "patch_size": 14,
        "hidden_size": 256,
        "num_attention_heads": 4,
        "rope_parameters": {"rope_type": "axial", "rope_theta": theta},
    }


def test_axial_row_then_column_reads_rope_parameters_theta():
    """models/lfm3_vl/modeling_lfm3_vl.py: theta from rope_parameters (1e6 there), cat([h, w]) twice."""
    spec = vision_rope.from_hf(_tower("lfm3_vl_vision", 1e6))
    ang = _angles(spec, [3], [5])
    q = 16  # head 64 -> 16 frequencies per axis
    theta = 1e6 ** (-np.arange(q) * 2.0 / 32)
    _close(ang[0, :q], 3 * theta)
    _close(ang[0, q:], 5 * theta)


def test_axial_alternating_column_first():
    """models/kimi_k25/modeling_kimi_k25.py: freq.transpose(1, 2).flip(-1).flatten(1): (w, h) per theta_j."""
    spec = vision_rope.from_hf(_tower("kimi_k25_vision"))
    ang = _angles(spec, [3], [5])
    theta = 10000.0 ** (-np.arange(16) * 2.0 / 32)
    _close(ang[0, 0::2], 5 * theta)
    _close(ang[0, 1::2], 3 * theta)


def test_axial_interleaved_column_first():
    """models/inkling2/modeling_inkling2.py: cat([w, h]).repeat_interleave(2) with rotate_pairwise."""
    spec = vision_rope.from_hf(_tower("inkling2_vision"))
    assert spec.layout == "interleaved"
    ang = _angles(spec, [3], [5])
    theta = 10000.0 ** (-np.arange(16) * 2.0 / 32)
    _close(ang[0, :16], 5 * theta)
    _close(ang[0, 16:], 3 * theta)


def test_sam2_memory_attention_head_size():
    """models/sam2_video/modeling_sam2_video.py: head = memory_attention_hidden_size / (rate * heads)."""
    cfg = {
        "model_type": "sam2_video",
        "memory_attention_hidden_size": 256,
        "memory_attention_downsample_rate": 1,
        "memory_attention_num_attention_heads": 1,
        "rope_parameters": {"rope_type": "axial", "rope_theta": 10000.0},
    }
    spec = vision_rope.from_hf(cfg)
    assert spec.head_dim == 256 and spec.layout == "interleaved"
    assert spec == vision_rope.axial(256, layout="interleaved")


def test_axial_default_is_qwen2_vl():
    assert vision_rope.axial(80) == vision_rope.qwen2_vl(80)
    with pytest.raises(ValueError, match="first must be"):
        vision_rope.axial(64, first="depth")


def test_layer_rope_theta_per_layer_base_and_nope():
    """models/granite_swa/modeling_granite_swa.py: one rotary per distinct non-zero theta, 0 = NoPE."""
    cfg = {
        "model_type": "granite_swa",
        "hidden_size": 256,
        "num_attention_heads": 4,
        "num_hidden_layers": 3,
        "max_position_embeddings": 4096,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
        "layer_rope_theta": [10000.0, 0, 500000.0],
    }
    made = layers.from_hf(cfg, layout="half")
    assert made.rope(1) is None
    assert made.rope(0).base == 10000.0 and made.rope(2).base == 500000.0
    assert made.rope(2).head_dim == 64 and made.rope(2).rotary_dim == 64
    assert model_families(cfg)[0] == "layers"
    with pytest.raises(ValueError, match="layer_rope_theta"):
        layers.from_hf(dict(cfg, layer_rope_theta=[1.0]), layout="half")


def test_layer_type_without_rope_is_nope():
    """models/beam/modeling_beam.py: rope_parameters {"full_attention": None}: those layers skip RoPE."""
    cfg = {
        "model_type": "beam",
        "hidden_size": 256,
        "num_attention_heads": 4,
        "num_hidden_layers": 2,
        "layer_types": ["sliding_attention", "full_attention"],
        "rope_parameters": {
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": None,
        },
    }
    made = layers.from_hf(cfg, layout="half")
    assert made.rope(1) is None and made.rope(0).base == 10000.0
    assert model_families(cfg)[0] == "layers"
