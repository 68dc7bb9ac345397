"""Which cases the conformance runner runs: pattern selection with its chains, reproducers, skipped cases,
the executed list and the runner's defaults and keyword-only options.
"""

from __future__ import annotations

import re
import shlex

import pytest
from rope_ref.conformance.oracle_backend import OracleBackend
from rope_ref.conformance.protocol import PrecisionPolicy
from rope_ref.conformance.runner import DEFAULT_TIMEOUT, Runner, select_cases
from small_cases import apply_case, rotation_case, run


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


def test_runner_options_are_keyword_only():
    with pytest.raises(TypeError):
        Runner(OracleBackend(), 5.0)


@pytest.mark.parametrize("cid", ["apply-half.d8[0]", "a+b(c)|d", "x^y$z*", "back\\slash{2}"])
def test_reproducer_pattern_selects_exactly_its_case(cid):
    runner = Runner(OracleBackend(), spec="test")
    argv = shlex.split(runner.reproducer(cid))
    pattern = argv[argv.index("-k") + 1]
    assert re.search(pattern, cid)
    decoys = [cid + "x", "x" + cid, cid.replace(cid[1], "Q", 1), re.sub(r"[^A-Za-z0-9]", "_", cid)]
    cases = [rotation_case(c) for c in [*decoys, cid]]
    assert [c.id for c in select_cases(cases, pattern)] == [cid]
