"""Oracle behaviours found untested by a second mutation run (issue 21, fresh sample ``--salt s5``).

Each test here fails on at least one mutant that survived the module's configured test subset. Expected
values are derived independently of ``rope_ref``: closed forms, mpmath, hand-counted shapes, and the
documented contracts (``docs/decay.md``: the work arrays of one chunk stay under ``max_bytes``).
Chunk sizes are observed by wrapping the trig kernel that every chunk calls; the wrapper computes the
same values, so results are unchanged.
"""

from __future__ import annotations

import numpy as np
import pytest
from mp_reference import _close, _rotated_by_hand, _tables_key_args

import rope_ref
from rope_ref import RopeConfig

# -- decay: chunking keeps the documented memory budget ------------------------------------------------


# -- decay: validation and defaults --------------------------------------------------------------------


# -- scaling ---------------------------------------------------------------------------------------------


# -- rotation: the table cache and blocking (results never depend on them; memory and reuse do) ----------


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


# -- frequencies ---------------------------------------------------------------------------------------


# -- scaling, continued: reprs, HF dict edges, overflow, fresh tables -------------------------------------


# -- rotation: inverse, axes, single vectors -----------------------------------------------------------------


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


