"""``golden verify`` (``conformance/golden_verify.py``): the regeneration bound, pinned from its documented
formula, and what a set with wrong stored data is told (hand-written cases, values edited by hand).
"""

from __future__ import annotations

import copy
import re
from dataclasses import replace

import numpy as np
import pytest
from rope_ref.conformance.cases import evaluate
from rope_ref.conformance.golden import (
    DEFAULT_LIMITS,
    GoldenLimitError,
    load_golden,
    regeneration_tolerance,
    verify_golden,
    write_golden,
)
from test_golden_build import _case

EPS = 2.0**-52


def _tol(case, expected):
    return regeneration_tolerance(case, np.asarray(expected, dtype=np.float64))


def test_regeneration_bound_grows_with_the_largest_position():
    # 64 eps (1 + P) max(1, |e|), P = max |position| = 9
    case = _case(inputs={"positions": np.array([0, 5, -9])})
    np.testing.assert_array_equal(_tol(case, [0.5, -3.0]), [64 * EPS * 10, 64 * EPS * 10 * 3])


def test_regeneration_bound_reads_decay_distances():
    case = _case(op="decay_upper_bound", tolerance="decay", inputs={"distances": np.array([4.0, 100.0])})
    np.testing.assert_array_equal(_tol(case, [2.0]), [64 * EPS * 101 * 2])


def test_regeneration_bound_of_a_table_op_counts_position_one():
    case = _case(op="inv_freq", inputs={}, expected={"out": np.ones(2)})
    np.testing.assert_array_equal(_tol(case, [0.25, 1.0]), [64 * EPS * 2, 64 * EPS * 2])


def test_exact_outputs_get_no_slack_and_the_emulation_one_fp16_ulp():
    exact = _case(tolerance="exact", inputs={"positions": np.array([7])})
    np.testing.assert_array_equal(_tol(exact, [3.0, 0.0]), [0.0, 0.0])
    emulation = _case(tolerance="emulation", inputs={"positions": np.array([7])})
    np.testing.assert_array_equal(_tol(emulation, [1.0, -2.0, 2.0**-20]), [2.0**-10, 2.0**-9, 2.0**-24])


@pytest.fixture(scope="module")
def cos_sin_case():
    """A real cos_sin case: expected values from the oracle, which verify recomputes."""
    case = _case(inputs={"positions": np.array([0, 3, 70000])})
    case.expected = evaluate("cos_sin", case.config, case.inputs, case.params)
    case.aux = {"inv_freq": 10000.0 ** (-np.arange(0, 8, 2) / 8), "attention_factor": np.array(1.0)}
    return case


def _verify(tmp_path, *cases, limits=DEFAULT_LIMITS):
    root = write_golden(list(cases), tmp_path / "g", generator="test", source="custom")
    return verify_golden(root, limits)


def test_a_consistent_set_verifies(tmp_path, cos_sin_case):
    report = _verify(tmp_path, cos_sin_case)
    assert report.ok, report.problems
    assert report.n_cases == 1 and report.worst_ratio < 1


def test_a_nan_stored_in_a_file_fails(tmp_path, cos_sin_case):
    case = copy.deepcopy(cos_sin_case)
    case.expected["sin"][2, 1] = np.nan
    report = _verify(tmp_path, case)
    assert report.problems == [
        f"{case.id}: expected.sin[2, 1] stored nan but regeneration gives "
        f"{float(cos_sin_case.expected['sin'][2, 1])!r} (|diff|/tol = nan)"
    ]


def test_missing_aux_tensor_is_reported(tmp_path, cos_sin_case):
    case = copy.deepcopy(cos_sin_case)
    del case.aux["attention_factor"]
    report = _verify(tmp_path, case)
    assert report.problems == [
        f"{case.id}: aux tensors ['inv_freq'], a cos_sin case holds ['attention_factor', 'inv_freq']"
    ]


def test_a_stored_tensor_of_another_shape_is_reported_not_broadcast(tmp_path, cos_sin_case):
    case = copy.deepcopy(cos_sin_case)
    case.expected["cos"] = case.expected["cos"][:1]  # (1, 4): would broadcast against (3, 4)
    report = _verify(tmp_path, case)
    assert report.problems == [f"{case.id}: expected.cos shape (1, 4), regeneration (3, 4)"]


def test_worst_ratio_is_the_worst_over_the_set(tmp_path, cos_sin_case):
    bad = copy.deepcopy(cos_sin_case)
    bad.expected["cos"][0, 0] += 1e-8  # cos(0) = 1: |diff| / (64 eps (1 + 70000)) is about 10.05
    clean = replace(copy.deepcopy(cos_sin_case), id="cos_sin-clean")
    report = _verify(tmp_path, bad, clean)
    assert len(report.problems) == 1 and report.problems[0].startswith(f"{bad.id}: expected.cos[0, 0]")
    assert 1e-8 / (64 * EPS * 70001) * 0.99 < report.worst_ratio < 1e-8 / (64 * EPS * 70001) * 1.01


def test_stored_grid_values_are_bounded_before_the_oracle_runs(tmp_path):
    case = _case(
        "vision_ids-hand",
        op="vision_ids",
        config=None,
        inputs={"grids": np.array([[1, 4, 4], [1, 1024, 1024]])},
        expected={"out": np.zeros((20, 2), dtype=np.int64)},
        tolerance="exact",
        params={"convention": "qwen2-vl", "spatial_merge_size": 2},
        aux={},
    )
    limit = 3 * 1024 * 1024  # the second row alone: 3·1·1024·1024 ids; both rows: 48 more
    with pytest.raises(GoldenLimitError, match=r"most for inputs.grids\[1\] = \[1, 1024, 1024\]\) = 3145776"):
        _verify(tmp_path, case, limits=replace(DEFAULT_LIMITS, case_elements=limit))


def test_a_catalogue_set_is_compared_with_the_catalogue(tmp_path):
    wanted = (
        "cos_sin-d64_precision_positions",
        "apply-layout_half_d64-fp64",
        "inv_freq-default_d64_base10000",
    )
    shipped = {c.id: c for c in load_golden() if c.id in wanted}  # catalogue cases, without building it
    table = copy.deepcopy(shipped[wanted[0]])
    table.tolerance = "rotation"  # not the catalogue's rule
    rotation = copy.deepcopy(shipped[wanted[1]])
    rotation.inputs["x"][0, 0, 0, 0] += 0.5  # another RNG draw, with its expected recomputed
    rotation.expected = evaluate("apply", rotation.config, rotation.inputs, rotation.params)
    stranger = replace(copy.deepcopy(shipped[wanted[2]]), id="inv_freq-stranger")
    root = write_golden([table, rotation, stranger], tmp_path / "g", generator="test", source="catalogue")
    report = verify_golden(root)
    assert len(report.problems) == 3, report.problems
    assert (
        report.problems[0]
        == f"{table.id}: op/config/params/tolerance/requires differ from the current catalogue"
    )
    assert re.fullmatch(
        r"stale golden set: \d{3,} catalogue case\(s\) missing, e\.g\. \[.*\]", report.problems[1]
    )
    assert (
        report.problems[2] == "stale golden set: 1 case(s) not in the catalogue, e.g. ['inv_freq-stranger']"
    )
    assert len(report.notes) == 1 and report.notes[0].startswith("1 stored input(s) differ")
