"""The runner's reports, xfails, selection and per-case bookkeeping, pinned down (issue 21).

Each test fails on some single-point change of ``conformance/runner.py`` that the older tests let
through. Verdicts come from :class:`Runner` and :class:`SuiteReport` themselves; the expected text of a
report is written out by hand from the documented format (fixed-width columns, one block per failure),
and the expected counts are counted by hand from the results each test builds.
"""

from __future__ import annotations

import io
import json
import threading
import time
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from rope_ref.conformance.case import Case
from rope_ref.conformance.oracle_backend import OracleBackend
from rope_ref.conformance.protocol import Backend, PrecisionPolicy, Unsupported
from rope_ref.conformance.runner import (
    DEFAULT_TIMEOUT,
    STATUSES,
    CaseResult,
    Runner,
    SuiteReport,
    load_xfails,
    progress_printer,
    select_cases,
)
from rope_ref.conformance.tolerance import Comparison

import rope_ref

CFG8 = {"head_dim": 8, "layout": "half", "base": 10000.0}


def apply_case(cid: str, io_dtype: str | None = "float64", seed: int = 3) -> Case:
    x = np.random.default_rng(seed).standard_normal((3, 8))
    pos = np.array([0.0, 2.0, 9.0])
    case = Case(cid, "apply", dict(CFG8), {"x": x, "positions": pos}, {}, "layout", "rotation", {}, io_dtype)
    case.expected["out"] = rope_ref.apply(x, pos, case.rope_config())
    return case


def table_case(cid: str, op: str = "inv_freq") -> Case:
    cfg = {"head_dim": 4, "layout": "half", "base": 10000.0}
    # inv_freq of head_dim 4, base 10000: 10000^0 = 1 and 10000^(-1/2) = 0.01 (exact decimal inputs).
    expected = {"inv_freq": np.array([1.0, 0.01]), "attention_factor": np.array(1.0)}[op]
    return Case(cid, op, cfg, {}, {"out": expected}, "tables", "table")


def run(backend, cases, **kw):
    return Runner(backend, timeout=kw.pop("timeout", 30.0), spec="spec-x").run(cases, **kw)


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


# -- the report tables ----------------------------------------------------------------------------------


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


# -- serialised reports -------------------------------------------------------------------------------


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


# -- xfail files and their application --------------------------------------------------------------------


def test_load_xfails_text_format(tmp_path):
    path = tmp_path / "x.txt"
    path.write_text(
        "\n   \n# a comment\n  apply-a   known bug #1  \napply-*\tglob reason\n", encoding="utf-8"
    )
    assert load_xfails(path) == {"apply-a": "known bug #1", "apply-*": "glob reason"}
    assert load_xfails(str(path)) == {"apply-a": "known bug #1", "apply-*": "glob reason"}
    path.write_text("ok  fine\n\nlonely\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"line 3: entry 'lonely' needs a reason after the id"):
        load_xfails(path)


def test_load_xfails_json_format_and_errors(tmp_path):
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"a": "  reason a ", "b*": "glob"}), encoding="utf-8")
    assert load_xfails(path) == {"a": "reason a", "b*": "glob"}
    for bad, message in [
        ("{not json", "is not valid JSON"),
        ("[1, 2]", "must hold a JSON object"),
        (json.dumps({"a": ""}), "entry 'a' needs a non-empty reason string"),
        (json.dumps({"a": "   "}), "entry 'a' needs a non-empty reason string"),
        (json.dumps({"a": 3}), "entry 'a' needs a non-empty reason string"),
    ]:
        path.write_text(bad, encoding="utf-8")
        with pytest.raises(ValueError, match=message):
            load_xfails(path)
    with pytest.raises(ValueError, match="cannot read xfail file"):
        load_xfails(tmp_path / "missing.txt")


class Doubles(OracleBackend):
    """Every ``apply`` output doubled: fails every apply case."""

    def apply(self, x, positions, cfg, seq_len=None):
        return super().apply(x, positions, cfg, seq_len) * 2.0


def test_xfail_exact_id_wins_over_a_glob_and_globs_are_case_sensitive():
    cases = [apply_case("apply-a"), apply_case("apply-b")]
    xfails = {"apply-*": "glob", "apply-b": "exact", "APPLY-A": "upper case"}
    report = run(Doubles(), cases, xfails=xfails)
    assert [(r.status, r.xfail_reason) for r in report.results] == [("xfailed", "glob"), ("xfailed", "exact")]
    assert report.warnings == ["stale xfail: entry 'APPLY-A' matches no selected case"]
    assert report.ok


def test_xpassed_and_skipped_cases_with_an_xfail_entry():
    cases = [apply_case("apply-a"), apply_case("apply-s", io_dtype="float32")]
    report = run(OracleBackend(), cases, xfails={"apply-a": "gone", "apply-s": "other dtype"})
    assert [r.status for r in report.results] == ["xpassed", "skipped"]
    assert report.results[1].xfail_reason == "other dtype"
    assert report.warnings == ["stale xfail: apply-a passed (entry 'apply-a': gone)"]
    # strict mode is the caller's: an xpassed run is still ok here
    assert report.ok


def test_select_cases_without_pattern_keeps_everything_and_follows_chains():
    a, b, c, d = (apply_case(f"k-{n}") for n in "abcd")
    d.requires = ["k-b"]
    b.requires = ["k-a"]
    assert select_cases([a, b, c, d]) == [a, b, c, d]
    assert select_cases([a, b, c, d], "d") == [a, b, d]
    assert select_cases([a, b, c, d], "k-[cd]") == [a, b, c, d]
    assert select_cases([a, b, c, d], "zzz") == []
    with pytest.raises(ValueError, match=r"-k '\[' is not a valid regular expression"):
        select_cases([a], "[")


# -- per-case bookkeeping ------------------------------------------------------------------------------


def test_runner_defaults_and_suite_backend_info():
    assert DEFAULT_TIMEOUT == 60.0
    runner = Runner(OracleBackend())
    assert runner.timeout == 60.0 and isinstance(runner.timeout, float)
    assert runner.spec == "numpy" and runner.executed == set()
    assert Runner(OracleBackend(), timeout=2).timeout == 2.0
    with pytest.raises(TypeError, match="must be a rope_ref.conformance.Backend, got object"):
        Runner(object())

    class Declared(OracleBackend):
        name, version, device = "decl", "9.1", "cuda:7"
        precision = PrecisionPolicy("float64", "float32", "float64")
        inplace = True

    report = Runner(Declared(), golden="/g").run([apply_case("i-1")])
    assert report.backend == {
        "spec": "decl",
        "name": "decl",
        "version": "9.1",
        "device": "cuda:7",
        "io_dtype": "float64",
        "angle_dtype": "float32",
        "compute_dtype": "float64",
        "inplace": "true",
    }
    assert report.golden == "/g" and report.duration >= 0.0
    assert run(OracleBackend(), [apply_case("i-2")]).backend["inplace"] == "false"
    assert run(OracleBackend(), [apply_case("i-2")]).golden == "shipped"


def test_reproducer_carries_precision_and_golden():
    r = Runner(OracleBackend(), spec="mod:Cls", precision="fp32", golden="/tmp/my golden")
    want = "rope-ref conformance run --backend mod:Cls --precision fp32 --golden '/tmp/my golden'"
    assert r.reproducer("a.b") == want + " -k '^a\\.b$'"
    assert Runner(OracleBackend()).reproducer("c") == "rope-ref conformance run --backend numpy -k '^c$'"


def test_executed_records_run_cases_but_not_skipped_ones():
    runner = Runner(OracleBackend(), spec="t")
    runner.run([apply_case("e-1"), apply_case("e-2", io_dtype="float32"), apply_case("e-3", io_dtype=None)])
    assert runner.executed == {"e-1", "e-3"}


def test_skipped_case_message_names_both_dtypes():
    (r,) = run(OracleBackend(), [apply_case("s-1", io_dtype="bfloat16")]).results
    assert r.status == "skipped"
    assert r.message == "inputs quantised for io dtype bfloat16; backend declares float64"
    assert r.reproducer.endswith("-k '^s-1$'")


class DtypeRecorder(OracleBackend):
    precision = PrecisionPolicy("float32", "float32", "float32")

    def __init__(self):
        self.asked = {}

    def from_numpy(self, array, dtype=None):
        self.asked[len(self.asked)] = dtype
        return np.array(array, dtype=np.float32 if dtype is not None else array.dtype, copy=True)

    def apply(self, x, positions, cfg, seq_len=None):
        out = rope_ref.apply(np.asarray(x, np.float64), positions, cfg, seq_len=seq_len)
        return out.astype(np.asarray(x).dtype)


def test_activations_take_the_io_dtype_and_other_inputs_keep_theirs():
    case = apply_case("d-1", io_dtype="float32")
    case.inputs["x"] = case.inputs["x"].astype(np.float32).astype(np.float64)
    case.expected["out"] = rope_ref.apply(case.inputs["x"], case.inputs["positions"], case.rope_config())
    backend = DtypeRecorder()
    (r,) = run(backend, [case]).results
    assert r.status == "passed", r.message
    assert backend.asked == {0: "float32", 1: None}  # x, then positions
    free = apply_case("d-2", io_dtype=None)
    backend = DtypeRecorder()
    (r,) = run(backend, [free]).results
    assert backend.asked == {0: None, 1: None}  # an I/O-free case hands stored dtypes through
    # apply's output is an activation: float64 from a backend declaring float32 I/O is a dtype failure.
    assert (r.status, r.kind) == ("failed", "dtype")
    assert r.message == "output 'out' has dtype float64; the backend declares io dtype float32"


# -- unsupported reasons, borrowed passes, failure kinds -----------------------------------------------


class RaisesUnsupported(OracleBackend):
    def apply(self, x, positions, cfg, seq_len=None):
        raise Unsupported("no bf16 kernel", "dtype")


class RaisesBareNotImplemented(OracleBackend):
    def apply(self, x, positions, cfg, seq_len=None):
        raise NotImplementedError


class Minimal(Backend):
    """Overrides nothing but conversion: every operation is the protocol's own stub."""

    def from_numpy(self, array, dtype=None):
        return np.array(array, copy=True)

    def to_numpy(self, array):
        return np.asarray(array)


def test_unsupported_reasons_and_messages():
    (r,) = run(RaisesUnsupported(), [apply_case("u-1")]).results
    assert (r.status, r.unsupported_reason) == ("unsupported", "dtype")
    assert r.message == "apply raised NotImplementedError: no bf16 kernel"
    assert (r.kind, r.comparisons) == ("", [])
    (r,) = run(RaisesBareNotImplemented(), [apply_case("u-2")]).results
    assert (r.status, r.unsupported_reason) == ("unsupported", "config")
    assert r.message == "apply raised NotImplementedError"
    (r,) = run(Minimal(), [apply_case("u-3")]).results
    assert (r.status, r.unsupported_reason) == ("unsupported", "operation")


class BorrowsTables(OracleBackend):
    oracle_tables = frozenset({"inv_freq"})


class BorrowsWrongTables(BorrowsTables):
    def inv_freq(self, cfg, seq_len=None):
        return super().inv_freq(cfg, seq_len) * 2.0


def test_borrowed_only_for_passing_cases_of_listed_operations():
    cases = [table_case("b-1"), apply_case("b-2")]
    assert [r.borrowed for r in run(BorrowsTables(), cases).results] == [True, False]
    assert [r.borrowed for r in run(OracleBackend(), cases).results] == [False, False]
    (r, _) = run(BorrowsWrongTables(), cases).results
    assert (r.status, r.borrowed) == ("failed", False)


class HalfNaN(OracleBackend):
    def apply(self, x, positions, cfg, seq_len=None):
        out = super().apply(x, positions, cfg, seq_len)
        out[2, 1] = np.inf
        return out


def test_failure_kinds_and_messages_of_bad_values():
    (r,) = run(Doubles(), [apply_case("k-1")]).results
    assert (r.status, r.kind) == ("failed", "mismatch")
    bad = [c for c in r.comparisons if not c.passed]
    assert len(bad) == 2 and r.message == "\n".join(c.describe() for c in bad)
    (r,) = run(HalfNaN(), [apply_case("k-2")]).results
    assert (r.status, r.kind) == ("failed", "non-finite")
    assert r.worst.index == (2, 1)
    assert r.duration > 0.0


class Raises(OracleBackend):
    def apply(self, x, positions, cfg, seq_len=None):
        raise KeyError("boom")


def test_exception_message_names_the_type_and_the_traceback():
    (r,) = run(Raises(), [apply_case("x-1")]).results
    assert (r.status, r.kind) == ("failed", "exception")
    assert r.message.startswith("apply raised KeyError: 'boom'\nTraceback (most recent call last):")
    assert r.message.endswith("KeyError: 'boom'")


# -- output checks: tuples, dtypes, integer ids ------------------------------------------------------------


class ListCosSin(OracleBackend):
    def cos_sin(self, positions, cfg, seq_len=None):
        return list(super().cos_sin(positions, cfg, seq_len))


class IntTable(OracleBackend):
    def inv_freq(self, cfg, seq_len=None):
        return np.array([1, 0])


class F32CosSin(OracleBackend):
    precision = PrecisionPolicy("float32", "float32", "float32")

    def from_numpy(self, array, dtype=None):
        return np.array(array, dtype=np.float32 if dtype is not None else array.dtype, copy=True)

    def cos_sin(self, positions, cfg, seq_len=None):
        return tuple(v.astype(np.float64) for v in super().cos_sin(positions, cfg, seq_len))


def cos_sin_case(cid: str) -> Case:
    pos = np.array([0.0, 4.0])
    case = Case(cid, "cos_sin", dict(CFG8), {"positions": pos}, {}, "tables", "trig")
    cos, sin = rope_ref.cos_sin(pos, case.rope_config())
    case.expected = {"cos": cos, "sin": sin}
    return case


def test_outputs_may_be_a_list_and_tables_need_not_be_in_the_io_dtype():
    assert run(ListCosSin(), [cos_sin_case("o-1")]).results[0].status == "passed"
    # cos/sin are not activations: a float32-I/O backend may return them in float64
    assert run(F32CosSin(), [cos_sin_case("o-2")]).results[0].status == "passed"
    (r,) = run(IntTable(), [table_case("o-3")]).results
    assert (r.status, r.kind) == ("failed", "dtype")
    assert r.message == "output 'out' has dtype int64, expected a floating-point array"


def test_wrong_shape_message():
    class Short(OracleBackend):
        def apply(self, x, positions, cfg, seq_len=None):
            return super().apply(x, positions, cfg, seq_len)[:2]

    (r,) = run(Short(), [apply_case("sh-1")]).results
    assert (r.status, r.kind, r.message) == (
        "failed",
        "shape",
        "output 'out' has shape (2, 8), expected (3, 8)",
    )


def test_tuple_length_message():
    class Three(OracleBackend):
        def cos_sin(self, positions, cfg, seq_len=None):
            return (*super().cos_sin(positions, cfg, seq_len), None)

    (r,) = run(Three(), [cos_sin_case("tl-1")]).results
    assert r.message == "cos_sin returned tuple, expected a tuple of 2 (cos, sin)"


BOS, MASK, GMASK = 130004, 130000, 130001


def ids_case(cid: str) -> Case:
    """ChatGLM-6B ids of [5, 6, [gMASK], <sop>, 7]: positions 0 1 2 2 2, blocks 0 0 0 1 2 (by hand)."""
    params = {
        "bos_token_id": BOS,
        "mask_token_id": MASK,
        "gmask_token_id": GMASK,
        "position_encoding_2d": True,
    }
    expected = np.array([[[0, 1, 2, 2, 2], [0, 0, 0, 1, 2]]])
    inputs = {"input_ids": np.array([[5, 6, GMASK, BOS, 7]])}
    return Case(cid, "chatglm_position_ids", None, inputs, {"out": expected}, "chatglm", "exact", params)


class NarrowIds(OracleBackend):
    dtype = np.uint16

    def chatglm_position_ids(self, input_ids, **kw):
        return super().chatglm_position_ids(input_ids, **kw).astype(self.dtype)


class BoolIds(NarrowIds):
    dtype = np.bool_


def test_exact_ids_accept_any_integer_width_and_nothing_else():
    assert run(OracleBackend(), [ids_case("id-1")]).results[0].status == "passed"
    assert run(NarrowIds(), [ids_case("id-2")]).results[0].status == "passed"
    (r,) = run(BoolIds(), [ids_case("id-3")]).results
    assert (r.status, r.kind) == ("failed", "dtype")
    assert r.message == "output 'out' has dtype bool, expected an integer array"


class F16Returns32(OracleBackend):
    precision = PrecisionPolicy("float16", "float32", "float32")

    def from_numpy(self, array, dtype=None):
        return np.array(array, dtype=np.float16 if dtype is not None else array.dtype, copy=True)

    def apply(self, x, positions, cfg, seq_len=None):
        return rope_ref.apply(np.asarray(x, np.float64), positions, cfg, seq_len=seq_len).astype(self.out)

    out = np.float32


class F16Returns16(F16Returns32):
    out = np.float16


def _f16_case(cid: str) -> Case:
    case = apply_case(cid, io_dtype="float16")
    x = case.inputs["x"].astype(np.float16).astype(np.float64)
    case.inputs["x"] = x
    case.expected["out"] = rope_ref.apply(x, case.inputs["positions"], case.rope_config())
    return case


def test_float16_io_accepts_only_float16_output():
    assert run(F16Returns16(), [_f16_case("h-1")]).results[0].status == "passed"
    (r,) = run(F16Returns32(), [_f16_case("h-2")]).results
    assert (r.status, r.kind) == ("failed", "dtype")
    assert r.message == "output 'out' has dtype float32; the backend declares io dtype float16"


class F32Glm(OracleBackend):
    """fp16-emulation ChatGLM rotation returned in float64 by a float32-I/O backend: allowed (emulation)."""

    precision = PrecisionPolicy("float32", "float32", "float32")

    def from_numpy(self, array, dtype=None):
        return np.array(array, dtype=np.float32 if dtype is not None else array.dtype, copy=True)


def _glm_case(cid: str, precision: str) -> Case:
    x = np.random.default_rng(5).standard_normal((3, 8)).astype(np.float32).astype(np.float64)
    pos, blk = np.array([0, 2, 2]), np.array([0, 0, 1])
    inputs = {"x": x, "position_ids": pos, "block_position_ids": blk}
    rule = "emulation" if precision == "chatglm-6b-fp16" else "rotation"
    params = {"base": 10000.0, "precision": precision}
    case = Case(cid, "chatglm_apply_2d", None, inputs, {}, "chatglm", rule, params, "float32")
    case.expected["out"] = rope_ref.chatglm.apply_2d(x, pos, blk, precision=precision)
    return case


def test_emulation_outputs_are_exempt_from_the_io_dtype_check():
    assert run(F32Glm(), [_glm_case("g-1", "chatglm-6b-fp16")]).results[0].status == "passed"
    (r,) = run(F32Glm(), [_glm_case("g-2", "float64")]).results
    assert (r.status, r.kind) == ("failed", "dtype")


class MutatesBackendCopy(OracleBackend):
    """Writes into the converted array it was handed (a copy): only the backend array changes."""

    def apply(self, x, positions, cfg, seq_len=None):
        out = super().apply(x, positions, cfg, seq_len)
        positions[0] = 99.0
        return out


class MutatesHanded(OracleBackend):
    """Converts by copying but keeps the NumPy arrays it was handed, and writes into x's later."""

    def from_numpy(self, array, dtype=None):
        self.handed = getattr(self, "handed", []) + [array]
        return super().from_numpy(array, dtype)

    def apply(self, x, positions, cfg, seq_len=None):
        out = super().apply(x, positions, cfg, seq_len)
        self.handed[0][1, 2] += 1.0
        return out


def test_mutation_messages_name_the_input_and_which_array():
    (r,) = run(MutatesBackendCopy(), [apply_case("m-1")]).results
    assert (r.status, r.kind) == ("failed", "mutation")
    assert (
        r.message
        == "apply changed its input 'positions' (backend array) but the backend does not declare inplace=True"
    )
    (r,) = run(MutatesHanded(), [apply_case("m-2")]).results
    assert (r.status, r.kind) == ("failed", "mutation")
    assert r.message == (
        "apply changed its input 'x' (NumPy array handed to from_numpy) "
        "but the backend does not declare inplace=True"
    )


class ReshapesInput(OracleBackend):
    """Replaces its input's shape in place (same values, other shape): still a change."""

    def apply(self, x, positions, cfg, seq_len=None):
        out = super().apply(x, positions, cfg, seq_len)
        positions.shape = (3, 1)
        return out


def test_a_reshaped_input_counts_as_changed():
    (r,) = run(ReshapesInput(), [apply_case("m-3")]).results
    assert (r.status, r.kind) == ("failed", "mutation")


class NaNInputsUntouched(OracleBackend):
    pass


def test_nan_inputs_left_alone_are_not_a_mutation():
    case = apply_case("m-4")
    case.inputs["x"][1, 1] = np.nan
    case.expected["out"] = rope_ref.apply(case.inputs["x"], case.inputs["positions"], case.rope_config())
    (r,) = run(NaNInputsUntouched(), [case]).results
    assert r.kind != "mutation"


# -- per-operation policies and the operations the runner dispatches ---------------------------------------


class F32AnglesForTables(OracleBackend):
    """float32 inv_freq (its table path) on a float64 backend that declares it per operation."""

    precision_by_op = {"inv_freq": PrecisionPolicy("float64", "float32", "float64")}  # noqa: RUF012

    def inv_freq(self, cfg, seq_len=None):
        return super().inv_freq(cfg, seq_len).astype(np.float32).astype(np.float64) * (1 + 2.0**-22)


def test_each_operation_is_judged_under_its_declared_policy():
    case = table_case("p-1")
    assert run(F32AnglesForTables(), [case]).results[0].status == "passed"

    class Undeclared(F32AnglesForTables):
        precision_by_op = {}  # noqa: RUF012

    assert run(Undeclared(), [case]).results[0].status == "failed"


def _dyn_cfg() -> dict:
    scaling = {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 64}
    return {"head_dim": 4, "layout": "half", "base": 10000.0, "scaling": scaling}


def test_seq_len_parameter_reaches_the_backend():
    """Dynamic NTK at seq_len 256 > 64: base' = 10000 (2 * 256 / 64 - 1)^(4 / 2) = 490000,
    inv_freq = [1, 490000^(-1/2)] = [1, 1/700]."""
    case = Case("q-1", "inv_freq", _dyn_cfg(), {}, {"out": np.array([1.0, 1.0 / 700.0])}, "scaling", "table")
    case.params["seq_len"] = 256
    assert run(OracleBackend(), [case]).results[0].status == "passed"
    plain = Case("q-2", "inv_freq", _dyn_cfg(), {}, {"out": np.array([1.0, 0.01])}, "scaling", "table")
    assert run(OracleBackend(), [plain]).results[0].status == "passed"


def test_every_dispatched_operation_runs():
    cfg = Case("c", "apply", dict(CFG8), {}, {}, "", "").rope_config()
    x = np.random.default_rng(9).standard_normal((3, 8))
    pos = np.array([0.0, 1.0, 3.0])
    g = np.random.default_rng(10).standard_normal((3, 8))
    vjp = Case(
        "v-1", "apply_vjp", dict(CFG8), {"x": x, "positions": pos, "grad_out": g}, {}, "layout", "rotation"
    )
    vjp.expected["out"] = rope_ref.apply(g, -pos, cfg)  # R(theta)^T g = R(-theta) g
    af = table_case("v-2", "attention_factor")
    r = np.array([0.0, 1.0, 10.0])
    decay = Case("v-3", "decay_upper_bound", dict(CFG8), {"distances": r}, {}, "decay", "decay")
    decay.expected["out"] = rope_ref.decay.relative_upper_bound(r, cfg)
    nxt = ids_case("v-4")
    nxt.op = "chatglm_next_position_ids"
    # the last token: [mask_position, seq_len - context_length] = [2, 5 - 3]
    nxt.expected["out"] = np.array([[[2], [2]]])
    glm = _glm_case("v-5", "float64")
    glm.io_dtype = "float64"
    report = run(OracleBackend(), [vjp, af, decay, nxt, glm])
    assert [(x.status, x.message) for x in report.results] == [("passed", "")] * 5
    bogus = table_case("v-6")
    bogus.op = "no_such_op"
    (res,) = run(OracleBackend(), [bogus]).results
    assert (res.status, res.kind) == ("failed", "exception")
    assert res.message.startswith("no_such_op raised ValueError: case 'v-6': unknown op 'no_such_op'")


def test_runner_options_are_keyword_only():
    with pytest.raises(TypeError):
        Runner(OracleBackend(), 5.0)


def test_xfail_files_without_a_json_suffix_are_text(tmp_path):
    for name in ("xfails", "x.cfg", "x.JSON5", "x.js"):
        path = tmp_path / name
        path.write_text("apply-a  text entry\n", encoding="utf-8")
        assert load_xfails(path) == {"apply-a": "text entry"}, name


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


def test_load_xfails_refuses_json_nested_too_deeply(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 200_000 + "]" * 200_000, encoding="utf-8")
    with pytest.raises(ValueError, match="is not valid JSON"):
        load_xfails(path)


class RecordsThread(OracleBackend):
    def apply(self, x, positions, cfg, seq_len=None):
        me = threading.current_thread()
        self.seen = (me.name, me.daemon, me is threading.main_thread())
        return super().apply(x, positions, cfg, seq_len)


def test_each_case_runs_in_a_named_daemon_worker_thread():
    """A daemon thread, so that a call that never returns cannot keep the interpreter alive at exit."""
    backend = RecordsThread()
    run(backend, [apply_case("thr-1")])
    assert backend.seen == ("rope-ref case thr-1", True, False)


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


class ComplexCosSin(OracleBackend):
    def cos_sin(self, positions, cfg, seq_len=None):
        return tuple(v.astype(np.complex128) for v in super().cos_sin(positions, cfg, seq_len))


class BoolTable(OracleBackend):
    def inv_freq(self, cfg, seq_len=None):
        return np.array([True, False])


def test_complex_and_bool_outputs_are_not_floating_point():
    (r,) = run(ComplexCosSin(), [cos_sin_case("cx-1")]).results
    assert (r.status, r.kind) == ("failed", "dtype")
    assert r.message == "output 'cos' has dtype complex128, expected a floating-point array"
    (r,) = run(BoolTable(), [table_case("cx-2")]).results
    assert (r.status, r.kind, r.message) == (
        "failed",
        "dtype",
        "output 'out' has dtype bool, expected a floating-point array",
    )


def test_unknown_operation_sorting_before_the_known_ones():
    bogus = table_case("un-op")
    bogus.op = "aaa_op"
    (res,) = run(OracleBackend(), [bogus]).results
    assert (res.status, res.kind) == ("failed", "exception")
    assert res.message.startswith("aaa_op raised ValueError: case 'un-op': unknown op 'aaa_op'")


def test_a_call_taking_exactly_the_timeout_is_not_late(monkeypatch):
    """The late-return rule is duration > timeout: a fake clock puts the call at exactly 0.5 s of 0.5 s."""
    import rope_ref.conformance.runner as runner_module

    ticks = iter([0.0, 10.0, 10.5])  # run() start, case start, case end; later reads repeat the last

    def clock(last=[10.5]):  # noqa: B006 - the default is the clock's memory
        last[0] = next(ticks, last[0])
        return last[0]

    monkeypatch.setattr(runner_module.time, "perf_counter", clock)
    (r,) = Runner(OracleBackend(), timeout=0.5, spec="t").run([apply_case("tick-1")]).results
    assert r.duration == 0.5
    assert (r.status, r.kind) == ("passed", "")


def test_fits_means_exactly_representable():
    from rope_ref.conformance.runner import _fits

    assert _fits(np.array([1.0, 0.5, -3.0, np.inf, np.nan]), "float16")
    assert not _fits(np.array([1.0, 1.0 + 2.0**-12]), "float16")  # rounds down to 1.0: not representable
    assert not _fits(np.array([1.0 - 2.0**-13]), "float16")  # rounds up
    assert _fits(np.array([1.0 + 2.0**-7, 2.0**-130]), "bfloat16")
    assert not _fits(np.array([1.0 + 2.0**-23]), "bfloat16")  # only the last float32 bit set
    assert not _fits(np.array([1.0 + 2.0**-8]), "bfloat16")  # the bit just below bfloat16's last


class TrueBf16(OracleBackend):
    """Declares bfloat16 I/O and returns ml_dtypes bfloat16 arrays."""

    precision = PrecisionPolicy("bfloat16", "float32", "float32")

    def from_numpy(self, array, dtype=None):
        import ml_dtypes

        return np.array(array, dtype=ml_dtypes.bfloat16 if dtype is not None else array.dtype, copy=True)

    def to_numpy(self, array):
        return np.asarray(array)

    def apply(self, x, positions, cfg, seq_len=None):
        import ml_dtypes

        return rope_ref.apply(np.asarray(x, np.float64), positions, cfg, seq_len=seq_len).astype(
            ml_dtypes.bfloat16
        )


def test_bfloat16_arrays_are_floating_point_output():
    pytest.importorskip("ml_dtypes")
    import ml_dtypes

    case = apply_case("bf-true", io_dtype="bfloat16")
    case.inputs["x"] = case.inputs["x"].astype(ml_dtypes.bfloat16).astype(np.float64)
    case.expected["out"] = rope_ref.apply(case.inputs["x"], case.inputs["positions"], case.rope_config())
    (r,) = run(TrueBf16(), [case]).results
    assert r.status == "passed", r.message


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


def test_unreadable_xfail_file_message(tmp_path):
    import errno
    import os

    path = tmp_path / "missing.txt"
    with pytest.raises(ValueError) as err:
        load_xfails(path)
    assert str(err.value) == f"cannot read xfail file {str(path)!r}: {os.strerror(errno.ENOENT)}"
