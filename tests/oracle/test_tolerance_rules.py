"""Each rule of the tolerance model (rope_ref.tolerance, docs/tolerance.md) pinned by a derived value: the
table, trig, rotation, scale, decay, emulation and exact rules, their floors and the rounding helpers.

Verdicts come from ``element_tolerance`` / ``check_case`` themselves; each expected allowance is computed
here from the documented formula (unit roundoffs, smallest normals, the YaRN ramp term), never read from
the module under test.
"""

from __future__ import annotations

import mpmath
import numpy as np
import pytest
from rope_ref.conformance import tolerance
from rope_ref.conformance.case import Case
from rope_ref.conformance.catalogue import make_config
from rope_ref.conformance.protocol import PrecisionPolicy
from rope_ref.conformance.tolerance import check_case, round_to
from small_cases import _rot_case, rotation_case

import rope_ref

U32, U64 = 2.0**-24, 2.0**-53
TINY32, TINY64 = 2.0**-126, 2.0**-1022
FP32 = PrecisionPolicy("float32", "float32", "float32")
FP64 = PrecisionPolicy("float64", "float64", "float64")


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


@pytest.mark.parametrize(("policy", "u"), [(FP32, U32), (FP64, U64)], ids=["fp32", "fp64"])
def test_scale_rule_is_eight_roundings_of_the_value(policy, u):
    cfg = {"head_dim": 8, "layout": "half", "base": 10000.0}
    expected = np.array([0.125, 3.0, 0.07])
    case = Case("t-scale", "mla_softmax_scale", cfg, {}, {"out": expected}, "scaling", "scale")
    _each_element_at_half_its_allowance(case, "out", 8 * u * np.abs(expected), policy)


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


U16, TINY16 = 2.0**-11, 2.0**-14


def _table_case(expected: list[float]) -> Case:
    cfg = {"head_dim": 4, "layout": "half", "base": 10000.0}
    return Case("t-table", "inv_freq", cfg, {}, {"out": np.array(expected)}, "tables", "table")


@pytest.mark.parametrize(("fraction", "passes"), [(0.9, True), (0.999, True), (1.02, False), (1.5, False)])
def test_table_rule_threshold_is_exactly_the_allowance(fraction, passes):
    """docs/tolerance.md, table rule: tol = |v| (8 + 2 |ln v|) u_a + 4 max(tiny_io, tiny_c)."""
    values = np.array([1.0, 0.01])
    tol = values * (8.0 + 2.0 * np.abs(np.log(values))) * U32 + 4 * TINY32
    got = values + fraction * tol
    (result,) = check_case(_table_case(values.tolist()), {"out": got}, FP32)
    assert result.passed is passes
    assert result.ratio == pytest.approx(fraction, rel=1e-6)
    assert result.n_bad == (0 if passes else 2)


def _trig_case(factor: float, positions: np.ndarray) -> Case:
    """cos/sin of head_dim 2 (one pair, theta_0 = 1 exactly) under YaRN with an explicit factor A."""
    cfg = {
        "head_dim": 2,
        "layout": "half",
        "base": 10000.0,
        "scaling": {
            "rope_type": "yarn",
            "factor": 2.0,
            "original_max_position_embeddings": 64,
            "attention_factor": factor,
        },
    }
    with mpmath.workdps(30):
        cos = np.array([[float(factor * mpmath.cos(p))] for p in positions])
        sin = np.array([[float(factor * mpmath.sin(p))] for p in positions])
    return Case(
        "t-trig", "cos_sin", cfg, {"positions": positions}, {"cos": cos, "sin": sin}, "scaling", "trig"
    )


@pytest.mark.parametrize("factor", [8.0, 0.125])
def test_trig_rule_scales_with_the_attention_factor(factor):
    """tol = |A| (k |theta| u_a + 8 u_r) + floor with k = 8 (theta_0 = 1), u_r = 3 u32 under FP32."""
    positions = np.array([1.0, 10.0, 1000.0])
    case = _trig_case(factor, positions)
    assert rope_ref.inv_freq(case.rope_config())[0] == 1.0  # the derivation below relies on it
    tol = abs(factor) * (8.0 * positions[:, None] * U32 + 8.0 * 3 * U32) + 4 * TINY32
    near = {k: v + 0.9 * tol for k, v in case.expected.items()}
    assert all(c.passed for c in check_case(case, near, FP32))
    over = {k: v - 1.1 * tol for k, v in case.expected.items()}
    results = check_case(case, over, FP32)
    assert not any(c.passed for c in results)
    assert all(c.ratio == pytest.approx(1.1, rel=1e-6) for c in results)


@pytest.mark.parametrize(
    ("policy", "tiny"),
    [
        (PrecisionPolicy("float16", "float32", "float32"), TINY16),
        (PrecisionPolicy("float32", "float32", "float16"), TINY16),
        (PrecisionPolicy("bfloat16", "float32", "float32"), TINY32),
        (PrecisionPolicy("float32", "float32", "float32"), TINY32),
        (PrecisionPolicy("float64", "float64", "float64"), 2.0**-1022),
    ],
)
def test_rotation_floor_uses_the_larger_smallest_normal(policy, tiny):
    """With x = 0 the rotation allowance is only its floor, 4 * max(tiny_io, tiny_compute): 4 * 2^-14 when
    fp16 is involved, 4 * 2^-126 for float32 and bfloat16, 4 * 2^-1022 for float64 (docs/tolerance.md)."""
    cfg = {"head_dim": 4, "layout": "half", "base": 10000.0}
    pos = np.array([1.0, 2.0])
    case = Case(
        "t-floor",
        "apply",
        cfg,
        {"x": np.zeros((2, 4)), "positions": pos},
        {"out": np.zeros((2, 4))},
        "layout",
        "rotation",
    )
    near = np.full((2, 4), 3.9 * tiny)
    ok = check_case(case, {"out": near}, policy)[0]
    assert ok.passed and ok.ratio == pytest.approx(3.9 / 4, rel=1e-6)
    assert not check_case(case, {"out": np.full((2, 4), 4.1 * tiny)}, policy)[0].passed


def test_emulation_rule_is_refused_outside_chatglm():
    case = rotation_case("em-1")
    case.tolerance = "".join(["emul", "ation"])  # equal to, not identical with, the literal
    with pytest.raises(ValueError, match="emulation"):
        check_case(case, {"out": case.expected["out"]}, FP32)


def test_decay_rule_threshold_is_exactly_the_allowance():
    """docs/tolerance.md, decay rule: tol = |r| sum_k (8 + 2|ln theta_k|) theta_k u_a + u_r (n^2 + 8|v|)
    + floor, with u_a = u32; theta_k from mpmath."""
    d, base = 8, 10000.0
    cfg = {"head_dim": d, "layout": "half", "base": base}
    r = np.array([0.0, 10.0, 100.0, -250.5])
    expected = np.array([2.5, 1.75, 1.2, 0.9])
    case = Case("t-decay", "decay_upper_bound", cfg, {"distances": r}, {"out": expected}, "decay", "decay")
    with mpmath.workdps(30):
        thetas = [mpmath.power(base, -mpmath.mpf(2 * k) / d) for k in range(d // 2)]
        phase = float(sum((8 + 2 * abs(mpmath.log(t))) * t for t in thetas)) * U32
    n = d // 2
    tol = phase * np.abs(r) + 2 * U32 * (n * n + 8.0 * np.abs(expected)) + 4 * TINY32
    # float64 I/O: decay outputs carry no I/O rounding, so u_r = u64 + 2 u32 is 2 u32 to 1e-8 relative.
    policy = PrecisionPolicy("float64", "float32", "float32")
    (ok,) = check_case(case, {"out": expected + 0.98 * tol}, policy)
    assert ok.passed and ok.ratio == pytest.approx(0.98, rel=1e-6)
    (bad,) = check_case(case, {"out": expected - 1.02 * tol}, policy)
    assert not bad.passed and bad.n_bad == r.size


def _chatglm_case(rule: str) -> Case:
    """ChatGLM 2D rotation of head_dim 8 (halves of 4, pairs (j, j + 2) inside each half)."""
    rng = np.random.default_rng(31)
    x = rng.standard_normal((3, 8)).astype(np.float32).astype(np.float64)  # float32 I/O values
    pos, blk = np.array([0, 5, 9]), np.array([0, 1, 2])
    inputs = {"x": x, "position_ids": pos, "block_position_ids": blk}
    case = Case(f"t-glm-{rule}", "chatglm_apply_2d", None, inputs, {}, "chatglm", rule, {"base": 10000.0})
    precision = "chatglm-6b-fp16" if rule == "emulation" else "float64"
    case.params["precision"] = precision
    case.expected["out"] = rope_ref.chatglm.apply_2d(x, pos, blk, precision=precision)
    return case


def _glm_pair_radius(x: np.ndarray) -> np.ndarray:
    """Per element, the radius of its pair: pairs (0,2), (1,3), (4,6), (5,7)."""
    partner = np.array([2, 3, 0, 1, 6, 7, 4, 5])
    return np.hypot(x, x[..., partner])


def test_emulation_rule_allows_three_fp16_ulps_of_the_pair_radius():
    """Emulation: tol = 3 * 2 u16 * r + 2^-24 per element (docs/tolerance.md), not the rotation bound."""
    case = _chatglm_case("emulation")
    tol = 3 * 2 * U16 * _glm_pair_radius(case.inputs["x"]) + 2.0**-24
    got = case.expected["out"] + 0.9 * tol
    assert all(c.passed for c in check_case(case, {"out": got}, FP32))
    results = check_case(case, {"out": case.expected["out"] - 1.1 * tol}, FP32)
    assert not results[0].passed and results[0].ratio == pytest.approx(1.1, rel=1e-6)


def test_chatglm_rotation_rule_judges_each_half_with_its_own_ids():
    case = _chatglm_case("rotation")
    exact = case.expected["out"]
    f32 = exact.astype(np.float32).astype(np.float64)
    assert all(c.passed for c in check_case(case, {"out": f32}, FP32))
    # Position 0 / block 0 rows are exact (A = 1): a one-ulp change there is an infinite ratio.
    for col in (0, 5):  # first half at position 0, second half at block id 0
        bad = f32.copy()
        bad[0, col] = np.nextafter(np.float32(bad[0, col]), np.float32(np.inf))
        (result, *_) = check_case(case, {"out": bad}, FP32)
        assert not result.passed and result.index == (0, col) and result.ratio == np.inf
    wrong = f32.copy()
    wrong[1, 5] += 1e-3  # second half of row 1 (block id 1): far outside the float32 bound
    (result, *_) = check_case(case, {"out": wrong}, FP32)
    assert not result.passed and result.index == (1, 5)


def test_rotation_rule_with_positions_broadcast_over_leading_axes():
    """x (2, 3, 8) with positions (3,): the angle table is left-padded, not tiled with other sizes."""
    cfg = {"head_dim": 8, "layout": "interleaved", "base": 10000.0}
    x = np.random.default_rng(32).standard_normal((2, 3, 8)).astype(np.float32).astype(np.float64)
    pos = np.array([1.0, 7.0, 40.0])
    case = Case("t-bc", "apply", cfg, {"x": x, "positions": pos}, {}, "layout", "rotation")
    case.expected["out"] = rope_ref.apply(x, pos, case.rope_config())
    got = case.expected["out"].astype(np.float32).astype(np.float64)
    assert all(c.passed for c in check_case(case, {"out": got}, FP32))


def test_unit_roundoffs_are_the_ieee_values():
    from rope_ref.conformance.tolerance import UNIT_ROUNDOFF, unit_roundoff

    want = {"float64": 2.0**-53, "float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}
    assert UNIT_ROUNDOFF == want
    assert all(unit_roundoff(k) == v for k, v in want.items())
    # u = eps / 2 for the NumPy dtypes (machine epsilon is the gap above 1).
    assert all(float(np.finfo(k).eps) / 2 == want[k] for k in ("float64", "float32", "float16"))


FP16_IO = PrecisionPolicy("float16", "float32", "float32")


def test_trig_allowance_adds_the_io_floor_at_float16():
    """trig rule: |A| (k_i |m theta_i| u_a + 8 u_r) + 4 tiny(io); with float16 I/O the floor, 4 * 2^-14,
    is a quarter of the whole allowance at m = 0 (docs/tolerance.md)."""
    cfg = {"head_dim": 8, "layout": "half", "base": 10000.0, "scaling": None}
    theta = 10000.0 ** (-np.arange(4) / 4)
    positions = np.array([0.0, 3.0])
    ang = positions[:, None] * theta
    case = Case("t-trig16", "cos_sin", cfg, {"positions": positions},
                {"cos": np.cos(ang), "sin": np.sin(ang)}, "tables", "trig")  # fmt: skip
    k = 8.0 + 2.0 * np.abs(np.log(theta))
    tol = k * np.abs(ang) * U32 + 8 * (U16 + 2 * U32) + 4 * TINY16
    _each_element_at_half_its_allowance(case, "cos", tol, FP16_IO, 0)
    _each_element_at_half_its_allowance(case, "sin", tol, FP16_IO, 1)


def test_a_flushed_subnormal_table_entry_passes():
    """table rule: |v| k u_a + 4 tiny of the table dtype, so a float32 table may flush 1e-40 to zero."""
    case = Case("t-flush", "inv_freq", None, {}, {"out": np.array([1.0, 1e-40])}, "tables", "table")
    flushed = np.array([1.0, 0.0])
    (result,) = tolerance.compare_output(case, "out", flushed, FP32)
    assert result.passed, result.describe()
    assert result.ratio == pytest.approx(1e-40 / (1e-40 * (8 + 2 * abs(np.log(1e-40))) * U32 + 4 * TINY32))
    (wrong,) = tolerance.compare_output(case, "out", np.array([1.0, 1e-36]), FP32)  # 20x the floor
    assert not wrong.passed


def test_exact_elements_accept_only_the_rounding_to_the_declared_compute_dtype():
    """float64 I/O computed in float32 (torchtune, MLX): a pass-through channel may come back as x
    rounded to float32, and as nothing else, not even a smaller value."""
    cfg = {"head_dim": 4, "layout": "half", "base": 10000.0, "scaling": None, "rotary_dim": 2}
    x = np.array([[0.3, -0.7, 0.1, 1.0 / 3.0]])
    pos = np.array([2.0])
    c, s = np.cos(2.0), np.sin(2.0)
    out = np.array([[0.3 * c + 0.7 * s, -0.7 * c + 0.3 * s, 0.1, 1.0 / 3.0]])
    case = Case("t-alt", "apply", cfg, {"x": x, "positions": pos}, {"out": out}, "tables", "rotation")
    policy = PrecisionPolicy("float64", "float32", "float32")
    rounded = out.copy()
    rounded[0, 3] = float(np.float32(1.0 / 3.0))
    assert rounded[0, 3] != out[0, 3]
    assert tolerance.compare_output(case, "out", rounded, policy)[0].passed
    for wrong in (rounded[0, 3] - 1e-6, rounded[0, 3] + 1e-6, np.nextafter(rounded[0, 3], 0.0)):
        got = rounded.copy()
        got[0, 3] = wrong
        result = tolerance.compare_output(case, "out", got, policy)[0]
        assert not result.passed and result.ratio == np.inf, (wrong, result.describe())


def test_a_table_case_of_unexpected_rank_gets_no_ramp_term():
    """The YaRN ramp term belongs to the 1-D inv_freq table; an inv_freq case holding a 2-D array (not
    one the catalogue writes) gets the plain table allowance instead of a misaligned term."""
    scaling = {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 4096,
               "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False}
    cfg = {"head_dim": 32, "layout": "half", "base": 10000.0, "scaling": scaling}
    values = np.full((2, 16), 0.5)
    case = Case("t", "inv_freq", cfg, {}, {"out": values}, "scaling", "table")
    tol = tolerance.element_tolerance(case, "out", FP32).tol
    plain = Case("t", "inv_freq", None, {}, {"out": values}, "scaling", "table")
    np.testing.assert_array_equal(tol, tolerance.element_tolerance(plain, "out", FP32).tol)


def test_scalar_positions_get_a_rotation_bound():
    cfg = make_config(8, "half")
    x = np.ones((3, 2, 8))
    case = Case("c", "apply", cfg, {"x": x, "positions": np.array(5.0)}, {"out": x}, "tables", "rotation")
    bounds = tolerance.element_tolerance(case, "out", PrecisionPolicy("float32", "float32", "float32"))
    # |theta| = 5 * base^(-2i/8): the bound grows with the angle, the same for every row.
    assert bounds.tol.shape == x.shape and np.all(bounds.tol > 0)
    np.testing.assert_array_equal(bounds.tol[0], bounds.tol[2])
    assert bounds.tol[0, 0, 0] > bounds.tol[0, 0, 3]


