"""How rope_ref.decay splits its work into chunks under ``max_bytes`` (docs/decay.md): the shapes of the
cos/sin tables it builds per chunk, recorded by a spy, against the documented budget.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from rope_ref import RopeConfig, decay


@pytest.fixture
def chunks(monkeypatch):
    """Shapes of the ``cos_sin_of_product`` tables that rope_ref.decay builds, one entry per chunk, as
    ``(distances..., pairs)``: tables built pair axis first (theta of shape ``(n, 1, ...)``) are recorded
    with that axis moved last."""
    seen: list[tuple[int, ...]] = []
    real = decay.cos_sin_of_product

    def recording(m, theta):
        c, s = real(m, theta)
        seen.append(c.shape[1:] + c.shape[:1] if np.ndim(theta) > 1 else c.shape)
        return c, s

    monkeypatch.setattr(decay, "cos_sin_of_product", recording)
    return seen


def test_relative_upper_bound_chunks_stay_under_max_bytes(chunks):
    """docs/decay.md: "The work arrays of one chunk stay under max_bytes". Each chunk holds at least the
    cos and sin tables of its (rows, d/2) angles at once, so 2 * rows * (d/2) * 8 bytes <= max_bytes."""
    cfg = RopeConfig(64, layout="half")  # 32 pairs
    r = np.arange(3000.0)
    max_bytes = 1 << 16
    got = decay.relative_upper_bound(r, cfg, max_bytes=max_bytes)
    assert sum(shape[0] for shape in chunks) == r.size
    assert all(shape[1] == 32 for shape in chunks)
    assert all(2 * shape[0] * 32 * 8 <= max_bytes for shape in chunks), chunks[:3]
    # Chunking does not change any value: one big chunk gives the same bits.
    np.testing.assert_array_equal(got, decay.relative_upper_bound(r, cfg, max_bytes=1 << 40))


def test_relative_upper_bound_one_distance_per_chunk_when_budget_is_tiny(chunks):
    cfg = RopeConfig(8, layout="half")
    decay.relative_upper_bound(np.arange(5.0), cfg, max_bytes=1)
    assert [shape[0] for shape in chunks] == [1, 1, 1, 1, 1]


def test_default_budget_is_32_mib_and_fits_small_inputs_in_one_chunk(chunks):
    """1000 distances at d = 128: each (1000, 64) work array is 512 KiB, so even two dozen of them fit the
    documented default of 32 MiB: one chunk each for the bound, the Abel bound and the score curve."""
    assert decay.DEFAULT_MAX_BYTES == 32 * 2**20
    cfg = RopeConfig(128, layout="half")
    r = np.arange(1000.0)
    decay.relative_upper_bound(r, cfg)
    assert chunks == [(1000, 64)]
    chunks.clear()
    decay.score_curve(r, cfg)
    assert chunks == [(1000, 64)]
    chunks.clear()
    q = np.ones(128)
    decay.abel_bound(q, q, r, cfg)
    # abel_bound: one exact cos/sin per chunk serves both sides of eq. 37 (the exact sum and the bound).
    assert chunks == [(1000, 64)]


def test_abel_bound_chunks_stay_under_the_default_budget(chunks):
    """q of shape (128, 64) against 400 distances: lead (400, 128), 32 pairs, so 4096 angles per row. A
    chunk holds at least cos, sin and the two products h_re*c, h_im*s at once: 4 * rows * 4096 * 8 bytes
    must stay under 32 MiB, i.e. at most 256 rows per chunk, so 400 rows need two chunks or more."""
    cfg = RopeConfig(64, layout="interleaved")
    rng = np.random.default_rng(21)
    q = rng.standard_normal((128, 64))
    k = rng.standard_normal((128, 64))
    r = np.arange(400.0)[:, None] * 3.0
    got = decay.abel_bound(q, k, r, cfg)
    exact_chunks = [shape for shape in chunks if len(shape) == 3]
    assert sum(shape[0] for shape in exact_chunks) == 400
    assert all(shape[1:] == (128, 32) for shape in exact_chunks)
    assert all(4 * shape[0] * 128 * 32 * 8 <= decay.DEFAULT_MAX_BYTES for shape in exact_chunks), exact_chunks
    # Spot values against the explicit sum over pairs (eq. 37's left side), written out here.
    for row, col in [(0, 0), (399, 127), (200, 5)]:
        h = (q[col, 0::2] + 1j * q[col, 1::2]) * (k[col, 0::2] - 1j * k[col, 1::2])
        theta = 10000.0 ** (-np.arange(32) / 32)
        want = abs(sum(h[i] * complex(math.cos(r[row, 0] * theta[i]), math.sin(r[row, 0] * theta[i]))
                       for i in range(32)))
        assert got.exact[row, col] == pytest.approx(want, rel=1e-9, abs=1e-9)


def test_abel_bound_one_row_per_chunk_when_a_row_exceeds_the_budget(chunks):
    """A row of 6000 q/k pairs times 32 frequencies (1.5 MiB per work array, two dozen of them) already
    exceeds 32 MiB: chunks then hold one row each, never two."""
    cfg = RopeConfig(64, layout="half")
    q = np.ones((6000, 64))
    decay.abel_bound(q, q, np.array([[1.0], [2.0], [3.0]]), cfg)
    exact_chunks = [shape for shape in chunks if len(shape) == 3]
    assert [shape[0] for shape in exact_chunks] == [1, 1, 1]


def test_chunks_use_the_whole_budget_at_24_work_arrays_per_row(chunks):
    """Each distance row is budgeted as 24 float64 work arrays of d/2 entries (the trig kernel's
    temporaries included), and chunks are as large as that budget allows: no more chunks than needed."""
    cfg = RopeConfig(64, layout="half")  # 32 pairs: 24 * 8 * 32 = 6144 bytes per distance
    decay.relative_upper_bound(np.arange(25.0), cfg, max_bytes=6144 * 10)
    assert [shape[0] for shape in chunks] == [10, 10, 5]
    chunks.clear()
    cfg128 = RopeConfig(128, layout="half")  # 64 pairs: 32 MiB // (24 * 8 * 64) = 2730 distances
    decay.score_curve(np.arange(3000.0), cfg128)
    assert [shape[0] for shape in chunks] == [2730, 270]
    chunks.clear()
    # abel_bound: q (128, 64) gives 128 * 32 angles per distance row: 32 MiB // (24 * 8 * 4096) = 42 rows.
    q = np.ones((128, 64))
    decay.abel_bound(q, q, np.arange(100.0)[:, None], cfg)
    assert [shape[0] for shape in chunks if len(shape) == 3] == [42, 42, 16]
