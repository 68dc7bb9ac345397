"""The torch adapter's autograd path on CPU runs the blocked kernel in both directions (issue 32).

bf16 in, float32 math per block, bf16 out, forward and backward; the gradient is the float64 oracle's
VJP within the tolerance model; float32 keeps the bits of the no-grad kernel; in place, out of place,
non-contiguous inputs and gradients, and q/k sharing one table build.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from rope_ref.backends import _torch_core as core  # noqa: E402
from rope_ref.backends import torch as rt  # noqa: E402

import rope_ref  # noqa: E402
from rope_ref.testing import assert_rope_close, assert_rope_vjp_close  # noqa: E402


def _spy_blocked(monkeypatch) -> list[torch.dtype]:
    """Record the dtype of every tensor rotate_blocked rotates (and keep it running)."""
    seen: list[torch.dtype] = []
    real = core.rotate_blocked

    def spy(x, out, tables, rd):
        seen.append(x.dtype)
        return real(x, out, tables, rd)

    monkeypatch.setattr(core, "rotate_blocked", spy)
    return seen


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_gradient_through_blocked_kernel_matches_oracle_vjp(layout, dtype, monkeypatch):
    monkeypatch.setattr(core, "_BLOCK_BYTES", 2048)  # several blocks
    torch.manual_seed(1)
    cfg = rope_ref.RopeConfig(64, layout=layout)
    x = torch.randn(2, 40, 3, 64).to(dtype).requires_grad_(True)
    g = torch.randn(2, 40, 3, 64).to(dtype)
    pos = torch.arange(40)[:, None] + 7
    seen = _spy_blocked(monkeypatch)
    y = rt.apply(x, pos, cfg)
    assert type(y.grad_fn).__name__ == "RotateFunctionBackward"
    (gx,) = torch.autograd.grad(y, x, g)
    assert seen == [dtype, dtype]  # forward and backward, both in the blocked kernel
    assert gx.dtype == dtype
    pos_full = pos.expand(40, 3)[None].expand(2, 40, 3)
    assert_rope_close(
        y.detach().numpy() if dtype == torch.float32 else y.detach().float().numpy(),
        x.detach().float().numpy(),
        pos_full.numpy(),
        cfg,
        io_dtype=str(dtype)[6:],
    )
    assert_rope_vjp_close(
        gx.float().numpy(),
        x.detach().float().numpy(),
        pos_full.numpy(),
        cfg,
        g.float().numpy(),
        io_dtype=str(dtype)[6:],
    )


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32, torch.float64])
def test_autograd_forward_and_backward_have_the_no_grad_bits(dtype):
    """The forward under autograd equals the no-grad call bit for bit; the backward equals the inverse
    rotation of the gradient (a no-grad call with ``inverse=True``) bit for bit."""
    torch.manual_seed(2)
    cfg = rope_ref.RopeConfig(32, layout="half")
    x = torch.randn(1, 50, 4, 32).to(dtype)
    g = torch.randn(1, 50, 4, 32).to(dtype)
    ids = torch.arange(50)
    with torch.no_grad():
        want_y = rt.apply(x, ids, cfg, axes="bshd")
        want_g = rt.apply(g, ids, cfg, axes="bshd", inverse=True)
    xx = x.clone().requires_grad_(True)
    y = rt.apply(xx, ids, cfg, axes="bshd")
    (gx,) = torch.autograd.grad(y, xx, g)
    assert torch.equal(y.detach(), want_y)
    assert torch.equal(gx, want_g)


def test_non_contiguous_input_and_expanded_gradient():
    torch.manual_seed(3)
    cfg = rope_ref.RopeConfig(16, layout="half")
    base = torch.randn(1, 4, 30, 16).to(torch.bfloat16)
    x = base.transpose(1, 2).requires_grad_(True)  # (1, 30, 4, 16), non-contiguous view
    assert not x.is_contiguous()
    y = rt.apply(x, torch.arange(30), cfg, axes="bshd")
    y.float().sum().backward()  # an expanded (stride 0) gradient reaches the kernel
    with torch.no_grad():
        want = rt.apply(
            torch.ones(1, 30, 4, 16, dtype=torch.bfloat16), torch.arange(30), cfg, axes="bshd", inverse=True
        )
    assert torch.equal(x.grad, want)


def test_inplace_with_autograd_writes_the_view_and_gives_the_gradient():
    torch.manual_seed(4)
    cfg = rope_ref.RopeConfig(16, layout="interleaved")
    leaf = torch.randn(1, 12, 6, 16).to(torch.bfloat16).requires_grad_(True)
    buf = leaf * 1  # a non-leaf we may write in place
    q = buf.narrow(2, 0, 4)
    out = rt.apply(q, torch.arange(12), cfg, axes="bshd", inplace=True)
    assert out is q
    with torch.no_grad():
        want = rt.apply(leaf.detach().narrow(2, 0, 4), torch.arange(12), cfg, axes="bshd")
    assert torch.equal(buf.detach().narrow(2, 0, 4), want)
    assert torch.equal(buf.detach().narrow(2, 4, 2), leaf.detach().narrow(2, 4, 2))
    g = torch.randn(1, 12, 6, 16).to(torch.bfloat16)
    (gl,) = torch.autograd.grad(buf, leaf, g)
    with torch.no_grad():
        want_g = rt.apply(g.narrow(2, 0, 4), torch.arange(12), cfg, axes="bshd", inverse=True)
    assert torch.equal(gl.narrow(2, 0, 4), want_g)
    assert torch.equal(gl.narrow(2, 4, 2), g.narrow(2, 4, 2))


def test_apply_qk_with_autograd_builds_one_table_for_q_and_k(monkeypatch):
    built = []
    real = core.EagerTables.__init__

    def spy(self, *a, **k):
        built.append(1)
        real(self, *a, **k)

    monkeypatch.setattr(core.EagerTables, "__init__", spy)
    torch.manual_seed(5)
    cfg = rope_ref.RopeConfig(32, layout="half")
    q = torch.randn(1, 20, 8, 32).to(torch.bfloat16).requires_grad_(True)
    k = torch.randn(1, 20, 2, 32).to(torch.bfloat16).requires_grad_(True)
    ids = torch.arange(20)
    qo, ko = rt.apply_qk(q, k, ids, cfg, axes="bshd")
    (qo.float().sum() + ko.float().sum()).backward()
    assert len(built) == 1  # q, k, forward and backward share it (the inverse shares cos)
    with torch.no_grad():
        wq, wk = rt.apply(q, ids, cfg, axes="bshd"), rt.apply(k, ids, cfg, axes="bshd")
    assert torch.equal(qo.detach(), wq) and torch.equal(ko.detach(), wk)


def test_double_backward_through_blocked_kernel():
    torch.manual_seed(6)
    x = torch.randn(3, 5, 8, dtype=torch.float64, requires_grad=True)
    pos = torch.arange(5, dtype=torch.float64)
    cfg = rope_ref.RopeConfig(8, layout="half")
    assert torch.autograd.gradcheck(lambda t: rt.apply(t, pos, cfg), (x,))
    assert torch.autograd.gradgradcheck(lambda t: rt.apply(t, pos, cfg), (x,))
