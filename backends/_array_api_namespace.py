"""Namespaces of the Array API backend: loading one by module name, its devices and floating dtypes.

Everything here asks the namespace itself (the inspection API ``__array_namespace_info__``), so a device
without float64 (Apple MPS, array-api-strict's ``no_float64``) gets float32 angles, and a library without
float16 / bfloat16 says so instead of failing later.
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np

__all__ = [
    "HOST_DTYPES",
    "array_api_size",
    "broadcasts_to",
    "dtype_named",
    "load_namespace",
    "resolve_device",
    "widest_float",
]


HOST_DTYPES = {"float64": np.float64, "float32": np.float32, "float16": np.float16, "bfloat16": np.float32}


def widest_float(xp: Any, device: Any = None) -> Any:
    """The widest real floating dtype ``xp`` offers on ``device``: float64 if available, else float32.

    Uses the inspection API (``xp.__array_namespace_info__().dtypes``), so a device without float64
    (Apple MPS, array-api-strict's ``no_float64``) gets float32 angles.
    """
    info = xp.__array_namespace_info__()
    kinds = info.dtypes(kind="real floating", device=device)
    if "float64" in kinds:
        return kinds["float64"]
    if "float32" in kinds:
        return kinds["float32"]
    raise ValueError(f"namespace {xp.__name__} has no float32 or float64 on device {device!r}")


def dtype_named(xp: Any, name: str, device: Any) -> Any:
    """The namespace's dtype object for a canonical name; ``None`` if the library lacks it."""
    if name in ("float16", "bfloat16"):
        # Not in the standard: libraries that have them (NumPy, torch, CuPy, JAX) use these names.
        return getattr(xp, name, None)
    return xp.__array_namespace_info__().dtypes(kind="real floating", device=device).get(name)


def array_api_size(x: Any) -> int:
    """Number of elements (``array_api_compat.size``: ``x.size`` may be ``None`` for lazy arrays)."""
    import array_api_compat

    return int(array_api_compat.size(x))


def broadcasts_to(small: tuple[int, ...], big: tuple[int, ...]) -> bool:
    """True when an array of shape ``small`` broadcasts *to* ``big`` (the standard's rules, right-aligned)."""
    if len(small) > len(big):
        return False
    return all(s in (1, b) for s, b in zip(reversed(small), reversed(big), strict=False))


def load_namespace(namespace: str) -> tuple[Any, str]:
    """Import ``namespace`` and return its Array API namespace (compat-wrapped when needed) and version."""
    import array_api_compat

    if not isinstance(namespace, str) or not namespace:
        raise ValueError(f"namespace must be a module name such as 'array_api_strict', got {namespace!r}")
    module = importlib.import_module(namespace)
    if not hasattr(module, "asarray"):
        raise ValueError(f"module {namespace!r} is not an array namespace (it has no asarray)")
    xp = array_api_compat.array_namespace(module.asarray(0.0))
    version = getattr(module, "__version__", None)
    if version is None:
        top = importlib.import_module(namespace.split(".")[0])
        version = getattr(top, "__version__", "unknown")
    return xp, str(version)


def resolve_device(xp: Any, device: Any) -> Any:
    """``None`` -> the namespace's default device; a string -> the listed device whose name matches."""
    info = xp.__array_namespace_info__()
    if device is None:
        return info.default_device()
    if not isinstance(device, str):
        return device
    for candidate in info.devices():
        text = str(candidate)
        if device in (text, repr(candidate)) or text.endswith(f"'{device}')"):
            return candidate
    names = [str(d) for d in info.devices()]
    raise ValueError(f"device {device!r} is not one of {xp.__name__}'s devices {names}")
