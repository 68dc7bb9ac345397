"""``backends/_torch_core.py`` function by function (issue 21): each test fails on some mutant of it.

Fast unit checks of the validation helpers, the frequency table (eager and the paths ``torch.compile``
takes, reached here by patching ``torch.compiler.is_compiling``), the cos/sin tables, the blocked CPU
rotation and the autograd routing. Expected values are written out (inv_freq of head_dim 4, base 1e4:
[1, 0.01]; HF's dynamic-NTK base; RoFormer eq. 34 in float64 NumPy loops), never taken from the module.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the torch adapter is not checked")

import rope_ref.backends._torch_core as core  # noqa: E402

from rope_ref import DynamicNTK, Linear, RopeConfig, YaRN  # noqa: E402

CPU = torch.device("cpu")
CFG4 = RopeConfig(4, layout="half", base=10000.0)


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


@pytest.fixture
def compiling(monkeypatch):
    """Make the module believe it runs under torch.compile (the branches Dynamo would take)."""
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)


# -- validation ------------------------------------------------------------------------------------


def test_check_config_and_check_x():
    assert core.check_config(CFG4) is CFG4
    with pytest.raises(TypeError, match="cfg must be a rope_ref.RopeConfig, got dict"):
        core.check_config({"head_dim": 4})
    x = torch.zeros(2, 4)
    assert core.check_x(x, 4) is x and core.check_x(x, None) is x
    with pytest.raises(TypeError, match="q must be a torch.Tensor, got ndarray"):
        core.check_x(np.zeros((2, 4)), 4, "q")
    with pytest.raises(TypeError, match="real floating dtype"):
        core.check_x(torch.zeros(2, 4, dtype=torch.int32), 4)
    with pytest.raises(TypeError, match="real floating dtype"):
        core.check_x(torch.zeros(2, 4, dtype=torch.complex64), 4)
    with pytest.raises(ValueError, match=r"x.shape\[-1\] must equal head_dim=None, got x.shape=\(\)"):
        core.check_x(torch.tensor(1.0), None)
    with pytest.raises(ValueError, match=r"head_dim=8, got x.shape=\(2, 4\)"):
        core.check_x(x, 8)
    for dtype in core.FLOAT_DTYPES:
        assert core.check_x(torch.zeros(3, dtype=dtype), 3).dtype == dtype


def test_as_positions_accepts_integers_and_reals():
    got = core.as_positions([3, 1, 2], CPU)
    assert isinstance(got, torch.Tensor) and got.tolist() == [3, 1, 2] and got.device == CPU
    assert core.as_positions(np.array([1.5, 2.0]), CPU).dtype == torch.float64
    assert core.as_positions(np.array([7], dtype=np.uint8), CPU).tolist() == [7]
    assert core.as_positions(5, CPU).tolist() == 5
    t = torch.tensor([0, 4], dtype=torch.int16)
    assert torch.equal(core.as_positions(t, CPU), t)
    assert core.as_positions(torch.tensor([1.0, -2.5]), CPU).tolist() == [1.0, -2.5]


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (True, "must be integer or real positions, got bool"),
        (np.bool_(False), "must be integer or real positions, got bool"),
        (None, "got NoneType"),
        ("12", "got str"),
        (b"12", "got bytes"),
        (np.array([1 + 2j]), "got dtype complex128"),
        (np.array([True, False]), "got dtype bool"),
        (np.array(["1"]), "got dtype <U1"),
        (torch.tensor([True]), "got dtype torch.bool"),
        (torch.tensor([1 + 1j]), "got dtype torch.complex64"),
    ],
)
def test_as_positions_refuses_non_numbers(bad, message):
    with pytest.raises(TypeError, match=message):
        core.as_positions(bad, CPU, "pos")


def test_as_positions_refuses_non_finite_reals_naming_the_first(compiling_off=None):
    with pytest.raises(ValueError, match="ids must be finite, got nan"):
        core.as_positions([1.0, float("nan"), float("inf")], CPU, "ids")
    with pytest.raises(ValueError, match="positions must be finite, got -inf"):
        core.as_positions(torch.tensor([[0.0, 2.0], [-math.inf, 1.0]]), CPU)


def test_as_positions_skips_the_finiteness_check_while_compiling(compiling):
    got = core.as_positions(torch.tensor([1.0, math.inf]), CPU)
    assert got[1].item() == math.inf


def test_check_broadcast():
    core.check_broadcast(torch.zeros(3), (2, 3))
    core.check_broadcast(torch.zeros(2, 1), (2, 3))
    core.check_broadcast(torch.zeros(()), (2, 3))
    with pytest.raises(
        ValueError, match=r"ids of shape \(4,\) does not broadcast against x.shape\[:-1\] = \(2, 3\)"
    ):
        core.check_broadcast(torch.zeros(4), (2, 3), "ids")
    with pytest.raises(ValueError, match=r"positions of shape \(5, 2, 3\)"):
        core.check_broadcast(torch.zeros(5, 2, 3), (2, 3))  # broadcasts, but would enlarge x


def test_angle_and_compute_dtypes():
    assert core.check_angle_dtype(torch.float32) is torch.float32
    assert core.check_angle_dtype(torch.float64) is torch.float64
    for bad in (torch.float16, torch.bfloat16, "float32", None):
        with pytest.raises(ValueError, match="angle_dtype must be torch.float32 or torch.float64"):
            core.check_angle_dtype(bad)
    f16, bf16, f32, f64 = torch.float16, torch.bfloat16, torch.float32, torch.float64
    assert [core.resolve_compute_dtype(None, d) for d in (f16, bf16, f32, f64)] == [f32, f32, f32, f64]
    assert [core.resolve_compute_dtype("input", d) for d in (f16, bf16, f32)] == [f16, bf16, f32]
    assert core.resolve_compute_dtype(f64, f16) is f64 and core.resolve_compute_dtype(bf16, f32) is bf16
    for bad in ("float32", torch.int32, "inputs"):
        with pytest.raises(ValueError, match="compute_dtype must be None, 'input' or one of"):
            core.resolve_compute_dtype(bad, f32)


# -- the length a scaling sees and the frequency table -------------------------------------------------

DYN = RopeConfig(4, layout="half", base=10000.0, scaling=DynamicNTK(2.0, 64))
LINEAR = RopeConfig(4, layout="half", scaling=Linear(2.0))


def test_seq_len_of_follows_hf_dynamic_rope_update():
    pos = torch.tensor([5, 1000, 3])
    assert core.seq_len_of(pos, DYN, None) == 1001  # max + 1, not last + 1
    assert core.seq_len_of(torch.tensor([2.9, 7.6]), DYN, None) == 8  # floor of the maximum, + 1
    assert core.seq_len_of(torch.tensor([-9, -4]), DYN, None) == 1
    assert core.seq_len_of(pos, DYN, 50) == 50  # explicit wins
    assert core.seq_len_of(torch.zeros(0, dtype=torch.int64), DYN, None) is None
    assert core.seq_len_of(pos, CFG4, None) is None
    assert core.seq_len_of(pos, LINEAR, None) is None
    assert core.seq_len_of(pos, CFG4, 50) == 50


def test_freq_constants_and_table():
    freqs, factor = core.freq_constants(CFG4, None)
    assert freqs == (1.0, 0.01) and factor == 1.0
    assert all(type(v) is float for v in (*freqs, factor))
    # dynamic NTK at length 256 > 64: base' = 1e4 (2 * 256 / 64 - 1)^(4 / 2) = 490000, pair 1: 1 / 700
    freqs, _ = core.freq_constants(DYN, 256)
    assert freqs[0] == 1.0 and freqs[1] == pytest.approx(1 / 700, rel=1e-15)
    assert core.freq_constants(DYN, 32)[0] == (1.0, 0.01)  # within the trained length: unscaled
    # a length given to a length-free scaling never changes it
    assert core.freq_constants(CFG4, 10**6) == ((1.0, 0.01), 1.0)
    inv, fac = core.freq_table(CFG4, 123, torch.float32, CPU)
    assert inv.dtype == torch.float32 and inv.tolist() == [1.0, float(np.float32(0.01))] and fac == 1.0
    inv, fac = core.freq_table(DYN, 256, torch.float64, CPU)
    assert inv.tolist() == [1.0, pytest.approx(1 / 700, rel=1e-15)] and isinstance(fac, float)
    yarn = RopeConfig(4, layout="half", scaling=YaRN(4.0, 64, attention_factor=0.25))
    assert core.freq_table(yarn, None, torch.float64, CPU)[1] == 0.25


def test_length_free_drops_lengths_only_where_they_do_not_matter():
    assert core._length_free(CFG4, 300) is None
    assert core._length_free(LINEAR, 300) is None
    assert core._length_free(DYN, 300) == 300
    assert core._length_free(DYN, None) is None


def test_freq_table_under_compile_comes_from_the_custom_op(compiling):
    inv, fac = core.freq_table(DYN, 256, torch.float32, CPU)
    assert isinstance(fac, torch.Tensor) and fac.dtype == torch.float64 and fac.ndim == 0
    assert fac.item() == 1.0
    assert inv.dtype == torch.float32 and inv.shape == (2,)
    assert inv.tolist() == [1.0, float(np.float32(1 / 700))]
    # without a length (or for a length-free scaling) it is the plain table with a Python float factor
    inv, fac = core.freq_table(DYN, None, torch.float64, CPU)
    assert isinstance(fac, float) and inv.tolist() == [1.0, 0.01]
    inv, fac = core.freq_table(CFG4, 256, torch.float64, CPU)
    assert isinstance(fac, float) and inv.tolist() == [1.0, 0.01]


def test_custom_op_keys_and_fake_shape():
    k1, k2 = core._config_key(DYN), core._config_key(CFG4)
    assert k1 != k2 and core._config_key(DYN) == k1
    assert core._CONFIGS[k1] is DYN and core._CONFIGS[k2] is CFG4
    yarn = RopeConfig(4, layout="half", scaling=YaRN(4.0, 64, attention_factor=0.25))
    packed = core._freq_table_op(core._config_key(yarn), 1000, CPU)
    assert packed.dtype == torch.float64 and packed.shape == (3,) and packed[-1].item() == 0.25
    assert packed[0].item() == 1.0
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        fake = core._freq_table_op(k1, 1000, CPU)
    assert fake.shape == (3,) and fake.dtype == torch.float64


# -- cos/sin tables -----------------------------------------------------------------------------------


@pytest.mark.parametrize("factor", [1.0, 0.5, 3.0])
def test_angle_tables_values_and_attention_factor(factor):
    pos = torch.tensor([0, 2, 9])
    inv = torch.tensor([1.0, 0.01], dtype=torch.float64)
    cos, sin = core.angle_tables(pos, inv, factor)
    assert cos.dtype == torch.float64 and cos.shape == (3, 2)
    ang = np.array([0.0, 2.0, 9.0])[:, None] * np.array([1.0, 0.01])
    np.testing.assert_allclose(cos.numpy(), factor * np.cos(ang), rtol=4e-16, atol=0)
    np.testing.assert_allclose(sin.numpy(), factor * np.sin(ang), rtol=4e-16, atol=1e-300)
    tcos, tsin = core.angle_tables(pos, inv.float(), torch.tensor(factor, dtype=torch.float64))
    assert tcos.dtype == torch.float32 and tsin.dtype == torch.float32
    np.testing.assert_allclose(tcos.numpy(), factor * np.cos(ang), rtol=4e-7, atol=0)
    np.testing.assert_allclose(tsin.numpy(), factor * np.sin(ang), rtol=4e-7, atol=1e-30)


def test_angle_tables_ignore_autocast_and_run_on_meta():
    pos = torch.tensor([3000])
    inv = torch.tensor([1.0], dtype=torch.float32)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        cos, _ = core.angle_tables(pos, inv, 1.0)
    assert cos.dtype == torch.float32 and cos.item() == pytest.approx(math.cos(3000.0), abs=4e-4)
    cos, sin = core.angle_tables(torch.zeros(2, 5, device="meta"), torch.zeros(3, device="meta"), 2.0)
    assert cos.shape == (2, 5, 3) and sin.device.type == "meta"


def test_expand_tables():
    c, s = torch.zeros(5, 3), torch.ones(5, 3)
    ec, es = core.expand_tables(c, s, 4)
    assert ec.shape == (1, 1, 5, 3) and es.shape == (1, 1, 5, 3) and es.sum().item() == 15
    assert core.expand_tables(c, s, 2)[0].shape == (5, 3)
    with pytest.raises(ValueError, match=r"cos/sin of shape \(5, 3\) have more axes than x \(1\)"):
        core.expand_tables(c, s, 1)


# -- the rotation: reference, eager, blocks -------------------------------------------------------------


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


# -- autograd routing ----------------------------------------------------------------------------------


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


# -- which path runs: the complex view and the blocks ------------------------------------------------------


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


def test_cpu_rotation_runs_in_blocks_of_block_bytes_along_the_longest_leading_axis(monkeypatch):
    """(2, 300, 8) float64: rows of the blocked axis 1 are 2 * 8 * 8 = 128 bytes; 512-byte blocks hold
    4 of them, so 75 blocks of shape (2, 4, 8)."""
    monkeypatch.setattr(core, "_BLOCK_BYTES", 512)
    shapes = _count_blocks(monkeypatch)
    x = torch.from_numpy(np.random.default_rng(70).standard_normal((2, 300, 8)))
    c, s = core.expand_tables(*(torch.from_numpy(v) for v in _tables(300, 4, 71)), 3)
    got = core._rotate_eager(x, c, s, "half", 8, torch.float64)
    assert shapes == [(2, 4, 8)] * 75
    np.testing.assert_allclose(
        got.numpy(), eq34(x.numpy(), c.numpy(), s.numpy(), "half", 8), atol=4e-15, rtol=0
    )
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
    monkeypatch.setattr(core, "_BLOCK_BYTES", 64)
    shapes = _count_blocks(monkeypatch)
    x = torch.from_numpy(np.random.default_rng(72).standard_normal((3, 5, 16)))
    c, s = core.expand_tables(*(torch.from_numpy(v) for v in _tables(5, 8, 73)), 3)
    got = core._rotate_eager(x, c, s, "half", 16, torch.float64)
    assert shapes == [(3, 1, 16)] * 5
    np.testing.assert_allclose(
        got.numpy(), eq34(x.numpy(), c.numpy(), s.numpy(), "half", 16), atol=4e-15, rtol=0
    )


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


# -- option strings by value; the tables under torch.compile -----------------------------------------------


def test_option_strings_are_compared_by_value(monkeypatch):
    """Strings read from a config file or a command line are equal to, not identical with, the literals."""
    assert core.resolve_compute_dtype("".join(["in", "put"]), torch.float16) is torch.float16
    monkeypatch.setattr(core, "check_triton", lambda x, compute: None)
    monkeypatch.setattr(core, "rotate_triton", lambda *a: "triton ran")
    x, c = torch.zeros(2, 8), torch.zeros(2, 4)
    assert (
        core.rotate_tables(x, c, c, "half", 8, torch.float32, kernel="".join(["tri", "ton"])) == "triton ran"
    )


def test_length_dependent_tables_trace_into_one_graph():
    """torch.compile(fullgraph=True, dynamic=True): the table helpers must be constants or the custom op
    to Dynamo (no graph break, no host read); the compiled values equal the eager ones."""

    # A config no other test uses: its key is created while Dynamo traces (the first time it is seen).
    # (DYN's table in the other layout: same numbers, a different config.)
    fresh = RopeConfig(4, layout="interleaved", base=10000.0, scaling=DynamicNTK(2.0, 64))
    assert fresh not in core._CONFIG_KEYS

    def tables(pos, n):
        inv, fac = core.freq_table(fresh, n, torch.float64, pos.device)
        plain, _ = core.freq_table(CFG4, None, torch.float64, pos.device)
        cos, _ = core.angle_tables(pos, inv, fac)
        return cos, plain

    compiled = torch.compile(tables, backend="eager", fullgraph=True, dynamic=True)
    pos = torch.arange(6)
    for n in (256, 300):
        got_cos, got_plain = compiled(pos, n)
        want_cos, want_plain = tables(pos, n)
        assert torch.equal(got_cos, want_cos) and torch.equal(got_plain, want_plain)
    # pair 1 at length 300: base' = 1e4 (2 * 300 / 64 - 1)^2 = 701406.25, so cos(5 / 837.5)
    assert got_cos[5, 1].item() == pytest.approx(math.cos(5 / 837.5), rel=1e-15)


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
