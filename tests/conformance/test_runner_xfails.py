"""Expected failures of the conformance runner: the xfail file formats (text, JSON), their errors, and how
an entry marks a case xfailed, xpassed or leaves it alone.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from equal_strings import fresh as _fresh
from rope_ref.conformance.case import Case
from rope_ref.conformance.catalogue import make_config
from rope_ref.conformance.oracle_backend import OracleBackend
from rope_ref.conformance.runner import CaseResult, Runner, load_xfails
from small_cases import Doubles, apply_case, rotation_case, run, run_one


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


def test_xfail_files_without_a_json_suffix_are_text(tmp_path):
    for name in ("xfails", "x.cfg", "x.JSON5", "x.js"):
        path = tmp_path / name
        path.write_text("apply-a  text entry\n", encoding="utf-8")
        assert load_xfails(path) == {"apply-a": "text entry"}, name


def test_load_xfails_refuses_json_nested_too_deeply(tmp_path):
    path = tmp_path / "deep.json"
    path.write_text("[" * 200_000 + "]" * 200_000, encoding="utf-8")
    with pytest.raises(ValueError, match="is not valid JSON"):
        load_xfails(path)


def test_unreadable_xfail_file_message(tmp_path):
    import errno
    import os

    path = tmp_path / "missing.txt"
    with pytest.raises(ValueError) as err:
        load_xfails(path)
    assert str(err.value) == f"cannot read xfail file {str(path)!r}: {os.strerror(errno.ENOENT)}"


class Unsupported(OracleBackend):
    def apply(self, x, positions, cfg, seq_len=None):
        raise NotImplementedError("not here")


def test_xfail_entries_do_not_apply_to_unsupported_cases():
    report = run_one(Unsupported(), rotation_case("un-1"), xfails={"un-1": "known gap"})
    assert report.results[0].status == "unsupported"
    assert report.counts()["xfailed"] == 0 and report.counts()["xpassed"] == 0


def test_runner_marks_xpassed_from_a_status_read_by_value(monkeypatch):
    from rope_ref.conformance.oracle_backend import OracleBackend
    from rope_ref.conformance.runner import Runner
    from small_cases import table_case

    runner = Runner(OracleBackend())
    case = table_case("c-1")
    monkeypatch.setattr(runner, "run_case", lambda c: CaseResult(c.id, c.op, c.bug_class, _fresh("passed")))
    report = runner.run([case], xfails={"c-1": "known"})
    assert report.results[0].status == "xpassed"
    assert any("stale xfail: c-1 passed" in w for w in report.warnings)


def test_xfail_status_is_compared_by_value(monkeypatch):
    runner = Runner(OracleBackend())
    case = Case("c-1", "inv_freq", make_config(8, "half"), {}, {"out": np.ones(4)}, "tables", "table")

    def failed_result(c):
        return CaseResult(c.id, c.op, c.bug_class, _fresh("failed"), kind="mismatch", message="m")

    monkeypatch.setattr(runner, "run_case", failed_result)
    report = runner.run([case], xfails={"c-1": "known"})
    assert report.results[0].status == "xfailed"
