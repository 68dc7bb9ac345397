"""The CuPy backend's kernels run on the CPU, shared by its host-emulation tests: the shipped
``backends/rope_kernels.cu`` compiled by g++ through a driver of ``tests/cuda_host/``, NumPy standing in for
``cupy``, and allocations fenced by signalling-NaN guards that must come back untouched."""

from __future__ import annotations

import contextlib
import ctypes
import math
import shutil
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
from rope_ref.backends import _cupy_plan as plan_mod

HERE = Path(__file__).resolve().parents[1] / "cuda_host"
SOURCE = Path(plan_mod.__file__).with_name("rope_kernels.cu")
GUARD = 64
#: Signalling-NaN bit patterns per item size, planted in fresh allocations and around them.
NAN_BITS = {2: 0x7FDA, 4: 0x7FA5A5A5, 8: 0x7FF4A5A5A5A5A5A5}
FLAGS = ["-std=c++14", "-O2", "-Wall", "-Wextra", "-Werror", "-Wno-unknown-pragmas", "-shared", "-fPIC"]


def compile_driver(
    tmp_path_factory, driver: str, launchers: tuple[str, ...], timeout: int = 180
) -> ctypes.CDLL:
    """``tests/cuda_host/<driver>`` (which includes the shipped rope_kernels.cu) as a shared library, with
    the argument types of its ``launchers`` (kernel name, grid, block, args, and three scalars) set."""
    cxx = shutil.which("g++")
    if cxx is None:
        pytest.skip("g++ not found: the host emulation compiles rope_kernels.cu as C++ with g++")
    stem = Path(driver).stem
    so = tmp_path_factory.mktemp(f"cuda_host_{stem}") / f"lib{stem}.so"
    cmd = [cxx, *FLAGS, f"-I{HERE}", f"-I{SOURCE.parent}", "-o", str(so), str(HERE / driver)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{' '.join(cmd)}\n{result.stdout}\n{result.stderr}"
    h = ctypes.CDLL(str(so))
    u32x3 = ctypes.POINTER(ctypes.c_uint)
    for name in launchers:
        fn = getattr(h, name)
        fn.argtypes = [ctypes.c_char_p, u32x3, u32x3, ctypes.POINTER(ctypes.c_void_p),
                       ctypes.c_ulonglong, ctypes.c_ulonglong, ctypes.c_int]  # fmt: skip
        fn.restype = ctypes.c_int
    return h


def guarded_empty(guards: list):
    """``cupy.empty`` for the emulation: NaN-filled, with GUARD items of NaN on each side recorded in
    ``guards`` as (bits, bits before) for :func:`check_guards`."""

    def empty(shape, dtype=np.float64):
        dtype = np.dtype(dtype)
        n = math.prod(shape) if isinstance(shape, tuple) else int(shape)
        raw = {2: np.uint16, 4: np.uint32, 8: np.uint64}[dtype.itemsize]
        bits = np.full(n + 2 * GUARD, NAN_BITS[dtype.itemsize], dtype=raw)
        guards.append((bits, bits.copy()))
        return bits.view(dtype)[GUARD : GUARD + n].reshape(shape)

    return empty


def check_guards(guards: list) -> None:
    """Nothing was written outside any array that :func:`guarded_empty` handed out."""
    for bits, before in guards:
        assert np.array_equal(bits[:GUARD], before[:GUARD]), "write before the start of an output"
        assert np.array_equal(bits[-GUARD:], before[-GUARD:]), "write past the end of an output"


def fake_cupy(empty, raw_module, name: bytes = b"host emulation of rope_kernels.cu") -> types.ModuleType:
    """A ``cupy`` module made of NumPy, one device called ``name``, ``empty`` and ``raw_module``."""
    fake = types.ModuleType("cupy")
    fake.__getattr__ = lambda attr: getattr(np, attr)  # type: ignore[attr-defined]
    fake.__version__ = "host-emulation"
    fake.ndarray, fake.asnumpy, fake.empty, fake.RawModule = np.ndarray, np.asarray, empty, raw_module
    fake.cuda = types.SimpleNamespace(
        runtime=types.SimpleNamespace(
            getDevice=lambda: 0, getDeviceCount=lambda: 1, getDeviceProperties=lambda d: {"name": name}
        )
    )
    return fake


def to_io(cb, x: np.ndarray, dtype: str):
    """A new backend array of ``dtype`` holding ``x`` rounded to it (Bf16Array for bfloat16)."""
    return cb.Bf16Array.from_numpy(x) if dtype == "bfloat16" else np.array(x, dtype=dtype, order="C")


def values(y) -> np.ndarray:
    """float64 values of a backend array."""
    with np.errstate(invalid="ignore"):  # signalling NaNs planted in outputs a kernel must not touch
        return (y.to_numpy() if hasattr(y, "bits") else np.asarray(y)).astype(np.float64)


def bits(y) -> np.ndarray:
    a = y.bits if hasattr(y, "bits") else np.asarray(y)
    return a.view(np.uint32 if a.dtype.itemsize == 4 else np.uint16)


def check_arg(where: str, decl: str, value, pointers: dict, storage) -> None:
    """One launch argument against its C declaration ``decl``: a pointer is an ndarray of the element
    type (``pointers`` maps C element names to dtypes, ``storage`` is the I/O dtype's), a shape struct
    is the planner's record, a scalar the exact NumPy scalar type."""
    if "*" in decl:
        assert isinstance(value, np.ndarray), f"{where}: got {type(value).__name__}"
        elem = decl.split("*")[0].replace("const", "").strip()
        want = pointers.get(elem, storage)
        assert value.dtype == want, f"{where}: got {value.dtype}, expected {np.dtype(want)}"
    elif "RopeQkvShape" in decl:
        assert isinstance(value, np.void) and value.dtype == plan_mod.qkv_shape_struct_dtype(), where
    elif "RopeShape" in decl:
        assert isinstance(value, np.void) and value.dtype == plan_mod.shape_struct_dtype(), where
    else:
        want = {"int": np.int32, "float": np.float32, "i64": np.int64}[decl.replace("const", "").split()[0]]
        assert type(value) is want, f"{where}: got {type(value).__name__}"


def host_launch(entry, name: str, grid, block, args, reverse: bool) -> None:
    """Call a driver's launch ``entry`` as cuLaunchKernel is called: an array of pointers to the values."""
    keep = [ctypes.c_void_p(v.ctypes.data) if isinstance(v, np.ndarray)
            else ctypes.create_string_buffer(v.tobytes(), len(v.tobytes())) for v in args]  # fmt: skip
    ptrs = (ctypes.c_void_p * len(keep))(*[ctypes.addressof(k) for k in keep])
    rc = entry(name.encode(), (ctypes.c_uint * 3)(*grid), (ctypes.c_uint * 3)(*[int(b) for b in block]),
               ptrs, 0, 2**64 - 1, int(reverse))  # fmt: skip
    assert rc == 0, f"unknown kernel {name}"


@contextlib.contextmanager
def emulated_cupy(monkeypatch, get_function, caches=()):
    """NumPy as ``cupy`` for the duration, its RawModule (of the shipped source only) handing out
    ``get_function(name)``; ``caches`` cleared before and after; the allocation guards checked at the end."""
    guards: list[tuple[np.ndarray, np.ndarray]] = []

    def raw_module(code: str, options=()):
        assert code == SOURCE.read_text(encoding="utf-8") and "--std=c++14" in options
        return types.SimpleNamespace(get_function=get_function)

    monkeypatch.setitem(sys.modules, "cupy", fake_cupy(guarded_empty(guards), raw_module))
    for c in caches:
        c.cache_clear()
    yield
    for c in caches:
        c.cache_clear()
    check_guards(guards)
