"""Which key ``RopeConfig.from_hf`` reads when a config gives several, the default when it gives none, and
the one-line refusal naming the key when a value is out of range.

Every case gives the competing keys DIFFERENT values, so reading the wrong one, or the right one in the
wrong order, changes the answer. Expected configs are written out by hand from the rules of
transformers 5.23 (``modeling_rope_utils.py`` and each model's ``configuration_*.py``), never built by
the reader under test.
"""

from __future__ import annotations

import json

import pytest

from rope_ref import DynamicNTK, Linear, Llama3, LongRoPE, RopeConfig, YaRN, hf_config
from rope_ref.hf_config import model_family, rope_config_from_hf, rope_configs_from_hf

LLAMA = {"model_type": "llama", "head_dim": 64, "max_position_embeddings": 4096}


def _half(head_dim=64, **kw) -> RopeConfig:
    return RopeConfig(head_dim, layout="half", **kw)


CASES = {
    # -- the base ---------------------------------------------------------------------------------------
    "rope-dict-theta-over-top-level": (
        {**LLAMA, "rope_theta": 20000.0, "rope_parameters": {"rope_type": "default", "rope_theta": 30000.0}},
        _half(base=30000.0),
    ),
    "rope-theta-over-rotary-emb-base": (
        {**LLAMA, "rope_theta": 20000.0, "rotary_emb_base": 40000.0},
        _half(base=20000.0),
    ),
    "rotary-emb-base-alone": ({**LLAMA, "rotary_emb_base": 40000.0}, _half(base=40000.0)),
    "default-theta-llama": (LLAMA, _half(base=10000.0)),
    "default-theta-mixtral": ({**LLAMA, "model_type": "mixtral"}, _half(base=1e6)),
    "default-theta-cohere": (
        {**LLAMA, "model_type": "cohere"},
        RopeConfig(64, layout="interleaved", base=5e5),
    ),
    "chatglm3-ratio-multiplies-the-base": (
        {
            "model_type": "chatglm",
            "kv_channels": 128,
            "rope_ratio": 50.0,
            "_name_or_path": "THUDM/chatglm3-6b",
        },
        RopeConfig(128, layout="interleaved", rotary_dim=64, base=500000.0),
    ),
    "chatglm2-32k-ratio-interpolates": (
        {
            "model_type": "chatglm",
            "kv_channels": 128,
            "rope_ratio": 16.0,
            "rope_theta": 20000.0,
            "_name_or_path": "THUDM/chatglm2-6b-32k",
        },
        RopeConfig(128, layout="interleaved", rotary_dim=64, base=20000.0, scaling=Linear(16.0)),
    ),
    "chatglm2-ratio-one-is-plain": (
        {
            "model_type": "chatglm",
            "kv_channels": 128,
            "rope_ratio": 1.0,
            "_name_or_path": "THUDM/chatglm2-6b",
            "original_rope": False,
        },
        RopeConfig(128, layout="half", rotary_dim=64, base=10000.0),
    ),
    # -- the rotary fraction -----------------------------------------------------------------------------
    "rope-dict-fraction-over-top-level": (
        {
            **LLAMA,
            "partial_rotary_factor": 0.25,
            "rope_parameters": {"rope_type": "default", "partial_rotary_factor": 0.5},
        },
        _half(rotary_dim=32),
    ),
    "top-level-fraction-over-rotary-pct": (
        {**LLAMA, "partial_rotary_factor": 0.75, "rotary_pct": 0.25},
        _half(rotary_dim=48),
    ),
    "rotary-pct-over-the-type-default": (
        {**LLAMA, "model_type": "gpt_neox", "rotary_pct": 0.5},
        _half(rotary_dim=32),
    ),
    "gpt-neox-default-quarter": ({**LLAMA, "model_type": "gpt_neox"}, _half(rotary_dim=16)),
    "phi-default-half": ({**LLAMA, "model_type": "phi"}, _half(rotary_dim=32)),
    "gptj-default-rotary-dim-64": (
        {"model_type": "gptj", "n_embd": 512, "n_head": 4},
        RopeConfig(128, layout="interleaved", rotary_dim=64),
    ),
    "rotary-dim-given-alone": ({**LLAMA, "rotary_dim": 24}, _half(rotary_dim=24)),
    "fraction-over-rotary-dim": (
        {**LLAMA, "rotary_dim": 24, "partial_rotary_factor": 0.5},
        _half(rotary_dim=32),
    ),
    # -- the head size -----------------------------------------------------------------------------------
    "head-dim-over-kv-channels": ({**LLAMA, "head_dim": 48, "kv_channels": 32}, _half(48)),
    "kv-channels-over-hidden-size": (
        {"model_type": "llama", "kv_channels": 32, "hidden_size": 768, "num_attention_heads": 6},
        _half(32),
    ),
    "hidden-size-over-heads": (
        {"model_type": "llama", "hidden_size": 768, "num_attention_heads": 6},
        _half(128),
    ),
    "gptj-n-embd-over-n-head": ({"model_type": "llama", "n_embd": 768, "n_head": 4}, _half(192)),
    "dbrx-aliases": (
        {
            "model_type": "dbrx",
            "d_model": 768,
            "n_heads": 12,
            "max_seq_len": 2048,
            "rope_theta": 5e5,
            "rope_scaling": {"rope_type": "dynamic", "factor": 2.0},
        },
        RopeConfig(64, layout="half", base=5e5, scaling=DynamicNTK(2.0, 2048)),
    ),
    "dbrx-explicit-key-wins-over-its-alias": (
        {"model_type": "dbrx", "d_model": 768, "hidden_size": 384, "n_heads": 12, "rope_theta": 5e5},
        RopeConfig(32, layout="half", base=5e5),
    ),
    "zamba2-attention-head-dim": (
        {
            "model_type": "zamba2",
            "attention_head_dim": 96,
            "hidden_size": 64,
            "num_attention_heads": 2,
            "rope_theta": 1e4,
        },
        RopeConfig(96, layout="half"),
    ),
    # -- the context lengths -----------------------------------------------------------------------------
    "top-level-original-over-rope-dict": (
        {
            **LLAMA,
            "original_max_position_embeddings": 2048,
            "rope_scaling": {"rope_type": "yarn", "factor": 3.0, "original_max_position_embeddings": 1024},
        },
        _half(scaling=YaRN(3.0, 2048)),
    ),
    "top-level-original-for-llama3": (
        {
            **LLAMA,
            "original_max_position_embeddings": 2048,
            "rope_scaling": {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 1024,
            },
        },
        _half(scaling=Llama3(8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position=2048)),
    ),
    "top-level-original-for-longrope": (
        {
            **LLAMA,
            "head_dim": 8,
            "original_max_position_embeddings": 2048,
            "rope_scaling": {
                "rope_type": "longrope",
                "short_factor": [1.0, 1.5, 2.0, 2.5],
                "long_factor": [3.0, 3.5, 4.0, 4.5],
                "original_max_position_embeddings": 1024,
            },
        },
        _half(8, scaling=LongRoPE([1.0, 1.5, 2.0, 2.5], [3.0, 3.5, 4.0, 4.5], 2048, factor=2.0)),
    ),
    "rope-interleave-key-over-the-model-type": (
        {**LLAMA, "rope_interleave": True},
        RopeConfig(64, layout="interleaved"),
    ),
    "rope-dict-original-over-max-position": (
        {
            **LLAMA,
            "rope_scaling": {"rope_type": "yarn", "factor": 3.0, "original_max_position_embeddings": 1024},
        },
        _half(scaling=YaRN(3.0, 1024)),
    ),
    "dynamic-reads-max-position-not-the-original": (
        {
            **LLAMA,
            "original_max_position_embeddings": 2048,
            "rope_scaling": {"rope_type": "dynamic", "factor": 3.0},
        },
        _half(scaling=DynamicNTK(3.0, 4096)),
    ),
    "chatglm-seq-length-when-no-max-position": (
        {
            "model_type": "chatglm",
            "kv_channels": 64,
            "seq_length": 3000,
            "rope_scaling": {"type": "dynamic", "factor": 2.0},
        },
        RopeConfig(64, layout="interleaved", rotary_dim=32, scaling=DynamicNTK(2.0, 3000)),
    ),
    # -- the rope dict and its type ----------------------------------------------------------------------
    "empty-rope-scaling-falls-back-to-rope-parameters": (
        {**LLAMA, "rope_scaling": {}, "rope_parameters": {"rope_type": "linear", "factor": 5.0}},
        _half(scaling=Linear(5.0)),
    ),
    "legacy-type-read-when-no-rope-type": (
        {**LLAMA, "rope_scaling": {"type": "linear", "factor": 6.0}},
        _half(scaling=Linear(6.0)),
    ),
    # -- the layout --------------------------------------------------------------------------------------
    "rope-interleave-false": ({**LLAMA, "model_type": "deepseek_v3", "rope_interleave": False}, _half()),
    "rope-interleave-none-is-its-default": (
        {**LLAMA, "model_type": "deepseek_v3", "rope_interleave": None},
        RopeConfig(64, layout="interleaved"),
    ),
    "text-config-of-a-wrapper": (
        {"model_type": "llava", "text_config": {**LLAMA, "rope_theta": 7e4}},
        _half(base=7e4),
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_the_right_key_is_read(name):
    config, expected = CASES[name]
    snapshot = json.dumps(config, sort_keys=True)
    assert rope_config_from_hf(config, layout=expected.layout) == expected
    if config.get("model_type") not in ("dbrx", "zamba2"):  # the others' layout follows from the config
        assert rope_config_from_hf(config) == expected
    assert json.dumps(config, sort_keys=True) == snapshot  # the caller's dict is not changed


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("rope_theta", 3e4),
        ("rope_scaling", {"rope_type": "default"}),
        ("rope_parameters", {"rope_type": "default"}),
        ("hidden_size", 1024),
        ("head_dim", 64),
    ],
)
def test_top_level_rope_keys_keep_a_wrappers_own_config(key, value):
    """A wrapper with any of these keys at the top level is read itself, not through its text_config."""
    config = {**LLAMA, key: value, "text_config": {**LLAMA, "rope_theta": 7e4, "head_dim": 32}}
    assert rope_config_from_hf(config) == _half(base=3e4 if key == "rope_theta" else 1e4)


def test_gemma3_local_and_global_bases_and_defaults():
    base = {
        "model_type": "gemma3_text",
        "head_dim": 32,
        "max_position_embeddings": 4096,
        "rope_scaling": {"rope_type": "linear", "factor": 8.0},
    }
    got = rope_configs_from_hf({**base, "rope_theta": 2e6, "rope_local_base_freq": 3e4})
    assert got == {
        "full_attention": _half(32, base=2e6, scaling=Linear(8.0)),
        "sliding_attention": _half(32, base=3e4),
    }
    defaults = rope_configs_from_hf(base)
    assert defaults == {
        "full_attention": _half(32, base=1e6, scaling=Linear(8.0)),
        "sliding_attention": _half(32, base=1e4),
    }


def test_molmo2_unscaled_layers_only_when_some_are_left_out():
    config = {**LLAMA, "rope_scaling": {"rope_type": "linear", "factor": 2.0}, "num_hidden_layers": 3}
    assert rope_configs_from_hf({**config, "rope_scaling_layers": [0, 2]}) == {
        "scaled": _half(scaling=Linear(2.0)),
        "unscaled": _half(),
    }
    assert rope_configs_from_hf({**config, "rope_scaling_layers": [2, 1, 0]}) == {
        "default": _half(scaling=Linear(2.0))
    }


def test_a_config_file_is_read_up_to_the_byte_limit_and_no_further(tmp_path, monkeypatch):
    text = json.dumps(LLAMA)
    monkeypatch.setattr(hf_config, "MAX_CONFIG_BYTES", len(text))
    path = tmp_path / "config.json"
    path.write_text(text)
    assert hf_config.read_config_file(path) == LLAMA
    path.write_text(text + " ")
    with pytest.raises(
        ValueError,
        match=rf"^model {path}: {len(text) + 1} bytes, more than the limit of "
        rf"{len(text)}$",
    ):
        hf_config.read_config_file(path, "model")


def test_nesting_is_refused_just_past_its_limit_naming_the_argument(tmp_path):
    def nested(depth):  # the innermost of `depth` lists below the top object sits at depth `depth`
        return {"k": json.loads("[" * depth + "]" * depth)}

    hf_config._check_json(nested(64), "cfg")  # at the limit: allowed
    with pytest.raises(ValueError, match=r"^cfg: JSON nested deeper than 64 levels$"):
        hf_config._check_json(nested(65), "cfg")
    path = tmp_path / "deep.json"
    path.write_text(json.dumps(nested(65)))
    with pytest.raises(ValueError, match=rf"^hf {path}: JSON nested deeper than 64 levels$"):
        hf_config.read_config_file(path, "hf")


def test_a_huge_integer_is_refused_naming_its_key():
    with pytest.raises(ValueError, match=r"^c: rope_theta is a 310-digit integer, beyond the float64 range"):
        hf_config._check_json({"rope_scaling": {"rope_theta": 10**309}}, "c")
    with pytest.raises(ValueError, match=r"^c: a value is a 310-digit integer"):
        hf_config._check_json([10**309], "c")
    hf_config._check_json({"rope_theta": 10**308}, "c")  # 309 digits: still a float64


@pytest.mark.parametrize(
    ("config", "family"),
    [
        ({**LLAMA, "rope_parameters": {"rope_type": "default", "mrope_section": [8, 12, 12]}}, "mrope"),
        ({**LLAMA, "qk_nope_head_dim": 128}, "mla"),
        ({**LLAMA, "layer_rope_theta": [1e4, 1e6]}, "layers"),
        ({**LLAMA, "position_encoding_2d": True}, "chatglm-2d"),
        ({"model_type": "llava", "text_config": {**LLAMA, "model_type": "llama4_text"}}, "layers"),
        (LLAMA, "rope"),
    ],
)
def test_the_family_is_read_from_its_own_key(config, family):
    assert model_family(config) == family


@pytest.mark.parametrize(
    ("change", "error", "match"),
    [
        (
            {"rope_foo": 1},
            ValueError,
            r"^config has keys about rotary embeddings that rope-ref does not understand: "
            r"\['Rotary_X', 'rope_foo'\]; refusing",
        ),
        (
            {"partial_rotary_factor": 1.0000001},
            ValueError,
            r"^partial_rotary_factor must be in \(0, 1\], got 1.0000001$",
        ),
        ({"partial_rotary_factor": 0.0}, ValueError, r"^partial_rotary_factor must be in \(0, 1\], got 0.0$"),
        ({"partial_rotary_factor": -0.5}, ValueError, r"^partial_rotary_factor must be in \(0, 1\]"),
        (
            {"partial_rotary_factor": 0.03},
            ValueError,
            r"^partial_rotary_factor=0.03 with head size 64 gives rotary "
            r"width 1 ",
        ),
        ({"rotary_dim": 66}, ValueError, r"^rotary_dim \(66\) exceeds the head size \(64\)$"),
        ({"rope_theta": "1e4"}, TypeError, "rope_theta"),
        ({"rope_ratio": "2"}, TypeError, "rope_ratio"),
        ({"max_position_embeddings": 0}, ValueError, "max_position_embeddings"),
        ({"head_dim": 1}, ValueError, "head_dim"),
        ({"use_rope": False}, ValueError, r"^config has use_rope=False: the model uses no rotary embedding$"),
        (
            {"use_mem_rope": False},
            ValueError,
            r"^config has use_mem_rope=False: the model uses no rotary embedding$",
        ),
        ({"alibi": True}, ValueError, r"^config has alibi=True"),
        ({"position_encoding_2d": True}, ValueError, r"^config has position_encoding_2d=True"),
        ({"rope_scaling": [1.0]}, ValueError, r"^rope_scaling / rope_parameters must be a dict, got list$"),
    ],
    ids=[
        "unknown-keys",
        "fraction-above-1",
        "fraction-0",
        "fraction-negative",
        "fraction-odd-width",
        "rotary-dim-wide",
        "theta-string",
        "ratio-string",
        "max-position-0",
        "head-dim-1",
        "use-rope-false",
        "use-mem-rope-false",
        "alibi",
        "2d",
        "rope-scaling-list",
    ],
)
def test_a_bad_value_is_refused_naming_its_key(change, error, match):
    config = {**LLAMA, **change}
    if "rope_foo" in change:
        config["Rotary_X"] = 2  # upper case counts too
    if "rope_ratio" in change:
        config["model_type"] = "chatglm"
    with pytest.raises(error, match=match):
        rope_config_from_hf(config)


def test_switches_left_on_are_no_refusal():
    for key in ("use_rope", "use_mem_rope"):
        assert rope_config_from_hf({**LLAMA, key: True}) == _half()
        assert rope_config_from_hf({**LLAMA, key: None}) == _half()
    assert rope_config_from_hf({**LLAMA, "alibi": False, "position_encoding_2d": False}) == _half()
    assert rope_config_from_hf({**LLAMA, "partial_rotary_factor": 1.0}) == _half()  # the upper limit itself


@pytest.mark.parametrize(
    ("config", "layer_type", "match"),
    [
        (
            {**LLAMA, "rope_parameters": {"full_attention": {"rope_type": "default"}}},
            None,
            r"^rope_parameters is keyed by layer type \['full_attention'\]; pass layer_type=",
        ),
        (
            {**LLAMA, "rope_parameters": {"full_attention": {"rope_type": "default"}}},
            "sliding_attention",
            r"^layer_type 'sliding_attention' is not in rope_parameters \(has \['full_attention'\]\)$",
        ),
        (
            LLAMA,
            "full_attention",
            r"^layer_type='full_attention' given but rope_parameters is not keyed by layer type$",
        ),
        (
            {**LLAMA, "model_type": "gemma3_text"},
            None,
            r"^Gemma 3 has two rotary embeddings: pass layer_type=",
        ),
        (
            {**LLAMA, "model_type": "gemma3_text"},
            "chunked_attention",
            r"^layer_type must be one of \('full_attention', 'sliding_attention'\) for Gemma 3, "
            r"got 'chunked_attention'$",
        ),
    ],
    ids=["keyed-no-layer-type", "keyed-unknown-layer-type", "not-keyed", "gemma3-none", "gemma3-unknown"],
)
def test_a_layer_type_must_fit_the_config(config, layer_type, match):
    with pytest.raises(ValueError, match=match):
        rope_config_from_hf(config, layer_type=layer_type)


def test_a_layer_type_without_rope_parameters_uses_the_defaults():
    config = {**LLAMA, "rope_parameters": {"full_attention": None, "sliding_attention": {"rope_theta": 5e4}}}
    assert rope_config_from_hf(config, layer_type="full_attention") == _half()
    assert rope_config_from_hf(config, layer_type="sliding_attention") == _half(base=5e4)
    assert rope_configs_from_hf(config) == {"sliding_attention": _half(base=5e4)}


def test_chatglm2_interpolation_with_another_scaling_is_ambiguous():
    config = {
        "model_type": "chatglm",
        "kv_channels": 64,
        "rope_ratio": 4.0,
        "_name_or_path": "THUDM/ChatGLM2-6B-32k",
        "max_position_embeddings": 128,
        "rope_scaling": {"rope_type": "linear", "factor": 2.0},
    }
    with pytest.raises(
        ValueError,
        match=r"^ChatGLM2 rope_ratio \(position interpolation\) together with "
        r"rope_scaling is ambiguous$",
    ):
        rope_config_from_hf(config)


def test_a_wrong_layout_name_is_refused():
    with pytest.raises(ValueError, match=r"^layout must be one of \('half', 'interleaved'\), got 'Half'$"):
        rope_config_from_hf(LLAMA, layout="Half")
    with pytest.raises(
        ValueError,
        match=r"^layout='interleaved' contradicts the config: model_type='llama' means "
        r"layout='half' \(omit layout= to use it\)$",
    ):
        rope_config_from_hf(LLAMA, layout="interleaved")


def test_vision_part_reads_the_towers_model_type_then_the_wrappers():
    pixtral = {"model_type": "pixtral", "patch_size": 16, "head_dim": 64}
    assert hf_config.vision_part(pixtral) == ("pixtral", pixtral)  # a tower's own config
    assert hf_config.vision_part({**pixtral, "vocab_size": 10}) is None  # a text model with a patch size
    untyped = {"patch_size": 14, "hidden_size": 1280}
    assert hf_config.vision_part({**LLAMA, "model_type": "qwen2_vl", "vision_config": untyped}) == (
        "qwen2-vl",
        untyped,
    )
    assert hf_config.vision_part({**LLAMA, "model_type": "qwen2_vl", "vision_config": pixtral}) == (
        "pixtral",
        pixtral,
    )
    siglip = {"model_type": "siglip_vision_model", "patch_size": 14}
    assert hf_config.vision_part({**LLAMA, "vision_config": siglip}) == (None, siglip)
    assert hf_config.vision_part(LLAMA) is None
    assert hf_config.model_families({**LLAMA, "vision_config": siglip}) == ("rope",)
    assert hf_config.model_families({**LLAMA, "vision_config": pixtral}) == ("rope", "vision")
    assert hf_config.model_families({**LLAMA, "model_type": "qwen2_5_vl_text"}) == ("mrope",)
    assert hf_config.model_families(
        {
            **LLAMA,
            "rope_scaling": {"rope_type": "default", "mrope_section": [2, 3, 3]},
            "rope_parameters": {"rope_type": "default"},
        }
    ) == ("mrope",)


@pytest.mark.parametrize("n", [3, 5])
def test_longrope_lists_need_one_factor_per_pair(n):
    """Head 8: four pairs; LongRoPE itself only asks the two lists to be equally long."""
    config = {
        **LLAMA,
        "head_dim": 8,
        "rope_scaling": {
            "rope_type": "longrope",
            "short_factor": [1.0] * n,
            "long_factor": [2.0] * n,
            "original_max_position_embeddings": 1024,
        },
    }
    with pytest.raises(
        ValueError, match=rf"^rope_scaling key 'short_factor' must have rotary_dim // 2 = 4 entries, got {n}$"
    ):
        rope_config_from_hf(config)


def test_nesting_too_deep_for_the_json_parser_is_the_same_one_line_error(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match=rf"^config {path}: JSON nested deeper than 64 levels$"):
        hf_config.read_config_file(path)
