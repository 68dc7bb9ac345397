"""Issue 21: strings that reach the code from JSON, a CLI or a user are equal to the code's literals but
not the same objects. Every option must be compared by value (a `==` mutated into `is` must fail here).

Each test runs the same call twice, once with interned strings (what literals in the source are) and
once with fresh copies, and demands the same outcome.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any

import numpy as np
import pytest
from rope_ref.conformance import golden, tolerance
from rope_ref.conformance.protocol import PrecisionPolicy
from rope_ref.conformance.runner import CaseResult, SuiteReport

import rope_ref
from rope_ref import RopeConfig


def _fresh(text: str) -> str:
    """An equal string that is not the interned one."""
    out = "".join(list(text))
    assert out == text and (out is not sys.intern(text) or len(text) <= 1)
    return out


def _recursively(value: Any, convert) -> Any:
    if isinstance(value, str):
        return convert(value)
    if isinstance(value, dict):
        return {convert(k) if isinstance(k, str) else k: _recursively(v, convert) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_recursively(v, convert) for v in value)
    return value


def _case_with(case, convert):
    return dataclasses.replace(
        case,
        op=convert(case.op),
        tolerance=convert(case.tolerance),
        config=_recursively(case.config, convert),
        params=_recursively(case.params, convert),
    )


def _policies(convert) -> list[PrecisionPolicy]:
    names = [
        ("float32",) * 3,
        ("bfloat16", "float32", "float32"),
        ("float64",) * 3,
        ("float64", "float32", "float32"),
    ]
    return [PrecisionPolicy(*(convert(n) for n in triple)) for triple in names]


def _one_case_per_kind() -> list:
    kinds: dict[tuple, Any] = {}
    for case in golden.load_golden():
        kinds.setdefault((case.op, case.tolerance), case)
    return list(kinds.values())


@pytest.mark.parametrize("case", _one_case_per_kind(), ids=lambda c: f"{c.op}-{c.tolerance}")
def test_tolerances_of_every_shipped_kind_of_case_compare_strings_by_value(case):
    interned, fresh = _case_with(case, sys.intern), _case_with(case, _fresh)
    for want_policy, got_policy in zip(_policies(sys.intern), _policies(_fresh), strict=True):
        for name in case.expected:
            want = tolerance.element_tolerance(interned, name, want_policy)
            got = tolerance.element_tolerance(fresh, name, got_policy)
            np.testing.assert_array_equal(got.tol, want.tol)
            np.testing.assert_array_equal(got.exact, want.exact)
            assert len(got.norms) == len(want.norms)
            for g, w in zip(got.norms, want.norms, strict=True):
                for a, b in zip(g, w, strict=True):
                    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_round_to_reads_the_dtype_by_value():
    v = np.array([1.0 + 2.0**-9, 3.14159, -7.0e-3])
    for dtype in ("bfloat16", "float16", "float32"):
        np.testing.assert_array_equal(tolerance.round_to(v, _fresh(dtype)), tolerance.round_to(v, dtype))
    assert tolerance.round_to(v, _fresh("bfloat16"))[0] == 1.0  # 1 + 2^-9 is below bf16's half ulp


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


def test_runner_marks_xpassed_from_a_status_read_by_value(monkeypatch):
    from rope_ref.conformance.oracle_backend import OracleBackend
    from rope_ref.conformance.runner import Runner
    from test_mutation_holes_runner import table_case

    runner = Runner(OracleBackend())
    case = table_case("c-1")
    monkeypatch.setattr(runner, "run_case", lambda c: CaseResult(c.id, c.op, c.bug_class, _fresh("passed")))
    report = runner.run([case], xfails={"c-1": "known"})
    assert report.results[0].status == "xpassed"
    assert any("stale xfail: c-1 passed" in w for w in report.warnings)


def test_oracle_options_compare_strings_by_value():
    x = np.random.default_rng(2).standard_normal((3, 8))
    ids = np.array([0.0, 1.0, 9.0])
    # the interleaved layout of a reversed channel view (copied before the complex view)
    got = rope_ref.apply(x[:, ::-1], ids, RopeConfig(8, layout=_fresh("interleaved")))
    np.testing.assert_array_equal(got, rope_ref.apply(x[:, ::-1], ids, RopeConfig(8, layout="interleaved")))
    # ChatGLM-6B 2D: the float64 oracle, not the fp16 emulation
    from rope_ref.chatglm import apply_2d

    np.testing.assert_array_equal(
        apply_2d(x, ids, ids, precision=_fresh("float64")), apply_2d(x, ids, ids, precision="float64")
    )


def test_hf_dynamic_config_read_from_json_needs_max_position_embeddings():
    raw = json.loads(
        '{"model_type": "llama", "hidden_size": 512, "num_attention_heads": 8, '
        '"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}'
    )
    message = r"missing the key 'max_position_embeddings' \(needed by dynamic NTK\)"
    with pytest.raises(ValueError, match=message):
        RopeConfig.from_hf(raw)


def _outcome(call) -> tuple:
    try:
        return ("ok", call())
    except Exception as err:  # the outcome, whatever it is, must not depend on string identity
        return ("raised", type(err), str(err))


@pytest.mark.parametrize(
    "options",
    [{"autograd": "native"}, {"autograd": "function"}, {"kernel": "triton"}, {"kernel": "torch"}],
    ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()),
)
def test_torch_options_compare_strings_by_value(options):
    torch = pytest.importorskip("torch", reason="the torch adapter needs torch")
    from rope_ref.backends import torch as rt

    cfg = RopeConfig(8, layout="half")
    gen = torch.Generator().manual_seed(1)
    x = torch.randn((2, 5, 8), generator=gen, requires_grad=True)
    ids = torch.arange(5)

    def run(convert):
        return _outcome(lambda: rt.apply(x, ids, cfg, **{k: convert(v) for k, v in options.items()}))

    want, got = run(sys.intern), run(_fresh)
    assert got[0] == want[0], (got, want)
    if want[0] == "ok":
        assert torch.equal(got[1].detach(), want[1].detach())
    else:
        assert got[1:] == want[1:]


def test_runner_reads_the_emulation_rule_and_the_io_dtype_by_value():
    from rope_ref.conformance.oracle_backend import OracleBackend
    from test_mutation_holes_runner import F32Glm, _glm_case, apply_case, run

    # fp16 emulation outputs (float64) from a float32-I/O backend: exempt from the I/O dtype check.
    case = _glm_case("g-1", "chatglm-6b-fp16")
    case = dataclasses.replace(case, tolerance=_fresh(case.tolerance), op=_fresh(case.op))
    assert run(F32Glm(), [case]).results[0].status == "passed"

    # Declared bfloat16 I/O, float32 output that bfloat16 cannot hold: a dtype failure either way.
    class Bf16As32(OracleBackend):
        precision = PrecisionPolicy(_fresh("bfloat16"), "float32", "float32")

        def from_numpy(self, array, dtype=None):
            return np.array(array, dtype=np.float32 if dtype is not None else array.dtype, copy=True)

        def apply(self, x, positions, cfg, seq_len=None):
            y = rope_ref.apply(np.asarray(x, np.float64), positions, cfg, seq_len=seq_len)
            return y.astype(np.float32)

    bf = apply_case("b-1", io_dtype="bfloat16")
    bf.inputs["x"] = tolerance.round_to(bf.inputs["x"], "bfloat16")
    bf.expected["out"] = rope_ref.apply(bf.inputs["x"], bf.inputs["positions"], bf.rope_config())
    (r,) = run(Bf16As32(), [bf]).results
    assert (r.status, r.kind) == ("failed", "dtype"), r.message
    assert "bfloat16 cannot represent" in r.message
