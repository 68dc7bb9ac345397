"""The torch adapter's rotation (``backends/_torch_core.py``): RoFormer eq. 34, the blocked CPU path, the
kernel routing and autograd. Expected values come from eq. 34 in float64 NumPy loops, never from the module.
"""

from __future__ import annotations

import numpy as np
import pytest
from equal_strings import fresh as _fresh

import rope_ref
from rope_ref import RopeConfig

torch = pytest.importorskip("torch", reason="torch is not installed: the torch adapter is not checked")

import rope_ref.backends._torch_core as core  # noqa: E402
from rope_ref.backends.torch import rotate  # noqa: E402


def eq34(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, layout: str, rd: int) -> np.ndarray:
    """y_a = x_a c - x_b s, y_b = x_b c + x_a s over pairs of the layout; channels >= rd pass through."""
    x = np.asarray(x, dtype=np.float64)
    cos, sin = (
        np.broadcast_to(cos, x.shape[:-1] + (rd // 2,)),
        np.broadcast_to(sin, x.shape[:-1] + (rd // 2,)),
    )
    out = x.copy()
    for i in range(rd // 2):
        a, b = (i, i + rd // 2) if layout == "half" else (2 * i, 2 * i + 1)
        c, s = cos[..., i], sin[..., i]
        out[..., a] = x[..., a] * c - x[..., b] * s
        out[..., b] = x[..., b] * c + x[..., a] * s
    return out


def _tables(rows: int, n: int, seed: int):
    rng = np.random.default_rng(seed)
    ang = rng.uniform(-4, 4, (rows, n))
    return np.cos(ang), np.sin(ang)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize(("d", "rd"), [(8, 8), (10, 6)])
def test_rotate_reference_and_eager_are_eq34(layout, d, rd):
    x = np.random.default_rng(51).standard_normal((4, d))
    c, s = _tables(4, rd // 2, 52)
    want = eq34(x, c, s, layout, rd)
    xt, ct, st = torch.from_numpy(x), torch.from_numpy(c), torch.from_numpy(s)
    for fn in (core.rotate_reference, core._rotate_eager):
        got = fn(xt, ct, st, layout, rd, torch.float64)
        assert got.dtype == torch.float64 and got.shape == (4, d)
        np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=4e-16 * 4)
        assert torch.equal(got[:, rd:], xt[:, rd:])


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_half_inputs_rotate_in_the_compute_dtype_and_round_once(layout):
    x = torch.from_numpy(np.random.default_rng(53).standard_normal((3, 10))).to(torch.float16)
    c, s = _tables(3, 3, 54)
    want = eq34(x.double().numpy(), c.astype(np.float32), s.astype(np.float32), layout, 6)
    for fn in (core.rotate_reference, core._rotate_eager):
        got = fn(x, torch.from_numpy(c).float(), torch.from_numpy(s).float(), layout, 6, torch.float32)
        assert got.dtype == torch.float16
        # float32 arithmetic then one rounding to float16: at most half an fp16 ulp plus float32 noise
        np.testing.assert_allclose(got.double().numpy(), want, rtol=2.0**-11 + 2.0**-20, atol=2.0**-24)
        assert torch.equal(got[:, 6:], x[:, 6:])


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_one_dimensional_x(layout):
    x = np.random.default_rng(55).standard_normal(8)
    c, s = _tables(1, 4, 56)
    got = core._rotate_eager(
        torch.from_numpy(x), torch.from_numpy(c[0]), torch.from_numpy(s[0]), layout, 8, torch.float64
    )
    np.testing.assert_allclose(got.numpy(), eq34(x, c[0], s[0], layout, 8), rtol=0, atol=2e-15)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float16])
def test_blocks_with_per_row_and_broadcast_tables(layout, dtype, monkeypatch):
    """300 rows of 8 channels in blocks of a few rows, along the longest leading axis (not axis 0)."""
    monkeypatch.setattr(core, "_BLOCK_BYTES", 64)
    compute = torch.float64 if dtype == torch.float64 else torch.float32
    x = torch.from_numpy(np.random.default_rng(57).standard_normal((2, 300, 8))).to(dtype)
    per_row = _tables(300, 4, 58)
    shared = _tables(1, 4, 59)
    for c, s in (per_row, shared):  # (300, 4) and (1, 4), left-padded to x's rank as callers do
        ct, st = core.expand_tables(torch.from_numpy(c).to(compute), torch.from_numpy(s).to(compute), 3)
        got = core._rotate_eager(x, ct, st, layout, 8, compute)
        want = eq34(x.double().numpy(), ct.double().numpy(), st.double().numpy(), layout, 8)
        tol = 4e-15 if dtype == torch.float64 else 2.0**-10 * 4
        np.testing.assert_allclose(got.double().numpy(), want, rtol=0, atol=tol)
        ref = core.rotate_reference(x, ct, st, layout, 8, compute)
        torch.testing.assert_close(got, ref, rtol=0, atol=tol)


def test_rotate_tables_routes_and_validates():
    x = torch.from_numpy(np.random.default_rng(60).standard_normal((3, 8)))
    c, s = (torch.from_numpy(v) for v in _tables(3, 4, 61))
    want = eq34(x.numpy(), c.numpy(), s.numpy(), "half", 8)
    for autograd in ("function", "native"):
        got = core.rotate_tables(x, c, s, "half", 8, torch.float64, autograd=autograd)
        np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=4e-15)
    with pytest.raises(ValueError, match="autograd must be 'function' or 'native', got 'plain'"):
        core.rotate_tables(x, c, s, "half", 8, torch.float64, autograd="plain")
    with pytest.raises(ValueError, match="kernel must be one of"):
        core.rotate_tables(x, c, s, "half", 8, torch.float64, kernel="cuda")
    xg = x.clone().requires_grad_(True)
    y = core.rotate_tables(xg, c, s, "half", 8, torch.float64)
    assert type(y.grad_fn).__name__ == "RotateFunctionBackward"
    y = core.rotate_tables(xg, c, s, "half", 8, torch.float64, autograd="native")
    assert type(y.grad_fn).__name__ != "RotateFunctionBackward"
    cg = c.clone().requires_grad_(True)
    y = core.rotate_tables(x, cg, s, "half", 8, torch.float64)
    assert y.grad_fn is not None  # table gradients go through plain autograd
    with torch.no_grad():
        assert core.rotate_tables(xg, c, s, "half", 8, torch.float64).grad_fn is None


def test_triton_kernel_is_checked_only_outside_compile(monkeypatch):
    seen = []
    monkeypatch.setattr(core, "check_triton", lambda x, compute: seen.append(compute))
    monkeypatch.setattr(core, "rotate_triton", lambda *a: "triton ran")
    x = torch.zeros(2, 8)
    c = s = torch.zeros(2, 4)
    assert core.rotate_tables(x, c, s, "half", 8, torch.float32, kernel="triton") == "triton ran"
    assert seen == [torch.float32]
    core.rotate_tables(x, c, s, "half", 8, torch.float32)  # kernel="torch": nothing checked
    assert seen == [torch.float32]
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    got = core.rotate_tables(x, c, s, "half", 8, torch.float32, kernel="triton")
    assert isinstance(got, torch.Tensor) and seen == [torch.float32]  # compiled: the functional form


def test_backward_is_the_inverse_rotation_with_and_without_a_graph():
    x = torch.from_numpy(np.random.default_rng(62).standard_normal((3, 8))).requires_grad_(True)
    c, s = (torch.from_numpy(v) for v in _tables(3, 4, 63))
    w = np.random.default_rng(64).standard_normal((3, 8))
    want = eq34(w, c.numpy(), -s.numpy(), "interleaved", 8)  # R(theta)^T w = R(-theta) w
    y = core.RotateFunction.apply(x, c, s, "interleaved", 8, torch.float64)
    (gx,) = torch.autograd.grad(y, x, grad_outputs=torch.from_numpy(w))
    assert not gx.requires_grad
    np.testing.assert_allclose(gx.numpy(), want, rtol=0, atol=4e-15)
    # double backward: the backward is itself a RotateFunction of the incoming gradient
    wt = torch.from_numpy(w).requires_grad_(True)
    y = core.RotateFunction.apply(x, c, s, "interleaved", 8, torch.float64)
    (gx,) = torch.autograd.grad(y, x, grad_outputs=wt, create_graph=True)
    assert type(gx.grad_fn).__name__ == "RotateFunctionBackward"
    np.testing.assert_allclose(gx.detach().numpy(), want, rtol=0, atol=4e-15)
    v = np.random.default_rng(65).standard_normal((3, 8))
    (gw,) = torch.autograd.grad(gx, wt, grad_outputs=torch.from_numpy(v))
    np.testing.assert_allclose(
        gw.numpy(), eq34(v, c.numpy(), s.numpy(), "interleaved", 8), rtol=0, atol=4e-15
    )


def test_complex_view_only_where_pairs_are_adjacent_aligned_and_wide():
    f32, f64, f16 = torch.float32, torch.float64, torch.float16
    x = torch.zeros(3, 4, 8)
    assert core._complex_ok(x, "interleaved", f32)
    assert core._complex_ok(x.double(), "interleaved", f64)
    assert not core._complex_ok(x, "half", f32)
    assert not core._complex_ok(x, "interleaved", f64)  # arithmetic in another dtype than x
    assert not core._complex_ok(x.half(), "interleaved", f16)  # no complex32 multiply
    assert not core._complex_ok(x.half(), "interleaved", f32)
    assert not core._complex_ok(torch.zeros(3, 4, 16)[..., ::2], "interleaved", f32)  # stride 2
    assert not core._complex_ok(torch.zeros(3, 4, 9)[..., 1:], "interleaved", f32)  # odd offset
    assert core._complex_ok(torch.zeros(3, 4, 10)[..., 2:], "interleaved", f32)  # even offset, even strides
    odd_rows = torch.zeros(3, 9)[:, :8]  # row stride 9: the second row's pairs start at an odd element
    assert not core._complex_ok(odd_rows, "interleaved", f32)
    assert core._complex_ok(torch.zeros(1, 9)[:, :8], "interleaved", f32)  # one row: its stride is unused


def _count_blocks(monkeypatch):
    shapes = []
    real = core._rotate_block

    def spy(x, full_cos, sin, target, layout, rd):
        shapes.append(tuple(x.shape))
        real(x, full_cos, sin, target, layout, rd)

    monkeypatch.setattr(core, "_rotate_block", spy)
    return shapes


def _rotated_in_blocks(monkeypatch, block_bytes: int, shape: tuple[int, int, int], seed: int):
    """Rotate a float64 x of ``shape`` (tables per row of axis 1, seeds ``seed`` and ``seed + 1``) with
    ``block_bytes`` blocks; check it against eq. 34 and hand back x, the tables and the block shapes."""
    monkeypatch.setattr(core, "_BLOCK_BYTES", block_bytes)
    shapes = _count_blocks(monkeypatch)
    x = torch.from_numpy(np.random.default_rng(seed).standard_normal(shape))
    c, s = core.expand_tables(*(torch.from_numpy(v) for v in _tables(shape[1], shape[2] // 2, seed + 1)), 3)
    got = core._rotate_eager(x, c, s, "half", shape[2], torch.float64)
    want = eq34(x.numpy(), c.numpy(), s.numpy(), "half", shape[2])
    np.testing.assert_allclose(got.numpy(), want, atol=4e-15, rtol=0)
    return x, c, s, shapes


def test_cpu_rotation_runs_in_blocks_of_block_bytes_along_the_longest_leading_axis(monkeypatch):
    """(2, 300, 8) float64: rows of the blocked axis 1 are 2 * 8 * 8 = 128 bytes; 512-byte blocks hold
    4 of them, so 75 blocks of shape (2, 4, 8)."""
    x, c, s, shapes = _rotated_in_blocks(monkeypatch, 512, (2, 300, 8), seed=70)
    assert shapes == [(2, 4, 8)] * 75
    # a row larger than a block: one row per block, never an empty step
    monkeypatch.setattr(core, "_BLOCK_BYTES", 64)
    shapes.clear()
    core._rotate_eager(x[:, :10], c[:, :10], s[:, :10], "half", 8, torch.float64)
    assert shapes == [(2, 1, 8)] * 10
    # 1-D x, and the default 4 MiB blocks for a small x: one call on the whole tensor
    monkeypatch.setattr(core, "_BLOCK_BYTES", 1 << 22)
    shapes.clear()
    core._rotate_eager(x[0, 0], c[0, 0], s[0, 0], "half", 8, torch.float64)
    core._rotate_eager(x, c, s, "half", 8, torch.float64)
    assert shapes == [(8,), (2, 300, 8)]


def test_blocks_never_split_the_channel_axis(monkeypatch):
    """x (3, 5, 16): the channel axis is the longest, the blocked one must still be axis 1 (5 rows)."""
    _, _, _, shapes = _rotated_in_blocks(monkeypatch, 64, (3, 5, 16), seed=72)
    assert shapes == [(3, 1, 16)] * 5


def test_gradient_reaches_a_learnable_sin_table_alone():
    x = torch.from_numpy(np.random.default_rng(74).standard_normal((3, 8)))
    c, s = (torch.from_numpy(v) for v in _tables(3, 4, 75))
    s.requires_grad_(True)
    w = np.random.default_rng(76).standard_normal((3, 8))
    y = core.rotate_tables(x, c, s, "half", 8, torch.float64)
    (gs,) = torch.autograd.grad(y, s, grad_outputs=torch.from_numpy(w))
    xn = x.numpy()
    # d(sum w y)/d sin_i = -w_a x_b + w_b x_a for pair (a, b) = (i, i + 4)
    want = -w[:, :4] * xn[:, 4:] + w[:, 4:] * xn[:, :4]
    np.testing.assert_allclose(gs.numpy(), want, rtol=0, atol=4e-15)


def test_option_strings_are_compared_by_value(monkeypatch):
    """Strings read from a config file or a command line are equal to, not identical with, the literals."""
    assert core.resolve_compute_dtype("".join(["in", "put"]), torch.float16) is torch.float16
    monkeypatch.setattr(core, "check_triton", lambda x, compute: None)
    monkeypatch.setattr(core, "rotate_triton", lambda *a: "triton ran")
    x, c = torch.zeros(2, 8), torch.zeros(2, 4)
    assert (
        core.rotate_tables(x, c, c, "half", 8, torch.float32, kernel="".join(["tri", "ton"])) == "triton ran"
    )


def test_pass_through_is_kept_whatever_the_leading_sizes():
    """x (6, 6, 10) rotated on 6 channels: a leading size equal to rd must not be taken for the width."""
    x = np.random.default_rng(77).standard_normal((6, 6, 10))
    c, s = _tables(6, 3, 78)
    want = eq34(x, c, s, "half", 6)
    for fn in (core.rotate_reference, core._rotate_eager):
        got = fn(torch.from_numpy(x), torch.from_numpy(c), torch.from_numpy(s), "half", 6, torch.float64)
        assert got.shape == (6, 6, 10)
        np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=4e-15)


@pytest.mark.parametrize("shape", [(0, 8), (2, 0, 8), (0, 3, 8)])
def test_empty_inputs_rotate_to_empty_outputs(shape):
    x = torch.zeros(shape, dtype=torch.float64)
    c = torch.zeros(shape[:-1] + (4,), dtype=torch.float64)
    for fn in (core.rotate_reference, core._rotate_eager):
        got = fn(x, c, c, "half", 8, torch.float64)
        assert got.shape == shape


U64, U32 = 2.0**-53, 2.0**-24


def _table_grads(x: np.ndarray, w: np.ndarray, layout: str) -> tuple[np.ndarray, np.ndarray]:
    """d(sum w * y)/d cos and /d sin for eq. 34 with per-row half-width tables (written out)."""
    n = x.shape[-1] // 2
    a = np.arange(n) if layout == "half" else np.arange(0, 2 * n, 2)
    b = a + n if layout == "half" else a + 1
    d_cos = w[..., a] * x[..., a] + w[..., b] * x[..., b]
    d_sin = -w[..., a] * x[..., b] + w[..., b] * x[..., a]
    return d_cos, d_sin


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("x_grad", [False, True])
def test_gradients_flow_to_learnable_cos_sin_tables(layout, x_grad):
    rng = np.random.default_rng(23)
    x = rng.standard_normal((6, 8))
    w = rng.standard_normal((6, 8))
    cos = torch.tensor(rng.standard_normal((6, 4)), requires_grad=True)
    sin = torch.tensor(rng.standard_normal((6, 4)), requires_grad=True)
    xt = torch.tensor(x, requires_grad=x_grad)
    y = rotate(xt, cos, sin, layout=layout)
    (y * torch.from_numpy(w)).sum().backward()
    assert cos.grad is not None and sin.grad is not None, "the tables got no gradient"
    want_cos, want_sin = _table_grads(x, w, layout)
    tol = 8 * U64 * (np.abs(x).max() * np.abs(w).max())
    np.testing.assert_allclose(cos.grad.numpy(), want_cos, rtol=0, atol=tol)
    np.testing.assert_allclose(sin.grad.numpy(), want_sin, rtol=0, atol=tol)


def test_table_gradients_pass_gradcheck_with_broadcast_tables():
    rng = np.random.default_rng(24)
    x = torch.tensor(rng.standard_normal((2, 3, 8)), requires_grad=True)
    cos = torch.tensor(rng.standard_normal((3, 4)), requires_grad=True)
    sin = torch.tensor(rng.standard_normal((3, 4)), requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, c, s: rotate(a, c, s, layout="half"), (x, cos, sin))


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_torch_kernels_compare_the_layout_by_value(layout):
    """Every torch path (blocked eager, autograd Function, the functional reference, in place, the complex
    view for interleaved float32) with a layout string that is equal to, not the same object as, the
    literal gives the same bits as with the literal."""
    torch = pytest.importorskip("torch", reason="the torch adapter needs torch")
    from rope_ref.backends import torch as rt

    literal = RopeConfig(8, layout=layout)
    loaded = RopeConfig(8, layout=_fresh(layout))
    assert loaded.layout is not layout
    gen = torch.Generator().manual_seed(4)
    x = torch.randn((2, 5, 3, 8), generator=gen)
    ids = torch.arange(5) * 37
    want = rt.apply(x, ids, literal, axes="bshd")
    assert torch.equal(rt.apply(x, ids, loaded, axes="bshd"), want)
    xg = x.clone().requires_grad_(True)  # the autograd path
    assert torch.equal(rt.apply(xg, ids, loaded, axes="bshd").detach(), want)
    native = rt.apply(xg, ids, loaded, axes="bshd", autograd="native")  # the functional reference
    torch.testing.assert_close(native.detach(), want, rtol=0, atol=1e-6)
    xi = x.clone()
    rt.apply(xi, ids, loaded, axes="bshd", inplace=True)
    assert torch.equal(xi, want)
    expected = rope_ref.apply(x.double().numpy(), ids.double().numpy()[None, :, None], literal)
    np.testing.assert_allclose(want.double().numpy(), expected, atol=1e-5)


def test_torch_interleaved_view_with_an_odd_leading_stride():
    """(2, 8) float32 cut from a (2, 9) buffer: the row stride 9 is odd, so the pairs cannot be viewed as
    complex numbers; the blocked kernel must serve it, with the values of a contiguous copy (which takes
    the complex multiply, so the two may differ in the last bit)."""
    torch = pytest.importorskip("torch", reason="the torch adapter needs torch")
    from rope_ref.backends import torch as rt

    cfg = RopeConfig(8, layout="interleaved")
    buf = torch.randn((2, 9), generator=torch.Generator().manual_seed(3))
    view = buf[:, :8]
    assert view.stride() == (9, 1)
    ids = torch.tensor([3, 40])
    want = rt.apply(view.contiguous(), ids, cfg, axes="sd")
    torch.testing.assert_close(rt.apply(view, ids, cfg, axes="sd"), want, rtol=4e-7, atol=1e-7)
