"""The table caches of ``rope_ref.apply`` change its speed, never its bits.

Long ``arange``-like positions are served from a prefix table per configuration (``rotation._PrefixTables``);
everything else from the exact tables built for the call or the small LRU cache. These tests compare the
served results bit for bit with the caches turned off, check that only non-negative integer runs take the
prefix path, that the size setting is validated, and that concurrent callers get the same bits.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import rope_ref
from rope_ref import RopeConfig, YaRN, rotation


@pytest.fixture(autouse=True)
def fresh_caches():
    """Every test starts with empty caches at the default sizes and leaves them so."""
    previous = rotation.set_table_cache_bytes()
    yield
    rotation.set_table_cache_bytes(cache_bytes=previous[0], prefix_bytes=previous[1])


def _uncached(x, pos, cfg, **kw):
    """``apply`` with both caches off: every call builds the tables of its own positions."""
    kept = rotation._TABLE_CACHE, rotation._PREFIX_TABLES
    rotation._TABLE_CACHE, rotation._PREFIX_TABLES = rotation._TableCache(0), rotation._PrefixTables(0)
    try:
        return rope_ref.apply(x, pos, cfg, **kw)
    finally:
        rotation._TABLE_CACHE, rotation._PREFIX_TABLES = kept


def _same_bits(a, b):
    return a.shape == b.shape and a.tobytes() == b.tobytes()


CONFIGS = [
    RopeConfig(64, layout="half"),
    RopeConfig(64, layout="interleaved"),
    RopeConfig(48, layout="half", rotary_dim=32, base=5e5),
    RopeConfig(32, layout="interleaved", scaling=YaRN(4, 1024)),  # attention factor != 1: no zero mask
]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"{c.layout}-{c.head_dim}-{c.rotary_dim}-{c.scaling}")
def test_prefix_served_positions_equal_freshly_built_tables(cfg):
    # A small cache budget pushes 300 positions past the LRU cache (a quarter of 64 KiB) to the prefix path.
    rotation.set_table_cache_bytes(cache_bytes=64 * 2**10)
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 900, 6, cfg.head_dim))
    x[0, 0, :, 0] = -0.0  # position 0 keeps a signed zero bit for bit
    x[0, 5, 1, :] = 0.0
    calls = [(0, 300), (0, 200), (100, 300), (0, 700), (650, 250), (1, 899)]  # build, views, growths
    for p0, count in calls:
        pos = np.arange(p0, p0 + count, dtype=np.float64)[:, None]
        xs = x[:, :count]
        got = rope_ref.apply(xs, pos, cfg)
        assert _same_bits(got, _uncached(xs, pos, cfg)), (p0, count)
        assert _same_bits(rope_ref.apply(xs, pos, cfg, inverse=True), _uncached(xs, pos, cfg, inverse=True))
    assert len(rotation._PREFIX_TABLES._items) == 1  # one table for the configuration, grown in place
    assert len(rotation._TABLE_CACHE._items) == 0
    rows = rotation._PREFIX_TABLES._items[next(iter(rotation._PREFIX_TABLES._items))][0].shape[0]
    assert rows >= 900


def test_prefix_tables_are_the_exact_tables_of_their_positions():
    """Every row of a prefix table equals cos/sin of its position from ``rope_ref.cos_sin`` bit for bit."""
    cfg = RopeConfig(16, layout="half")
    prefix = rotation._PrefixTables(1 << 20)
    pos = np.arange(500.0)
    view = prefix.get(pos, rope_ref.inv_freq(cfg), 1.0, "half")
    cos, sin = rope_ref.cos_sin(pos, cfg)
    assert _same_bits(view.parts[0], np.concatenate([cos, cos], axis=-1))
    assert _same_bits(view.parts[1], np.concatenate([sin, -sin], axis=-1))
    assert not view.parts[0].flags.writeable
    assert view.zero[0, 0] and not view.zero[1:].any()


@pytest.mark.parametrize(
    "positions",
    [
        np.arange(-5.0, 995.0),  # negative start
        np.arange(0.0, 500.0, 0.5),  # fractional
        np.arange(0.5, 1000.5),  # fractional start, unit step
        np.concatenate([[-0.0], np.arange(1.0, 1000.0)]),  # -0.0: its sine keeps the sign
        np.arange(1000.0)[::-1].copy(),  # descending
        np.concatenate([np.arange(500.0), np.arange(501.0, 1001.0)]),  # a gap
    ],
    ids=["negative", "half-steps", "fractional-start", "minus-zero", "descending", "gap"],
)
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_other_positions_never_take_the_prefix_path(positions, layout):
    cfg = RopeConfig(32, layout=layout)
    assert rotation._PrefixTables.run_start(positions[:, None]) is None
    rotation.set_table_cache_bytes(cache_bytes=16 * 2**10)
    x = np.random.default_rng(3).standard_normal((positions.size, 5, 32))
    x[0, :, 1] = -0.0
    with np.errstate(invalid="ignore"):
        got = rope_ref.apply(x, positions[:, None], cfg)
        want = _uncached(x, positions[:, None], cfg)
    assert _same_bits(got, want)
    assert len(rotation._PREFIX_TABLES._items) == 0


def test_run_start_accepts_only_non_negative_integer_runs_along_one_axis():
    run_start = rotation._PrefixTables.run_start
    assert run_start(np.arange(10.0)) == 0
    assert run_start(np.arange(7.0, 17.0)[:, None, None]) == 7
    assert run_start(np.arange(3.0, 13.0)[None, :, None]) == 3
    assert run_start(np.array([[5.0]])) == 5
    assert run_start(np.array([0.0])) == 0
    assert run_start(np.array([-0.0])) is None
    assert run_start(np.zeros((2, 3))) is None  # two axes longer than 1
    assert run_start(np.empty((0, 1))) is None
    assert run_start(np.array([np.nan, 1.0])) is None
    assert run_start(np.array([np.inf])) is None


def test_prefix_table_refuses_what_exceeds_its_budget_or_costs_more_than_the_call():
    freqs = rope_ref.inv_freq(RopeConfig(16, layout="half"))  # 8 pairs: 256 bytes per position
    prefix = rotation._PrefixTables(256 * 100)
    assert prefix.get(np.arange(101.0), freqs, 1.0, "half") is None
    assert prefix.get(np.arange(100.0), freqs, 1.0, "half") is not None
    assert prefix._bytes == 256 * 100
    # Rows 0..99 exist: positions 70..79 are a view of them; 90..109 would need more than the budget.
    assert prefix.get(np.arange(70.0, 80.0), freqs, 1.0, "half") is not None
    assert prefix.get(np.arange(90.0, 110.0), freqs, 1.0, "half") is None
    assert prefix.get(np.arange(2.0**39, 2.0**39 + 50), freqs, 1.0, "half") is None  # far past the budget
    # A run far from the start would build more than twice its own rows: refused.
    far = rotation._PrefixTables(1 << 20)
    assert far.get(np.arange(300.0, 400.0), freqs, 1.0, "half") is None
    assert far.get(np.arange(100.0, 200.0), freqs, 1.0, "half") is not None
    # Least recently used configurations are dropped to make room.
    two = rotation._PrefixTables(256 * 150)
    two.get(np.arange(100.0), freqs, 1.0, "half")
    two.get(np.arange(100.0), freqs, 1.0, "interleaved")
    assert len(two._items) == 1 and two._bytes <= two.max_bytes


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"cache_bytes": -1}, ValueError, "cache_bytes must be >= 0 bytes, got -1"),
        ({"prefix_bytes": -5}, ValueError, "prefix_bytes must be >= 0 bytes, got -5"),
        ({"prefix_bytes": 1.5}, TypeError, "prefix_bytes must be an int number of bytes, got float 1.5"),
        ({"cache_bytes": True}, TypeError, "cache_bytes must be an int number of bytes, got bool True"),
        ({"cache_bytes": "64"}, TypeError, "cache_bytes must be an int number of bytes, got str '64'"),
    ],
)
def test_cache_size_setting_is_validated_with_one_line_errors(kwargs, error, message):
    before = (rotation._TABLE_CACHE_BYTES, rotation._PREFIX_TABLE_BYTES)
    with pytest.raises(error) as info:
        rotation.set_table_cache_bytes(**kwargs)
    assert str(info.value) == message and "\n" not in str(info.value)
    assert (rotation._TABLE_CACHE_BYTES, rotation._PREFIX_TABLE_BYTES) == before  # nothing changed


def test_cache_size_setting_returns_the_previous_sizes_and_empties_the_caches():
    assert rotation.set_table_cache_bytes() == (64 * 2**20, 256 * 2**20)
    cfg = RopeConfig(8, layout="half")
    rope_ref.apply(np.ones((4, 8)), 3.0, cfg)
    assert len(rotation._TABLE_CACHE._items) == 1
    previous = rotation.set_table_cache_bytes(cache_bytes=np.int64(1000), prefix_bytes=0)
    assert previous == (64 * 2**20, 256 * 2**20)
    assert rotation._TABLE_CACHE.max_bytes == 1000 and len(rotation._TABLE_CACHE._items) == 0
    assert rotation.set_table_cache_bytes(prefix_bytes=2**20) == (1000, 0)  # unnamed sizes are kept
    rotation.clear_table_caches()
    assert (rotation._TABLE_CACHE.max_bytes, rotation._PREFIX_TABLES.max_bytes) == (1000, 2**20)


def test_concurrent_callers_share_the_prefix_table_and_get_the_same_bits():
    cfg = RopeConfig(32, layout="interleaved")
    rotation.set_table_cache_bytes(cache_bytes=16 * 2**10)
    rng = np.random.default_rng(11)
    x = rng.standard_normal((1, 1200, 4, 32))
    jobs = [(0, 1200), (0, 400), (200, 700), (0, 900), (600, 600), (0, 1200)] * 3
    want = {}
    for job in jobs[:6]:
        want[job] = _uncached(x[:, : job[1]], np.arange(job[0], sum(job), dtype=float)[:, None], cfg)
    got: dict = {}
    errors: list = []
    barrier = threading.Barrier(6)

    def worker(k):
        try:
            barrier.wait()
            for job in jobs[k::6]:
                pos = np.arange(job[0], sum(job), dtype=float)[:, None]
                got.setdefault(job, []).append(rope_ref.apply(x[:, : job[1]], pos, cfg))
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert all(_same_bits(out, want[job]) for job, outs in got.items() for out in outs)
    assert len(rotation._PREFIX_TABLES._items) == 1
    (parts,) = rotation._PREFIX_TABLES._items.values()
    assert rotation._PREFIX_TABLES._bytes == sum(t.nbytes for t in parts)
