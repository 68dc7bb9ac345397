"""How the conformance runner judges each case (conformance/runner.py): output dtypes, shapes, tuples, input
mutation, exceptions, unsupported operations, borrowed tables, per-operation policies, timeouts and the
worker thread. Each verdict comes from the Runner itself on toy backends written here.
"""

from __future__ import annotations

import dataclasses
import threading

import numpy as np
import pytest
from equal_strings import fresh as _fresh
from rope_ref.conformance import tolerance
from rope_ref.conformance.case import Case
from rope_ref.conformance.oracle_backend import OracleBackend
from rope_ref.conformance.protocol import Backend, PrecisionPolicy, Unsupported
from rope_ref.conformance.runner import Runner
from small_cases import (
    CFG8,
    Doubles,
    F32Glm,
    _glm_case,
    _round_bf16,
    apply_case,
    rotation_case,
    run,
    run_one,
    table_case,
)

import rope_ref


class DtypeRecorder(OracleBackend):
    precision = PrecisionPolicy("float32", "float32", "float32")

    def __init__(self):
        self.asked = {}

    def from_numpy(self, array, dtype=None):
        self.asked[len(self.asked)] = dtype
        return np.array(array, dtype=np.float32 if dtype is not None else array.dtype, copy=True)

    def apply(self, x, positions, cfg, seq_len=None):
        out = rope_ref.apply(np.asarray(x, np.float64), positions, cfg, seq_len=seq_len)
        return out.astype(np.asarray(x).dtype)


def test_activations_take_the_io_dtype_and_other_inputs_keep_theirs():
    case = apply_case("d-1", io_dtype="float32")
    case.inputs["x"] = case.inputs["x"].astype(np.float32).astype(np.float64)
    case.expected["out"] = rope_ref.apply(case.inputs["x"], case.inputs["positions"], case.rope_config())
    backend = DtypeRecorder()
    (r,) = run(backend, [case]).results
    assert r.status == "passed", r.message
    assert backend.asked == {0: "float32", 1: None}  # x, then positions
    free = apply_case("d-2", io_dtype=None)
    backend = DtypeRecorder()
    (r,) = run(backend, [free]).results
    assert backend.asked == {0: None, 1: None}  # an I/O-free case hands stored dtypes through
    # apply's output is an activation: float64 from a backend declaring float32 I/O is a dtype failure.
    assert (r.status, r.kind) == ("failed", "dtype")
    assert r.message == "output 'out' has dtype float64; the backend declares io dtype float32"


class RaisesUnsupported(OracleBackend):
    def apply(self, x, positions, cfg, seq_len=None):
        raise Unsupported("no bf16 kernel", "dtype")


class RaisesBareNotImplemented(OracleBackend):
    def apply(self, x, positions, cfg, seq_len=None):
        raise NotImplementedError


class Minimal(Backend):
    """Overrides nothing but conversion: every operation is the protocol's own stub."""

    def from_numpy(self, array, dtype=None):
        return np.array(array, copy=True)

    def to_numpy(self, array):
        return np.asarray(array)


def test_unsupported_reasons_and_messages():
    (r,) = run(RaisesUnsupported(), [apply_case("u-1")]).results
    assert (r.status, r.unsupported_reason) == ("unsupported", "dtype")
    assert r.message == "apply raised NotImplementedError: no bf16 kernel"
    assert (r.kind, r.comparisons) == ("", [])
    (r,) = run(RaisesBareNotImplemented(), [apply_case("u-2")]).results
    assert (r.status, r.unsupported_reason) == ("unsupported", "config")
    assert r.message == "apply raised NotImplementedError"
    (r,) = run(Minimal(), [apply_case("u-3")]).results
    assert (r.status, r.unsupported_reason) == ("unsupported", "operation")


class BorrowsTables(OracleBackend):
    oracle_tables = frozenset({"inv_freq"})


class BorrowsWrongTables(BorrowsTables):
    def inv_freq(self, cfg, seq_len=None):
        return super().inv_freq(cfg, seq_len) * 2.0


def test_borrowed_only_for_passing_cases_of_listed_operations():
    cases = [table_case("b-1"), apply_case("b-2")]
    assert [r.borrowed for r in run(BorrowsTables(), cases).results] == [True, False]
    assert [r.borrowed for r in run(OracleBackend(), cases).results] == [False, False]
    (r, _) = run(BorrowsWrongTables(), cases).results
    assert (r.status, r.borrowed) == ("failed", False)


class HalfNaN(OracleBackend):
    def apply(self, x, positions, cfg, seq_len=None):
        out = super().apply(x, positions, cfg, seq_len)
        out[2, 1] = np.inf
        return out


def test_failure_kinds_and_messages_of_bad_values():
    (r,) = run(Doubles(), [apply_case("k-1")]).results
    assert (r.status, r.kind) == ("failed", "mismatch")
    bad = [c for c in r.comparisons if not c.passed]
    assert len(bad) == 2 and r.message == "\n".join(c.describe() for c in bad)
    (r,) = run(HalfNaN(), [apply_case("k-2")]).results
    assert (r.status, r.kind) == ("failed", "non-finite")
    assert r.worst.index == (2, 1)
    assert r.duration > 0.0


class Raises(OracleBackend):
    def apply(self, x, positions, cfg, seq_len=None):
        raise KeyError("boom")


def test_exception_message_names_the_type_and_the_traceback():
    (r,) = run(Raises(), [apply_case("x-1")]).results
    assert (r.status, r.kind) == ("failed", "exception")
    assert r.message.startswith("apply raised KeyError: 'boom'\nTraceback (most recent call last):")
    assert r.message.endswith("KeyError: 'boom'")


class ListCosSin(OracleBackend):
    def cos_sin(self, positions, cfg, seq_len=None):
        return list(super().cos_sin(positions, cfg, seq_len))


class IntTable(OracleBackend):
    def inv_freq(self, cfg, seq_len=None):
        return np.array([1, 0])


class F32CosSin(OracleBackend):
    precision = PrecisionPolicy("float32", "float32", "float32")

    def from_numpy(self, array, dtype=None):
        return np.array(array, dtype=np.float32 if dtype is not None else array.dtype, copy=True)

    def cos_sin(self, positions, cfg, seq_len=None):
        return tuple(v.astype(np.float64) for v in super().cos_sin(positions, cfg, seq_len))


def cos_sin_case(cid: str) -> Case:
    pos = np.array([0.0, 4.0])
    case = Case(cid, "cos_sin", dict(CFG8), {"positions": pos}, {}, "tables", "trig")
    cos, sin = rope_ref.cos_sin(pos, case.rope_config())
    case.expected = {"cos": cos, "sin": sin}
    return case


def _dtype_failure(backend, case) -> str:
    """The message of the one result of running ``case``, which must be a dtype failure."""
    (r,) = run(backend, [case]).results
    assert (r.status, r.kind) == ("failed", "dtype")
    return r.message


def test_outputs_may_be_a_list_and_tables_need_not_be_in_the_io_dtype():
    assert run(ListCosSin(), [cos_sin_case("o-1")]).results[0].status == "passed"
    # cos/sin are not activations: a float32-I/O backend may return them in float64
    assert run(F32CosSin(), [cos_sin_case("o-2")]).results[0].status == "passed"
    message = "output 'out' has dtype int64, expected a floating-point array"
    assert _dtype_failure(IntTable(), table_case("o-3")) == message


def test_wrong_shape_message():
    class Short(OracleBackend):
        def apply(self, x, positions, cfg, seq_len=None):
            return super().apply(x, positions, cfg, seq_len)[:2]

    (r,) = run(Short(), [apply_case("sh-1")]).results
    assert (r.status, r.kind, r.message) == (
        "failed",
        "shape",
        "output 'out' has shape (2, 8), expected (3, 8)",
    )


def test_tuple_length_message():
    class Three(OracleBackend):
        def cos_sin(self, positions, cfg, seq_len=None):
            return (*super().cos_sin(positions, cfg, seq_len), None)

    (r,) = run(Three(), [cos_sin_case("tl-1")]).results
    assert r.message == "cos_sin returned tuple, expected a tuple of 2 (cos, sin)"


BOS, MASK, GMASK = 130004, 130000, 130001


def ids_case(cid: str) -> Case:
    """ChatGLM-6B ids of [5, 6, [gMASK], <sop>, 7]: positions 0 1 2 2 2, blocks 0 0 0 1 2 (by hand)."""
    params = {
        "bos_token_id": BOS,
        "mask_token_id": MASK,
        "gmask_token_id": GMASK,
        "position_encoding_2d": True,
    }
    expected = np.array([[[0, 1, 2, 2, 2], [0, 0, 0, 1, 2]]])
    inputs = {"input_ids": np.array([[5, 6, GMASK, BOS, 7]])}
    return Case(cid, "chatglm_position_ids", None, inputs, {"out": expected}, "chatglm", "exact", params)


class NarrowIds(OracleBackend):
    dtype = np.uint16

    def chatglm_position_ids(self, input_ids, **kw):
        return super().chatglm_position_ids(input_ids, **kw).astype(self.dtype)


class BoolIds(NarrowIds):
    dtype = np.bool_


def test_exact_ids_accept_any_integer_width_and_nothing_else():
    assert run(OracleBackend(), [ids_case("id-1")]).results[0].status == "passed"
    assert run(NarrowIds(), [ids_case("id-2")]).results[0].status == "passed"
    message = "output 'out' has dtype bool, expected an integer array"
    assert _dtype_failure(BoolIds(), ids_case("id-3")) == message


class F16Returns32(OracleBackend):
    precision = PrecisionPolicy("float16", "float32", "float32")

    def from_numpy(self, array, dtype=None):
        return np.array(array, dtype=np.float16 if dtype is not None else array.dtype, copy=True)

    def apply(self, x, positions, cfg, seq_len=None):
        return rope_ref.apply(np.asarray(x, np.float64), positions, cfg, seq_len=seq_len).astype(self.out)

    out = np.float32


class F16Returns16(F16Returns32):
    out = np.float16


def _f16_case(cid: str) -> Case:
    case = apply_case(cid, io_dtype="float16")
    x = case.inputs["x"].astype(np.float16).astype(np.float64)
    case.inputs["x"] = x
    case.expected["out"] = rope_ref.apply(x, case.inputs["positions"], case.rope_config())
    return case


def test_float16_io_accepts_only_float16_output():
    assert run(F16Returns16(), [_f16_case("h-1")]).results[0].status == "passed"
    message = "output 'out' has dtype float32; the backend declares io dtype float16"
    assert _dtype_failure(F16Returns32(), _f16_case("h-2")) == message


def test_emulation_outputs_are_exempt_from_the_io_dtype_check():
    assert run(F32Glm(), [_glm_case("g-1", "chatglm-6b-fp16")]).results[0].status == "passed"
    (r,) = run(F32Glm(), [_glm_case("g-2", "float64")]).results
    assert (r.status, r.kind) == ("failed", "dtype")


class MutatesBackendCopy(OracleBackend):
    """Writes into the converted array it was handed (a copy): only the backend array changes."""

    def apply(self, x, positions, cfg, seq_len=None):
        out = super().apply(x, positions, cfg, seq_len)
        positions[0] = 99.0
        return out


class MutatesHanded(OracleBackend):
    """Converts by copying but keeps the NumPy arrays it was handed, and writes into x's later."""

    def from_numpy(self, array, dtype=None):
        self.handed = getattr(self, "handed", []) + [array]
        return super().from_numpy(array, dtype)

    def apply(self, x, positions, cfg, seq_len=None):
        out = super().apply(x, positions, cfg, seq_len)
        self.handed[0][1, 2] += 1.0
        return out


def test_mutation_messages_name_the_input_and_which_array():
    (r,) = run(MutatesBackendCopy(), [apply_case("m-1")]).results
    assert (r.status, r.kind) == ("failed", "mutation")
    assert (
        r.message
        == "apply changed its input 'positions' (backend array) but the backend does not declare inplace=True"
    )
    (r,) = run(MutatesHanded(), [apply_case("m-2")]).results
    assert (r.status, r.kind) == ("failed", "mutation")
    assert r.message == (
        "apply changed its input 'x' (NumPy array handed to from_numpy) "
        "but the backend does not declare inplace=True"
    )


class ReshapesInput(OracleBackend):
    """Replaces its input's shape in place (same values, other shape): still a change."""

    def apply(self, x, positions, cfg, seq_len=None):
        out = super().apply(x, positions, cfg, seq_len)
        positions.shape = (3, 1)
        return out


def test_a_reshaped_input_counts_as_changed():
    (r,) = run(ReshapesInput(), [apply_case("m-3")]).results
    assert (r.status, r.kind) == ("failed", "mutation")


class NaNInputsUntouched(OracleBackend):
    pass


def test_nan_inputs_left_alone_are_not_a_mutation():
    case = apply_case("m-4")
    case.inputs["x"][1, 1] = np.nan
    case.expected["out"] = rope_ref.apply(case.inputs["x"], case.inputs["positions"], case.rope_config())
    (r,) = run(NaNInputsUntouched(), [case]).results
    assert r.kind != "mutation"


class F32AnglesForTables(OracleBackend):
    """float32 inv_freq (its table path) on a float64 backend that declares it per operation."""

    precision_by_op = {"inv_freq": PrecisionPolicy("float64", "float32", "float64")}  # noqa: RUF012

    def inv_freq(self, cfg, seq_len=None):
        return super().inv_freq(cfg, seq_len).astype(np.float32).astype(np.float64) * (1 + 2.0**-22)


def test_each_operation_is_judged_under_its_declared_policy():
    case = table_case("p-1")
    assert run(F32AnglesForTables(), [case]).results[0].status == "passed"

    class Undeclared(F32AnglesForTables):
        precision_by_op = {}  # noqa: RUF012

    assert run(Undeclared(), [case]).results[0].status == "failed"


def _dyn_cfg() -> dict:
    scaling = {"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 64}
    return {"head_dim": 4, "layout": "half", "base": 10000.0, "scaling": scaling}


def test_seq_len_parameter_reaches_the_backend():
    """Dynamic NTK at seq_len 256 > 64: base' = 10000 (2 * 256 / 64 - 1)^(4 / 2) = 490000,
    inv_freq = [1, 490000^(-1/2)] = [1, 1/700]."""
    case = Case("q-1", "inv_freq", _dyn_cfg(), {}, {"out": np.array([1.0, 1.0 / 700.0])}, "scaling", "table")
    case.params["seq_len"] = 256
    assert run(OracleBackend(), [case]).results[0].status == "passed"
    plain = Case("q-2", "inv_freq", _dyn_cfg(), {}, {"out": np.array([1.0, 0.01])}, "scaling", "table")
    assert run(OracleBackend(), [plain]).results[0].status == "passed"


def test_every_dispatched_operation_runs():
    cfg = Case("c", "apply", dict(CFG8), {}, {}, "", "").rope_config()
    x = np.random.default_rng(9).standard_normal((3, 8))
    pos = np.array([0.0, 1.0, 3.0])
    g = np.random.default_rng(10).standard_normal((3, 8))
    vjp = Case(
        "v-1", "apply_vjp", dict(CFG8), {"x": x, "positions": pos, "grad_out": g}, {}, "layout", "rotation"
    )
    vjp.expected["out"] = rope_ref.apply(g, -pos, cfg)  # R(theta)^T g = R(-theta) g
    af = table_case("v-2", "attention_factor")
    r = np.array([0.0, 1.0, 10.0])
    decay = Case("v-3", "decay_upper_bound", dict(CFG8), {"distances": r}, {}, "decay", "decay")
    decay.expected["out"] = rope_ref.decay.relative_upper_bound(r, cfg)
    nxt = ids_case("v-4")
    nxt.op = "chatglm_next_position_ids"
    # the last token: [mask_position, seq_len - context_length] = [2, 5 - 3]
    nxt.expected["out"] = np.array([[[2], [2]]])
    glm = _glm_case("v-5", "float64")
    glm.io_dtype = "float64"
    report = run(OracleBackend(), [vjp, af, decay, nxt, glm])
    assert [(x.status, x.message) for x in report.results] == [("passed", "")] * 5
    bogus = table_case("v-6")
    bogus.op = "no_such_op"
    (res,) = run(OracleBackend(), [bogus]).results
    assert (res.status, res.kind) == ("failed", "exception")
    assert res.message.startswith("no_such_op raised ValueError: case 'v-6': unknown op 'no_such_op'")


class RecordsThread(OracleBackend):
    def apply(self, x, positions, cfg, seq_len=None):
        me = threading.current_thread()
        self.seen = (me.name, me.daemon, me is threading.main_thread())
        return super().apply(x, positions, cfg, seq_len)


def test_each_case_runs_in_a_named_daemon_worker_thread():
    """A daemon thread, so that a call that never returns cannot keep the interpreter alive at exit."""
    backend = RecordsThread()
    run(backend, [apply_case("thr-1")])
    assert backend.seen == ("rope-ref case thr-1", True, False)


class ComplexCosSin(OracleBackend):
    def cos_sin(self, positions, cfg, seq_len=None):
        return tuple(v.astype(np.complex128) for v in super().cos_sin(positions, cfg, seq_len))


class BoolTable(OracleBackend):
    def inv_freq(self, cfg, seq_len=None):
        return np.array([True, False])


def test_complex_and_bool_outputs_are_not_floating_point():
    message = "output 'cos' has dtype complex128, expected a floating-point array"
    assert _dtype_failure(ComplexCosSin(), cos_sin_case("cx-1")) == message
    (r,) = run(BoolTable(), [table_case("cx-2")]).results
    assert (r.status, r.kind, r.message) == (
        "failed",
        "dtype",
        "output 'out' has dtype bool, expected a floating-point array",
    )


def test_a_call_taking_exactly_the_timeout_is_not_late(monkeypatch):
    """The late-return rule is duration > timeout: a fake clock puts the call at exactly 0.5 s of 0.5 s."""
    import rope_ref.conformance.runner as runner_module

    ticks = iter([0.0, 10.0, 10.5])  # run() start, case start, case end; later reads repeat the last

    def clock(last=[10.5]):  # noqa: B006 - the default is the clock's memory
        last[0] = next(ticks, last[0])
        return last[0]

    monkeypatch.setattr(runner_module.time, "perf_counter", clock)
    (r,) = Runner(OracleBackend(), timeout=0.5, spec="t").run([apply_case("tick-1")]).results
    assert r.duration == 0.5
    assert (r.status, r.kind) == ("passed", "")


def test_fits_means_exactly_representable():
    from rope_ref.conformance.runner import _fits

    assert _fits(np.array([1.0, 0.5, -3.0, np.inf, np.nan]), "float16")
    assert not _fits(np.array([1.0, 1.0 + 2.0**-12]), "float16")  # rounds down to 1.0: not representable
    assert not _fits(np.array([1.0 - 2.0**-13]), "float16")  # rounds up
    assert _fits(np.array([1.0 + 2.0**-7, 2.0**-130]), "bfloat16")
    assert not _fits(np.array([1.0 + 2.0**-23]), "bfloat16")  # only the last float32 bit set
    assert not _fits(np.array([1.0 + 2.0**-8]), "bfloat16")  # the bit just below bfloat16's last


class TrueBf16(OracleBackend):
    """Declares bfloat16 I/O and returns ml_dtypes bfloat16 arrays."""

    precision = PrecisionPolicy("bfloat16", "float32", "float32")

    def from_numpy(self, array, dtype=None):
        import ml_dtypes

        return np.array(array, dtype=ml_dtypes.bfloat16 if dtype is not None else array.dtype, copy=True)

    def to_numpy(self, array):
        return np.asarray(array)

    def apply(self, x, positions, cfg, seq_len=None):
        import ml_dtypes

        return rope_ref.apply(np.asarray(x, np.float64), positions, cfg, seq_len=seq_len).astype(
            ml_dtypes.bfloat16
        )


def test_bfloat16_arrays_are_floating_point_output():
    pytest.importorskip("ml_dtypes")
    import ml_dtypes

    case = apply_case("bf-true", io_dtype="bfloat16")
    case.inputs["x"] = case.inputs["x"].astype(ml_dtypes.bfloat16).astype(np.float64)
    case.expected["out"] = rope_ref.apply(case.inputs["x"], case.inputs["positions"], case.rope_config())
    (r,) = run(TrueBf16(), [case]).results
    assert r.status == "passed", r.message


ID_PARAMS = {
    "bos_token_id": BOS,
    "mask_token_id": MASK,
    "gmask_token_id": GMASK,
    "position_encoding_2d": True,
}


def glm_ids_case() -> Case:
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


def trig_tables_case() -> Case:
    cfg = {"head_dim": 8, "layout": "half", "base": 10000.0}
    pos = np.array([0.0, 3.0])
    case = Case("cs-1", "cos_sin", cfg, {"positions": pos}, {}, "tables", "trig")
    cos, sin = rope_ref.cos_sin(pos, case.rope_config())
    case.expected = {"cos": cos, "sin": sin}
    return case


class FloatIds(OracleBackend):
    def chatglm_position_ids(self, input_ids, **kw):
        return super().chatglm_position_ids(input_ids, **kw).astype(np.float64)


def test_exact_rule_refuses_float_output_even_with_right_values():
    assert run_one(OracleBackend(), glm_ids_case()).results[0].status == "passed"
    result = run_one(FloatIds(), glm_ids_case()).results[0]
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
    case = rotation_case("bf-1", io="bfloat16")
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
    assert run_one(InplaceMutatesX(), rotation_case("ip-1")).results[0].status == "passed"
    result = run_one(InplaceMutatesPositions(), rotation_case("ip-2")).results[0]
    assert (result.status, result.kind) == ("failed", "mutation")
    assert "positions" in result.message


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
    assert run_one(OracleBackend(), trig_tables_case()).results[0].status == "passed"
    result = run_one(backend(), trig_tables_case()).results[0]
    assert (result.status, result.kind) == ("failed", "shape")
    assert "tuple of 2" in result.message


@pytest.mark.parametrize("timeout", [0, 0.0, -1.0, float("nan"), float("inf"), True, "5", None])
def test_timeout_must_be_a_positive_number(timeout):
    with pytest.raises(ValueError, match="timeout"):
        Runner(OracleBackend(), timeout=timeout)


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
        report = run_one(backend, rotation_case("hang-1"), timeout=0.2)
        still_blocked = not backend.finished.is_set()
    finally:
        backend.release.set()
    result = report.results[0]
    assert still_blocked, "the runner waited for the hung call to return"
    assert (result.status, result.kind) == ("failed", "timeout")
    assert "did not return within" in result.message


def test_runner_reads_the_emulation_rule_and_the_io_dtype_by_value():
    from rope_ref.conformance.oracle_backend import OracleBackend
    from small_cases import F32Glm, _glm_case, apply_case, run

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
