"""``conformance.report`` on hand-built results: each count, flag and line of the report, and the JSON
and JUnit records, checked against values written out here (no runner involved)."""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET

import pytest
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


def _worst_out() -> Comparison:
    """A failing comparison whose every field differs from the others (expected != got != tol != ratio)."""
    return Comparison("out", False, 3, 12, (1, 2), 0.25, 0.75, 1e-3, 500.0, "exact element")


def _mixed_results() -> list[CaseResult]:
    """One result of every status, with distinct ops and bug classes (values written out in the tests)."""
    failed = CaseResult(
        "f1", "apply", "heads", "failed", 0.5, kind="mismatch", reproducer="rope-ref repro f1"
    )
    failed.comparisons = [_worst_out()]
    return [
        CaseResult("p1", "apply", "layout", "passed", 0.25, borrowed=True),
        CaseResult("p2", "inv_freq", "layout", "passed"),
        failed,
        CaseResult("u1", "inv_freq", "tables", "unsupported", unsupported_reason="config", message="no yarn"),
        CaseResult("s1", "apply", "layout", "skipped", message="inputs  quantised\nfor fp16"),
        CaseResult("x1", "cos_sin", "heads", "xfailed", xfail_reason="known bug 7"),
        CaseResult("x2", "cos_sin", "layout", "xpassed", xfail_reason="stale 9"),
    ]


def test_counts_of_a_subset_and_every_status():
    report = _report(_mixed_results())
    assert report.counts() == {
        "passed": 2,
        "failed": 1,
        "unsupported": 1,
        "skipped": 1,
        "xfailed": 1,
        "xpassed": 1,
    }
    only = report.counts(r for r in report.results if r.op == "cos_sin")
    assert only == {"passed": 0, "failed": 0, "unsupported": 0, "skipped": 0, "xfailed": 1, "xpassed": 1}
    assert [r.case_id for r in report.failures] == ["f1"] and not report.ok
    assert [r.case_id for r in report.applicable] == ["p1", "p2", "f1", "u1", "x1", "x2"]


def test_summary_table_rows_columns_and_totals():
    lines = _report(_mixed_results()).summary_table().split("\n")
    cols = ["passed", "failed", "unsupported", "skipped", "xfailed", "xpassed", "total"]
    ops, classes = lines[:7], lines[7:15]
    assert ops[0].split() == ["operation", *cols] and set(ops[1]) == {"-"}
    assert [line.split() for line in ops[2:6]] == [
        ["apply", "1", "1", "0", "1", "0", "0", "3"],
        ["cos_sin", "0", "0", "0", "0", "1", "1", "2"],
        ["inv_freq", "1", "0", "1", "0", "0", "0", "2"],
        ["all", "2", "1", "1", "1", "1", "1", "7"],
    ]
    assert ops[6] == ""
    assert classes[0].split() == ["bug", "class", *cols]
    assert [line.split() for line in classes[2:6]] == [
        ["heads", "0", "1", "0", "0", "1", "0", "2"],
        ["layout", "2", "0", "0", "1", "0", "1", "4"],
        ["tables", "0", "0", "1", "0", "0", "0", "1"],
        ["all", "2", "1", "1", "1", "1", "1", "7"],
    ]
    for table in (ops[:6], classes[:6]):
        assert len({len(line) for line in table}) == 1  # every row as wide as the header, numbers aligned
        head = table[0]
        for word in cols:  # each count ends under the end of its column's title
            end = head.index(word) + len(word)
            assert all(row[end - 1] != " " and row[end : end + 1] in ("", " ") for row in table[2:])


def test_summary_table_is_as_wide_as_its_longest_name():
    long = "a_bug_class_longer_than_the_title"
    lines = _report([CaseResult("c", "apply", long, "passed")]).summary_table().split("\n")
    bug = lines[5:]
    assert bug[0].startswith("bug class" + " " * (len(long) - len("bug class") + 2) + " " * 5 + "passed")
    assert bug[2].startswith(long + "  ")
    assert lines[0].startswith("operation  " + " " * 5 + "passed")


def test_failure_details_block_written_out():
    failed = _mixed_results()[2]
    failed.diagnosis = "layout swapped"
    failed.message = "M-not-printed-for-a-mismatch"
    assert _report([failed]).failure_details() == (
        "FAILED f1  [apply, bug class: heads, mismatch]\n"
        "  worst element out[1, 2]: expected 0.25, got 0.75, tolerance 0.001, error/tolerance 500 "
        "(3 of 12 elements out)\n"
        "  note: exact element\n"
        "  most resembles: layout swapped\n"
        "  reproduce: rope-ref repro f1"
    )


def test_failure_details_keep_the_last_six_message_lines_of_an_exception():
    message = "\n".join(f"line {i}" for i in range(1, 9))
    r = CaseResult("e", "rotate", "b", "failed", kind="exception", message=message, reproducer="R")
    r.detail = "a detail line is only written in place of a worst-element line"
    block = _report([r, CaseResult("p", "rotate", "b", "passed")]).failure_details()
    assert (
        block
        == "FAILED e  [rotate, bug class: b, exception]\n"
        + "".join(f"  line {i}\n" for i in range(3, 9))
        + "  reproduce: R"
    )


def test_headline_counts_in_status_order():
    assert _report(_mixed_results(), 1.5).headline() == (
        "2 passed, 1 failed, 1 unsupported, 1 skipped, 1 xfailed, 1 xpassed in 1.50s"
    )
    assert _report([], 0.0).headline() == "no cases in 0.00s"


@pytest.mark.parametrize("require_all", [False, True])
def test_verdict_line_written_out(require_all):
    report = _report(_mixed_results(), 3.14159)
    failed_as = "FAILED" if require_all else "PASSED"
    unsupported_note = "; --require-all: they fail the run)" if require_all else ")"
    del report.results[2]  # the failure: only --require-all decides the verdict now
    assert report.verdict_line(require_all) == (
        f"{failed_as}: 2 passed, 0 failed, 1 unsupported (1 config not expressible), "
        "1 skipped (generated for another I/O dtype), 1 xfailed, 1 xpassed in 3.14s; "
        "4 of 5 applicable cases ran (unsupported cases are not counted as passed"
        f"{unsupported_note}; 1 passed on tables taken from the oracle (not counted as the backend's own)"
    )


def test_verdict_line_of_a_clean_run_has_no_notes():
    report = _report([CaseResult("p", "apply", "a", "passed"), CaseResult("q", "apply", "a", "passed")], 0.5)
    assert (
        report.verdict_line(require_all=True)
        == "PASSED: 2 passed, 0 failed in 0.50s; 2 of 2 applicable cases ran"
    )


def test_unsupported_reasons_largest_first_then_by_label():
    results = [
        CaseResult(f"u{i}", "apply", "a", "unsupported", unsupported_reason=k)
        for i, k in enumerate(["dtype", "config", "mystery", "config", "dtype", "operation"])
    ]
    assert _report(results).unsupported_reasons() == [
        ("config not expressible", 2),
        ("dtype missing", 2),
        ("not implemented", 1),
        ("operation missing", 1),
    ]


def test_reason_lines_collapse_whitespace_and_sort_by_count_then_status():
    results = [
        CaseResult("s1", "apply", "a", "skipped", message="a reason"),
        CaseResult("u1", "apply", "a", "unsupported", message="b  reason\n here"),
        CaseResult("u2", "apply", "a", "unsupported", message="b reason here"),
        CaseResult("s2", "apply", "a", "skipped", message="b reason here"),
        CaseResult("p", "apply", "a", "passed", message="not a reason"),
        CaseResult("x", "apply", "a", "xfailed", message="not a reason either"),
    ]
    assert _report(results).reason_lines() == [
        "2 unsupported: b reason here",
        "1 skipped: a reason",
        "1 skipped: b reason here",
    ]


def test_coverage_table_counts_xpassed_as_passed_and_xfailed_as_failed():
    results = [
        CaseResult("a", "apply", "cls", "xpassed"),
        CaseResult("b", "apply", "cls", "xfailed"),
        CaseResult("c", "apply", "cls", "failed"),
        CaseResult("d", "apply", "cls", "unsupported", unsupported_reason="dtype"),
        CaseResult("e", "apply", "cls", "passed", borrowed=True),
    ]
    lines = _report(results).coverage_table().split("\n")
    assert lines[0] == "coverage (applicable cases per bug class):"
    assert lines[1].split() == [
        "bug",
        "class",
        "cases",
        "ran",
        "passed",
        "borrowed",
        "failed",
        "unsupp.",
        "unsupported",
        "because",
    ]
    assert set(lines[2]) == {"-"} and len(lines[2]) == len(lines[1])
    assert lines[3].split() == ["cls", "5", "4", "1", "1", "2", "1", "1", "dtype", "missing"]
    assert len(lines) == 4
    assert _report([CaseResult("s", "apply", "cls", "skipped")]).coverage_table() == ""


def test_case_record_written_out_in_field_order():
    r = CaseResult("c", "apply", "layout", "failed", 1.0000004)
    optional = ("kind", "message", "xfail_reason", "unsupported_reason", "borrowed", "diagnosis", "detail")
    for key, value in zip(optional, ("mismatch", "m", "xr", "config", True, "dg", "dt"), strict=True):
        setattr(r, key, value)
    r.reproducer = "rep"
    r.comparisons = [_worst_out()]
    d = r.to_dict()
    assert list(d) == [
        "id",
        "op",
        "bug_class",
        "status",
        "duration_s",
        "kind",
        "message",
        "xfail_reason",
        "unsupported_reason",
        "borrowed",
        "diagnosis",
        "detail",
        "reproducer",
        "worst",
    ]
    assert d["duration_s"] == 1.0 and d["borrowed"] is True and d["unsupported_reason"] == "config"
    assert d["worst"] == {
        "output": "out",
        "index": [1, 2],
        "expected": 0.25,
        "got": 0.75,
        "tolerance": 1e-3,
        "ratio": 500.0,
        "n_bad": 3,
        "n_total": 12,
    }
    assert CaseResult("p", "apply", "layout", "passed").to_dict() == {
        "id": "p",
        "op": "apply",
        "bug_class": "layout",
        "status": "passed",
        "duration_s": 0.0,
    }


def test_report_json_written_out_and_its_warnings_a_copy(tmp_path):
    results = [CaseResult("p", "apply", "a", "passed"), CaseResult("u", "apply", "a", "unsupported")]
    report = SuiteReport({"name": "t", "version": "2"}, results, ["w1"], 1.23456, golden="/tmp/set")
    record = report.to_json()
    assert record == {
        "schema": "rope-ref-conformance-report/1",
        "backend": {"name": "t", "version": "2"},
        "golden": "/tmp/set",
        "duration_s": 1.235,
        "counts": {"passed": 1, "failed": 0, "unsupported": 1, "skipped": 0, "xfailed": 0, "xpassed": 0},
        "applicable": 2,
        "ok": True,
        "complete": False,
        "warnings": ["w1"],
        "cases": [r.to_dict() for r in results],
    }
    record["warnings"].append("added")
    assert report.warnings == ["w1"]
    path = tmp_path / "report.json"
    report.write_json(path)
    text = path.read_text(encoding="utf-8")
    assert json.loads(text) == report.to_json()
    assert text.endswith("}\n") and text.split("\n")[1] == '  "schema": "rope-ref-conformance-report/1",'
    assert SuiteReport({}, [], [], 0.0).golden == "shipped"


def test_text_sections_in_order():
    text = _report(_mixed_results()).text()
    order = [
        "operation",
        "FAILED f1",
        "1 skipped: inputs quantised for fp16",
        "coverage (applicable",
        "FAILED:",
    ]
    assert [text.index(s) for s in order] == sorted(text.index(s) for s in order)
    clean = _report([CaseResult("p", "apply", "a", "passed")], 0.0)
    assert (
        clean.text() == clean.summary_table() + "\n" + clean.coverage_table() + "\n\n" + clean.verdict_line()
    )


def test_junit_record_written_out(tmp_path):
    results = _mixed_results()
    results += [
        CaseResult(
            "f2",
            "apply",
            "a",
            "failed",
            0.125,
            kind="exception",
            message="Trace\nValueError: bad",
            reproducer="R2",
        ),
        CaseResult("f3", "apply", "a", "failed", kind="timeout", reproducer="R3"),
    ]
    path = tmp_path / "r.xml"
    SuiteReport({"name": "t", "device": "cpu"}, results, [], 1.23456).write_junit_xml(path)
    assert path.read_bytes().startswith(b"<?xml version='1.0' encoding='utf-8'?>")
    suite = ET.parse(path).getroot()
    assert suite.attrib == {
        "name": "rope-ref conformance (t)",
        "tests": "9",
        "failures": "3",
        "errors": "0",
        "skipped": "3",
        "time": "1.235",
    }
    assert [(p.get("name"), p.get("value")) for p in suite.find("properties")] == [
        ("backend.name", "t"),
        ("backend.device", "cpu"),
    ]
    cases = {tc.get("name"): tc for tc in suite.iter("testcase")}
    assert cases["p1"].attrib == {"classname": "rope_ref.conformance.apply", "name": "p1", "time": "0.250000"}
    assert cases["x1"].get("classname") == "rope_ref.conformance.cos_sin" and list(cases["p2"]) == []
    f1 = cases["f1"].find("failure")
    assert f1.get("type") == "mismatch" and f1.get("message") == _worst_out().describe()
    assert f1.text == "reproduce: rope-ref repro f1"
    f2 = cases["f2"].find("failure")
    assert (f2.get("type"), f2.get("message")) == ("exception", "ValueError: bad")
    assert f2.text == "Trace\nValueError: bad\nreproduce: R2"
    f3 = cases["f3"].find("failure")
    assert (f3.get("message"), f3.text) == ("timeout", "reproduce: R3")
    skipped = {name: cases[name].find("skipped").get("message") for name in ("u1", "s1", "x1")}
    assert skipped == {
        "u1": "unsupported (config not expressible): no yarn",
        "s1": "skipped: inputs  quantised\nfor fp16",
        "x1": "xfailed: known bug 7",
    }
    assert cases["x2"].find("system-out").text == "stale xfail (passed): stale 9"
    SuiteReport({}, [], [], 0.0).write_junit_xml(path)
    assert ET.parse(path).getroot().get("name") == "rope-ref conformance (?)"


def test_text_of_a_run_with_no_applicable_case_has_no_coverage_block():
    report = _report([CaseResult("s", "apply", "a", "skipped", message="for fp16")], 0.0)
    assert report.text() == (
        report.summary_table() + "\n" + "1 skipped: for fp16\n" + "\n" + report.verdict_line()
    )
    assert "coverage (" not in report.text()
