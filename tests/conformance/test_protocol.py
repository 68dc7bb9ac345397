"""``conformance.protocol``: the declarations a backend makes (unsupported reasons, per-operation
policies, in place), the default ``permute``, the ChatGLM next-ids mixin and the kernel-call mixin."""

from __future__ import annotations

import numpy as np
import pytest
from rope_ref.conformance.protocol import (
    UNSUPPORTED_REASONS,
    Backend,
    KernelCall,
    KernelShapeCalls,
    NextPositionIdsFromFullIds,
    PrecisionPolicy,
    Unsupported,
)
from shipped_golden import shipped_cases

import rope_ref


def test_unsupported_reasons_and_their_labels():
    assert UNSUPPORTED_REASONS == {
        "operation": "operation missing",
        "config": "config not expressible",
        "dtype": "dtype missing",
    }
    assert Unsupported().reason == "config" and isinstance(Unsupported(), NotImplementedError)
    assert (
        Unsupported("no bf16", "dtype").reason == "dtype"
        and str(Unsupported("no bf16", "dtype")) == "no bf16"
    )
    with pytest.raises(
        ValueError, match=r"^reason must be one of \['config', 'dtype', 'operation'\], got 'inplace'$"
    ):
        Unsupported("x", "inplace")


class PerOp(Backend):
    precision = PrecisionPolicy("float32", "float32", "float32")
    precision_by_op = {"cos_sin": PrecisionPolicy("float32", "float64", "float64")}  # noqa: RUF012


def test_precision_for_reads_the_operation_and_keeps_the_io_dtype():
    b = PerOp()
    assert b.precision_for("cos_sin") == PrecisionPolicy("float32", "float64", "float64")
    assert b.precision_for("apply") == PrecisionPolicy("float32", "float32", "float32")
    b.precision_by_op = {"apply": PrecisionPolicy("float64", "float32", "float32")}
    with pytest.raises(
        ValueError,
        match=r"precision_by_op\['apply'\] declares io dtype float64, but the backend's io dtype is float32",
    ):  # noqa: E501
        b.precision_for("apply")
    assert Backend().precision_for("apply") == PrecisionPolicy()


def test_backend_defaults():
    b = Backend()
    assert b.inplace is False and b.inplace_ops == frozenset() and b.oracle_tables == frozenset()
    assert repr(PerOp()) == "<PerOp unnamed 0 on cpu: io=float32 angles=float32 compute=float32>"
    mixed = type("Mixed", (Backend,), {"precision": PrecisionPolicy("float64", "float32", "float16")})()
    assert repr(mixed).endswith("io=float64 angles=float32 compute=float16>")


def test_default_permute_for_numpy_and_torch():
    a = np.arange(24.0).reshape(2, 3, 4)
    order = (2, 0, 1)  # a 3-cycle: the inverse permutation would give another shape
    np.testing.assert_array_equal(Backend().permute(a, order), np.transpose(a, order))
    torch = pytest.importorskip("torch")
    t = Backend().permute(torch.from_numpy(a), order)
    assert tuple(t.shape) == (4, 2, 3)
    np.testing.assert_array_equal(t.numpy(), np.transpose(a, order))


class GlmIds(NextPositionIdsFromFullIds, Backend):
    def chatglm_position_ids(self, input_ids, **tokens):
        return rope_ref.chatglm.position_ids(input_ids, **tokens)


@pytest.mark.parametrize("two_d", [True, False])
def test_next_position_ids_mixin_agrees_with_the_oracle(two_d):
    case = next(
        c for c in shipped_cases()
        if c.op == "chatglm_next_position_ids" and c.params["position_encoding_2d"] is two_d
        and "step3" in c.id
    )  # fmt: skip
    ids = case.inputs["input_ids"]
    got = GlmIds().chatglm_next_position_ids(ids, **case.params)
    np.testing.assert_array_equal(got, rope_ref.chatglm.next_position_ids(ids, **case.params))
    np.testing.assert_array_equal(got, case.expected[next(iter(case.expected))])


def test_kernel_call_where_keywords_and_defaults():
    call = KernelCall("thd", cu_seqlens=np.array([0, 3]), start_offsets=5, max_seqlen=3)
    assert (call.inverse, call.inplace, call.seq_len, call.positions, call.offset) == (
        False,
        False,
        None,
        None,
        None,
    )
    where = call.where()
    assert list(where) == ["positions", "offset", "cu_seqlens", "start_offsets", "max_seqlen"]
    assert where["start_offsets"] == 5 and where["max_seqlen"] == 3
    assert call.keywords()["axes"] == "thd" and call.replace(inverse=True).inverse is True
    with pytest.raises(TypeError):
        KernelCall("bshd", position=np.arange(3))  # a misspelt keyword


class Records(KernelShapeCalls, Backend):
    def _qk_call(self, q, k, cfg, call):
        return q, k, call

    def _qkv_call(self, qkv, cfg, num_heads_q, num_heads_kv, call):
        return num_heads_q, num_heads_kv, call

    def _axes_call(self, x, cfg, call):
        return x, call


def test_kernel_shape_mixin_passes_every_argument_in_its_place():
    q, k = np.zeros((2, 8, 4)), np.ones((2, 2, 4))
    got_q, got_k, call = Records().apply_qk(q, k, None, axes="shd", positions=np.arange(2), seq_len=7)
    assert got_q is q and got_k is k and call.seq_len == 7 and call.axes == "shd"
    hq, hk, call = Records().apply_qkv(None, None, axes="shd", num_heads_q=6, num_heads_kv=2, inverse=True)
    assert (hq, hk, call.inverse) == (6, 2, True)
    x, call = Records().apply_axes(q, None, axes="shd", offset=4, inplace=True)
    assert x is q and call.offset == 4 and call.inplace is True
