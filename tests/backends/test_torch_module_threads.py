"""One torch ``RotaryEmbedding`` shared by threads: no error, and every result equals a single-threaded run.

Before the cache was locked, concurrent calls with a length-dependent scaling (dynamic NTK) raised
``KeyError`` at ``move_to_end`` when another thread evicted the entry in between (issue 17).
"""

from __future__ import annotations

import copy
import pickle
import threading

import pytest

torch = pytest.importorskip("torch")

from rope_ref.backends._torch_module import RotaryEmbedding  # noqa: E402

from rope_ref import RopeConfig  # noqa: E402
from rope_ref.scaling import DynamicNTK  # noqa: E402

N_THREADS = 8
N_CALLS = 1000
# Sequence lengths on both sides of original_max_position=32, so the frequency table (the cache key)
# changes from call to call and max_cached_tables=2 evicts constantly.
LENGTHS = (8, 24, 33, 40, 57, 64, 90, 128)
HEAD_DIM = 16


def _cfg() -> RopeConfig:
    return RopeConfig(HEAD_DIM, layout="half", scaling=DynamicNTK(2.0, 32))


def _inputs() -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(0)
    return {n: (torch.randn(1, n, 2, HEAD_DIM, generator=gen), torch.arange(n)[:, None]) for n in LENGTHS}


def _schedule(thread: int) -> list[int]:
    return [LENGTHS[(7 * thread + 3 * i + i // 5) % len(LENGTHS)] for i in range(N_CALLS)]


@pytest.mark.parametrize("max_cached_tables", [2])
@pytest.mark.slow
def test_shared_module_matches_single_threaded_run(max_cached_tables):
    inputs = _inputs()
    reference_module = RotaryEmbedding(_cfg(), max_cached_tables=max_cached_tables)
    reference = {n: reference_module(x, pos) for n, (x, pos) in inputs.items()}
    # An independent answer too: the functional path, which has no cache at all.
    from rope_ref.backends._torch_module import apply

    for n, (x, pos) in inputs.items():
        torch.testing.assert_close(reference[n], apply(x, pos, _cfg()), rtol=0, atol=0)

    module = RotaryEmbedding(_cfg(), max_cached_tables=max_cached_tables)
    barrier = threading.Barrier(N_THREADS)
    errors: list[BaseException] = []
    mismatches: list[tuple[int, int, int]] = []

    def work(t: int) -> None:
        try:
            barrier.wait()
            for i, n in enumerate(_schedule(t)):
                x, pos = inputs[n]
                y = module(x, pos)
                if not torch.equal(y, reference[n]):
                    mismatches.append((t, i, n))
        except BaseException as exc:  # noqa: BLE001 - reported below with the thread's traceback
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(N_THREADS)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert not any(th.is_alive() for th in threads), "a thread hung"
    assert not errors, f"{len(errors)} thread(s) raised, first: {errors[0]!r}"
    assert not mismatches, f"{len(mismatches)} results differ from the single-threaded run: {mismatches[:5]}"
    assert len(module.cached_lengths()) <= max_cached_tables


def test_module_with_lock_still_copies_and_pickles():
    module = RotaryEmbedding(_cfg(), max_cached_tables=2)
    x, pos = _inputs()[40]
    expected = module(x, pos)
    for clone in (copy.deepcopy(module), pickle.loads(pickle.dumps(module))):
        assert torch.equal(clone(x, pos), expected)
        assert clone._cache_lock is not module._cache_lock
