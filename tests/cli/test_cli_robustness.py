"""Issue 17 reproducers: every bad input gives one clean line (CLI: exit 2) or a ValueError/TypeError.

Each test reproduces one report from the issue; each failed before the fix (a traceback, a raw
``RuntimeError``, a misleading message, or a hidden verdict).
"""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from _signals import interruptible
from rope_ref.conformance import golden
from rope_ref.conformance.safetensors_io import SafetensorsError, read_safetensors

from rope_ref.cli import main

CLI = "import sys; from rope_ref.cli import main; sys.exit(main(sys.argv[1:]))"
SMALL_CFG = {
    "hidden_size": 512,
    "num_attention_heads": 4,
    "max_position_embeddings": 2048,
    "rope_theta": 10000.0,
}


def _error_line(capsys, command: str) -> str:
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert lines[0].startswith(f"rope-ref {command}: "), lines[0]
    return lines[0]


def _config(tmp_path, text: str) -> str:
    path = tmp_path / "config.json"
    path.write_text(text)
    return str(path)


@pytest.fixture(scope="module")
def small_set(tmp_path_factory):
    root = tmp_path_factory.mktemp("small") / "g"
    assert main(["golden", "generate", "--preset", "llama-3.1-8b", "--out", str(root)]) == 0
    return root


def _copy_set(src, dst):
    dst.mkdir()
    for p in src.iterdir():
        (dst / p.name).write_bytes(p.read_bytes())
    return dst


# -- conformance run ------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["inf", "nan", "0", "-1", "1e300"])
def test_timeout_out_of_range(capsys, value):
    argv = ["conformance", "run", "--backend", "numpy", "-q", f"--timeout={value}"]
    assert main(argv) == 2
    line = _error_line(capsys, "conformance")
    assert "--timeout" in line
    assert "backend:" not in capsys.readouterr().out


@pytest.mark.parametrize("flag", ["--json-report", "--junit-xml"])
def test_report_path_checked_before_the_run(tmp_path, capsys, flag):
    for bad in (tmp_path / "missing-dir" / "r.out", tmp_path):
        assert main(["conformance", "run", "--backend", "numpy", "-q", flag, str(bad)]) == 2
        out = capsys.readouterr()
        assert flag in out.err and "Traceback" not in out.err
        assert len(out.err.strip().splitlines()) == 1
        assert "backend:" not in out.out  # refused before anything ran


def test_unknown_array_api_module_is_named(capsys):
    assert main(["conformance", "run", "--backend", "array-api:numpyy", "-q"]) == 2
    line = _error_line(capsys, "conformance")
    assert "no module named 'numpyy'" in line


def test_precision_accepts_long_names(capsys, tmp_path, small_set):
    # float64 is the long spelling of fp64, which the numpy oracle takes.
    argv = ["conformance", "run", "--backend", "numpy", "--golden", str(small_set), "-q"]
    assert main([*argv, "--precision", "float64"]) == 0
    assert main([*argv, "--precision", "fp64"]) == 0


def test_sigint_during_conformance_run_exits_130(tmp_path, small_set):
    (tmp_path / "slow_backend.py").write_text(
        textwrap.dedent(
            """
            import time
            from rope_ref.conformance.oracle_backend import OracleBackend

            class Slow(OracleBackend):
                def inv_freq(self, cfg, seq_len=None):
                    time.sleep(60)
                    return super().inv_freq(cfg, seq_len)
            """
        )
    )
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            CLI,
            "conformance",
            "run",
            "--backend",
            "slow_backend:Slow",
            "--golden",
            str(small_set),
            "-q",
        ],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        preexec_fn=interruptible,
    )
    try:
        for _ in range(2):  # "backend: ..." and "golden: ...": the run has started
            assert proc.stdout.readline()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines == ["rope-ref conformance: interrupted"], err


# -- broken pipes ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["table", "--head-dim", "128", "--positions", "0:3000"],
        ["conformance", "run", "--backend", "numpy", "--list"],
    ],
)
def test_broken_pipe_exits_quietly(argv):
    proc = subprocess.Popen(
        [sys.executable, "-c", CLI, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    # The reader goes away before the first write (like `| head -0`; the child is still importing), so
    # the write fails whatever the pipe buffer's size.
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert proc.wait(timeout=60) == 141
    assert err == ""


# -- hf-config and manifests with absurd values ---------------------------------------------------------


def test_400_digit_rope_theta(tmp_path, capsys):
    cfg = json.dumps(SMALL_CFG).replace("10000.0", "1" + "0" * 400)
    argv = ["golden", "generate", "--hf-config", _config(tmp_path, cfg), "--layout", "half"]
    assert main([*argv, "--out", str(tmp_path / "o")]) == 2
    line = _error_line(capsys, "golden")
    assert "rope_theta" in line and "401-digit" in line
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("number", ["1e400", "-1e999"])
def test_float_beyond_float64_in_hf_config(tmp_path, capsys, number):
    cfg = json.dumps(SMALL_CFG).replace("10000.0", number)
    argv = ["golden", "generate", "--hf-config", _config(tmp_path, cfg), "--layout", "half"]
    assert main([*argv, "--out", str(tmp_path / "o")]) == 2
    assert "float64 range" in _error_line(capsys, "golden")


def test_list_valued_rope_type(tmp_path, capsys):
    cfg = dict(SMALL_CFG, rope_scaling={"rope_type": ["linear"], "factor": 2.0})
    argv = ["golden", "generate", "--hf-config", _config(tmp_path, json.dumps(cfg)), "--layout", "half"]
    assert main([*argv, "--out", str(tmp_path / "o")]) == 2
    line = _error_line(capsys, "golden")
    assert "rope_type" in line and "unhashable" not in line


def test_deeply_nested_hf_config(tmp_path, capsys):
    argv = ["golden", "generate", "--hf-config", _config(tmp_path, "[" * 100000), "--layout", "half"]
    assert main([*argv, "--out", str(tmp_path / "o")]) == 2
    assert "nested deeper" in _error_line(capsys, "golden")


@pytest.mark.parametrize("rope_type", ["linear", "dynamic", "yarn", "llama3"])
def test_manifest_scaling_factor_1e300(tmp_path, capsys, small_set, rope_type):
    root = _copy_set(small_set, tmp_path / "g")
    m = json.loads((root / "manifest.json").read_text())
    for case in m["cases"]:
        scaling = {"rope_type": rope_type, "factor": 1e300}
        if rope_type in ("dynamic", "yarn", "llama3"):
            scaling["original_max_position_embeddings"] = 8192
        if rope_type == "llama3":
            scaling.update(low_freq_factor=1.0, high_freq_factor=4.0)
        case["config"]["scaling"] = scaling
    (root / "manifest.json").write_text(json.dumps(m))
    capsys.readouterr()
    assert main(["golden", "verify", str(root)]) == 1  # the stored data no longer matches: reported
    out = capsys.readouterr()
    assert "Traceback" not in out.err and "FAIL" in out.out
    code = main(["conformance", "run", "--backend", "numpy", "--golden", str(root), "-q"])
    assert code in (1, 2)
    assert "Traceback" not in capsys.readouterr().err


def test_deeply_nested_manifest(tmp_path, capsys, small_set):
    root = _copy_set(small_set, tmp_path / "g")
    (root / "manifest.json").write_text("[" * 100000 + "]" * 100000)
    with pytest.raises(golden.GoldenError, match="nested deeper"):
        golden.load_golden(root)
    capsys.readouterr()
    assert main(["golden", "verify", str(root)]) == 3  # a corrupt set: exit status 3 since issue 28
    assert "nested deeper" in capsys.readouterr().err
    assert main(["conformance", "run", "--backend", "numpy", "--golden", str(root), "-q"]) == 3
    assert "nested deeper" in _error_line(capsys, "conformance")


@pytest.mark.parametrize("depth", [100000, 200])
def test_deeply_nested_safetensors_header(tmp_path, depth):
    header = ("[" * depth + "]" * depth).encode()
    header += b" " * (-len(header) % 8)
    path = tmp_path / "deep.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header)
    with pytest.raises(SafetensorsError, match="nested deeper"):
        read_safetensors(path)


def test_fifo_case_file_is_not_called_missing(tmp_path, capsys, small_set):
    root = _copy_set(small_set, tmp_path / "g")
    name = json.loads((root / "manifest.json").read_text())["cases"][0]["file"]
    (root / name).unlink()
    os.mkfifo(root / name)
    with pytest.raises(golden.GoldenError, match="FIFO") as info:
        golden.load_golden(root)  # and it does not block on the pipe
    assert "missing" not in str(info.value)
    assert main(["golden", "verify", str(root)]) == 3  # a corrupt set: exit status 3 since issue 28
    err = capsys.readouterr().err
    assert "FIFO" in err and "before any check ran" not in err


def test_fifo_manifest(tmp_path):
    root = tmp_path / "g"
    root.mkdir()
    os.mkfifo(root / "manifest.json")
    with pytest.raises(golden.GoldenError, match="FIFO"):
        golden.read_manifest(root)


# -- sizes ----------------------------------------------------------------------------------------------


def test_huge_shape_refused_up_front(tmp_path, capsys):
    argv = ["golden", "generate", "--preset", "llama-3.1-8b", "--shape", "1000,1000,1000,128"]
    assert main([*argv, "--out", str(tmp_path / "o")]) == 2
    line = _error_line(capsys, "golden")
    assert "953.7 GiB" in line and "limit" in line


def test_torch_module_huge_max_position():
    torch = pytest.importorskip("torch")
    from rope_ref.backends._torch_module import RotaryEmbedding

    from rope_ref import RopeConfig

    cfg = RopeConfig(128, layout="half")
    with pytest.raises(ValueError, match=r"max_position=1099511627776 needs a .* GiB"):
        RotaryEmbedding(cfg, max_position=2**40)
    module = RotaryEmbedding(cfg)
    with pytest.raises(ValueError, match="GiB"):
        module.tables(torch.arange(4), max_position=2**40)
    assert RotaryEmbedding(cfg, max_position=131072).max_position == 131072  # real contexts still fine


# -- foreign tensors -------------------------------------------------------------------------------------


def _torch_exotics():
    torch = pytest.importorskip("torch")
    x = torch.ones(2, 8)
    return {
        "sparse_coo": x.to_sparse(),
        "sparse_csr": x.to_sparse_csr(),
        "nested": torch.nested.nested_tensor([torch.ones(2, 8), torch.ones(3, 8)]),
        "quantized": torch.quantize_per_tensor(x, 0.1, 0, torch.qint8),
    }


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("kind", ["sparse_coo", "sparse_csr", "nested", "quantized"])
@pytest.mark.parametrize("role", ["x", "positions"])
def test_exotic_torch_tensors_raise_type_error(kind, role):
    import rope_ref

    t = _torch_exotics()[kind]
    cfg = rope_ref.RopeConfig(8, layout="half")
    args = (t, np.arange(2)[:, None]) if role == "x" else (np.ones((2, 8)), t)
    with pytest.raises(TypeError, match=rf"^{role} is a"):
        rope_ref.apply(*args, cfg)


# -- issue 18: small CLI points --------------------------------------------------------------------------

LLAMA31 = json.loads(Path(__file__).with_name("llama-3.1-8b.json").read_text(encoding="utf-8"))


def _inv_freq_lines(text: str) -> list[float]:
    return [float(ln.split()[1]) for ln in text.splitlines() if ln.strip().startswith("i=")]


def test_table_preset_hf_config_and_scaling(tmp_path, capsys):
    import rope_ref
    from rope_ref.scaling import Llama3

    expected = rope_ref.inv_freq(
        rope_ref.RopeConfig(128, layout="half", base=500000.0, scaling=Llama3(8, 1, 4, 8192))
    )
    argvs = [
        ["table", "--preset", "llama-3.1-8b"],
        ["table", "--hf-config", _config(tmp_path, json.dumps(LLAMA31)), "--layout", "half"],
        ["table", "--head-dim", "128", "--base", "500000", "--scaling", "llama3:8:1:4:8192"],
    ]
    for argv in argvs:
        capsys.readouterr()
        assert main([*argv, "--digits", "12"]) == 0, capsys.readouterr().err
        got = _inv_freq_lines(capsys.readouterr().out)
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["table", "--preset", "nope"], "unknown preset"),
        (["table", "--preset", "llama-2-7b", "--scaling", "linear:2"], "--scaling"),
        (["table", "--head-dim", "8", "--scaling", "bogus:1"], "--scaling"),
        (["table"], "--head-dim"),
        (["table", "--head-dim", "8", "--width", "5"], "--width"),
        (["table", "--preset", "llama-2-7b", "--layout", "half"],
         "--layout cannot be combined with --preset"),
        (["table", "--head-dim", "8", "--base", "10000", "--scaling", "ntk:2@500000"],
         "names base 500000 but --base is 10000"),
        (["table", "--head-dim", "8", "--digits", "18"], "--digits must be between 0 and 17, got 18"),
        (["table", "--head-dim", "8", "--digits", "-1"], "--digits must be between 0 and 17, got -1"),
    ],
)
def test_table_bad_config_arguments(capsys, argv, needle):
    assert main(argv) == 2
    assert needle in _error_line(capsys, "table")


def test_table_wraps_wide_output(capsys):
    assert main(["table", "--head-dim", "128", "--positions", "0:3", "--width", "100"]) == 0
    out = capsys.readouterr().out
    table = out[out.index("(cos, sin) per pair:") :]
    assert max(len(ln) for ln in table.splitlines()) <= 100
    assert "pair 63" in table  # every pair is still printed


@pytest.mark.parametrize("argv", [["table", "--help"], ["golden", "generate", "--help"]])
def test_preset_help_lists_the_names(capsys, argv):
    import rope_ref

    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    for name in rope_ref.preset_names():
        assert name in out


def test_usage_errors_are_one_line(capsys):
    with pytest.raises(SystemExit) as info:
        main(["table", "--head-dim", "x"])
    assert info.value.code == 2
    assert "--head-dim" in _error_line(capsys, "table --head-dim x".split()[0])


def test_verify_after_checksum_check_does_not_say_before_any_check(tmp_path, capsys, small_set):
    root = _copy_set(small_set, tmp_path / "g")
    victim = root / json.loads((root / "manifest.json").read_text())["cases"][0]["file"]
    victim.write_bytes(victim.read_bytes()[:-1])
    capsys.readouterr()
    assert main(["golden", "verify", str(root)]) == 3  # a corrupt set: exit status 3 since issue 28
    err = capsys.readouterr().err
    assert "checksum mismatch" in err and "before any check ran" not in err


def test_text_report_states_skip_reasons(capsys, small_set):
    argv = ["conformance", "run", "--backend", "numpy", "--golden", str(small_set), "-q"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    # The preset's apply/apply_vjp cases hold float32-quantised inputs; the oracle runs float64.
    assert "2 skipped: inputs quantised for io dtype float32" in out


def test_deeply_nested_xfails_json(tmp_path, capsys):
    path = tmp_path / "xfails.json"
    path.write_text("[" * 100000)
    assert main(["conformance", "run", "--backend", "numpy", "-q", "--xfails", str(path)]) == 2
    line = _error_line(capsys, "conformance")
    assert "xfail" in line and "recursion" in line, line


def test_table_digits_limits_and_a_scaling_base_are_taken(capsys):
    # 17 digits (the most a float64 needs) and 0 are accepted; '@BASE' sets the base when --base agrees
    # or is absent: inv_freq[1] = 500000 ** (-2/8) for head_dim 8, NTK alpha 1 leaving the base alone
    assert main(["table", "--head-dim", "8", "--positions", "1", "--digits", "17"]) == 0
    assert main(["table", "--head-dim", "8", "--positions", "1", "--digits", "0"]) == 0
    capsys.readouterr()
    for extra in ([], ["--base", "500000"]):
        argv = ["table", "--head-dim", "8", "--positions", "1", "--digits", "12", "--scaling", "ntk:1@500000"]
        assert main(argv + extra) == 0
        out = capsys.readouterr().out
        assert "base=500000 " in out and f"i=1    {500000.0 ** -0.25:.12f}" in out
