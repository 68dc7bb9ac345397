"""Issue 21: survivors of the fresh "fresh9" mutation sample (decay, tolerance, runner)."""

from __future__ import annotations

import pytest

from rope_ref import RopeConfig

# -- decay: the pass-through channels of the sampled curve ------------------------------------------------


# -- tolerance ------------------------------------------------------------------------------------------


# -- hf_config ------------------------------------------------------------------------------------------


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


# -- fresh10 survivors -----------------------------------------------------------------------------------


# -- chatglm: survivors of the run over every mutant of the module ----------------------------------------


# -- fresh11 survivors ----------------------------------------------------------------------------------


def test_default_bases_of_the_model_types_with_their_own():
    """transformers' config defaults (read from Llama4TextConfig, MixtralConfig, CohereConfig of
    transformers 5.23: rope_parameters["rope_theta"]) when a config has no rope_theta."""
    bare = {"hidden_size": 512, "num_attention_heads": 8}
    for model_type, base in (("llama4", 5e5), ("llama4_text", 5e5), ("mixtral", 1e6), ("cohere", 5e5)):
        assert RopeConfig.from_hf(dict(bare, model_type=model_type)).base == base, model_type


# -- fresh13 survivors ----------------------------------------------------------------------------------


