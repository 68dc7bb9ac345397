"""Benchmark the float64 oracle's apply against a naive NumPy port of HF and the memory floor.

Run: ``python benchmarks/bench_reference.py [--repeat N] [--long] [--only-long]``. Measures, side by
side in one run, on x of shape (1, 2048, 32, 128) float64 and positions 0..2047, for both layouts:
- ``rope_ref.apply``;
- a naive NumPy port of HF's ``q * cos + rotate_half(q) * sin`` (cos/sin built as ``cat(freqs, freqs)``;
  for the interleaved layout GPT-J's ``rotate_every_two`` with ``repeat_interleave``d tables);
- the memory floor: ``np.copyto`` of x into a preallocated array;
and, for 2048 positions x head_dim 128, ``rope_ref.cos_sin`` (exact angle, basic operations only)
against ``np.cos`` + ``np.sin`` of the rounded angles. ``apply`` is timed warm (the same positions
again, as in a forward pass that rotates many tensors with the same positions) and cold (every table
cache of the oracle emptied before each call, as in the first call of a fresh process, so the call
builds the exact tables).

``--threads 1,2`` times warm and cold ``apply`` at each thread count side by side
(``rope_ref.threads.set_threads``; 1 is always included), ``--busy`` keeps another core busy with a
spinning process for the whole run. ``--long`` adds the long-context sweep: x of shape (1, S, 8, 128) for
S in 512 .. 65536, warm and cold ``apply`` against ``np.copyto`` (``--only-long`` runs only that). The
candidates of one table are timed round-robin (one call of each per round, ``--repeat`` rounds); the
minimum and the median of the wall-clock time of each are printed, and the minimum of the process's CPU
time (user + system: the page faults of a fresh output count). Ratios use the minima, which other jobs on
a shared machine disturb least; on a loaded machine the CPU-time ratios are the steadier ones. Goals
(issue "speed where users feel it"): warm at most 3x the floor and cold at most 4.5x at (1, 2048, 32,
128), and warm at most 3.5x at every S of the sweep.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import time
from typing import NamedTuple

import numpy as np

import rope_ref
from rope_ref import rotation, threads

LONG_SEQS = (512, 2048, 8192, 32768, 65536)


def naive_hf(x: np.ndarray, positions: np.ndarray, layout: str, base: float = 10000.0) -> np.ndarray:
    d = x.shape[-1]
    inv = 1.0 / base ** (np.arange(0, d, 2, dtype=np.float64) / d)
    freqs = positions[:, None] * inv  # (S, d/2)
    if layout == "half":
        emb = np.concatenate([freqs, freqs], axis=-1)
    else:
        emb = np.repeat(freqs, 2, axis=-1)
    cos = np.cos(emb)[None, :, None, :]
    sin = np.sin(emb)[None, :, None, :]
    if layout == "half":
        rotated = np.concatenate([-x[..., d // 2 :], x[..., : d // 2]], axis=-1)
    else:
        rotated = np.stack([-x[..., 1::2], x[..., 0::2]], axis=-1).reshape(x.shape)
    return x * cos + rotated * sin


def clear_caches() -> None:
    """Empty every table cache of the oracle (older versions had only ``_TABLE_CACHE``)."""
    clear = getattr(rotation, "clear_table_caches", None)
    if clear is not None:
        clear()
    else:
        rotation._TABLE_CACHE = rotation._TableCache(rotation._TABLE_CACHE_BYTES)


def cold_apply(x: np.ndarray, positions: np.ndarray, cfg: rope_ref.RopeConfig) -> np.ndarray:
    """``rope_ref.apply`` with its table caches emptied first: every call builds the exact tables."""
    clear_caches()
    return rope_ref.apply(x, positions, cfg)


def in_threads(count: int, fn):
    """``fn`` run with ``rope_ref.threads.set_threads(count)``, the previous count restored after."""

    def call():
        previous = threads.set_threads(count)
        try:
            return fn()
        finally:
            threads.set_threads(previous)

    return call


class Timing(NamedTuple):
    """Seconds per call over the rounds: wall-clock minimum and median, and the minimum of the process's
    CPU time (user + system, page faults included), which other jobs on a loaded machine disturb less."""

    best: float
    median: float
    cpu: float


def round_robin(candidates: dict, repeat: int, *, warm_up: bool = True) -> dict[str, Timing]:
    """One call of each candidate per round (round i starting with candidate i), after one warm-up call
    of each unless ``warm_up`` is false."""
    for fn in candidates.values() if warm_up else ():
        fn()
    wall: dict[str, list[float]] = {name: [] for name in candidates}
    cpu: dict[str, list[float]] = {name: [] for name in candidates}
    names = list(candidates)
    for i in range(repeat):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            c0, t0 = time.process_time(), time.perf_counter()
            candidates[name]()
            wall[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
    return {name: Timing(min(wall[name]), float(np.median(wall[name])), min(cpu[name])) for name in names}


def start_spinner() -> subprocess.Popen:
    """A separate Python process that spins until killed: "the other core busy"."""
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def load() -> str:
    try:
        return "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
    except OSError:  # pragma: no cover - not on every platform
        return "load average unknown"


def main_table(shape: tuple[int, ...], repeat: int, counts: tuple[int, ...]) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape)
    positions = np.arange(shape[1], dtype=np.float64)
    pos_b = positions[:, None]
    dst = np.empty_like(x)
    print(f"x {shape} float64 ({x.nbytes / 2**20:.0f} MiB), positions 0..{shape[1] - 1}; {repeat} rounds")
    candidates = {"copy": lambda: np.copyto(dst, x)}
    for layout in ("half", "interleaved"):
        cfg = rope_ref.RopeConfig(shape[-1], layout=layout)
        # Same numbers from both (a benchmark of a wrong result would be meaningless).
        np.testing.assert_allclose(
            rope_ref.apply(x[:, :8], pos_b[:8], cfg), naive_hf(x[:, :8], positions[:8], layout), atol=1e-12
        )
        for n in counts:
            tag = "" if n == 1 else f" {n}t"
            candidates[f"{layout} warm{tag}"] = in_threads(n, lambda cfg=cfg: rope_ref.apply(x, pos_b, cfg))
            candidates[f"{layout} cold{tag}"] = in_threads(n, lambda cfg=cfg: cold_apply(x, pos_b, cfg))
        candidates[f"{layout} naive"] = lambda layout=layout: naive_hf(x, positions, layout)
    got = round_robin(candidates, repeat)
    floor = got["copy"]
    header = f"{'min ms':>8} {'median ms':>9} {'cpu ms':>8} {'min / copy':>10} {'cpu / copy':>10}"
    print(f"  {'candidate':<18} {header}")
    for name, t in got.items():
        print(
            f"  {name:<18} {t.best * 1e3:8.2f} {t.median * 1e3:9.2f} {t.cpu * 1e3:8.2f} "
            f"{t.best / floor.best:9.2f}x {t.cpu / floor.cpu:9.2f}x"
        )
    for layout in ("half", "interleaved"):
        ratio = got[f"{layout} naive"].best / got[f"{layout} warm"].best
        print(f"  {layout}: naive / warm apply = {ratio:.2f}x")


def long_table(repeat: int, seqs: tuple[int, ...], counts: tuple[int, ...]) -> None:
    print(f"long context: x (1, S, 8, 128) float64, positions arange(S)[:, None], half; {repeat} rounds")
    print(
        f"  {'S':>6} {'copy ms':>8} {'warm ms':>8} {'cold ms':>8} {'warm/copy':>9} {'cold/copy':>9} "
        f"{'cpu: warm/copy':>14} {'cold/copy':>9}"
        + "".join(f" {f'warm {n}t/copy':>13}" for n in counts if n != 1)
    )
    rng = np.random.default_rng(1)
    cfg = rope_ref.RopeConfig(128, layout="half")
    for s in seqs:
        x = rng.standard_normal((1, s, 8, 128))
        dst = np.empty_like(x)
        pos = np.arange(s, dtype=np.float64)[:, None]
        got = round_robin(
            {
                "copy": lambda x=x, dst=dst: np.copyto(dst, x),
                "warm": lambda x=x, pos=pos: rope_ref.apply(x, pos, cfg),
                "cold": lambda x=x, pos=pos: cold_apply(x, pos, cfg),
                **{
                    f"warm {n}t": in_threads(n, lambda x=x, pos=pos: rope_ref.apply(x, pos, cfg))
                    for n in counts
                    if n != 1
                },
            },
            repeat,
        )
        c, w, k = got["copy"], got["warm"], got["cold"]
        print(
            f"  {s:>6} {c.best * 1e3:8.2f} {w.best * 1e3:8.2f} {k.best * 1e3:8.2f} {w.best / c.best:8.2f}x "
            f"{k.best / c.best:8.2f}x {w.cpu / c.cpu:13.2f}x {k.cpu / c.cpu:8.2f}x"
            + "".join(f" {got[f'warm {n}t'].best / c.best:12.2f}x" for n in counts if n != 1)
        )
        del x, dst


def trig_table(repeat: int) -> None:
    cfg = rope_ref.RopeConfig(128, layout="half")
    table_pos = np.arange(2048, dtype=np.float64)
    angles = table_pos[:, None] * rope_ref.inv_freq(cfg)
    got = round_robin(
        {
            "exact": lambda: rope_ref.cos_sin(table_pos, cfg),
            "numpy": lambda: (np.cos(angles), np.sin(angles)),
        },
        repeat,
    )
    t_exact, t_numpy = got["exact"], got["numpy"]
    print(
        f"  cos_sin 2048 x 64: exact {t_exact.best * 1e3:7.2f} ms | "
        f"np.cos + np.sin {t_numpy.best * 1e3:7.2f} ms | ratio {t_exact.best / t_numpy.best:4.2f}x "
        f"(cpu {t_exact.cpu / t_numpy.cpu:4.2f}x)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--shape", default="1,2048,32,128")
    parser.add_argument("--long", action="store_true", help="add the long-context sweep (1, S, 8, 128)")
    parser.add_argument("--only-long", action="store_true", help="run only the long-context sweep")
    parser.add_argument("--seqs", default=",".join(map(str, LONG_SEQS)), help="S values of the sweep")
    parser.add_argument(
        "--threads", default="1", help="thread counts of apply timed side by side, e.g. 1,2"
    )
    parser.add_argument("--busy", action="store_true", help="keep one other core busy (a spinning process)")
    args = parser.parse_args()
    counts = tuple(dict.fromkeys(int(n) for n in args.threads.split(",")))
    if 1 not in counts:
        counts = (1, *counts)
    spinner = start_spinner() if args.busy else None
    print(f"machine: {platform.machine()} {platform.processor() or ''} numpy {np.__version__}; {load()}")
    if not args.only_long:
        main_table(tuple(int(s) for s in args.shape.split(",")), args.repeat, counts)
        trig_table(args.repeat)
    if args.long or args.only_long:
        long_table(args.repeat, tuple(int(s) for s in args.seqs.split(",")), counts)
    print(f"done; {load()}" + ("; another core was kept busy" if spinner else ""))
    if spinner is not None:
        spinner.kill()


if __name__ == "__main__":
    main()
