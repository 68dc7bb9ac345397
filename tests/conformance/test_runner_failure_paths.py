"""The runner's failure paths, each bitten by a backend that makes exactly that mistake
(``broken_backends.RUNNER_FAILURE_PATHS`` and small spies here): integer / wrong-dtype / not-bfloat16
outputs, float ids, too many outputs, NaN next to a plain mismatch, a NotImplementedError from the
backend's own method or from the protocol's stub, per-operation policies, io-less cases, a seq_len that
must reach the backend, the backend info of the report, borrowed tables that fail, the timeout argument.
"""

from __future__ import annotations

import broken_backends as bb
import numpy as np
import pytest
from rope_ref.conformance.oracle_backend import OracleBackend
from rope_ref.conformance.protocol import Backend, PrecisionPolicy
from rope_ref.conformance.runner import Runner
from small_cases import rotation_case, run_one, table_case

import rope_ref
from rope_ref.axes import positions_for_axes


def _one(backend, case):
    [result] = run_one(backend, case).results
    return result


@pytest.fixture(scope="module")
def by_op(cases):
    def first(op, io="float64", **params):
        def fits(c):
            return (
                c.op == op
                and c.io_dtype in (io, None)
                and all(c.params.get(k) == w for k, w in params.items())
            )

        return next(c for c in cases if fits(c))

    return first


def test_an_integer_output_is_a_dtype_failure():
    r = _one(bb.IntegerOutput("float32"), rotation_case("int-out", io="float32"))
    assert (r.status, r.kind) == ("failed", "dtype")
    assert r.message == "output 'out' has dtype int32, expected a floating-point array"


def test_a_float32_output_of_a_float16_backend_is_a_dtype_failure():
    case = rotation_case("f16", io="float16")
    case.inputs["x"] = case.inputs["x"].astype(np.float16).astype(np.float64)
    case.expected["out"] = rope_ref.apply(case.inputs["x"], case.inputs["positions"], case.rope_config())
    assert _one(bb.Float32Backend("float16"), case).status == "passed"
    r = _one(bb.OutputNotCastBack("float16"), case)
    assert (r.status, r.kind) == ("failed", "dtype")
    assert r.message == "output 'out' has dtype float32; the backend declares io dtype float16"


def test_float32_values_a_bfloat16_backend_cannot_hold_are_a_dtype_failure():
    case = rotation_case("bf16", io="bfloat16")
    assert _one(bb.Float32Backend("bfloat16"), case).status == "passed"
    r = _one(bb.Bfloat16LowBitsKept("bfloat16"), case)
    assert (r.status, r.kind) == ("failed", "dtype")
    assert "holds float32 values that bfloat16 cannot represent" in r.message


def test_float_ids_are_a_dtype_failure(by_op):
    case = by_op("chatglm_position_ids")
    assert _one(bb.Float32Backend("float64"), case).status == "passed"
    r = _one(bb.FloatPositionIds("float64"), case)
    assert (r.status, r.kind) == ("failed", "dtype")
    assert "has dtype float32, expected an integer array" in r.message


def test_one_output_too_many_is_a_shape_failure(by_op):
    case = by_op("cos_sin", "float32")
    r = _one(bb.ExtraTableOutput("float32"), case)
    assert (r.status, r.kind) == ("failed", "shape")
    assert r.message == "cos_sin returned tuple, expected a tuple of 2 (cos, sin)"


def test_a_nan_next_to_a_mismatch_is_reported_non_finite(by_op):
    case = by_op("cos_sin", "float32")
    assert _one(bb.Float32Backend("float32"), case).status == "passed"
    r = _one(bb.WrongCosNaNSin("float32"), case)
    assert (r.status, r.kind) == ("failed", "non-finite")
    assert sum(not c.passed for c in r.comparisons) == 2


class OwnMethodRaises(OracleBackend):
    def apply(self, x, positions, cfg, seq_len=None):
        raise NotImplementedError("this config needs a kernel we lack")


class LacksVjp(OracleBackend):
    apply_vjp = Backend.apply_vjp


def test_not_implemented_reason_tells_a_stub_from_the_backends_own_method(by_op):
    r = _one(OwnMethodRaises(), rotation_case("own"))
    assert (r.status, r.unsupported_reason) == ("unsupported", "config")
    assert r.message == "apply raised NotImplementedError: this config needs a kernel we lack"
    r = _one(LacksVjp(), by_op("apply_vjp"))
    assert (r.status, r.unsupported_reason) == ("unsupported", "operation")


class Float32AnglesCosSin(OracleBackend):
    """float64 I/O, cos/sin from float32 angles (a float32 table cache), declared per operation."""

    precision_by_op = {"cos_sin": PrecisionPolicy("float64", "float32", "float64")}  # noqa: RUF012

    def cos_sin(self, positions, cfg, seq_len=None):
        pos = np.asarray(positions, dtype=np.float32)
        theta = pos[..., None] * rope_ref.inv_freq(cfg, seq_len).astype(np.float32)
        a = rope_ref.attention_factor(cfg, seq_len)
        return a * np.cos(theta).astype(np.float64), a * np.sin(theta).astype(np.float64)


class Float32AnglesAxes(OracleBackend):
    """float64 I/O, apply_axes rotated with float32 angles, declared per operation."""

    precision_by_op = {"apply_axes": PrecisionPolicy("float64", "float32", "float64")}  # noqa: RUF012

    def _axes_call(self, x, cfg, call):
        assert cfg.layout == "half" and cfg.scaling is None and not call.inplace
        pos = np.broadcast_to(positions_for_axes(self._ids(x, call), call.axes, x.shape), x.shape[:-1])
        theta = pos.astype(np.float32)[..., None] * rope_ref.inv_freq(cfg).astype(np.float32)
        c, s = np.cos(theta).astype(np.float64), np.sin(theta).astype(np.float64)
        n = cfg.rotary_dim // 2
        y = np.array(x, copy=True)
        y[..., :n] = x[..., :n] * c - x[..., n : 2 * n] * s
        y[..., n : 2 * n] = x[..., n : 2 * n] * c + x[..., :n] * s
        return y


def test_per_operation_policies_are_the_ones_judged(by_op):
    case = by_op("cos_sin")
    far = case.inputs["positions"].max() > 2000
    assert far and _one(Float32AnglesCosSin(), case).status == "passed"
    strict = type("Strict", (Float32AnglesCosSin,), {"precision_by_op": {}})
    assert _one(strict(), case).status == "failed"


def test_per_operation_policy_of_a_kernel_shape_op(cases):
    case = next(c for c in cases if c.id == "apply_axes-bshd-ids-half-fp64")
    assert _one(Float32AnglesAxes(), case).status == "passed"
    strict = type("Strict", (Float32AnglesAxes,), {"precision_by_op": {}})
    assert _one(strict(), case).status == "failed"


def test_io_less_cases_run_at_every_io_dtype_with_their_own_dtype():
    seen = []

    class Spy(bb.Float32Backend):
        def from_numpy(self, array, dtype=None):
            seen.append(dtype)
            return super().from_numpy(array, dtype)

    case = table_case("inv", "inv_freq")
    assert case.io_dtype is None
    r = _one(Spy("float16"), case)
    assert r.status == "passed"
    emu = rotation_case("emu", io="float64")
    emu.io_dtype = None  # an io-less rotation: its activations keep their stored dtype
    seen.clear()
    _one(Spy("float32"), emu)
    assert seen and set(seen) == {None}


def test_an_explicit_seq_len_reaches_the_backend(cases):
    seen = []

    class Spy(OracleBackend):
        def apply(self, x, positions, cfg, seq_len=None):
            seen.append(seq_len)
            return super().apply(x, positions, cfg, seq_len)

    case = next(c for c in cases if c.op == "apply" and c.params.get("seq_len") and c.io_dtype == "float64")
    assert _one(Spy(), case).status == "passed"
    assert seen == [case.params["seq_len"]]


def test_report_names_each_dtype_of_the_policy():
    class Mixed(OracleBackend):
        precision = PrecisionPolicy("float64", "float32", "float16")

    info = Runner(Mixed()).run([]).backend
    assert (info["io_dtype"], info["angle_dtype"], info["compute_dtype"]) == ("float64", "float32", "float16")


class WrongBorrowedTable(OracleBackend):
    oracle_tables = frozenset({"inv_freq"})

    def inv_freq(self, cfg, seq_len=None):
        return super().inv_freq(cfg, seq_len) * 1.5


def test_a_failing_borrowed_table_is_a_failure_not_a_borrowed_pass():
    case = table_case("inv", "inv_freq")
    r = _one(WrongBorrowedTable(), case)
    assert r.status == "failed" and not r.borrowed
    good = _one(type("Good", (OracleBackend,), {"oracle_tables": frozenset({"inv_freq"})})(), case)
    assert good.status == "passed" and good.borrowed


@pytest.mark.parametrize("bad", [True, False, 0, -1.0, float("inf"), float("nan"), "10"])
def test_timeout_must_be_a_positive_finite_number(bad):
    with pytest.raises(ValueError, match="timeout must be a positive, finite number of seconds"):
        Runner(OracleBackend(), timeout=bad)


def test_runner_refuses_a_non_backend():
    with pytest.raises(TypeError, match="backend must be a rope_ref.conformance.Backend, got object"):
        Runner(object())
