"""Conversion of other libraries' arrays (torch, CuPy, JAX, array-api-strict, ...) to NumPy.

The oracle always computes and answers in float64 NumPy. This module is the single door through
which a foreign array enters: :func:`foreign_to_numpy` moves it to host memory and hands back a
NumPy array holding *exactly* the same values, which :mod:`rope_ref._arrays` then widens to float64.

Rules:

* Recognition never imports a library. ``array_api_compat``'s ``is_*_array`` checks look the class
  up in ``sys.modules`` (a torch tensor can only exist if torch is already imported).
* Transfer goes through DLPack (``numpy.from_dlpack``), after ``.cpu()`` / ``to_device`` for device
  arrays; CuPy uses ``.get()`` and JAX its ``__array__`` (both copy device memory to the host).
* No silent precision loss: float16/32/64 and integers keep their dtype; bfloat16 becomes float32,
  which holds every bfloat16 value exactly. Complex arrays raise ``TypeError`` naming the type (the
  oracle rotates real channel pairs; a complex tensor is almost always a LLaMA ``freqs_cis``
  passed by mistake).
* Objects that are neither arrays, numbers nor sequences raise ``TypeError`` naming their type.
* Sparse, nested (ragged) and quantized torch tensors raise ``TypeError`` saying how to make them dense.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["foreign_to_numpy", "is_foreign_array"]

_ARRAY_PROTOCOLS = (
    "__array__",
    "__array_interface__",
    "__array_struct__",
    "__dlpack__",
    "__array_namespace__",
)


def _describe(obj: Any) -> str:
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


def is_foreign_array(obj: Any) -> bool:
    """True for a non-NumPy array that array-api-compat recognises or that speaks DLPack.

    Never imports torch, CuPy, JAX or array-api-strict.
    """
    if isinstance(obj, (np.ndarray, np.generic)):
        return False
    import array_api_compat

    return bool(array_api_compat.is_array_api_obj(obj) or hasattr(obj, "__dlpack__"))


def _reject_dtype(arr_dtype: Any, obj: Any, name: str) -> None:
    text = str(arr_dtype).lower()
    if "complex" in text:
        raise TypeError(
            f"{name} must be a real array, got a complex {_describe(obj)} (dtype {arr_dtype}); "
            "pass the real channel pairs instead"
        )


def _torch_to_numpy(t: Any, name: str) -> np.ndarray:
    import torch  # already imported: the object is a torch tensor

    _reject_dtype(t.dtype, t, name)
    if t.device.type == "meta":
        raise TypeError(f"{name} is a torch tensor on the 'meta' device, which holds no values")
    if getattr(t, "is_nested", False):
        raise TypeError(
            f"{name} is a nested torch tensor (ragged rows); pass one dense tensor per sequence "
            "(t.unbind()) or a padded one (t.to_padded_tensor(0.0))"
        )
    if t.is_quantized:
        raise TypeError(f"{name} is a quantized torch tensor ({t.dtype}); pass t.dequantize()")
    if t.layout != torch.strided:
        raise TypeError(f"{name} is a torch tensor with layout {t.layout}; pass a dense one (t.to_dense())")
    t = t.detach()
    if t.device.type != "cpu":
        t = t.to("cpu")
    if t.dtype == torch.bfloat16:
        t = t.to(torch.float32)  # exact: every bfloat16 is a float32 with the low 16 bits zero
    t = t.resolve_conj().resolve_neg()
    return np.from_dlpack(t.contiguous())


def _generic_to_numpy(obj: Any, name: str) -> np.ndarray:
    import array_api_compat

    dtype = getattr(obj, "dtype", None)
    _reject_dtype(dtype, obj, name)
    if array_api_compat.is_cupy_array(obj):
        arr = obj.get()
    elif array_api_compat.is_jax_array(obj):
        arr = np.asarray(obj)
    else:
        try:
            arr = np.from_dlpack(obj)
        except (BufferError, RuntimeError, TypeError, ValueError, AttributeError) as first:
            # Not on the host (or not DLPack at all): ask for a host copy, then try the other protocols.
            try:
                arr = np.from_dlpack(obj, device="cpu", copy=True)
            except (BufferError, RuntimeError, TypeError, ValueError, AttributeError):
                if not hasattr(obj, "__array__"):
                    raise TypeError(
                        f"{name}: cannot move {_describe(obj)} to host memory ({first})"
                    ) from None
                arr = np.asarray(obj)
    arr = np.asarray(arr)
    if arr.dtype.name == "bfloat16":  # ml_dtypes (JAX): widen exactly
        arr = arr.astype(np.float32)
    if arr.dtype.kind == "c":
        _reject_dtype(arr.dtype, obj, name)
    return arr


def foreign_to_numpy(obj: Any, name: str) -> np.ndarray | None:
    """Return ``obj`` as a NumPy array if it is another library's array, else ``None``.

    ``None`` means "not a foreign array": NumPy arrays, NumPy scalars, Python numbers and sequences
    are left to ``numpy.asarray``. Anything else that is not array-like raises ``TypeError``
    naming its type.
    """
    if isinstance(obj, (np.ndarray, np.generic, numbers.Number, str, bytes, range)) or obj is None:
        return None
    import array_api_compat

    if array_api_compat.is_torch_array(obj):
        return _torch_to_numpy(obj, name)
    if is_foreign_array(obj):
        return _generic_to_numpy(obj, name)
    if isinstance(obj, Sequence) or any(hasattr(obj, attr) for attr in _ARRAY_PROTOCOLS):
        return None
    raise TypeError(
        f"{name} must be a NumPy array, a Python sequence or an Array API array "
        f"(torch, CuPy, JAX, array-api-strict, ...), got {_describe(obj)}"
    )
