"""The tolerance model and the runner, judged by calling them (issue 21): each test fails on a mutant.

Every verdict here comes from :func:`check_case` or :class:`Runner`, never from a re-implementation of
the comparison. Where a test needs the size of an allowance, it derives it from the formula written in
``docs/tolerance.md`` with numbers chosen so that the derivation is short (pair 0: theta = 1, k = 8).
"""

from __future__ import annotations

import re
import shlex
import threading

import mpmath
import numpy as np
import pytest
from rope_ref.conformance.case import Case
from rope_ref.conformance.oracle_backend import OracleBackend
from rope_ref.conformance.protocol import PrecisionPolicy
from rope_ref.conformance.runner import Runner, select_cases
from rope_ref.conformance.tolerance import check_case

import rope_ref

U32, U16, U64 = 2.0**-24, 2.0**-11, 2.0**-53
TINY16, TINY32 = 2.0**-14, 2.0**-126
FP32 = PrecisionPolicy("float32", "float32", "float32")


def _round_bf16(v: np.ndarray) -> np.ndarray:
    """Round to the nearest bfloat16 (ties to even), returned as float32."""
    bits = np.asarray(v, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return bits.astype(np.uint32).view(np.float32)


# -- the judgement threshold: ratio > 1 ----------------------------------------------------------------


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


# -- the trig rule carries the attention factor --------------------------------------------------------


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


# -- the floor takes the larger tiny of io and compute dtypes ------------------------------------------


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
    case = apply_case("em-1")
    case.tolerance = "".join(["emul", "ation"])  # equal to, not identical with, the literal
    with pytest.raises(ValueError, match="emulation"):
        check_case(case, {"out": case.expected["out"]}, FP32)


# -- runner fixtures -----------------------------------------------------------------------------------

BOS, MASK, GMASK = 130004, 130000, 130001
ID_PARAMS = {
    "bos_token_id": BOS,
    "mask_token_id": MASK,
    "gmask_token_id": GMASK,
    "position_encoding_2d": True,
}


def ids_case() -> Case:
    """A ChatGLM position-id case (exact rule); expected ids written out by hand."""
    input_ids = np.array([[5, 6, GMASK, BOS, 7, 8]])
    expected = np.array([[[0, 1, 2, 2, 2, 2], [0, 0, 0, 1, 2, 3]]])
    return Case(
        "ids-1",
        "chatglm_position_ids",
        None,
        {"input_ids": input_ids},
        {"out": expected},
        "chatglm",
        "exact",
        dict(ID_PARAMS),
    )


def apply_case(cid: str, io: str = "float64", seed: int = 1) -> Case:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((4, 8))
    if io == "bfloat16":
        x = _round_bf16(x).astype(np.float64)
    pos = np.array([0.0, 1.0, 5.0, 300.0])
    cfg = {"head_dim": 8, "layout": "half", "base": 10000.0}
    case = Case(
        cid, "apply", cfg, {"x": x, "positions": pos}, {}, "layout", "rotation", {"seq_len": None}, io
    )
    case.expected["out"] = rope_ref.apply(x, pos, case.rope_config())
    return case


def cos_sin_case() -> Case:
    cfg = {"head_dim": 8, "layout": "half", "base": 10000.0}
    pos = np.array([0.0, 3.0])
    case = Case("cs-1", "cos_sin", cfg, {"positions": pos}, {}, "tables", "trig")
    cos, sin = rope_ref.cos_sin(pos, case.rope_config())
    case.expected = {"cos": cos, "sin": sin}
    return case


def run_one(backend, case: Case, **kw):
    return Runner(backend, timeout=kw.pop("timeout", 30.0), spec="test").run([case], **kw)


class FloatIds(OracleBackend):
    def chatglm_position_ids(self, input_ids, **kw):
        return super().chatglm_position_ids(input_ids, **kw).astype(np.float64)


def test_exact_rule_refuses_float_output_even_with_right_values():
    assert run_one(OracleBackend(), ids_case()).results[0].status == "passed"
    result = run_one(FloatIds(), ids_case()).results[0]
    assert (result.status, result.kind) == ("failed", "dtype")


class Bf16Backend(OracleBackend):
    """Declares bfloat16 I/O and returns float32 arrays (allowed when they hold bfloat16 values)."""

    precision = PrecisionPolicy("bfloat16", "float32", "float32")
    rounds = True

    def from_numpy(self, array, dtype=None):
        return np.array(array, dtype=np.float32 if dtype is not None else array.dtype)

    def apply(self, x, positions, cfg, seq_len=None):
        out = rope_ref.apply(np.asarray(x, dtype=np.float64), positions, cfg, seq_len=seq_len).astype(
            np.float32
        )
        return _round_bf16(out) if self.rounds else out


class Bf16Unrounded(Bf16Backend):
    rounds = False


def test_float32_output_must_hold_bfloat16_values_under_bfloat16_io():
    case = apply_case("bf-1", io="bfloat16")
    assert run_one(Bf16Backend(), case).results[0].status == "passed"
    result = run_one(Bf16Unrounded(), case).results[0]
    assert (result.status, result.kind) == ("failed", "dtype")
    assert "bfloat16" in result.message


class InplaceMutatesPositions(OracleBackend):
    inplace = True

    def apply(self, x, positions, cfg, seq_len=None):
        out = super().apply(x, positions, cfg, seq_len)
        x[...] = out  # declared: allowed for the activation
        positions[...] = 0  # never allowed: positions are not an activation
        return x


class InplaceMutatesX(OracleBackend):
    inplace = True

    def apply(self, x, positions, cfg, seq_len=None):
        out = super().apply(x, positions, cfg, seq_len)
        x[...] = out
        return x


def test_inplace_exempts_activations_only():
    assert run_one(InplaceMutatesX(), apply_case("ip-1")).results[0].status == "passed"
    result = run_one(InplaceMutatesPositions(), apply_case("ip-2")).results[0]
    assert (result.status, result.kind) == ("failed", "mutation")
    assert "positions" in result.message


class Unsupported(OracleBackend):
    def apply(self, x, positions, cfg, seq_len=None):
        raise NotImplementedError("not here")


def test_xfail_entries_do_not_apply_to_unsupported_cases():
    report = run_one(Unsupported(), apply_case("un-1"), xfails={"un-1": "known gap"})
    assert report.results[0].status == "unsupported"
    assert report.counts()["xfailed"] == 0 and report.counts()["xpassed"] == 0


class ThreeTuple(OracleBackend):
    def cos_sin(self, positions, cfg, seq_len=None):
        cos, sin = super().cos_sin(positions, cfg, seq_len)
        return cos, sin, sin


class OneTuple(OracleBackend):
    def cos_sin(self, positions, cfg, seq_len=None):
        return (super().cos_sin(positions, cfg, seq_len)[0],)


class BareArray(OracleBackend):
    def cos_sin(self, positions, cfg, seq_len=None):
        return super().cos_sin(positions, cfg, seq_len)[0]


@pytest.mark.parametrize("backend", [ThreeTuple, OneTuple, BareArray])
def test_tuple_length_is_checked_as_a_shape_failure(backend):
    assert run_one(OracleBackend(), cos_sin_case()).results[0].status == "passed"
    result = run_one(backend(), cos_sin_case()).results[0]
    assert (result.status, result.kind) == ("failed", "shape")
    assert "tuple of 2" in result.message


@pytest.mark.parametrize("timeout", [0, 0.0, -1.0, float("nan"), float("inf"), True, "5", None])
def test_timeout_must_be_a_positive_number(timeout):
    with pytest.raises(ValueError, match="timeout"):
        Runner(OracleBackend(), timeout=timeout)


@pytest.mark.parametrize("cid", ["apply-half.d8[0]", "a+b(c)|d", "x^y$z*", "back\\slash{2}"])
def test_reproducer_pattern_selects_exactly_its_case(cid):
    runner = Runner(OracleBackend(), spec="test")
    argv = shlex.split(runner.reproducer(cid))
    pattern = argv[argv.index("-k") + 1]
    assert re.search(pattern, cid)
    decoys = [cid + "x", "x" + cid, cid.replace(cid[1], "Q", 1), re.sub(r"[^A-Za-z0-9]", "_", cid)]
    cases = [apply_case(c) for c in [*decoys, cid]]
    assert [c.id for c in select_cases(cases, pattern)] == [cid]


class BlocksUntilReleased(OracleBackend):
    """``apply`` blocks on an event (releasing the GIL) and records whether it finished."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.finished = threading.Event()

    def apply(self, x, positions, cfg, seq_len=None):
        self.release.wait(10)
        self.finished.set()
        return super().apply(x, positions, cfg, seq_len)


def test_runner_returns_at_the_timeout_without_waiting_for_the_call():
    """join(timeout): the run is judged while the call is still blocked (not after it returns)."""
    backend = BlocksUntilReleased()
    try:
        report = run_one(backend, apply_case("hang-1"), timeout=0.2)
        still_blocked = not backend.finished.is_set()
    finally:
        backend.release.set()
    result = report.results[0]
    assert still_blocked, "the runner waited for the hung call to return"
    assert (result.status, result.kind) == ("failed", "timeout")
    assert "did not return within" in result.message


# -- the decay rule, the emulation rule, ChatGLM rotation bounds, empty outputs, describe() ------------


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
        for c in check_case(apply_case("d-1"), {"out": apply_case("d-1").expected["out"] * 2}, FP32)
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
    case = apply_case("n-1")
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
