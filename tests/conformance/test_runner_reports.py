"""The runner's reports (conformance/runner.py): the summary and coverage tables, failure details, JSON,
JUnit XML and the progress printer. The expected text is written out by hand from the documented format
(fixed-width columns, one block per failure); the expected counts are counted by hand.
"""

from __future__ import annotations

import io
import json
import sys
import time
import xml.etree.ElementTree as ET

import numpy as np
from equal_strings import fresh as _fresh
from rope_ref.conformance import tolerance
from rope_ref.conformance.oracle_backend import OracleBackend
from rope_ref.conformance.runner import STATUSES, CaseResult, SuiteReport, progress_printer
from rope_ref.conformance.tolerance import Comparison
from small_cases import apply_case, run, table_case


def _comparison(ratio: float, passed: bool = False, note: str = "") -> Comparison:
    return Comparison("out", passed, 2, 12, (1, 3), 0.5, 0.75, 0.125, ratio, note)


def _report() -> SuiteReport:
    results = [
        CaseResult("c1", "apply", "layout", "passed", duration=0.25),
        CaseResult("c2", "apply", "layout", "failed", kind="mismatch", message="out[1, 3]: too far"),
        CaseResult("c3", "cos_sin", "tables", "unsupported", unsupported_reason="dtype"),
        CaseResult("c4", "cos_sin", "tables", "xfailed", xfail_reason="known #4"),
        CaseResult("c5", "inv_freq", "tables", "skipped"),
        CaseResult("c6", "inv_freq", "tables", "xpassed", xfail_reason="stale #6"),
    ]
    results[1].comparisons = [_comparison(2.0)]
    return SuiteReport({"name": "toy", "io_dtype": "float64"}, results, ["w1"], 1.5, "mine")


def test_summary_table_text():
    head = "operation       passed       failed  unsupported      skipped      xfailed      xpassed   total"
    expected_op = [
        head,
        "-" * len(head),
        "apply                1            1            0            0            0            0       2",
        "cos_sin              0            0            1            0            1            0       2",
        "inv_freq             0            0            0            1            0            1       2",
        "all                  1            1            1            1            1            1       6",
        "",
    ]
    head2 = "bug class       passed       failed  unsupported      skipped      xfailed      xpassed   total"
    expected_bc = [
        head2,
        "-" * len(head2),
        "layout               1            1            0            0            0            0       2",
        "tables               0            0            1            1            1            1       4",
        "all                  1            1            1            1            1            1       6",
        "",
    ]
    assert _report().summary_table() == "\n".join(expected_op + expected_bc)


def test_summary_table_widens_for_long_names():
    results = [CaseResult("c", "a_long_operation_name", "b", "passed")]
    lines = SuiteReport({}, results, [], 0.0).summary_table().splitlines()
    assert lines[0].startswith("operation" + " " * 12 + "  " + " " * 5 + "passed")
    assert lines[2].startswith("a_long_operation_name            1")
    assert len({len(line) for line in lines[:4]}) == 1
    assert lines[5].startswith("bug class       passed")


def test_counts_headline_and_flags():
    report = _report()
    assert report.counts() == {
        "passed": 1,
        "failed": 1,
        "unsupported": 1,
        "skipped": 1,
        "xfailed": 1,
        "xpassed": 1,
    }
    assert list(report.counts()) == list(STATUSES)
    assert report.headline() == "1 passed, 1 failed, 1 unsupported, 1 skipped, 1 xfailed, 1 xpassed in 1.50s"
    assert SuiteReport({}, [], [], 0.004).headline() == "no cases in 0.00s"
    assert [r.case_id for r in report.failures] == ["c2"]
    assert not report.ok and not report.complete
    assert [r.case_id for r in report.applicable] == ["c1", "c2", "c3", "c4", "c6"]
    fine = SuiteReport({}, [report.results[0], report.results[4]], [], 0.0)
    assert fine.ok and fine.complete
    assert fine.counts(report.results[:2]) == dict(fine.counts(), passed=1, failed=1, skipped=0)


def test_coverage_table_text():
    results = [
        CaseResult("a1", "apply", "layout", "passed"),
        CaseResult("a2", "apply", "layout", "passed", borrowed=True),
        CaseResult("a3", "apply", "layout", "failed"),
        CaseResult("a4", "apply", "layout", "xfailed"),
        CaseResult("a5", "apply", "layout", "xpassed"),
        CaseResult("a6", "apply", "layout", "unsupported", unsupported_reason="config"),
        CaseResult("a7", "apply", "layout", "skipped"),
        CaseResult("s1", "cos_sin", "scaling_long", "unsupported", unsupported_reason="operation"),
        CaseResult("s2", "cos_sin", "scaling_long", "unsupported", unsupported_reason="operation"),
        CaseResult("s3", "cos_sin", "scaling_long", "unsupported"),
    ]
    head = "bug class        cases       ran    passed  borrowed    failed   unsupp.  unsupported because"
    expected = [
        "coverage (applicable cases per bug class):",
        head,
        "-" * len(head),
        "layout               6         5         2         1         2         1  1 config not expressible",
        "scaling_long         3         0         0         0         0         3"
        "  NOT COVERED: 1 not implemented, 2 operation missing",
    ]
    assert SuiteReport({}, results, [], 0.0).coverage_table() == "\n".join(expected)
    assert SuiteReport({}, [results[6]], [], 0.0).coverage_table() == ""
    short = SuiteReport({}, [CaseResult("z", "apply", "ab", "passed")], [], 0.0).coverage_table()
    assert short.splitlines()[1].startswith("bug class     cases")
    assert short.splitlines()[3] == "ab                1         1         1         0         0         0"


def test_coverage_table_counts_xpassed_as_passed_and_xfailed_as_failed():
    """Two xpassed and one xfailed (unequal, so swapping the two cannot give the same row): the stale
    xfails ran and matched, the known failure did not."""
    kinds = ["passed", "xpassed", "xpassed", "xfailed"]
    results = [CaseResult(f"t{i}", "cos_sin", "tables", s) for i, s in enumerate(kinds)]
    row = SuiteReport({}, results, [], 0.0).coverage_table().splitlines()[3]
    assert row == "tables            4         4         3         0         1         0"


def test_failure_details_text():
    report = _report()
    report.results[1].reproducer = "rope-ref conformance run -k '^c2$'"
    report.results[1].comparisons = [_comparison(0.5, passed=True), _comparison(3.0, note="exact element")]
    expected = "\n".join(
        [
            "FAILED c2  [apply, bug class: layout, mismatch]",
            "  worst element out[1, 3]: expected 0.5, got 0.75, tolerance 0.125, error/tolerance 3"
            " (2 of 12 elements out)",
            "  note: exact element",
            "  reproduce: rope-ref conformance run -k '^c2$'",
        ]
    )
    assert report.failure_details() == expected


def test_failure_details_show_the_last_six_message_lines_without_a_comparison():
    lines = [f"line {i}" for i in range(9)]
    r = CaseResult("e1", "apply", "layout", "failed", kind="exception", message="\n".join(lines))
    r.reproducer = "R"
    other = CaseResult("e2", "apply", "layout", "failed", kind="timeout", message="slow", reproducer="S")
    text = SuiteReport(
        {}, [r, CaseResult("p", "apply", "layout", "passed"), other], [], 0.0
    ).failure_details()
    want = ["FAILED e1  [apply, bug class: layout, exception]"] + [f"  line {i}" for i in range(3, 9)]
    want += [
        "  reproduce: R",
        "",
        "FAILED e2  [apply, bug class: layout, timeout]",
        "  slow",
        "  reproduce: S",
    ]
    assert text == "\n".join(want)
    # A mismatch with a worst element does not repeat its message; another kind with one does.
    m = CaseResult("m", "apply", "layout", "failed", kind="mismatch", message="MSG", reproducer="T")
    m.comparisons = [_comparison(2.0)]
    assert "MSG" not in SuiteReport({}, [m], [], 0.0).failure_details()
    m.kind = "non-finite"
    assert "\n  MSG\n" in SuiteReport({}, [m], [], 0.0).failure_details()
    assert "note:" not in SuiteReport({}, [m], [], 0.0).failure_details()


def test_worst_is_the_failing_comparison_with_the_largest_ratio():
    r = CaseResult("w", "apply", "layout", "failed")
    assert r.worst is None
    r.comparisons = [_comparison(50.0, passed=True), _comparison(2.0), _comparison(7.0), _comparison(3.0)]
    assert r.worst.ratio == 7.0
    r.comparisons = [_comparison(0.5, passed=True)]
    assert r.worst is None


def test_case_result_to_dict_fields():
    r = CaseResult("c", "apply", "layout", "passed", duration=0.12345678)
    assert r.to_dict() == {
        "id": "c",
        "op": "apply",
        "bug_class": "layout",
        "status": "passed",
        "duration_s": 0.123457,
    }
    r = CaseResult(
        "d",
        "cos_sin",
        "tables",
        "failed",
        kind="mismatch",
        message="m",
        xfail_reason="x",
        unsupported_reason="dtype",
        borrowed=True,
        reproducer="rep",
    )
    r.comparisons = [Comparison("cos", False, 1, 4, (2,), 1.0, float("nan"), 0.25, float("inf"), "")]
    assert r.to_dict() == {
        "id": "d",
        "op": "cos_sin",
        "bug_class": "tables",
        "status": "failed",
        "duration_s": 0.0,
        "kind": "mismatch",
        "message": "m",
        "xfail_reason": "x",
        "unsupported_reason": "dtype",
        "borrowed": True,
        "reproducer": "rep",
        "worst": {
            "output": "cos",
            "index": [2],
            "expected": 1.0,
            "got": "nan",
            "tolerance": 0.25,
            "ratio": "inf",
            "n_bad": 1,
            "n_total": 4,
        },
    }
    r.comparisons = [Comparison("attention_factor", False, 1, 1, (), 1.0, 2.0, 0.5, 2.0, "")]
    assert r.to_dict()["worst"]["index"] == []


def test_to_json_and_write_json(tmp_path):
    report = _report()
    data = report.to_json()
    assert data["schema"] == "rope-ref-conformance-report/1"
    assert data["backend"] == {"name": "toy", "io_dtype": "float64"}
    assert data["golden"] == "mine" and data["duration_s"] == 1.5
    assert data["counts"]["xpassed"] == 1 and data["applicable"] == 5
    assert data["ok"] is False and data["complete"] is False and data["warnings"] == ["w1"]
    assert [c["id"] for c in data["cases"]] == ["c1", "c2", "c3", "c4", "c5", "c6"]
    report.write_json(tmp_path / "r.json")
    text = (tmp_path / "r.json").read_text(encoding="utf-8")
    assert text.endswith("}\n") and text.startswith('{\n  "schema"')
    assert json.loads(text) == json.loads(json.dumps(data))


def test_junit_xml_elements(tmp_path):
    report = _report()
    report.results[1].reproducer = "REP"
    report.results[0].duration = 0.25
    report.results.append(CaseResult("c7", "apply", "layout", "failed", kind="timeout", message="a\nlast"))
    report.results.append(CaseResult("c8", "apply", "layout", "failed", kind="exception"))
    report.write_junit_xml(tmp_path / "r.xml")
    raw = (tmp_path / "r.xml").read_bytes()
    assert raw.startswith(b"<?xml version='1.0' encoding='utf-8'?>")
    suite = ET.fromstring(raw)
    assert suite.tag == "testsuite"
    assert suite.attrib == {
        "name": "rope-ref conformance (toy)",
        "tests": "8",
        "failures": "3",
        "errors": "0",
        "skipped": "3",
        "time": "1.500",
    }
    props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert props == {"backend.name": "toy", "backend.io_dtype": "float64"}
    cases = {tc.get("name"): tc for tc in suite.findall("testcase")}
    assert cases["c1"].get("classname") == "rope_ref.conformance.apply"
    assert cases["c1"].get("time") == "0.250000" and len(cases["c1"]) == 0
    fail = cases["c2"].find("failure")
    assert fail.get("type") == "mismatch"
    assert fail.get("message") == _comparison(2.0).describe()
    assert fail.text == "out[1, 3]: too far\nreproduce: REP"
    assert cases["c7"].find("failure").get("message") == "last"
    assert cases["c7"].find("failure").text == "a\nlast\nreproduce: "
    assert cases["c8"].find("failure").get("message") == "exception"
    assert cases["c8"].find("failure").text == "reproduce: "
    assert cases["c3"].find("skipped").get("message") == "unsupported (dtype missing): "
    assert cases["c4"].find("skipped").get("message") == "xfailed: known #4"
    assert cases["c5"].find("skipped").get("message") == "skipped: "
    assert cases["c6"].find("skipped") is None
    assert cases["c6"].find("system-out").text == "stale xfail (passed): stale #6"
    anonymous = SuiteReport({}, [], [], 0.0)
    anonymous.write_junit_xml(tmp_path / "a.xml")
    assert ET.parse(tmp_path / "a.xml").getroot().get("name") == "rope-ref conformance (?)"


def test_progress_printer_characters_and_percentages():
    out = io.StringIO()
    show = progress_printer(out)
    kinds = ["passed", "failed", "unsupported", "skipped", "xfailed", "xpassed"]
    for i, status in enumerate(kinds, 1):
        show(i, 6, CaseResult(str(i), "apply", "layout", status))
    assert out.getvalue() == ".Fusx"[:5] + "X [6/6 100%]\n"
    out = io.StringIO()
    show = progress_printer(out)
    for i in range(1, 131):
        show(i, 130, CaseResult(str(i), "apply", "layout", "passed"))
    assert (
        out.getvalue()
        == "." * 64 + " [ 64/130  49%]\n" + "." * 64 + " [128/130  98%]\n" + ".." + " [130/130 100%]\n"
    )


def test_junit_status_is_compared_by_value(tmp_path):
    """Statuses read back from a JSON report are equal to, not identical with, the literals."""
    xpassed, failed = "".join(["x", "passed"]), "".join(["fa", "iled"])
    results = [
        CaseResult("a", "apply", "layout", xpassed, xfail_reason="old"),
        CaseResult("b", "apply", "layout", failed, kind="exception", message="m"),
        CaseResult("c", "apply", "layout", "".join(["un", "supported"])),
    ]
    SuiteReport({}, results, [], 0.0).write_junit_xml(tmp_path / "r.xml")
    cases = {tc.get("name"): tc for tc in ET.parse(tmp_path / "r.xml").getroot().findall("testcase")}
    assert cases["a"].find("system-out").text == "stale xfail (passed): old"
    assert cases["b"].find("failure") is not None
    assert cases["c"].find("skipped") is not None


def test_progress_printer_ends_a_long_run_with_its_count():
    out = io.StringIO()
    show = progress_printer(out)
    n = 300  # above CPython's small-int cache: i and n are equal, distinct int objects
    for i in range(1, n + 1):
        show(i, n, CaseResult(str(i), "apply", "layout", "skipped"))
    lines = out.getvalue().split("\n")
    marks = [" [ 64/300  21%]", " [128/300  42%]", " [192/300  64%]", " [256/300  85%]"]
    assert lines == ["s" * 64 + m for m in marks] + ["s" * 44 + " [300/300 100%]", ""]


def test_progress_callback_and_durations_of_a_run():
    calls = []
    cases = [apply_case("pr-1"), apply_case("pr-2", io_dtype="float32"), apply_case("pr-3")]
    t0 = time.perf_counter()
    report = run(OracleBackend(), cases, progress=lambda i, n, r: calls.append((i, n, r.case_id, r.status)))
    elapsed = time.perf_counter() - t0
    assert calls == [(1, 3, "pr-1", "passed"), (2, 3, "pr-2", "skipped"), (3, 3, "pr-3", "passed")]
    assert 0.0 < report.duration <= elapsed
    assert all(0.0 <= r.duration <= report.duration for r in report.results)
    assert report.results[1].duration == 0.0  # skipped before anything ran


def test_unknown_operation_sorting_before_the_known_ones():
    bogus = table_case("un-op")
    bogus.op = "aaa_op"
    (res,) = run(OracleBackend(), [bogus]).results
    assert (res.status, res.kind) == ("failed", "exception")
    assert res.message.startswith("aaa_op raised ValueError: case 'un-op': unknown op 'aaa_op'")


def test_coverage_counts_statuses_by_value():
    unsupported, passed = "".join(["un", "supported"]), "".join(["pas", "sed"])
    results = [
        CaseResult("a", "apply", "layout", unsupported, unsupported_reason="dtype"),
        CaseResult("b", "apply", "layout", passed),
    ]
    table = SuiteReport({}, results, [], 0.0).coverage_table().splitlines()
    assert (
        table[3] == "layout            2         1         1         0         0         1  1 dtype missing"
    )


def test_suite_report_failures_compare_the_status_by_value():
    """Reports read back from JSON hold equal status strings, not the interned literals."""
    from rope_ref.conformance.runner import CaseResult, SuiteReport

    failed = CaseResult("c-1", "apply", "tables", "".join(["fail", "ed"]), kind="mismatch", message="m")
    passed = CaseResult("c-2", "apply", "tables", "passed")
    report = SuiteReport({"name": "x"}, [failed, passed], [], 0.0)
    assert report.failures == [failed] and not report.ok


def test_suite_report_reads_statuses_and_kinds_by_value():
    """A report rebuilt from JSON: the applicable results, completeness and the failure text."""
    rows = [
        ("c-1", "failed", "exception", "boom\nValueError: bad"),
        ("c-2", "skipped", "", ""),
        ("c-3", "unsupported", "", "no such op"),
        ("c-4", "passed", "", ""),
    ]

    worst = tolerance._worst("out", np.zeros(1), np.array([0.5]), np.zeros(1), np.zeros(1, dtype=bool))

    def report(convert) -> SuiteReport:
        results = [
            CaseResult(i, "apply", "tables", convert(s), kind=convert(k), message=m) for i, s, k, m in rows
        ]
        # a mismatch shows its worst element, not the message (which repeats it)
        results.append(CaseResult("c-5", "apply", "tables", convert("failed"), kind=convert("mismatch"),
                                  message="said twice", comparisons=[worst]))  # fmt: skip
        return SuiteReport({"name": "x"}, results, [], 0.0)

    want, got = report(sys.intern), report(_fresh)
    applicable = [r.case_id for r in got.applicable]
    assert applicable == [r.case_id for r in want.applicable] == ["c-1", "c-3", "c-4", "c-5"]
    assert got.complete is want.complete is False
    assert got.failure_details() == want.failure_details()
    assert "ValueError: bad" in got.failure_details()  # an exception's message is shown
    assert "worst element out[0]" in got.failure_details() and "said twice" not in got.failure_details()
