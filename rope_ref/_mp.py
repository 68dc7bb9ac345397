"""Arbitrary-precision evaluation for the oracle's tables, correctly rounded to float64.

Every frequency table and attention factor is a short formula in ``exp``, ``ln``, ``sqrt`` and the
four operations, applied to float64 inputs. NumPy's and the C library's transcendental functions are
not correctly rounded and differ between CPU feature levels (for example ``np.power(1e6, -10/128)``
on AVX-512), so the oracle evaluates these formulas with mpmath at :data:`PRECISION_BITS` bits and
rounds once, to nearest. The result is the correctly rounded float64 of the exact formula except when
the exact value lies within about ``2**-190`` (relative) of a rounding boundary, which no table in the
catalogue comes near. mpmath is pure Python and deterministic (with or without its optional gmpy2
backend, which only speeds up the integer arithmetic), so the bits are the same on every machine.

mpmath is imported lazily, the first time a table is built, through a private context: a caller who
changes ``mpmath.mp.dps`` does not change the oracle.
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["PRECISION_BITS", "ctx", "to_float", "to_float32", "exact"]

#: Working precision of the private mpmath context (bits).
PRECISION_BITS = 256


@functools.lru_cache(maxsize=1)
def ctx() -> Any:
    """The oracle's private mpmath context, at :data:`PRECISION_BITS` bits, rounding to nearest."""
    import mpmath

    context = mpmath.MPContext()
    context.prec = PRECISION_BITS
    return context


def exact(value: float) -> Any:
    """The float64 ``value`` as an mpmath number (exactly: every float64 is a dyadic rational)."""
    return ctx().mpf(float(value))


def to_float(value: Any) -> float:
    """``value`` (an mpmath number) rounded to the nearest float64 (ties to even).

    Overflow raises ``OverflowError``: the oracle never returns an infinity it did not get as input.
    """
    out = float(value)
    if out in (float("inf"), float("-inf")):
        raise OverflowError(f"the value {ctx().nstr(value, 8)} overflows float64")
    return out


def to_float32(value: Any) -> float:
    """``value`` rounded once to the nearest float32 (returned as the Python float holding it exactly)."""
    from mpmath.libmp import mpf_pos

    return float(ctx().make_mpf(mpf_pos(value._mpf_, 24, "n")))
