"""`rope-ref golden generate | verify`: determinism, custom model sets, npz, and clear errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from rope_ref.conformance import golden

from rope_ref.cli import main

LLAMA31 = json.loads(Path(__file__).with_name("llama-3.1-8b.json").read_text(encoding="utf-8"))


def _files(root):
    return {p.name: p.read_bytes() for p in sorted(root.iterdir())}


@pytest.mark.slow
def test_generate_is_deterministic_and_matches_shipped(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    assert main(["golden", "generate", "--out", str(a)]) == 0
    assert main(["golden", "generate", "--out", str(b)]) == 0
    fa = _files(a)
    assert fa == _files(b)
    # The shipped set holds the same files (values are checked within tolerance by `verify`, since
    # libm and NumPy versions may change the last bits).
    assert set(fa) == set(_files(golden.shipped_dir()))
    assert "wrote" in capsys.readouterr().out


@pytest.mark.slow
def test_verify_shipped_via_entry_point():
    code = "import sys; from rope_ref.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.run(
        [sys.executable, "-c", code, "golden", "verify"], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert "OK" in proc.stdout


def test_verify_tampered_dir_names_file(tmp_path, capsys):
    root = tmp_path / "g"
    assert (
        main(["golden", "generate", "--hf-config", _write(tmp_path), "--layout", "half", "--out", str(root)])
        == 0
    )
    m = json.loads((root / "manifest.json").read_text())
    victim = root / m["cases"][-1]["file"]
    victim.write_bytes(victim.read_bytes()[:-4])
    capsys.readouterr()
    assert main(["golden", "verify", str(root)]) == 3  # a corrupt set (issue 28: its own exit status)
    err = capsys.readouterr().err
    assert victim.name in err and "checksum mismatch" in err


def _write(tmp_path, config=None):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config or LLAMA31))
    return str(path)


def _generate_from_config(tmp_path, root, layout: str, *options: str) -> int:
    """``rope-ref golden generate`` from the Llama 3.1 config.json, with ``layout`` and ``options``, into
    ``root``: the exit status."""
    argv = ["golden", "generate", "--hf-config", _write(tmp_path), "--layout", layout, *options]
    return main([*argv, "--out", str(root)])


def test_hf_config_custom_set(tmp_path):
    root = tmp_path / "llama"
    options = ["--shape", "2,4,3,128", "--positions", "0,1,4096,100000", "--dtype", "bf16"]
    assert _generate_from_config(tmp_path, root, "half", *options) == 0
    cases = {c.id: c for c in golden.load_golden(root)}
    assert set(cases) == {
        "inv_freq-hf_config",
        "attention_factor-hf_config",
        "cos_sin-hf_config",
        "apply-hf_config-bf16",
        "apply_vjp-hf_config-bf16",
    }
    app = cases["apply-hf_config-bf16"]
    assert app.inputs["x"].shape == (2, 4, 3, 128)
    assert app.inputs["positions"].ravel().tolist() == [0, 1, 4096, 100000]
    assert not np.any(app.inputs["x"].view(np.uint32) & 0xFFFF)  # bf16-exact
    assert app.config["scaling"]["rope_type"] == "llama3" and app.config["base"] == 500000.0
    m = json.loads((root / "manifest.json").read_text())
    assert m["provenance"]["source"] == "custom"
    assert "--hf-config config.json" in m["provenance"]["generator"]
    assert main(["golden", "verify", str(root)]) == 0


def _npz_specs(path):
    """``{key: (dtype name, shape)}`` of every member of an npz, read without pickle."""
    with np.load(path, allow_pickle=False) as z:
        return {k: (z[k].dtype.name, z[k].shape) for k in z.files}


def _oracle_counts(root, tmp_path) -> dict:
    """Run the numpy oracle over the golden set at ``root``; require exit 0; return the report's counts."""
    report = tmp_path / "r.json"
    argv = ["conformance", "run", "--backend", "numpy", "--golden", str(root), "-q"]
    assert main([*argv, "--json-report", str(report)]) == 0
    return json.loads(report.read_text())["counts"]


def test_npz_format_and_ops(tmp_path):
    root = tmp_path / "n"
    options = ["--ops", "apply,cos_sin", "--format", "npz"]
    assert _generate_from_config(tmp_path, root, "interleaved", *options) == 0
    files = sorted(p.name for p in root.iterdir())
    assert files == ["apply-hf_config-fp32.npz", "cos_sin-hf_config.npz", "manifest.json"]
    assert _npz_specs(root / "apply-hf_config-fp32.npz") == {
        "inputs.x": ("float32", (1, 8, 2, 128)),
        "inputs.positions": ("int64", (8, 1)),
        "expected.out": ("float64", (1, 8, 2, 128)),
        "aux.inv_freq": ("float64", (64,)),
        "aux.attention_factor": ("float64", ()),
    }
    assert _npz_specs(root / "cos_sin-hf_config.npz") == {
        "inputs.positions": ("int64", (8,)),
        "expected.cos": ("float64", (8, 64)),
        "expected.sin": ("float64", (8, 64)),
        "aux.inv_freq": ("float64", (64,)),
        "aux.attention_factor": ("float64", ()),
    }
    assert main(["golden", "verify", str(root)]) == 0


def _manifest_specs(root):
    """``{file: {key: (dtype, shape)}}`` as the manifest lists them."""
    m = json.loads((root / "manifest.json").read_text())
    return {
        c["file"]: {
            f"{role}.{name}": (spec["dtype"], tuple(spec["shape"]))
            for role in ("inputs", "expected", "aux")
            for name, spec in c.get(role, {}).items()
        }
        for c in m["cases"]
    }


@pytest.mark.parametrize(("preset", "dtype"), [("llama-3.1-8b", None), ("qwen2.5-7b-yarn", "fp64")])
def test_npz_default_ops_preset_round_trip(tmp_path, capsys, preset, dtype):
    """The default --ops include the scalar attention_factor (stored as shape (), never (1,))."""
    root = tmp_path / "n"
    argv = ["golden", "generate", "--preset", preset, "--format", "npz", "--out", str(root)]
    assert main(argv + (["--dtype", dtype] if dtype else [])) == 0
    specs = _manifest_specs(root)
    assert sorted(f.split("-")[0] for f in specs) == sorted(
        ["inv_freq", "attention_factor", "cos_sin", "apply", "apply_vjp"]
    )
    for file, listed in specs.items():
        assert _npz_specs(root / file) == listed, file
    factor = next(f for f in specs if f.startswith("attention_factor-"))
    assert _npz_specs(root / factor)["expected.value"] == ("float64", ())
    assert main(["golden", "verify", str(root)]) == 0
    counts = _oracle_counts(root, tmp_path)
    # fp64 activations run on the float64 oracle; fp32 ones are skipped, never failed.
    assert counts["failed"] == 0 and counts["passed"] == (5 if dtype == "fp64" else 3)
    capsys.readouterr()


@pytest.mark.slow
def test_npz_full_catalogue_round_trip(tmp_path, capsys):
    """The whole catalogue as npz: same tensors (dtype and shape exactly) as safetensors, verifies, and
    the oracle passes it."""
    root = tmp_path / "n"
    assert main(["golden", "generate", "--format", "npz", "--out", str(root)]) == 0
    specs = _manifest_specs(root)
    shipped = _manifest_specs(golden.shipped_dir())
    assert {f.removesuffix(".npz"): v for f, v in specs.items()} == {
        f.removesuffix(".safetensors"): v for f, v in shipped.items()
    }
    for file, listed in specs.items():
        assert _npz_specs(root / file) == listed, file
    assert main(["golden", "verify", str(root)]) == 0
    counts = _oracle_counts(root, tmp_path)
    assert counts["failed"] == 0 and counts["passed"] == sum(
        c.io_dtype in (None, "float64") for c in golden.load_golden(root)
    )
    capsys.readouterr()


@pytest.mark.parametrize("name", ["llama-3.1-8b", "qwen2.5-7b-yarn", "gpt-j-6b", "chatglm-6b"])
def test_preset_generates_and_verifies(tmp_path, name):
    root = tmp_path / "p"
    assert main(["golden", "generate", "--preset", name, "--out", str(root)]) == 0
    assert main(["golden", "verify", str(root)]) == 0
    assert (root / "manifest.json").is_file()


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--hf-config", "{cfg}"], "needs --layout"),
        (["--hf-config", "{cfg}", "--layout", "half", "--shape", "1,2,3"], "--shape must be four"),
        (["--hf-config", "{cfg}", "--layout", "half", "--shape", "1,2,3,64"], "head_dim"),
        (["--hf-config", "{cfg}", "--layout", "half", "--shape", "1,3,1,128", "--positions", "0,1"], "S=3"),
        (["--hf-config", "{cfg}", "--layout", "half", "--ops", "apply,rotate"], "ops must be"),
        (["--hf-config", "{cfg}", "--layout", "half", "--dtype", "fp8"], "--dtype"),
        (["--hf-config", "/nonexistent/config.json", "--layout", "half"], "cannot read"),
        (["--layout", "half"], "only apply with --preset or --hf-config"),
    ],
)
def test_errors_are_clear(tmp_path, capsys, extra, message):
    cfg = _write(tmp_path)
    argv = ["golden", "generate", "--out", str(tmp_path / "o")] + [e.replace("{cfg}", cfg) for e in extra]
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_custom_sets_are_named_after_the_model(tmp_path):
    import json as _json

    from rope_ref.cli import main as cli_main

    config = {
        "model_type": "llama",
        "_name_or_path": "meta-llama/Llama-3.1-8B",
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "rope_theta": 500000.0,
        "max_position_embeddings": 131072,
    }
    path = tmp_path / "config.json"
    path.write_text(_json.dumps(config))
    for extra, prefix in (([], "Llama-3.1-8B"), (["--name", "my model"], "my-model")):
        out = tmp_path / f"set{len(extra)}"
        assert cli_main(["golden", "generate", "--hf-config", str(path), "--out", str(out), *extra]) == 0
        ids = [c["id"] for c in _json.loads((out / "manifest.json").read_text())["cases"]]
        assert ids and all(prefix in i for i in ids), ids[:3]
    assert cli_main(["golden", "generate", "--out", str(tmp_path / "x"), "--name", "a"]) == 2
