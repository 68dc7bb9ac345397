"""The torch adapter against the shipped golden set, under every precision policy; torch.compile."""

from __future__ import annotations

import pytest

import rope_ref

torch = pytest.importorskip("torch")
rt = pytest.importorskip("rope_ref.backends.torch")
NO_CUDA = "no CUDA device (torch.cuda.is_available() is False)"


def _run(precision: str, device: str = "cpu"):
    from rope_ref.conformance.runner import Runner
    from shipped_golden import shipped_cases

    backend = rt.make_backend(precision=precision, device=device)
    return Runner(backend, precision=precision).run(shipped_cases())


SLOW = pytest.mark.slow  # the same suite again in another precision: `pytest --full`


@pytest.mark.parametrize(
    "precision", ["fp32", pytest.param("fp16", marks=SLOW), "bf16", pytest.param("fp64", marks=SLOW)]
)
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


def _fwd_bwd(fn, x, pos, **kw):
    xx = x.detach().requires_grad_(True)
    y = fn(xx, pos, **kw)
    (gx,) = torch.autograd.grad(y, xx, torch.ones_like(y) + xx.detach())
    return y.detach(), gx


@pytest.mark.slow
def test_compile_fullgraph_forward_and_backward():
    """torch.compile(..., fullgraph=True) on CPU inductor: no graph break and no error, forward and
    backward, for both layouts, the module, YaRN and dynamic NTK with a changing ``seq_len``.

    ``fullgraph=True`` turns any graph break into an error. Every compiled result is compared with the
    eager plain-autograd path at the same arguments, so a table frozen into the graph from an earlier
    length would fail. Recompiles (new shapes, a symbolic length) are allowed.
    """
    from rope_ref.scaling import DynamicNTK, LongRoPE, YaRN

    def check(compiled, eager, shapes, **kw):
        for s, seq_len in shapes:
            x = torch.randn(2, s, 3, 16)
            pos = torch.arange(s)[:, None]
            extra = {} if seq_len is None else {"seq_len": seq_len}
            y, gx = _fwd_bwd(compiled, x, pos, **extra)
            y_ref, gx_ref = _fwd_bwd(eager, x, pos, **extra)
            torch.testing.assert_close(y, y_ref, msg=lambda m, s=s: f"len {s}: {m}")
            torch.testing.assert_close(gx, gx_ref, msg=lambda m, s=s: f"grad, len {s}: {m}")

    # both layouts, partial rotary, two lengths (the second recompiles with dynamic shapes)
    for layout in ("half", "interleaved"):
        cfg = rope_ref.RopeConfig(16, layout=layout, rotary_dim=12)
        check(
            torch.compile(lambda x, p, cfg=cfg: rt.apply(x, p, cfg), fullgraph=True),
            lambda x, p, cfg=cfg: rt.apply(x, p, cfg, autograd="native"),
            [(6, None), (9, None)],
        )
    # the module (its cache is bypassed while compiling) with YaRN's attention factor
    yarn = rope_ref.RopeConfig(16, layout="half", scaling=YaRN(4.0, 8))
    module = rt.RotaryEmbedding(yarn, angle_dtype=torch.float64)
    check(
        torch.compile(module, fullgraph=True),
        lambda x, p: rt.apply(x, p, yarn, angle_dtype=torch.float64, autograd="native"),
        [(6, None), (11, None)],
    )
    # length-dependent scalings with an explicit, changing seq_len (below and beyond the original
    # context of 8): the table is a runtime value, not a constant of the first trace
    for scaling in (DynamicNTK(2.0, 8), LongRoPE([1.0] * 4, [2.0, 3.0, 4.0, 5.0], 8, factor=4.0)):
        cfg = rope_ref.RopeConfig(16, layout="interleaved", rotary_dim=8, scaling=scaling)

        def fn(x, p, seq_len, cfg=cfg):
            return rt.apply(x, p, cfg, seq_len=seq_len, angle_dtype=torch.float64)

        check(
            torch.compile(fn, fullgraph=True),
            lambda x, p, seq_len, cfg=cfg: rt.apply(
                x, p, cfg, seq_len=seq_len, angle_dtype=torch.float64, autograd="native"
            ),
            [(4, 4), (6, 12), (6, 20), (5, 7), (7, 30)],
        )
