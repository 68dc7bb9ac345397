"""RoFormer's long-term decay bound in torch (``backends/_torch_decay.py``, RoFormer §3.4.3).

Expected values come from the definition written out here in float64 (``math``): the bound at ``r`` is
``(1/n) sum_{j=1}^{n} |sum_{i<j} e^{i r theta_i}|`` over the ``n = d/2`` pairs, ``theta_i = base^(-2i/d)``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import rope_ref
from rope_ref.scaling import DynamicNTK, YaRN

torch = pytest.importorskip("torch")
import rope_ref.backends.torch as rt  # noqa: E402  (after the torch availability check)


def bound(r: float, thetas: list[float]) -> float:
    """The definition, one partial sum at a time."""
    re = im = total = 0.0
    for theta in thetas:
        re += math.cos(r * theta)
        im += math.sin(r * theta)
        total += math.hypot(re, im)
    return total / len(thetas)


def thetas(d: int, base: float) -> list[float]:
    return [base ** (-2.0 * i / d) for i in range(d // 2)]


def test_decay_upper_bound():
    cfg = rope_ref.RopeConfig(128, layout="half")
    r = torch.tensor([0.0, 1.0, 50.0, 1000.0])
    got = rt.decay_upper_bound(r, cfg, dtype=torch.float64).numpy()
    assert got[0] == pytest.approx((64 + 1) / 2)  # every S_j = j at r = 0
    np.testing.assert_allclose(got, rope_ref.decay.relative_upper_bound(r.numpy(), cfg), rtol=1e-12)


def test_bound_is_the_definition_over_a_grid_of_distances():
    cfg = rope_ref.RopeConfig(16, layout="interleaved", base=500.0)
    r = torch.tensor([[0.0, 1.0, 7.0], [-7.0, 30.5, 250.0]])
    got = rt.decay_upper_bound(r, cfg, dtype=torch.float64)
    assert got.shape == (2, 3) and got.dtype == torch.float64
    want = [[bound(float(v), thetas(16, 500.0)) for v in row] for row in r.tolist()]
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-13, atol=0)
    assert got[0, 0].item() == pytest.approx(4.5, rel=1e-15)  # r = 0: (n + 1) / 2 with n = 8
    assert got[0, 2].item() == pytest.approx(got[1, 0].item(), rel=1e-14)  # |S_j(-r)| = |S_j(r)|


def test_dtype_is_the_requested_one():
    cfg = rope_ref.RopeConfig(8, layout="half")
    r = np.array([0, 3, 9])
    got32 = rt.decay_upper_bound(r, cfg)
    assert got32.dtype == torch.float32 and got32.device.type == "cpu"
    np.testing.assert_allclose(got32.numpy(), [bound(v, thetas(8, 10000.0)) for v in (0, 3, 9)], rtol=2e-6)
    assert rt.decay_upper_bound(r, cfg, dtype=torch.float64).dtype == torch.float64


def test_length_dependent_scaling_sees_the_largest_absolute_distance():
    """Dynamic NTK at L = max|r| + 1 = 301 > 64: base' = base (1 + 2 (L - 64) / 64)^(d/(d-2))."""
    d, base = 8, 10000.0
    cfg = rope_ref.RopeConfig(d, layout="half", base=base, scaling=DynamicNTK(2.0, 64))
    r = torch.tensor([-300.0, 5.0])
    scaled = base * (1 + 2.0 * (301 - 64) / 64) ** (d / (d - 2))
    want = [bound(v, thetas(d, scaled)) for v in (-300.0, 5.0)]
    np.testing.assert_allclose(rt.decay_upper_bound(r, cfg, dtype=torch.float64).numpy(), want, rtol=1e-12)
    # an explicit length wins: 40 is inside the trained 64, so the base is unchanged
    plain = [bound(v, thetas(d, base)) for v in (-300.0, 5.0)]
    got = rt.decay_upper_bound(r, cfg, seq_len=40, dtype=torch.float64).numpy()
    np.testing.assert_allclose(got, plain, rtol=1e-12)


def test_attention_factor_does_not_scale_the_bound():
    """The bound is of the unit phases e^{i r theta}: YaRN's attention factor (0.25 here) never enters.
    At r = 0 it is (n + 1) / 2 whatever the frequencies."""
    cfg = rope_ref.RopeConfig(8, layout="half", scaling=YaRN(4.0, 64, attention_factor=0.25))
    assert rt.decay_upper_bound(torch.tensor([0.0]), cfg, dtype=torch.float64).item() == pytest.approx(2.5)


def test_bad_distances_name_the_argument():
    cfg = rope_ref.RopeConfig(8, layout="half")
    with pytest.raises(ValueError, match="distances must be finite, got nan"):
        rt.decay_upper_bound(torch.tensor([1.0, math.nan]), cfg)
    with pytest.raises(TypeError, match="distances must be integer or real positions, got dtype torch.bool"):
        rt.decay_upper_bound(torch.tensor([True]), cfg)


def test_empty_distances_and_the_distances_device():
    """No distances: an empty bound (a length-dependent scaling has no max to read); the result lives on
    the distances' device ("meta" stands in for a GPU), CPU for host input."""
    ntk = rope_ref.RopeConfig(8, layout="half", scaling=DynamicNTK(2.0, 64))
    empty = rt.decay_upper_bound(torch.zeros(0, dtype=torch.float64), ntk, dtype=torch.float64)
    assert empty.shape == (0,) and empty.dtype == torch.float64
    meta = rt.decay_upper_bound(torch.zeros(2, 0, device="meta", dtype=torch.int64), ntk)  # no max to read
    assert meta.device.type == "meta" and meta.shape == (2, 0) and meta.dtype == torch.float32
    assert rt.decay_upper_bound([1.0, 2.0], rope_ref.RopeConfig(8, layout="half")).device.type == "cpu"


def test_fractional_distances_use_the_floor_and_the_rotary_width():
    """L = floor(max|r|) + 1 = 301 for r = 300.75; d is rotary_dim (8 of a head of 12), not head_dim."""
    d, base = 8, 10000.0
    cfg = rope_ref.RopeConfig(12, layout="half", rotary_dim=d, scaling=DynamicNTK(2.0, 64))
    r = torch.tensor([300.75, -2.5], dtype=torch.float64)
    scaled = base * (1 + 2.0 * (301 - 64) / 64) ** (d / (d - 2))
    want = [bound(v, thetas(d, scaled)) for v in (300.75, -2.5)]
    np.testing.assert_allclose(rt.decay_upper_bound(r, cfg, dtype=torch.float64).numpy(), want, rtol=1e-12)


def test_float32_table_is_the_rounded_float64_one():
    """dtype=float32: the frequencies rounded once from float64, angles and sums in float32 (agrees with
    the float64 definition to float32 accuracy, not to float64 accuracy)."""
    cfg = rope_ref.RopeConfig(16, layout="interleaved", base=77.0)
    r = torch.tensor([3.0, 41.0, 900.0])
    got = rt.decay_upper_bound(r, cfg, dtype=torch.float32)
    want = np.array([bound(v, thetas(16, 77.0)) for v in (3.0, 41.0, 900.0)])
    assert got.dtype == torch.float32
    np.testing.assert_allclose(got.numpy(), want, rtol=5e-5)
    assert not np.array_equal(got.double().numpy(), want)
