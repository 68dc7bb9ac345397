"""Input conversion and validation shared by every oracle function.

The oracle always computes and answers in float64 NumPy. Every public function funnels its array
arguments through :func:`as_float64` / :func:`as_positions`, so the rules (which dtypes are accepted,
what counts as bad input, how errors are worded) live in one place.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ._interop import foreign_to_numpy

__all__ = [
    "POSITION_LIMIT",
    "as_float64",
    "as_positions",
    "to_numpy",
    "check_broadcast",
    "check_broadcast_shape",
]

#: Largest |position| the oracle accepts, integer or real: the exact argument reduction of
#: :mod:`rope_ref._exact_trig` is verified up to here (``docs/spec.md``, "Accuracy").
POSITION_LIMIT = 2**40


def to_numpy(obj: Any, name: str) -> np.ndarray:
    """Return ``obj`` as a NumPy array without changing its values.

    Accepts NumPy arrays, Python scalars and (nested) sequences. Raises ``TypeError`` naming
    ``name`` for anything NumPy cannot turn into a numeric array.
    """
    if isinstance(obj, (np.ma.MaskedArray, np.matrix)):
        kind = "masked array" if isinstance(obj, np.ma.MaskedArray) else "np.matrix"
        raise TypeError(
            f"{name} is a {kind}, which the oracle does not accept (a mask would be ignored, a matrix "
            "changes shapes); pass a plain ndarray (np.asarray / .filled())"
        )
    if isinstance(obj, np.ndarray):
        return obj
    foreign = foreign_to_numpy(obj, name)
    if foreign is not None:
        return foreign
    if isinstance(obj, (str, bytes)) or obj is None:
        raise TypeError(f"{name} must be a numeric array, got {type(obj).__name__} {obj!r:.60}")
    try:
        arr = np.asarray(obj)
    except (ValueError, TypeError, OverflowError) as exc:
        raise TypeError(f"{name} must be a numeric array, got {type(obj).__name__}: {exc}") from None
    return arr


def as_float64(obj: Any, name: str) -> np.ndarray:
    """Convert a real floating-point array to float64 (exactly; every float dtype embeds in float64).

    Integer, boolean, complex and non-numeric inputs raise ``TypeError``: rotating integers is
    almost always a caller bug (token ids passed where activations belong).
    """
    arr = to_numpy(obj, name)
    if arr.dtype.kind != "f":
        raise TypeError(f"{name} must be a real floating-point array, got dtype {arr.dtype}")
    _refuse_wider_than_float64(arr, name)
    return arr.astype(np.float64, copy=False)


def _refuse_wider_than_float64(arr: np.ndarray, name: str) -> None:
    if arr.dtype.itemsize > 8:
        raise TypeError(
            f"{name} has dtype {arr.dtype}, which float64 cannot hold exactly; convert it explicitly"
        )


def as_positions(obj: Any, name: str = "positions") -> np.ndarray:
    """Convert integer or real positions to float64, rejecting NaN, inf and inexact integers."""
    arr = to_numpy(obj, name)
    if arr.dtype == object and arr.size and all(
        isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in arr.flat
    ):
        _check_limit([int(v) for v in arr.flat], name)  # Python ints beyond int64 raise here
    if arr.dtype.kind in "iu":
        if arr.size:
            _check_limit([int(arr.min()), int(arr.max())], name)
        return arr.astype(np.float64)
    if arr.dtype.kind != "f":
        raise TypeError(f"{name} must be an integer or real floating-point array, got dtype {arr.dtype}")
    _refuse_wider_than_float64(arr, name)
    arr = arr.astype(np.float64, copy=False)
    if arr.size and not np.all(np.isfinite(arr)):
        bad = arr[~np.isfinite(arr)].flat[0]
        raise ValueError(f"{name} must be finite, got {bad}")
    if arr.size:
        _check_limit([float(arr.min()), float(arr.max())], name)
    return arr


def _check_limit(values: list, name: str) -> None:
    """One rule for integer and real positions: ``|p| <= POSITION_LIMIT``; the message names the value."""
    worst = max(values, key=abs)
    if abs(worst) > POSITION_LIMIT:
        raise ValueError(
            f"{name} must lie within +-2**40 = +-{POSITION_LIMIT} (the range over which the oracle's "
            f"argument reduction is exact), got {worst}"
        )


def check_broadcast(positions: np.ndarray, lead_shape: tuple[int, ...], name: str = "positions") -> None:
    """Require ``positions`` to broadcast *to* ``lead_shape`` (it may not enlarge it)."""
    check_broadcast_shape(positions.shape, lead_shape, name)


def check_broadcast_shape(shape: tuple[int, ...], lead: tuple[int, ...], name: str = "positions") -> None:
    """Require an array of shape ``shape`` (any array library's) to broadcast *to* ``lead``."""
    shape, lead = tuple(int(d) for d in shape), tuple(lead)
    try:
        joint = np.broadcast_shapes(shape, lead)
    except ValueError:
        joint = None
    if joint != lead:
        raise ValueError(f"{name} of shape {shape} does not broadcast against x.shape[:-1] = {lead}")


def check_input_ids(input_ids: Any) -> np.ndarray:
    """A ``(batch, seq)`` integer array of token ids, as int64 (ChatGLM and M-RoPE position ids)."""
    ids = to_numpy(input_ids, "input_ids")
    if ids.dtype.kind not in "iu":
        raise TypeError(f"input_ids must be an integer array of token ids, got dtype {ids.dtype}")
    if ids.ndim != 2:
        raise ValueError(f"input_ids must have shape (batch, seq), got shape {ids.shape}")
    return ids.astype(np.int64, copy=False)


def set_fields(obj: Any, **values: Any) -> None:
    """Set the fields of a frozen dataclass from its own validating ``__init__`` / ``__post_init__``."""
    for key, value in values.items():
        object.__setattr__(obj, key, value)


def check_int(value: Any, name: str, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """Validate a Python/NumPy integer argument (``bool`` is rejected), within the given bounds."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r:.60}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be <= {maximum}, got {value}")
    return value


def check_real(value: Any, name: str) -> float:
    """Validate a finite real scalar argument (``bool`` is rejected)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} {value!r:.60}")
    try:
        value = float(value)
    except OverflowError:
        digits = len(str(abs(int(value))))
        raise ValueError(f"{name} must be within the float64 range, got a {digits}-digit integer") from None
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    return value
