"""``from_hf`` of configs that spell the head-size keys their own way (the config class's
``attribute_map``, which ``to_dict`` and ``config.json`` do not apply; transformers 5.23
``models/dbrx/configuration_dbrx.py``, ``models/moonshine/configuration_moonshine.py``,
``models/zamba2/configuration_zamba2.py``) and Zamba2's ``use_mem_rope`` switch."""

from __future__ import annotations

import pytest

from rope_ref.hf_config import rope_config_from_hf


def _config(model_type, rope=None, **keys):
    """A config dict of ``model_type`` with ``keys`` and a default rope dict unless ``rope`` is given."""
    return {
        "model_type": model_type,
        **keys,
        "rope_parameters": rope or {"rope_type": "default", "rope_theta": 1e4},
    }


def test_dbrx_reads_d_model_n_heads_and_max_seq_len():
    rope = {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 500000.0}
    got = rope_config_from_hf(
        _config("dbrx", rope, d_model=2048, n_heads=16, max_seq_len=4096), layout="half"
    )
    assert (got.head_dim, got.rotary_dim, got.base) == (128, 128, 500000.0)
    assert got.scaling.original_max_position == 4096  # dynamic NTK's L0 is max_position_embeddings


def test_an_explicit_key_wins_over_its_alias():
    cfg = _config("dbrx", d_model=2048, n_heads=16, num_attention_heads=8)
    assert rope_config_from_hf(cfg, layout="half").head_dim == 256


def test_moonshine_rotary_uses_the_decoder_heads():
    rope = {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.9}
    heads = {"encoder_num_attention_heads": 6, "decoder_num_attention_heads": 8}
    got = rope_config_from_hf(_config("moonshine", rope, hidden_size=288, **heads), layout="interleaved")
    assert (got.head_dim, got.rotary_dim) == (36, 32)  # 288 / 8 = 36; int(36 * 0.9) = 32


def test_aliases_belong_to_their_model_type():
    with pytest.raises(ValueError, match="missing 'hidden_size'"):
        rope_config_from_hf(_config("llama", d_model=2048, n_heads=16))


def _zamba2(switch):
    return _config(
        "zamba2", hidden_size=2560, num_attention_heads=32, attention_head_dim=160, use_mem_rope=switch
    )


def test_zamba2_head_size_is_attention_head_dim():
    got = rope_config_from_hf(_zamba2(True), layout="half")
    assert (got.head_dim, got.rotary_dim) == (160, 160)  # not 2560 / 32 = 80


def test_zamba2_without_mem_rope_uses_no_rotary():
    with pytest.raises(ValueError, match="use_mem_rope=False"):
        rope_config_from_hf(_zamba2(False), layout="half")
