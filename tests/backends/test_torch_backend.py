"""The torch adapter: values, dtypes, layouts, positions, scalings, module cache, autograd, errors.

Expected values come from an explicit per-element loop written here (math.cos/sin in float64) or from
the NumPy oracle (an independent implementation); never from the code under test.
"""

from __future__ import annotations

import math
import subprocess
import sys
import zlib

import mpmath
import numpy as np
import pytest
from equal_strings import fresh as _fresh
from hypothesis import given, settings
from hypothesis import strategies as st

import rope_ref
from rope_ref import RopeConfig
from rope_ref.scaling import DynamicNTK, Linear, Llama3, LongRoPE, NTKAware, YaRN

torch = pytest.importorskip("torch")
import rope_ref.backends.torch as rt  # noqa: E402  (after the torch availability check)
from rope_ref.backends.torch import apply  # noqa: E402

NO_CUDA = "no CUDA device (torch.cuda.is_available() is False)"


@pytest.fixture(autouse=True)
def _seed_torch(request):
    """Seed torch's global RNG per test from its node id (zlib.crc32: stable under any PYTHONHASHSEED),
    so every ``torch.randn`` here is reproducible and independent of which tests ran before."""
    torch.manual_seed(zlib.crc32(request.node.nodeid.encode()))


DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16]
# Output tolerance per I/O dtype: one output rounding plus input rounding is excluded (inputs are
# quantised before the reference sees them), so a few ulps of |x| ~ 1 values.
ATOL = {torch.float64: 1e-12, torch.float32: 2e-6, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}


def loop_rope(x: np.ndarray, pos: np.ndarray, head_dim: int, layout: str, rd: int, base: float) -> np.ndarray:
    """RoFormer eq. 34 one element at a time; x is (rows, head_dim), pos is (rows,)."""
    out = np.array(x, dtype=np.float64, copy=True)
    for r in range(x.shape[0]):
        for i in range(rd // 2):
            theta = float(pos[r]) * math.pow(base, -2.0 * i / rd)
            a, b = (i, i + rd // 2) if layout == "half" else (2 * i, 2 * i + 1)
            xa, xb = float(x[r, a]), float(x[r, b])
            out[r, a] = xa * math.cos(theta) - xb * math.sin(theta)
            out[r, b] = xb * math.cos(theta) + xa * math.sin(theta)
    return out


# -- values -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("rd", [16, 6])
def test_apply_matches_loop(dtype, layout, rd):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(7, 16, generator=g, dtype=torch.float64).to(dtype)
    pos = torch.tensor([0, 1, 2, 5, 100, 1857, 4095])
    cfg = rope_ref.RopeConfig(16, layout=layout, rotary_dim=rd)
    # float64 inputs with float64 angles; the others with the default float32 angles, whose error
    # is about |pos| * 2**-24 rad (plus the reduction of the product), per row.
    angle = torch.float64 if dtype == torch.float64 else torch.float32
    y = rt.apply(x, pos, cfg, angle_dtype=angle)
    assert y.dtype == dtype and y.shape == x.shape
    expected = loop_rope(x.double().numpy(), pos.numpy(), 16, layout, rd, 10000.0)
    angle_err = 0.0 if angle == torch.float64 else 2.0**-22
    tol = ATOL[dtype] * 4 + pos.double().numpy()[:, None] * angle_err * float(x.double().abs().max())
    assert np.all(np.abs(y.double().numpy() - expected) <= tol)
    # pass-through channels are bit-for-bit copies
    assert torch.equal(y[:, rd:], x[:, rd:])


@settings(max_examples=40, deadline=None)
@given(
    layout=st.sampled_from(["half", "interleaved"]),
    half_rd=st.integers(1, 8),
    extra=st.integers(0, 3),
    base=st.sampled_from([10000.0, 500000.0, 10.0]),
    rows=st.integers(1, 5),
    seed=st.integers(0, 2**31 - 1),
)
def test_apply_float64_random(layout, half_rd, extra, base, rows, seed):
    rd = 2 * half_rd
    hd = rd + 2 * extra
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, hd))
    pos = rng.uniform(-3000, 3000, rows)
    cfg = rope_ref.RopeConfig(hd, layout=layout, rotary_dim=rd, base=base)
    y = rt.apply(torch.from_numpy(x), torch.from_numpy(pos), cfg, angle_dtype=torch.float64)
    np.testing.assert_allclose(y.numpy(), loop_rope(x, pos, hd, layout, rd, base), rtol=0, atol=1e-9)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_non_contiguous_views(layout):
    cfg = rope_ref.RopeConfig(8, layout=layout)
    base = torch.randn(2, 3, 5, 8, dtype=torch.float32)
    pos = torch.arange(5).reshape(1, 5)  # x is (B, H, S, D) after the transpose
    views = [
        base.transpose(1, 2).contiguous().transpose(1, 2),  # strided, (B, H, S, D)
        torch.randn(2, 3, 5, 16)[..., ::2],  # stride 2 on the last axis
        torch.randn(2, 3, 5, 9)[..., 1:],  # odd storage offset
    ]
    for v in views:
        assert not v.is_contiguous()
        y = rt.apply(v, pos, cfg)
        expected = rope_ref.apply(v.double().numpy(), pos.numpy(), cfg)
        np.testing.assert_allclose(y.double().numpy(), expected, atol=2e-6)
        assert y.is_contiguous()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_large_inputs_processed_in_blocks(dtype, layout, monkeypatch):
    """Inputs many blocks long, with per-row tables sliced along the blocked axis."""
    import rope_ref.backends._torch_core as core

    monkeypatch.setattr(core, "_BLOCK_BYTES", 4096)  # 3 of the 300 rows per block: 100 blocks
    cfg = rope_ref.RopeConfig(64, layout=layout, rotary_dim=48)
    x = torch.randn(3, 300, 2, 64).to(dtype)
    pos = torch.randint(0, 5000, (3, 300, 1))
    y = rt.apply(x, pos, cfg)
    expected = rope_ref.apply(x.double().numpy(), pos.numpy(), cfg)
    tol = 3e-3 if dtype == torch.float32 else 5e-3  # float32 angles up to 5000: |pos| * 2**-22
    np.testing.assert_allclose(y.double().numpy(), expected, atol=tol)


def test_input_not_modified():
    x = torch.randn(3, 4, 8)
    before = x.clone()
    rt.apply(x, torch.arange(4), rope_ref.RopeConfig(8, layout="interleaved"))
    assert torch.equal(x, before)


def test_per_row_positions_and_offsets():
    """(B, H, S, D) with per-row positions (B, 1, S): left padding and KV-cache offsets."""
    cfg = rope_ref.RopeConfig(16, layout="half")
    x = torch.randn(2, 3, 4, 16, dtype=torch.float64)
    pos = torch.tensor([[0, 1, 2, 3], [17, 18, 19, 20]])[:, None, :]
    y = rt.apply(x, pos, cfg, angle_dtype=torch.float64)
    for b in range(2):
        rows = x[b].reshape(-1, 16).numpy()
        p = np.tile(pos[b, 0].numpy(), 3)
        np.testing.assert_allclose(
            y[b].reshape(-1, 16).numpy(), loop_rope(rows, p, 16, "half", 16, 1e4), atol=1e-12
        )
    # batched decode: seq_len 1, batch > 1 (ml-explore/mlx #3494)
    xd = torch.randn(4, 2, 1, 16, dtype=torch.float64)
    pd = torch.tensor([5, 9, 300, 7])[:, None, None]
    yd = rt.apply(xd, pd, cfg, angle_dtype=torch.float64)
    np.testing.assert_allclose(yd.numpy(), rope_ref.apply(xd.numpy(), pd.numpy(), cfg), atol=1e-12)


@pytest.mark.parametrize(
    "scaling",
    [
        Linear(4.0),
        NTKAware(8.0),
        DynamicNTK(4.0, 64),
        YaRN(8.0, 64),
        Llama3(8.0, 1.0, 4.0, 64),
        LongRoPE([1.0] * 8, [1.0 + 0.5 * i for i in range(8)], 64, factor=4.0),
    ],
    ids=lambda s: type(s).__name__,
)
def test_scalings_match_oracle(scaling):
    cfg = rope_ref.RopeConfig(16, layout="half", scaling=scaling)
    x = torch.randn(300, 16, dtype=torch.float64)
    for pos in (torch.arange(40), torch.arange(300)):  # below and beyond the original context
        xs = x[: len(pos)]
        y = rt.apply(xs, pos, cfg, angle_dtype=torch.float64)
        np.testing.assert_allclose(y.numpy(), rope_ref.apply(xs.numpy(), pos.numpy(), cfg), atol=1e-10)
        cos, sin = rt.RotaryEmbedding(cfg, angle_dtype=torch.float64).tables(pos)
        c_ref, s_ref = rope_ref.cos_sin(pos.numpy(), cfg)
        np.testing.assert_allclose(cos.numpy(), c_ref, atol=1e-10)
        np.testing.assert_allclose(sin.numpy(), s_ref, atol=1e-10)


def test_hf_drop_in_matches_hf_formula():
    """Against HF's eager formula written here in float64: q*cos + rotate_half(q)*sin, cos = cat(f, f)."""
    cfg = rope_ref.RopeConfig(16, layout="half")
    q_, k_ = torch.randn(2, 4, 6, 16, dtype=torch.float64), torch.randn(2, 2, 6, 16, dtype=torch.float64)
    pos = torch.tensor([[0, 1, 2, 3, 4, 5], [3, 4, 5, 6, 7, 8]])
    inv = 1.0 / (10000.0 ** (torch.arange(0, 16, 2, dtype=torch.float64) / 16))
    emb = torch.cat([pos[..., None] * inv, pos[..., None] * inv], -1)
    c, s = emb.cos()[:, None], emb.sin()[:, None]

    def rotate_half(t):
        return torch.cat((-t[..., 8:], t[..., :8]), -1)

    emb_module = rt.RotaryEmbedding(cfg, angle_dtype=torch.float64)
    cos, sin = emb_module.tables(pos)
    q2, k2 = rt.apply_rotary_pos_emb(q_, k_, cos, sin)
    torch.testing.assert_close(q2, q_ * c + rotate_half(q_) * s)
    torch.testing.assert_close(k2, k_ * c + rotate_half(k_) * s)


# -- precision policy -------------------------------------------------------------------------------


def test_half_inputs_round_once():
    """fp16/bf16 in: computed in float32, rounded once at the output (default compute policy)."""
    cfg = rope_ref.RopeConfig(64, layout="half")
    x = torch.randn(64, 64).to(torch.bfloat16)
    pos = torch.arange(64) * 97
    y = rt.apply(x, pos, cfg)
    y32 = rt.apply(x.float(), pos, cfg)
    assert torch.equal(y, y32.to(torch.bfloat16))
    # "input" compute rounds every intermediate: usually different, and further from the truth.
    y_in = rt.apply(x, pos, cfg, compute_dtype="input")
    assert y_in.dtype == torch.bfloat16
    truth = torch.from_numpy(rope_ref.apply(x.double().numpy(), pos.numpy(), cfg))
    assert (y.double() - truth).abs().max() <= (y_in.double() - truth).abs().max()


def test_angles_in_float32_not_activation_dtype():
    """The gpt-neox #1003 / candle #3520 cases: positions 1857, 15962 with bf16 activations."""
    cfg = rope_ref.RopeConfig(128, layout="half")
    pos = torch.tensor([255, 256, 257, 1857, 2049, 15962])
    cos, sin = rt.RotaryEmbedding(cfg).tables(pos)
    assert cos.dtype == torch.float32
    c_ref, _ = rope_ref.cos_sin(pos.numpy(), cfg)
    # float32 angles: error about |pos| * 2**-24, far below the 0.3+ of bf16 angles
    np.testing.assert_allclose(cos.double().numpy(), c_ref, atol=2e-3)
    x = torch.ones(6, 128, dtype=torch.bfloat16)
    y = rt.apply(x, pos, cfg).double().numpy()
    np.testing.assert_allclose(y, rope_ref.apply(np.ones((6, 128)), pos.numpy(), cfg), atol=2e-2)


def test_module_cast_and_autocast_do_not_degrade_tables():
    cfg = rope_ref.RopeConfig(128, layout="half")
    m = rt.RotaryEmbedding(cfg)
    pos = torch.arange(0, 20000, 7)
    c0, s0 = m.tables(pos)
    m.to(torch.bfloat16)
    m.half()
    c1, s1 = m.tables(pos)
    assert c1.dtype == torch.float32 and torch.equal(c0, c1) and torch.equal(s0, s1)
    assert not list(m.buffers()) and m.state_dict() == {}
    x = torch.randn(len(pos), 128)
    plain = m(x, pos)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        auto = m(x, pos)
        fresh = rt.RotaryEmbedding(cfg)(x, pos)
    assert torch.equal(plain, auto) and torch.equal(plain, fresh)


def test_fp64_policy_is_float64_throughout():
    cfg = rope_ref.RopeConfig(32, layout="interleaved")
    pos = torch.tensor([0, 10**6, 2**40])
    x = torch.randn(3, 32, dtype=torch.float64)
    y = rt.apply(x, pos, cfg, angle_dtype=torch.float64)
    np.testing.assert_allclose(y.numpy(), rope_ref.apply(x.numpy(), pos.numpy(), cfg), atol=1e-9)


# -- module cache -----------------------------------------------------------------------------------


def test_cache_grows_and_matches_direct():
    cfg = rope_ref.RopeConfig(16, layout="half")
    m = rt.RotaryEmbedding(cfg)
    c_small, _ = m.tables(torch.arange(10))
    assert list(m.cached_lengths().values()) == [256]
    c_big, _ = m.tables(torch.tensor([3000, 9]))
    assert list(m.cached_lengths().values()) == [3001]
    assert torch.equal(c_big[1], c_small[9])
    c_ref, _ = rope_ref.cos_sin(np.array([3000, 9]), cfg)
    np.testing.assert_allclose(c_big.double().numpy(), c_ref, atol=2e-4)
    # negative, real and huge positions bypass the cache and are still right
    pos = torch.tensor([-5.0, 2.5, 1e6])
    c, s = m.tables(pos)
    c_ref, s_ref = rope_ref.cos_sin(pos.numpy(), cfg)
    np.testing.assert_allclose(c.double().numpy(), c_ref, atol=0.1)  # fp32 angle at 1e6: ulp 0.0625
    np.testing.assert_allclose(c[:2].double().numpy(), c_ref[:2], atol=1e-6)


@pytest.mark.parametrize(
    "scaling",
    [DynamicNTK(2.0, 32), LongRoPE([1.0] * 4, [2.0, 3.0, 4.0, 5.0], 32, factor=4.0)],
    ids=["dynamic", "longrope"],
)
def test_length_dependent_state_does_not_leak(scaling):
    """Long, then short, then long again: each call equals a fresh oracle call (HF #25104 family)."""
    cfg = rope_ref.RopeConfig(8, layout="half", scaling=scaling)
    m = rt.RotaryEmbedding(cfg, angle_dtype=torch.float64)
    for length in (100, 10, 33, 32, 100):
        pos = torch.arange(length)
        x = torch.randn(length, 8, dtype=torch.float64)
        np.testing.assert_allclose(
            m(x, pos).numpy(),
            rope_ref.apply(x.numpy(), pos.numpy(), cfg),
            atol=1e-12,
            err_msg=f"len {length}",
        )


def test_max_position_avoids_host_read_of_positions():
    """With ``max_position`` the module never reads the positions on the host (no aminmax/int: no
    device sync, CUDA-graph capturable). "meta" tensors have no data, so any host read raises there."""
    cfg = rope_ref.RopeConfig(16, layout="interleaved", rotary_dim=12)
    x = torch.randn(2, 10, 3, 16)
    pos = torch.arange(10)[:, None]
    meta_x, meta_pos = x.to("meta"), pos.to("meta")
    with pytest.raises(RuntimeError, match="meta"):  # the on-demand path reads max(positions)
        rt.RotaryEmbedding(cfg)(meta_x, meta_pos)
    m = rt.RotaryEmbedding(cfg, max_position=300)
    y = m(meta_x, meta_pos)
    assert y.device.type == "meta" and y.shape == x.shape and y.dtype == x.dtype
    cos, _ = m.tables(meta_pos)
    assert cos.device.type == "meta" and cos.shape == (10, 1, 6)
    assert list(m.cached_lengths().values()) == [300]  # allocated once, at the promised size
    # the same numbers as the on-demand cache and as apply, on CPU
    m_cpu = rt.RotaryEmbedding(cfg, max_position=300)
    assert torch.equal(m_cpu(x, pos), rt.RotaryEmbedding(cfg)(x, pos))
    assert torch.equal(m_cpu(x, pos), rt.apply(x, pos, cfg))
    # per call: overrides the module's value, grows the table without reading the positions
    plain = rt.RotaryEmbedding(cfg)
    big = torch.arange(5000, 5010)[:, None]
    assert torch.equal(plain(x, big, max_position=5010), rt.apply(x, big, cfg))
    assert list(plain.cached_lengths().values()) == [5010]
    assert plain(meta_x, meta_pos, max_position=16).device.type == "meta"
    assert "max_position=300" in repr(m)
    for bad, err in ((0, ValueError), (2.5, TypeError), (True, TypeError)):
        with pytest.raises(err, match="max_position"):
            rt.RotaryEmbedding(cfg, max_position=bad)
        with pytest.raises(err, match="max_position"):
            plain(x, pos, max_position=bad)


def test_module_on_meta_without_max_position_says_what_to_pass():
    """Issue 28: on "meta" (no data) the on-demand cache cannot read the positions; the error is one line
    naming ``max_position`` (and ``seq_len`` where a length-dependent scaling would read them too)."""
    x, pos = torch.empty(2, 5, 3, 16, device="meta"), torch.arange(5, device="meta")[:, None]
    for cfg, names in (
        (rope_ref.RopeConfig(16, layout="half"), ["max_position="]),
        (rope_ref.RopeConfig(16, layout="half", scaling=DynamicNTK(2.0, 64)), ["max_position=", "seq_len="]),
    ):
        with pytest.raises(RuntimeError, match="meta") as info:
            rt.RotaryEmbedding(cfg)(x, pos)
        message = str(info.value)
        assert "\n" not in message and all(n in message for n in names), message
        y = rt.RotaryEmbedding(cfg)(x, pos, max_position=5, seq_len=5)  # shapes only
        assert y.device.type == "meta" and y.shape == x.shape and y.dtype == x.dtype


def test_cache_rebuilt_on_device_change():
    """One table per device, keyed by the device; moving back finds the first one again (no CUDA needed:
    "meta" stands in for the second device)."""
    cfg = rope_ref.RopeConfig(16, layout="half", scaling=YaRN(4.0, 64))
    m = rt.RotaryEmbedding(cfg, max_position=512)
    x = torch.randn(4, 2, 16)
    pos = torch.arange(4)[:, None]
    y_cpu = m(x, pos)
    (cpu_key,) = m.cached_lengths()
    cpu_table = m._cache[cpu_key][0]
    y_meta = m(x.to("meta"), pos.to("meta"))
    assert y_meta.device.type == "meta"
    keys = list(m.cached_lengths())
    assert [k[0] for k in keys] == ["cpu", "meta"] and keys[0][1:] == keys[1][1:]  # same frequency table
    assert [m._cache[k][0].device.type for k in keys] == ["cpu", "meta"]
    # back on CPU: the CPU table is reused as it was, and the answer is unchanged
    assert torch.equal(m(x, pos), y_cpu)
    assert m._cache[cpu_key][0] is cpu_table
    # module.to(...) has nothing to move (no buffers): the cache follows the inputs' device only
    m.to("meta")
    assert torch.equal(m(x, pos), y_cpu) and m._cache[cpu_key][0] is cpu_table


# -- autograd ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_gradcheck_function_and_native(layout):
    cfg = rope_ref.RopeConfig(12, layout=layout, rotary_dim=8, scaling=YaRN(4.0, 16))
    x = torch.randn(2, 5, 12, dtype=torch.float64, requires_grad=True)
    pos = torch.arange(5)
    for mode in ("function", "native"):
        assert torch.autograd.gradcheck(
            lambda t, mode=mode: rt.apply(t, pos, cfg, angle_dtype=torch.float64, autograd=mode), (x,)
        )
    g = torch.randn(2, 5, 12, dtype=torch.float64)
    (g_fn,) = torch.autograd.grad(rt.apply(x, pos, cfg, autograd="function"), x, g)
    (g_nat,) = torch.autograd.grad(rt.apply(x, pos, cfg, autograd="native"), x, g)
    torch.testing.assert_close(g_fn, g_nat)
    # independent: the VJP of a (scaled) rotation is the rotation by the negated angle
    expected = rope_ref.apply(g.numpy(), -pos.numpy(), cfg, seq_len=5)
    np.testing.assert_allclose(g_fn.numpy(), expected, atol=1e-6)


@pytest.mark.parametrize("layout", ["half", pytest.param("interleaved", marks=pytest.mark.slow)])
def test_gradgradcheck_function(layout):
    """Double backward through RotateFunction (its backward is a RotateFunction too), float64."""
    cfg = rope_ref.RopeConfig(12, layout=layout, rotary_dim=8, scaling=YaRN(4.0, 16))
    x = torch.randn(2, 5, 12, dtype=torch.float64, requires_grad=True)
    pos = torch.arange(5)

    def fn(t):
        return rt.apply(t, pos, cfg, angle_dtype=torch.float64, autograd="function")

    assert torch.autograd.gradgradcheck(fn, (x,))
    # create_graph=True: the gradient is differentiable and matches plain autograd's second derivative
    g = torch.randn(2, 5, 12, dtype=torch.float64, requires_grad=True)
    w = torch.randn(2, 5, 12, dtype=torch.float64)
    second = []
    for mode in ("function", "native"):
        y = rt.apply(x, pos, cfg, angle_dtype=torch.float64, autograd=mode)
        (gx,) = torch.autograd.grad(y, x, g, create_graph=True)
        assert gx.requires_grad
        second.append(torch.autograd.grad((gx * w).sum(), g)[0])
    torch.testing.assert_close(second[0], second[1])


def test_function_saves_no_activations():
    """The custom Function keeps only the (S, d/2) tables for backward, never x."""
    cfg = rope_ref.RopeConfig(64, layout="half")
    x = torch.randn(32, 4, 64, requires_grad=True)
    pos = torch.arange(32)[:, None]
    saved: list[int] = []

    def pack(t):
        saved.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = rt.apply(x, pos, cfg)
    assert saved and max(saved) <= 32 * 32
    y.sum().backward()
    assert x.grad is not None and x.grad.shape == x.shape


# -- errors, availability, imports ------------------------------------------------------------------


def test_bad_inputs_name_the_argument():
    cfg = rope_ref.RopeConfig(8, layout="half")
    x = torch.randn(3, 8)
    with pytest.raises(TypeError, match="x must have a real floating dtype"):
        rt.apply(torch.ones(3, 8, dtype=torch.int64), torch.arange(3), cfg)
    with pytest.raises(ValueError, match="head_dim=8"):
        rt.apply(torch.randn(3, 6), torch.arange(3), cfg)
    with pytest.raises(TypeError, match="positions"):
        rt.apply(x, torch.ones(3, dtype=torch.bool), cfg)
    with pytest.raises(ValueError, match="positions must be finite"):
        rt.apply(x, torch.tensor([0.0, float("nan"), 1.0]), cfg)
    with pytest.raises(ValueError, match="does not broadcast"):
        rt.apply(x, torch.arange(4), cfg)
    with pytest.raises(TypeError, match="RopeConfig"):
        rt.apply(x, torch.arange(3), {"head_dim": 8})
    with pytest.raises(ValueError, match="angle_dtype"):
        rt.apply(x, torch.arange(3), cfg, angle_dtype=torch.float16)
    with pytest.raises(ValueError, match="autograd"):
        rt.RotaryEmbedding(cfg, autograd="fast")


def test_available_and_registry():
    assert rt.available("cpu") == (True, "")
    ok, reason = rt.available("cuda")
    assert ok == torch.cuda.is_available()
    if not ok:
        assert "CUDA" in reason
    from rope_ref.conformance.registry import get_backend

    b = get_backend("torch", precision="bf16")
    assert b.precision.io_dtype == "bfloat16" and b.precision.angle_dtype == "float32"
    with pytest.raises(ValueError, match="precision"):
        rt.make_backend(precision="fp8")


def test_import_rope_ref_does_not_import_torch():
    code = "import sys, rope_ref, rope_ref.backends; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.gpu
@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device (torch.cuda.is_available() is False)"
)
def test_cuda_matches_cpu():
    cfg = rope_ref.RopeConfig(128, layout="half", scaling=YaRN(4.0, 4096))
    x = torch.randn(2, 512, 8, 128)
    pos = torch.arange(512)[:, None]
    m = rt.RotaryEmbedding(cfg)
    y_cpu = m(x, pos)
    y_gpu = m(x.cuda(), pos.cuda())  # device change: the cache is rebuilt on the GPU
    torch.testing.assert_close(y_gpu.cpu(), y_cpu, atol=1e-5, rtol=0)
    assert len(m.cached_lengths()) == 2


@pytest.mark.gpu
@pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device (torch.cuda.is_available() is False)"
)
def test_cuda_max_position_has_no_sync_and_captures():
    """With max_position: no synchronising call (sync debug mode "error"), and a CUDA graph captures it."""
    cfg = rope_ref.RopeConfig(128, layout="half", rotary_dim=64)
    m = rt.RotaryEmbedding(cfg, max_position=4096)
    x = torch.randn(2, 256, 8, 128, device="cuda", dtype=torch.bfloat16)
    pos = torch.arange(256, device="cuda")[:, None]
    expected = m(x, pos)  # builds the table (allowed to allocate and copy)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        y = m(x, pos)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.testing.assert_close(y, expected, atol=0, rtol=0)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y_graph = m(x, pos)
    pos.add_(7)
    graph.replay()
    torch.testing.assert_close(y_graph, m(x, pos), atol=0, rtol=0)


U64, U32 = 2.0**-53, 2.0**-24


DPS = 40


def mp_freqs(base: float, d: int) -> list:
    with mpmath.workdps(DPS):
        return [mpmath.power(mpmath.mpf(base), -mpmath.mpf(2 * i) / d) for i in range(d // 2)]


def mp_yarn_freqs(base: float, d: int, factor: float, l0: int) -> list:
    """HF YaRN inverse frequencies (beta_fast 32, beta_slow 1, truncate) in mpmath."""
    with mpmath.workdps(DPS):

        def corr(r: float):
            return d * mpmath.log(l0 / (r * 2 * mpmath.pi)) / (2 * mpmath.log(base))

        low, high = max(mpmath.floor(corr(32)), 0), min(mpmath.ceil(corr(1)), d - 1)
        out = []
        for i, theta in enumerate(mp_freqs(base, d)):
            ramp = min(max((i - low) / (high - low), 0), 1)
            out.append(theta / factor * ramp + theta * (1 - ramp))
        return out


def mp_rotate(x: np.ndarray, positions: np.ndarray, freqs: list, factor: float, layout: str) -> np.ndarray:
    """RoFormer eq. 34 row by row with cos/sin at 40 digits times the attention factor A."""
    n = len(freqs)
    out = x.copy()
    for row, m in enumerate(positions):
        for i, w in enumerate(freqs):
            a, b = (i, i + n) if layout == "half" else (2 * i, 2 * i + 1)
            with mpmath.workdps(DPS):
                c, s = factor * mpmath.cos(m * w), factor * mpmath.sin(m * w)
                out[row, a] = float(x[row, a] * c - x[row, b] * s)
                out[row, b] = float(x[row, b] * c + x[row, a] * s)
    return out


def bound(x: np.ndarray, positions: np.ndarray, freqs: list, factor: float, u: float) -> float:
    """Allowance for float angles of roundoff u: A |x| (16 u (1 + |m theta|_max))."""
    top = max(abs(float(m * w)) for m in positions for w in freqs)
    return abs(factor) * float(np.abs(x).max()) * 16 * u * (1 + top)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("factor", [0.5, 0.25])
@pytest.mark.parametrize("angle", ["float64", "float32"])
def test_attention_factor_below_one_scales_the_rotation(layout, factor, angle):
    cfg = RopeConfig(8, layout=layout, scaling=YaRN(4.0, 64, attention_factor=factor))
    freqs = mp_yarn_freqs(10000.0, 8, 4.0, 64)
    x = np.random.default_rng(21).standard_normal((5, 8))
    positions = np.array([0.0, 1.0, 7.0, 100.0, 513.0])
    angle_dtype = getattr(torch, angle)
    got = apply(torch.from_numpy(x), torch.from_numpy(positions), cfg, angle_dtype=angle_dtype).numpy()
    want = mp_rotate(x, positions, freqs, factor, layout)
    u = U64 if angle == "float64" else U32
    np.testing.assert_allclose(got, want, rtol=0, atol=bound(x, positions, freqs, factor, u))


@pytest.mark.parametrize("order", [[1000, 3], [3, 1000], [[7, 1000], [2, 5]]])
def test_dynamic_ntk_reads_the_largest_position_not_the_last(order):
    """HF dynamic_rope_update: seq_len = max(position_ids) + 1 = 1001 whatever the order."""
    d, base, factor, l0 = 8, 10000.0, 2.0, 64
    cfg = RopeConfig(d, layout="half", base=base, scaling=DynamicNTK(factor, l0))
    positions = np.array(order, dtype=np.float64)
    with mpmath.workdps(DPS):
        scaled = base * (1 + mpmath.mpf(factor) * (1001 - l0) / l0) ** (mpmath.mpf(d) / (d - 2))
    freqs = mp_freqs(scaled, d)
    x = np.random.default_rng(22).standard_normal(positions.shape + (d,))
    got = apply(torch.from_numpy(x), torch.from_numpy(positions), cfg, angle_dtype=torch.float64).numpy()
    flat_x, flat_p = x.reshape(-1, d), positions.reshape(-1)
    want = mp_rotate(flat_x, flat_p, freqs, 1.0, "half").reshape(x.shape)
    np.testing.assert_allclose(got, want, rtol=0, atol=bound(flat_x, flat_p, freqs, 1.0, U64))


def _outcome(call) -> tuple:
    try:
        return ("ok", call())
    except Exception as err:  # the outcome, whatever it is, must not depend on string identity
        return ("raised", type(err), str(err))


@pytest.mark.parametrize(
    "options",
    [{"autograd": "native"}, {"autograd": "function"}, {"kernel": "triton"}, {"kernel": "torch"}],
    ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items()),
)
def test_torch_options_compare_strings_by_value(options):
    torch = pytest.importorskip("torch", reason="the torch adapter needs torch")
    from rope_ref.backends import torch as rt

    cfg = RopeConfig(8, layout="half")
    gen = torch.Generator().manual_seed(1)
    x = torch.randn((2, 5, 8), generator=gen, requires_grad=True)
    ids = torch.arange(5)

    def run(convert):
        return _outcome(lambda: rt.apply(x, ids, cfg, **{k: convert(v) for k, v in options.items()}))

    want, got = run(sys.intern), run(_fresh)
    assert got[0] == want[0], (got, want)
    if want[0] == "ok":
        assert torch.equal(got[1].detach(), want[1].detach())
    else:
        assert got[1:] == want[1:]
