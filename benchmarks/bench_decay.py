"""Benchmark ``rope_ref.decay`` against the chunked float64 NumPy code a user would write.

Run: ``python benchmarks/bench_decay.py [--distances N] [--repeat R]``. For d = 128, base 10000, half
layout, one random (q, k) pair and distances ``0 .. N-1`` (default 10^6), it times side by side,
round-robin (one call of each per round, ``--repeat`` rounds; wall-clock minimum and median, and the
minimum of the process's CPU time, as in ``bench_reference.py``):

- ``decay.abel_bound(q, k, r, cfg)`` against ``naive_abel``: per chunk of distances, ``np.cos`` and
  ``np.sin`` of the rounded angles ``r * theta``, the exact side ``|sum_i h_i e^{i r theta_i}|`` as two
  ``.sum``s, and the bound side ``max|h_{i+1} - h_i| * sum_j |S_j|`` from two ``np.cumsum``s;
- ``decay.score_curve(r, cfg, q, k)`` against ``naive_score``: per chunk, ``np.cos``/``np.sin`` and
  ``(cos * h_re - sin * h_im).sum(-1)``.

The naive versions use the same chunk size as the oracle (32 MiB of work arrays). They agree with the
oracle to about 1e-9 relative (checked before timing), not bit for bit: ``np.cos``/``np.sin`` of the
rounded angle differ from the oracle's cos/sin of the exact product, and ``.sum`` is NumPy's own order.
Goals (issue "speed where users feel it"): ``abel_bound`` at most 1.5x and ``score_curve`` at most 3x.
"""

from __future__ import annotations

import argparse
import os
import platform

import numpy as np
from bench_reference import round_robin  # this script's folder is on sys.path when it runs

import rope_ref
from rope_ref import decay

_ROWS = 32 * 2**20 // (24 * 8 * 64)  # the oracle's chunk of distances at 64 pairs


def pair_products(q: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    half = q.shape[-1] // 2
    qa, qb, ka, kb = q[:half], q[half:], k[:half], k[half:]
    return qa * ka + qb * kb, qb * ka - qa * kb


def naive_abel(q, k, r, theta) -> tuple[np.ndarray, np.ndarray]:
    h_re, h_im = pair_products(q, k)
    d_re, d_im = np.append(h_re[1:], 0.0) - h_re, np.append(h_im[1:], 0.0) - h_im
    max_step = np.sqrt(d_re * d_re + d_im * d_im).max()
    exact, bound = np.empty(r.size), np.empty(r.size)
    for start in range(0, r.size, _ROWS):
        sl = slice(start, start + _ROWS)
        ang = r[sl, None] * theta
        c, s = np.cos(ang), np.sin(ang)
        re = (c * h_re - s * h_im).sum(-1)
        im = (s * h_re + c * h_im).sum(-1)
        exact[sl] = np.sqrt(re * re + im * im)
        a, b = np.cumsum(c, axis=1), np.cumsum(s, axis=1)
        bound[sl] = max_step * np.sqrt(a * a + b * b).sum(-1)
    return exact, bound


def naive_score(q, k, r, theta) -> np.ndarray:
    h_re, h_im = pair_products(q, k)
    out = np.empty(r.size)
    for start in range(0, r.size, _ROWS):
        sl = slice(start, start + _ROWS)
        ang = r[sl, None] * theta
        out[sl] = (np.cos(ang) * h_re - np.sin(ang) * h_im).sum(-1)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--distances", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(
        f"machine: {platform.machine()} {platform.processor() or ''} numpy {np.__version__}; "
        "load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg())
    )
    cfg = rope_ref.RopeConfig(128, layout="half")
    theta = rope_ref.inv_freq(cfg)
    q, k = np.random.default_rng(0).standard_normal((2, 128))
    r = np.arange(args.distances, dtype=np.float64)
    check = r[:5000]
    got, want = decay.abel_bound(q, k, check, cfg), naive_abel(q, k, check, theta)
    np.testing.assert_allclose(got.exact, want[0], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(got.bound, want[1], rtol=1e-9)
    got_score = decay.score_curve(check, cfg, q, k)
    np.testing.assert_allclose(got_score, naive_score(q, k, check, theta), atol=1e-9)
    print(f"d = 128, base 10000, {args.distances} distances, {args.repeat} rounds round-robin")
    got = round_robin(
        {
            "abel_bound": lambda: decay.abel_bound(q, k, r, cfg),
            "naive abel": lambda: naive_abel(q, k, r, theta),
            "score_curve": lambda: decay.score_curve(r, cfg, q, k),
            "naive score": lambda: naive_score(q, k, r, theta),
        },
        args.repeat,
        warm_up=False,  # the calls are long, and neither side keeps anything between calls
    )
    print(f"  {'candidate':<12} {'min s':>8} {'median s':>9} {'cpu s':>8}")
    for name, t in got.items():
        print(f"  {name:<12} {t.best:8.3f} {t.median:9.3f} {t.cpu:8.3f}")
    for name, naive, goal in (("abel_bound", "naive abel", 1.5), ("score_curve", "naive score", 3.0)):
        a, b = got[name], got[naive]
        print(f"  {name} / naive: {a.best / b.best:.2f}x wall, {a.cpu / b.cpu:.2f}x cpu (goal <= {goal}x)")
    print("done; load average {:.2f} {:.2f} {:.2f}".format(*os.getloadavg()))


if __name__ == "__main__":
    main()
