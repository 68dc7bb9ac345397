"""``rope-ref golden generate --hf-config`` for every oracle family (issue 29, point 3): M-RoPE, MLA,
per-layer and vision configs (written here by hand, RoPE-related keys of the real config.json) generate
without ``--layout``, verify, and the oracle backend passes them; a broken backend fails them."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hf_configs import QWEN2_VL_7B, QWEN3_VL_8B
from rope_ref.conformance.golden import load_golden
from rope_ref.conformance.oracle_backend import OracleBackend
from rope_ref.conformance.runner import Runner

from rope_ref import mla, mrope
from rope_ref.cli import main
from rope_ref.hf_config import model_family

_YARN = {
    "beta_fast": 32,
    "beta_slow": 1,
    "factor": 40,
    "original_max_position_embeddings": 4096,
    "type": "yarn",
}
_MLA = {"hidden_size": 2048, "num_attention_heads": 16, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64}
_MLA.update({"v_head_dim": 128, "kv_lora_rank": 512, "max_position_embeddings": 163840, "rope_theta": 10000})

CONFIGS = {
    "qwen2-vl-7b": QWEN2_VL_7B,
    "qwen3-vl-8b": QWEN3_VL_8B,
    "glm-4.1v-9b": {
        "model_type": "glm4v",
        "text_config": {
            "model_type": "glm4v_text",
            "hidden_size": 4096,
            "num_attention_heads": 32,
            "partial_rotary_factor": 0.5,
            "rope_theta": 10000.0,
            "rope_scaling": {"rope_type": "default", "mrope_section": [8, 12, 12]},
        },
    },
    "deepseek-v2-lite": dict(
        _MLA, model_type="deepseek_v2", rope_scaling=dict(_YARN, mscale=0.707, mscale_all_dim=0.707)
    ),
    "deepseek-v3": dict(
        _MLA, model_type="deepseek_v3", rope_scaling=dict(_YARN, mscale=1.0, mscale_all_dim=1.0)
    ),
    "gemma-3-4b": {
        "model_type": "gemma3_text",
        "head_dim": 256,
        "hidden_size": 2560,
        "num_attention_heads": 8,
        "num_hidden_layers": 12,
        "sliding_window_pattern": 6,
        "rope_theta": 1e6,
        "rope_local_base_freq": 1e4,
        "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
    },
    "pixtral": {
        "model_type": "pixtral",
        "hidden_size": 1024,
        "num_attention_heads": 16,
        "rope_theta": 1e4,
        "image_size": 1024,
        "patch_size": 16,
    },
}
FAMILY = {"qwen2-vl-7b": "mrope", "qwen3-vl-8b": "mrope", "glm-4.1v-9b": "mrope", "deepseek-v2-lite": "mla"}
FAMILY.update({"deepseek-v3": "mla", "gemma-3-4b": "layers", "pixtral": "vision"})


class _SwappedStreams(OracleBackend):
    """Reads the position streams in reverse order, one position late (1D cases too)."""

    def multiaxis_apply(self, x, positions, spec, **kw):
        return super().multiaxis_apply(x, np.asarray(positions)[::-1] + 1, spec, **kw)

    def apply(self, x, positions, cfg, seq_len=None):
        return super().apply(x, np.asarray(positions) + 1, cfg, seq_len)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_every_family_generates_verifies_and_passes(name, tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(CONFIGS[name]))
    assert model_family(CONFIGS[name]) == FAMILY[name]
    out = tmp_path / "golden"
    assert main(["golden", "generate", "--hf-config", str(path), "--out", str(out), "--dtype", "fp64"]) == 0
    assert main(["golden", "verify", str(out)]) == 0
    cases = load_golden(out)
    assert cases and all(c.io_dtype in (None, "float64") for c in cases)
    assert Runner(OracleBackend()).run(cases).ok
    assert main(["conformance", "run", "--backend", "numpy", "--golden", str(out), "-q"]) == 0
    assert capsys.readouterr().out.rstrip().splitlines()[-1].startswith(f"PASSED: {len(cases)} passed")
    if FAMILY[name] == "mrope":  # the spec written is the preset's
        spec = next(c for c in cases if c.op == "multiaxis_apply").params["spec"]
        assert spec["streams"] == list(mrope.preset(name).rope.streams)
    if name in mla.preset_names():
        assert any(c.op == "mla_softmax_scale" for c in cases)
    rotations = [c for c in cases if c.op in ("apply", "multiaxis_apply")]
    assert not Runner(_SwappedStreams()).run(rotations).ok


def test_options_of_1d_configs_are_refused_for_other_families(tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(CONFIGS["qwen2-vl-7b"]))
    argv = [
        "golden",
        "generate",
        "--hf-config",
        str(path),
        "--out",
        str(tmp_path / "g"),
        "--shape",
        "1,4,2,128",
    ]
    assert main(argv) == 2
    assert "apply only to 1D RoPE configs" in capsys.readouterr().err
