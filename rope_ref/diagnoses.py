"""Diagnoses for a failing RoPE output: which common bug it most resembles, and a readable worst element.

A diagnosis is a mutated oracle run: the output is judged again, with the same tolerance model
(:mod:`rope_ref.tolerance`), against the oracle's answer for a computation with one mistake, and a
mutation it passes within :data:`EXPLAIN_SLACK` names the bug. Some mutations are estimated from the
output first (a wrong base from the observed per-pair angles, positions shifted by ``k`` from the phase
left once the oracle's angle is removed, the position ``L`` from which a too-short table goes wrong);
an estimate alone never names a bug. :mod:`rope_ref.testing` uses these for its assertion messages.
Nothing here warns: every cast and division that could overflow runs under ``np.errstate``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from . import tolerance
from .config import RopeConfig
from .frequencies import attention_factor as _attention_factor
from .frequencies import inv_freq
from .rotation import pair_indices

__all__ = [
    "EXPLAIN_SLACK",
    "explain",
    "exact_line",
    "common_bug_candidates",
    "table_bug_candidates",
    "bases_from_freqs",
    "nice_bases",
    "base_label",
    "cut_at",
    "cut_text",
]

# A mutated computation "explains" the output when the output passes against it with this much slack.
EXPLAIN_SLACK = 4.0
# A diagnosis must never replace the verdict: an estimate that cannot be made gives no candidate.
_CANNOT_ESTIMATE = (ValueError, TypeError, ArithmeticError, IndexError)


def exact_line(c, case, name: str, got: np.ndarray, policy) -> str:
    """The failure line when the worst element is an exact one (tol 0, err/tol inf): the worst element
    that is not exact first, then how many exact elements differ and what they are."""
    bounds = tolerance.element_tolerance(case, name, policy)
    expected = np.asarray(case.expected[name], dtype=np.float64)
    kind = "pass-through channels or position 0"
    if case.op in ("apply", "apply_vjp") and c.index:
        rd = case.rope_config().rotary_dim
        ch = c.index[-1]
        kind = (
            f"pass-through channel {ch} >= rotary_dim {rd}"
            if ch >= rd
            else "position 0 (rotation by angle 0)"
        )
    where = name + "[" + ", ".join(map(str, c.index)) + "]" if c.index else name
    example = f"{where}: expected {c.expected:.9g}, got {c.got:.9g}, |err| {abs(c.got - c.expected):.3g}"
    loose = np.where(bounds.exact, np.inf, bounds.tol)
    # Exact elements get an infinite tolerance: the worst of the others, and how many of them fail.
    rest = tolerance._worst(name, expected, got, loose, np.zeros(expected.shape, dtype=bool))
    n_exact = c.n_bad - rest.n_bad
    if rest.n_bad:
        head = replace(rest, n_bad=c.n_bad, note="").describe()
        return (
            f"{head}; {n_exact} of them exact elements that must equal the input bit for bit, "
            f"e.g. {example} ({kind})"
        )
    return (
        f"{example}; an exact element that must equal the input bit for bit ({kind}); {c.n_bad} of "
        f"{c.n_total} elements out of tolerance, all of them exact elements"
    )


def explain(
    got: np.ndarray,
    policy,
    candidates: list[tuple[str, Callable[[], tuple[Any, np.ndarray]]]],
    fallback: str | None = None,
) -> str | None:
    """The label of the mutated computation ``got`` matches best, if any matches within tolerance.

    Each candidate builds ``(case, expected)`` lazily; one that raises (a mutation that does not fit
    the config) is skipped. ``fallback``: a pattern of the errors to name when no candidate matches.
    """
    best: tuple[float, str] | None = None
    for label, build in candidates:
        try:
            case, name = build()
            # Element by element only: the pair-norm check would hold the mutation to cfg's factor.
            ratio = tolerance.compare_output(case, name, got, policy)[0].ratio
        except (ValueError, TypeError, ZeroDivisionError):
            continue
        if ratio <= EXPLAIN_SLACK and (best is None or ratio < best[0]):
            best = (ratio, label)
    if best is None:
        return fallback
    return f"{best[1]} (matches the oracle run with that mistake)"


# -- common bugs estimated from the output -------------------------------------------------------------
# Each estimate (a base, a shift, a cut) becomes one more mutated oracle run for _explain: a label is
# given only when the output matches that run within EXPLAIN_SLACK, never from the estimate alone.


def _phasors(v: np.ndarray, got: np.ndarray, pos: np.ndarray, cfg: RopeConfig, sign: float):
    """Unique effective positions ``P`` (sorted) and ``W[j, i] = sum conj(v_pair) * got_pair`` over the
    tokens at ``P[j]``: ``|v_pair|^2 e^{i angle}`` summed, so ``arg W`` is pair i's observed angle."""
    a, b = pair_indices(cfg)
    z = (v[..., a] - 1j * v[..., b]) * (got[..., a] + 1j * got[..., b])
    return _by_position(sign * np.broadcast_to(pos, v.shape[:-1]), z)


def _by_position(p: np.ndarray, z: np.ndarray):
    """Unique positions ``P`` (sorted) and the sums of ``z[..., i]`` over the tokens at each."""
    uniq, inverse = np.unique(p.reshape(-1), return_inverse=True)
    w = np.zeros((uniq.size, z.shape[-1]), dtype=complex)
    np.add.at(w, inverse, z.reshape(-1, z.shape[-1]))
    return uniq, w


def _observed_freqs(P: np.ndarray, W: np.ndarray) -> tuple[np.ndarray, float, float] | None:
    """Each pair's angular frequency (radians per position) fitted to the observed angles, the span used
    and the smallest gap: first from that gap, then refined over spans doubling up to the widest."""
    if P.size < 2:
        return None
    gaps = np.diff(P)
    g = gaps.min()
    near = np.flatnonzero(gaps <= g * (1 + 1e-9))
    est = np.angle(np.sum(W[near + 1] * np.conj(W[near]), axis=0)) / g
    spans = P - P[0]
    targets = g * 2.0 ** np.arange(1, 64)
    picks = np.unique(np.searchsorted(spans, targets[targets < spans[-1]]))
    span = g
    for j in [*picks[picks < P.size].tolist(), P.size - 1]:
        span = spans[j]
        phi = np.angle(W[j] * np.conj(W[0]))
        est = (phi + 2 * np.pi * np.round((est * span - phi) / (2 * np.pi))) / span
    return est, float(span), float(g)


def _estimate_bases(P: np.ndarray, W: np.ndarray, cfg: RopeConfig, omega: np.ndarray, seq_len) -> list[float]:
    """Bases whose frequencies fit the angles observed in the phasors (see :func:`bases_from_freqs`)."""
    fit = _observed_freqs(P, W)
    if fit is None:
        return []
    obs, span, gap = fit
    # A pair turning by a radian or more between the closest positions may alias: no evidence.
    weight = np.where(omega * gap < 1.0, np.minimum((omega * span) ** 2, 1.0), 0.0)
    return bases_from_freqs(obs, cfg, seq_len, weight)


def bases_from_freqs(
    obs: np.ndarray, cfg: RopeConfig, seq_len, weight: np.ndarray | None = None
) -> list[float]:
    """Bases whose frequencies fit ``obs`` (one per pair; ``weight`` each pair's, default 1), nice or not
    (the caller rounds). First ``omega_i ~ base^(-2i/rotary_dim)``: ``log(obs_i / omega_i) =
    -(2i/rotary_dim) log(base'/base)`` (weighted least squares; exact for a scaling that multiplies the
    base or the frequencies). Under a scaling that treats pairs apart (YaRN, llama3, ...), then the base
    whose scaled frequencies fit best (golden-section search within a factor 8)."""
    omega = inv_freq(cfg, seq_len)
    if omega.size < 2 or np.shape(obs) != omega.shape:
        return []
    weight = np.ones(omega.shape) if weight is None else weight
    e = 2.0 * np.arange(omega.size) / cfg.rotary_dim
    ok = (e > 0) & (obs > 0) & np.isfinite(obs) & (weight > 0)
    if not ok.any():
        return []
    w = weight[ok]
    log_obs = np.log(obs[ok])
    log_ratio = -np.sum(w * e[ok] * (log_obs - np.log(omega[ok]))) / np.sum(w * e[ok] ** 2)
    first = np.log(cfg.base) + log_ratio
    found = [first]
    if cfg.scaling is not None:

        def misfit(log_base: float) -> float:
            try:
                trial = inv_freq(cfg.replace(base=float(np.exp(log_base))), seq_len)[ok]
            except ValueError:
                return np.inf
            return float(np.sum(w * (log_obs - np.log(trial)) ** 2))

        lo, hi = first - np.log(8.0), first + np.log(8.0)
        g = (np.sqrt(5.0) - 1) / 2
        for _ in range(32):
            a, b = hi - g * (hi - lo), lo + g * (hi - lo)
            lo, hi = (lo, b) if misfit(a) < misfit(b) else (a, hi)
        found.append((lo + hi) / 2)
    return [float(np.exp(v)) for v in found if np.isfinite(v) and np.exp(v) > 1.0]


def nice_bases(found: list[float], cfg: RopeConfig) -> list[float]:
    """The estimates rounded to 1, 2, 3 significant figures and as they are, the config's own left out."""
    bases = dict.fromkeys(b for f in found for b in _round_figures(f))
    return [b for b in bases if abs(b / cfg.base - 1.0) > 1e-9]


def base_label(base: float, cfg: RopeConfig) -> str:
    return f"base looks like {base:g} (config has {cfg.base:g})"


def _round_figures(value: float) -> list[float]:
    """``value`` rounded to 1, 2 and 3 significant figures, and itself (distinct, roundest first)."""
    digits = int(np.floor(np.log10(value)))
    out: list[float] = []
    for n in (1, 2, 3):
        r = float(np.round(value, n - 1 - digits))
        if r > 1.0 and r not in out:
            out.append(r)
    return out if float(f"{value:.6g}") in out else [*out, float(f"{value:.6g}")]


def _estimate_shift(P: np.ndarray, W: np.ndarray, omega: np.ndarray) -> float | None:
    """The offset ``k`` with observed angle ``omega_i (p + k)``: each pair's phase ``omega_i k`` after the
    oracle's ``omega_i p`` is removed, resolved from the slowest pair (no wrap) to the fastest."""
    z = np.sum(W * np.exp(-1j * omega * P[:, None]), axis=0)
    mag = np.abs(z)
    if not mag.max() > 0:
        return None
    k = None
    for i in np.argsort(omega):
        if mag[i] <= 1e-9 * mag.max() or omega[i] <= 0:
            continue
        phi = float(np.angle(z[i]))
        k = (
            phi / omega[i]
            if k is None
            else (phi + 2 * np.pi * np.round((k * omega[i] - phi) / (2 * np.pi))) / omega[i]
        )
    return k


def cut_at(case: Any, name: str, got: np.ndarray, policy, pos: np.ndarray) -> tuple[float, float] | None:
    """``(last right, first wrong)`` positions where the output goes wrong at once and stays wrong: every
    token below ``L`` (the first wrong) passes, two positions other than 0 among them, nine in ten from
    ``L`` on fail, and those at ``L`` by err/tol >= 20 (a table too short; an error growing with the
    position, as from rounded frequencies, starts near err/tol 1)."""
    try:
        with np.errstate(all="ignore"):
            return _cut_at(case, name, got, policy, pos)
    except _CANNOT_ESTIMATE:
        return None


def _cut_at(case: Any, name: str, got: np.ndarray, policy, pos: np.ndarray) -> tuple[float, float] | None:
    bounds = tolerance.element_tolerance(case, name, policy)
    expected = np.asarray(case.expected[name], dtype=np.float64)
    with np.errstate(all="ignore"):
        err = np.abs(got - expected)
        ratio = np.where(
            bounds.tol > 0, err / np.where(bounds.tol > 0, bounds.tol, 1.0), np.where(err > 0, np.inf, 0.0)
        )
    ratio = np.where(np.isnan(ratio), np.inf, ratio)
    per_token = ratio.max(axis=-1) if ratio.ndim else ratio
    p = np.broadcast_to(pos, per_token.shape)
    bad = per_token > 1.0
    if not bad.any() or bad.all():
        return None
    cut = float(p[bad].min())
    above = p >= cut
    right = np.unique(p[(p < cut) & (p != 0)])  # position 0 is right under most bugs: no evidence
    if right.size < 2 or bad[above].mean() < 0.9 or per_token[p == cut].min() < 20.0:
        return None
    if cut != np.floor(cut):
        return None
    return float(p[p < cut].max()), cut


def _rotate_with(
    v: np.ndarray, pos: np.ndarray, cfg: RopeConfig, omega: np.ndarray, factor: float, sign: float
):
    """``v`` rotated with the given frequencies (NumPy float64 trig: a candidate, not the oracle)."""
    a, b = pair_indices(cfg)
    theta = sign * np.asarray(pos, dtype=np.float64)[..., None] * omega
    c, s = factor * np.cos(theta), factor * np.sin(theta)
    out = v.copy()
    out[..., a] = v[..., a] * c - v[..., b] * s
    out[..., b] = v[..., b] * c + v[..., a] * s
    return out


def common_bug_candidates(v, got, pos, cfg: RopeConfig, seq_len, build, sign: float, cut) -> list:
    """Mutated runs of a rotation (``v`` rotated by ``sign * pos``; ``got`` the output): a wrong base,
    inv_freq rounded to float16/bfloat16, positions shifted by k, a table read past its end (``cut``
    from :func:`cut_at`), a length-dependent scaling not recomputed, the scaling ignored.
    ``build(cfg or a callable giving it, pos, scale_rot=1, mut_seq_len=..., values=None)`` -> a lazy
    ``(case, name)``; ``values``, a callable giving the mutated output (frequencies of its own)."""

    def run() -> list:
        omega = inv_freq(cfg, seq_len)
        factor = _attention_factor(cfg, seq_len)
        P, W = _phasors(v, got, pos, cfg, sign)
        out = _estimated(
            P,
            W,
            pos,
            cfg,
            seq_len,
            build,
            sign,
            lambda om: build(cfg, pos, values=lambda: _rotate_with(v, pos, cfg, om, factor, sign)),
        )
        if cut is not None:
            out += _table_candidates(P, W, omega, cfg, pos, cut[1], sign, build)
        return out + _scaling_candidates(cfg, pos, seq_len, build)

    return _guarded(run)


def table_bug_candidates(cos_t, sin_t, pos, cfg: RopeConfig, seq_len, build) -> list:
    """The same mutations for a half-width cos/sin table (``positions.shape + (n_pairs,)``); ``build``
    judges the sin; ``build(..., values=f)`` takes ``f()`` as the mutated sin."""

    def run() -> list:
        P, W = _by_position(np.broadcast_to(pos, cos_t.shape[:-1]), cos_t + 1j * sin_t)
        factor = _attention_factor(cfg, seq_len)
        positions = np.asarray(pos, dtype=np.float64)[..., None]
        out = _estimated(
            P,
            W,
            pos,
            cfg,
            seq_len,
            build,
            1.0,
            lambda om: build(cfg, pos, values=lambda: factor * np.sin(positions * om)),
        )
        return out + _scaling_candidates(cfg, pos, seq_len, build)

    return _guarded(run)


def _guarded(run: Callable[[], list]) -> list:
    try:
        with np.errstate(all="ignore"):
            return run()
    except _CANNOT_ESTIMATE:
        return []


def _estimated(P, W, pos, cfg: RopeConfig, seq_len, build, sign: float, custom) -> list:
    """Base and shift estimated from the phasors ``W`` at positions ``P``; frequencies in half precision
    (``custom(omega)``: a lazy run with those frequencies)."""
    out: list = []
    omega = inv_freq(cfg, seq_len)
    for b in nice_bases(_estimate_bases(P, W, cfg, omega, seq_len), cfg):
        out.append((base_label(b, cfg), build(_replacer(cfg, b), pos)))
    for dtype in ("float16", "bfloat16"):
        rounded = tolerance.round_to(omega, dtype)
        if not np.array_equal(rounded, omega):
            label = f"inv_freq computed in {dtype} (the frequencies rounded to {dtype} before the angle)"
            out.append((label, custom(rounded)))
    shift = _estimate_shift(P, W, omega)
    if shift is not None and abs(shift - round(shift)) < 0.25 and round(shift) != 0:
        k = int(round(sign * shift))
        label = f"positions shifted by {k:+d} (the angle of position p{k:+d} used at position p)"
        out.append((label, build(cfg, pos + k)))
    return out


def _scaling_candidates(cfg: RopeConfig, pos, seq_len, build) -> list:
    """A length-dependent scaling not recomputed for ``seq_len`` (a stale cache); the scaling ignored."""
    out: list = []
    if seq_len is not None and not np.array_equal(inv_freq(cfg, 1), inv_freq(cfg, seq_len)):
        label = f"a stale cache: frequencies of a short sequence (not rescaled for seq_len={seq_len})"
        out.append((label, build(cfg, pos, mut_seq_len=1)))
    if cfg.scaling is not None:
        label = f"scaling ignored (the config's {type(cfg.scaling).__name__} not applied)"
        out.append((label, build(lambda: cfg.replace(scaling=None), pos, mut_seq_len=None)))
    return out


def _table_candidates(P, W, omega, cfg, pos, first_bad: float, sign: float, build) -> list:
    """A table of ``n`` rows read past its end, clamped (row ``n - 1``) or wrapped (row ``p mod n``):
    ``n`` from the position the first wrong token was actually rotated by (its phase, as a shift)."""
    j = int(np.searchsorted(P, sign * first_bad))
    if j >= P.size or P[j] != sign * first_bad:
        return []
    with np.errstate(all="ignore"):
        k = _estimate_shift(P[j : j + 1], W[j : j + 1], omega)
    if k is None or abs(k - round(k)) > 0.25:
        return []
    used = first_bad + sign * round(k)  # the row the first wrong position read
    out = []
    for n, how, mutated in (
        (used + 1, f"clamped to row {used:g}", lambda n: np.minimum(pos, n - 1)),
        (first_bad - used, "wrapped to row p mod {n:g}", lambda n: np.mod(pos, n)),
    ):
        if 1 <= n <= first_bad and 0 <= used < first_bad:
            text = f"a cos/sin table of {n:g} rows read past its end (positions >= {n:g} {how.format(n=n)})"
            out.append((text, build(cfg, mutated(n))))
    return out


def _replacer(cfg: RopeConfig, base: float):
    return lambda: cfg.replace(base=base)


def cut_text(cut: tuple[float, float] | None) -> str | None:
    """The pattern :func:`cut_at` found, named when no mutation matches."""
    if cut is None:
        return None
    last, first = cut
    right = f"below {first:g}" if last == first - 1 else f"up to {last:g}"
    return (
        f"a cos/sin table built for a shorter length, or a stale cache: every position {right} is right "
        f"and every position from {first:g} on wrong"
    )
