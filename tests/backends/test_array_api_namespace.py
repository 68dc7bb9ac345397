"""The Array API backend's namespace helpers (``backends/_array_api_namespace.py``), each called directly:
the widest float per device, dtype names, the broadcasting rule, loading a namespace, devices."""

from __future__ import annotations

import numpy as np
import pytest
from rope_ref.backends import _array_api_namespace as ns

xps = pytest.importorskip("array_api_strict")


def test_host_dtypes():
    assert ns.HOST_DTYPES == {
        "float64": np.float64,
        "float32": np.float32,
        "float16": np.float16,
        "bfloat16": np.float32,  # NumPy has no bfloat16; float32 holds every bfloat16 exactly
    }


def test_widest_float_asks_the_device():
    assert ns.widest_float(xps) == xps.float64
    assert ns.widest_float(xps, xps.Device("device1")) == xps.float64
    assert ns.widest_float(xps, xps.Device("no_float64")) == xps.float32


class _NoFloats:
    """A namespace whose inspection API lists no real floating dtype."""

    __name__ = "nofloats"

    def __array_namespace_info__(self):
        return self

    def dtypes(self, kind=None, device=None):
        return {}


def test_widest_float_refuses_a_namespace_without_floats():
    with pytest.raises(ValueError, match="namespace nofloats has no float32 or float64 on device 'gpu9'"):
        ns.widest_float(_NoFloats(), "gpu9")


def test_dtype_named():
    np_xp, _ = ns.load_namespace("numpy")
    assert ns.dtype_named(np_xp, "float16", None) == np_xp.float16
    assert ns.dtype_named(np_xp, "bfloat16", None) is None  # NumPy has none
    assert ns.dtype_named(xps, "float16", None) is None  # not in the standard
    assert ns.dtype_named(xps, "float64", xps.Device("CPU_DEVICE")) == xps.float64
    assert ns.dtype_named(xps, "float64", xps.Device("no_float64")) is None
    assert ns.dtype_named(xps, "float32", xps.Device("no_float64")) == xps.float32
    torch = pytest.importorskip("torch")
    t_xp, _ = ns.load_namespace("torch")
    assert ns.dtype_named(t_xp, "bfloat16", None) == torch.bfloat16


@pytest.mark.parametrize(
    ("small", "big", "ok"),
    [
        ((), (2, 3), True),
        ((3,), (2, 3), True),
        ((2, 1), (2, 3), True),
        ((1, 3), (2, 3), True),
        ((2,), (2, 3), False),  # right-aligned: 2 meets 3
        ((4, 3), (1, 3), False),  # may not enlarge the target
        ((1, 2, 3), (2, 3), False),  # more axes than the target
        ((3, 2), (2, 3), False),
    ],
)
def test_broadcasts_to(small, big, ok):
    assert ns.broadcasts_to(small, big) is ok


def test_array_api_size():
    assert ns.array_api_size(np.zeros((2, 0, 3))) == 0
    assert ns.array_api_size(xps.ones((4, 5))) == 20


def test_load_namespace():
    xp, version = ns.load_namespace("array_api_strict")
    assert version == xps.__version__
    assert xp.__name__.startswith("array_api_strict")
    for bad in ("", None, 3):
        with pytest.raises(
            ValueError, match=f"namespace must be a module name such as 'array_api_strict', got {bad!r}"
        ):
            ns.load_namespace(bad)
    with pytest.raises(ValueError, match="module 'json' is not an array namespace \\(it has no asarray\\)"):
        ns.load_namespace("json")
    with pytest.raises(ImportError):
        ns.load_namespace("no_such_array_library_xyz")


def test_load_namespace_reads_the_version_of_the_top_package(monkeypatch):
    """A namespace module without ``__version__`` (``jax.numpy``) takes its package's."""
    import sys
    import types

    top = types.ModuleType("fakearrays")
    top.__version__ = "9.8.7"
    sub = types.ModuleType("fakearrays.numpy")
    sub.asarray = np.asarray
    monkeypatch.setitem(sys.modules, "fakearrays", top)
    monkeypatch.setitem(sys.modules, "fakearrays.numpy", sub)
    assert ns.load_namespace("fakearrays.numpy")[1] == "9.8.7"
    del top.__version__
    assert ns.load_namespace("fakearrays.numpy")[1] == "unknown"


def test_resolve_device():
    assert ns.resolve_device(xps, None) == xps.Device("CPU_DEVICE")
    assert ns.resolve_device(xps, "device2") == xps.Device("device2")
    assert ns.resolve_device(xps, "array_api_strict.Device('no_float64')") == xps.Device("no_float64")
    dev = xps.Device("device1")
    assert ns.resolve_device(xps, dev) is dev
    with pytest.raises(ValueError, match=r"device 'gpu' is not one of .*devices \[.*CPU_DEVICE.*\]"):
        ns.resolve_device(xps, "gpu")
