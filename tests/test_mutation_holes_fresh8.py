"""Issue 21: survivors of the fresh "fresh8" mutation sample of conformance/tolerance.py and runner.py."""

from __future__ import annotations

import numpy as np
from rope_ref.conformance import tolerance
from rope_ref.conformance.case import Case
from rope_ref.conformance.catalogue import make_config
from rope_ref.conformance.oracle_backend import OracleBackend
from rope_ref.conformance.protocol import PrecisionPolicy
from rope_ref.conformance.runner import CaseResult, Runner


def _fresh(text: str) -> str:
    """An equal string that is not the interned literal (as JSON-loaded manifests give)."""
    return "".join(list(text))


def test_a_zero_tolerance_on_a_non_exact_element_fails_any_error():
    # tol 0 without the exact mask (the pair-norm target of V heads): any error is an infinite ratio.
    c = tolerance._worst("out", np.zeros(1), np.array([0.5]), np.zeros(1), np.zeros(1, dtype=bool))
    assert not c.passed and c.ratio == np.inf


def test_scalar_positions_get_a_rotation_bound():
    cfg = make_config(8, "half")
    x = np.ones((3, 2, 8))
    case = Case("c", "apply", cfg, {"x": x, "positions": np.array(5.0)}, {"out": x}, "tables", "rotation")
    bounds = tolerance.element_tolerance(case, "out", PrecisionPolicy("float32", "float32", "float32"))
    # |theta| = 5 * base^(-2i/8): the bound grows with the angle, the same for every row.
    assert bounds.tol.shape == x.shape and np.all(bounds.tol > 0)
    np.testing.assert_array_equal(bounds.tol[0], bounds.tol[2])
    assert bounds.tol[0, 0, 0] > bounds.tol[0, 0, 3]


def test_rule_names_are_compared_by_value():
    cfg = make_config(8, "half")
    pos = np.arange(4.0)
    ref = Case(
        "c",
        "cos_sin",
        cfg,
        {"positions": pos},
        {"cos": np.ones((4, 4)), "sin": np.ones((4, 4))},
        "tables",
        "trig",
    )
    fresh = Case(
        "c",
        "cos_sin",
        cfg,
        {"positions": pos},
        {"cos": np.ones((4, 4)), "sin": np.ones((4, 4))},
        "tables",
        _fresh("trig"),
    )
    policy = PrecisionPolicy("float32", "float32", "float32")
    want = tolerance.element_tolerance(ref, "cos", policy).tol
    np.testing.assert_array_equal(tolerance.element_tolerance(fresh, "cos", policy).tol, want)


def test_xfail_status_is_compared_by_value(monkeypatch):
    runner = Runner(OracleBackend())
    case = Case("c-1", "inv_freq", make_config(8, "half"), {}, {"out": np.ones(4)}, "tables", "table")

    def failed_result(c):
        return CaseResult(c.id, c.op, c.bug_class, _fresh("failed"), kind="mismatch", message="m")

    monkeypatch.setattr(runner, "run_case", failed_result)
    report = runner.run([case], xfails={"c-1": "known"})
    assert report.results[0].status == "xfailed"


def test_layout_names_are_compared_by_value():
    from rope_ref import RopeConfig
    from rope_ref.rotation import pair_indices

    a, b = pair_indices(RopeConfig(8, layout=_fresh("half")))
    np.testing.assert_array_equal(a, [0, 1, 2, 3])
    np.testing.assert_array_equal(b, [4, 5, 6, 7])


def test_rows_longer_than_a_block_are_rotated_one_at_a_time():
    """A row of 9 * 8192 elements exceeds the 2**16-element block: one row per block, same bits as
    rotating each row alone (where no blocking happens)."""
    import rope_ref
    from rope_ref import RopeConfig

    cfg = RopeConfig(8192, layout="interleaved")
    x = np.linspace(-1.0, 1.0, 3 * 3 * 3 * 8192).reshape(3, 3, 3, 8192)
    pos = np.array([1.0, 700.0, 70000.0]).reshape(3, 1, 1)
    out = rope_ref.apply(x, pos, cfg)
    for i in range(3):
        np.testing.assert_array_equal(out[i], rope_ref.apply(x[i], pos[i], cfg))


def test_score_curve_wants_both_q_and_k_or_neither():
    import pytest

    from rope_ref import RopeConfig
    from rope_ref.decay import score_curve

    cfg = RopeConfig(8, layout="half")
    for q, k in ((np.ones(8), None), (None, np.ones(8))):
        with pytest.raises(ValueError, match="pass both q and k, or neither"):
            score_curve([0, 1], cfg, q=q, k=k)
