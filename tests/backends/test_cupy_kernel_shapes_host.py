"""The CuPy kernel-shape kernels (``rope_qkv_apply_*``, issue 16), *executed on the CPU*, against the oracle.

As in ``tests/backends/test_cuda_host_emulation.py``: the shipped ``backends/rope_kernels.cu`` is compiled
by g++ with ``tests/cuda_host/cuda_host_shim.h``, here through ``tests/cuda_host/kernel_shapes_driver.cpp``,
and driven through the real host code of the backend (:func:`rope_ref.backends.cupy.apply_axes`,
``apply_qk``, ``apply_qkv`` and the ``CupyBackend`` methods) with NumPy standing in for ``cupy``. Every
kernel argument is checked against the parameter list parsed from the .cu source; arrays the backend
allocates are NaN-filled and guarded on both sides, so an element never written or a write out of
bounds fails. Views are cut from buffers whose other entries hold NaN: a kernel that read past a view
would turn its output non-finite, and one that wrote past it would change them.

Families: every axis convention (bshd, bhsd, sbhd, thd), transposed views, slices of a packed buffer,
non-unit (and negative, and channel) strides, GQA q/k pairs in one launch (Hq/Hk 32/8, 17/1, 16/4), packed
qkv (V bit for bit), varlen ``cu_seqlens`` with and without start offsets, scalar and per-batch
offsets, in place (q and k aliasing slices of one packed buffer), inverse and round trip; both layouts,
partial rotary, the three I/O dtypes.

Reference: :func:`rope_ref.apply` with ``axes=`` / ``inverse=`` on ids from :mod:`rope_ref.positions`
(float64). Tolerance per pair, the conformance model (``docs/tolerance.md``) for float32 angles and
compute: ``A r (k_i |m theta_i| u_a + ROUND_SLACK u_r) + floor`` with ``k_i = PHASE_SLACK + 2 |ln theta_i|``;
pass-through channels exact.
"""

from __future__ import annotations

import ctypes
import importlib.util
import math
import re
import types

import numpy as np
import pytest
from cupy_host import SOURCE, bits, check_arg, compile_driver, emulated_cupy, host_launch, to_io, values
from rope_ref.backends import _cupy_plan as plan_mod
from rope_ref.conformance.tolerance import PHASE_SLACK, ROUND_SLACK, UNIT_ROUNDOFF

import rope_ref
from rope_ref import RopeConfig
from rope_ref.axes import positions_for_axes
from rope_ref.frequencies import resolve_seq_len
from rope_ref.positions import positions_from_cu_seqlens, positions_from_offset
from rope_ref.scaling import DynamicNTK, YaRN

DTYPES = ("float32", "float16", "bfloat16")
_STORAGE = {"float32": np.float32, "float16": np.float16, "bfloat16": np.uint16}

QKV_KERNELS = plan_mod.QKV_KERNEL_FOR_DTYPE
_KERNEL_IO = {k: io for table in (plan_mod.KERNEL_FOR_DTYPE, QKV_KERNELS) for io, k in table.items()}
LENGTHS = (400, 142, 169, 16, 25, 518, 156, 24, 504, 90, 4, 1, 2100)
GQA = ((32, 8), (17, 1), (16, 4))

# -- the compiled kernels (once per session) ---------------------------------------------------------


@pytest.fixture(scope="session")
def lib(tmp_path_factory) -> ctypes.CDLL:
    launchers = ("rope_host_launch", "rope_host_qkv_launch")
    h = compile_driver(tmp_path_factory, "kernel_shapes_driver.cpp", launchers)
    h.rope_host_sizeof_qkv_shape.restype = ctypes.c_ulonglong
    return h


def _signature(macro_name: str) -> list[str]:
    """A kernel macro's C parameter list, parsed from rope_kernels.cu."""
    src = SOURCE.read_text()
    params = re.search(rf'extern "C" __global__ void {macro_name}\((.*?)\)\s*\{{', src, flags=re.S).group(1)
    return [" ".join(p.replace("\\", " ").split()) for p in params.split(",")]


def _check_arg(kernel: str, decl: str, value) -> None:
    pointers = {"double": np.float64, "i64": np.int64}
    check_arg(f"{kernel} parameter {decl!r}", decl, value, pointers, _STORAGE[_KERNEL_IO[kernel]])


class Control:
    def __init__(self) -> None:
        self.reverse = False
        self.grid = None  # replaces the planned grid (a smaller one exercises the grid-stride loop)
        self.log: list[tuple[str, dict]] = []  # (kernel, RopeQkvShape fields or {}) per launch


def _launcher(h: ctypes.CDLL, name: str, control: Control):
    qkv = name in QKV_KERNELS.values()
    sig = _signature("QKVNAME" if qkv else "NAME")

    def launch(grid, block, args) -> None:
        assert len(args) == len(sig), f"{name}: {len(args)} arguments for {len(sig)} parameters"
        for decl, value in zip(sig, args, strict=True):
            _check_arg(name, decl, value)
        shape = next(v for v in args if isinstance(v, np.void))
        control.log.append((name, {f: int(shape[f]) for f in shape.dtype.names} if qkv else {}))
        grid = tuple(int(g) for g in (control.grid or grid))
        assert len(grid) == len(block) == 3 and math.prod(block) <= 1024 and all(0 < g < 2**31 for g in grid)
        entry = h.rope_host_qkv_launch if qkv else h.rope_host_launch
        host_launch(entry, name, grid, block, args, control.reverse)

    return launch


@pytest.fixture(params=["planned", "whole-heads"])
def host(lib, monkeypatch, request):
    """``rope_ref.backends.cupy`` with NumPy as cupy and the g++-compiled kernels as its device code.

    Run twice: as planned (these small inputs have so few tokens that the planner splits the heads of a
    token over the grid), and with the planner's parallelism threshold at 0, so that every thread loops
    over all heads of q, k and v of its token (the unrolled loop of the kernel).
    """
    import rope_ref.backends._cupy_kernel_shapes as extras
    import rope_ref.backends.cupy as cb

    if request.param == "whole-heads":
        monkeypatch.setattr(plan_mod, "MIN_PARALLEL_THREADS", 0)
    control = Control()
    caches = (cb._module, cb._freq_table_cached, extras._table_dummy_on)
    with emulated_cupy(monkeypatch, lambda name: _launcher(lib, name, control), caches):
        yield types.SimpleNamespace(cb=cb, control=control, mode=request.param)


# -- helpers -----------------------------------------------------------------------------------------


def pair_index(cfg: RopeConfig) -> tuple[np.ndarray, np.ndarray]:
    n = cfg.rotary_dim // 2
    i = np.arange(n)
    return (i, i + n) if cfg.layout == "half" else (2 * i, 2 * i + 1)


def bound(x: np.ndarray, m: np.ndarray, cfg: RopeConfig, io: str, seq_len) -> np.ndarray:
    """Per-element bound of the conformance model (float32 angles and compute); 0 on pass-through channels."""
    theta = rope_ref.inv_freq(cfg, seq_len)
    amp = abs(rope_ref.attention_factor(cfg, seq_len))
    a, b = pair_index(cfg)
    radius = np.hypot(x[..., a], x[..., b])
    u_a = UNIT_ROUNDOFF["float32"]
    u_r = UNIT_ROUNDOFF[io] + 2 * u_a
    k = PHASE_SLACK + 2.0 * np.abs(np.log(theta))
    floor = 2.0**-24 if io == "float16" else 4 * 2.0**-126
    pair = amp * radius * (k * np.abs(m[..., None] * theta) * u_a + ROUND_SLACK * u_r) + floor
    tol = np.zeros(x.shape)
    tol[..., a], tol[..., b] = pair, pair
    return tol


def judge(got, x: np.ndarray, ids, cfg: RopeConfig, io: str, *, axes: str, inverse=False, seq_len=None):
    """``got`` (float64 values) against the oracle on ``x`` (the quantised input): within the bound on
    rotated channels, equal on pass-through channels, finite everywhere. Returns the worst err/tol."""
    want = rope_ref.apply(x, ids, cfg, axes=axes, inverse=inverse, seq_len=seq_len)
    m = np.broadcast_to(positions_for_axes(ids, axes, x.shape), x.shape[:-1])
    tol = bound(x, m, cfg, io, resolve_seq_len(m, cfg, seq_len))
    assert got.shape == want.shape
    assert np.all(np.isfinite(got)), "non-finite output (a read past the view?)"
    rd = cfg.rotary_dim
    assert np.array_equal(got[..., rd:], x[..., rd:]), "pass-through channels changed"
    ratio = np.abs(got - want)[..., :rd] / tol[..., :rd]
    worst = float(ratio.max()) if ratio.size else 0.0
    assert worst <= 1.0, f"worst err/tol {worst:.3g} at {np.unravel_index(int(ratio.argmax()), ratio.shape)}"
    return worst


def nan_buffer(cb, shape, dtype: str, view, x: np.ndarray):
    """A buffer of ``shape`` holding NaN except where ``view(buffer)`` lies, which holds ``x``.

    Returns ``(buffer, handed view, mask of the view's entries)``; ``view`` works on NumPy arrays and
    on :class:`Bf16Array` alike (slicing and ``transpose``)."""
    raw = np.full(shape, np.nan, dtype=np.float32)
    view(raw)[...] = x
    buf = to_io(cb, raw, dtype)
    mask = np.zeros(shape, dtype=bool)
    view(mask)[...] = True
    return buf, view(buf), mask


def qkv_launches(control: Control) -> list[dict]:
    return [shape for name, shape in control.log if name in QKV_KERNELS.values()]


def shape_for(axes: str, b: int, s: int, h: int, d: int) -> tuple[int, ...]:
    return tuple({"b": b, "s": s, "t": s, "h": h, "d": d}[c] for c in axes)


def ids_for(rng, axes: str, b: int, s: int, top: int = 5000) -> np.ndarray:
    """HF-style (B, S) ids for axes with a batch axis, (T,) per-token ids otherwise; position 0 included."""
    ids = rng.integers(0, top, size=(b, s) if "b" in axes else (s,))
    ids.reshape(-1)[0] = 0
    return ids


# -- the kernel's struct and launch arguments ----------------------------------------------------------


def test_qkv_shape_struct_matches_the_host_packing(lib) -> None:
    text = SOURCE.read_text()
    consts = {n: int(v) for n, v in re.findall(r"#define (ROPE_QKV_\w+) (\d+)", text)}
    assert consts["ROPE_QKV_PARTS"] == plan_mod.QKV_PARTS and consts["ROPE_QKV_AXES"] == plan_mod.QKV_AXES
    modes = {n: int(v) for n, v in re.findall(r"#define ROPE_POS_(\w+) (\d+)", text)}
    assert modes == {"IDS": plan_mod.POS_IDS, "OFFSET": plan_mod.POS_OFFSET, "VARLEN": plan_mod.POS_VARLEN}
    body = re.search(r"struct RopeQkvShape \{(.*?)\};", text, flags=re.S).group(1)
    body = re.sub(r"//[^\n]*", "", body)
    fields: list[str] = []
    for decl in filter(None, (d.strip() for d in body.split(";"))):
        assert decl.startswith("i64 "), decl  # every field int64: no padding
        for name in (n.strip() for n in decl[4:].split(",")):
            arr = re.fullmatch(r"(\w+)\[(.+)\]", name)
            if arr:
                count = eval(arr.group(2), {}, consts)  # e.g. ROPE_QKV_PARTS * ROPE_QKV_AXES
                fields += [f"{arr.group(1)}{i}" for i in range(count)]
            else:
                fields.append(name)
    assert tuple(fields) == plan_mod.QKV_SHAPE_FIELDS
    assert int(lib.rope_host_sizeof_qkv_shape()) == plan_mod.qkv_shape_struct_dtype().itemsize
    assert plan_mod.qkv_shape_struct_dtype().itemsize == 8 * len(fields)


# -- every axis convention, both layouts, partial rotary ------------------------------------------------


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("axes", ["bshd", "bhsd", "sbhd", "thd"])
@pytest.mark.parametrize("rotary_dim", [32, 20])
def test_axis_conventions_match_the_oracle(host, axes, layout, rotary_dim) -> None:
    cb = host.cb
    cfg = RopeConfig(32, layout=layout, rotary_dim=rotary_dim)
    rng = np.random.default_rng(sum(map(ord, axes + layout)) + rotary_dim)
    b, s = (1, 23) if axes == "thd" else (3, 11)
    x = rng.standard_normal(shape_for(axes, b, s, 3, 32)).astype(np.float32)
    ids = ids_for(rng, axes, b, s)
    y = cb.apply_axes(x, cfg, axes=axes, positions=ids)
    judge(values(y), x.astype(np.float64), ids, cfg, "float32", axes=axes)
    assert np.array_equal(bits(y)[..., rotary_dim:], bits(x)[..., rotary_dim:])
    zero = np.broadcast_to(positions_for_axes(ids, axes, x.shape), x.shape[:-1]) == 0
    assert np.array_equal(bits(y)[zero], bits(x)[zero])  # position 0: the identity, bit for bit
    assert len(qkv_launches(host.control)) == 1


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axes", ["bshd", "sbhd", "thd"])
def test_io_dtypes(host, axes, dtype) -> None:
    cb = host.cb
    cfg = RopeConfig(16, layout="interleaved", rotary_dim=12)
    rng = np.random.default_rng(3)
    b, s = (1, 19) if axes == "thd" else (2, 9)
    xd = to_io(cb, rng.standard_normal(shape_for(axes, b, s, 4, 16)).astype(np.float32), dtype)
    ids = ids_for(rng, axes, b, s, 30000)
    y = cb.apply_axes(xd, cfg, axes=axes, positions=ids)
    judge(values(y), values(xd), ids, cfg, dtype, axes=axes)
    assert np.array_equal(bits(y)[..., 12:], bits(xd)[..., 12:])
    assert qkv_launches(host.control) and host.control.log[-1][0] == QKV_KERNELS[dtype]


def test_position_forms_scalar_per_token_full_rank_and_per_head(host) -> None:
    cb = host.cb
    cfg = RopeConfig(16, layout="half")
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 5, 3, 16)).astype(np.float32)
    xf = x.astype(np.float64)
    for ids in (np.int64(77), rng.integers(0, 900, size=5), rng.integers(0, 900, size=(2, 5, 1)),
                rng.integers(0, 900, size=(1, 5)), rng.standard_normal((2, 5)) * 300):  # fmt: skip
        host.control.log.clear()
        judge(values(cb.apply_axes(x, cfg, axes="bshd", positions=ids)), xf, ids, cfg, "float32", axes="bshd")
        assert len(qkv_launches(host.control)) == 1
    # Full-rank ids that vary over the heads cannot share an angle across heads: the broadcasting kernel.
    per_head = rng.integers(0, 900, size=(2, 5, 3))
    host.control.log.clear()
    y = cb.apply_axes(x, cfg, axes="bshd", positions=per_head)
    judge(values(y), xf, per_head, cfg, "float32", axes="bshd")
    assert host.control.log[-1][0] == "rope_apply_f32"
    inv = cb.apply_axes(x, cfg, axes="bshd", positions=per_head, inverse=True)
    judge(values(inv), xf, per_head, cfg, "float32", axes="bshd", inverse=True)
    with pytest.raises(ValueError, match="vary over the heads"):
        cb.apply_qk(x, x[:, :, :1], cfg, axes="bshd", positions=per_head)


# -- views: transposed, sliced out of a packed buffer, strided -------------------------------------------


def _views():
    """name -> (axes, buffer shape, view of a buffer); x is (2, 7, 3, 16) in bshd (B, S, H, D)."""
    return {
        # stored bhsd, handed as a bshd view (TransformerEngine's transposed inputs)
        "transposed-bhsd-storage": ("bshd", (2, 3, 7, 16), lambda a: a.transpose((0, 2, 1, 3))),
        # stored sbhd, handed as bshd
        "transposed-sbhd-storage": ("bshd", (7, 2, 3, 16), lambda a: a.transpose((1, 0, 2, 3))),
        # q sliced out of a packed (B, S, 3 + 2 * 2, D) projection
        "slice-of-packed": ("bshd", (2, 7, 7, 16), lambda a: a[:, :, 1:4, :]),
        # every third token (non-unit stride along s)
        "strided-tokens": ("bshd", (2, 21, 3, 16), lambda a: a[:, ::3]),
        # reversed tokens (a negative stride)
        "reversed-tokens": ("bshd", (2, 7, 3, 16), lambda a: a[:, ::-1]),
        # every other channel (a channel stride of 2) of a wider buffer
        "strided-channels": ("bshd", (2, 7, 3, 32), lambda a: a[..., ::2]),
        # bhsd view of a bshd buffer, sliced on heads
        "bhsd-view-sliced": ("bhsd", (2, 7, 5, 16), lambda a: a.transpose((0, 2, 1, 3))[:, 1:4]),
        # thd tokens sliced out of a (T, 2 * H, D) buffer with a step on tokens
        "thd-sliced": ("thd", (14, 6, 16), lambda a: a[::2, 3:6]),
    }


@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize("name", sorted(_views()))
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_views_are_read_and_written_in_place_of_copies(host, name, dtype, inplace) -> None:
    cb = host.cb
    axes, buf_shape, view = _views()[name]
    cfg = RopeConfig(16, layout="half", rotary_dim=12)
    rng = np.random.default_rng(sum(map(ord, name)))
    probe = view(np.empty(buf_shape))
    x = rng.standard_normal(probe.shape).astype(np.float32)
    b, s = (1, probe.shape[0]) if axes == "thd" else (2, 7)
    ids = ids_for(rng, axes, b, s)
    buf, xv, mask = nan_buffer(cb, buf_shape, dtype, view, x)
    before = bits(buf).copy()
    xq = values(xv)
    y = cb.apply_axes(xv, cfg, axes=axes, positions=ids, inplace=inplace)
    judge(values(y), xq, ids, cfg, dtype, axes=axes)
    if inplace:
        assert y is xv
        assert np.array_equal(bits(buf)[~mask], before[~mask]), "wrote outside the view"
        assert np.array_equal(bits(view(buf))[..., 12:], bits(xv)[..., 12:])
    else:
        assert np.array_equal(bits(buf), before), "changed the input"
    assert len(qkv_launches(host.control)) == 1  # no copies, no second kernel


# -- q and k in one launch (GQA / MQA) -----------------------------------------------------------------


@pytest.mark.parametrize("heads", GQA, ids=lambda hk: f"{hk[0]}-{hk[1]}")
@pytest.mark.parametrize("axes", ["bshd", "bhsd", "thd"])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_gqa_q_and_k_in_one_launch(host, heads, axes, layout) -> None:
    cb = host.cb
    hq, hk = heads
    cfg = RopeConfig(16, layout=layout, rotary_dim=16 if layout == "half" else 10)
    rng = np.random.default_rng(hq * 100 + hk)
    b, s = (1, 13) if axes == "thd" else (2, 5)
    q = rng.standard_normal(shape_for(axes, b, s, hq, 16)).astype(np.float32)
    k = rng.standard_normal(shape_for(axes, b, s, hk, 16)).astype(np.float32)
    ids = ids_for(rng, axes, b, s)
    qo, ko = cb.apply_qk(q, k, cfg, axes=axes, positions=ids)
    judge(values(qo), q.astype(np.float64), ids, cfg, "float32", axes=axes)
    judge(values(ko), k.astype(np.float64), ids, cfg, "float32", axes=axes)
    launches = qkv_launches(host.control)
    assert len(launches) == 1  # one launch for both
    assert (launches[0]["heads0"], launches[0]["heads1"], launches[0]["heads2"]) == (hq, hk, 0)
    # k's heads take k's rows, not q's: rotating k alone gives the same bits.
    assert np.array_equal(bits(ko), bits(cb.apply_axes(k, cfg, axes=axes, positions=ids)))
    assert np.array_equal(bits(qo), bits(cb.apply_axes(q, cfg, axes=axes, positions=ids)))


@pytest.mark.parametrize("dtype", DTYPES)
def test_qk_inplace_aliasing_slices_of_one_packed_buffer(host, dtype) -> None:
    cb = host.cb
    hq, hk = 16, 4
    cfg = RopeConfig(16, layout="interleaved", rotary_dim=8)
    rng = np.random.default_rng(5)
    packed = rng.standard_normal((2, 6, hq + 2 * hk, 16)).astype(np.float32)
    buf = to_io(cb, packed, dtype)
    before = bits(buf).copy()
    qv, kv = buf[:, :, :hq], buf[:, :, hq : hq + hk]
    xq, xk = values(qv), values(kv)
    ids = ids_for(rng, "bshd", 2, 6)
    for reverse in (False, True):
        host.control.reverse = reverse
        store = to_io(cb, packed, dtype)
        qr, kr = cb.apply_qk(store[:, :, :hq], store[:, :, hq : hq + hk], cfg, axes="bshd", positions=ids,
                             inplace=True)  # fmt: skip
        judge(values(qr), xq, ids, cfg, dtype, axes="bshd")
        judge(values(kr), xk, ids, cfg, dtype, axes="bshd")
        judge(values(store)[:, :, :hq], xq, ids, cfg, dtype, axes="bshd")  # written through the views
        assert np.array_equal(bits(store)[:, :, hq + hk :], before[:, :, hq + hk :])  # V untouched
        assert np.array_equal(bits(store)[..., 8:], before[..., 8:])  # pass-through never written
    host.control.reverse = False
    out_of_place = cb.apply_qk(qv, kv, cfg, axes="bshd", positions=ids)
    assert np.array_equal(bits(buf), before)
    assert np.array_equal(bits(out_of_place[1]), bits(kr))


def test_qk_inplace_refuses_overlapping_q_and_k(host) -> None:
    cb = host.cb
    cfg = RopeConfig(16, layout="half")
    store = to_io(cb, np.random.default_rng(6).standard_normal((2, 6, 6, 16)).astype(np.float32), "float32")
    before, launched = bits(store).copy(), len(qkv_launches(host.control))
    for q, k in ((store, store), (store[:, :, :4], store[:, :, 2:4])):
        with pytest.raises(ValueError, match="q and k must not share memory"):
            cb.apply_qk(q, k, cfg, axes="bshd", offset=0, inplace=True)
    assert np.array_equal(bits(store), before)
    assert len(qkv_launches(host.control)) == launched  # refused before any launch
    cb.apply_qk(store[:, :, :4], store[:, :, 4:], cfg, axes="bshd", offset=0, inplace=True)  # disjoint
    assert len(qkv_launches(host.control)) == launched + 1


# -- packed qkv: q and k rotated, V bit for bit -----------------------------------------------------------


def _special_v(v: np.ndarray) -> None:
    """Write values a sloppy copy could change (signed zero, infinities, NaN) into the view ``v``."""
    v.flat[:4] = [-0.0, np.inf, -np.inf, np.nan]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.parametrize(("axes", "heads"), [("bshd", (8, 2)), ("sbhd", (17, 1)), ("thd", (4, 4))])
def test_packed_qkv_leaves_v_bit_for_bit(host, axes, heads, inplace, dtype) -> None:
    cb = host.cb
    hq, hk = heads
    cfg = RopeConfig(16, layout="half", rotary_dim=12)
    rng = np.random.default_rng(hq + 7 * hk)
    b, s = (1, 21) if axes == "thd" else (2, 6)
    h = axes.index("h")
    qkv = rng.standard_normal(shape_for(axes, b, s, hq + 2 * hk, 16)).astype(np.float32)
    v_index = (slice(None),) * h + (slice(hq + hk, None),)
    _special_v(qkv[v_index])
    store = to_io(cb, qkv, dtype)
    v_bits = bits(store)[v_index].copy()
    if dtype != "float32":  # a NaN payload the device's own float conversion would not produce
        raw = bits(store)
        raw[v_index].flat[4] = 0x7C01 if dtype == "float16" else 0x7F81
        v_bits = raw[v_index].copy()
    before = bits(store).copy()
    xq = values(store)
    ids = ids_for(rng, axes, b, s)
    y = cb.apply_qkv(store, cfg, axes=axes, num_heads_q=hq, num_heads_kv=hk, positions=ids, inplace=inplace)
    assert len(qkv_launches(host.control)) == 1
    got = values(y)
    qi = (slice(None),) * h + (slice(0, hq),)
    ki = (slice(None),) * h + (slice(hq, hq + hk),)
    judge(got[qi], xq[qi], ids, cfg, dtype, axes=axes)
    judge(got[ki], xq[ki], ids, cfg, dtype, axes=axes)
    assert np.array_equal(bits(y)[v_index], v_bits), "V changed"
    if inplace:
        assert y is store
    else:
        assert np.array_equal(bits(store), before)
    assert qkv_launches(host.control)[0]["heads2"] == (0 if inplace else hk)


# -- varlen (cu_seqlens) and offsets ------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("starts", ["none", "per-sequence", "scalar"])
def test_varlen_positions_restart_per_sequence(host, starts, layout) -> None:
    cb = host.cb
    cfg = RopeConfig(16, layout=layout, rotary_dim=16 if layout == "half" else 12)
    cu = np.concatenate([[0], np.cumsum(LENGTHS)])
    total = int(cu[-1])
    rng = np.random.default_rng(len(starts))
    start = {"none": None, "per-sequence": rng.integers(0, 3000, size=len(LENGTHS)), "scalar": 1234}[starts]
    x = rng.standard_normal((total, 2, 16)).astype(np.float32)
    y = cb.apply_axes(x, cfg, axes="thd", cu_seqlens=cu, start_offsets=start, max_seqlen=max(LENGTHS))
    ids = positions_from_cu_seqlens(cu, start)
    judge(values(y), x.astype(np.float64), ids, cfg, "float32", axes="thd")
    (launch,) = qkv_launches(host.control)
    assert launch["pos_mode"] == plan_mod.POS_VARLEN and launch["n_seq"] == len(LENGTHS)
    if starts == "none":  # every first token of a sequence is at position 0: copied bit for bit
        assert np.array_equal(bits(y)[cu[:-1]], bits(x)[cu[:-1]])


@pytest.mark.parametrize("heads", GQA, ids=lambda hk: f"{hk[0]}-{hk[1]}")
def test_varlen_qk_and_packed_qkv(host, heads) -> None:
    cb = host.cb
    hq, hk = heads
    cfg = RopeConfig(16, layout="interleaved")
    lengths = (5, 1, 0, 17, 3, 0)  # empty sequences too: the search must skip them
    cu = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    starts = np.array([0, 9, 4, 2000, 1, 7])
    total = int(cu[-1])
    rng = np.random.default_rng(hq)
    q = rng.standard_normal((total, hq, 16)).astype(np.float32)
    k = rng.standard_normal((total, hk, 16)).astype(np.float32)
    ids = positions_from_cu_seqlens(cu, starts)
    qo, ko = cb.apply_qk(q, k, cfg, axes="thd", cu_seqlens=cu, start_offsets=starts)
    judge(values(qo), q.astype(np.float64), ids, cfg, "float32", axes="thd")
    judge(values(ko), k.astype(np.float64), ids, cfg, "float32", axes="thd")
    qkv = np.concatenate([q, k, k[:, ::-1]], axis=1)
    y = cb.apply_qkv(
        qkv, cfg, axes="thd", num_heads_q=hq, num_heads_kv=hk, cu_seqlens=cu, start_offsets=starts
    )
    assert np.array_equal(bits(y)[:, :hq], bits(qo)) and np.array_equal(bits(y)[:, hq : hq + hk], bits(ko))
    assert np.array_equal(bits(y)[:, hq + hk :], bits(qkv)[:, hq + hk :])


@pytest.mark.parametrize("axes", ["bshd", "bhsd", "sbhd"])
@pytest.mark.parametrize("per_batch", [False, True])
def test_offsets_scalar_and_per_batch(host, axes, per_batch) -> None:
    cb = host.cb
    cfg = RopeConfig(32, layout="half", rotary_dim=24)
    rng = np.random.default_rng(6)
    b, s = 3, 9
    offset = np.array([0, 4000, 17]) if per_batch else 2500
    x = rng.standard_normal(shape_for(axes, b, s, 2, 32)).astype(np.float32)
    y = cb.apply_axes(x, cfg, axes=axes, offset=offset)
    ids = positions_from_offset(offset, s, batch=b)
    judge(values(y), x.astype(np.float64), ids, cfg, "float32", axes=axes)
    q = rng.standard_normal(shape_for(axes, b, s, 8, 32)).astype(np.float32)
    qo, ko = cb.apply_qk(q, x, cfg, axes=axes, offset=offset)
    judge(values(qo), q.astype(np.float64), ids, cfg, "float32", axes=axes)
    assert np.array_equal(bits(ko), bits(y))
    (launch,) = qkv_launches(host.control)[-1:]
    assert launch["pos_mode"] == plan_mod.POS_OFFSET
    assert (launch["off_at"] >= 0) == per_batch and launch["base"] == (0 if per_batch else 2500)


def test_length_dependent_scaling_sees_the_forward_positions(host) -> None:
    cb = host.cb
    rng = np.random.default_rng(8)
    cu = np.concatenate([[0], np.cumsum(LENGTHS)])
    x = rng.standard_normal((int(cu[-1]), 1, 16)).astype(np.float32)
    xf = x.astype(np.float64)
    ntk = RopeConfig(16, layout="half", scaling=DynamicNTK(2.0, 1024))
    ids = positions_from_cu_seqlens(cu, 300)
    for inverse in (False, True):
        y = cb.apply_axes(x, ntk, axes="thd", cu_seqlens=cu, start_offsets=300, inverse=inverse)
        judge(values(y), xf, ids, ntk, "float32", axes="thd", inverse=inverse)
    yarn = RopeConfig(16, layout="interleaved", scaling=YaRN(4.0, 512))
    xb = rng.standard_normal((2, 40, 3, 16)).astype(np.float32)
    y = cb.apply_axes(xb, yarn, axes="bshd", offset=np.array([3000, 10]), inverse=True)
    ids = positions_from_offset(np.array([3000, 10]), 40)
    judge(values(y), xb.astype(np.float64), ids, yarn, "float32", axes="bshd", inverse=True)
    y = cb.apply_axes(xb, yarn, axes="bshd", offset=5, seq_len=9000)
    judge(values(y), xb.astype(np.float64), positions_from_offset(5, 40), yarn, "float32", axes="bshd",
          seq_len=9000)  # fmt: skip


# -- inverse and round trip ---------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_inverse_and_round_trip(host, layout, dtype) -> None:
    cb = host.cb
    cfg = RopeConfig(32, layout=layout, rotary_dim=24)
    rng = np.random.default_rng(9)
    xd = to_io(cb, rng.standard_normal((2, 3, 13, 32)).astype(np.float32), dtype)
    xq = values(xd)
    ids = ids_for(rng, "bhsd", 2, 13)
    inv = cb.apply_axes(xd, cfg, axes="bhsd", positions=ids, inverse=True)
    judge(values(inv), xq, ids, cfg, dtype, axes="bhsd", inverse=True)
    y = cb.apply_axes(xd, cfg, axes="bhsd", positions=ids)
    back = cb.apply_axes(y, cfg, axes="bhsd", positions=ids, inverse=True)
    m = np.broadcast_to(positions_for_axes(ids, "bhsd", xq.shape), xq.shape[:-1])
    tol = bound(xq, m, cfg, dtype, None)
    tol = tol + bound(values(y), m, cfg, dtype, None)  # both rotations' bounds (factor 1)
    assert np.all(np.abs(values(back) - xq) <= tol)
    assert np.array_equal(bits(back)[..., 24:], bits(xd)[..., 24:])
    # In place: de-rotating y in place gives the same bits as out of place.
    cb.apply_axes(y, cfg, axes="bhsd", positions=ids, inverse=True, inplace=True)
    assert np.array_equal(bits(y), bits(back))


# -- launch layout ------------------------------------------------------------------------------------------


def test_small_grid_and_reversed_blocks_give_the_same_bits(host) -> None:
    cb = host.cb
    cfg = RopeConfig(16, layout="half", rotary_dim=10)
    rng = np.random.default_rng(10)
    q = rng.standard_normal((3, 7, 8, 16)).astype(np.float32)
    k = rng.standard_normal((3, 7, 2, 16)).astype(np.float32)
    ids = ids_for(rng, "bshd", 3, 7)
    want = cb.apply_qk(q, k, cfg, axes="bshd", positions=ids)
    host.control.grid, host.control.reverse = (2, 1, 1), True  # grid-stride loop over rows
    got = cb.apply_qk(q, k, cfg, axes="bshd", positions=ids)
    assert all(np.array_equal(bits(g), bits(w)) for g, w in zip(got, want, strict=True))
    shape = qkv_launches(host.control)[-1]
    if host.mode == "whole-heads":
        assert shape["n_chunks"] == 1 and shape["chunk_heads"] == 10
    else:  # few tokens: the heads of a token are spread over the grid
        assert shape["n_chunks"] > 1


def test_planner_splits_heads_only_when_tokens_are_few() -> None:
    def plan(tokens: int, heads: int) -> plan_mod.QkvPlan:
        part = plan_mod.QkvPart((1, tokens, heads, 128), (0, heads * 128, 128, 1), (0, heads * 128, 128, 1))
        return plan_mod.plan_qkv(dtype_name="bfloat16", parts=[part, part], head_dim=128, rotary_dim=128,
                                 layout="half", inplace=False)  # fmt: skip

    big = plan(4096, 32)
    assert (
        big.n_chunks == 1 and big.chunk_heads == 64 and big.block == (64, 4, 1) and big.grid == (1024, 1, 1)
    )
    decode = plan(1, 32)
    assert decode.n_chunks == 64 and decode.chunk_heads == 1
    assert plan(256, 8).n_chunks * plan(256, 8).chunk_heads >= 16


# -- bad input: a ValueError naming the argument, before any launch -----------------------------------------


def test_bad_arguments_name_the_argument(host) -> None:
    cb = host.cb
    cfg = RopeConfig(16, layout="half")
    x = np.zeros((10, 2, 16), dtype=np.float32)
    xb = np.zeros((2, 5, 2, 16), dtype=np.float32)
    cases = [
        (dict(cu_seqlens=[1, 4, 10]), "cu_seqlens must start at 0"),
        (dict(cu_seqlens=[0, 6, 4, 10]), "cu_seqlens must be non-decreasing"),
        (dict(cu_seqlens=[0, 4, 9]), r"cu_seqlens\[-1\] = 9 must equal the token count"),
        (dict(cu_seqlens=np.array([0.0, 10.0])), "cu_seqlens must hold integers"),
        (dict(cu_seqlens=np.zeros((2, 2), dtype=int)), "cu_seqlens must be 1-D"),
        (dict(cu_seqlens=[0, 4, 10], start_offsets=[1, 2, 3]), "start_offsets must be a scalar or have 2"),
        (dict(cu_seqlens=[0, 4, 10], start_offsets=-1), r"start_offsets must be >= 0"),
        (dict(cu_seqlens=[0, 4, 10], max_seqlen=5), "max_seqlen"),
        (dict(offset=3), "offset needs batch and sequence axes"),
        (dict(positions=np.arange(10), offset=3), "exactly one of positions, offset, cu_seqlens"),
        (dict(), "exactly one of positions, offset, cu_seqlens"),
        (dict(positions=np.arange(10), start_offsets=2), "start_offsets goes with cu_seqlens"),
        (dict(positions=np.arange(9)), r"positions of shape \(9,\) do not fit"),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=message):
            cb.apply_axes(x, cfg, axes="thd", **kwargs)
    for offset, message in [(-1, "offset must be >= 0"), (2.5, "offset must be an integer"),
                            (np.array([1.0, 2.0]), "offset must hold integers"),
                            (True, "offset must be an integer"),
                            (np.array([1, 2, 3]), "offset has 3 entries but x has batch 2"),
                            (np.array([[1, 2]]), "offset must be a scalar or 1-D"),
                            (np.array([0, -4]), "offset must be >= 0")]:  # fmt: skip
        with pytest.raises(ValueError, match=message):
            cb.apply_axes(xb, cfg, axes="bshd", offset=offset)
    with pytest.raises(ValueError, match="cu_seqlens needs packed tokens"):
        cb.apply_axes(xb, cfg, axes="bshd", cu_seqlens=[0, 5])
    with pytest.raises(ValueError, match=r"axes='bshd' names 4 axes but x has 3"):
        cb.apply_axes(x, cfg, axes="bshd", positions=0)
    with pytest.raises(ValueError, match="axes= is required"):
        cb.apply_axes(x, cfg, axes=None, positions=0)
    with pytest.raises(ValueError, match=r"k heads \(3\) must divide q heads \(8\)"):
        q8, k3 = np.zeros((2, 5, 8, 16), np.float32), np.zeros((2, 5, 3, 16), np.float32)
        cb.apply_qk(q8, k3, cfg, axes="bshd", positions=0)
    with pytest.raises(ValueError, match="must agree on every axis but the heads"):
        cb.apply_qk(xb, np.zeros((2, 4, 2, 16), np.float32), cfg, axes="bshd", positions=0)
    with pytest.raises(ValueError, match="has no head axis"):
        cb.apply_qk(x[:, 0], x[:, 0], cfg, axes="td", positions=0)
    qkv = np.zeros((2, 5, 12, 16), dtype=np.float32)
    with pytest.raises(
        ValueError, match=r"qkv.shape\[2\] = 12 does not split as num_heads_q \+ 2 \* num_heads_kv"
    ):
        cb.apply_qkv(qkv, cfg, axes="bshd", num_heads_q=8, num_heads_kv=3, positions=0)
    with pytest.raises(ValueError, match=r"num_heads_kv \(4\) must divide num_heads_q \(4\)|must divide"):
        cb.apply_qkv(np.zeros((2, 5, 14, 16), np.float32), cfg, axes="bshd", num_heads_q=6, num_heads_kv=4,
                     positions=0)  # fmt: skip
    with pytest.raises(ValueError, match="num_heads_q must be an int >= 1"):
        cb.apply_qkv(qkv, cfg, axes="bshd", num_heads_q=0, num_heads_kv=6, positions=0)
    with pytest.raises(ValueError, match="x.shape\\[-1\\] must equal head_dim=16"):
        cb.apply_axes(np.zeros((4, 2, 8), np.float32), cfg, axes="thd", positions=0)
    with pytest.raises(ValueError, match="zero strides"):
        cb.apply_axes(np.broadcast_to(xb[:1], xb.shape), cfg, axes="bshd", positions=0, inplace=True)
    with pytest.raises(TypeError, match="inverse must be a bool"):
        cb.apply_axes(x, cfg, axes="thd", positions=0, inverse=1)
    assert not qkv_launches(host.control)  # every check fires before a launch


# -- the conformance backend --------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_backend_methods_permute_and_inplace_ops(host, dtype) -> None:
    cb = host.cb
    backend = cb.make_backend(dtype)
    assert backend.inplace_ops == {"apply_axes", "apply_qk", "apply_qkv"}
    cfg = RopeConfig(16, layout="interleaved", rotary_dim=12)
    rng = np.random.default_rng(11)
    stored = backend.from_numpy(rng.standard_normal((2, 3, 6, 16)), dtype)  # bhsd storage
    view = backend.permute(stored, (0, 2, 1, 3))  # handed as bshd
    assert tuple(view.shape) == (2, 6, 3, 16)
    xq = backend.to_numpy(view).astype(np.float64)
    ids = backend.from_numpy(ids_for(rng, "bshd", 2, 6), None)
    y = backend.apply_axes(view, cfg, axes="bshd", positions=ids, inverse=True)
    judge(backend.to_numpy(y).astype(np.float64), xq, np.asarray(ids), cfg, dtype, axes="bshd", inverse=True)
    qkv = backend.from_numpy(rng.standard_normal((9, 4 + 2 * 2, 16)), dtype)
    cu = backend.from_numpy(np.array([0, 4, 9], dtype=np.int32), None)
    out = backend.apply_qkv(qkv, cfg, axes="thd", num_heads_q=4, num_heads_kv=2, cu_seqlens=cu, max_seqlen=5,
                            start_offsets=backend.from_numpy(np.array([10, 0]), None))  # fmt: skip
    assert np.array_equal(bits(out)[:, 6:], bits(qkv)[:, 6:])
    ids = positions_from_cu_seqlens([0, 4, 9], [10, 0])
    got = backend.to_numpy(out).astype(np.float64)
    judge(got[:, :6], backend.to_numpy(qkv).astype(np.float64)[:, :6], ids, cfg, dtype, axes="thd")
    q, k = backend.apply_qk(view[:, :, :2], view[:, :, 2:], cfg, axes="bshd", offset=3, inplace=True)
    assert k.shape == (2, 6, 1, 16)


def _shipped_kernel_cases(dtype: str) -> list:
    from shipped_golden import shipped_cases

    ops = ("apply_axes", "apply_qk", "apply_qkv", "round_trip")
    return [c for c in shipped_cases() if c.op in ops and c.io_dtype == dtype]


@pytest.mark.parametrize("dtype", DTYPES)
def test_shipped_kernel_shape_cases_pass_through_the_runner(host, dtype) -> None:
    """Every shipped kernel-shape case of this I/O dtype, run by the conformance runner on the backend
    whose device code is the host-compiled kernel, judged by the suite's own tolerance model."""
    from rope_ref.conformance.runner import Runner

    if host.mode != "planned":
        pytest.skip("the shipped cases run once, as planned")
    cases = _shipped_kernel_cases(dtype)
    if not cases:
        pytest.skip("no kernel-shape cases shipped in the golden set")
    backend = host.cb.make_backend(dtype)
    results = [Runner(backend).run_case(c) for c in cases]
    bad = [(r.case_id, r.status, r.message) for r in results if r.status != "passed"]
    assert not bad, bad


# -- on a real GPU (skipped without cupy and a CUDA device) -------------------------------------------------

HAS_CUPY = importlib.util.find_spec("cupy") is not None


def _gpu() -> tuple[bool, str]:
    if not HAS_CUPY:
        return False, "cupy is not installed"
    import rope_ref.backends.cupy as cb

    return cb.available()


_GPU_OK, _GPU_WHY = _gpu()
gpu = pytest.mark.skipif(not _GPU_OK, reason=f"needs a CUDA GPU with cupy: {_GPU_WHY}")


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_gpu_qk_qkv_varlen_and_views(dtype) -> None:
    import cupy as cp
    import rope_ref.backends.cupy as cb

    def dev(a):
        return cb.Bf16Array.from_numpy(a) if dtype == "bfloat16" else cp.asarray(a.astype(dtype))

    def host_values(a):
        return (a.to_numpy() if isinstance(a, cb.Bf16Array) else cp.asnumpy(a)).astype(np.float64)

    rng = np.random.default_rng(12)
    cfg = RopeConfig(128, layout="half", rotary_dim=96)
    q = dev(rng.standard_normal((2, 64, 32, 128)).astype(np.float32))
    k = dev(rng.standard_normal((2, 64, 8, 128)).astype(np.float32))
    ids = rng.integers(0, 8000, size=(2, 64))
    qo, ko = cb.apply_qk(q, k, cfg, axes="bshd", positions=cp.asarray(ids))
    judge(host_values(qo), host_values(q), ids, cfg, dtype, axes="bshd")
    judge(host_values(ko), host_values(k), ids, cfg, dtype, axes="bshd")
    cu = np.concatenate([[0], np.cumsum(LENGTHS)])
    qkv = dev(rng.standard_normal((int(cu[-1]), 16 + 2 * 4, 128)).astype(np.float32))
    before = host_values(qkv)
    y = cb.apply_qkv(qkv, cfg, axes="thd", num_heads_q=16, num_heads_kv=4, cu_seqlens=cp.asarray(cu),
                     start_offsets=7, inplace=True)  # fmt: skip
    got = host_values(y)
    ids = positions_from_cu_seqlens(cu, 7)
    judge(got[:, :20], before[:, :20], ids, cfg, dtype, axes="thd")
    assert np.array_equal(got[:, 20:], before[:, 20:])
    view = q.transpose((0, 2, 1, 3))  # bhsd view of a bshd array
    yv = cb.apply_axes(view, cfg, axes="bhsd", offset=np.array([5, 900]))
    judge(host_values(yv), host_values(view), positions_from_offset(np.array([5, 900]), 64), cfg, dtype,
          axes="bhsd")  # fmt: skip
