"""Independent derivations shared by the tests: RoFormer's frequencies, the explicit rotation matrix (eq. 13)
and the pair-by-pair rotation (eq. 34) at 40 digits with mpmath, their float64 error bounds, and the same
rotation as a plain ``math.cos``/``math.sin`` loop over given inverse frequencies."""

from __future__ import annotations

import math

import mpmath
import numpy as np

U64 = 2.0**-53
DPS = 40


def mp_default_freqs(base: float, rotary_dim: int) -> list[mpmath.mpf]:
    """theta_i = base^(-2i/d) at 40 digits (RoFormer eq. 15)."""
    with mpmath.workdps(DPS):
        return [
            mpmath.power(mpmath.mpf(base), -mpmath.mpf(2 * i) / rotary_dim) for i in range(rotary_dim // 2)
        ]


def mp_rotation(position: float, freqs: list, factor: float, head_dim: int, layout: str) -> np.ndarray:
    """The explicit block-diagonal R (RoFormer eq. 13) times the attention factor, rounded to float64."""
    n = len(freqs)
    r = np.eye(head_dim)
    with mpmath.workdps(DPS):
        for i, w in enumerate(freqs):
            a, b = (i, i + n) if layout == "half" else (2 * i, 2 * i + 1)
            ang = mpmath.mpf(position) * w
            c, s = float(factor * mpmath.cos(ang)), float(factor * mpmath.sin(ang))
            r[a, a], r[a, b], r[b, a], r[b, b] = c, -s, s, c
    return r


def rotation_tol(x: np.ndarray, position: float, freqs: list, factor: float) -> float:
    """Float64 bound for a rotated element: ``A |x| (8 u (1 + |m theta_max|))``."""
    top = max(abs(float(position * w)) for w in freqs)
    return abs(factor) * float(np.abs(x).max()) * 8 * U64 * (1 + top) + 1e-300


def _mp_theta(base: float, d: int) -> list:
    with mpmath.workdps(40):
        return [mpmath.power(mpmath.mpf(base), -mpmath.mpf(2 * i) / d) for i in range(d // 2)]


def _tables_key_args(n_pos: int, n_freq: int):
    pos = np.arange(float(n_pos))
    freqs = 10000.0 ** (-np.arange(n_freq) / n_freq)
    return pos, freqs


def _rotated_by_hand(x: np.ndarray, m: float, layout: str, rotary_dim: int | None = None) -> np.ndarray:
    """RoFormer eq. 34 pair by pair at 40 digits, base 10000, rounded once per element."""
    d = rotary_dim or x.shape[-1]
    n = d // 2
    out = np.array(x, dtype=np.float64)
    with mpmath.workdps(40):
        for i, w in enumerate(_mp_theta(10000.0, d)):
            a, b = (i, i + n) if layout == "half" else (2 * i, 2 * i + 1)
            c, s = mpmath.cos(m * w), mpmath.sin(m * w)
            xa, xb = mpmath.mpf(float(x[a])), mpmath.mpf(float(x[b]))
            out[a], out[b] = float(xa * c - xb * s), float(xb * c + xa * s)
    return out


def _close(got: np.ndarray, want: np.ndarray, m: float) -> None:
    tol = 8 * U64 * (1 + abs(m)) * float(np.abs(want).max() + 1)
    np.testing.assert_allclose(got, want, rtol=0, atol=tol)


def half_layout_loop(v, position, base=10000.0):
    """Half-layout RoPE of one vector by explicit loops: channel j pairs with j + len(v)/2."""
    n = len(v)
    out = list(v)
    for j in range(n // 2):
        theta = position * base ** (-2.0 * j / n)
        c, s = math.cos(theta), math.sin(theta)
        out[j] = v[j] * c - v[j + n // 2] * s
        out[j + n // 2] = v[j + n // 2] * c + v[j] * s
    return out


def loop_rotate(x: np.ndarray, positions, inv: list[float], layout: str = "half") -> np.ndarray:
    """RoFormer eq. 34 pair by pair in float64: rows of ``x`` (..., d) at ``positions`` (broadcast over
    x's leading axes), pair i turned by ``position * inv[i]`` with ``math.cos``/``math.sin``. The pairs are
    (i, i + n) for the half layout and (2i, 2i + 1) for the interleaved one, n = len(inv); channels from 2n
    on pass through."""
    n = len(inv)
    pos = np.broadcast_to(np.asarray(positions, dtype=np.float64), x.shape[:-1]).reshape(-1)
    rows = np.asarray(x, dtype=np.float64).reshape(-1, x.shape[-1])
    out = rows.copy()
    for r, m in enumerate(pos):
        for i, f in enumerate(inv):
            a, b = (i, i + n) if layout == "half" else (2 * i, 2 * i + 1)
            c, s = math.cos(m * f), math.sin(m * f)
            out[r, a] = rows[r, a] * c - rows[r, b] * s
            out[r, b] = rows[r, b] * c + rows[r, a] * s
    return out.reshape(x.shape)
