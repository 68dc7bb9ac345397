"""``rope-ref conformance judge`` on a C port (issue 29, point 1): a small C program reads the inputs of a
few fp32 ``apply`` cases from the shipped set's safetensors files and writes its outputs; the judge passes
it, and fails it naming the case when a bug (positions shifted by one) is planted in one case."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from rope_ref.conformance.golden_reading import shipped_dir
from shipped_golden import shipped_cases

from rope_ref.cli import main

SOURCE = Path(__file__).parent / "c_port" / "rope_port.c"
CC = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler (cc, gcc or clang) on this machine")


def _chosen():
    """fp32 ``apply`` cases the C port handles: half layout, no scaling, 1-D positions on the S axis."""
    cases = [
        c
        for c in shipped_cases()
        if c.op == "apply"
        and c.io_dtype == "float32"
        and c.config.get("layout") == "half"
        and c.config.get("scaling") is None
        and c.inputs["positions"].ndim == 1
        and c.params.get("axes") in ("sd", "hsd", "bhsd")
        and c.inputs["x"].dtype.name == "float32"
    ]
    return cases[:6]


@pytest.fixture(scope="module")
def port(tmp_path_factory):
    exe = tmp_path_factory.mktemp("c_port") / "rope_port"
    subprocess.run([CC, "-O1", "-o", str(exe), str(SOURCE), "-lm"], check=True, capture_output=True)
    return exe


def _write_outputs(port: Path, out: Path, cases, buggy: str | None = None) -> None:
    out.mkdir()
    for c in cases:
        args = [str(shipped_dir() / f"{c.id}.safetensors"), str(out / f"{c.id}.safetensors")]
        args += [str(c.config["rotary_dim"]), repr(float(c.config["base"])), "1" if c.id == buggy else "0"]
        subprocess.run([str(port), *args], check=True, capture_output=True)


def _judge(out: Path, cases, capsys) -> tuple[int, str]:
    select = "^(" + "|".join(re.escape(c.id) for c in cases) + ")$"
    code = main(["conformance", "judge", "--outputs", str(out), "--precision", "fp32", "-q", "-k", select])
    return code, capsys.readouterr().out


def test_the_judge_passes_a_correct_c_port(port, tmp_path, capsys):
    cases = _chosen()
    assert len(cases) >= 4
    _write_outputs(port, tmp_path / "out", cases)
    code, out = _judge(tmp_path / "out", cases, capsys)
    assert code == 0, out
    assert out.rstrip().splitlines()[-1].startswith(f"PASSED: {len(cases)} passed, 0 failed")


def test_the_judge_fails_a_planted_bug_naming_the_case(port, tmp_path, capsys):
    cases = _chosen()
    buggy = cases[1].id
    _write_outputs(port, tmp_path / "out", cases, buggy=buggy)
    code, out = _judge(tmp_path / "out", cases, capsys)
    assert code == 1, out
    assert f"FAILED {buggy}  [apply" in out and out.count("\nFAILED ") == 1
    assert "most resembles: positions shifted by +1" in out
    assert out.rstrip().splitlines()[-1].startswith(f"FAILED: {len(cases) - 1} passed, 1 failed")


def test_a_missing_output_is_unsupported_not_passed(port, tmp_path, capsys):
    cases = _chosen()
    _write_outputs(port, tmp_path / "out", cases[1:])
    code, out = _judge(tmp_path / "out", cases, capsys)
    assert code == 0
    assert "1 unsupported (1 operation missing)" in out.rstrip().splitlines()[-1]
    assert f"no output file {cases[0].id}.safetensors" in out
