"""What a comparison of the tolerance model (rope_ref.tolerance) reports: the worst element with its numbers
and notes, empty outputs, refused rules and shapes, immutable results, and the same verdict for strings
that are equal to the code's literals but not the same objects (as a manifest read from JSON gives).
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import numpy as np
import pytest
from equal_strings import fresh as _fresh
from rope_ref.conformance import tolerance
from rope_ref.conformance.case import Case
from rope_ref.conformance.catalogue import make_config
from rope_ref.conformance.protocol import PrecisionPolicy
from rope_ref.conformance.tolerance import check_case
from shipped_golden import shipped_cases
from small_cases import _rot_case, rotation_case

FP32 = PrecisionPolicy("float32", "float32", "float32")


def test_exact_rule_name_read_from_a_manifest_gets_no_rounding_allowance():
    """Integer ids above 2^24: float32 rounding of 2^24 + 1 is 2^24, which the exact rule must refuse even
    under a declared float32 compute dtype (the alternative is for pass-through floats only)."""
    rule = "".join(["ex", "act"])  # equal to, not identical with, the literal
    ids = np.array([[2.0**24 + 1, 5.0]])
    case = Case("t-ids", "chatglm_position_ids", None, {}, {"out": ids}, "chatglm", rule)
    policy = PrecisionPolicy("float64", "float32", "float32")
    (result,) = check_case(case, {"out": np.array([[2.0**24, 5.0]])}, policy)
    assert not result.passed and result.index == (0, 0) and result.ratio == np.inf


def test_unknown_rule_and_shape_mismatch_are_refused():
    case = Case(
        "t-bad", "inv_freq", {"head_dim": 4, "layout": "half", "base": 10000.0}, {}, {}, "t", "roughly"
    )
    case.expected["out"] = np.array([1.0, 0.01])
    with pytest.raises(ValueError, match="case 't-bad': unknown tolerance rule 'roughly'; expected one of"):
        check_case(case, {"out": np.array([1.0, 0.01])}, FP32)
    case.tolerance = "table"
    with pytest.raises(ValueError, match=r"out: got shape \(3,\), expected \(2,\)"):
        check_case(case, {"out": np.zeros(3)}, FP32)


def test_reported_numbers_of_exact_elements():
    """A wrong exact element reports tolerance 0 and an infinite ratio; a right one a ratio of 0."""
    x = np.random.default_rng(48).standard_normal((2, 8))
    case = _rot_case("t-rep", x, np.array([0.0, 0.0]), None)  # every element exact
    (ok, _) = check_case(case, {"out": case.expected["out"].copy()}, FP32)
    assert ok.passed and ok.ratio == 0.0 and ok.n_bad == 0
    bad = case.expected["out"].copy()
    bad[1, 6] += 0.5
    (result, _) = check_case(case, {"out": bad}, FP32)
    assert (result.index, result.tol, result.ratio, result.n_bad) == ((1, 6), 0.0, np.inf, 1)
    ids = Case("t-ids0", "chatglm_position_ids", None, {}, {"out": np.array([[0.0, 1.0]])}, "c", "exact")
    (result,) = check_case(ids, {"out": np.array([[0.0, 1.0]])}, FP32)
    assert result.passed and result.ratio == 0.0 and result.n_total == 2


def test_empty_output_has_no_bad_element():
    case = Case(
        "t-e",
        "inv_freq",
        {"head_dim": 4, "layout": "half", "base": 1e4},
        {},
        {"out": np.zeros(0)},
        "t",
        "table",
    )
    (result,) = check_case(case, {"out": np.zeros(0)}, FP32)
    assert (result.passed, result.n_bad, result.n_total, result.ratio) == (True, 0, 0, 0.0)


def test_bounds_are_immutable():
    import dataclasses

    from rope_ref.conformance.tolerance import element_tolerance

    bounds = element_tolerance(_rot_case("t-imm", np.ones((1, 8)), np.array([1.0]), None), "out", FP32)
    with pytest.raises(dataclasses.FrozenInstanceError):
        bounds.tol = np.zeros(8)


def _table_case(expected: list[float]) -> Case:
    cfg = {"head_dim": 4, "layout": "half", "base": 10000.0}
    return Case("t-table", "inv_freq", cfg, {}, {"out": np.array(expected)}, "tables", "table")


def test_empty_output_passes_with_ratio_zero():
    cfg = {"head_dim": 8, "layout": "half", "base": 10000.0}
    x, pos = np.zeros((0, 8)), np.zeros(0)
    case = Case(
        "t-empty", "apply", cfg, {"x": x, "positions": pos}, {"out": np.zeros((0, 8))}, "layout", "rotation"
    )
    results = check_case(case, {"out": np.zeros((0, 8))}, FP32)
    assert results and all(c.passed and c.ratio == 0.0 and c.n_total == 0 for c in results)


def test_describe_names_the_element_and_the_numbers():
    values = np.array([1.0, 0.5])
    case = _table_case(values.tolist())
    got = values.copy()
    got[1] = 0.75
    (result,) = check_case(case, {"out": got}, FP32)
    text = result.describe()
    assert text.startswith("out[1]: expected 0.5, got 0.75, |err| 0.25, tol ")
    assert text.endswith("; 1 of 2 elements out of tolerance")
    scalar = Case("t-af", "attention_factor", case.config, {}, {"out": np.array(1.0)}, "scaling", "table")
    (one,) = check_case(scalar, {"out": np.array(1.5)}, FP32)
    assert one.describe().startswith("out: expected 1, got 1.5, |err| 0.5, tol ")
    (norm,) = [
        c
        for c in check_case(rotation_case("d-1"), {"out": rotation_case("d-1").expected["out"] * 2}, FP32)
        if "norm" in c.output
    ]
    assert norm.describe().endswith("(|y_pair| must equal A*|x_pair| at any phase)")


def test_rule_names_are_compared_by_value_not_identity():
    """Rule names read from a manifest are not interned: ``"".join(...)`` builds an equal, distinct str."""
    cfg = {"head_dim": 4, "layout": "half", "base": 10000.0}
    rule = "".join(["de", "cay"])
    case = Case(
        "t-decay2",
        "decay_upper_bound",
        cfg,
        {"distances": np.array([3.0])},
        {"out": np.array([1.5])},
        "decay",
        rule,
    )
    (result,) = check_case(case, {"out": np.array([1.5])}, FP32)
    assert result.passed and result.n_total == 1


def test_notes_name_exact_and_non_finite_elements():
    case = rotation_case("n-1")
    good = case.expected["out"]
    passed = check_case(case, {"out": good}, FP32)
    assert all(c.passed for c in passed)
    assert [c.note for c in passed] == ["", "|y_pair| must equal A*|x_pair| at any phase"]
    exact_bad = good.copy()
    exact_bad[0, 1] += 1e-3  # row 0 is position 0: exact
    (element, _) = check_case(case, {"out": exact_bad}, FP32)
    assert element.index == (0, 1) and element.note == "exact element (pass-through or position 0)"
    nan_bad = good.copy()
    nan_bad[2, 3] = np.nan
    element, norm = check_case(case, {"out": nan_bad}, FP32)
    assert element.index == (2, 3) and element.note == "non-finite value" and element.ratio == np.inf
    assert norm.note == "|y_pair| must equal A*|x_pair| at any phase; non-finite value"


def test_table_rule_reads_the_op_name_by_value():
    """An op name read from a manifest is an equal string, not the interned literal: the YaRN
    (truncate=False) ramp term of inv_freq must still be added."""
    scaling = {
        "rope_type": "yarn",
        "factor": 8.0,
        "original_max_position_embeddings": 4096,
        "beta_fast": 32.0,
        "beta_slow": 1.0,
        "truncate": False,
    }
    cfg = {"head_dim": 32, "layout": "half", "base": 10000.0, "scaling": scaling}
    theta = np.ones(16)
    literal = Case("t", "inv_freq", cfg, {}, {"out": theta}, "scaling", "table")
    loaded = Case("t", "".join(["inv", "_freq"]), cfg, {}, {"out": theta}, "scaling", "table")
    plain = Case("t", "inv_freq", None, {}, {"out": theta}, "scaling", "table")
    want = tolerance.element_tolerance(literal, "out", FP32).tol
    assert np.any(want > tolerance.element_tolerance(plain, "out", FP32).tol)  # the ramp term is there
    np.testing.assert_array_equal(tolerance.element_tolerance(loaded, "out", FP32).tol, want)


def test_comparisons_are_immutable_values():
    import dataclasses

    c = tolerance._worst("out", np.zeros(2), np.array([0.5, 0.0]), np.ones(2), np.zeros(2, dtype=bool))
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.passed = False
    assert hash(c) == hash(dataclasses.replace(c))


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
    for case in shipped_cases():
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


def test_a_zero_tolerance_on_a_non_exact_element_fails_any_error():
    # tol 0 without the exact mask (the pair-norm target of V heads): any error is an infinite ratio.
    c = tolerance._worst("out", np.zeros(1), np.array([0.5]), np.zeros(1), np.zeros(1, dtype=bool))
    assert not c.passed and c.ratio == np.inf


def test_rule_names_are_compared_by_value():
    cfg = make_config(8, "half")
    pos = np.arange(4.0)

    def trig_case(rule: str) -> Case:
        return Case("c", "cos_sin", cfg, {"positions": pos}, {"cos": np.ones((4, 4)), "sin": np.ones((4, 4))},
                    "tables", rule)  # fmt: skip

    ref, fresh = trig_case("trig"), trig_case(_fresh("trig"))
    policy = PrecisionPolicy("float32", "float32", "float32")
    want = tolerance.element_tolerance(ref, "cos", policy).tol
    np.testing.assert_array_equal(tolerance.element_tolerance(fresh, "cos", policy).tol, want)


def test_a_nan_expected_value_fails_whatever_was_returned():
    """A golden file holding NaN (a corrupted or badly generated value) can never be passed."""
    case = rotation_case("nan-expected")
    case.expected["out"] = case.expected["out"].copy()
    case.expected["out"][2, 3] = np.nan
    got = np.nan_to_num(case.expected["out"], nan=0.25)
    [elements, _] = tolerance.compare_output(case, "out", got, FP32)
    assert not elements.passed and elements.n_bad == 1 and elements.index == (2, 3)
    assert elements.ratio == np.inf


def test_check_case_judges_every_expected_output_and_only_those():
    case = rotation_case("outputs")
    out = case.expected["out"]
    results = check_case(case, {"out": out, "extra": out * 2.0}, FP32)  # an extra output is not judged
    assert [c.output for c in results] == ["out", "out pair norm"] and all(c.passed for c in results)
    with pytest.raises(KeyError, match="out"):
        check_case(case, {"extra": out}, FP32)  # a missing one is not silently skipped
