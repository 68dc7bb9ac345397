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
from mp_reference import _close, _rotated_by_hand, _tables_key_args

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
        np.arange(1000.0)[[0, 500, *range(1, 500), *range(501, 1000)]],  # right ends, moved middle
    ],
    ids=["negative", "half-steps", "fractional-start", "minus-zero", "descending", "gap", "same-ends"],
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


def test_table_cache_keeps_small_tables_and_hands_back_the_same_frozen_object():
    from rope_ref.rotation import _TableCache

    # Budget 768 bytes: a table set counts 3 * positions * pairs * 2 * 8 bytes and is cached when that is
    # at most a quarter of the budget (192 bytes): 1 position x 4 pairs is exactly 192.
    cache = _TableCache(768)
    pos, freqs = _tables_key_args(1, 4)
    first = cache.get(pos, freqs, 1.0, "half")
    assert cache.get(pos.copy(), freqs.copy(), 1.0, "half") is first
    assert all(not a.flags.writeable for a in first.parts)
    assert not first.zero.flags.writeable
    # Any difference in the key (factor, layout, positions, frequencies) is a different entry.
    assert cache.get(pos, freqs, 0.5, "half") is not first
    assert cache.get(pos, freqs, 1.0, "interleaved") is not first
    assert cache.get(pos + 1, freqs, 1.0, "half") is not first
    assert cache.get(pos, freqs * 2, 1.0, "half") is not first
    # 2 positions x 4 pairs (384 bytes counted) is over a quarter of the budget: built, never cached.
    pos2, _ = _tables_key_args(2, 4)
    big = cache.get(pos2, freqs, 1.0, "half")
    assert cache.get(pos2, freqs, 1.0, "half") is not big
    assert all(a.flags.writeable for a in big.parts)


def test_table_cache_evicts_least_recently_used_and_counts_bytes():
    from rope_ref.rotation import _TableCache

    pos, freqs = _tables_key_args(1, 4)
    # One half-layout table set holds two (1, 8) float64 arrays and a (1, 1) bool: 128 + 1 bytes.
    cache = _TableCache(1000)
    a = cache.get(pos, freqs, 1.0, "half")
    assert a.nbytes == 2 * 8 * 8 + 1 and cache._bytes == a.nbytes
    cache.get(pos + 1, freqs, 1.0, "half")
    assert cache._bytes == 2 * a.nbytes and len(cache._items) == 2
    # Budget 768: five sets (645 bytes) fit, a sixth (774) evicts the least recently used one.
    small = _TableCache(768)
    sets = [small.get(pos + k, freqs, 1.0, "half") for k in range(5)]
    assert small.get(pos, freqs, 1.0, "half") is sets[0]  # set 0 is now the most recently used
    sixth = small.get(pos + 5, freqs, 1.0, "half")
    assert len(small._items) == 5 and small._bytes == 5 * 129
    assert small.get(pos, freqs, 1.0, "half") is sets[0] and small.get(pos + 5, freqs, 1.0, "half") is sixth
    assert small.get(pos + 2, freqs, 1.0, "half") is sets[2]
    assert small.get(pos + 1, freqs, 1.0, "half") is not sets[1]  # set 1 was evicted
    # Exactly at the budget is not over it: six sets of 129 bytes in a 774-byte cache all stay.
    exact = _TableCache(774)
    six = [exact.get(pos + k, freqs, 1.0, "half") for k in range(6)]
    assert exact._bytes == 774 and all(exact.get(pos + k, freqs, 1.0, "half") is six[k] for k in range(6))
    # A factor != 1 has no zero mask; its bytes are just the two tables.
    f = _TableCache(1000).get(pos, freqs, 0.5, "half")
    assert f.zero is None and f.nbytes == 2 * 8 * 8


def test_table_cache_threshold_is_a_quarter_of_the_budget_counting_48_bytes_per_entry():
    """A table set is counted as 3 * positions * pairs * 2 * 8 bytes: 1 position x 8 pairs is 384, cached
    when 384 <= budget // 4, so with a budget of 1536 but not 1535."""
    from rope_ref.rotation import _TableCache

    pos, freqs = _tables_key_args(1, 8)
    at = _TableCache(1536)
    assert at.get(pos, freqs, 1.0, "half") is at.get(pos, freqs, 1.0, "half")
    below = _TableCache(1535)
    assert below.get(pos, freqs, 1.0, "half") is not below.get(pos, freqs, 1.0, "half")
    pos3, _ = _tables_key_args(3, 8)  # 1152 counted bytes
    assert _TableCache(4608).get(pos3, freqs, 1.0, "half") is not None
    at3 = _TableCache(4608)
    assert at3.get(pos3, freqs, 1.0, "half") is at3.get(pos3, freqs, 1.0, "half")
    below3 = _TableCache(4607)
    assert below3.get(pos3, freqs, 1.0, "half") is not below3.get(pos3, freqs, 1.0, "half")


@pytest.fixture
def fresh_cache(monkeypatch):
    from rope_ref import rotation

    cache = rotation._TableCache(rotation._TABLE_CACHE_BYTES)
    monkeypatch.setattr(rotation, "_TABLE_CACHE", cache)
    return cache


def test_tables_shared_and_cached_only_when_small_next_to_x(fresh_cache):
    """Broadcast or small positions: one cached table set. Positions nearly as large as x: tables per block,
    nothing cached (so peak memory stays a few blocks)."""
    cfg = RopeConfig(8, layout="half")
    x = np.ones((200, 8))
    rope_ref.apply(x, np.arange(200.0), cfg)  # 200 * 8 table entries > 1600 // 4
    assert len(fresh_cache._items) == 0
    rope_ref.apply(x, 3.0, cfg)
    assert len(fresh_cache._items) == 1
    # Exactly at the limit: x (4, 4, 8) has 128 elements; positions (4, 1) times 8 channels is 32 = 128 // 4.
    rope_ref.apply(np.ones((4, 4, 8)), np.arange(4.0)[:, None], cfg)
    assert len(fresh_cache._items) == 2
    # Over the limit: positions (5, 1) on x (5, 2, 8): 40 > 80 // 4.
    rope_ref.apply(np.ones((5, 2, 8)), np.arange(5.0)[:, None], cfg)
    assert len(fresh_cache._items) == 2


def test_apply_caches_table_sets_up_to_a_quarter_of_64_mib(fresh_cache):
    """The table cache of apply may keep 64 MiB; one set is cached when counted at <= 16 MiB. With 4 pairs
    a position counts 3 * 4 * 2 * 8 = 192 bytes, so 87381 positions (16777152 bytes) are cached and 87382
    (16777344 > 16777216) are not. x has 4 rows per position, so the table is small next to x."""
    cfg = RopeConfig(8, layout="half")
    for count, cached in ((87381, 1), (87382, 0)):
        fresh_cache._items.clear()
        fresh_cache._bytes = 0
        rope_ref.apply(np.ones((4, count, 8)), np.arange(float(count)), cfg)
        assert len(fresh_cache._items) == cached, count


def test_default_table_cache_keeps_512_entries():
    from rope_ref.frequencies import _default_inv_freq_cached

    assert _default_inv_freq_cached.cache_info().maxsize == 512


def test_positions_broadcast_along_the_block_axis_share_one_cached_table(fresh_cache):
    """x (3, 3, 8), positions (1, 3): the block axis is 0 and the positions broadcast along it, so one table
    set is shared (and cached) even though 3 positions x 8 channels exceed x.size // 4."""
    cfg = RopeConfig(8, layout="half")
    x = np.random.default_rng(51).standard_normal((3, 3, 8))
    y = rope_ref.apply(x, np.array([[1.0, 2.0, 3.0]]), cfg)
    assert len(fresh_cache._items) == 1
    _close(y[2, 1], _rotated_by_hand(x[2, 1], 2.0, "half"), 2.0)


def test_cached_tables_are_keyed_by_attention_factor_shape_and_layout():
    """Calls differing only in the attention factor, the positions' shape or the layout never share tables."""
    rng = np.random.default_rng(11)
    x = rng.standard_normal((6, 4, 16))
    a = RopeConfig(16, layout="half", scaling=YaRN(4.0, 64, attention_factor=1.5))
    b = RopeConfig(16, layout="half", scaling=YaRN(4.0, 64, attention_factor=2.5))  # same frequencies
    pos = np.arange(6.0)[:, None] * np.ones((1, 4)) + np.arange(4.0)  # (6, 4): small next to x
    for cfg in (a, b, a.replace(layout="interleaved")):
        assert _same_bits(rope_ref.apply(x, pos, cfg), _uncached(x, pos, cfg))
    # The same eight position bytes as (2, 4) and as (4, 2) (x of shape (2, 4, d) and (4, 2, d)).
    flat = np.array([0.0, 3.0, 5.0, 7.0, 11.0, 13.0, 17.0, 19.0])
    for shape in ((2, 4), (4, 2)):
        xs = rng.standard_normal(shape + (8, 16))
        ids = flat.reshape(shape)[..., None]
        assert _same_bits(rope_ref.apply(xs, ids, a), _uncached(xs, ids, a))
    # arange positions with the table cache off take the prefix tables: the layouts' tables differ.
    rotation.set_table_cache_bytes(cache_bytes=0)
    xl = rng.standard_normal((64, 4, 16))
    for layout in ("half", "interleaved"):
        cfg = RopeConfig(16, layout=layout)
        assert _same_bits(rope_ref.apply(xl, np.arange(64.0)[:, None], cfg),
                          _uncached(xl, np.arange(64.0)[:, None], cfg))
