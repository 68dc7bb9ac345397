"""``from_hf`` where ``partial_rotary_factor`` is a fraction of the whole ``head_dim`` naming the MLA rope
part ``qk_rope_head_dim`` (Mistral 4: 128 * 0.5 = 64; transformers 5.23 ``models/mistral4``), and the
rope-dict keys that do not change cos and sin (``llama_4_scaling_beta``, a repeated
``max_position_embeddings``: ``models/ministral3/modeling_ministral3.py`` ``get_llama_4_attn_scale``)."""

from __future__ import annotations

import pytest

from rope_ref import mla
from rope_ref.hf_config import rope_config_from_hf
from rope_ref.scaling import YaRN, scaling_from_hf

_YARN = {
    "rope_type": "yarn",
    "rope_theta": 10000.0,
    "factor": 128.0,
    "original_max_position_embeddings": 8192,
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "mscale": 1.0,
    "mscale_all_dim": 0.5,
}


def _mistral4(**rope):
    return {
        "model_type": "mistral4",
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "head_dim": 128,
        "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 96,
        "v_head_dim": 112,
        "max_position_embeddings": 1048576,
        "rope_interleave": True,
        "rope_parameters": {**_YARN, **rope},
    }


def test_fraction_of_the_whole_head_names_the_rope_part():
    got = rope_config_from_hf(_mistral4(partial_rotary_factor=0.5))
    assert (got.head_dim, got.rotary_dim, got.layout) == (64, 64, "interleaved")
    assert mla.from_hf(_mistral4(partial_rotary_factor=0.5)).rope.rotary_dim == 64


def test_fraction_that_does_not_name_the_rope_part_stays_a_fraction_of_it():
    assert rope_config_from_hf(_mistral4(partial_rotary_factor=0.25)).rotary_dim == 16  # 64 * 0.25


def test_without_a_fraction_the_rope_part_rotates_whole():
    assert rope_config_from_hf(_mistral4()).rotary_dim == 64


def test_llama_4_scaling_beta_does_not_change_the_rotation():
    plain = rope_config_from_hf(_mistral4(partial_rotary_factor=0.5))
    beta = rope_config_from_hf(
        _mistral4(partial_rotary_factor=0.5, llama_4_scaling_beta=0.1, max_position_embeddings=1048576)
    )
    assert beta == plain and isinstance(beta.scaling, YaRN)


def test_repeated_max_position_embeddings_must_match_the_config():
    with pytest.raises(ValueError, match=r"'max_position_embeddings' \(262144\) differs"):
        rope_config_from_hf(_mistral4(partial_rotary_factor=0.5, max_position_embeddings=262144))
    with pytest.raises(ValueError, match="differs"):
        scaling_from_hf({**_YARN, "max_position_embeddings": 4096}, max_position_embeddings=8192)
    assert scaling_from_hf({**_YARN, "max_position_embeddings": 8192}) == scaling_from_hf(_YARN)


def test_other_unknown_yarn_keys_are_still_refused():
    with pytest.raises(ValueError, match=r"unknown keys \['llama_4_scaling_alpha'\]"):
        scaling_from_hf({**_YARN, "llama_4_scaling_alpha": 0.1})
