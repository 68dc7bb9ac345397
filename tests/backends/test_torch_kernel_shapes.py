"""Issue 16, torch adapter: axes, offsets, varlen, GQA q/k, packed QKV, in place, inverse, non-contiguous.

Every family is checked against the float64 oracle (:func:`rope_ref.apply` with ``axes=`` /
``inverse=`` and :mod:`rope_ref.positions`) and has one deliberately broken variant that must fail
the same check, so the checks are shown able to fail.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from rope_ref.backends import torch as rt  # noqa: E402

import rope_ref  # noqa: E402
from rope_ref.positions import positions_from_cu_seqlens, positions_from_offset  # noqa: E402
from rope_ref.testing import assert_rope_close  # noqa: E402

F64 = torch.float64
EPS = float(np.finfo(np.float64).eps)
CFGS = [rope_ref.RopeConfig(64, layout="half"), rope_ref.RopeConfig(64, layout="interleaved", rotary_dim=48)]
# The varlen lengths, a length-1 sequence and one longer than 2048.
LENGTHS = [400, 142, 169, 16, 25, 518, 156, 24, 504, 90, 4, 1, 2100]


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def oracle(x: torch.Tensor, pos, cfg, axes: str, inverse: bool = False) -> np.ndarray:
    return rope_ref.apply(
        x.detach().double().numpy(), np.asarray(pos, dtype=np.float64), cfg, axes=axes, inverse=inverse
    )


def assert_f64(y: torch.Tensor, x: torch.Tensor, pos, cfg, axes: str, inverse: bool = False) -> None:
    """float64 bound: a few ulp of |x| plus |m theta| 2^-53 |x| (the adapter rounds its angle once)."""
    ref = oracle(x, pos, cfg, axes, inverse)
    got = y.detach().numpy()
    assert got.shape == ref.shape, (got.shape, ref.shape)
    amax = float(np.abs(x.detach().numpy()).max()) if x.numel() else 0.0
    angle = float(np.abs(np.asarray(pos, dtype=np.float64)).max(initial=0.0)) * float(
        rope_ref.inv_freq(cfg)[0]
    )
    bound = rope_ref.attention_factor(cfg) * amax * (8 * EPS + angle * 2.0**-53) + 1e-300
    err = float(np.abs(got - ref).max(initial=0.0))
    assert err <= bound, f"max error {err:.3g} > bound {bound:.3g}"


def make(shape, dtype=F64, seed=0) -> torch.Tensor:
    return torch.randn(shape, generator=gen(seed), dtype=F64).to(dtype)


# -- axes and positions forms --------

SHAPES = {
    "bshd": (2, 9, 3, 64),
    "bhsd": (2, 3, 9, 64),
    "sbhd": (9, 2, 3, 64),
    "thd": (9, 3, 64),
    "shd": (9, 3, 64),
    "hsd": (3, 9, 64),
}


def ids_for(axes: str, form: str):
    if form == "scalar":
        return 5
    if form == "tokens":
        return np.arange(9) * 3 + 1
    return np.arange(18).reshape(2, 9) * 7 + 2  # HF (B, S)


AXES_FORMS = [(a, f) for a in SHAPES for f in ("scalar", "tokens", "hf") if f != "hf" or "b" in a]


@pytest.mark.parametrize("cfg", CFGS, ids=["half", "interleaved-partial"])
@pytest.mark.parametrize("axes, form", AXES_FORMS)
def test_axes_and_id_forms(cfg, axes, form):
    x = make(SHAPES[axes])
    pos = ids_for(axes, form)
    y = rt.apply(x, torch.as_tensor(pos), cfg, axes=axes, angle_dtype=F64)
    assert_f64(y, x, pos, cfg, axes)
    assert y.is_contiguous() and y.dtype == x.dtype


@pytest.mark.parametrize("axes", ["bshd", "bhsd", "sbhd"])
@pytest.mark.parametrize("offset", [0, 7, [3, 11]])
def test_offset(axes, offset):
    cfg = CFGS[0]
    x = make(SHAPES[axes])
    seq = x.shape[axes.index("s")]
    off = torch.tensor(offset) if isinstance(offset, list) else offset
    y = rt.apply(x, None, cfg, axes=axes, offset=off, angle_dtype=F64)
    assert_f64(y, x, positions_from_offset(np.asarray(offset), seq, batch=2), cfg, axes)


# -- non-contiguous inputs ---------------------------------------------------------------------------


def ignores_strides(x, positions, cfg, **kw):
    """Broken: reads x's storage as if x were contiguous (the 94%-wrong bug of the issue)."""
    flat = torch.as_strided(x, x.shape, torch.empty(x.shape).stride(), x.storage_offset())
    return rt.apply(flat, positions, cfg, **kw)


def views():
    base = make((2, 9, 3, 64), seed=1)
    yield "transposed", base.transpose(1, 2), "bhsd"  # a bshd buffer seen as bhsd
    packed = make((9, 2, 3 * 3 * 64), seed=2)  # (S, B, 3 * H * D) projection
    yield "qkv-slice", packed[..., 192:384].unflatten(-1, (3, 64)), "sbhd"
    wide = make((9, 4, 130), seed=3)
    yield "strided", wide[:, ::2, 1:65], "thd"  # non-unit head stride, odd storage offset


@pytest.mark.parametrize("impl, ok", [(rt.apply, True), (ignores_strides, False)], ids=["adapter", "broken"])
@pytest.mark.parametrize("cfg", CFGS, ids=["half", "interleaved-partial"])
def test_non_contiguous(impl: Callable, ok: bool, cfg):
    failures = 0
    for _name, x, axes in views():
        assert not x.is_contiguous()
        before = x.clone()
        pos = np.arange(9) + 3
        y = impl(x, torch.as_tensor(pos), cfg, axes=axes, angle_dtype=F64)
        assert torch.equal(x, before)
        try:
            assert_f64(y, x, pos, cfg, axes)
        except AssertionError:
            failures += 1
    assert (failures == 0) if ok else (failures == 3)


# -- GQA q and k --------


def qk_wrong_heads(q, k, positions, cfg, **kw):
    """Broken: indexes k with q's head index (reads q's first Hk heads for k)."""
    h = kw["axes"].index("h")
    return rt.apply_qk(q, q.narrow(h, 0, k.shape[h]), positions, cfg, **kw)


@pytest.mark.parametrize(
    "impl, ok", [(rt.apply_qk, True), (qk_wrong_heads, False)], ids=["adapter", "broken"]
)
@pytest.mark.parametrize("hq, hk", [(32, 8), (17, 1), (16, 4)])
@pytest.mark.parametrize("axes", ["bshd", "bhsd", "thd"])
def test_gqa(impl, ok, hq, hk, axes):
    cfg = CFGS[1]
    shape = {"bshd": (2, 5, None, 64), "bhsd": (2, None, 5, 64), "thd": (5, None, 64)}[axes]
    q = make(tuple(hq if n is None else n for n in shape), seed=4)
    k = make(tuple(hk if n is None else n for n in shape), seed=5)
    pos = np.arange(10).reshape(2, 5) * 3 if "b" in axes else np.arange(5) * 3
    qr, kr = impl(q, k, torch.as_tensor(pos), cfg, axes=axes, angle_dtype=F64)
    assert_f64(qr, q, pos, cfg, axes)
    if ok:
        assert_f64(kr, k, pos, cfg, axes)
    else:
        with pytest.raises(AssertionError):
            assert_f64(kr, k, pos, cfg, axes)


def test_gqa_one_table_build(monkeypatch):
    from rope_ref.backends import _torch_kernels as tk

    calls = []
    real = tk.angle_tables
    monkeypatch.setattr(tk, "angle_tables", lambda *a: calls.append(1) or real(*a))
    q, k = make((1, 4, 32, 64)), make((1, 4, 8, 64))
    rt.apply_qk(q, k, torch.arange(4), CFGS[0], axes="bshd")
    assert len(calls) == 1


# -- packed QKV --------


def qkv_rotates_v(qkv, positions, cfg, *, num_heads_q, num_heads_kv, **kw):
    """Broken: rotates every head of the packed tensor, V included."""
    return rt.apply(qkv, positions, cfg, **kw)


@pytest.mark.parametrize(
    "impl, ok", [(rt.apply_qkv, True), (qkv_rotates_v, False)], ids=["adapter", "broken"]
)
@pytest.mark.parametrize("hq, hk", [(32, 8), (17, 1), (16, 4)])
@pytest.mark.parametrize("inplace", [False, True])
def test_packed_qkv(impl, ok, hq, hk, inplace):
    cfg = CFGS[0]
    qkv = make((2, 5, hq + 2 * hk, 64), seed=6)
    orig = qkv.clone()
    pos = np.arange(10).reshape(2, 5) + 4
    out = impl(
        qkv,
        torch.as_tensor(pos),
        cfg,
        axes="bshd",
        num_heads_q=hq,
        num_heads_kv=hk,
        angle_dtype=F64,
        inplace=inplace,
    )
    if inplace:
        assert out is qkv
    else:
        assert torch.equal(qkv, orig)
    q, k, v = orig.split((hq, hk, hk), dim=2)
    assert_f64(out[:, :, :hq], q, pos, cfg, "bshd")
    assert_f64(out[:, :, hq : hq + hk], k, pos, cfg, "bshd")
    v_same = torch.equal(out[:, :, hq + hk :].view(torch.int64), v.view(torch.int64))
    assert v_same == ok


# -- varlen --------


def no_restart(x, positions, cfg, *, cu_seqlens, start_offsets=None, **kw):
    """Broken: positions run over the whole pack instead of restarting per sequence."""
    cu = torch.as_tensor(cu_seqlens)
    seq = torch.searchsorted(cu[1:], torch.arange(x.shape[0]), right=True)
    off = 0 if start_offsets is None else torch.as_tensor(start_offsets)[seq]
    return rt.apply(x, torch.arange(x.shape[0]) + off, cfg, **kw)


@pytest.mark.parametrize("impl, ok", [(rt.apply, True), (no_restart, False)], ids=["adapter", "broken"])
@pytest.mark.parametrize("with_offsets", [False, True])
def test_varlen(impl, ok, with_offsets):
    cfg = CFGS[1]
    cu = np.concatenate([[0], np.cumsum(LENGTHS)])
    starts = np.arange(len(LENGTHS)) * 37 if with_offsets else None
    x = make((int(cu[-1]), 2, 64), seed=7)
    y = impl(
        x,
        None,
        cfg,
        axes="thd",
        cu_seqlens=torch.as_tensor(cu),
        start_offsets=None if starts is None else torch.as_tensor(starts),
        angle_dtype=F64,
    )
    pos = positions_from_cu_seqlens(cu, starts)
    if ok:
        assert_f64(y, x, pos, cfg, "thd")
    else:
        with pytest.raises(AssertionError):
            assert_f64(y, x, pos, cfg, "thd")


# -- offset per sequence, not per token --------


def offset_per_token(x, positions, cfg, *, offset, axes, **kw):
    """Broken: indexes the per-batch offset by token instead of by batch row."""
    seq = x.shape[axes.index("s")]
    off = torch.as_tensor(offset)
    return rt.apply(x, off[torch.arange(seq) % off.shape[0]] + torch.arange(seq), cfg, axes=axes, **kw)


@pytest.mark.parametrize("impl, ok", [(rt.apply, True), (offset_per_token, False)], ids=["adapter", "broken"])
def test_offset_per_sequence(impl, ok):
    cfg = CFGS[0]
    x = make((3, 6, 2, 64), seed=8)
    offset = np.array([0, 40, 9])
    y = impl(x, None, cfg, axes="bshd", offset=torch.as_tensor(offset), angle_dtype=F64)
    pos = positions_from_offset(offset, 6)
    if ok:
        assert_f64(y, x, pos, cfg, "bshd")
    else:
        with pytest.raises(AssertionError):
            assert_f64(y, x, pos, cfg, "bshd")


# -- in place, slices of one packed buffer --------


def writes_past_slice(q, k, positions, cfg, *, axes, **kw):
    """Broken: rotates one head beyond q's slice of the packed buffer (into k's first head)."""
    wider = torch.as_strided(q, (q.shape[0], q.shape[1] + 1, q.shape[2]), q.stride(), q.storage_offset())
    rt.apply(wider, positions, cfg, axes=axes, **kw)
    rt.apply(k, positions, cfg, axes=axes, **kw)
    return q, k


@pytest.mark.parametrize(
    "impl, ok", [(rt.apply_qk, True), (writes_past_slice, False)], ids=["adapter", "broken"]
)
@pytest.mark.parametrize("dtype", [F64, torch.bfloat16])
@pytest.mark.parametrize("cfg", CFGS, ids=["half", "interleaved-partial"])
def test_inplace_aliasing_slices(impl, ok, dtype, cfg):
    buf = make((7, 4 + 2 * 2, 64), dtype, seed=9)  # thd, Hq 4, Hk 2
    orig = buf.clone()
    q, k = buf[:, :4], buf[:, 4:6]
    pos = np.arange(7) * 5
    qr, kr = impl(
        q,
        k,
        torch.as_tensor(pos),
        cfg,
        axes="thd",
        inplace=True,
        angle_dtype=F64 if dtype == F64 else torch.float32,
    )
    assert qr.data_ptr() == q.data_ptr() and kr.data_ptr() == k.data_ptr()
    v_same = torch.equal(buf[:, 6:], orig[:, 6:])
    assert v_same
    try:
        for part, src in ((buf[:, :4], orig[:, :4]), (buf[:, 4:6], orig[:, 4:6])):
            if dtype == F64:
                assert_f64(part, src, pos, cfg, "thd")
            else:
                assert_rope_close(part, src, pos, cfg, axes="thd")
        correct = True
    except AssertionError:
        correct = False
    assert correct == ok


# -- inverse and round trip, lower precisions --------


@pytest.mark.parametrize("cfg", CFGS, ids=["half", "interleaved-partial"])
def test_inverse_and_round_trip(cfg):
    x = make((2, 9, 3, 64))
    pos = np.arange(18).reshape(2, 9) * 11
    y = rt.apply(x, torch.as_tensor(pos), cfg, axes="bshd", inverse=True, angle_dtype=F64)
    assert_f64(y, x, pos, cfg, "bshd", inverse=True)
    back = rt.apply(
        rt.apply(x, torch.as_tensor(pos), cfg, axes="bshd", angle_dtype=F64),
        torch.as_tensor(pos),
        cfg,
        axes="bshd",
        inverse=True,
        angle_dtype=F64,
    )
    assert float((back - x).abs().max()) < 1e-12


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("cfg", CFGS, ids=["half", "interleaved-partial"])
def test_lower_precisions(dtype, inplace, cfg):
    q, k = make((2, 9, 8, 64), dtype, seed=10), make((2, 9, 2, 64), dtype, seed=11)
    q0, k0 = q.clone(), k.clone()
    pos = np.arange(18).reshape(2, 9) * 13
    qr, kr = rt.apply_qk(q, k, torch.as_tensor(pos), cfg, axes="bshd", inplace=inplace)
    assert qr.dtype == dtype
    assert_rope_close(qr, q0, pos, cfg, axes="bshd")
    assert_rope_close(kr, k0, pos, cfg, axes="bshd")
    inv = rt.apply(q0, torch.as_tensor(pos), cfg, axes="bshd", inverse=True)
    assert_rope_close(inv, q0, -pos, cfg, axes="bshd")


# -- autograd and torch.compile --------


@pytest.mark.parametrize("cfg", CFGS, ids=["half", "interleaved-partial"])
@pytest.mark.slow
def test_gradcheck(cfg):
    small = rope_ref.RopeConfig(8, layout=cfg.layout, rotary_dim=8 if cfg.layout == "half" else 6)
    kw = dict(angle_dtype=F64)
    q = make((2, 3, 4, 8)).requires_grad_()
    k = make((2, 3, 2, 8), seed=1).requires_grad_()
    ids = torch.tensor([[0, 1, 2], [5, 6, 9]])
    assert torch.autograd.gradcheck(lambda a: rt.apply(a, ids, small, axes="bshd", inverse=True, **kw), (q,))
    assert torch.autograd.gradcheck(lambda a: rt.apply(a, None, small, axes="bshd", offset=3, **kw), (q,))
    assert torch.autograd.gradcheck(lambda a, b: rt.apply_qk(a, b, ids, small, axes="bshd", **kw), (q, k))
    qkv = make((2, 3, 8, 8), seed=2).requires_grad_()
    assert torch.autograd.gradcheck(
        lambda a: rt.apply_qkv(a, ids, small, axes="bshd", num_heads_q=4, num_heads_kv=2, **kw), (qkv,)
    )
    assert torch.autograd.gradcheck(
        lambda a: rt.apply_qkv(
            a.clone(), ids, small, axes="bshd", num_heads_q=4, num_heads_kv=2, inplace=True, **kw
        ),
        (qkv,),
    )
    t = make((6, 2, 8), seed=3).requires_grad_()
    cu = torch.tensor([0, 1, 4, 6])
    for inverse in (False, True):
        assert torch.autograd.gradcheck(
            lambda a, inverse=inverse: rt.apply(
                a,
                None,
                small,
                axes="thd",
                cu_seqlens=cu,
                start_offsets=torch.tensor([2, 0, 7]),
                inverse=inverse,
                **kw,
            ),
            (t,),
        )
    # q/k with an offset per batch row, on transposed (bhsd) views
    qt, kt = q.detach().transpose(1, 2).requires_grad_(), k.detach().transpose(1, 2).requires_grad_()
    off = torch.tensor([4, 0])
    assert torch.autograd.gradcheck(
        lambda a, b: rt.apply_qk(a, b, None, small, axes="bhsd", offset=off, inverse=True, **kw), (qt, kt)
    )


@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("cfg", CFGS, ids=["half", "interleaved-partial"])
def test_qkv_gradient(cfg, inplace):
    """d out / d qkv: the inverse rotation on the q and k heads, the identity (bit for bit) on V."""
    qkv = make((2, 5, 4 + 2 * 2, 64), seed=15).requires_grad_()
    g = make((2, 5, 8, 64), seed=16)
    ids = torch.arange(10).reshape(2, 5) * 9
    kw = dict(axes="bshd", num_heads_q=4, num_heads_kv=2, angle_dtype=F64)
    src = qkv.clone() if inplace else qkv
    out = rt.apply_qkv(src, ids, cfg, inplace=inplace, **kw)
    (grad,) = torch.autograd.grad(out, qkv, g)
    assert torch.equal(grad[:, :, 6:], g[:, :, 6:])
    back = rt.apply(g[:, :, :6], ids, cfg, axes="bshd", inverse=True, angle_dtype=F64)
    torch.testing.assert_close(grad[:, :, :6], back, rtol=0, atol=1e-13)


@pytest.mark.slow
def test_compile_fullgraph():
    cfg = CFGS[0]

    def step(q, k, qkv, t, cu, off):
        qr, kr = rt.apply_qk(q, k, None, cfg, axes="bshd", offset=off)
        packed = rt.apply_qkv(qkv, None, cfg, axes="bshd", offset=3, num_heads_q=4, num_heads_kv=2)
        var = rt.apply(t, None, cfg, axes="thd", cu_seqlens=cu, inverse=True)
        return qr, kr, packed, var

    compiled = torch.compile(step, fullgraph=True)
    q, k, qkv = (
        make((2, 5, 4, 64), torch.float32),
        make((2, 5, 2, 64), torch.float32, 1),
        make((2, 5, 8, 64), torch.float32, 2),
    )
    t, cu, off = make((9, 2, 64), torch.float32, 3), torch.tensor([0, 4, 9]), torch.tensor([1, 6])
    for got, want in zip(compiled(q, k, qkv, t, cu, off), step(q, k, qkv, t, cu, off), strict=True):
        torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


# -- bad input --------


@pytest.mark.parametrize(
    "call, name",
    [
        (
            lambda x, t: rt.apply(t, None, CFGS[0], axes="thd", cu_seqlens=torch.tensor([0, 5, 3, 9])),
            "cu_seqlens",
        ),
        (
            lambda x, t: rt.apply(t, None, CFGS[0], axes="thd", cu_seqlens=torch.tensor([1, 5, 9])),
            "cu_seqlens",
        ),
        (
            lambda x, t: rt.apply(t, None, CFGS[0], axes="thd", cu_seqlens=torch.tensor([0, 5, 8])),
            "cu_seqlens",
        ),
        (
            lambda x, t: rt.apply(t, None, CFGS[0], axes="thd", cu_seqlens=torch.tensor([0.0, 9.0])),
            "cu_seqlens",
        ),
        (lambda x, t: rt.apply_qk(x, x[:, :, :3], 0, CFGS[0], axes="bshd"), "heads"),
        (lambda x, t: rt.apply(x, 0, CFGS[0], axes="thd"), "axes"),
        (lambda x, t: rt.apply(x, None, CFGS[0], axes="bshd", offset=1.5), "offset"),
        (lambda x, t: rt.apply(x, None, CFGS[0], axes="bshd", offset=-1), "offset"),
        (lambda x, t: rt.apply(x, None, CFGS[0], axes="bshd", offset=torch.tensor([1, -2])), "offset"),
        (lambda x, t: rt.apply(x, None, CFGS[0], axes="bshd", offset=torch.tensor([1.0, 2.0])), "offset"),
        (lambda x, t: rt.apply_qkv(x, 0, CFGS[0], axes="bshd", num_heads_q=2, num_heads_kv=2), "num_heads"),
        (
            lambda x, t: rt.apply_qkv(x, 0, CFGS[0], axes="bshd", num_heads_q=3, num_heads_kv=0),
            "num_heads_kv",
        ),
        (
            lambda x, t: rt.apply_qkv(
                torch.cat((x, x[:, :, :3]), 2), 0, CFGS[0], axes="bshd", num_heads_q=3, num_heads_kv=2
            ),
            "num_heads_kv",
        ),
        (lambda x, t: rt.apply_qk(x, x, 0, CFGS[0], axes="thd"), "axes"),
        (lambda x, t: rt.apply_qkv(t, 0, CFGS[0], axes="bshd", num_heads_q=2, num_heads_kv=0), "axes"),
        (lambda x, t: rt.apply_qk(x, x[:, :, :3], 0, CFGS[0], axes="bshd"), "k heads"),
        (
            lambda x, t: rt.apply(t, None, CFGS[0], axes="thd", cu_seqlens=torch.tensor([0, 5, 9, 9, 4])),
            "cu_seqlens",
        ),
        (
            lambda x, t: rt.apply(
                t, None, CFGS[0], axes="thd", cu_seqlens=[0, 4, 9], start_offsets=[1, 2, 3]
            ),
            "start_offsets",
        ),
        (lambda x, t: rt.apply(x, None, CFGS[0], axes="bshd", offset=True), "offset"),
        (lambda x, t: rt.apply(x, None, CFGS[0], axes="bshd", offset=torch.tensor([1, 2, 3])), "offset"),
        (lambda x, t: rt.apply(x, None, CFGS[0], axes="bshd", cu_seqlens=torch.tensor([0, 5])), "cu_seqlens"),
        (
            lambda x, t: rt.apply(
                t,
                None,
                CFGS[0],
                axes="thd",
                cu_seqlens=torch.tensor([0, 9]),
                start_offsets=torch.tensor([-1]),
            ),
            "start_offsets",
        ),
    ],
)
def test_bad_input(call, name):
    x, t = make((2, 5, 4, 64)), make((9, 2, 64))
    with pytest.raises(ValueError, match=name):
        call(x, t)


# -- the blocked eager kernels over several blocks ----------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("cfg", CFGS, ids=["half", "interleaved-partial"])
@pytest.mark.parametrize("inplace", [False, True])
def test_blocked_kernels_match_original(dtype, cfg, inplace):
    """Several 4 MiB blocks, a transposed view: bit for bit the original kernel (``_torch_core``'s eager
    rotation, with its mixed-dtype passes for float16/bfloat16), for the new and the original call."""
    from rope_ref.backends import _torch_core as core

    x = make((1, 8, 2100, 64), dtype, seed=12).transpose(1, 2)  # bshd view of a bhsd buffer
    pos = torch.arange(2100) * 3
    inv, factor = core.freq_table(cfg, None, torch.float32, x.device)
    cos, sin = core.expand_tables(*core.angle_tables(pos[:, None], inv, factor), x.ndim)
    compute = core.resolve_compute_dtype(None, dtype)
    want = core._rotate_eager(x, cos, sin, cfg.layout, cfg.rotary_dim, compute)
    assert torch.equal(rt.apply(x, pos[:, None], cfg), want)  # the original call
    work = x.clone() if inplace else x
    got = rt.apply(work, pos, cfg, axes="bshd", inplace=inplace)
    assert torch.equal(got, want)
    if inplace:
        assert got is work


def test_module_and_rotate_share_the_blocked_kernel():
    """``RotaryEmbedding`` and ``rotate`` give the blocked kernel's bits, in bf16 (float32 arithmetic)."""
    cfg = CFGS[0]
    x = make((2, 300, 4, 64), torch.bfloat16, seed=13)
    pos = torch.arange(300)[:, None]
    want = rt.apply(x, pos, cfg)
    assert torch.equal(rt.RotaryEmbedding(cfg)(x, pos), want)
    cos, sin = rt.RotaryEmbedding(cfg).tables(pos)
    assert torch.equal(rt.rotate(x, cos, sin, layout="half"), want)


@pytest.mark.parametrize("dtype", [F64, torch.bfloat16])
def test_neighbouring_q_and_k_rotate_as_one_view(dtype, monkeypatch):
    """q and k of one packed buffer (and apply_qkv's output) go through the kernel as one view."""
    from rope_ref.backends import _torch_kernels as tk

    seen = []
    real = tk.rotate_cpu  # the CPU kernel call of apply_qk/apply_qkv (rotate_blocked for kernel="torch")
    monkeypatch.setattr(tk, "rotate_cpu", lambda x, out, *a: seen.append(x.shape[2]) or real(x, out, *a))
    cfg = CFGS[1]
    qkv = make((2, 5, 8 + 2 * 2, 64), dtype, seed=14)
    pos = torch.arange(10).reshape(2, 5)
    q, k = qkv[:, :, :8].clone(), qkv[:, :, 8:10].clone()  # separate tensors: one pass each
    qr, kr = rt.apply_qk(q, k, pos, cfg, axes="bshd")
    assert seen == [8, 2]
    want = torch.cat((qr, kr, qkv[:, :, 10:]), dim=2)
    kw = dict(axes="bshd", num_heads_q=8, num_heads_kv=2)
    got = rt.apply_qkv(qkv, pos, cfg, **kw)
    assert torch.equal(got, want) and seen == [8, 2, 10]
    work = qkv.clone()
    assert rt.apply_qkv(work, pos, cfg, inplace=True, **kw) is work
    assert torch.equal(work, want) and seen == [8, 2, 10, 10]
    native = rt.apply_qkv(qkv, pos, cfg, autograd="native", **kw)  # the reference path
    assert seen == [8, 2, 10, 10]
    torch.testing.assert_close(native, want)


# -- q and k in one Triton launch (Triton's interpreter on CPU) --------


@pytest.mark.slow
def test_triton_qk_one_launch():
    import importlib.util
    import os
    import subprocess
    import sys
    from pathlib import Path

    if importlib.util.find_spec("triton") is None:
        pytest.skip("triton is not installed")
    script = Path(__file__).with_name("_torch_qk_triton_cases.py")
    env = dict(os.environ, TRITON_INTERPRET="1")
    done = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    assert done.stdout.strip().startswith("ok")
