"""Tolerance-model details that once survived a mutation run (issue 21): each test fails on a mutant.

Verdicts come from :func:`check_case` (and :func:`round_to` itself); the size of each allowance is
derived here from the formulas written in ``docs/tolerance.md`` (sections "YaRN near-cancellation" and
the MLA "scale" rule), evaluated in float64 NumPy from the configuration alone, never from the module.
Each element is checked on its own: a perturbation of about half its allowance must come back with
that ratio at that index, so a changed allowance anywhere shows.
"""

from __future__ import annotations

import numpy as np
import pytest
from rope_ref.conformance.case import Case
from rope_ref.conformance.protocol import PrecisionPolicy
from rope_ref.conformance.tolerance import check_case, round_to

U32, U64 = 2.0**-24, 2.0**-53
TINY32, TINY64 = 2.0**-126, 2.0**-1022
FP32 = PrecisionPolicy("float32", "float32", "float32")
FP64 = PrecisionPolicy("float64", "float64", "float64")


# -- YaRN with truncate=False: the ramp term y_i ----------------------------------------------------------


def _yarn_cfg(beta_fast: float = 32.0, beta_slow: float = 1.0, l0: int = 4096, factor: float = 8.0) -> dict:
    scaling = {
        "rope_type": "yarn",
        "factor": factor,
        "original_max_position_embeddings": l0,
        "beta_fast": beta_fast,
        "beta_slow": beta_slow,
        "truncate": False,
        "attention_factor": 1.25,
    }
    return {"head_dim": 32, "layout": "half", "base": 10000.0, "scaling": scaling}


def _doc_terms(cfg: dict) -> tuple[np.ndarray, np.ndarray]:
    """(omega_i, y_i) from docs/tolerance.md: HF's untruncated YaRN blend and the ramp-rounding term."""
    d, base = cfg["head_dim"], cfg["base"]
    sc = cfg["scaling"]
    f, l0 = sc["factor"], sc["original_max_position_embeddings"]

    def corr(beta: float) -> float:
        return d * np.log(l0 / (2 * np.pi * beta)) / (2 * np.log(base))

    low, high = max(corr(sc["beta_fast"]), 0.0), min(corr(sc["beta_slow"]), d - 1.0)
    if low == high:
        high += 0.001
    i = np.arange(d // 2, dtype=np.float64)
    theta = base ** (-2 * i / d)
    r = np.clip((i - low) / (high - low), 0.0, 1.0)
    g = 1.0 - 1.0 / f
    omega = theta * (1.0 - r * g)
    s = d / (2 * np.log(base))
    d_low, d_high = 4 * (abs(low) + s) * U32, 4 * (abs(high) + s) * U32
    dr = (d_low + d_high) / (high - low) + 3 * U32
    reach = (i > low - d_low) & (i < high + d_high)
    y = np.where(reach, g * dr / (1.0 - r * g) / U32, 0.0) if f > 1 else np.zeros(i.shape)
    return omega, y


def _k(w: np.ndarray) -> np.ndarray:
    return 8.0 + 2.0 * np.abs(np.log(np.abs(w)))


def _each_element_at_half_its_allowance(case: Case, name: str, tol: np.ndarray, policy, output_index=0):
    expected = case.expected[name]
    for flat in range(expected.size):
        idx = np.unravel_index(flat, expected.shape)
        got = {k: v.copy() for k, v in case.expected.items()}
        got[name][idx] += 0.5 * tol[idx]
        # float64 tolerances are a few ulps of the value: the perturbation actually made is rounded.
        want = abs(got[name][idx] - expected[idx]) / tol[idx]
        assert 0.25 < want < 0.75
        result = check_case(case, got, policy)[output_index]
        assert result.passed, (idx, result.describe())
        assert result.index == tuple(int(j) for j in idx), (idx, result.describe())
        assert result.ratio == pytest.approx(want, rel=1e-9), (idx, result.describe())


# beta_fast with corr(beta_fast) = 5 + 1e-6 (d = 32, base 1e4, L0 = 4096): pair 5 lies just below low,
# within the |d low| a float32 corr can move it, so its ramp value r_5 = 0 is the clipped one.
EDGE_BETA = 4096 / (2 * np.pi) * np.exp(-(5 + 1e-6) * 2 * np.log(10000.0) / 32)
# beta_slow with corr(beta_slow) = 11 - 1e-6: pair 11 lies just above high, its r_11 = 1 the clipped one.
EDGE_SLOW = 4096 / (2 * np.pi) * np.exp(-(11 - 1e-6) * 2 * np.log(10000.0) / 32)


@pytest.mark.parametrize("policy", [FP32, FP64], ids=["fp32", "fp64"])
@pytest.mark.parametrize(
    "shape",
    [
        (32.0, 1.0, 4096),
        (1.0, 1.0, 3533),
        (EDGE_BETA, 1.0, 4096),
        (32.0, EDGE_SLOW, 4096),
        (32.0, 1.0, 4096, 1.5),
    ],
    ids=["ramp", "zero-width", "pair-below-low", "pair-above-high", "factor-1.5"],
)
def test_untruncated_yarn_table_allowance_per_pair(policy, shape):
    """table rule for inv_freq: |omega| (k_i + y_i) u_a + 4 tiny (table dtype), with y_i of the ramp.

    zero-width: beta_fast = beta_slow puts low = high = corr(1) = 10.99986 (L0 = 3533), widened by HF's
    0.001, so that pair 11 sits inside the 0.001-wide ramp."""
    cfg = _yarn_cfg(*shape)
    omega, y = _doc_terms(cfg)
    assert np.count_nonzero(y) >= 1 and np.count_nonzero(y == 0) >= 4  # both kinds of pair present
    case = Case("t-yarn", "inv_freq", cfg, {}, {"out": omega}, "scaling", "table")
    u_a, tiny = (U32, TINY32) if policy is FP32 else (U64, TINY64)
    tol = np.abs(omega) * (_k(omega) + y) * u_a + 4 * tiny
    _each_element_at_half_its_allowance(case, "out", tol, policy)


def test_truncated_or_unscaled_yarn_adds_nothing():
    """truncate=True (integer ramp bounds) and factor 1 (g = 0): the plain table allowance."""
    for change in ({"truncate": True}, {"factor": 1.0}):
        cfg = _yarn_cfg()
        cfg["scaling"].update(change)
        d = cfg["head_dim"]
        theta = cfg["base"] ** (-2 * np.arange(d // 2) / d)
        case = Case("t-yarn-t", "inv_freq", cfg, {}, {"out": theta}, "scaling", "table")
        _each_element_at_half_its_allowance(case, "out", np.abs(theta) * _k(theta) * U32 + 4 * TINY32, FP32)


def test_untruncated_yarn_trig_allowance_carries_the_ramp_term():
    """trig rule: |A| ((k_i + y_i) |m omega_i| u_a + 8 u_r) + 4 tiny, A = 1.25 explicit, u_r = 3 u32."""
    cfg = _yarn_cfg()
    omega, y = _doc_terms(cfg)
    positions = np.array([0.0, 3.0, 700.0])
    ang = positions[:, None] * omega
    case = Case(
        "t-yarn-trig",
        "cos_sin",
        cfg,
        {"positions": positions},
        {"cos": 1.25 * np.cos(ang), "sin": 1.25 * np.sin(ang)},
        "scaling",
        "trig",
    )
    tol = 1.25 * ((_k(omega) + y) * np.abs(ang) * U32 + 8 * 3 * U32) + 4 * TINY32
    _each_element_at_half_its_allowance(case, "cos", tol, FP32, 0)
    _each_element_at_half_its_allowance(case, "sin", tol, FP32, 1)


def test_untruncated_yarn_rotation_allowance_carries_the_ramp_term():
    """rotation rule: A r ((k_i + y_i) |m omega_i| u_a + 8 u_r) + 4 tiny per pair (i, i + 16)."""
    cfg = _yarn_cfg()
    omega, y = _doc_terms(cfg)
    rng = np.random.default_rng(41)
    x = rng.standard_normal((2, 32))
    positions = np.array([5.0, 900.0])
    ang = positions[:, None] * omega
    a, b = x[:, :16], x[:, 16:]
    out = 1.25 * np.concatenate([a * np.cos(ang) - b * np.sin(ang), b * np.cos(ang) + a * np.sin(ang)], -1)
    case = Case(
        "t-yarn-rot", "apply", cfg, {"x": x, "positions": positions}, {"out": out}, "scaling", "rotation"
    )
    pair = 1.25 * np.hypot(a, b) * ((_k(omega) + y) * np.abs(ang) * U32 + 8 * 3 * U32) + 4 * TINY32
    _each_element_at_half_its_allowance(case, "out", np.concatenate([pair, pair], -1), FP32)


# -- the scale rule: relative to the value ------------------------------------------------------------


@pytest.mark.parametrize(("policy", "u"), [(FP32, U32), (FP64, U64)], ids=["fp32", "fp64"])
def test_scale_rule_is_eight_roundings_of_the_value(policy, u):
    cfg = {"head_dim": 8, "layout": "half", "base": 10000.0}
    expected = np.array([0.125, 3.0, 0.07])
    case = Case("t-scale", "mla_softmax_scale", cfg, {}, {"out": expected}, "scaling", "scale")
    _each_element_at_half_its_allowance(case, "out", 8 * u * np.abs(expected), policy)


# -- round_to: to nearest, ties to even ------------------------------------------------------------------


def test_round_to_bfloat16_is_nearest_with_ties_to_even():
    ulp = 2.0**-7  # bfloat16 spacing in [1, 2)
    values = np.array(
        [
            1.0 + ulp / 2,  # tie, even neighbour below
            1.0 + ulp / 2 + 2.0**-20,  # just above the tie: up
            1.0 + 3 * ulp / 2,  # tie, even neighbour above
            1.0 + ulp / 2 - 2.0**-20,  # just below the tie: down
            -(1.0 + ulp / 2 + 2.0**-20),
            3.0,
            0.0,
        ]
    )
    want = np.array([1.0, 1.0 + ulp, 1.0 + 2 * ulp, 1.0, -(1.0 + ulp), 3.0, 0.0])
    got = round_to(values, "bfloat16")
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, want)


def test_round_to_ieee_dtypes():
    v = np.array([1.0 + 2.0**-30, 70000.0, 1.0 / 3.0])
    np.testing.assert_array_equal(round_to(v, "float64"), v)
    np.testing.assert_array_equal(round_to(v, "float32"), [1.0, 70000.0, float(np.float32(1.0 / 3.0))])
    with np.errstate(over="raise"):
        got = round_to(v, "float16")  # 70000 overflows to inf without a warning
    np.testing.assert_array_equal(got, [1.0, np.inf, float(np.float16(1.0 / 3.0))])
    assert round_to([2.5], "float32").dtype == np.float64


# -- the exact rule never takes the compute-dtype alternative ---------------------------------------------


def test_exact_rule_name_read_from_a_manifest_gets_no_rounding_allowance():
    """Integer ids above 2^24: float32 rounding of 2^24 + 1 is 2^24, which the exact rule must refuse even
    under a declared float32 compute dtype (the alternative is for pass-through floats only)."""
    rule = "".join(["ex", "act"])  # equal to, not identical with, the literal
    ids = np.array([[2.0**24 + 1, 5.0]])
    case = Case("t-ids", "chatglm_position_ids", None, {}, {"out": ids}, "chatglm", rule)
    policy = PrecisionPolicy("float64", "float32", "float32")
    (result,) = check_case(case, {"out": np.array([[2.0**24, 5.0]])}, policy)
    assert not result.passed and result.index == (0, 0) and result.ratio == np.inf


# -- exact elements: position 0 only when A = 1; the compute-dtype alternative --------------------------


def _rot_case(
    cid: str, x: np.ndarray, positions: np.ndarray, factor: float | None, rotary_dim: int = 8
) -> Case:
    """half layout, head_dim 8, rotary_dim pairs (i, i + rotary_dim / 2); expected by eq. 34 in float64."""
    cfg = {"head_dim": 8, "layout": "half", "base": 10000.0, "rotary_dim": rotary_dim}
    if factor is not None:
        cfg["scaling"] = {
            "rope_type": "yarn",
            "factor": 2.0,
            "original_max_position_embeddings": 64,
            "attention_factor": factor,
        }
    a_factor = 1.0 if factor is None else factor
    n = rotary_dim // 2
    out = x.copy()
    for row, m in enumerate(positions):
        for i in range(n):
            # YaRN with L0 = 64 keeps these pairs' frequencies only at position 0, the rows judged here.
            w = 10000.0 ** (-2.0 * i / rotary_dim)
            c, s = a_factor * np.cos(m * w), a_factor * np.sin(m * w)
            out[row, i] = x[row, i] * c - x[row, i + n] * s
            out[row, i + n] = x[row, i + n] * c + x[row, i] * s
    return Case(cid, "apply", cfg, {"x": x, "positions": positions}, {"out": out}, "layout", "rotation")


def test_position_zero_is_exact_only_without_an_attention_factor():
    """A = 0.3 at position 0: y = 0.3 x, which a float32 backend rounds; the rotation bound admits it."""
    x = np.random.default_rng(43).standard_normal((2, 8)).astype(np.float32).astype(np.float64)
    case = _rot_case("t-a03", x, np.array([0.0, 0.0]), 0.3)
    got = case.expected["out"].astype(np.float32).astype(np.float64)
    assert np.any(got != case.expected["out"])  # float32 rounding moved some elements
    assert all(c.passed for c in check_case(case, {"out": got}, FP32))
    plain = _rot_case("t-a1", x, np.array([0.0, 0.0]), None)
    bumped = plain.expected["out"].copy()
    bumped[1, 2] = np.nextafter(bumped[1, 2], np.inf)
    (result, _) = check_case(plain, {"out": bumped}, FP32)
    assert not result.passed and result.ratio == np.inf and result.index == (1, 2)


def test_exact_elements_accept_x_rounded_to_a_narrower_declared_compute_dtype():
    """float64 I/O, float32 compute: pass-through channels and position 0 may come back as float32(x)."""
    x = np.random.default_rng(44).standard_normal((2, 8))  # not float32 values
    case = _rot_case("t-c32", x, np.array([0.0, 3.0]), None, rotary_dim=4)
    got = case.expected["out"].copy()
    exact = np.zeros((2, 8), dtype=bool)
    exact[:, 4:] = True
    exact[0, :] = True
    got[exact] = x[exact].astype(np.float32).astype(np.float64)
    assert np.all(got[exact] != x[exact])
    f32_compute = PrecisionPolicy("float64", "float32", "float32")
    assert all(c.passed for c in check_case(case, {"out": got}, f32_compute))
    # float64 compute declares no rounding: the same output fails, at an exact element.
    (result, _) = check_case(case, {"out": got}, PrecisionPolicy("float64", "float32", "float64"))
    assert not result.passed and result.ratio == np.inf and exact[result.index]
    # compute wider than I/O (float32 compute for bfloat16 I/O) gets no allowance either.
    (result, _) = check_case(case, {"out": got}, PrecisionPolicy("bfloat16", "float32", "float32"))
    assert not result.passed and result.ratio == np.inf and exact[result.index]
    # any other value at an exact element still fails, one float32 ulp from float32(x) included
    off = got.copy()
    off[1, 5] = float(np.nextafter(np.float32(off[1, 5]), np.float32(np.inf)))
    (result, _) = check_case(case, {"out": off}, f32_compute)
    assert not result.passed and result.index == (1, 5)


# -- the ChatGLM rotation bound, the angle roundoff cap, refusals ------------------------------------------


def test_chatglm_rotation_bound_per_element_with_the_default_base():
    """No "base" parameter: 10000. Halves of 4 channels, pairs (j, j + 2), theta = [1, 0.01]; the first
    half turns by the position ids, the second by the block ids: r (k |m theta| u_a + 8 u_r) + 4 tiny."""
    x = np.random.default_rng(45).standard_normal((2, 8)).astype(np.float32).astype(np.float64)
    pos, blk = np.array([3, 7]), np.array([1, 2])
    theta = np.array([1.0, 0.01])
    out = x.copy()
    tol = np.zeros((2, 8))
    for lo, ids in ((0, pos), (4, blk)):
        for j in range(2):
            a, b = lo + j, lo + j + 2
            ang = ids * theta[j]
            out[:, a] = x[:, a] * np.cos(ang) - x[:, b] * np.sin(ang)
            out[:, b] = x[:, b] * np.cos(ang) + x[:, a] * np.sin(ang)
            pair = np.hypot(x[:, a], x[:, b]) * (_k(theta[j]) * np.abs(ang) * U32 + 8 * 3 * U32) + 4 * TINY32
            tol[:, a] = tol[:, b] = pair
    inputs = {"x": x, "position_ids": pos, "block_position_ids": blk}
    case = Case("t-glm", "chatglm_apply_2d", None, inputs, {"out": out}, "chatglm", "rotation", {})
    _each_element_at_half_its_allowance(case, "out", tol, FP32)


def test_half_precision_angles_are_judged_as_float32_angles():
    omega = np.array([1.0, 0.01, 1e-4])
    case = Case(
        "t-cap",
        "inv_freq",
        {"head_dim": 6, "layout": "half", "base": 10000.0},
        {},
        {"out": omega},
        "t",
        "table",
    )
    tol = np.abs(omega) * _k(omega) * U32 + 4 * TINY32
    for angle in ("bfloat16", "float16", "float32"):
        _each_element_at_half_its_allowance(case, "out", tol, PrecisionPolicy("float32", angle, "float32"))


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


# -- fresh-sample survivors: negative positions, A > 1, reported numbers, other ops -----------------------


@pytest.mark.parametrize("factor", [0.3, 1.25])
def test_position_zero_rows_with_an_attention_factor_are_not_exact(factor):
    x = np.random.default_rng(46).standard_normal((2, 8)).astype(np.float32).astype(np.float64)
    case = _rot_case("t-az", x, np.array([0.0, 0.0]), factor)
    got = case.expected["out"].astype(np.float32).astype(np.float64)
    assert np.any(got != case.expected["out"])
    assert all(c.passed for c in check_case(case, {"out": got}, FP32))


def test_negative_positions_are_rotated_not_exact():
    """Only position 0 is exact (A = 1): position -3 rotates, and float32 rounding of it is admitted."""
    x = np.random.default_rng(47).standard_normal((3, 8)).astype(np.float32).astype(np.float64)
    case = _rot_case("t-neg", x, np.array([-3.0, 0.0, 2.0]), None)
    got = case.expected["out"].astype(np.float32).astype(np.float64)
    assert np.any(got[0] != case.expected["out"][0])
    assert all(c.passed for c in check_case(case, {"out": got}, FP32))


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


def test_ramp_term_is_for_inv_freq_tables_only():
    """An attention-factor table of shape (1,) under untruncated YaRN with low = 0 (L0 = 64, so pair 0 is
    on the ramp) keeps the plain table allowance |A| k(A) u_a + 4 tiny."""
    cfg = _yarn_cfg(l0=64)
    _, y = _doc_terms(cfg)
    assert y[0] > 0  # inv_freq's pair 0 would get the ramp term
    case = Case("t-af", "attention_factor", cfg, {}, {"out": np.array([1.25])}, "scaling", "table")
    tol = 1.25 * _k(np.array([1.25])) * U32 + 4 * TINY32
    _each_element_at_half_its_allowance(case, "out", tol, FP32)


def test_one_stream_multiaxis_case_is_judged_like_apply():
    from rope_ref.conformance.multimodal import spec_to_dict

    from rope_ref import RopeConfig, multiaxis

    cfg = {"head_dim": 8, "layout": "half", "base": 10000.0}
    spec = multiaxis.from_config(RopeConfig(8, layout="half"))
    x = np.random.default_rng(49).standard_normal((3, 8))
    pos = np.array([0.0, 2.0, 9.0])
    single = _rot_case("t-1d", x, pos, None)
    multi = Case(
        "t-ma",
        "multiaxis_apply",
        None,
        {"x": x, "positions": pos[None]},
        dict(single.expected),
        "m",
        "rotation",
    )
    multi.params["spec"] = spec_to_dict(spec)
    assert single.config == {**cfg, "rotary_dim": 8}
    got = single.expected["out"] + 1e-7 * np.arange(24).reshape(3, 8)
    got[0] = x[0]  # position 0: exact
    a = check_case(single, {"out": got}, FP32)
    b = check_case(multi, {"out": got}, FP32)
    assert [(c.passed, c.index, c.ratio) for c in a] == [(c.passed, c.index, c.ratio) for c in b]
    assert a[0].ratio > 0.0
