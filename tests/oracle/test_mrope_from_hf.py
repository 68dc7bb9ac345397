"""``rope_ref.mrope.from_hf``: every key an M-RoPE config sets reaches the model.

Configs with values that differ from the defaults and from each other: ``spatial_merge_size`` 1 or 3
with ``temporal_patch_size`` 2, ``tokens_per_second`` 4 or 25, sections with ``h != w``, custom token ids,
the MoE model types and the 5.x fallback sections. Expected streams come from HF's channel slicing
(``mrope_reference.hf_channel_streams``), expected ids from the released loops.
"""

import numpy as np
import pytest
from mrope_reference import QWEN_VISION_END, hf_channel_streams

import rope_ref
from rope_ref import mrope

T = 9


def qwen_config(model_type="qwen2_vl", sections=(16, 24, 24), **vision):
    return {
        "model_type": model_type,
        "hidden_size": 3584,
        "num_attention_heads": 28,
        "rope_theta": 1000000.0,
        "rope_scaling": {"type": "mrope", "mrope_section": list(sections)},
        "vision_config": {"temporal_patch_size": 2, **vision},
    }


def text_config(model_type, rope, **top):
    return {
        "model_type": model_type,
        "text_config": {
            "model_type": model_type + "_text",
            "head_dim": 128,
            "hidden_size": 4096,
            "num_attention_heads": 32,
            "partial_rotary_factor": 0.5 if model_type.startswith("glm") else 1.0,
            "rope_theta": 10000.0,
            **rope,
        },
        **top,
    }


def test_vision_constants_come_from_their_own_keys():
    model = mrope.from_hf(qwen_config("qwen2_5_vl", spatial_merge_size=1, tokens_per_second=25))
    assert (model.rule, model.spatial_merge_size, model.tokens_per_second) == ("qwen2.5-vl", 1, 25.0)
    model = mrope.from_hf(qwen_config("qwen2_vl", spatial_merge_size=3))
    assert (model.spatial_merge_size, model.tokens_per_second) == (3, 2.0)
    bare = dict(qwen_config("qwen2_5_vl"))
    del bare["vision_config"]
    model = mrope.from_hf(bare)
    assert (model.spatial_merge_size, model.tokens_per_second) == (2, 2.0)


def test_position_ids_use_the_configs_merge_size_and_tokens_per_second():
    model = mrope.from_hf(qwen_config("qwen2_5_vl", spatial_merge_size=1, tokens_per_second=4))
    # A video of grid (3, 1, 2), unmerged: 3 temporal patches of 1 x 2, 0.5 s each -> t ids 0, 2, 4.
    vs, vid = 151652, 151656
    row = [T, vs] + [vid] * 6 + [QWEN_VISION_END]
    pos, delta = model.position_ids([row], None, [[3, 1, 2]], second_per_grid_ts=[0.5])
    assert pos[:, 0].tolist() == [
        [0, 1, 2, 2, 4, 4, 6, 6, 7],
        [0, 1, 2, 2, 2, 2, 2, 2, 7],
        [0, 1, 2, 3, 2, 3, 2, 3, 7],
    ]
    assert delta.tolist() == [[8 - 9]]


@pytest.mark.parametrize(
    ("config", "sections", "mode"),
    [
        (qwen_config("qwen2_vl", (16, 28, 20)), (16, 28, 20), "qwen2"),
        (qwen_config("qwen2_5_vl", (8, 12, 44)), (8, 12, 44), "qwen2"),
        (text_config("qwen3_vl", {"rope_scaling": {"mrope_section": [26, 20, 18], "mrope_interleaved": 1}}),
         (26, 20, 18), "qwen3"),
        (text_config("qwen3_vl_moe", {"rope_scaling": {"mrope_section": [26, 20, 18], "rope_type": "mrope"}}),
         (26, 20, 18), "qwen3"),
        (text_config("qwen3_vl", {"rope_parameters": {"rope_type": "default", "rope_theta": 5e6}}),
         (24, 20, 20), "qwen3"),
        (text_config("qwen3_vl_moe", {"rope_parameters": {"rope_type": "default"}}), (24, 20, 20), "qwen3"),
        (text_config("qwen2_vl", {"rope_parameters": {"rope_type": "default"}}), (16, 24, 24), "qwen2"),
    ],
    ids=["qwen2-vl", "qwen2.5-vl", "qwen3-vl", "qwen3-vl-moe", "qwen3-fallback", "qwen3-moe-fallback",
         "qwen2-fallback"],
)  # fmt: skip
def test_sections_and_their_arrangement(config, sections, mode):
    model = mrope.from_hf(config)
    assert model.rope.streams == tuple(hf_channel_streams(128, sections, mode)[:64])
    assert model.rope.layout == "half" and model.rope.rotary_dim == 128


@pytest.mark.parametrize("model_type", ["glm4v", "glm4v_moe"])
def test_glm4v_pairs_adjacent_channels_over_the_partial_width(model_type):
    config = text_config(model_type, {"rope_scaling": {"rope_type": "default", "mrope_section": [6, 12, 14]}})
    model = mrope.from_hf(config)
    assert model.rule == "glm4v" and model.rope.layout == "interleaved" and model.rope.rotary_dim == 64
    assert model.rope.streams == (0,) * 6 + (1,) * 12 + (2,) * 14
    # The fallback sections of GLM-4V: [8, 12, 12].
    fallback = mrope.from_hf(text_config(model_type, {"rope_parameters": {"rope_type": "default"}}))
    assert fallback.rope.streams == (0,) * 8 + (1,) * 12 + (2,) * 12


def test_glm4v_token_ids_are_read_and_used():
    config = text_config(
        "glm4v",
        {"rope_scaling": {"rope_type": "default", "mrope_section": [8, 12, 12]}},
        image_token_id=13,
        video_start_token_id=11,
        video_end_token_id=12,
        video_token_id=99,  # a Qwen key: not GLM-4V's
    )
    model = mrope.from_hf(config)
    assert dict(model.token_ids) == {
        "image_token_id": 13,
        "video_start_token_id": 11,
        "video_end_token_id": 12,
    }
    row = [T, 11, 13, 13, 12, T]  # a one-frame video of 1 x 2 merged patches between the custom markers
    pos, _ = model.position_ids([row], None, [[1, 2, 4]])
    assert pos[:, 0].tolist() == [[0, 1, 2, 2, 4, 5], [0, 1, 2, 2, 4, 5], [0, 1, 2, 3, 4, 5]]


def test_qwen_token_ids_are_read_and_used():
    config = dict(qwen_config("qwen2_vl"), image_token_id=5, video_token_id=7, vision_start_token_id=6)
    model = mrope.from_hf(config)
    assert dict(model.token_ids) == {"image_token_id": 5, "video_token_id": 7, "vision_start_token_id": 6}
    pos, _ = model.position_ids([[T, 6, 7, 7, T]], None, [[1, 2, 4]])
    assert pos[:, 0].tolist() == [[0, 1, 2, 2, 4], [0, 1, 2, 2, 4], [0, 1, 2, 3, 4]]


def test_a_text_sub_config_reads_as_its_model():
    sub = {
        "model_type": "qwen2_5_vl_text",
        "hidden_size": 3584,
        "num_attention_heads": 28,
        "rope_theta": 1000000.0,
        "rope_scaling": {"rope_type": "mrope", "mrope_section": [16, 28, 20]},
    }
    model = mrope.from_hf(sub)
    assert model.rule == "qwen2.5-vl" and model.rope.streams == (0,) * 16 + (1,) * 28 + (2,) * 20
    assert model.rope.tables[0] == rope_ref.RopeConfig(128, layout="half", base=1e6)


@pytest.mark.parametrize(
    ("config", "match"),
    [
        (qwen_config(spatial_merge_size=0), "vision_config.spatial_merge_size"),
        (qwen_config(tokens_per_second="fast"), "vision_config.tokens_per_second"),
        (dict(qwen_config(), image_token_id="img"), "image_token_id"),
        ({"model_type": "qwen2_vl_vision"}, "model_type"),
    ],
)
def test_bad_values_name_their_key(config, match):
    with pytest.raises((TypeError, ValueError), match=match):
        mrope.from_hf(config)


def test_the_rope_part_reaches_the_tables():
    config = qwen_config("qwen2_vl", (16, 28, 20))
    config["rope_theta"] = 250000.0
    model = mrope.from_hf(config)
    assert all(t == rope_ref.RopeConfig(128, layout="half", base=250000.0) for t in model.rope.tables)
    x = np.random.default_rng(0).standard_normal(128)
    assert np.array_equal(model.apply(x, [0, 0, 0]), x)
