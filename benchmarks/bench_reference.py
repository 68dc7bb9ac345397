"""Benchmark the float64 oracle's apply against a naive NumPy port of HF and the memory floor.

Run: ``python benchmarks/bench_reference.py [--repeat N]``. Measures, side by side in one run, on
x of shape (1, 2048, 32, 128) float64 and positions 0..2047, for both layouts:
- ``rope_ref.apply``;
- a naive NumPy port of HF's ``q * cos + rotate_half(q) * sin`` (cos/sin built as ``cat(freqs, freqs)``;
  for the interleaved layout GPT-J's ``rotate_every_two`` with ``repeat_interleave``d tables);
- the memory floor: ``np.copyto`` of x into a preallocated array;
and, for 2048 positions x head_dim 128, ``rope_ref.cos_sin`` (exact angle, basic operations only)
against ``np.cos`` + ``np.sin`` of the rounded angles. ``apply`` is timed twice: cold (its table cache
cleared before every call, so each call builds the exact tables) and warm (the tables cached, as in a
forward pass that rotates many tensors with the same positions). It prints the median times and the
ratios. Goal (issue "same bits"): an allocating apply within 5x of the copy floor.
"""

from __future__ import annotations

import argparse
import platform
import time

import numpy as np

import rope_ref


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


def cold_apply(x: np.ndarray, positions: np.ndarray, cfg: rope_ref.RopeConfig) -> np.ndarray:
    """``rope_ref.apply`` with its table cache emptied first: every call builds the exact tables."""
    rope_ref.rotation._TABLE_CACHE = rope_ref.rotation._TableCache(rope_ref.rotation._TABLE_CACHE_BYTES)
    return rope_ref.apply(x, positions, cfg)


def median_time(fn, repeat: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--shape", default="1,2048,32,128")
    args = parser.parse_args()
    shape = tuple(int(s) for s in args.shape.split(","))
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape)
    positions = np.arange(shape[1], dtype=np.float64)
    pos_b = positions[:, None]
    dst = np.empty_like(x)
    print(
        f"machine: {platform.machine()} {platform.processor() or ''} numpy {np.__version__}; "
        f"x {shape} float64 ({x.nbytes / 2**20:.0f} MiB); median of {args.repeat}"
    )
    floor = median_time(lambda: np.copyto(dst, x), args.repeat)
    print(f"  copy floor (np.copyto)      {floor * 1e3:8.2f} ms")
    for layout in ("half", "interleaved"):
        cfg = rope_ref.RopeConfig(shape[-1], layout=layout)
        # Same numbers from both (a benchmark of a wrong result would be meaningless).
        np.testing.assert_allclose(
            rope_ref.apply(x[:, :8], pos_b[:8], cfg), naive_hf(x[:, :8], positions[:8], layout), atol=1e-12
        )
        t_ref = median_time(lambda cfg=cfg: rope_ref.apply(x, pos_b, cfg), args.repeat)
        t_cold = median_time(lambda cfg=cfg: cold_apply(x, pos_b, cfg), args.repeat)
        t_naive = median_time(lambda layout=layout: naive_hf(x, positions, layout), args.repeat)
        print(
            f"  {layout:<11} rope_ref.apply warm {t_ref * 1e3:8.2f} ms = {t_ref / floor:4.2f}x floor, "
            f"cold {t_cold * 1e3:8.2f} ms = {t_cold / floor:4.2f}x floor | "
            f"naive HF port {t_naive * 1e3:8.2f} ms = {t_naive / floor:4.2f}x floor | "
            f"apply (warm) is {t_naive / t_ref:4.2f}x faster than naive"
        )
    cfg = rope_ref.RopeConfig(128, layout="half")
    table_pos = np.arange(2048, dtype=np.float64)
    angles = table_pos[:, None] * rope_ref.inv_freq(cfg)
    t_exact = median_time(lambda: rope_ref.cos_sin(table_pos, cfg), args.repeat)
    t_numpy = median_time(lambda: (np.cos(angles), np.sin(angles)), args.repeat)
    print(
        f"  cos_sin 2048 x 64: exact {t_exact * 1e3:7.2f} ms | np.cos + np.sin {t_numpy * 1e3:7.2f} ms | "
        f"ratio {t_exact / t_numpy:4.2f}x"
    )


if __name__ == "__main__":
    main()
