"""The transformers zoo (``rope-ref zoo``, issue 31): one architecture per distinct RoPE mechanism must
agree with the oracle; discovery finds the architectures; the committed page names the installed version.

The full scan (every architecture, minutes) is the documented command ``rope-ref zoo --out docs/results``,
not a test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from rope_ref.peers import zoo, zoo_probe  # noqa: E402

PAGE = Path(__file__).resolve().parents[2] / "docs" / "results" / "transformers-zoo.json"

_YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048}
_LLAMA3 = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 1024,
}

# (architecture, rotary class, rope_parameters variant, what it exercises)
MECHANISMS = [
    ("llama", "LlamaRotaryEmbedding", None, "Llama default, rotate_half"),
    ("gpt_neox", "GPTNeoXRotaryEmbedding", None, "partial rotary (rotary_pct 0.25)"),
    ("llama", "LlamaRotaryEmbedding", _YARN, "YaRN via rope_parameters"),
    ("llama", "LlamaRotaryEmbedding", _LLAMA3, "Llama 3 scaling via rope_parameters"),
    ("cohere", "CohereRotaryEmbedding", None, "interleaved pairs, rotation in float32"),
    ("glm", "GlmRotaryEmbedding", None, "interleaved partial rotary"),
    ("qwen2_vl", "Qwen2VLRotaryEmbedding", {"mrope_section": [16, 24, 24]}, "M-RoPE, three streams"),
    ("gemma3", "Gemma3RotaryEmbedding", None, "per-layer-type bases"),
    ("deepseek_v3", "DeepseekV3RotaryEmbedding", None, "MLA rope part, interleave reordering"),
    ("llama4", "Llama4TextRotaryEmbedding", None, "complex freqs_cis"),
    ("qwen3_vl", "Qwen3VLTextRotaryEmbedding", None, "M-RoPE, fallback sections, text sub-config"),
    ("laguna", "LagunaRotaryEmbedding", None, "layer-type dict wider than the layer types in use"),
    ("mlcd", "MLCDRotaryEmbedding", None, "axial vision 2D, row then column"),
    ("pixtral", "PixtralVisionRotaryEmbedding", None, "axial vision 2D, even/odd frequencies"),
    ("kimi_k25", "Kimi_K25VisionRotaryEmbedding", None, "axial vision 2D, alternating axes"),
    ("sam2_video", "Sam2VideoVisionRotaryEmbedding", None, "axial vision 2D, interleaved pairs"),
    ("gemma4", "Gemma4TextRotaryEmbedding", None, "proportional rope, per-layer head sizes"),
    ("lfm3", "Lfm3RotaryEmbedding", None, "proportional rope, layer types without RoPE"),
    ("ministral3", "Ministral3RotaryEmbedding", None, "YaRN with llama_4_scaling_beta"),
    ("mistral4", "Mistral4RotaryEmbedding", None, "MLA rope part as a fraction of head_dim"),
    ("deepseek_v4", "DeepseekV4RotaryEmbedding", None, "main/compress bases, fraction of head_dim"),
    ("dots3_note", "Dots3NoteTextRotaryEmbedding", None, "MLA rope part per layer type"),
    ("dbrx", "DbrxRotaryEmbedding", None, "attribute aliases d_model / n_heads"),
    ("zamba2", "Zamba2RotaryEmbedding", None, "use_mem_rope switch, attention_head_dim"),
    ("neomme", "NeoMMERotaryEmbedding", None, "two-axis ids expanded by the rotary itself"),
]


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


@pytest.mark.parametrize("arch,cls,variant,what", MECHANISMS, ids=[f"{m[0]}-{m[3]}" for m in MECHANISMS])
def test_mechanism_agrees(arch, cls, variant, what):
    if not hasattr(__import__(f"transformers.models.{arch}", fromlist=["_"]), "__path__"):
        pytest.skip(f"transformers {transformers.__version__} has no {arch}")
    v = zoo_probe.probe(arch, cls, rope_parameters=variant)
    assert v["verdict"] == "agrees", f"{arch} ({what}): {dict(v)}"
    assert v["ratio"] is not None and v["ratio"] <= 1.0


def test_transpose_rotation_is_a_divergence():
    """NanoChat's rotate_half has flipped signs: it rotates by -m*theta; the run says so itself."""
    v = zoo_probe.probe("nanochat", "NanoChatRotaryEmbedding")
    assert v["verdict"] == "divergence", dict(v)
    assert "transpose rotation" in v["detail"]


def test_default_config_that_cannot_run_its_rotary_is_a_finding():
    """GLM-4V's default text config: mrope_section fallback [8, 12, 12] vs 64 frequencies (reproducer)."""
    v = zoo_probe.probe("glm4v", "Glm4vTextRotaryEmbedding")
    assert v["verdict"] == "finding", dict(v)
    assert "hf_glm4v_default_mrope_section.py" in v["detail"]


# (architecture, rotary class, what the default config gets wrong, the reproducer that confirms it)
DEFAULT_CONFIG_FAILURES = [
    (
        "hunyuan_vl",
        "HunYuanVLRotaryEmbedding",
        "cannot run its own rotary",
        "hf_hunyuan_vl_default_mrope_section",
    ),
    (
        "cohere_compass",
        "CohereCompassRotaryEmbedding",
        "cannot build its own rotary",
        "hf_cohere_compass_default_rope_parameters",
    ),
    ("glm4_moe", "Glm4MoeRotaryEmbedding", "odd rotary width", "hf_glm4_moe_odd_rotary_width"),
    (
        "qwen3_omni_moe",
        "Qwen3OmniMoeThinkerTextRotaryEmbedding",
        "odd rotary width",
        "hf_qwen3_omni_moe_odd_head_size",
    ),
]


@pytest.mark.parametrize(
    "arch,cls,what,script", DEFAULT_CONFIG_FAILURES, ids=[m[0] for m in DEFAULT_CONFIG_FAILURES]
)
def test_default_config_failure_is_a_candidate_finding(arch, cls, what, script):
    v = zoo_probe.probe(arch, cls)
    assert v["verdict"] == "candidate finding" and what in v["detail"], dict(v)


@pytest.mark.slow
@pytest.mark.parametrize(
    "arch,cls,what,script", DEFAULT_CONFIG_FAILURES, ids=[m[0] for m in DEFAULT_CONFIG_FAILURES]
)
def test_default_config_failure_confirmed_by_its_reproducer(arch, cls, what, script):
    v = zoo._confirmed(arch, {"verdict": "candidate finding", "detail": what})
    assert v["verdict"] == "finding" and f"{script}.py" in v["detail"], v


def test_variant_the_rotary_cannot_run_is_an_error_not_a_finding():
    """PhiMoE's rotary reads LongRoPE keys whatever the type: a linear variant is refused, not a bug."""
    v = zoo_probe.probe(
        "phimoe", "PhimoeRotaryEmbedding", rope_parameters={"rope_type": "linear", "factor": 2.0}
    )
    assert v["verdict"] == "error" and "variant config cannot run" in v["detail"], dict(v)


def test_reproducer_of_a_longer_architecture_name_does_not_confirm():
    """hf_glm4_moe_odd_rotary_width.py (exits 1) is glm4_moe's, not glm4's."""
    v = zoo._confirmed("glm4", {"verdict": "candidate finding", "detail": "d"})
    assert v["verdict"] == "candidate finding", v


def test_layer_config_reads_the_per_layer_head_size():
    """Gemma 4: config.head_dim is ambiguous; the layer type's own config gives 512 / 256."""
    from transformers.models.gemma4.configuration_gemma4 import Gemma4TextConfig

    config = Gemma4TextConfig()
    assert zoo_probe._layer_config(config, "full_attention").head_dim == 512
    assert zoo_probe._layer_config(config, "sliding_attention").head_dim == 256
    llama = transformers.LlamaConfig()
    assert zoo_probe._layer_config(llama, "full_attention") is llama
    assert zoo_probe._layer_config(config, None) is config


def test_gap_without_an_oracle_carries_its_justification():
    row = {"architecture": "cosmos3_edge", "verdict": "not expressible", "detail": "oracle from config: x"}
    assert "Qwen3-VL" in zoo.justified(row)["detail"]
    agrees = {"architecture": "cosmos3_edge", "verdict": "agrees", "detail": "d"}
    assert zoo.justified(agrees) == agrees
    other = {"architecture": "llama", "verdict": "not expressible", "detail": "d"}
    assert zoo.justified(other) == other


def test_rotary_without_position_ids_is_classified_by_its_signature():
    """EfficientLoFTR's rotary takes the feature map only: the run says so from forward's signature."""
    v = zoo_probe.probe("efficientloftr", "EfficientLoFTRRotaryEmbedding")
    assert v["verdict"] == "not expressible" and "takes no position ids" in v["detail"], dict(v)


def test_probe_never_raises_on_unknown_class():
    v = zoo_probe.probe("llama", "NoSuchRotaryEmbedding")
    assert v["verdict"] == "error" and "NoSuchRotaryEmbedding" in v["detail"]


def test_architecture_verdict_takes_the_worst_text_class():
    rows = [
        {"class": "ARotaryEmbedding", "verdict": "agrees", "ratio": 0.2, "mechanism": "rope half, default"},
        {"class": "AVisionRotaryEmbedding", "verdict": "error", "ratio": None, "mechanism": "vision 2D"},
    ]
    assert zoo.architecture_verdict(rows)["verdict"] == "agrees"
    rows[0]["verdict"] = "candidate finding"
    assert zoo.architecture_verdict(rows)["verdict"] == "candidate finding"


def test_discovery_finds_the_architectures():
    if transformers.__version__ != "5.23.0":
        pytest.skip(f"the count 193 is for transformers 5.23.0; installed {transformers.__version__}")
    found = zoo_probe.discover()
    assert len(found) >= 150
    names = dict(found)
    assert "LlamaRotaryEmbedding" in names["llama"]


def test_committed_page_matches_installed_transformers():
    if not PAGE.is_file():
        pytest.skip(f"{PAGE} is not there (generate it with 'rope-ref zoo --out docs/results')")
    page = json.loads(PAGE.read_text())
    assert page["schema"] == zoo.PAGE_SCHEMA
    assert page["transformers"] == transformers.__version__, (
        f"docs/results/transformers-zoo.json is for transformers {page['transformers']}, installed "
        f"{transformers.__version__}: regenerate with 'rope-ref zoo --out docs/results'"
    )


@pytest.mark.slow
def test_candidate_finding_with_a_live_reproducer_is_a_finding():
    """MiniMax-M3-VL ignores its config's rotary_dim; the reproducer exits 1 while that holds."""
    if not hasattr(__import__("transformers.models.minimax_m3_vl", fromlist=["_"]), "__path__"):
        pytest.skip(f"transformers {transformers.__version__} has no minimax_m3_vl")
    v = zoo._confirmed("minimax_m3_vl", {"verdict": "candidate finding", "detail": "rotary width"})
    assert v["verdict"] == "finding" and "hf_minimax_m3_vl_rotary_dim_ignored.py" in v["detail"]
    assert zoo._confirmed("llama", {"verdict": "candidate finding", "detail": ""})["verdict"] == (
        "candidate finding"
    )
