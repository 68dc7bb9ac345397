"""Measure the accuracy of the oracle's cos/sin of the exact angle m * theta against mpmath.

Run: ``python benchmarks/measure_trig_accuracy.py [--pairs 1000000] [--seed 0]``. Draws (position, theta)
pairs: positions log-uniform over [1, 2**40] (the oracle's limit), 40% rounded to integers, 30% negated;
theta uniformly from the default tables of bases {1e4, 5e5, 1e6, 1e7, 12.5e6} x head_dim
{64, 96, 128, 256, 1024} and the scaled tables of the catalogue's scaling types. Prints how many of
the 2 * pairs values are correctly rounded and the worst error in ulp (of the correctly rounded value),
against mpmath's cos/sin of the exact product at 300 bits. Takes about a minute per 10^5 pairs on one
core. Results are recorded in ``docs/spec.md`` ("Accuracy").
"""

from __future__ import annotations

import argparse
import platform
import time

import mpmath
import numpy as np

import rope_ref
from rope_ref._arrays import POSITION_LIMIT
from rope_ref._exact_trig import cos_sin_of_product


def theta_pool() -> np.ndarray:
    tables = [
        rope_ref.default_inv_freq(b, d)
        for b in (1e4, 5e5, 1e6, 1e7, 12.5e6)
        for d in (64, 96, 128, 256, 1024)
    ]
    for scaling in (
        rope_ref.Linear(8.0),
        rope_ref.NTKAware(4.0),
        rope_ref.YaRN(32.0, 4096, truncate=False),
        rope_ref.Llama3(8.0, 1.0, 4.0, 8192),
        rope_ref.DynamicNTK(4.0, 2048),
    ):
        cfg = rope_ref.RopeConfig(128, layout="half", base=500000.0, scaling=scaling)
        tables.append(rope_ref.inv_freq(cfg, seq_len=100000))
    return np.unique(np.concatenate(tables))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    pool = theta_pool()
    m = np.exp(rng.uniform(0.0, np.log(float(POSITION_LIMIT)), args.pairs))
    m = np.where(rng.random(args.pairs) < 0.4, np.round(m), m)
    m = np.where(rng.random(args.pairs) < 0.3, -m, m)
    theta = pool[rng.integers(0, pool.size, args.pairs)]
    t0 = time.perf_counter()
    cos, sin = cos_sin_of_product(m, theta)
    kernel_s = time.perf_counter() - t0
    mp = mpmath.MPContext()
    mp.prec = 300
    missed, worst, worst_at = 0, 0.0, None
    for i in range(args.pairs):
        angle = mp.mpf(float(m[i])) * mp.mpf(float(theta[i]))
        for got, exact in ((cos[i], mp.cos(angle)), (sin[i], mp.sin(angle))):
            rounded = float(exact)
            if got != rounded:
                missed += 1
                err = float(abs(mp.mpf(float(got)) - exact) / mp.mpf(np.spacing(abs(rounded))))
                if err > worst:
                    worst, worst_at = err, (float(m[i]), float(theta[i]))
    values = 2 * args.pairs
    print(f"machine: {platform.machine()} {platform.processor() or ''}; numpy {np.__version__}")
    print(f"pairs {args.pairs} (seed {args.seed}), {pool.size} distinct theta, kernel {kernel_s:.2f} s")
    print(f"values {values}: correctly rounded {values - missed} ({100.0 * (values - missed) / values:.4f}%)")
    print(f"not correctly rounded: {missed}; worst error {worst:.6f} ulp at (m, theta) = {worst_at}")


if __name__ == "__main__":
    main()
