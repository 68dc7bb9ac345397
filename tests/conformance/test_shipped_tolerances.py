"""The tolerance model on shipped cases: facts derived in docs/tolerance.md (the table rule ignores the I/O
dtype, the decay rule has no activation roundoff, declared compute dtypes, the YaRN cancellation budget, the
scale rule, the multi-axis bound) checked on the golden cases they concern.
"""

from __future__ import annotations

import numpy as np
import pytest
from rope_ref.conformance import catalogue
from rope_ref.conformance.case import Case
from rope_ref.conformance.protocol import PrecisionPolicy
from rope_ref.conformance.tolerance import check_case, element_tolerance

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


def test_table_tolerance_does_not_depend_on_io_dtype(by_id):
    case = by_id["inv_freq-default_d128_base500000"]
    tols = {
        io: element_tolerance(case, "out", PrecisionPolicy(io, "float32", "float32")).tol
        for io in ("float32", "float16", "bfloat16")
    }
    np.testing.assert_array_equal(tols["float16"], tols["float32"])
    np.testing.assert_array_equal(tols["bfloat16"], tols["float32"])
    # The slowest frequencies of base 5e5 are ~1e-6: a 1% error must fail at fp16 I/O too.
    e = case.expected["out"]
    got = e * 1.01
    res = check_case(case, {"out": got}, PrecisionPolicy("float16", "float32", "float32"))
    assert not res[0].passed and res[0].n_bad == e.size


def test_decay_tolerance_has_no_activation_roundoff(by_id):
    case = by_id["decay_upper_bound-d128_base10000"]
    tol = {
        io: element_tolerance(case, "out", PrecisionPolicy(io, "float32", "float32")).tol
        for io in ("float32", "bfloat16")
    }
    np.testing.assert_array_equal(tol["bfloat16"], tol["float32"])
    e = case.expected["out"]
    assert np.all(tol["bfloat16"][e > 0] < 0.01 * e[e > 0])  # far below the value (was 2.5x at bf16)


def test_exact_rule_honours_a_declared_float32_compute_dtype(by_id):
    case = by_id["apply-tiny_d4_half-fp64"]  # position 0 row: exact elements
    policy = PrecisionPolicy("float64", "float32", "float32")
    x = case.inputs["x"].astype(np.float64)
    got = case.expected["out"].copy()
    got[0] = x[0].astype(np.float32).astype(np.float64)  # what torchtune/MLX return at position 0
    assert all(r.passed for r in check_case(case, {"out": got}, policy))
    wrong = got.copy()
    wrong[0, 0] = np.nextafter(np.float32(wrong[0, 0]), np.float32(2)).astype(np.float64)
    assert not check_case(case, {"out": wrong}, policy)[0].passed
    # A float64-compute backend gets no such allowance.
    case64 = by_id["apply-layout_half_d64-fp64"]
    got64 = case64.expected["out"].copy()
    got64[..., 0, :] = np.float32(got64[..., 0, :]).astype(np.float64) + 1e-9  # position 0 rows, perturbed
    assert not check_case(case64, {"out": got64}, PrecisionPolicy())[0].passed


def test_yarn_near_cancellation_is_budgeted_only_without_truncation(by_id):
    notrunc = element_tolerance(
        by_id["inv_freq-yarn_f32_notrunc_d64"], "out", PrecisionPolicy("float32", "float32", "float32")
    ).tol
    trunc = element_tolerance(
        by_id["inv_freq-yarn_gptoss_trunc_d64"], "out", PrecisionPolicy("float32", "float32", "float32")
    ).tol
    e_no = by_id["inv_freq-yarn_f32_notrunc_d64"].expected["out"]
    e_tr = by_id["inv_freq-yarn_gptoss_trunc_d64"].expected["out"]
    # Same base, d and factor: without truncation the ramp pairs get a larger relative budget ...
    assert np.max(notrunc / e_no) > 2 * np.max(trunc / e_tr)
    # ... still far below the error of ignoring truncate=False (ramp bounds moved to integers).
    ignored = by_id["inv_freq-yarn_gptoss_trunc_d64"].expected["out"]
    assert np.any(np.abs(ignored - e_no) > notrunc)


def test_scale_rule_is_eight_roundings_of_the_table_dtype(by_id):
    case = by_id["mla_softmax_scale-deepseek-v3"]
    value = float(case.expected["value"])
    policy = PrecisionPolicy("float32", "float32", "float32")
    tol = float(element_tolerance(case, "value", policy).tol)
    assert tol == pytest.approx(8 * 2.0**-24 * value)
    fp64 = float(element_tolerance(case, "value", PrecisionPolicy()).tol)
    assert fp64 == pytest.approx(8 * 2.0**-53 * value)
    assert all(
        c.passed for c in check_case(case, {"value": np.array(value * (1 + 4 * 2.0**-53))}, PrecisionPolicy())
    )
    assert not any(
        c.passed
        for c in check_case(case, {"value": np.array(value * (1 + 16 * 2.0**-53))}, PrecisionPolicy())
    )


@pytest.mark.parametrize("io", ("float64", "float32", "bfloat16"))
def test_one_stream_bound_equals_the_1d_rotation_bound(by_id, io):
    """The multi-axis bound of a one-stream spec is the 1D ``apply`` bound of its table."""
    case = by_id[f"multiaxis_apply-deepseek_v3_rope_d64-{catalogue.DTYPE_SHORT[io]}"]
    table = case.params["spec"]["tables"][0]
    one_d = Case(
        "1d",
        "apply",
        table,
        {"x": case.inputs["x"], "positions": case.inputs["positions"][0]},
        {"out": case.expected["out"]},
        "tables",
        "rotation",
        params={"seq_len": None},
    )
    policy = PrecisionPolicy(
        io, "float32" if io != "float64" else "float64", io if io != "bfloat16" else "float32"
    )
    got, want = element_tolerance(case, "out", policy), element_tolerance(one_d, "out", policy)
    np.testing.assert_allclose(got.tol, want.tol, rtol=1e-12)
    assert np.array_equal(got.exact, want.exact)
