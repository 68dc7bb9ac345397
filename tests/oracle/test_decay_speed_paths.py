"""``decay.abel_bound`` computes each chunk's exact cos/sin once for both sides of eq. 37; same bits.

When q and k add no axis to the distances (one q/k pair, or q/k leads that broadcast into the distances'
shape), the bound side reuses the exact side's cos/sin tables instead of calling ``relative_upper_bound``.
Its value must stay ``max_step * (d/2) * relative_upper_bound(r)`` bit for bit, whichever path runs.
"""

from __future__ import annotations

import numpy as np
import pytest

from rope_ref import DynamicNTK, RopeConfig, YaRN, decay, inv_freq
from rope_ref._exact_trig import cos_sin_of_product

CONFIGS = [
    RopeConfig(128, layout="half"),
    RopeConfig(64, layout="interleaved", base=5e5),
    RopeConfig(48, layout="half", rotary_dim=32),
    RopeConfig(64, layout="half", scaling=YaRN(8, 1024)),
    RopeConfig(32, layout="interleaved", scaling=DynamicNTK(4, 256)),
]
DISTANCES = np.concatenate([np.arange(2000.0), [-3.5, 1e6, 0.25, -0.0, 123456.75, -77.0]])


def _max_step(q, k, cfg):
    h_re, h_im = decay._pair_products(q, k, cfg)
    d_re = np.concatenate([h_re[..., 1:], np.zeros_like(h_re[..., :1])], axis=-1) - h_re
    d_im = np.concatenate([h_im[..., 1:], np.zeros_like(h_im[..., :1])], axis=-1) - h_im
    return np.max(np.sqrt(d_re * d_re + d_im * d_im), axis=-1)


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"{c.layout}-{c.head_dim}-{c.scaling}")
def test_shared_tables_give_the_bound_of_relative_upper_bound_bit_for_bit(cfg):
    q, k = np.random.default_rng(5).standard_normal((2, cfg.head_dim))
    got = decay.abel_bound(q, k, DISTANCES, cfg)
    n = cfg.rotary_dim // 2
    dynamic = cfg.scaling is not None and cfg.scaling.length_dependent
    seq_len = int(np.floor(np.abs(DISTANCES).max())) + 1 if dynamic else None
    want = _max_step(q, k, cfg) * (n * decay.relative_upper_bound(DISTANCES, cfg, seq_len=seq_len))
    assert got.bound.tobytes() == want.tobytes()
    assert np.all(got.exact <= got.bound * (1 + 1e-12) + 1e-12)


@pytest.mark.parametrize("cfg", CONFIGS[:3], ids=lambda c: f"{c.layout}-{c.head_dim}")
def test_shared_and_separate_paths_agree_bit_for_bit(cfg, monkeypatch):
    """q of shape (3, d) against distances (N, 1) adds an axis (separate path); each column must equal the
    single-pair call (shared path) for that q row, on both sides, also with chunks of a few rows."""
    rng = np.random.default_rng(9)
    q = rng.standard_normal((3, cfg.head_dim))
    k = rng.standard_normal(cfg.head_dim)
    r = DISTANCES[:700]
    separate = decay.abel_bound(q, k, r[:, None], cfg)
    assert separate.exact.shape == (700, 3)
    for budget in (decay.DEFAULT_MAX_BYTES, 64 * 1024):
        monkeypatch.setattr(decay, "DEFAULT_MAX_BYTES", budget)
        for row in range(3):
            single = decay.abel_bound(q[row], k, r, cfg)
            assert single.exact.tobytes() == np.ascontiguousarray(separate.exact[:, row]).tobytes()
            assert single.bound.tobytes() == np.ascontiguousarray(separate.bound[:, row]).tobytes()


def test_each_chunk_computes_its_tables_once_when_q_and_k_add_no_axis(monkeypatch):
    seen = []
    real = decay.cos_sin_of_product

    def recording(m, theta):  # the table's shape as (distances..., pairs), whichever axis comes first
        shape = np.broadcast_shapes(np.shape(m), np.shape(theta))
        seen.append(shape[1:] + shape[:1] if np.ndim(theta) > 1 else shape)
        return real(m, theta)

    monkeypatch.setattr(decay, "cos_sin_of_product", recording)
    cfg = RopeConfig(64, layout="half")
    q, k = np.random.default_rng(1).standard_normal((2, 64))
    decay.abel_bound(q, k, np.arange(5000.0), cfg)
    assert sum(shape[0] for shape in seen) == 5000  # every distance once, not twice
    seen.clear()
    # Leads that broadcast into the distances' shape share too: (4, 1, d) q against (4, 6) distances.
    decay.abel_bound(np.ones((4, 1, 64)), np.ones(64), np.arange(24.0).reshape(4, 6), cfg)
    assert sum(int(np.prod(shape[:-1])) for shape in seen) == 24
    seen.clear()
    # q with its own axis: the bound side runs over the 30 distances, the exact side over 30 x 2 angles rows.
    decay.abel_bound(np.ones((2, 64)), np.ones(64), np.arange(30.0)[:, None], cfg)
    assert sorted(int(np.prod(shape[:-1])) for shape in seen) == [30, 60]


def test_scalar_distance_and_broadcast_leads_keep_their_shapes():
    cfg = RopeConfig(16, layout="interleaved")
    q, k = np.random.default_rng(2).standard_normal((2, 16))
    one = decay.abel_bound(q, k, 12.5, cfg)
    assert one.exact.shape == () and one.bound.shape == ()
    many = decay.abel_bound(q, k, np.array([12.5]), cfg)
    assert one.exact.tobytes() == many.exact.tobytes() and one.bound.tobytes() == many.bound.tobytes()
    grid = decay.abel_bound(np.ones((4, 1, 16)), k, np.arange(24.0).reshape(4, 6), cfg)
    assert grid.exact.shape == grid.bound.shape == (4, 6)


def _tree_sum(values: list[float]) -> float:
    """rope_ref._fixed's documented pairwise tree, written out: element i + h added to element i."""
    while len(values) > 1:
        h = (len(values) + 1) // 2
        values = [values[i] + values[i + h] if i + h < len(values) else values[i] for i in range(h)]
    return values[0]


@pytest.mark.parametrize("cfg", CONFIGS[:2], ids=lambda c: f"{c.layout}-{c.head_dim}")
def test_partial_sums_run_in_pair_order_bit_for_bit(cfg):
    """RoFormer 3.4.3: S_j = sum_{i<j} e^{i r theta_i}, added left to right (S_j = S_{j-1} + e_j), then the
    mean of |S_j| over j by the pairwise tree. Written as Python loops over the oracle's exact cos/sin."""
    r = np.array([0.0, 1.0, 7.0, 1000.0, -33.5, 65535.0])
    theta = inv_freq(cfg)
    cos, sin = cos_sin_of_product(r[:, None], theta)
    want = []
    for row in range(r.size):
        re = im = 0.0
        norms = []
        for j in range(theta.size):
            re, im = re + float(cos[row, j]), im + float(sin[row, j])
            norms.append(float(np.sqrt(re * re + im * im)))
        want.append(_tree_sum(norms) / theta.size)
    got = decay.relative_upper_bound(r, cfg)
    assert got.tobytes() == np.array(want).tobytes()
    bound = decay.abel_bound(np.ones(cfg.head_dim), np.ones(cfg.head_dim), r, cfg).bound
    ones = np.ones(cfg.head_dim)
    assert bound.tobytes() == (_max_step(ones, ones, cfg) * (theta.size * got)).tobytes()
