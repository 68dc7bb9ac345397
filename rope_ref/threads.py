"""Worker threads for the blocks of :func:`rope_ref.apply`: less wall time, the same bits at any count.

``apply`` rotates a long tensor block by block, three NumPy ufunc calls per block that write disjoint
slices of one preallocated output; ufuncs release the GIL while they run, so blocks can run side by
side. Each block's arithmetic is the same whichever thread runs it, so results never depend on the
thread count, only the time of a call does. Threads take the next block from a shared counter (no
static split), so a thread the OS deschedules delays the call by about one block.

The default is one thread (NumPy's own behaviour): on the project's 2-core machine two threads make a
large ``apply`` up to 1.9x faster when the other core is idle (a call of a few blocks gains nothing),
but up to 1.4x slower on some shapes when it is busy (``docs/performance.md``), and test runners such as
``pytest -n auto`` already keep every core busy. Opt in with :func:`set_threads` or ``ROPE_REF_THREADS``
(an integer from 1 to :data:`MAX_THREADS`, or ``auto``: the CPUs this process may use, at most
:data:`AUTO_CAP`). The exact cos/sin tables stay in one thread: their ~130 short ufunc calls per block
hand the GIL back and forth faster than they compute, and measured slower with two threads.
"""

from __future__ import annotations

import contextvars
import os
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any, TypeVar

from ._arrays import check_int

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

__all__ = [
    "AUTO_CAP", "ENV_VAR", "MAX_THREADS", "default_threads", "run_blocks", "set_threads", "thread_count",
]

#: Environment variable read for the default thread count.
ENV_VAR = "ROPE_REF_THREADS"
#: Largest thread count accepted (from :func:`set_threads` or :data:`ENV_VAR`).
MAX_THREADS = 256
#: Most threads ``auto`` picks: past a few threads the rotation is bound by memory bandwidth.
AUTO_CAP = 8

State = TypeVar("State")

_settings_lock = threading.Lock()
_count: int | None = None  # None: not resolved yet (the default is read on first use)
_pool: ThreadPoolExecutor | None = None
_pool_size = 0
_in_block = threading.local()  # .active: this thread is running blocks (nested runs stay serial)


def _usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _checked_count(value: Any, name: str) -> int:
    return check_int(value, name, minimum=1, maximum=MAX_THREADS)


def default_threads() -> int:
    """:data:`ENV_VAR` if set and not empty (validated; ``auto``: ``min(usable CPUs, AUTO_CAP)``), else 1."""
    raw = os.environ.get(ENV_VAR, "").strip()
    if not raw:
        return 1
    if raw.lower() == "auto":
        return max(1, min(_usable_cpus(), AUTO_CAP))
    if len(raw) > 3 or not raw.isdigit():
        raise ValueError(f"{ENV_VAR} must be an integer from 1 to {MAX_THREADS} or 'auto', got {raw!r:.40}")
    return _checked_count(int(raw), ENV_VAR)


def thread_count() -> int:
    """How many threads the oracle's block loops use (resolving the default on first use)."""
    global _count
    with _settings_lock:
        if _count is None:
            _count = default_threads()
        return _count


def set_threads(count: int | None) -> int:
    """Use ``count`` threads (``None``: the default, see the module docstring); returns the previous count.

    ``1`` runs every block in the calling thread. Results never depend on it. Idle pool threads stay
    for the next call (a pool is only replaced by a larger one).
    """
    global _count
    new = default_threads() if count is None else _checked_count(count, "count")
    previous = thread_count()
    with _settings_lock:
        _count = new
    return previous


def _workers(extra: int) -> ThreadPoolExecutor:
    from concurrent.futures import ThreadPoolExecutor  # on first use: `import rope_ref` stays light

    global _pool, _pool_size
    with _settings_lock:
        if _pool is None or _pool_size < extra:
            if _pool is not None:
                _pool.shutdown(wait=False)
            _pool, _pool_size = ThreadPoolExecutor(max_workers=extra, thread_name_prefix="rope_ref"), extra
        return _pool


def _forget_pool_after_fork() -> None:
    """A forked child has none of the parent's threads: it starts a pool of its own when it needs one."""
    global _pool, _pool_size, _settings_lock
    _pool, _pool_size = None, 0
    _settings_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool_after_fork)


def run_blocks(
    work: Callable[[State, int], None], starts: Iterable[int], make_state: Callable[[], State]
) -> None:
    """Call ``work(state, start)`` once for every ``start``, on up to :func:`thread_count` threads.

    Each thread, the caller's included, calls ``make_state()`` once for its own work arrays. Pool
    threads run in a copy of the caller's context (NumPy's ``errstate`` included). A run started from
    inside a block stays in its thread. The first exception stops the hand-out of blocks; it is raised
    here once every thread has stopped, so no block is still writing when this returns.
    """
    starts = list(starts)
    count = 1 if getattr(_in_block, "active", False) else min(thread_count(), len(starts))
    if count <= 1:
        state = make_state()
        for start in starts:
            work(state, start)
        return
    pending = iter(starts)
    take = threading.Lock()
    failed = threading.Event()

    def drain() -> None:
        _in_block.active = True
        try:
            state = make_state()
            while not failed.is_set():
                with take:
                    start = next(pending, None)
                if start is None:
                    return
                work(state, start)
        except BaseException:
            failed.set()
            raise
        finally:
            _in_block.active = False

    from concurrent.futures import wait as wait_all

    pool = _workers(count - 1)
    futures = [pool.submit(contextvars.copy_context().run, drain) for _ in range(count - 1)]
    try:
        drain()
    finally:
        try:
            wait_all(futures)
        except BaseException:  # interrupted while waiting: stop handing out blocks, then wait again
            failed.set()
            wait_all(futures)
    for future in futures:
        error = future.exception()
        if error is not None:
            raise error
