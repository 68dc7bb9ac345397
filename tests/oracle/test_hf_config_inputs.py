"""Every ``from_hf`` takes a dict, a path to a config.json or a PretrainedConfig-like object, and
``model_family`` says which oracle reads a config (issue 29 point 3).

The configs are the released ``config.json`` files' RoPE keys, written out by hand (the numbers quoted in
each preset's docstring); each from_hf result is compared with the preset built independently of it.
"""

from __future__ import annotations

import copy
import json
import os
import pathlib

import pytest

import rope_ref
from rope_ref import hf_config, layers, mla, mrope, multiaxis, vision_rope
from rope_ref.hf_config import FAMILIES, config_dict, model_families, model_family, read_config_file

LLAMA2 = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "rope_theta": 10000.0}
QWEN2_VL = {
    "model_type": "qwen2_vl",
    "vocab_size": 152064,
    "hidden_size": 3584,
    "num_attention_heads": 28,
    "rope_theta": 1000000.0,
    "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]},
    "image_token_id": 151655,
    "video_token_id": 151656,
    "vision_start_token_id": 151652,
    "vision_config": {
        "depth": 32,
        "embed_dim": 1280,
        "hidden_size": 3584,
        "num_heads": 16,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
    },
}
DEEPSEEK_V3 = {
    "model_type": "deepseek_v3",
    "hidden_size": 7168,
    "num_attention_heads": 128,
    "kv_lora_rank": 512,
    "q_lora_rank": 1536,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "rope_theta": 10000,
    "max_position_embeddings": 163840,
    "rope_scaling": {
        "beta_fast": 32,
        "beta_slow": 1,
        "factor": 40,
        "mscale": 1.0,
        "mscale_all_dim": 1.0,
        "original_max_position_embeddings": 4096,
        "type": "yarn",
    },
}
DEEPSEEK_V2_LITE = dict(
    DEEPSEEK_V3,
    model_type="deepseek_v2",
    hidden_size=2048,
    num_attention_heads=16,
    q_lora_rank=None,
    rope_scaling=dict(DEEPSEEK_V3["rope_scaling"], mscale=0.707, mscale_all_dim=0.707),
)
KIMI_K2 = dict(
    DEEPSEEK_V3,
    model_type="kimi_k2",
    num_attention_heads=64,
    rope_theta=50000.0,
    max_position_embeddings=131072,
    rope_scaling=dict(DEEPSEEK_V3["rope_scaling"], beta_fast=1.0, beta_slow=1.0, factor=32.0),
)
GEMMA3_1B = {
    "model_type": "gemma3_text",
    "num_hidden_layers": 26,
    "hidden_size": 1152,
    "num_attention_heads": 4,
    "head_dim": 256,
    "rope_theta": 1000000.0,
    "rope_local_base_freq": 10000.0,
    "rope_scaling": None,
    "sliding_window_pattern": 6,
}
GEMMA3_27B = {
    "model_type": "gemma3",
    "text_config": dict(
        GEMMA3_1B,
        num_hidden_layers=62,
        head_dim=128,
        hidden_size=5376,
        num_attention_heads=32,
        rope_scaling={"factor": 8.0, "rope_type": "linear"},
    ),
    "vision_config": {"model_type": "siglip_vision_model", "patch_size": 14, "hidden_size": 1152},
}
LLAMA4_SCOUT = {
    "model_type": "llama4",
    "text_config": {
        "model_type": "llama4_text",
        "num_hidden_layers": 48,
        "hidden_size": 5120,
        "num_attention_heads": 40,
        "head_dim": 128,
        "rope_theta": 500000.0,
        "max_position_embeddings": 10485760,
        "no_rope_layers": [],
        "rope_scaling": {
            "factor": 8.0,
            "high_freq_factor": 4.0,
            "low_freq_factor": 1.0,
            "original_max_position_embeddings": 8192,
            "rope_type": "llama3",
        },
    },
}
PIXTRAL_12B = {
    "model_type": "llava",
    "text_config": {
        "model_type": "mistral",
        "hidden_size": 5120,
        "num_attention_heads": 32,
        "head_dim": 128,
        "rope_theta": 1000000000.0,
    },
    "vision_config": {
        "model_type": "pixtral",
        "hidden_size": 1024,
        "num_attention_heads": 16,
        "head_dim": 64,
        "rope_theta": 10000.0,
        "patch_size": 16,
        "image_size": 1024,
    },
}
CHATGLM_6B = {
    "model_type": "chatglm",
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "position_encoding_2d": True,
    "max_sequence_length": 2048,
}


class FakePretrainedConfig:
    """What transformers' PretrainedConfig offers here: ``to_dict()`` (a fresh nested dict)."""

    def __init__(self, config: dict) -> None:
        self._config = copy.deepcopy(config)

    def to_dict(self) -> dict:
        return copy.deepcopy(self._config)


def _forms(config: dict, tmp_path: pathlib.Path) -> list:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return [config, str(path), path, FakePretrainedConfig(config)]


# -- the one reader ----------------------------------------------------------------------------------------


def test_config_dict_reads_the_three_forms(tmp_path):
    for form in _forms(LLAMA2, tmp_path):
        assert dict(config_dict(form)) == LLAMA2
    assert config_dict(LLAMA2) is LLAMA2  # a dict is used as it is


class _PathLike(os.PathLike):
    def __init__(self, path):
        self.path = path

    def __fspath__(self):
        return str(self.path)


def test_config_dict_takes_any_pathlike(tmp_path):
    (tmp_path / "c.json").write_text('{"model_type": "llama"}')
    assert config_dict(_PathLike(tmp_path / "c.json")) == {"model_type": "llama"}


@pytest.mark.parametrize(
    "bad,message",
    [
        (
            42,
            "config must be a dict (a parsed config.json), a path to a config.json, or an object with "
            "to_dict(); got int",
        ),
        ([("model_type", "llama")], "config must be a dict"),
        (b"config.json", "got bytes"),
        (FakePretrainedConfig, "got type"),  # the class, not an instance
    ],
)
def test_config_dict_refuses_other_things_in_one_line(bad, message):
    with pytest.raises(TypeError) as info:
        config_dict(bad)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_to_dict_must_give_a_mapping():
    class Odd:
        def to_dict(self):
            return [1, 2]

    with pytest.raises(TypeError, match=r"^config.to_dict\(\) of a Odd must return a dict, got list$"):
        config_dict(Odd())


@pytest.mark.parametrize(
    "text,message",
    [
        ("{", "not valid JSON (Expecting property name enclosed in double quotes: line 1 column 2 (char 1))"),
        ("[1, 2]", "must hold a JSON object, got list"),
        ('{"rope_theta": NaN}', "not valid JSON (NaN is not a JSON number"),
        ('{"rope_theta": 1e999}', "out of the float64 range"),
        ('{"x": ' + "[" * 70 + "]" * 70 + "}", "JSON nested deeper than 64 levels"),
        ('{"rope_theta": 1' + "0" * 400 + "}", "rope_theta is a 401-digit integer"),
    ],
)
def test_bad_files_give_one_line_errors(tmp_path, text, message):
    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(ValueError) as info:
        rope_ref.RopeConfig.from_hf(str(path))
    assert str(info.value).startswith(f"config {path}: ") and message in str(info.value), info.value
    assert "\n" not in str(info.value)


def test_missing_file_directory_and_bytes_are_one_line_errors(tmp_path):
    with pytest.raises(
        ValueError, match=r"^config .*nothing\.json: cannot read it \(No such file or directory\)$"
    ):
        config_dict(str(tmp_path / "nothing.json"))
    with pytest.raises(ValueError, match="not a regular file"):
        config_dict(tmp_path)
    (tmp_path / "bin.json").write_bytes(b'{"a": "\xff"}')
    with pytest.raises(ValueError, match="not UTF-8"):
        config_dict(tmp_path / "bin.json")


def test_the_read_is_bounded(tmp_path, monkeypatch):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(LLAMA2))
    monkeypatch.setattr(hf_config, "MAX_CONFIG_BYTES", 16)
    with pytest.raises(ValueError, match=r"bytes, more than the limit of 16$"):
        read_config_file(path)
    assert hf_config.MAX_CONFIG_BYTES == 16
    monkeypatch.undo()
    assert hf_config.MAX_CONFIG_BYTES == 16 * 2**20


def test_a_file_up_to_the_limit_is_read_whole(tmp_path, monkeypatch):
    """Real config.json files run past any small read buffer (id2label maps of ~100k entries): 300 kB
    comes back whole; with the limit at the file's own size it is still read, one byte less refuses it."""
    config = dict(LLAMA2, id2label={str(i): f"LABEL_{i}" for i in range(15000)})
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    size = path.stat().st_size
    assert size > 300_000
    assert read_config_file(path) == config
    monkeypatch.setattr(hf_config, "MAX_CONFIG_BYTES", size)
    assert read_config_file(path) == config
    monkeypatch.setattr(hf_config, "MAX_CONFIG_BYTES", size - 1)
    too_big = rf"^config .*\.json: {size} bytes, more than the limit of {size - 1}$"
    with pytest.raises(ValueError, match=too_big):
        read_config_file(path)


def test_read_config_file_names_the_argument(tmp_path):
    with pytest.raises(ValueError, match=r"^--hf-config .*x\.json: cannot read it"):
        read_config_file(tmp_path / "x.json", "--hf-config")


# -- every from_hf, three ways -----------------------------------------------------------------------------


def test_rope_config_from_hf_three_ways(tmp_path):
    for form in _forms(LLAMA2, tmp_path):
        assert rope_ref.RopeConfig.from_hf(form) == rope_ref.RopeConfig(128, layout="half", base=10000.0)
        assert hf_config.rope_configs_from_hf(form) == {"default": rope_ref.preset("llama-2-7b")}


def test_mrope_from_hf_three_ways(tmp_path):
    want = mrope.preset("qwen2-vl-7b")
    for form in _forms(QWEN2_VL, tmp_path):
        got = mrope.from_hf(form)
        assert (got.rope, got.rule, got.spatial_merge_size) == (want.rope, want.rule, 2)
        assert dict(got.token_ids)["image_token_id"] == 151655


@pytest.mark.parametrize(
    "config,name",
    [(DEEPSEEK_V2_LITE, "deepseek-v2-lite"), (DEEPSEEK_V3, "deepseek-v3"), (KIMI_K2, "kimi-k2")],
)
def test_mla_from_hf_matches_the_presets_three_ways(tmp_path, config, name):
    want = mla.preset(name)
    for form in _forms(config, tmp_path):
        got = mla.from_hf(form)  # no layout: deepseek_v2 is interleaved, v3 / kimi_k2 rope_interleave=True
        assert (got.qk_nope_head_dim, got.qk_rope_head_dim, got.v_head_dim) == (128, 64, 128)
        assert (got.rope, got.mscale_all_dim) == (want.rope, want.mscale_all_dim)
        assert mla.softmax_scale(got) == mla.softmax_scale(want)


def test_mla_layout_follows_rope_interleave():
    got = mla.from_hf(dict(DEEPSEEK_V3, rope_interleave=False))
    assert got.rope.layout == "half"
    with pytest.raises(ValueError, match="contradicts the config"):
        mla.from_hf(DEEPSEEK_V3, layout="half")


@pytest.mark.parametrize(
    "config,name", [(GEMMA3_1B, "gemma-3-1b"), (GEMMA3_27B, "gemma-3-27b"), (LLAMA4_SCOUT, "llama-4-scout")]
)
def test_layers_from_hf_matches_the_presets_three_ways(tmp_path, config, name):
    want = layers.preset(name)
    for form in _forms(config, tmp_path):
        assert layers.from_hf(form).ropes == want.ropes


def test_layers_from_hf_reads_layer_types_and_no_rope_layers():
    types = ["sliding_attention", "full_attention"] * 13
    got = layers.from_hf(dict(GEMMA3_1B, layer_types=types))
    assert got.ropes[0].base == 10000.0 and got.ropes[1].base == 1e6 and got.num_layers == 26
    text = dict(LLAMA4_SCOUT["text_config"], num_hidden_layers=3, no_rope_layers=[0, 1, 0])
    got = layers.from_hf(dict(LLAMA4_SCOUT, text_config=text))
    assert got.ropes[0] is None and got.ropes[2] is None and got.ropes[1].base == 500000.0
    with pytest.raises(ValueError, match="layer_types must list num_hidden_layers=26"):
        layers.from_hf(dict(GEMMA3_1B, layer_types=types[:3]))


@pytest.mark.parametrize(
    "config,name",
    [
        (QWEN2_VL, "qwen2-vl-vision"),
        (
            {
                "model_type": "qwen3_vl",
                "vision_config": {
                    "model_type": "qwen3_vl",
                    "hidden_size": 1152,
                    "num_heads": 16,
                    "patch_size": 16,
                },
            },
            "qwen3-vl-vision",
        ),
        (PIXTRAL_12B, "pixtral-12b-vision"),
        (PIXTRAL_12B["vision_config"], "pixtral-12b-vision"),  # the tower's own config
    ],
)
def test_vision_from_hf_matches_the_presets_three_ways(tmp_path, config, name):
    want = vision_rope.preset(name)
    for form in _forms(config, tmp_path):
        assert vision_rope.from_hf(form) == want


def test_qwen2_5_vl_vision_uses_hidden_size():
    config = {
        "model_type": "qwen2_5_vl",
        "vision_config": {"hidden_size": 1280, "num_heads": 16, "out_hidden_size": 3584, "patch_size": 14},
    }
    assert vision_rope.from_hf(config) == vision_rope.preset("qwen2.5-vl-vision")


def test_chatglm_2d_from_hf_three_ways(tmp_path):
    for form in _forms(CHATGLM_6B, tmp_path):
        assert multiaxis.from_hf(form) == multiaxis.chatglm_2d(128, 10000.0)
    assert multiaxis.from_hf(LLAMA2) == multiaxis.from_config(rope_ref.preset("llama-2-7b"))


@pytest.mark.parametrize(
    "call,config,message",
    [
        (mla.from_hf, LLAMA2, "config is missing the key 'qk_nope_head_dim': not an MLA"),
        (layers.from_hf, dict(LLAMA2, num_hidden_layers=32), "has one RoPE for every layer: use RopeConfig"),
        (layers.from_hf, LLAMA2, "missing the key 'num_hidden_layers'"),
        (vision_rope.from_hf, LLAMA2, "config has no vision_config"),
        (vision_rope.from_hf, GEMMA3_27B, "no vision RoPE for vision model_type 'siglip_vision_model'"),
        (mrope.from_hf, LLAMA2, "model_type must be one of"),
    ],
)
def test_wrong_family_is_a_clear_error(call, config, message):
    with pytest.raises(ValueError) as info:
        call(config)
    assert message in str(info.value)


# -- which oracle reads a config ----------------------------------------------------------------------------

READERS = {
    "rope": rope_ref.RopeConfig.from_hf,
    "mrope": mrope.from_hf,
    "mla": mla.from_hf,
    "layers": layers.from_hf,
    "vision": vision_rope.from_hf,
    "chatglm-2d": multiaxis.from_hf,
}


@pytest.mark.parametrize(
    "config,families",
    [
        (LLAMA2, ("rope",)),
        (QWEN2_VL, ("mrope", "vision")),
        (DEEPSEEK_V3, ("mla",)),
        (KIMI_K2, ("mla",)),
        (GEMMA3_1B, ("layers",)),
        (GEMMA3_27B, ("layers",)),  # SigLIP tower: rope-ref has no vision RoPE for it
        (LLAMA4_SCOUT, ("layers",)),
        (PIXTRAL_12B, ("rope", "vision")),
        (PIXTRAL_12B["vision_config"], ("vision",)),
        (CHATGLM_6B, ("chatglm-2d",)),
        (
            dict(
                LLAMA2,
                rope_parameters={
                    "full_attention": {"rope_theta": 1e6},
                    "sliding_attention": {"rope_theta": 1e4},
                },
                layer_types=["full_attention", "sliding_attention"],
                num_hidden_layers=2,
            ),
            ("layers",),
        ),
    ],
)
def test_model_family_and_its_reader(tmp_path, config, families):
    assert set(FAMILIES) == set(READERS)
    for form in _forms(config, tmp_path):
        assert model_families(form) == families and model_family(form) == families[0]
    for family in families:
        READERS[family](config)  # each family's reader takes the config as it is


def test_generic_layer_typed_config_reads_per_layer():
    config = dict(
        LLAMA2,
        rope_parameters={"full_attention": {"rope_theta": 1e6}, "sliding_attention": {"rope_theta": 1e4}},
        layer_types=["full_attention", "sliding_attention", "sliding_attention"],
        num_hidden_layers=3,
    )
    got = layers.from_hf(config)
    assert [c.base for c in got.ropes] == [1e6, 1e4, 1e4]
