"""Point 4 of issue 29: the report ends with its verdict, nothing is cut, in-place reasons are named, a
failing case says which common bug it resembles, and pytest mode ends with the same summary."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest
from rope_ref.conformance.oracle_backend import OracleBackend
from rope_ref.conformance.report import CaseResult, SuiteReport
from rope_ref.conformance.runner import Runner
from shipped_golden import shipped_cases


@pytest.fixture(scope="module")
def apply_cases():
    return [c for c in shipped_cases() if c.op == "apply" and c.io_dtype in (None, "float64")][:6]


def test_verdict_line_counts_and_top_reasons():
    results = [CaseResult("p", "apply", "layout", "passed"), CaseResult("f", "apply", "layout", "failed")]
    results += [
        CaseResult(f"u{i}", "apply", "x", "unsupported", unsupported_reason=k)
        for i, k in enumerate(["operation"] * 3 + ["config"] * 2 + ["dtype", "inplace"])
    ]
    results += [CaseResult("s", "apply", "x", "skipped", message="inputs quantised for io dtype float16")]
    report = SuiteReport({}, results, [], 1.0)
    line = report.verdict_line(top=2)
    assert line.startswith(
        "FAILED: 1 passed, 1 failed, 7 unsupported (3 operation missing, 2 config not expressible, "
        "2 for 2 other reason(s)), 1 skipped (generated for another I/O dtype) in 1.00s"
    )
    assert "1 not declared in inplace_ops" in report.verdict_line()
    assert report.text().splitlines()[-1] == report.verdict_line()
    assert report.text().index("coverage (applicable") < report.text().index("FAILED:")


def test_every_reason_is_listed():
    results = [
        CaseResult(f"u{i}", "apply", "x", "unsupported", message=f"reason number {i}") for i in range(40)
    ]
    lines = SuiteReport({}, results, [], 0.0).reason_lines()
    assert len(lines) == 40 and not any("more" in line for line in lines)


class _HasApplyQkNotDeclared(OracleBackend):
    inplace_ops = frozenset()


def test_inplace_case_of_an_undeclared_operation_is_named():
    cases = [c for c in shipped_cases() if c.params.get("inplace") and c.io_dtype in (None, "float64")]
    assert cases
    report = Runner(_HasApplyQkNotDeclared()).run(cases)
    reasons = {r.unsupported_reason for r in report.results if r.status == "unsupported"}
    assert reasons == {"inplace"}
    assert "not declared in inplace_ops" in report.coverage_table()
    assert "not declared in inplace_ops" in report.verdict_line()


class _Shifted(OracleBackend):
    def apply(self, x, positions, cfg, seq_len=None):
        return super().apply(x, np.asarray(positions) + 1, cfg, seq_len)


class _Swapped(OracleBackend):
    def apply(self, x, positions, cfg, seq_len=None):
        other = "interleaved" if cfg.layout == "half" else "half"
        return super().apply(x, positions, cfg.replace(layout=other), seq_len)


@pytest.mark.parametrize(
    "backend, name", [(_Shifted, "positions shifted by +1"), (_Swapped, "layout swapped")]
)
def test_a_failing_case_names_the_common_bug(apply_cases, backend, name):
    report = Runner(backend()).run(apply_cases)
    assert report.failures
    assert any(name in r.diagnosis for r in report.failures)
    assert f"most resembles: {name}" in report.failure_details()
    assert any(r.to_dict().get("diagnosis") for r in report.failures)


@pytest.mark.slow  # a child pytest run of the suite: `pytest --full`
def test_pytest_mode_ends_with_the_coverage_summary(tmp_path):
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    argv += [
        "--pyargs",
        "rope_ref.conformance",
        "--rope-backend",
        "numpy",
        "-k",
        "apply-layout or chatglm_position",
    ]
    proc = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:]
    text = proc.stdout
    summary = text[text.index("rope-ref conformance ==") :]
    assert "coverage (applicable cases per bug class):" in summary
    verdict = r"PASSED: \d+ passed, 0 failed, \d+ skipped \(generated for another I/O dtype\)"
    assert re.search(verdict, summary)
