"""``rope_ref.vision_rope.from_hf``: the head size and base of a vision tower come from the right keys.

Configs whose paired keys hold different values (Qwen2-VL's ``embed_dim`` 1280 beside ``hidden_size``
3584, ``num_heads`` beside ``num_attention_heads``, a Pixtral ``rope_theta`` other than 10000, a SAM 2
downsample rate other than 1), and the expected head sizes worked out here from the modelling files'
arithmetic.
"""

import numpy as np
import pytest

from rope_ref import vision_rope


def qwen2_vl(**vision):
    return {"model_type": "qwen2_vl", "vision_config": {"patch_size": 14, **vision}}


def test_qwen2_vl_head_size_is_embed_dim_over_num_heads():
    # Qwen/Qwen2-VL-7B-Instruct vision_config: embed_dim 1280, hidden_size 3584 (the merger's output).
    config = qwen2_vl(embed_dim=1280, hidden_size=3584, num_heads=16)
    assert vision_rope.from_hf(config) == vision_rope.qwen2_vl(80)
    # Qwen2.5-VL has no embed_dim: hidden_size is the tower's width.
    config = {"model_type": "qwen2_5_vl", "vision_config": {"hidden_size": 1152, "num_heads": 16}}
    assert vision_rope.from_hf(config) == vision_rope.qwen2_vl(72)


def test_num_heads_before_num_attention_heads_and_head_dim_before_both():
    assert vision_rope.from_hf(qwen2_vl(embed_dim=1280, num_heads=16, num_attention_heads=8)).head_dim == 80
    assert vision_rope.from_hf(qwen2_vl(embed_dim=1280, num_attention_heads=8)).head_dim == 160
    assert vision_rope.from_hf(qwen2_vl(embed_dim=1280, num_heads=16, head_dim=64)).head_dim == 64


@pytest.mark.parametrize(
    ("vision", "match"),
    [
        ({"embed_dim": 1000, "num_heads": 16}, "vision_config.embed_dim \\(1000\\) is not divisible"),
        ({"embed_dim": 1280}, "vision_config needs head_dim"),
        ({"num_heads": 16}, "vision_config needs head_dim"),
        ({"head_dim": 2}, "vision_config.head_dim"),
        ({"embed_dim": 1280, "num_heads": 0}, "vision_config.num_heads"),
    ],
)
def test_bad_head_sizes_name_their_keys(vision, match):
    with pytest.raises(ValueError, match=match):
        vision_rope.from_hf(qwen2_vl(**vision))


def test_pixtral_reads_its_own_rope_theta():
    tower = {
        "model_type": "pixtral",
        "patch_size": 16,
        "hidden_size": 1024,
        "num_attention_heads": 8,
        "rope_theta": 1e5,
    }
    spec = vision_rope.from_hf(tower)
    assert spec == vision_rope.pixtral(128, 1e5)
    # f_k = 1e5^(-2k/128): the row takes f_0, f_2, ..., the column f_1, f_3, ...
    phi, _ = spec.pair_frequencies()
    f = [1e5 ** (-2.0 * k / 128) for k in range(64)]
    np.testing.assert_allclose(phi, f[0::2] + f[1::2], rtol=1e-14)
    del tower["rope_theta"]
    assert vision_rope.from_hf(tower) == vision_rope.pixtral(128, 10000.0)


@pytest.mark.parametrize(
    ("hidden", "rate", "heads", "head_dim"), [(256, 2, 2, 64), (256, 1, 4, 64), (512, 4, 1, 128)]
)
def test_sam2_memory_attention_head_divides_by_rate_and_heads(hidden, rate, heads, head_dim):
    config = {
        "model_type": "sam2_video",
        "memory_attention_hidden_size": hidden,
        "memory_attention_downsample_rate": rate,
        "memory_attention_num_attention_heads": heads,
        "rope_parameters": {"rope_type": "axial", "rope_theta": 5000.0},
    }
    spec = vision_rope.from_hf(config)
    assert spec == vision_rope.axial(head_dim, 5000.0, layout="interleaved")


def test_sam2_memory_attention_defaults():
    spec = vision_rope.from_hf({"model_type": "edgetam_video"})
    assert spec == vision_rope.axial(256, 10000.0, layout="interleaved")
    spec = vision_rope.from_hf({"model_type": "sam3_tracker_video", "rope_theta": 300.0})
    assert spec.tables[0].base == 300.0


def test_axial_tower_theta_from_rope_parameters_before_rope_theta():
    tower = {
        "model_type": "mlcd_vision_model",
        "patch_size": 14,
        "hidden_size": 256,
        "num_attention_heads": 4,
        "rope_theta": 10.0,
        "rope_parameters": {"rope_type": "axial", "rope_theta": 1e6},
    }
    assert vision_rope.from_hf(tower) == vision_rope.axial(64, 1e6)
    del tower["rope_parameters"]
    assert vision_rope.from_hf(tower) == vision_rope.axial(64, 10.0)
