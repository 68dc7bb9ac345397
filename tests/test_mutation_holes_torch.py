"""torch adapter behaviours that once survived a mutation run (issue 21): each test fails on that mutant.

Expected values: explicit rotations evaluated with mpmath, HF's dynamic-NTK base written out, and the
analytic derivative of RoFormer eq. 34 with respect to cos and sin. Inputs come from seeded NumPy
generators; nothing reads torch's global RNG.
"""

from __future__ import annotations

import mpmath
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed: the torch adapter is not checked")

from rope_ref.backends.torch import apply, rotate  # noqa: E402

from rope_ref import DynamicNTK, RopeConfig, YaRN  # noqa: E402

U64, U32 = 2.0**-53, 2.0**-24
DPS = 40


def mp_freqs(base: float, d: int) -> list:
    with mpmath.workdps(DPS):
        return [mpmath.power(mpmath.mpf(base), -mpmath.mpf(2 * i) / d) for i in range(d // 2)]


def mp_yarn_freqs(base: float, d: int, factor: float, l0: int) -> list:
    """HF YaRN inverse frequencies (beta_fast 32, beta_slow 1, truncate) in mpmath."""
    with mpmath.workdps(DPS):

        def corr(r: float):
            return d * mpmath.log(l0 / (r * 2 * mpmath.pi)) / (2 * mpmath.log(base))

        low, high = max(mpmath.floor(corr(32)), 0), min(mpmath.ceil(corr(1)), d - 1)
        out = []
        for i, theta in enumerate(mp_freqs(base, d)):
            ramp = min(max((i - low) / (high - low), 0), 1)
            out.append(theta / factor * ramp + theta * (1 - ramp))
        return out


def mp_rotate(x: np.ndarray, positions: np.ndarray, freqs: list, factor: float, layout: str) -> np.ndarray:
    """RoFormer eq. 34 row by row with cos/sin at 40 digits times the attention factor A."""
    n = len(freqs)
    out = x.copy()
    for row, m in enumerate(positions):
        for i, w in enumerate(freqs):
            a, b = (i, i + n) if layout == "half" else (2 * i, 2 * i + 1)
            with mpmath.workdps(DPS):
                c, s = factor * mpmath.cos(m * w), factor * mpmath.sin(m * w)
                out[row, a] = float(x[row, a] * c - x[row, b] * s)
                out[row, b] = float(x[row, b] * c + x[row, a] * s)
    return out


def bound(x: np.ndarray, positions: np.ndarray, freqs: list, factor: float, u: float) -> float:
    """Allowance for float angles of roundoff u: A |x| (16 u (1 + |m theta|_max))."""
    top = max(abs(float(m * w)) for m in positions for w in freqs)
    return abs(factor) * float(np.abs(x).max()) * 16 * u * (1 + top)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("factor", [0.5, 0.25])
@pytest.mark.parametrize("angle", ["float64", "float32"])
def test_attention_factor_below_one_scales_the_rotation(layout, factor, angle):
    cfg = RopeConfig(8, layout=layout, scaling=YaRN(4.0, 64, attention_factor=factor))
    freqs = mp_yarn_freqs(10000.0, 8, 4.0, 64)
    x = np.random.default_rng(21).standard_normal((5, 8))
    positions = np.array([0.0, 1.0, 7.0, 100.0, 513.0])
    angle_dtype = getattr(torch, angle)
    got = apply(torch.from_numpy(x), torch.from_numpy(positions), cfg, angle_dtype=angle_dtype).numpy()
    want = mp_rotate(x, positions, freqs, factor, layout)
    u = U64 if angle == "float64" else U32
    np.testing.assert_allclose(got, want, rtol=0, atol=bound(x, positions, freqs, factor, u))


@pytest.mark.parametrize("order", [[1000, 3], [3, 1000], [[7, 1000], [2, 5]]])
def test_dynamic_ntk_reads_the_largest_position_not_the_last(order):
    """HF dynamic_rope_update: seq_len = max(position_ids) + 1 = 1001 whatever the order."""
    d, base, factor, l0 = 8, 10000.0, 2.0, 64
    cfg = RopeConfig(d, layout="half", base=base, scaling=DynamicNTK(factor, l0))
    positions = np.array(order, dtype=np.float64)
    with mpmath.workdps(DPS):
        scaled = base * (1 + mpmath.mpf(factor) * (1001 - l0) / l0) ** (mpmath.mpf(d) / (d - 2))
    freqs = mp_freqs(scaled, d)
    x = np.random.default_rng(22).standard_normal(positions.shape + (d,))
    got = apply(torch.from_numpy(x), torch.from_numpy(positions), cfg, angle_dtype=torch.float64).numpy()
    flat_x, flat_p = x.reshape(-1, d), positions.reshape(-1)
    want = mp_rotate(flat_x, flat_p, freqs, 1.0, "half").reshape(x.shape)
    np.testing.assert_allclose(got, want, rtol=0, atol=bound(flat_x, flat_p, freqs, 1.0, U64))


def _table_grads(x: np.ndarray, w: np.ndarray, layout: str) -> tuple[np.ndarray, np.ndarray]:
    """d(sum w * y)/d cos and /d sin for eq. 34 with per-row half-width tables (written out)."""
    n = x.shape[-1] // 2
    a = np.arange(n) if layout == "half" else np.arange(0, 2 * n, 2)
    b = a + n if layout == "half" else a + 1
    d_cos = w[..., a] * x[..., a] + w[..., b] * x[..., b]
    d_sin = -w[..., a] * x[..., b] + w[..., b] * x[..., a]
    return d_cos, d_sin


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize("x_grad", [False, True])
def test_gradients_flow_to_learnable_cos_sin_tables(layout, x_grad):
    rng = np.random.default_rng(23)
    x = rng.standard_normal((6, 8))
    w = rng.standard_normal((6, 8))
    cos = torch.tensor(rng.standard_normal((6, 4)), requires_grad=True)
    sin = torch.tensor(rng.standard_normal((6, 4)), requires_grad=True)
    xt = torch.tensor(x, requires_grad=x_grad)
    y = rotate(xt, cos, sin, layout=layout)
    (y * torch.from_numpy(w)).sum().backward()
    assert cos.grad is not None and sin.grad is not None, "the tables got no gradient"
    want_cos, want_sin = _table_grads(x, w, layout)
    tol = 8 * U64 * (np.abs(x).max() * np.abs(w).max())
    np.testing.assert_allclose(cos.grad.numpy(), want_cos, rtol=0, atol=tol)
    np.testing.assert_allclose(sin.grad.numpy(), want_sin, rtol=0, atol=tol)


def test_table_gradients_pass_gradcheck_with_broadcast_tables():
    rng = np.random.default_rng(24)
    x = torch.tensor(rng.standard_normal((2, 3, 8)), requires_grad=True)
    cos = torch.tensor(rng.standard_normal((3, 4)), requires_grad=True)
    sin = torch.tensor(rng.standard_normal((3, 4)), requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, c, s: rotate(a, c, s, layout="half"), (x, cos, sin))
