"""Robustness of the conformance runner and its command line.

A backend that raises, hangs, returns the wrong shape or dtype, returns NaN, or changes its input
without declaring in-place gets a recorded failure and the run goes on; unsupported cases are never
passes; xfails need reasons and stale ones are warned about; a corrupted golden directory fails before
anything runs. Cases are built in memory here (expected values from the oracle: these tests check the
runner, not the oracle).
"""

from __future__ import annotations

import json
import shlex
import shutil
import sys
import threading
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from rope_ref.conformance.case import Case
from rope_ref.conformance.oracle_backend import OracleBackend
from rope_ref.conformance.runner import Runner, load_xfails

import rope_ref
from rope_ref.cli import main

TESTS = Path(__file__).parent


def apply_case(cid: str, positions=(0, 1, 5, 300), head_dim: int = 16) -> Case:
    rng = np.random.default_rng(abs(hash(cid)) % 2**32)
    x = rng.standard_normal((len(positions), head_dim))
    pos = np.asarray(positions, dtype=np.float64)
    cfg = {"head_dim": head_dim, "layout": "half", "base": 10000.0}
    case = Case(
        cid, "apply", cfg, {"x": x, "positions": pos}, {}, "layout", "rotation", {"seq_len": None}, "float64"
    )
    case.expected["out"] = rope_ref.apply(x, pos, case.rope_config())
    return case


CASES = [apply_case("apply-a"), apply_case("apply-b"), apply_case("apply-c")]


class Raises(OracleBackend):
    def apply(self, x, positions, cfg, seq_len=None):
        if self.calls.append(1) or len(self.calls) == 1:
            raise RuntimeError("kernel launch failed")
        return super().apply(x, positions, cfg, seq_len)

    def __init__(self):
        self.calls = []


class Hangs(OracleBackend):
    release = threading.Event()

    def apply(self, x, positions, cfg, seq_len=None):
        if not hasattr(self, "hung"):
            self.hung = True
            self.release.wait(20)
        return super().apply(x, positions, cfg, seq_len)


class WrongShape(OracleBackend):
    def apply(self, x, positions, cfg, seq_len=None):
        return super().apply(x, positions, cfg, seq_len)[..., :-1]


class WrongDtype(OracleBackend):
    def apply(self, x, positions, cfg, seq_len=None):
        return super().apply(x, positions, cfg, seq_len).astype(np.float32)


class ReturnsNaN(OracleBackend):
    def apply(self, x, positions, cfg, seq_len=None):
        out = super().apply(x, positions, cfg, seq_len)
        out[0, 3] = np.nan
        return out


class Mutates(OracleBackend):
    def apply(self, x, positions, cfg, seq_len=None):
        out = super().apply(x, positions, cfg, seq_len)
        x[...] = out
        return x


class MutatesDeclared(Mutates):
    inplace = True


class Unsupported(OracleBackend):
    def apply(self, x, positions, cfg, seq_len=None):
        raise NotImplementedError("no apply on this device")


def run(backend, cases=CASES, **kw):
    return Runner(backend, timeout=kw.pop("timeout", 10.0), spec="test").run(cases, **kw)


def statuses(report):
    return [(r.case_id, r.status, r.kind) for r in report.results]


def test_oracle_passes_in_order():
    report = run(OracleBackend())
    assert statuses(report) == [(c.id, "passed", "") for c in CASES]
    assert report.ok


def test_exception_is_recorded_and_the_run_goes_on():
    report = run(Raises())
    assert statuses(report)[0] == ("apply-a", "failed", "exception")
    assert "kernel launch failed" in report.results[0].message
    assert [r.status for r in report.results[1:]] == ["passed", "passed"]
    assert not report.ok


def test_hang_past_timeout_is_recorded_and_the_run_goes_on():
    try:
        report = run(Hangs(), timeout=0.5)
    finally:
        Hangs.release.set()
    assert statuses(report)[0] == ("apply-a", "failed", "timeout")
    assert [r.status for r in report.results[1:]] == ["passed", "passed"]


@pytest.mark.parametrize(
    ("backend", "kind"),
    [(WrongShape(), "shape"), (WrongDtype(), "dtype"), (ReturnsNaN(), "non-finite"), (Mutates(), "mutation")],
)
def test_bad_outputs_fail_each_case(backend, kind):
    report = run(backend)
    assert [r.status for r in report.results] == ["failed"] * 3
    assert {r.kind for r in report.results} == {kind}


def test_nan_failure_names_the_element():
    worst = run(ReturnsNaN()).results[0].worst
    assert worst.index == (0, 3) and np.isnan(worst.got)


def test_declared_inplace_may_overwrite_its_input():
    assert run(MutatesDeclared()).ok


def test_mutating_the_numpy_array_handed_over_is_caught():
    class SharesMemory(Mutates):
        def from_numpy(self, array, dtype=None):
            return array  # no copy: the backend writes into the runner's array

    assert {r.kind for r in run(SharesMemory()).results} == {"mutation"}


def test_unsupported_is_counted_apart_and_never_a_pass():
    report = run(Unsupported())
    counts = report.counts()
    assert counts["unsupported"] == 3 and counts["passed"] == 0
    assert report.ok  # unsupported is not a failure ...
    assert "unsupported" in report.summary_table()  # ... but it is reported


def test_case_for_another_io_dtype_is_skipped():
    case = apply_case("apply-fp32")
    case.io_dtype = "float32"
    assert run(OracleBackend(), [case]).results[0].status == "skipped"


def test_xfails_need_reasons_and_stale_entries_warn(tmp_path):
    path = tmp_path / "xfails.txt"
    path.write_text("# comment\napply-a  known bug #12\napply-b  fixed long ago\napply-zz  no such case\n")
    xfails = load_xfails(path)
    report = run(Raises(), xfails=xfails)
    assert statuses(report)[:2] == [("apply-a", "xfailed", "exception"), ("apply-b", "xpassed", "")]
    assert report.ok
    assert any("apply-b" in w for w in report.warnings)
    assert any("apply-zz" in w and "matches no" in w for w in report.warnings)
    path.write_text("apply-a\n")
    with pytest.raises(ValueError, match="needs a reason"):
        load_xfails(path)
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"apply-*": "glob entry"}))
    assert load_xfails(path) == {"apply-*": "glob entry"}


def test_select_regex_and_bad_regex():
    assert [r.case_id for r in run(OracleBackend(), select="-b$").results] == ["apply-b"]
    with pytest.raises(ValueError, match="regular expression"):
        run(OracleBackend(), select="(")


def test_reports_json_and_junit(tmp_path):
    report = run(ReturnsNaN())
    report.write_json(tmp_path / "r.json")
    report.write_junit_xml(tmp_path / "r.xml")
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["counts"]["failed"] == 3 and data["cases"][0]["worst"]["index"] == [0, 3]
    root = ET.parse(tmp_path / "r.xml").getroot()
    assert root.get("failures") == "3" and len(root.findall("testcase")) == 3
    assert root.find("testcase/failure") is not None


# -- the command line, on the shipped golden set -----------------------------------------------------------


@pytest.fixture
def broken_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(TESTS))
    sys.modules.pop("broken_backends", None)


def test_cli_oracle_passes(capsys):
    assert main(["conformance", "run", "--backend", "numpy", "-q"]) == 0
    out = capsys.readouterr().out
    assert "PASSED" in out and "operation" in out and "bug class" in out


def test_cli_failure_details_reproducer_and_reports(capsys, tmp_path, broken_on_path):
    spec = "broken_backends:FlippedDirection"
    code = main(
        [
            "conformance",
            "run",
            "--backend",
            spec,
            "--json-report",
            str(tmp_path / "r.json"),
            "--junit-xml",
            str(tmp_path / "r.xml"),
        ]
    )
    captured = capsys.readouterr()
    assert code == 1
    assert (
        "FAILED apply-" in captured.out and "error/tolerance" in captured.out and "reproduce:" in captured.out
    )
    assert "%]" in captured.err  # progress
    data = json.loads((tmp_path / "r.json").read_text())
    failed = [c for c in data["cases"] if c["status"] == "failed"]
    assert failed and all("reproducer" in c for c in failed)
    # The one-line reproducer runs exactly that case, and it fails again.
    argv = shlex.split(failed[0]["reproducer"])
    assert argv[:3] == ["rope-ref", "conformance", "run"]
    assert main(argv[1:] + ["--json-report", str(tmp_path / "one.json")]) == 1
    one = json.loads((tmp_path / "one.json").read_text())
    assert [c["id"] for c in one["cases"]] == [failed[0]["id"]]
    capsys.readouterr()


def test_cli_no_match_and_unknown_backend(capsys):
    assert main(["conformance", "run", "--backend", "numpy", "-k", "^nothing-matches$"]) == 2
    assert main(["conformance", "run", "--backend", "no-such-backend"]) == 2
    assert "unknown backend" in capsys.readouterr().err


def _golden_copy(tmp_path) -> Path:
    from rope_ref.conformance.golden import shipped_dir

    dst = tmp_path / "golden"
    shutil.copytree(shipped_dir(), dst)
    return dst


def _tensor_file(golden: Path) -> Path:
    return sorted(golden.glob("apply-*.safetensors"))[0]


@pytest.mark.parametrize("damage", ["flip_byte", "truncate", "schema", "escape"])
def test_cli_corrupted_golden_fails_before_running_naming_the_file(tmp_path, capsys, damage):
    golden = _golden_copy(tmp_path)
    manifest = golden / "manifest.json"
    target = _tensor_file(golden)
    if damage == "flip_byte":
        data = bytearray(target.read_bytes())
        data[-1] ^= 0x01
        target.write_bytes(bytes(data))
        expect = target.name
    elif damage == "truncate":
        target.write_bytes(target.read_bytes()[:-16])
        expect = target.name
    elif damage == "schema":
        m = json.loads(manifest.read_text())
        m["cases"][0]["tolerance"] = "approximately"
        manifest.write_text(json.dumps(m))
        expect = "manifest.json"
    else:
        m = json.loads(manifest.read_text())
        m["cases"][0]["file"] = "../outside.safetensors"
        manifest.write_text(json.dumps(m))
        expect = "manifest.json"
    code = main(["conformance", "run", "--backend", "numpy", "--golden", str(golden)])
    captured = capsys.readouterr()
    assert code == 2
    assert expect in captured.err
    assert "operation" not in captured.out  # no summary: nothing ran


# -- the documented example backend ------------------------------------------------------------------------

EXAMPLES = TESTS.parent / "docs" / "examples"


def test_documented_example_backend_runs_and_passes(monkeypatch, capsys, tmp_path):
    monkeypatch.chdir(EXAMPLES)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(EXAMPLES))])
    sys.modules.pop("minimal_backend", None)
    report = tmp_path / "r.json"
    code = main(
        [
            "conformance",
            "run",
            "--backend",
            "minimal_backend:MinimalBackend",
            "--precision",
            "fp32",
            "--json-report",
            str(report),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    counts = json.loads(report.read_text())["counts"]
    assert counts["failed"] == 0 and counts["passed"] > 50
    assert "PASSED" in out


def test_example_is_quoted_verbatim_in_the_guide():
    guide = (TESTS.parent / "docs" / "writing-a-backend.md").read_text()
    assert (EXAMPLES / "minimal_backend.py").read_text() in guide
