"""What a backend that lacks operations gets from the runner: unsupported reasons, the coverage report, the
per-operation policies and borrowed tables, and ``--require-all`` on the command line.
"""

from __future__ import annotations

import json

import broken_backends as bb
import pytest
from rope_ref.conformance import multimodal
from rope_ref.conformance.protocol import Backend, PrecisionPolicy, Unsupported
from rope_ref.conformance.runner import Runner

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


#: Issue 20's operations, which a backend written before issue 15 does not have either.
ISSUE20_OPS = {"multiaxis_apply", "mrope_position_ids", "mrope_decode_ids", "vision_ids", "mla_softmax_scale"}


class _PreIssue20(bb.Float32Backend):
    """A backend written before issue 20: none of the multi-axis operations."""

    multiaxis_apply = Backend.multiaxis_apply
    mrope_position_ids = Backend.mrope_position_ids
    mrope_decode_ids = Backend.mrope_decode_ids
    vision_ids = Backend.vision_ids
    mla_softmax_scale = Backend.mla_softmax_scale


class _OldBackend(_PreIssue20):
    """A backend written before issue 15: no next_position_ids, and no cos_sin for scaled configs."""

    chatglm_next_position_ids = Backend.chatglm_next_position_ids

    def cos_sin(self, positions, cfg, seq_len=None):
        if cfg.scaling is not None:
            raise NotImplementedError("scaled tables are internal")
        return super().cos_sin(positions, cfg, seq_len)


def make_old_backend(precision: str | None = None) -> _OldBackend:
    """``module:attr`` factory for the CLI test."""
    return _OldBackend({"fp16": "float16", "bf16": "bfloat16"}.get(precision or "", "float32"))


def test_old_backend_runs_every_old_case_and_reports_reasons(cases):
    report = Runner(_OldBackend("float32")).run(cases)
    assert report.ok, report.failure_details()
    unsupported = [r for r in report.results if r.status == "unsupported"]
    by_reason = {}
    for r in unsupported:
        by_reason.setdefault(r.unsupported_reason, set()).add(r.op)
    assert by_reason == {"operation": {"chatglm_next_position_ids", *ISSUE20_OPS}, "config": {"cos_sin"}}
    table = report.coverage_table()
    assert "chatglm_incremental" in table and "NOT COVERED: 4 operation missing" in table
    assert "config not expressible" in table
    assert not report.complete


class _PolicyBackend(bb.Float32Backend):
    """Declares float64 angles for cos_sin only; takes inv_freq from the oracle; no bf16 for decay."""

    oracle_tables = frozenset({"inv_freq"})

    def __init__(self, io_dtype="float32"):
        super().__init__(io_dtype)
        self.precision_by_op = {"cos_sin": PrecisionPolicy(io_dtype, "float64", "float64")}

    def decay_upper_bound(self, distances, cfg):
        raise Unsupported("decay needs float64 accumulation", "dtype")


def test_per_op_policy_borrowed_tables_and_dtype_reason(cases):
    report = Runner(_PolicyBackend("float32")).run(cases)
    res = {r.case_id: r for r in report.results}
    # float32 cos/sin judged under a declared float64 policy must fail (the policy is honoured) ...
    assert res["cos_sin-d64_precision_positions"].status == "failed"
    assert res["apply-layout_half_d64-fp32"].status == "passed"  # ... the rest keeps its own policy
    assert res["inv_freq-default_d64_base10000"].borrowed
    assert res["decay_upper_bound-d128_base10000"].unsupported_reason == "dtype"
    assert "dtype missing" in report.coverage_table()
    assert json.loads(json.dumps(report.to_json()))["cases"][0].get("borrowed") is True


def test_cli_require_all_and_coverage_after_verdict(capsys):
    from rope_ref.cli import main

    backend = "test_runner_coverage:make_old_backend"
    argv = ["conformance", "run", "--backend", backend, "-q", "--precision", "fp32"]
    assert main(argv + ["-k", "chatglm_next|^apply-layout"]) == 0
    out = capsys.readouterr().out
    last = out.rstrip("\n").splitlines()[-1]  # the verdict is the last line, after the coverage table
    assert last.startswith("PASSED: 2 passed, 0 failed, 4 unsupported (4 operation missing)")
    assert "skipped (generated for another I/O dtype)" in last and "2 of 6 applicable cases ran" in last
    assert out.index("coverage (applicable cases per bug class)") < out.index("PASSED:")
    assert "cases:   6 of " in out.split("coverage")[0]  # said up front, before the tables
    assert main(argv + ["-k", "chatglm_next|^apply-layout", "--require-all"]) == 1
    assert capsys.readouterr().out.rstrip("\n").splitlines()[-1].startswith("FAILED:")


def test_an_old_backend_reports_the_new_operations_missing(cases):
    chosen = [c for c in cases if c.op in multimodal.MULTIMODAL_OPS]
    report = Runner(_PreIssue20("float32")).run(chosen)
    assert report.ok and report.counts()["passed"] == 0
    ran = [r for r in report.results if r.status != "skipped"]
    assert ran and all(r.status == "unsupported" and r.unsupported_reason == "operation" for r in ran)
    assert "operation missing" in report.coverage_table()
