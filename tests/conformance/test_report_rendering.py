"""``conformance.report`` on hand-built results: each count, flag and line of the report, and the JSON
and JUnit records, checked against values written out here (no runner involved)."""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET

from rope_ref.conformance.report import REASON_LABELS, CaseResult, SuiteReport, reason_label

from rope_ref.tolerance import Comparison


def _bad(ratio: float, output: str = "out") -> Comparison:
    return Comparison(output, False, 1, 8, (0, 1), 0.5, 0.5 + ratio * 1e-6, 1e-6, ratio)


def _report(results, duration=2.0):
    return SuiteReport({"name": "t"}, results, [], duration)


def test_reason_labels():
    assert REASON_LABELS == {
        "operation": "operation missing",
        "config": "config not expressible",
        "dtype": "dtype missing",
        "inplace": "not declared in inplace_ops",
    }
    assert reason_label("inplace") == "not declared in inplace_ops"
    assert reason_label("mystery") == "not implemented"


def test_case_record_worst_duration_and_non_finite_numbers():
    r = CaseResult("c", "apply", "layout", "failed", duration=0.0123456789, kind="mismatch")
    r.comparisons = [_bad(2.0), Comparison("out pair norm", True, 0, 4), _bad(7.0, "out2")]
    assert r.worst.ratio == 7.0 and r.worst.output == "out2"
    d = r.to_dict()
    assert d["duration_s"] == 0.012346 and d["worst"]["ratio"] == 7.0 and d["kind"] == "mismatch"
    assert "borrowed" not in d and "message" not in d
    r.comparisons = [Comparison("out", False, 1, 1, (0,), 1.0, math.nan, 0.0, math.inf)]
    d = r.to_dict()
    assert d["worst"]["got"] == "nan" and d["worst"]["ratio"] == "inf"
    json.dumps(d, allow_nan=False)  # strict JSON


def test_counts_ok_complete_and_applicable():
    results = [
        CaseResult("p", "apply", "a", "passed"),
        CaseResult("s", "apply", "a", "skipped", message="inputs quantised for io dtype float16"),
        CaseResult("x", "apply", "a", "xfailed"),
    ]
    report = _report(results)
    assert report.ok and report.complete and [r.case_id for r in report.applicable] == ["p", "x"]
    assert report.ok_under(require_all=True)
    results.append(CaseResult("u", "apply", "a", "unsupported", unsupported_reason="operation"))
    assert report.ok and not report.complete and report.failures == []
    assert report.ok_under() and not report.ok_under(require_all=True)
    assert report.to_json()["ok"] is True and report.to_json()["complete"] is False
    assert report.to_json()["applicable"] == 3
    assert "FAILED" in report.verdict_line(require_all=True) and report.verdict_line().startswith("PASSED")


def test_coverage_counts_borrowed_apart_and_marks_uncovered_classes():
    results = [
        CaseResult("a1", "inv_freq", "tables", "passed", borrowed=True),
        CaseResult("a2", "inv_freq", "tables", "passed"),
        CaseResult("b1", "apply", "vjp", "unsupported", unsupported_reason="operation"),
        CaseResult("b2", "apply", "vjp", "unsupported", unsupported_reason="inplace"),
        CaseResult("c1", "apply", "skipped_only", "skipped"),
    ]
    table = _report(results).coverage_table().splitlines()
    tables = next(line for line in table if line.startswith("tables"))
    assert tables.split() == ["tables", "2", "2", "1", "1", "0", "0"]
    vjp = next(line for line in table if line.startswith("vjp"))
    assert vjp.split()[1:7] == ["2", "0", "0", "0", "0", "2"]
    assert vjp.endswith("NOT COVERED: 1 not declared in inplace_ops, 1 operation missing")
    assert not any(line.startswith("skipped_only") for line in table)


def test_verdict_line_folds_only_two_or_more_reasons():
    def unsupported(keys):
        return [
            CaseResult(f"u{i}", "apply", "a", "unsupported", unsupported_reason=k) for i, k in enumerate(keys)
        ]

    four = _report(unsupported(["operation"] * 4 + ["config"] * 3 + ["dtype"] * 2 + ["inplace"]))
    line = four.verdict_line(top=3)
    assert "1 not declared in inplace_ops" in line and "other reason" not in line
    five = _report(unsupported(["operation"] * 4 + ["config"] * 3 + ["dtype"] * 2 + ["inplace", "zzz"]))
    assert "2 for 2 other reason(s)" in five.verdict_line(top=3)


def test_every_reason_line_is_listed():
    results = [
        CaseResult(f"s{i}", "apply", "a", "skipped", message=f"reason number {i}") for i in range(5)
    ] + [CaseResult("u", "apply", "a", "unsupported")]
    lines = _report(results).reason_lines()
    assert len(lines) == 6 and "1 unsupported: no reason given" in lines


def test_failure_details_print_the_message_of_every_kind_but_a_mismatch():
    mismatch = CaseResult("m", "apply", "a", "failed", kind="mismatch", message="RAW-M", reproducer="r1")
    mismatch.comparisons = [_bad(3.0)]
    nonfinite = CaseResult("n", "apply", "a", "failed", kind="non-finite", message="RAW-N", reproducer="r2")
    nonfinite.comparisons = [_bad(4.0)]
    dtype = CaseResult("d", "apply", "a", "failed", kind="dtype", message="RAW-D", reproducer="r3")
    detail = CaseResult("e", "apply", "a", "failed", kind="mismatch", detail="READABLE", reproducer="r4")
    detail.comparisons = [_bad(5.0)]
    text = _report([mismatch, nonfinite, dtype, detail]).failure_details()
    assert "RAW-M" not in text and "RAW-N" in text and "RAW-D" in text
    block_e = text.split("\n\n")[3]
    assert "  READABLE" in block_e and "worst element" not in block_e and "reproduce: r4" in block_e
    assert "worst element out[0, 1]" in text.split("\n\n")[0]


def test_junit_counts_xfailed_as_skipped(tmp_path):
    results = [
        CaseResult("p", "apply", "a", "passed"),
        CaseResult("x", "apply", "a", "xfailed", xfail_reason="known"),
        CaseResult("u", "apply", "a", "unsupported", unsupported_reason="dtype"),
        CaseResult("s", "apply", "a", "skipped"),
        CaseResult("f", "apply", "a", "failed", kind="shape", message="bad shape"),
    ]
    path = tmp_path / "r.xml"
    _report(results).write_junit_xml(path)
    suite = ET.parse(path).getroot()
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("5", "1", "3")
    skipped = [el.get("message") for el in suite.iter("skipped")]
    assert "unsupported (dtype missing): " in skipped
