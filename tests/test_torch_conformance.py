"""The torch adapter against the shipped golden set, under every precision policy; torch.compile."""

from __future__ import annotations

import pytest

import rope_ref

torch = pytest.importorskip("torch")
rt = pytest.importorskip("rope_ref.backends.torch")
NO_CUDA = "no CUDA device (torch.cuda.is_available() is False)"


def _run(precision: str, device: str = "cpu"):
    from rope_ref.conformance.golden import load_golden
    from rope_ref.conformance.runner import Runner

    backend = rt.make_backend(precision=precision, device=device)
    return Runner(backend, precision=precision).run(load_golden(None))


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16", "fp64"])
def test_suite_passes(precision):
    report = _run(precision)
    counts = report.counts()
    assert counts["passed"] > 50
    assert counts["unsupported"] == 0
    failed = {r.case_id: f"{r.kind}: {r.message}" for r in report.failures}
    assert not failed, failed


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_suite_passes_on_cuda(precision):
    report = _run(precision, device="cuda")
    assert report.counts()["unsupported"] == 0
    failed = {r.case_id for r in report.failures}
    assert not failed, failed


@pytest.mark.slow
def test_compile_fullgraph_forward_and_backward():
    """torch.compile(apply, fullgraph=True): no graph break in forward or backward (CPU inductor)."""
    cfg = rope_ref.RopeConfig(16, layout="half", rotary_dim=12)
    compiled = torch.compile(lambda x, p: rt.apply(x, p, cfg), fullgraph=True)
    x = torch.randn(2, 6, 3, 16, requires_grad=True)
    pos = torch.arange(6)[:, None]
    y = compiled(x, pos)
    torch.testing.assert_close(y, rt.apply(x, pos, cfg, autograd="native"))
    g = torch.randn_like(y)
    (gx,) = torch.autograd.grad(y, x, g)
    (gx_ref,) = torch.autograd.grad(rt.apply(x, pos, cfg, autograd="native"), x, g)
    torch.testing.assert_close(gx, gx_ref)
