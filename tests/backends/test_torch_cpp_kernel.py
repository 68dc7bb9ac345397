"""The torch adapter's one-pass C++ CPU kernel (``kernel="cpp"``, ``backends/_torch_cpp.py``).

Expected values: a NumPy evaluation of RoFormer eq. 34 written here with each operation rounded in the
compute dtype (NumPy never fuses a multiply and an add), the float64 oracle :func:`rope_ref.apply`
within the tolerance model, and the eager ``kernel="torch"`` path where it rounds the same way.

Every test is ``slow``: the first one builds the extension (tens of seconds); without a C++ compiler or
ninja they are skipped, saying which is missing. The checks that need no build (arguments, missing tools,
a failed build, the lock) are in ``test_torch_cpp_checks.py``, in the quick run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from rope_ref.backends import _torch_core as core  # noqa: E402
from rope_ref.backends import _torch_cpp as tc  # noqa: E402
from rope_ref.backends import torch as rt  # noqa: E402
from rope_ref.backends._torch_tables import angle_tables, freq_table  # noqa: E402

import rope_ref  # noqa: E402
from rope_ref.testing import assert_rope_close, assert_rope_vjp_close  # noqa: E402

_MISSING = tc.missing_tools()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        _MISSING is not None, reason=f"kernel='cpp' cannot be built here: it needs {_MISSING}"
    ),
]

BF16, F16, F32, F64 = torch.bfloat16, torch.float16, torch.float32, torch.float64
IO_DTYPES = [F32, BF16, F16, F64]
NAMES = {F32: "float32", BF16: "bfloat16", F16: "float16", F64: "float64"}
# rotary_dim below head_dim in the interleaved config: channels 40: pass through.
CFGS = {
    "half": rope_ref.RopeConfig(64, layout="half", base=5000.0),
    "interleaved": rope_ref.RopeConfig(64, layout="interleaved", rotary_dim=40, base=20000.0),
}


@pytest.fixture(scope="module", autouse=True)
def built():
    """Build (or load) the extension once, before any test of this file times out on it."""
    return tc.extension()


def make(shape, dtype, seed) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g, dtype=F64) * 2.5).to(dtype)


def tables(pos: torch.Tensor, n: int, compute: torch.dtype, factor: float = 1.0):
    """Half-width cos/sin of ``pos * 10000^(-i/n)`` times ``factor`` (an attention factor), in ``compute``."""
    theta = pos.to(F64).unsqueeze(-1) * 10000.0 ** (-torch.arange(n, dtype=F64) / n)
    return (theta.cos() * factor).to(compute), (theta.sin() * factor).to(compute)


def formula(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str, rd: int) -> torch.Tensor:
    """Eq. 34 in NumPy in the tables' dtype, each product and each sum rounded, then x's dtype."""
    np_dtype = np.float64 if cos.dtype == F64 else np.float32
    xc = x.to(F64).numpy().astype(np_dtype)  # exact for every io dtype into float64; one rounding to fp32
    c = np.broadcast_to(cos.numpy(), x.shape[:-1] + (rd // 2,))
    s = np.broadcast_to(sin.numpy(), x.shape[:-1] + (rd // 2,))
    if layout == "half":
        a, b = xc[..., : rd // 2], xc[..., rd // 2 : rd]
    else:
        a, b = xc[..., 0:rd:2], xc[..., 1:rd:2]
    ac, bs, bc, as_ = a * c, b * s, b * c, a * s
    ya, yb = ac - bs, bc + as_
    y = (
        np.concatenate((ya, yb), -1)
        if layout == "half"
        else np.stack((ya, yb), -1).reshape(ya.shape[:-1] + (rd,))
    )
    out = x.clone()
    # float64 -> bf16/f16 goes through float32, as Tensor.to and the C++ conversions do.
    yt = torch.from_numpy(np.ascontiguousarray(y))
    out[..., :rd] = yt.to(F32).to(x.dtype) if x.dtype in (BF16, F16) else yt.to(x.dtype)
    return out


# -- the kernel against the formula ------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("compute", [F32, F64])
@pytest.mark.parametrize("dtype", IO_DTYPES)
def test_kernel_has_the_formula_roundings(dtype, compute, layout):
    rd = 48 if layout == "half" else 64  # partial rotary for half: channels 48:64 copied
    x = make((3, 37, 5, 64), dtype, seed=1)
    cos, sin = tables(torch.arange(37).reshape(37, 1) * 1.7 + 3, rd // 2, compute, factor=1.1)
    got = tc.rotate_cpp(x, torch.empty_like(x), cos, sin, layout, rd)
    assert got.dtype == dtype
    assert torch.equal(got, formula(x, cos, sin, layout, rd))
    assert torch.equal(got[..., rd:], x[..., rd:])


@pytest.mark.parametrize("dtype", IO_DTYPES)
def test_avx2_build_gives_the_baseline_bits(dtype):
    """The loops compiled for AVX2 (chosen at run time) and for the x86-64 baseline round alike."""
    x = make((2, 301, 3, 64), dtype, seed=2)
    for compute in (F32, F64):
        cos, sin = tables(torch.arange(301).reshape(301, 1) - 40, 32, compute)
        for layout in ("half", "interleaved"):
            wide = tc.rotate_cpp(x, torch.empty_like(x), cos, sin, layout, 64)
            base = tc.rotate_cpp(x, torch.empty_like(x), cos, sin, layout, 64, wide=False)
            assert torch.equal(wide, base), (compute, layout)


def test_threads_split_rows_anywhere_with_the_same_bits():
    """Chunks of rows start mid-axis (the offsets of a chunk's first row): 1, 2 and 3 threads agree."""
    x = make((3, 301, 7, 64), F32, seed=3)
    cos, sin = tables(torch.arange(301).reshape(301, 1), 24, F32)
    before = torch.get_num_threads()
    try:
        outs = []
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            outs.append(tc.rotate_cpp(x, torch.empty_like(x), cos, sin, "interleaved", 48))
    finally:
        torch.set_num_threads(before)
    assert torch.equal(outs[0], formula(x, cos, sin, "interleaved", 48))
    assert torch.equal(outs[1], outs[0]) and torch.equal(outs[2], outs[0])


# -- the public functions against the oracle and the eager kernel --------------------------------------


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("dtype", [BF16, F32])
def test_apply_bshd_positions_s1_matches_oracle_and_formula(dtype, layout):
    cfg = CFGS[layout]
    x = make((2, 45, 3, 64), dtype, seed=4)
    pos = torch.arange(45).reshape(45, 1) * 3 + 11  # (S, 1) against (B, S, H)
    y = rt.apply(x, pos, cfg, kernel="cpp")
    full = np.broadcast_to(pos.numpy(), (2, 45, 3))
    assert_rope_close(y.float().numpy(), x.float().numpy(), full, cfg, io_dtype=NAMES[dtype])
    cos, sin = angle_tables(pos, *freq_table(cfg, None, F32, x.device))
    assert torch.equal(y, formula(x, cos, sin, layout, cfg.rotary_dim))
    assert torch.equal(y[..., cfg.rotary_dim :], x[..., cfg.rotary_dim :])


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_apply_bhsd_per_row_positions(layout):
    cfg = CFGS[layout]
    x = make((2, 3, 50, 64), BF16, seed=5)
    pos = torch.stack((torch.arange(50) + 7, torch.arange(50) * 2 + 100))[:, None, :]  # (B, 1, S)
    y = rt.apply(x, pos, cfg, kernel="cpp")
    full = np.broadcast_to(pos.numpy(), (2, 3, 50))
    assert_rope_close(y.float().numpy(), x.float().numpy(), full, cfg, io_dtype="bfloat16")
    assert torch.equal(y, rt.apply(x, pos, cfg, autograd="native"))  # the functional form's roundings


_EAGER_SCRIPT = textwrap.dedent(
    """
    import torch, rope_ref
    from rope_ref.backends import torch as rt
    bad = []
    for layout, rd in (("half", 64), ("interleaved", 48)):
        cfg = rope_ref.RopeConfig(64, layout=layout, rotary_dim=rd)
        for dtype in (torch.bfloat16, torch.float16, torch.float32, torch.float64):
            g = torch.Generator().manual_seed(7)
            x = (torch.randn(2, 40, 5, 64, generator=g, dtype=torch.float64) * 2.5).to(dtype)
            up = (torch.randn(2, 40, 5, 64, generator=g, dtype=torch.float64) * 0.5).to(dtype)
            pos = torch.arange(40).reshape(40, 1) * 3 + 1
            grads = []
            for kernel in ("cpp", "torch"):
                xx = x.clone().requires_grad_(True)
                y = rt.apply(xx, pos, cfg, kernel=kernel)
                grads.append((y.detach(), torch.autograd.grad(y, xx, up)[0]))
            (yc, gc), (ye, ge) = grads
            if not (torch.equal(yc, ye) and torch.equal(gc, ge)):
                bad.append((layout, str(dtype)))
    print(bad)
    """
)


def test_equals_eager_kernel_bit_for_bit_when_aten_does_not_fuse():
    """With ATen's baseline kernels (``ATEN_CPU_CAPABILITY=default``) the eager kernel rounds every product
    and sum as written, and ``kernel="cpp"`` equals it bit for bit, output and gradient, in both layouts,
    for float32 and float64 and, since both round the same float32 value once, bfloat16 and float16 too.

    In a process with ATen's AVX2 kernels (this machine's default) they are NOT always equal: ATen fuses
    ``addcmul`` (the eager half layout) and the complex multiply of broadcast factors (interleaved) into
    FMAs, one rounding where the formula has two, so the eager bits depend on the CPU there. The C++
    kernel's never do. Both are within the tolerance model (the tests above and below)."""
    env = dict(os.environ, ATEN_CPU_CAPABILITY="default")
    run = subprocess.run(
        [sys.executable, "-c", _EAGER_SCRIPT], env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "[]"


def test_non_contiguous_inputs_give_the_contiguous_bits():
    cfg = CFGS["half"]
    base = make((2, 4, 30, 128), BF16, seed=8)
    x = base.transpose(1, 2)[..., ::2]  # (2, 30, 4, 64): transposed, last-axis stride 2
    assert not x.is_contiguous() and x.stride(-1) == 2
    pos = torch.arange(30) + 2
    y = rt.apply(x, pos, cfg, axes="bshd", kernel="cpp")
    assert y.is_contiguous()
    assert torch.equal(y, rt.apply(x.contiguous(), pos, cfg, axes="bshd", kernel="cpp"))
    full = np.broadcast_to(pos.numpy()[None, :, None], (2, 30, 4))
    assert_rope_close(y.float().numpy(), x.float().numpy(), full, cfg, io_dtype="bfloat16")


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_inplace_writes_only_the_view(layout):
    cfg = CFGS[layout]
    buf = make((2, 20, 6, 64), F32, seed=9)
    keep = buf.clone()
    q = buf.narrow(2, 1, 4)  # heads 1..4 of 6: a non-contiguous view
    pos = torch.arange(20) * 5
    want = rt.apply(q.clone(), pos, cfg, axes="bshd", kernel="cpp")
    out = rt.apply(q, pos, cfg, axes="bshd", kernel="cpp", inplace=True)
    assert out is q
    assert torch.equal(q, want)
    assert torch.equal(buf[:, :, 0], keep[:, :, 0]) and torch.equal(buf[:, :, 5], keep[:, :, 5])


@pytest.mark.parametrize("dtype", [BF16, F64])
def test_inverse_matches_oracle_and_undoes_the_rotation(dtype):
    cfg = CFGS["interleaved"]
    x = make((1, 33, 2, 64), dtype, seed=10)
    ids = torch.arange(33) + 4
    opts = dict(axes="bshd", angle_dtype=F64, kernel="cpp")  # float64 angles: the float64 check is tight
    y = rt.apply(x, ids, cfg, inverse=True, **opts)
    ref = rope_ref.apply(x.double().numpy(), ids.numpy()[None], cfg, axes="bshd", inverse=True)
    # bf16: one rounding of |y| <= sqrt(2) max|x| (2^-9 relative); float64: a few ulp of max|x|.
    tol = 2.0**-7 if dtype == BF16 else 1e-14
    np.testing.assert_allclose(y.double().numpy(), ref, rtol=0, atol=tol * float(x.abs().max()))
    back = rt.apply(y, ids, cfg, **opts)
    np.testing.assert_allclose(
        back.double().numpy(), x.double().numpy(), rtol=0, atol=3 * tol * float(x.abs().max())
    )


# -- autograd ------------------------------------------------------------------------------------------


def _spy_cpp(monkeypatch) -> list[torch.dtype]:
    seen: list[torch.dtype] = []
    real = core.rotate_cpp

    def spy(x, out, cos, sin, layout, rd, **kw):
        seen.append(x.dtype)
        return real(x, out, cos, sin, layout, rd, **kw)

    monkeypatch.setattr(core, "rotate_cpp", spy)
    return seen


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("dtype", [BF16, F32])
def test_gradient_is_the_inverse_rotation_by_the_cpp_kernel(dtype, layout, monkeypatch):
    cfg = CFGS[layout]
    x = make((2, 40, 3, 64), dtype, seed=11).requires_grad_(True)
    g = make((2, 40, 3, 64), dtype, seed=12)
    pos = torch.arange(40).reshape(40, 1) + 9
    seen = _spy_cpp(monkeypatch)
    y = rt.apply(x, pos, cfg, kernel="cpp")
    assert type(y.grad_fn).__name__ == "RotateFunctionBackward"
    (gx,) = torch.autograd.grad(y, x, g)
    assert seen == [dtype, dtype]  # forward and backward, both the C++ kernel
    with torch.no_grad():
        assert torch.equal(y, rt.apply(x, pos, cfg, kernel="cpp"))
        assert torch.equal(gx, rt.apply(g, pos, cfg, axes=None, kernel="cpp", inverse=True))
    full = np.broadcast_to(pos.numpy(), (2, 40, 3))
    xn, gn = x.detach().float().numpy(), g.float().numpy()
    assert_rope_vjp_close(gx.float().numpy(), xn, full, cfg, gn, io_dtype=NAMES[dtype])
    # The eager kernel's gradient: the same within the model (bit for bit only where ATen does not fuse;
    # see test_equals_eager_kernel_bit_for_bit_when_aten_does_not_fuse).
    xe = x.detach().clone().requires_grad_(True)
    (ge,) = torch.autograd.grad(rt.apply(xe, pos, cfg), xe, g)
    assert_rope_vjp_close(ge.float().numpy(), xn, full, cfg, gn, io_dtype=NAMES[dtype])


def test_gradcheck_and_gradgradcheck_in_float64():
    cfg = rope_ref.RopeConfig(8, layout="half", rotary_dim=6)
    x = make((2, 5, 8), F64, seed=13).requires_grad_(True)
    pos = torch.arange(5, dtype=F64) * 0.75 + 1

    def fn(t):
        return rt.apply(t, pos, cfg, kernel="cpp")

    assert torch.autograd.gradcheck(fn, (x,))
    assert torch.autograd.gradgradcheck(fn, (x,))


# -- q and k ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [BF16, F32])
def test_apply_qk_gqa_32_and_8_heads(dtype):
    cfg = CFGS["half"]
    q = make((1, 24, 32, 64), dtype, seed=14)
    k = make((1, 24, 8, 64), dtype, seed=15)
    ids = torch.arange(24) + 3
    qo, ko = rt.apply_qk(q, k, ids, cfg, axes="bshd", kernel="cpp")
    assert torch.equal(qo, rt.apply(q, ids, cfg, axes="bshd", kernel="cpp"))
    assert torch.equal(ko, rt.apply(k, ids, cfg, axes="bshd", kernel="cpp"))
    assert_rope_close(
        ko.float().numpy(), k.float().numpy(), ids.numpy()[None], cfg, io_dtype=NAMES[dtype], axes="bshd"
    )
    qi, ki = q.clone(), k.clone()
    qr, kr = rt.apply_qk(qi, ki, ids, cfg, axes="bshd", kernel="cpp", inplace=True)
    assert qr is qi and kr is ki
    assert torch.equal(qi, qo) and torch.equal(ki, ko)
    qg, kg = q.clone().requires_grad_(True), k.clone().requires_grad_(True)
    qa, ka = rt.apply_qk(qg, kg, ids, cfg, axes="bshd", kernel="cpp")
    (qa.float().sum() + 2 * ka.float().sum()).backward()
    with torch.no_grad():
        assert torch.equal(qa, qo) and torch.equal(ka, ko)
        want = rt.apply(torch.full_like(k, 2), ids, cfg, axes="bshd", kernel="cpp", inverse=True)
    assert torch.equal(kg.grad, want)


def test_apply_qkv_rotates_q_and_k_and_copies_v():
    cfg = CFGS["interleaved"]
    qkv = make((2, 10, 6 + 2 * 3, 64), BF16, seed=16)
    pos = torch.arange(20).reshape(2, 10) + 1
    kw = dict(axes="bshd", num_heads_q=6, num_heads_kv=3, kernel="cpp")
    out = rt.apply_qkv(qkv, pos, cfg, **kw)
    q, k, v = rt.split_qkv(qkv, 6, 3, "bshd")
    assert torch.equal(out[:, :, :6], rt.apply(q, pos, cfg, axes="bshd", kernel="cpp"))
    assert torch.equal(out[:, :, 6:9], rt.apply(k, pos, cfg, axes="bshd", kernel="cpp"))
    assert torch.equal(out[:, :, 9:], v)
    work = qkv.clone()
    assert rt.apply_qkv(work, pos, cfg, inplace=True, **kw) is work
    assert torch.equal(work, out)


def test_apply_rotary_pos_emb_with_per_row_tables():
    """HF's drop-in with precomputed (B, S, rd/2) tables, q (B, 4, S, D) and k (B, 2, S, D)."""
    q = make((2, 4, 30, 64), BF16, seed=19)
    k = make((2, 2, 30, 64), BF16, seed=20)
    pos = torch.stack((torch.arange(30), torch.arange(30) + 50))  # (B, S): rows differ
    cos, sin = tables(pos, 24, F32, factor=0.9)  # rotary_dim 48 of 64
    qo, ko = rt.apply_rotary_pos_emb(q, k, cos, sin, layout="interleaved", kernel="cpp")
    assert torch.equal(qo, formula(q, cos[:, None], sin[:, None], "interleaved", 48))
    assert torch.equal(ko, formula(k, cos[:, None], sin[:, None], "interleaved", 48))


# -- errors ----------------------------------------------------------------------------------------------
