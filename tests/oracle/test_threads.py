"""``rope_ref.threads``: the thread-count setting, the block runner, and ``apply``'s bits at any count.

The runner is checked at the helper (every start once, a state per thread, errors and NumPy's error
state carried across threads, nested runs kept serial, a fork's child starting its own pool), then
``apply`` is checked against the elementwise formula evaluated by hand on ``rope_ref.cos_sin``'s
tables, bit for bit, at one, two and three threads.
"""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest

import rope_ref
from rope_ref import RopeConfig, YaRN, rotation, threads


@pytest.fixture(autouse=True)
def one_thread_after():
    """Every test leaves the process at the default count (and the table caches empty)."""
    yield
    threads.set_threads(None)
    rotation.clear_table_caches()


# ---------------------------------------------------------------------------------------------------
# The setting


@pytest.mark.parametrize("bad", [True, 2.0, "2", [2]])
def test_set_threads_refuses_a_non_integer_naming_the_argument(bad):
    with pytest.raises(TypeError, match=r"^count must be an int, got "):
        threads.set_threads(bad)


@pytest.mark.parametrize(("bad", "bound"), [(0, ">= 1"), (-1, ">= 1"), (257, "<= 256")])
def test_set_threads_refuses_a_count_out_of_range_naming_it(bad, bound):
    with pytest.raises(ValueError, match=rf"^count must be {bound}, got {bad}$"):
        threads.set_threads(bad)


def test_set_threads_returns_the_previous_count_and_takes_numpy_integers(monkeypatch):
    monkeypatch.delenv("ROPE_REF_THREADS", raising=False)
    threads.set_threads(None)
    assert threads.set_threads(3) == 1  # the default without ROPE_REF_THREADS
    assert threads.thread_count() == 3
    assert threads.set_threads(np.int64(5)) == 3
    assert threads.thread_count() == 5 and type(threads.thread_count()) is int
    assert threads.set_threads(None) == 5
    assert threads.thread_count() == 1


@pytest.mark.parametrize(("raw", "want"), [("", 1), ("  ", 1), ("4", 4), (" 7 ", 7), ("256", 256)])
def test_default_reads_the_environment_variable(monkeypatch, raw, want):
    threads.set_threads(2)
    monkeypatch.setenv("ROPE_REF_THREADS", raw)
    assert threads.default_threads() == want
    assert threads.set_threads(None) == 2 and threads.thread_count() == want


def test_default_is_one_thread_without_the_variable(monkeypatch):
    monkeypatch.delenv("ROPE_REF_THREADS", raising=False)
    assert threads.default_threads() == 1


def test_auto_is_the_usable_cpus_capped(monkeypatch):
    monkeypatch.setenv("ROPE_REF_THREADS", "Auto")
    monkeypatch.setattr(threads, "_usable_cpus", lambda: 3)
    assert threads.default_threads() == 3
    monkeypatch.setattr(threads, "_usable_cpus", lambda: 64)
    assert threads.default_threads() == threads.AUTO_CAP == 8


@pytest.mark.parametrize(("raw", "bound"), [("0", ">= 1"), ("257", "<= 256"), ("999", "<= 256")])
def test_environment_count_out_of_range_is_refused_naming_the_variable(monkeypatch, raw, bound):
    monkeypatch.setenv("ROPE_REF_THREADS", raw)
    with pytest.raises(ValueError, match=rf"^ROPE_REF_THREADS must be {bound}, got {int(raw)}$"):
        threads.default_threads()


@pytest.mark.parametrize("raw", ["two", "-2", "1e3", "2.0", "1234", "9" * 5000])
def test_environment_text_that_is_no_count_is_refused_in_one_short_line(monkeypatch, raw):
    monkeypatch.setenv("ROPE_REF_THREADS", raw)
    message = r"^ROPE_REF_THREADS must be an integer from 1 to 256 or 'auto', got "
    with pytest.raises(ValueError, match=message) as err:
        threads.default_threads()
    assert "\n" not in str(err.value) and len(str(err.value)) < 160


# ---------------------------------------------------------------------------------------------------
# The block runner


def _recording_run(count: int, starts, pause: float = 0.0):
    """Run ``run_blocks`` at ``count`` threads; returns [(start, state id, thread id)] and the states."""
    threads.set_threads(count)
    done, states, lock = [], [], threading.Lock()

    def make_state():
        state = {"thread": threading.get_ident()}
        with lock:
            states.append(state)
        return state

    def work(state, start):
        assert state["thread"] == threading.get_ident()  # a thread only ever sees its own state
        if pause:
            time.sleep(pause)  # releases the GIL, so the other threads take blocks too
        with lock:
            done.append((start, id(state), threading.get_ident()))

    threads.run_blocks(work, starts, make_state)
    return done, states


def test_every_start_runs_exactly_once_across_threads():
    starts = list(range(0, 370, 10))
    done, states = _recording_run(3, starts, pause=0.002)
    assert sorted(s for s, _, _ in done) == starts
    assert len({t for _, _, t in done}) > 1  # pool threads took blocks
    assert len(states) == 3 and len({id(s) for s in states}) == 3
    assert {t for _, _, t in done} <= {s["thread"] for s in states}


def test_one_thread_runs_every_block_in_the_caller_with_one_state():
    done, states = _recording_run(1, range(5))
    assert [s for s, _, _ in done] == list(range(5))
    assert len(states) == 1 and {t for _, _, t in done} == {threading.get_ident()}


def test_more_threads_than_blocks_start_only_one_state_per_block():
    done, states = _recording_run(6, [4, 8])
    assert sorted(s for s, _, _ in done) == [4, 8]
    assert len(states) == 2


def _failing_run(fails_in_caller: bool):
    """40 blocks at three threads; the first block run by the caller (or by a pool thread) raises.
    Returns the number of blocks started and the number still running when the error arrived."""
    threads.set_threads(3)
    caller, lock = threading.get_ident(), threading.Lock()
    started, running = [0], [0]

    def work(_, start):
        with lock:
            started[0] += 1
            running[0] += 1
        try:
            time.sleep(0.003)
            if (threading.get_ident() == caller) == fails_in_caller:
                raise ArithmeticError(f"block {start} failed")
        finally:
            with lock:
                running[0] -= 1

    with pytest.raises(ArithmeticError, match=r"^block \d+ failed$"):
        threads.run_blocks(work, range(40), dict)
    return started[0], running[0]


@pytest.mark.parametrize("fails_in_caller", [True, False], ids=["caller", "pool-thread"])
def test_a_failing_block_stops_the_run_and_raises_once_every_thread_has_stopped(fails_in_caller):
    started, still_running = _failing_run(fails_in_caller)
    assert still_running == 0
    assert started < 20  # the other threads took no new block after the failure


def test_a_pool_thread_sees_the_callers_numpy_error_state():
    threads.set_threads(2)
    seen = {}

    def work(_, start):
        time.sleep(0.002)
        seen[threading.get_ident()] = np.geterr()["invalid"]

    with np.errstate(invalid="raise"):
        threads.run_blocks(work, range(12), dict)
    assert len(seen) == 2 and set(seen.values()) == {"raise"}


def test_a_run_started_inside_a_block_stays_in_that_thread():
    threads.set_threads(8)
    threads.run_blocks(lambda _, start: time.sleep(0.001), range(16), dict)  # the pool grows to 7 threads
    inner_threads, lock = [], threading.Lock()

    def inner_work(seen, start):
        time.sleep(0.002)  # long enough for idle pool threads to take inner blocks, were they offered
        seen.append(threading.get_ident())

    def outer_work(_, start):
        me, seen = threading.get_ident(), []
        time.sleep(0.002)
        threads.run_blocks(inner_work, range(4), lambda: seen)
        with lock:
            inner_threads.append((me, seen))

    # Three outer blocks leave idle pool threads, so even a nested run that used the pool would finish.
    outer = threading.Thread(target=threads.run_blocks, args=(outer_work, range(3), dict), daemon=True)
    outer.start()
    outer.join(timeout=60)
    assert not outer.is_alive(), "a nested run waited on the pool its own block occupies"
    assert len(inner_threads) == 3
    assert all(seen == [me] * 4 for me, seen in inner_threads)
    assert len({me for me, _ in inner_threads}) > 1  # the outer blocks did spread over threads


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX only")
def test_a_forked_child_runs_blocks_on_a_pool_of_its_own():
    threads.set_threads(2)
    threads.run_blocks(lambda state, start: time.sleep(0.001), range(4), dict)  # the parent's pool exists
    pid = os.fork()
    if pid == 0:  # the child: the parent's pool threads do not exist here
        code = 1
        try:
            done, _ = _recording_run(2, range(0, 20), pause=0.002)
            code = 0 if sorted(s for s, _, _ in done) == list(range(20)) else 2
        finally:
            os._exit(code)
    deadline = time.monotonic() + 60
    while (waited := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    if waited[0] == 0:  # the child waits on pool threads that do not exist in it
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        pytest.fail("the forked child hung in run_blocks")
    assert os.waitstatus_to_exitcode(waited[1]) == 0


# ---------------------------------------------------------------------------------------------------
# apply at any thread count


def _formula(x, pos, cfg):
    """RoFormer eq. 34 on ``rope_ref.cos_sin``'s tables (attention factor included), per layout."""
    cos, sin = rope_ref.cos_sin(pos, cfg)
    rd = cfg.rotary_dim
    n = rd // 2
    out = x.copy()
    if cfg.layout == "half":
        a, b = x[..., :n], x[..., n:rd]
        out[..., :n], out[..., n:rd] = a * cos - b * sin, b * cos + a * sin
    else:
        a, b = x[..., 0:rd:2], x[..., 1:rd:2]
        out[..., 0:rd:2], out[..., 1:rd:2] = a * cos - b * sin, b * cos + a * sin
    return out


def _arange_rows(n):
    return np.arange(n, dtype=np.float64)[:, None]


CASES = [
    # (config, x shape, positions from a generator): four blocks (of 2**16 elements) or more
    (RopeConfig(128, layout="half"), (1, 200, 12, 128), lambda rng: _arange_rows(200)),
    (RopeConfig(64, layout="interleaved"), (2, 900, 3, 64), lambda rng: _arange_rows(900)),
    (
        RopeConfig(96, layout="half", rotary_dim=64, base=5e5),
        (1, 200, 16, 96),
        lambda rng: rng.uniform(-3e3, 3e3, (200, 1)),
    ),
    (
        RopeConfig(32, layout="interleaved", scaling=YaRN(4, 1024)),
        (3, 4000, 32),
        lambda rng: rng.uniform(-3e3, 3e3, (3, 4000)),  # as many positions as rows: tables built per block
    ),
    (RopeConfig(64, layout="half"), (2000, 2, 64), lambda rng: rng.integers(1, 9000, (2000, 2)) * 1.0),
]


CASE_IDS = ["half-arange", "interleaved-arange", "partial-random", "yarn-tables-per-block", "per-token"]


@pytest.mark.parametrize(("cfg", "shape", "make_positions"), CASES, ids=CASE_IDS)
def test_apply_equals_the_formula_bit_for_bit_at_any_thread_count(cfg, shape, make_positions):
    rng = np.random.default_rng(11)
    x = rng.standard_normal(shape)
    pos = make_positions(rng)
    want = _formula(x, np.broadcast_to(pos, shape[:-1]), cfg)
    for count in (1, 2, 3):
        threads.set_threads(count)
        rotation.clear_table_caches()
        got = rope_ref.apply(x, pos, cfg)
        assert got.tobytes() == want.tobytes(), count
        assert rope_ref.apply(x, pos, cfg).tobytes() == want.tobytes(), count  # served from a cache


def test_apply_keeps_position_zero_the_identity_at_two_threads():
    cfg = RopeConfig(64, layout="half")
    x = np.random.default_rng(3).standard_normal((1, 2000, 4, 64))
    x[0, 0, :, :3] = -0.0  # x - 0 * y would turn -0.0 into +0.0 without the fix-up
    threads.set_threads(2)
    got = rope_ref.apply(x, np.arange(2000.0)[:, None], cfg)
    assert got[0, 0].tobytes() == x[0, 0].tobytes()


def test_apply_raises_the_callers_floating_point_error_from_any_thread():
    cfg = RopeConfig(16, layout="half")
    x = np.ones((1, 20000, 16))
    x[0, 19990, [0, 8]] = np.inf  # a pair of infinities: x_a c - x_b s = inf - inf (c, s > 0 at m = 1)
    pos = np.full((1, 20000), 1.0)
    for count in (1, 2):
        threads.set_threads(count)
        with np.errstate(invalid="raise"), pytest.raises(FloatingPointError):
            rope_ref.apply(x, pos, cfg)
        with np.errstate(invalid="ignore"):
            assert np.isnan(rope_ref.apply(x, pos, cfg)[0, 19990, 0])
