"""The CUDA kernels of the CuPy backend, *executed on the CPU*: the real source, compiled by g++.

``backends/rope_kernels.cu`` itself (not a copy, not a Python model of it) is compiled as C++ together
with ``tests/cuda_host/cuda_host_shim.h`` (empty ``__device__``/``__global__``, the index built-ins as
globals, the bit-cast intrinsics) and ``tests/cuda_host/driver.cpp``, which runs a launch one emulated
thread at a time: every block of the grid, every thread of the block, with ``blockIdx``/``threadIdx``
set. The fp16 conversions take the portable host branch of the .cu file (the device branch is PTX).

The kernels are driven through the real host code of :mod:`rope_ref.backends.cupy`: a NumPy stand-in
for ``cupy`` is put in ``sys.modules`` whose ``RawModule`` hands out launchers into the compiled library.
So validation, planning (``_cupy_plan``), the packed ``RopeShape`` and the argument tuple are exactly
what a GPU launch gets; the launcher checks every argument against the kernel's parameter list parsed
from the .cu source, and passes them as ``cuLaunchKernel`` does (an array of pointers to the values).

Outputs are judged by the conformance tolerance model (float32 angles, float32 compute, io rounding)
against the float64 oracle, plus bit-for-bit rules (pass-through channels, position 0, in place).
Freshly allocated outputs are NaN-filled and guarded on both sides, so an element never written or a
write out of bounds fails. Skipped with a reason where g++ is missing.
"""

from __future__ import annotations

import ctypes
import math
import re
import sys
import types

import numpy as np
import pytest
from cupy_host import SOURCE, bits, compile_driver, fake_cupy, to_io, values
from rope_ref.backends import _cupy_plan as plan_mod
from rope_ref.backends._cupy_bf16 import bf16_bits_to_float32, float32_to_bf16_bits
from rope_ref.conformance.case import Case
from rope_ref.conformance.protocol import PrecisionPolicy
from rope_ref.conformance.tolerance import check_case

import rope_ref
from rope_ref import RopeConfig
from rope_ref.frequencies import resolve_seq_len
from rope_ref.scaling import YaRN

DTYPES = ("float32", "float16", "bfloat16")
_STORAGE = {"rope_apply_f32": np.float32, "rope_apply_f16": np.float16, "rope_apply_bf16": np.uint16}
_BITS = {"float32": np.uint32, "float16": np.uint16, "bfloat16": np.uint16}

# -- building the library ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lib(tmp_path_factory) -> ctypes.CDLL:
    # driver.cpp does #include "rope_kernels.cu": the shipped file
    h = compile_driver(tmp_path_factory, "driver.cpp", ("rope_host_launch",), timeout=120)
    h.rope_host_sizeof_shape.restype = ctypes.c_ulonglong
    for name in ("f16_load", "f16_store", "bf16_load", "bf16_store"):
        getattr(h, f"rope_host_{name}").argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_longlong]
    return h


# -- the kernels' parameter lists, read from the source ----------------------------------------------


def _params(text: str) -> list[str]:
    return [" ".join(p.replace("\\", " ").split()) for p in text.split(",")]


def kernel_signatures() -> dict[str, list[str]]:
    """Kernel name -> C parameter declarations, parsed from rope_kernels.cu (the macro and cos_sin)."""
    src = SOURCE.read_text()
    apply_params = re.search(r'extern "C" __global__ void NAME\((.*?)\)\s*\{', src, flags=re.S).group(1)
    cos_sin = re.search(r'extern "C" __global__ void rope_cos_sin_f32\((.*?)\)\s*\{', src, flags=re.S)
    sigs = {name: _params(apply_params) for name in _STORAGE}
    sigs["rope_cos_sin_f32"] = _params(cos_sin.group(1))
    return sigs


_SCALARS = {"int": np.int32, "float": np.float32, "i64": np.int64}


def _check_arg(kernel: str, decl: str, value, shape_size: int) -> None:
    """CuPy passes an ndarray as its device pointer, a NumPy scalar as its bytes: both must fit ``decl``."""
    where = f"{kernel} parameter {decl!r}"
    if "*" in decl:
        assert isinstance(value, np.ndarray), f"{where}: got {type(value).__name__}, expected an array"
        elem = decl.split("*")[0].replace("const", "").strip()
        want = {"double": np.float64, "float": np.float32}.get(elem, _STORAGE.get(kernel))
        assert value.dtype == want, f"{where}: got an array of {value.dtype}, expected {np.dtype(want)}"
    elif "RopeShape" in decl:
        assert isinstance(value, np.void), f"{where}: got {type(value).__name__}"
        assert value.dtype == plan_mod.shape_struct_dtype() and value.dtype.itemsize == shape_size, where
    else:
        ctype = decl.replace("const", "").split()[0]
        assert type(value) is _SCALARS[ctype], f"{where}: got {type(value).__name__}, expected {ctype}"


# -- launching ---------------------------------------------------------------------------------------


class LaunchControl:
    """Knobs for the next launches: replace the grid, run a block range, reverse the order; a log."""

    def __init__(self) -> None:
        self.grid = None
        self.blocks = None
        self.reverse = False
        self.shape_hook = None  # callable(np.void) -> np.void, applied to the RopeShape argument
        self.log: list[tuple[str, tuple, tuple]] = []  # (kernel, grid, block) per launch
        self.shapes: list[dict[str, int]] = []  # the RopeShape of each apply launch


def host_launcher(h: ctypes.CDLL, name: str, control: LaunchControl):
    sig = kernel_signatures()[name]
    shape_size = int(h.rope_host_sizeof_shape())

    def launch(grid, block, args) -> None:
        assert len(args) == len(sig), f"{name}: {len(args)} arguments for {len(sig)} parameters"
        args = list(args)
        for i, (decl, value) in enumerate(zip(sig, args, strict=True)):
            _check_arg(name, decl, value, shape_size)
            if isinstance(value, np.void):
                if control.shape_hook is not None:
                    args[i] = control.shape_hook(value)
                control.shapes.append({f: int(args[i][f]) for f in plan_mod.SHAPE_FIELDS})
        grid = tuple(int(g) for g in (control.grid or grid))
        block = tuple(int(b) for b in block)
        assert len(grid) == len(block) == 3 and block[0] * block[1] * block[2] <= 1024
        assert all(0 < g < 2**31 for g in grid)
        control.log.append((name, grid, block))
        keep = []  # the argument values, alive until the call returns
        for v in args:
            if isinstance(v, np.ndarray):
                keep.append(ctypes.c_void_p(v.ctypes.data))  # the "device pointer" (first element)
            else:
                keep.append(ctypes.create_string_buffer(v.tobytes(), len(v.tobytes())))
        ptrs = (ctypes.c_void_p * len(keep))(*[ctypes.addressof(k) for k in keep])
        b0, b1 = control.blocks or (0, 2**64 - 1)
        rc = h.rope_host_launch(
            name.encode(), (ctypes.c_uint * 3)(*grid), (ctypes.c_uint * 3)(*block), ptrs, b0, b1,
            int(control.reverse),
        )  # fmt: skip
        assert rc == 0, f"unknown kernel {name}"

    return launch


_GUARD = 64  # elements of NaN on each side of every array the backend allocates


def _nan_bits(dtype) -> int:
    return {2: 0x7FDA, 4: 0x7FA5A5A5, 8: 0x7FF4A5A5A5A5A5A5}[np.dtype(dtype).itemsize]  # NaN in every dtype


class _FakeRawModule:
    def __init__(self, code: str, options=(), *, lib: ctypes.CDLL, control: LaunchControl) -> None:
        assert code == SOURCE.read_text(encoding="utf-8") and "--std=c++14" in options
        self._lib, self._control = lib, control

    def get_function(self, name: str):
        return host_launcher(self._lib, name, self._control)


@pytest.fixture(params=["planned", "inner-loops"])
def host_cupy(lib, monkeypatch, request):
    """``rope_ref.backends.cupy`` with NumPy as its cupy and the compiled kernels as its device code.

    Run twice: as planned (small test inputs have so few rows that the planner moves the broadcast
    axes to the grid), and with the planner's parallelism threshold at 0, so that every axis the
    positions broadcast over becomes a loop inside the thread (the unrolled inner loop of the kernel).
    """
    import rope_ref.backends.cupy as cb

    if request.param == "inner-loops":
        monkeypatch.setattr(plan_mod, "MIN_PARALLEL_THREADS", 0)
    control = LaunchControl()
    guards: list[tuple[np.ndarray, np.ndarray]] = []

    def empty(shape, dtype=np.float64):
        dtype = np.dtype(dtype)
        n = math.prod(shape) if isinstance(shape, tuple) else int(shape)
        raw = {2: np.uint16, 4: np.uint32, 8: np.uint64}[dtype.itemsize]
        bits = np.full(n + 2 * _GUARD, _nan_bits(dtype), dtype=raw)
        buf = bits.view(dtype)
        guards.append((buf, bits.copy()))
        return buf[_GUARD : _GUARD + n].reshape(shape)

    raw_module = lambda code, options=(): _FakeRawModule(code, options, lib=lib, control=control)  # noqa: E731
    fake = fake_cupy(empty, raw_module)
    monkeypatch.setitem(sys.modules, "cupy", fake)
    cb._module.cache_clear()
    cb._freq_table_cached.cache_clear()
    yield types.SimpleNamespace(cb=cb, control=control, mode=request.param)
    cb._module.cache_clear()
    cb._freq_table_cached.cache_clear()
    for buf, before in guards:  # nothing written outside any allocated array
        bits = buf.view(before.dtype)
        assert np.array_equal(bits[:_GUARD], before[:_GUARD]), "write before the start of an output"
        assert np.array_equal(bits[-_GUARD:], before[-_GUARD:]), "write past the end of an output"


# -- helpers -----------------------------------------------------------------------------------------


def _config_dict(cfg: RopeConfig) -> dict:
    return {
        "head_dim": cfg.head_dim,
        "layout": cfg.layout,
        "rotary_dim": cfg.rotary_dim,
        "base": cfg.base,
        "scaling": None if cfg.scaling is None else cfg.scaling.to_hf(),
    }


def judge(op: str, cfg: RopeConfig, v: np.ndarray, pos, got: np.ndarray, io: str) -> float:
    """Compare with the oracle under the conformance tolerance model; return the worst err/tol ratio."""
    pos = np.asarray(pos, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    if op == "apply":
        expected = rope_ref.apply(v, pos, cfg)
        inputs = {"x": v, "positions": pos}
    else:  # apply_vjp: A R^T g, i.e. the rotation by -angle (seq_len from the forward positions)
        expected = rope_ref.apply(v, -pos, cfg, seq_len=resolve_seq_len(pos, cfg, None))
        inputs = {"grad_out": v, "positions": pos}
    case = Case("host-emulation", op, _config_dict(cfg), inputs, {"y": expected}, "none", "rotation")
    comps = check_case(case, {"y": got}, PrecisionPolicy(io, "float32", "float32"))
    bad = [c.describe() for c in comps if not c.passed]
    assert not bad, "\n".join(bad)
    return max(c.ratio for c in comps)


def quantised(cb, x: np.ndarray, dtype: str) -> np.ndarray:
    """The float64 values the kernel actually sees after rounding ``x`` to ``dtype``."""
    return values(to_io(cb, x, dtype))


# -- the I/O conversions of the kernel ---------------------------------------------------------------


def _call(fn, src: np.ndarray, out_dtype) -> np.ndarray:
    src = np.ascontiguousarray(src)
    out = np.empty(src.shape, dtype=out_dtype)
    fn(src.ctypes.data, out.ctypes.data, src.size)
    return out


def test_fp16_host_conversions_are_ieee_round_to_nearest_even(lib) -> None:
    every = np.arange(2**16, dtype=np.uint32).astype(np.uint16)
    got = _call(lib.rope_host_f16_load, every, np.float32)
    want = every.view(np.float16).astype(np.float32)
    nan = np.isnan(want)
    assert np.array_equal(np.isnan(got), nan)
    assert np.array_equal(got[~nan].view(np.uint32), want[~nan].view(np.uint32))  # exact, signed zeros
    # Stores: every fp16 value, the midpoints between neighbours (ties), one float32 ulp either side of
    # them, and random float32 bit patterns (all exponents: overflow, subnormals, NaN).
    f = want[~nan].astype(np.float64)
    f = np.unique(f[np.isfinite(f)])
    mid = ((f[:-1] + f[1:]) / 2).astype(np.float32)
    cands = [want, mid, np.nextafter(mid, np.float32(np.inf)), np.nextafter(mid, np.float32(-np.inf))]
    random_bits = np.random.default_rng(0).integers(0, 2**32, 2**20, dtype=np.uint64).astype(np.uint32)
    cands.append(random_bits.view(np.float32))
    cands.append(np.array([65504, 65519.99, 65520, 2.0**-25, 2.0**-24 * 1.5, -0.0, np.inf], np.float32))
    x = np.concatenate(cands).astype(np.float32)
    got = _call(lib.rope_host_f16_store, x, np.uint16)
    with np.errstate(over="ignore"):
        want16 = x.astype(np.float16).view(np.uint16)
    nan = np.isnan(x)
    assert np.array_equal(got[~nan], want16[~nan])
    assert np.all(np.isnan(got[nan].view(np.float16)))


def test_bf16_kernel_conversions_match_the_host_rounding(lib) -> None:
    rng = np.random.default_rng(1)
    u = np.concatenate([
        rng.integers(0, 2**32, 2**20, dtype=np.uint64).astype(np.uint32),
        (np.arange(2**16, dtype=np.uint32) << 16) | 0x8000,  # exact ties
        (np.arange(2**16, dtype=np.uint32) << 16) | 0x7FFF,
        np.array([0x7F7FFFFF, 0xFF7FFFFF, 0x7F800001, 0x7FC00000, 0x80000000], dtype=np.uint32),
    ])  # fmt: skip
    f = u.view(np.float32)
    got = _call(lib.rope_host_bf16_store, f, np.uint16)
    assert np.array_equal(got, float32_to_bf16_bits(f))
    every = np.arange(2**16, dtype=np.uint32).astype(np.uint16)
    back = _call(lib.rope_host_bf16_load, every, np.float32)
    assert np.array_equal(back.view(np.uint32), bf16_bits_to_float32(every).view(np.uint32))


def test_argument_packing_matches_the_kernel_signatures(lib) -> None:
    size = plan_mod.shape_struct_dtype().itemsize
    assert lib.rope_host_sizeof_shape() == size == 8 * len(plan_mod.SHAPE_FIELDS)
    sigs = kernel_signatures()
    assert set(sigs) == set(plan_mod.KERNEL_FOR_DTYPE.values()) | {"rope_cos_sin_f32"}
    assert len(sigs["rope_apply_f32"]) == 11 and "RopeShape" in sigs["rope_apply_f32"][4]
    assert sigs["rope_cos_sin_f32"][2].startswith("i64")


# -- apply against the oracle ------------------------------------------------------------------------


def _specials(x: np.ndarray, rotary_dim: int, zero_rows) -> None:
    """Signed zeros and infinities where the output must be a bit-for-bit copy."""
    x[..., rotary_dim:][..., ::3] = -0.0
    if x.shape[-1] > rotary_dim:
        x[..., -1] = np.inf
    x[zero_rows + (Ellipsis, 0)] = -0.0
    x[zero_rows + (Ellipsis, 1)] = -np.inf


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("rotary_dim", [64, 24])
def test_apply_per_token_positions_broadcast_over_heads(host_cupy, dtype, layout, rotary_dim) -> None:
    cb = host_cupy.cb
    rng = np.random.default_rng(0)
    cfg = RopeConfig(64, layout=layout, rotary_dim=rotary_dim)
    x = rng.standard_normal((2, 37, 5, 64)).astype(np.float32)
    pos = rng.integers(0, 5000, size=(2, 37, 1)).astype(np.int64)
    pos[0, 0, 0] = 0
    pos[1, 3, 0] = 2**20 + 11  # a large angle (range reduction)
    pos[1, 4, 0] = -77
    _specials(x, rotary_dim, (0, 0))
    xd = to_io(cb, x, dtype)
    xq = values(xd)
    y = cb.apply(xd, pos, cfg)
    finite = np.isfinite(xq)  # the infinities (pass-through, position 0) are checked bit for bit below
    judge("apply", cfg, np.where(finite, xq, 0.0), pos, np.where(finite, values(y), 0.0), dtype)
    assert np.array_equal(bits(y)[..., rotary_dim:], bits(xd)[..., rotary_dim:])  # pass-through
    assert np.array_equal(bits(y)[0, 0], bits(xd)[0, 0])  # position 0: the identity, bit for bit
    name, grid, block = host_cupy.control.log[-1]
    assert name == plan_mod.KERNEL_FOR_DTYPE[dtype] and block[0] % 32 == 0
    shape = host_cupy.control.shapes[-1]
    # The heads: a loop in the thread (4 unrolled + 1 remainder) or, as planned here, rows of the grid.
    assert (shape["i_size1"], shape["n_outer"]) == ((5, 74) if host_cupy.mode == "inner-loops" else (1, 370))


@pytest.mark.parametrize("dtype", DTYPES)
def test_apply_strided_negative_and_shared_positions(host_cupy, dtype) -> None:
    cb = host_cupy.cb
    rng = np.random.default_rng(2)
    cfg = RopeConfig(32, layout="half", base=500000.0)
    big = np.full((6, 9, 4, 48), np.nan, dtype=np.float32)  # NaN padding: any stray read shows
    core = rng.standard_normal((3, 8, 3, 32)).astype(np.float32)
    big[::2, 8:0:-1, 1:, 5:37] = core
    if dtype == "bfloat16":
        store = cb.Bf16Array.from_numpy(big)
        x = store[::2, 8:0:-1, 1:, 5:37]  # strided, one axis reversed (negative stride), offset rows
    else:
        store = big.astype(dtype)
        x = store[::2, 8:0:-1, 1:, 5:37]
    assert not (x.bits if dtype == "bfloat16" else x).flags.c_contiguous
    pos_store = rng.standard_normal(24) * 3000.0
    pos = pos_store[::3]  # (8,) strided float64 positions, shared by the batch and the heads: (S, 1)
    y = cb.apply(x, pos[:, None], cfg)
    judge("apply", cfg, values(x), pos[:, None], values(y), dtype)
    assert host_cupy.control.log[-1][0] == plan_mod.KERNEL_FOR_DTYPE[dtype]
    if host_cupy.mode == "inner-loops":  # batch and heads: two inner loops with different x/out strides
        shape = host_cupy.control.shapes[-1]
        assert (shape["n_outer"], shape["i_size0"], shape["i_size1"]) == (8, 3, 3)
        assert shape["i_xs0"] != shape["i_os0"] and shape["i_xs1"] != shape["i_os1"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_inplace_on_a_strided_view(host_cupy, dtype, layout) -> None:
    cb = host_cupy.cb
    control = host_cupy.control
    rng = np.random.default_rng(3)
    cfg = RopeConfig(16, layout=layout, rotary_dim=12)
    raw = rng.standard_normal((4, 7, 20)).astype(np.float32)
    pos = rng.integers(0, 3000, size=(4, 1))

    def view(store):
        return store[:, ::2, 2:18]  # (4, 4, 16), rows 2 apart, channels offset by 2

    reference = to_io(cb, raw, dtype)
    expected = cb.apply(view(reference), pos, cfg)  # out of place
    results = []
    for reverse in (False, True):  # thread order must not matter (no thread reads what another wrote)
        control.reverse = reverse
        store = to_io(cb, raw, dtype)
        before = bits(store).copy()
        out = cb.apply(view(store), pos, cfg, inplace=True)
        after = bits(store)
        assert np.array_equal(bits(out), bits(view(store)))
        assert np.array_equal(bits(view(store)), bits(expected))  # same arithmetic as out of place
        outside = np.ones(after.shape, dtype=bool)
        outside[:, ::2, 2:14] = False  # the rotated channels of the view; pass-through is not rewritten
        assert np.array_equal(after[outside], before[outside])
        results.append(after.copy())
    assert np.array_equal(results[0], results[1])
    judge("apply", cfg, values(view(reference)), pos, values(expected), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_attention_factor_and_vjp(host_cupy, dtype) -> None:
    cb = host_cupy.cb
    rng = np.random.default_rng(4)
    cfg = RopeConfig(64, layout="interleaved", rotary_dim=48, scaling=YaRN(4.0, 2048))
    factor = rope_ref.attention_factor(cfg)
    assert factor != 1.0
    x = rng.standard_normal((3, 11, 2, 64)).astype(np.float32)
    pos = rng.integers(0, 8000, size=(3, 11, 1))
    pos[0, 0, 0] = 0
    xd = to_io(cb, x, dtype)
    xq = values(xd)
    y = cb.apply(xd, pos, cfg)
    judge("apply", cfg, xq, pos, values(y), dtype)
    # Position 0 with A != 1 is a scaling, not the identity (HF multiplies cos and sin by A).
    assert not np.array_equal(values(y)[0, 0, :, :48], xq[0, 0, :, :48])
    assert np.array_equal(bits(y)[..., 48:], bits(xd)[..., 48:])
    g = cb.apply_vjp(xd, pos, cfg)
    judge("apply_vjp", cfg, xq, pos, values(g), dtype)
    # The VJP is the transpose: <R x, x'> = <x, R^T x'> up to float32 roundoff.
    back = cb.apply_vjp(cb.apply(to_io(cb, x, "float32"), pos, cfg), pos, cfg)
    np.testing.assert_allclose(values(back)[..., :48], factor**2 * x[..., :48], rtol=2e-4, atol=2e-4)


def test_cos_sin_and_its_agreement_with_apply(host_cupy) -> None:
    cb = host_cupy.cb
    for cfg in (RopeConfig(64, layout="half"), RopeConfig(40, layout="half", scaling=YaRN(8.0, 4096))):
        pos = np.array([[0, 1, 2, 100, 4097], [65535, 123456, -5, 7, 2**24 + 1]], dtype=np.int64)
        c, s = cb.cos_sin(pos, cfg)
        assert c.shape == s.shape == pos.shape + (cfg.rotary_dim // 2,) and c.dtype == np.float32
        rc, rs = rope_ref.cos_sin(pos, cfg)
        case = Case("cs", "cos_sin", _config_dict(cfg), {"positions": pos.astype(np.float64)},
                    {"cos": rc, "sin": rs}, "none", "trig")  # fmt: skip
        comps = check_case(case, {"cos": c.astype(np.float64), "sin": s.astype(np.float64)},
                           PrecisionPolicy("float32", "float32", "float32"))  # fmt: skip
        assert all(cmp.passed for cmp in comps), [cmp.describe() for cmp in comps if not cmp.passed]
        # apply on unit pairs (1, 0) yields (cos, sin) * A with the same float32 angle: bit for bit.
        n = cfg.rotary_dim // 2
        unit = np.zeros(pos.shape + (cfg.head_dim,), dtype=np.float32)
        unit[..., :n] = 1.0
        y = cb.apply(unit, pos, cfg)
        nonzero = pos != 0
        assert np.array_equal(y[..., :n][nonzero], c[nonzero])
        assert np.array_equal(y[..., n : 2 * n][nonzero], s[nonzero])


# -- launch geometry: grid-stride rows, the lane loop, decode plans, 64-bit rows --------------------------


def _applied(host_cupy, seed: int, cfg: RopeConfig, shape, dtype, pos_shape):
    """``apply`` on seeded random x and integer positions: the generator (to draw on), x, the positions,
    the output and the block of the launch."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(dtype)
    pos = rng.integers(0, 4000, size=pos_shape)
    y = host_cupy.cb.apply(x, pos, cfg)
    return rng, x, pos, y, host_cupy.control.log[-1][2]


def test_grid_stride_lane_loop_and_plans_agree_bit_for_bit(host_cupy) -> None:
    cb, control = host_cupy.cb, host_cupy.control
    # 512 lanes (256 pairs + 256 copied channels) > 256 threads per block: the lane loop runs twice.
    cfg = RopeConfig(768, layout="half", rotary_dim=512)
    rng, x, pos, y, block = _applied(host_cupy, 5, cfg, (3, 5, 768), np.float16, (3, 1))
    assert block == (256, 1, 1)
    judge("apply", cfg, x, pos, y.astype(np.float64), "float16")
    for g in ((1, 1, 1), (2, 1, 1)):  # fewer blocks than rows: the grid-stride loop covers the rest
        control.grid = g
        assert np.array_equal(bits(cb.apply(x, pos, cfg)), bits(y))
    control.grid = None
    # Decode-sized input: the planner moves the head loop to the grid; force the in-thread loop too.
    cfg = RopeConfig(128, layout="interleaved")
    x = rng.standard_normal((8, 1, 7, 128)).astype(np.float32)
    pos = rng.integers(0, 4000, size=(8, 1, 1))
    old = plan_mod.MIN_PARALLEL_THREADS
    try:
        plan_mod.MIN_PARALLEL_THREADS = 1 << 40
        a = cb.apply(x, pos, cfg)
        plan_mod.MIN_PARALLEL_THREADS = 0
        b = cb.apply(x, pos, cfg)
    finally:
        plan_mod.MIN_PARALLEL_THREADS = old
    assert control.log[-2][1] != control.log[-1][1]  # two different launches ...
    assert np.array_equal(bits(a), bits(b))  # ... the same bits
    judge("apply", cfg, x, pos, a.astype(np.float64), "float32")


def test_more_than_2_32_rows_takes_the_64_bit_path(host_cupy) -> None:
    """Declare n_outer > 2^32 (the kernel's 64-bit division branch) and run only the real rows' blocks."""
    cb, control = host_cupy.cb, host_cupy.control
    cfg = RopeConfig(32, layout="half", rotary_dim=24)
    _, x, pos, want, block = _applied(host_cupy, 6, cfg, (4, 6, 32), np.float32, (4, 6))
    rows, by = 4 * 6, block[1]
    assert rows % by == 0  # whole blocks: no thread gets a row beyond the real ones

    def huge(shape: np.void) -> np.void:
        out = np.array([shape], dtype=shape.dtype)
        assert int(out[0]["n_outer"]) == rows
        out[0]["n_outer"] = 2**32 + rows  # the 64-bit branch; the row decomposition is unchanged
        return out[0]

    control.shape_hook = huge
    control.grid = (2**31 - 1, 1, 1)  # one grid-stride step (2^31 - 1) * by > n_outer: no row twice
    control.blocks = (0, -(-rows // by))
    got = cb.apply(x, pos, cfg)
    assert np.array_equal(bits(got), bits(want))


# -- a randomized sweep over shapes, strides and options ----------------------------------------------


@pytest.mark.parametrize("seed", range(12))
def test_random_layouts_match_the_oracle(host_cupy, seed) -> None:
    cb = host_cupy.cb
    rng = np.random.default_rng(100 + seed)
    dtype = DTYPES[seed % 3]
    head_dim = int(rng.choice([2, 8, 12, 64, 80]))
    rotary_dim = int(rng.choice(np.arange(2, head_dim + 1, 2)))
    cfg = RopeConfig(head_dim, layout=str(rng.choice(["half", "interleaved"])), rotary_dim=rotary_dim,
                     base=float(rng.choice([10000.0, 500000.0])))  # fmt: skip
    lead = [int(n) for n in rng.integers(1, 5, size=int(rng.integers(1, 5)))]
    steps = [int(s) for s in rng.integers(1, 3, size=len(lead))]
    extra = int(rng.integers(0, 3))
    raw = rng.standard_normal([n * s for n, s in zip(lead, steps, strict=True)] + [head_dim + extra])
    store = to_io(cb, raw.astype(np.float32), dtype)
    x = store[tuple(slice(None, None, s) for s in steps) + (slice(0, head_dim),)]
    pos_shape = [int(rng.choice([1, n])) for n in lead][int(rng.integers(0, len(lead) + 1)) :]
    pos = rng.integers(-100, 70000, size=pos_shape)
    inplace = bool(rng.integers(0, 2))
    xq = values(x)
    y = cb.apply(x, pos, cfg, inplace=inplace)
    judge("apply", cfg, xq, pos, values(y), dtype)
    assert np.array_equal(values(y)[..., rotary_dim:], xq[..., rotary_dim:])


# -- the conformance suite through the host-executed kernels ------------------------------------------


@pytest.fixture(scope="module")
def golden_cases():
    from shipped_golden import shipped_cases

    return shipped_cases()


_KERNEL_OPS = ("apply", "apply_vjp", "cos_sin", "chatglm_apply_2d")


@pytest.mark.parametrize("precision", ["fp32", "fp16", "bf16"])
@pytest.mark.parametrize("inplace", [False, True])
@pytest.mark.slow
def test_conformance_suite_on_the_host_kernels(host_cupy, golden_cases, precision, inplace) -> None:
    from rope_ref.conformance.runner import Runner

    cb = host_cupy.cb
    backend = cb.make_backend(precision, inplace=inplace)
    assert "host emulation" in backend.device
    runner = Runner(backend, spec="cupy (host emulation)", precision=precision)
    cases = [c for c in golden_cases if c.op in _KERNEL_OPS and c.tolerance != "emulation"]
    report = runner.run(cases)
    counts = report.counts()
    assert report.ok, report.failure_details()
    assert counts["passed"] == sum(runner.applies(c) for c in cases) > 0
    launched = {name for name, _, _ in host_cupy.control.log}
    assert launched == {plan_mod.KERNEL_FOR_DTYPE[backend.precision.io_dtype], "rope_cos_sin_f32"}
