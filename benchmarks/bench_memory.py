"""Peak memory and time of the oracle's calls whose work grows with their inputs (issue "nothing lost").

Run: ``python benchmarks/bench_memory.py``. For each call it prints the wall time and the peak of memory
allocated during the call beyond what existed before (tracemalloc, which sees NumPy's allocations),
next to the size of the call's own inputs and output:
- ``apply`` with full-shape positions on x of shape (1, 65536, 8, 128) float64 (tables built per block);
- ``decay.abel_bound`` with 10^6 distances (chunked like ``relative_upper_bound``);
- ``decay.score_curve`` with 10^6 samples (drawn and reduced in chunks).
Results are recorded in ``docs/performance.md``.
"""

from __future__ import annotations

import platform
import time
import tracemalloc

import numpy as np

import rope_ref
from rope_ref import decay


def measure(label: str, fn, own_bytes: int) -> None:
    tracemalloc.start()
    tracemalloc.reset_peak()
    t0 = time.perf_counter()
    result = fn()
    elapsed = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    out_bytes = sum(np.asarray(r).nbytes for r in (result if isinstance(result, tuple) else (result,)))
    extra = peak - out_bytes
    print(
        f"  {label:<46} {elapsed:7.2f} s | peak {peak / 2**20:8.1f} MiB = output {out_bytes / 2**20:7.1f} MiB"
        f" + work {extra / 2**20:7.1f} MiB (inputs {own_bytes / 2**20:.1f} MiB)"
    )


def main() -> None:
    print(f"machine: {platform.machine()} {platform.processor() or ''}; numpy {np.__version__}")
    cfg = rope_ref.RopeConfig(128, layout="half", base=10000.0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 65536, 8, 128))
    positions = np.broadcast_to(np.arange(65536.0)[None, :, None], (1, 65536, 8)).copy()
    measure(
        "apply, full-shape positions (1,65536,8,128)",
        lambda: rope_ref.apply(x, positions, cfg),
        x.nbytes + positions.nbytes,
    )
    q, k = rng.standard_normal(128), rng.standard_normal(128)
    distances = np.arange(1_000_000, dtype=np.float64)
    measure("abel_bound, 10^6 distances", lambda: decay.abel_bound(q, k, distances, cfg), distances.nbytes)
    measure(
        "score_curve, 10^6 samples, 4096 distances",
        lambda: decay.score_curve(np.arange(4096.0), cfg, samples=1_000_000, correlation=0.5),
        4096 * 8,
    )


if __name__ == "__main__":
    main()
