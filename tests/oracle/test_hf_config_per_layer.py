"""``from_hf`` of configs whose rotary differs by layer beyond ``rope_parameters``: Gemma 4's per-layer head
sizes (``per_layer_config`` keyed by layer index, or ``global_head_dim`` in a raw ``config.json``;
transformers 5.23 ``models/gemma4/configuration_gemma4.py`` ``__post_init__``), Molmo2's unscaled layers
(``rope_scaling_layers``) and DeepSeek-V4's ``compress_rope_theta``. Expected values restate those files.
"""

from __future__ import annotations

import pytest

from rope_ref import mla
from rope_ref.hf_config import model_families, rope_config_from_hf, rope_configs_from_hf
from rope_ref.scaling import Linear, Proportional

_TYPES = ["sliding_attention", "sliding_attention", "full_attention", "sliding_attention", "full_attention"]
_PARAMS = {
    "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
    "full_attention": {"rope_type": "proportional", "partial_rotary_factor": 0.25, "rope_theta": 1000000.0},
}


def _gemma4(**extra):
    return {
        "model_type": "gemma4_text",
        "hidden_size": 2304,
        "num_attention_heads": 8,
        "head_dim": 256,
        "layer_types": list(_TYPES),
        "rope_parameters": {k: dict(v) for k, v in _PARAMS.items()},
        **extra,
    }


def test_per_layer_config_sets_the_full_attention_head_size():
    cfg = _gemma4(
        per_layer_config={"02": {"head_dim": 512, "num_key_value_heads": 2}, "04": {"head_dim": 512}}
    )
    ropes = rope_configs_from_hf(cfg, layout="half")
    assert (ropes["full_attention"].head_dim, ropes["full_attention"].rotary_dim) == (512, 512)
    assert ropes["full_attention"].scaling == Proportional(1.0, 0.25)
    assert (ropes["sliding_attention"].head_dim, ropes["sliding_attention"].base) == (256, 10000.0)


def test_global_head_dim_of_a_raw_config_is_the_full_attention_head_size():
    ropes = rope_configs_from_hf(_gemma4(global_head_dim=384), layout="half")
    assert ropes["full_attention"].head_dim == 384
    assert ropes["sliding_attention"].head_dim == 256


def test_global_head_dim_of_another_model_type_is_not_read():
    cfg = dict(_gemma4(global_head_dim=384), model_type="other_text")
    assert rope_config_from_hf(cfg, layout="half", layer_type="full_attention").head_dim == 256


def test_layers_of_one_type_with_different_head_sizes_are_refused():
    cfg = _gemma4(per_layer_config={2: {"head_dim": 512}, 4: {"head_dim": 384}})
    with pytest.raises(ValueError, match="'full_attention' layers different overrides"):
        rope_config_from_hf(cfg, layout="half", layer_type="full_attention")
    cfg = _gemma4(per_layer_config={2: {"head_dim": 512}})  # layer 4 keeps 256
    with pytest.raises(ValueError, match="different overrides"):
        rope_config_from_hf(cfg, layout="half", layer_type="full_attention")


def test_overrides_that_do_not_touch_the_rotary_are_ignored():
    """NeoMME: some sliding layers override sliding_window only."""
    cfg = _gemma4(per_layer_config={0: {"sliding_window": 1024}, 1: {"sliding_window": None}})
    assert rope_config_from_hf(cfg, layout="half", layer_type="sliding_attention").head_dim == 256


def test_heads_override_matters_only_without_an_explicit_head_size():
    cfg = _gemma4(per_layer_config={2: {"num_attention_heads": 4}})  # head_dim 256 given: heads irrelevant
    assert rope_config_from_hf(cfg, layout="half", layer_type="full_attention").head_dim == 256
    del cfg["head_dim"]
    cfg["per_layer_config"] = {2: {"num_attention_heads": 4}, 4: {"num_attention_heads": 4}}
    assert rope_config_from_hf(cfg, layout="half", layer_type="full_attention").head_dim == 2304 // 4
    cfg["per_layer_config"] = {2: {"num_attention_heads": 4}}
    with pytest.raises(ValueError, match="different overrides"):
        rope_config_from_hf(cfg, layout="half", layer_type="full_attention")


def test_per_layer_config_keys_must_be_layer_indices():
    with pytest.raises(ValueError, match="per_layer_config keys must be layer indices"):
        rope_config_from_hf(
            _gemma4(per_layer_config={"full": {}}), layout="half", layer_type="full_attention"
        )


def _molmo2(listed):
    return {
        "model_type": "molmo2_text",
        "hidden_size": 512,
        "num_attention_heads": 4,
        "num_hidden_layers": 4,
        "rope_scaling_layers": listed,
        "rope_parameters": {"rope_type": "linear", "factor": 4.0, "rope_theta": 20000.0},
    }


def test_molmo2_unscaled_layers_get_the_same_base_without_scaling():
    ropes = rope_configs_from_hf(_molmo2([0, 2]), layout="half")
    assert set(ropes) == {"scaled", "unscaled"}
    assert (ropes["scaled"].base, ropes["scaled"].scaling) == (20000.0, Linear(4.0))
    assert (ropes["unscaled"].base, ropes["unscaled"].scaling, ropes["unscaled"].head_dim) == (
        20000.0,
        None,
        128,
    )


def test_molmo2_all_layers_scaled_is_one_rope():
    ropes = rope_configs_from_hf(_molmo2([0, 1, 2, 3]), layout="half")
    assert list(ropes) == ["default"] and ropes["default"].scaling == Linear(4.0)


def _deepseek_v4(compress_theta):
    return {
        "model_type": "deepseek_v4",
        "hidden_size": 4096,
        "num_attention_heads": 64,
        "head_dim": 512,
        "qk_rope_head_dim": 64,
        "partial_rotary_factor": 0.125,
        "compress_rope_theta": compress_theta,
        "rope_parameters": {
            "main": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.125},
            "compress": {"rope_type": "default", "rope_theta": 160000.0, "partial_rotary_factor": 0.125},
        },
    }


def test_deepseek_v4_compress_rope_theta_matches_the_compress_layers():
    ropes = rope_configs_from_hf(_deepseek_v4(160000.0), layout="interleaved")
    assert (ropes["compress"].base, ropes["main"].base) == (160000.0, 10000.0)
    assert ropes["compress"].rotary_dim == ropes["main"].rotary_dim == 64  # 512 * 0.125


def test_deepseek_v4_compress_rope_theta_that_disagrees_is_refused():
    with pytest.raises(ValueError, match="compress_rope_theta=150000.0"):
        rope_configs_from_hf(_deepseek_v4(150000.0), layout="interleaved")
    flat = _deepseek_v4(160000.0)
    flat["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0}
    with pytest.raises(ValueError, match="compress_rope_theta"):
        rope_config_from_hf(flat, layout="interleaved")


def test_deepseek_v4_has_a_rope_part_but_no_nope_part_so_is_not_mla():
    """transformers' ``models/deepseek_v4/configuration_deepseek_v4.py`` derives ``qk_rope_head_dim`` and has
    no ``qk_nope_head_dim``: not the DeepSeek-V2/V3 MLA split. Keyed by layer type it is per-layer; flat,
    plain RoPE."""
    keyed = _deepseek_v4(160000.0)
    flat = {**keyed, "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}
    assert (model_families(keyed), model_families(flat)) == (("layers",), ("rope",))
    with pytest.raises(ValueError, match="'qk_nope_head_dim': not an MLA"):
        mla.from_hf(keyed)
