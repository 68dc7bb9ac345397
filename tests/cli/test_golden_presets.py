"""``rope-ref golden generate --preset NAME`` for every family's presets: M-RoPE, vision, MLA and per-layer
presets generate, verify and pass the oracle backend, written as their family's cases; a 1D preset keeps
its 1D cases (``FAMILY:NAME`` reaches the family preset of a shared name); bad names are refused naming
the argument and the value."""

from __future__ import annotations

import re

import pytest
from rope_ref.conformance.golden import load_golden
from rope_ref.conformance.oracle_backend import OracleBackend
from rope_ref.conformance.runner import Runner

from rope_ref import layers, mla, mrope, vision_rope
from rope_ref.cli import main

FAMILY_PRESETS = [(n, "mrope") for n in mrope.preset_names()]
FAMILY_PRESETS += [(n, "vision") for n in vision_rope.preset_names()]
FAMILY_PRESETS += [(n, "mla") for n in mla.preset_names() if n != "deepseek-v2-lite"]
FAMILY_PRESETS += [("mla:deepseek-v2-lite", "mla")]
FAMILY_PRESETS += [(n, "layers") for n in layers.preset_names()]


def _generate(tmp_path, preset: str) -> list:
    out = tmp_path / "golden"
    assert main(["golden", "generate", "--preset", preset, "--out", str(out), "--dtype", "fp64"]) == 0
    assert main(["golden", "verify", str(out)]) == 0
    cases = load_golden(out)
    assert cases and Runner(OracleBackend()).run(cases).ok
    return cases


@pytest.mark.parametrize(("preset", "family"), FAMILY_PRESETS)
def test_family_preset_generates_its_familys_cases(tmp_path, preset, family):
    cases = _generate(tmp_path, preset)
    ops = {c.op for c in cases}
    bare = preset.partition(":")[2] or preset
    if family == "layers":  # one 1D set per distinct layer RoPE, named {preset}-layer{first layer}
        assert "apply" in ops and "multiaxis_apply" not in ops
        distinct = {cfg for cfg in layers.preset(bare).ropes if cfg is not None}
        sets = {re.search(r"-layer(\d+)", c.id).group(1) for c in cases}
        assert len(sets) == len(distinct) >= 1
        return
    spec = {"mrope": lambda: mrope.preset(bare).rope, "vision": lambda: vision_rope.preset(bare)}
    spec["mla"] = lambda: mla.preset(bare).spec
    (rotation,) = [c for c in cases if c.op == "multiaxis_apply"]
    written = rotation.params["spec"]
    want = spec[family]()
    assert written["streams"] == list(want.streams) and written["freq_index"] == list(want.freq_index)
    assert written["head_dim"] == want.head_dim and written["layout"] == want.layout
    assert ("mla_softmax_scale" in ops) == (family == "mla")


def test_a_1d_preset_of_a_shared_name_stays_1d(tmp_path):
    cases = _generate(tmp_path, "deepseek-v2-lite")
    assert "apply" in {c.op for c in cases} and "multiaxis_apply" not in {c.op for c in cases}


@pytest.mark.parametrize(
    ("preset", "message"),
    [
        ("qwen2-vl-9b", "--preset: unknown preset 'qwen2-vl-9b'; expected one of .*qwen2-vl-7b"),
        ("video:qwen2-vl-7b", "--preset 'video:qwen2-vl-7b': unknown family 'video'"),
        ("vision:qwen2-vl-7b", "--preset: unknown preset 'vision:qwen2-vl-7b'"),
    ],
)
def test_unknown_presets_are_refused_naming_them(tmp_path, capsys, preset, message):
    assert main(["golden", "generate", "--preset", preset, "--out", str(tmp_path / "g")]) == 2
    err = capsys.readouterr().err
    assert re.search(message, err), err
    assert not (tmp_path / "g").exists()


def test_layout_is_refused_with_a_family_preset(tmp_path, capsys):
    argv = ["golden", "generate", "--preset", "qwen3-vl-8b", "--layout", "half", "--out", str(tmp_path / "g")]
    assert main(argv) == 2
    assert "--layout cannot be combined with --preset" in capsys.readouterr().err


def test_help_lists_the_family_presets(capsys):
    with pytest.raises(SystemExit):
        main(["golden", "generate", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for name in ("qwen3-vl-8b", "pixtral-12b-vision", "kimi-k2", "gemma-3-4b", "mla:deepseek-v2-lite"):
        assert name in text, name
