"""Issue 16, torch adapter behind the conformance protocol: ``TorchBackend.apply_axes``, ``apply_qk``,
``apply_qkv`` and ``inplace_ops``.

The adapter methods must serve every positions form the runner hands (int64 tensors; a Python int for
``offset`` / ``start_offsets``; ``max_seqlen`` alongside ``cu_seqlens``), under the backend's precision
policy exactly as its ``apply`` does, write in place only through the views they are given, refuse bad
input with a ``ValueError`` naming the argument, differentiate, and compile without graph breaks.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from rope_ref.backends import torch as rt  # noqa: E402
from rope_ref.conformance.protocol import Backend  # noqa: E402

import rope_ref  # noqa: E402
from rope_ref.positions import positions_from_cu_seqlens, positions_from_offset  # noqa: E402

PRECISIONS = ["fp64", "fp32", "fp16", "bf16"]
DTYPES = {"fp64": torch.float64, "fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
ANGLES = {"fp64": torch.float64, "fp32": torch.float32, "fp16": torch.float32, "bf16": torch.float32}
HALF = rope_ref.RopeConfig(64, layout="half")
INTERLEAVED = rope_ref.RopeConfig(64, layout="interleaved", rotary_dim=48)
KERNEL_OPS = ("apply_axes", "apply_qk", "apply_qkv", "round_trip")


def make(shape, dtype=torch.float64, seed=0) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).to(dtype)


def test_declares_the_operations_and_in_place():
    b = rt.make_backend("fp32")
    assert b.inplace_ops == frozenset({"apply_axes", "apply_qk", "apply_qkv"})
    for op in ("apply_axes", "apply_qk", "apply_qkv"):
        assert getattr(type(b), op) is not getattr(Backend, op)


@pytest.mark.parametrize("precision", PRECISIONS)
def test_shipped_kernel_shape_cases_pass(precision):
    from rope_ref.conformance.runner import Runner
    from shipped_golden import shipped_cases

    cases = [c for c in shipped_cases() if c.op in KERNEL_OPS]
    if not cases:
        pytest.skip("the shipped golden set has no kernel-shape cases yet")
    report = Runner(rt.make_backend(precision), precision=precision).run(cases)
    counts = report.counts()
    assert counts["passed"] > 0 and counts["unsupported"] == 0
    assert not report.failures, {r.case_id: f"{r.kind}: {r.message}" for r in report.failures}


@pytest.mark.parametrize("precision", PRECISIONS)
def test_policy_is_the_apply_policy(precision):
    """Same angle dtype, compute dtype and kernel as the backend's ``apply``: the same bits as ``rt.apply``
    with the policy's angle dtype, and as the backend's own ``apply`` on the equivalent positions."""
    b = rt.make_backend(precision)
    dtype, angle = DTYPES[precision], ANGLES[precision]
    x = make((2, 3, 7, 64), dtype)  # bhsd
    ids = torch.arange(14).reshape(2, 7) * 5
    got = b.apply_axes(x, INTERLEAVED, axes="bhsd", positions=ids)
    want = rt.apply(x, ids, INTERLEAVED, axes="bhsd", angle_dtype=angle, compute_dtype=torch.float32)
    if dtype == torch.float64:
        want = rt.apply(x, ids, INTERLEAVED, axes="bhsd", angle_dtype=angle)
    assert got.dtype == dtype and torch.equal(got, want)
    assert torch.equal(got, b.apply(x, ids[:, None, :], INTERLEAVED))
    q, k = make((2, 7, 8, 64), dtype, 1), make((2, 7, 2, 64), dtype, 2)
    qr, kr = b.apply_qk(q, k, HALF, axes="bshd", positions=ids)
    assert torch.equal(qr, b.apply(q, ids[:, :, None], HALF))
    assert torch.equal(kr, b.apply(k, ids[:, :, None], HALF))


def test_fp64_policy_is_float64_accurate():
    b = rt.make_backend("fp64")
    x = make((9, 3, 64), seed=3)
    pos = np.arange(9) * 1000 + 7
    y = b.apply_axes(x, HALF, axes="thd", positions=torch.as_tensor(pos))
    ref = rope_ref.apply(x.numpy(), pos, HALF, axes="thd")
    assert float(np.abs(y.numpy() - ref).max()) < 1e-11


@pytest.mark.parametrize("offset", [6, [6, 0, 31]])
def test_offset_int_or_tensor(offset):
    b = rt.make_backend("fp64")
    x = make((3, 5, 2, 64), seed=4)
    off = offset if isinstance(offset, int) else torch.tensor(offset)
    y = b.apply_axes(x, HALF, axes="bshd", offset=off)
    pos = positions_from_offset(np.asarray(offset), 5, batch=3)
    want = rope_ref.apply(x.numpy(), pos, HALF, axes="bshd")
    np.testing.assert_allclose(y.numpy(), want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("starts", [None, 3, [0, 40, 2]])
def test_cu_seqlens_with_max_seqlen_and_start_offsets(starts):
    b = rt.make_backend("fp64")
    cu = np.array([0, 4, 5, 12])
    x = make((12, 2, 64), seed=5)
    start = starts if starts is None or isinstance(starts, int) else torch.tensor(starts)
    y = b.apply_axes(
        x, INTERLEAVED, axes="thd", cu_seqlens=torch.as_tensor(cu), start_offsets=start, max_seqlen=7
    )
    pos = positions_from_cu_seqlens(cu, starts)
    want = rope_ref.apply(x.numpy(), pos, INTERLEAVED, axes="thd")
    np.testing.assert_allclose(y.numpy(), want, rtol=0, atol=1e-12)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_in_place_writes_only_the_views(precision):
    """q and k are slices of one NaN-padded buffer: the adapter writes them and nothing else."""
    b = rt.make_backend(precision)
    dtype = DTYPES[precision]
    buf = torch.full((6, 2 + 8 + 2 + 2 + 1, 64), float("nan"), dtype=dtype)
    buf[:, 2:14] = make((6, 12, 64), dtype, 6)
    before = buf.clone()
    q, k = buf[:, 2:10], buf[:, 10:12]
    pos = torch.arange(6) * 3
    want_q = b.apply_axes(before[:, 2:10], HALF, axes="thd", positions=pos)
    want_k = b.apply_axes(before[:, 10:12], HALF, axes="thd", positions=pos)
    qr, kr = b.apply_qk(q, k, HALF, axes="thd", positions=pos, inplace=True)
    assert qr.data_ptr() == q.data_ptr() and kr.data_ptr() == k.data_ptr()
    assert torch.equal(buf[:, 2:10], want_q) and torch.equal(buf[:, 10:12], want_k)
    outside = torch.cat((buf[:, :2], buf[:, 12:]), 1)
    assert torch.equal(outside.isnan(), torch.cat((before[:, :2], before[:, 12:]), 1).isnan())
    assert torch.equal(buf[:, 12:14], before[:, 12:14])
    # the whole packed tensor (a view into the buffer) through apply_qkv, in place
    packed = buf[:, 2:14]
    again = packed.clone()
    assert (
        b.apply_qkv(packed, HALF, axes="thd", num_heads_q=8, num_heads_kv=2, positions=pos, inplace=True)
        is packed
    )
    out = b.apply_qkv(again, HALF, axes="thd", num_heads_q=8, num_heads_kv=2, positions=pos)
    assert torch.equal(out, packed) and torch.isnan(buf[:, :2]).all() and torch.isnan(buf[:, 14:]).all()


def test_out_of_place_leaves_inputs_and_v_alone():
    b = rt.make_backend("bf16")
    qkv = make((2, 4, 6 + 2 * 3, 64), torch.bfloat16, 7).transpose(1, 2)  # bhsd view of a bshd buffer
    orig = qkv.clone()
    ids = torch.arange(8).reshape(2, 4)
    out = b.apply_qkv(qkv, INTERLEAVED, axes="bhsd", num_heads_q=6, num_heads_kv=3, positions=ids)
    assert torch.equal(qkv, orig)
    assert torch.equal(out[:, 9:].view(torch.int16), orig[:, 9:].view(torch.int16))
    assert torch.equal(out[:, :6], b.apply_axes(orig[:, :6], INTERLEAVED, axes="bhsd", positions=ids))


@pytest.mark.parametrize(
    "call, name",
    [
        (
            lambda b, x, t: b.apply_axes(t, HALF, axes="thd", cu_seqlens=torch.tensor([0, 6, 3, 9])),
            "cu_seqlens",
        ),
        (lambda b, x, t: b.apply_axes(t, HALF, axes="thd", cu_seqlens=torch.tensor([2, 9])), "cu_seqlens"),
        (lambda b, x, t: b.apply_axes(t, HALF, axes="thd", cu_seqlens=torch.tensor([0, 8])), "cu_seqlens"),
        (lambda b, x, t: b.apply_axes(x, HALF, axes="thd", positions=torch.arange(5)), "axes"),
        (lambda b, x, t: b.apply_axes(x, HALF, axes="bshd", offset=-3), "offset"),
        (lambda b, x, t: b.apply_axes(x, HALF, axes="bshd", offset=2.5), "offset"),
        (
            lambda b, x, t: b.apply_axes(
                t, HALF, axes="thd", cu_seqlens=torch.tensor([0, 9]), start_offsets=-1, max_seqlen=9
            ),
            "start_offsets",
        ),
        (lambda b, x, t: b.apply_qk(x, x[:, :, :3], HALF, axes="bshd", positions=torch.arange(5)), "k heads"),
        (
            lambda b, x, t: b.apply_qkv(x, HALF, axes="bshd", num_heads_q=1, num_heads_kv=2, offset=0),
            "num_heads",
        ),
        (
            lambda b, x, t: b.apply_qkv(x, HALF, axes="bshd", num_heads_q=3, num_heads_kv=1, offset=0),
            "num_heads",
        ),
    ],
)
def test_bad_input_names_the_argument(call, name):
    b = rt.make_backend("fp32")
    x, t = make((2, 5, 4, 64), torch.float32), make((9, 2, 64), torch.float32)
    with pytest.raises(ValueError, match=name):
        call(b, x, t)


@pytest.mark.slow
def test_gradients_through_the_adapter():
    """gradcheck (float64) through each method: ids on a transposed view, varlen inverse, q/k, packed."""
    b = rt.make_backend("fp64")
    small = rope_ref.RopeConfig(8, layout="half", rotary_dim=6)
    x = make((2, 4, 3, 8)).transpose(1, 2).requires_grad_()  # bshd view of a bhsd leaf
    ids = torch.tensor([[0, 1, 2], [7, 8, 9]])
    assert torch.autograd.gradcheck(lambda a: b.apply_axes(a, small, axes="bshd", positions=ids), (x,))
    t = make((5, 2, 8), seed=1).requires_grad_()
    cu = torch.tensor([0, 2, 5])
    assert torch.autograd.gradcheck(
        lambda a: b.apply_axes(
            a, small, axes="thd", cu_seqlens=cu, start_offsets=4, max_seqlen=3, inverse=True
        ),
        (t,),
    )
    q, k = make((2, 3, 4, 8), seed=2).requires_grad_(), make((2, 3, 1, 8), seed=3).requires_grad_()
    assert torch.autograd.gradcheck(lambda a, c: b.apply_qk(a, c, small, axes="bshd", offset=5), (q, k))
    qkv = make((2, 3, 6, 8), seed=4).requires_grad_()
    assert torch.autograd.gradcheck(
        lambda a: b.apply_qkv(a, small, axes="bshd", num_heads_q=2, num_heads_kv=2, positions=ids), (qkv,)
    )


@pytest.mark.slow
def test_compile_fullgraph_adapter_methods():
    """One ``torch.compile(fullgraph=True)`` over the three methods (a graph break would raise)."""
    b = rt.make_backend("fp32")

    def step(x, q, k, qkv, ids, cu):
        y = b.apply_axes(x, INTERLEAVED, axes="bhsd", positions=ids)
        qr, kr = b.apply_qk(q, k, HALF, axes="thd", cu_seqlens=cu, start_offsets=2, max_seqlen=5)
        packed = b.apply_qkv(qkv, HALF, axes="bshd", num_heads_q=4, num_heads_kv=2, offset=3, inverse=True)
        return y, qr, kr, packed

    x = make((2, 5, 3, 64), torch.float32).transpose(1, 2)  # a bhsd view
    q, k = make((9, 4, 64), torch.float32, 1), make((9, 1, 64), torch.float32, 2)
    qkv = make((2, 5, 8, 64), torch.float32, 3)
    args = (x, q, k, qkv, torch.arange(10).reshape(2, 5), torch.tensor([0, 4, 9]))
    compiled = torch.compile(step, fullgraph=True)
    for got, want in zip(compiled(*args), step(*args), strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)
