"""Long-term decay of RoPE: RoFormer's relative upper bound, the Abel-summation inequality, score curves.

Source: Su et al., *RoFormer*, arXiv 2104.09864, §3.4.3, eqs. 35-37. With h_i = q_[2i:2i+1] k*_[2i:2i+1]
(pair i of q and k as complex numbers), S_j = sum_{i=0}^{j-1} e^{i r theta_i}, h_{d/2} = 0 and r = m - n,

    (R_m q)^T (R_n k) = Re[sum_i h_i e^{i r theta_i}]                                  (eq. 35)
    |sum_i h_i e^{i r theta_i}| <= (max_i |h_{i+1} - h_i|) * sum_{j=1}^{d/2} |S_j|      (eqs. 36-37)

and the paper plots the "relative upper bound" (1/(d/2)) sum_{j=1}^{d/2} |S_j| against r (Figure 2; the
plotting recipe with d = 128 is in Su's blog, https://kexue.fm/archives/8265, section 远程衰减).
Here d is the *rotary* width and theta_i the config's frequencies, so every scaling type works.
matplotlib is imported only inside :func:`plot_decay`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from ._arrays import as_float64, as_positions, check_int, check_real
from ._exact_trig import cos_sin_of_product
from ._fixed import fixed_sum, fixed_sum_in_place, irwin_hall
from .config import RopeConfig
from .frequencies import _check_config, attention_factor, inv_freq, resolve_seq_len
from .rotation import pair_indices

__all__ = ["relative_upper_bound", "abel_bound", "AbelBound", "score_curve", "plot_decay", "config_label"]

#: Default memory budget of one chunk of :func:`relative_upper_bound`, :func:`abel_bound` and
#: :func:`score_curve` (bytes of float64 work arrays).
DEFAULT_MAX_BYTES = 32 * 2**20

#: Largest ``samples`` accepted by :func:`score_curve` (the work is chunked; this bounds the time).
MAX_SAMPLES = 10_000_000

# Float64 work arrays of one distance row, counted generously (the trig kernel's temporaries included).
_WORK_ARRAYS = 24


def _distances_and_seq_len(
    distances: Any, cfg: RopeConfig, seq_len: int | None
) -> tuple[np.ndarray, int | None]:
    """Validate distances; pick the sequence length a length-dependent scaling sees.

    Without an explicit ``seq_len`` a length-dependent scaling (dynamic NTK, LongRoPE) sees
    max|r| + 1, the shortest sequence that contains every distance (HF's max(position_ids) + 1 rule).
    """
    r = as_positions(distances, "distances")
    return r, resolve_seq_len(np.abs(r), cfg, seq_len)


def relative_upper_bound(
    distances: Any, cfg: RopeConfig, *, seq_len: int | None = None, max_bytes: int = DEFAULT_MAX_BYTES
) -> np.ndarray:
    """RoFormer's relative upper bound (1/(d/2)) sum_{j=1}^{d/2} |S_j(r)|, float64, shape of ``distances``.

    S_j(r) = sum_{i=0}^{j-1} e^{i r theta_i} with theta_i = ``inv_freq(cfg, seq_len)`` (RoFormer §3.4.3,
    text after eq. 37; Figure 2). d = ``cfg.rotary_dim``. Distances may be real and negative
    (f(-r) = f(r)). At r = 0 every S_j = j, so the value is (d/2 + 1)/2. The attention factor of a
    scaling is not included: it multiplies the score by A**2 but not the phases.

    Work is chunked over distances so that the temporary arrays stay below ``max_bytes`` (at least one
    distance per chunk).
    """
    cfg = _check_config(cfg)
    max_bytes = check_int(max_bytes, "max_bytes", minimum=1)
    r, seq_len = _distances_and_seq_len(distances, cfg, seq_len)
    theta = inv_freq(cfg, seq_len)
    n = theta.size
    flat = r.reshape(-1)
    out = np.empty(flat.shape, dtype=np.float64)
    rows = max(1, max_bytes // (_WORK_ARRAYS * 8 * n))
    for start in range(0, flat.size, rows):
        a, b = _tables_pairs_first(flat[start : start + rows], theta)
        out[start : start + a.shape[1]] = _mean_abs_partial_sums(a, b)
    return out.reshape(r.shape)


def _tables_pairs_first(r: np.ndarray, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of ``r * theta_i`` (exact products) with the pair axis first: shape ``(n, *r.shape)``.

    Running and pairwise sums over the n pairs then add whole contiguous rows of distances, several
    times faster than along a short last axis. Each entry is the one ``cos_sin_of_product(r[..., None],
    theta)`` gives (an elementwise kernel), only laid out transposed.
    """
    return cos_sin_of_product(r[None], theta.reshape(theta.shape + (1,) * r.ndim))


def _mean_abs_partial_sums(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(1/n) sum_{j=1}^{n} |S_j| along the first axis, from cos (``a``) and sin (``b``) of the n angles.

    ``a`` and ``b`` have the pair axis first (:func:`_tables_pairs_first`) and are overwritten. Shared by
    :func:`relative_upper_bound` and :func:`abel_bound`.
    """
    # Running sums, sequential in pair order: S_j = S_{j-1} + e^{i r theta_{j-1}}.
    for j in range(1, a.shape[0]):
        np.add(a[j - 1], a[j], out=a[j])
        np.add(b[j - 1], b[j], out=b[j])
    # |S_j| = sqrt(Re^2 + Im^2); no overflow risk (|S_j| <= j), and cheaper than np.hypot.
    np.multiply(a, a, out=a)
    np.multiply(b, b, out=b)
    np.add(a, b, out=a)
    np.sqrt(a, out=a)
    return fixed_sum_in_place(a, axis=0) / a.shape[0]


class AbelBound(NamedTuple):
    """Both sides of RoFormer eq. 37: ``exact`` = |sum_i h_i e^{i r theta_i}| <= ``bound``."""

    exact: np.ndarray
    bound: np.ndarray


def _check_vector(x: Any, cfg: RopeConfig, name: str) -> np.ndarray:
    arr = as_float64(x, name)
    if arr.ndim == 0 or arr.shape[-1] != cfg.head_dim:
        raise ValueError(f"{name}.shape[-1] must equal head_dim={cfg.head_dim}, got {name}.shape={arr.shape}")
    return arr


def abel_bound(q: Any, k: Any, distance: Any, cfg: RopeConfig, *, seq_len: int | None = None) -> AbelBound:
    """Both sides of the Abel-summation inequality (RoFormer eqs. 36-37) for q, k at relative distance r.

    ``exact`` = |sum_{i<d/2} h_i e^{i r theta_i}| with h_i = q_pair_i * conj(k_pair_i) (pairs taken from
    the config's layout, d = rotary_dim; pass-through channels do not enter). ``bound`` =
    (max_{0<=i<d/2} |h_{i+1} - h_i|) * sum_{j=1}^{d/2} |S_j(r)|, with h_{d/2} = 0. ``q`` and ``k`` have
    shape ``(..., head_dim)`` and broadcast together; ``distance`` broadcasts against their leading shape.
    The attention factor of a scaling is left out, as in the paper.
    """
    cfg = _check_config(cfg)
    q = _check_vector(q, cfg, "q")
    k = _check_vector(k, cfg, "k")
    try:
        lead = np.broadcast_shapes(q.shape[:-1], k.shape[:-1])
    except ValueError:
        raise ValueError(f"q of shape {q.shape} and k of shape {k.shape} do not broadcast together") from None
    r, seq_len = _distances_and_seq_len(distance, cfg, seq_len)
    try:
        lead = np.broadcast_shapes(lead, r.shape)
    except ValueError:
        raise ValueError(f"distance of shape {r.shape} does not broadcast against q/k shape {lead}") from None
    theta = inv_freq(cfg, seq_len)
    h_re, h_im = _pair_products(q, k, cfg)
    # max_i |h_{i+1} - h_i| with h_{d/2} = 0, and sum_j |S_j(r)|, per (broadcast) q/k row.
    d_re = np.concatenate([h_re[..., 1:], np.zeros_like(h_re[..., :1])], axis=-1) - h_re
    d_im = np.concatenate([h_im[..., 1:], np.zeros_like(h_im[..., :1])], axis=-1) - h_im
    max_step = np.max(np.sqrt(d_re * d_re + d_im * d_im), axis=-1)
    # When q and k add no axis to the distances' (the usual case), each chunk's cos/sin serve both sides;
    # otherwise the bound side runs over the distances alone (fewer angles than the exact side).
    shared = lead == r.shape
    lead_1 = lead if lead else (1,)
    if shared:
        mean_abs_s = np.empty(lead_1, dtype=np.float64)
    else:
        mean_abs_s = relative_upper_bound(r, cfg, seq_len=seq_len)
    # |sum_i h_i e^{i r theta_i}|, chunked along the leading axis so the (rows, n) tables stay bounded.
    h_re, h_im = (  # pair axis first, as the tables below
        np.moveaxis(np.broadcast_to(a, lead + a.shape[-1:]).reshape(lead_1 + a.shape[-1:]), -1, 0)
        for a in (h_re, h_im)
    )
    r_full = np.broadcast_to(r, lead).reshape(lead_1)
    exact = np.empty(lead_1, dtype=np.float64)
    per_row = int(np.prod(lead_1[1:], dtype=np.int64)) * theta.size
    rows = max(1, DEFAULT_MAX_BYTES // (_WORK_ARRAYS * 8 * per_row))
    for start in range(0, lead_1[0], rows):
        sl = slice(start, start + rows)
        c, s = _tables_pairs_first(r_full[sl], theta)
        re = fixed_sum_in_place(h_re[:, sl] * c - h_im[:, sl] * s, axis=0)  # sums of fresh temporaries
        im = fixed_sum_in_place(h_re[:, sl] * s + h_im[:, sl] * c, axis=0)
        exact[sl] = np.sqrt(re * re + im * im)
        if shared:
            mean_abs_s[sl] = _mean_abs_partial_sums(c, s)
    sum_abs_s = theta.size * mean_abs_s.reshape(r.shape)
    bound = np.broadcast_to(max_step * sum_abs_s, lead).copy()
    return AbelBound(exact.reshape(lead), bound)


def _pair_products(q: np.ndarray, k: np.ndarray, cfg: RopeConfig) -> tuple[np.ndarray, np.ndarray]:
    """Real and imaginary parts of h_i = q_pair_i * conj(k_pair_i), spelled out in real arithmetic.

    (qa + i qb)(ka - i kb) = (qa ka + qb kb) + i (qb ka - qa kb). NumPy's complex multiply may use
    fused multiply-adds on some CPUs; these four products and two sums round the same everywhere.
    """
    a, b = pair_indices(cfg)
    qa, qb, ka, kb = q[..., a], q[..., b], k[..., a], k[..., b]
    return qa * ka + qb * kb, qb * ka - qa * kb


def score_curve(
    distances: Any,
    cfg: RopeConfig,
    q: Any = None,
    k: Any = None,
    *,
    samples: int = 0,
    seed: int = 0,
    correlation: float = 1.0,
    seq_len: int | None = None,
) -> np.ndarray:
    """The rotated score (R_m q)^T (R_n k) as a function of r = m - n, float64, shape of ``distances``.

    By RoFormer eq. 35 the score is A**2 Re[sum_i h_i e^{i r theta_i}] plus the plain dot product of the
    pass-through channels, A being the scaling's attention factor (HF multiplies cos and sin by A). It
    depends on m and n only through r. Sign convention: the value at r is ``apply(q, r) . k``, that is
    ``q^T R_{-r} k`` (RoFormer eq. 16 with n - m = -r); ``q . apply(k, r)`` is the value at -r.

    - Default (``q = k = None``, ``samples = 0``): q = k = all-ones, the curve often shown in blog posts
      (it equals 2 A**2 sum_i cos(r theta_i) when nothing passes through).
    - ``q``, ``k`` of shape ``(..., head_dim)``: the score averaged over their (broadcast) leading axes.
    - ``samples > 0`` (q and k must be None): the average over ``samples`` random pairs, q ~ N(0, I)
      and k = rho q + sqrt(1 - rho**2) eps with rho = ``correlation``, eps ~ N(0, I), drawn with
      ``numpy.random.default_rng(seed)`` (normal draws by Irwin-Hall, :func:`rope_ref._fixed.irwin_hall`,
      so the bits do not depend on the C library), in chunks of bounded memory; at most
      :data:`MAX_SAMPLES` samples. Its expectation is rho times the all-ones curve.

    The score is linear in h, so averaging h over samples first is exact.
    """
    cfg = _check_config(cfg)
    samples = check_int(samples, "samples", minimum=0)
    if samples > MAX_SAMPLES:
        raise ValueError(f"samples must be <= {MAX_SAMPLES}, got {samples}")
    r, seq_len = _distances_and_seq_len(distances, cfg, seq_len)
    if samples:
        if q is not None or k is not None:
            raise ValueError("pass either q and k, or samples > 0, not both")
        seed = check_int(seed, "seed", minimum=0)
        rho = check_real(correlation, "correlation")
        if not -1.0 <= rho <= 1.0:
            raise ValueError(f"correlation must be in [-1, 1], got {rho}")
        h_re, h_im, passthrough = _sampled_pair_means(cfg, samples, seed, rho)
    else:
        if (q is None) != (k is None):
            raise ValueError("pass both q and k, or neither")
        if q is None:
            q = k = np.ones(cfg.head_dim)
        q = _check_vector(q, cfg, "q")
        k = _check_vector(k, cfg, "k")
        try:
            q, k = np.broadcast_arrays(q, k)
        except ValueError:
            raise ValueError(
                f"q of shape {q.shape} and k of shape {k.shape} do not broadcast together"
            ) from None
        q2 = q.reshape(-1, cfg.head_dim)
        k2 = k.reshape(-1, cfg.head_dim)
        if q2.shape[0] == 0:
            raise ValueError(f"q and k must hold at least one vector to average over, got shape {q.shape}")
        h_re, h_im, passthrough = (v / q2.shape[0] for v in _pair_sums(q2, k2, cfg))
    theta = inv_freq(cfg, seq_len)
    scale = attention_factor(cfg, seq_len) ** 2
    flat = r.reshape(-1)
    out = np.empty(flat.shape, dtype=np.float64)
    rows = max(1, DEFAULT_MAX_BYTES // (_WORK_ARRAYS * 8 * theta.size))
    for start in range(0, flat.size, rows):
        c, s = cos_sin_of_product(flat[start : start + rows, None], theta)
        out[start : start + rows] = fixed_sum_in_place(c * h_re - s * h_im, axis=-1)
    return (scale * out + passthrough).reshape(r.shape)


def _pair_sums(q2: np.ndarray, k2: np.ndarray, cfg: RopeConfig) -> tuple[np.ndarray, np.ndarray, float]:
    """Sums over rows of h_i (real and imaginary parts) and of the pass-through dot product."""
    h_re, h_im = _pair_products(q2, k2, cfg)
    rd = cfg.rotary_dim
    through = float(fixed_sum(fixed_sum(q2[:, rd:] * k2[:, rd:], axis=-1)))
    return fixed_sum(h_re, axis=0), fixed_sum(h_im, axis=0), through


def _sampled_pair_means(cfg: RopeConfig, samples: int, seed: int, rho: float):
    """Means of h_i and of the pass-through product over ``samples`` random (q, k) pairs, drawn in chunks.

    Chunk c draws its q rows, then its eps rows; chunk sums are added in chunk order, so the answer
    depends only on (samples, seed, rho) and memory stays within :data:`DEFAULT_MAX_BYTES`.
    """
    rng = np.random.default_rng(seed)
    noise = np.sqrt(1.0 - rho * rho)
    rows = max(1, DEFAULT_MAX_BYTES // (8 * 8 * cfg.head_dim))
    n = cfg.rotary_dim // 2
    h_re, h_im, through = np.zeros(n), np.zeros(n), 0.0
    for start in range(0, samples, rows):
        count = min(rows, samples - start)
        q = irwin_hall(rng, (count, cfg.head_dim))
        k = rho * q + noise * irwin_hall(rng, (count, cfg.head_dim))
        s_re, s_im, s_through = _pair_sums(q, k, cfg)
        h_re, h_im, through = h_re + s_re, h_im + s_im, through + s_through
    return h_re / samples, h_im / samples, through / samples


def config_label(cfg: RopeConfig) -> str:
    """A short legend label: ``d=128 base=10000`` plus the rotary width and scaling when they matter."""
    cfg = _check_config(cfg)
    label = f"d={cfg.head_dim} base={cfg.base:g}"
    if cfg.rotary_dim != cfg.head_dim:
        label += f" rotary={cfg.rotary_dim}"
    if cfg.scaling is not None:
        label += f" {cfg.scaling!r}"
    return label


def plot_decay(
    configs: RopeConfig | Sequence[RopeConfig],
    max_distance: float,
    *,
    step: float = 1.0,
    labels: Sequence[str] | None = None,
    log_x: bool = False,
    window: int = 1,
    title: str | None = None,
    figsize: tuple[float, float] = (7.0, 4.0),
    path: str | None = None,
    dpi: int = 100,
) -> Any:
    """One matplotlib figure of :func:`relative_upper_bound` over ``0..max_distance`` for several configs.

    Distances are ``0, step, 2 step, ..., <= max_distance``. Curves are labelled by :func:`config_label`
    unless ``labels`` is given. ``window > 1`` draws the mean over each run of ``window`` consecutive
    distances (a moving average, plotted at the run's centre), which makes curves out to tens of
    thousands of positions readable. With ``path`` the figure is saved as PNG (Agg backend). Returns the
    ``matplotlib.figure.Figure``. Needs the ``plot`` extra (matplotlib); imported only here.
    """
    if isinstance(configs, RopeConfig):
        configs = [configs]
    configs = [_check_config(c) for c in configs]
    if not configs:
        raise ValueError("configs must contain at least one RopeConfig")
    if labels is None:
        labels = [config_label(c) for c in configs]
    labels = list(labels)
    if len(labels) != len(configs):
        raise ValueError(f"labels has {len(labels)} entries for {len(configs)} configs")
    distances = decay_distances(max_distance, step)
    window = check_int(window, "window", minimum=1)
    if window > distances.size:
        raise ValueError(f"window must be <= the number of distances ({distances.size}), got {window}")
    kernel = np.full(window, 1.0 / window)
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:  # pragma: no cover - matplotlib is in the test extra
        raise ImportError("plot_decay needs matplotlib: pip install 'rope-ref[plot]'") from exc
    fig = Figure(figsize=figsize)
    ax = fig.add_subplot()
    for cfg, label in zip(configs, labels, strict=True):
        curve = relative_upper_bound(distances, cfg)
        if window > 1:
            xs = np.convolve(distances, kernel, mode="valid")
            curve = np.convolve(curve, kernel, mode="valid")
        else:
            xs = distances
        ax.plot(xs, curve, label=label, linewidth=0.8 if window == 1 else 1.2)
    if log_x:
        ax.set_xscale("symlog", linthresh=max(step, 1.0))
    ax.set_xlabel("relative distance m - n")
    ylabel = "relative upper bound (1/(d/2)) sum |S_j|"
    ax.set_ylabel(ylabel if window == 1 else f"{ylabel}\nmoving mean over {window} distances")
    ax.set_title(title or "RoPE long-term decay (RoFormer §3.4.3)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    if path is not None:
        # Figure() without pyplot uses the Agg canvas for PNG output.
        fig.savefig(path, dpi=dpi, format="png")
    return fig


def decay_distances(max_distance: float, step: float = 1.0) -> np.ndarray:
    """The grid ``0, step, ..., <= max_distance`` (float64) used by :func:`plot_decay` and the command."""
    max_distance = check_real(max_distance, "max_distance")
    step = check_real(step, "step")
    if max_distance <= 0:
        raise ValueError(f"max_distance must be > 0, got {max_distance}")
    if step <= 0:
        raise ValueError(f"step must be > 0, got {step}")
    ratio = max_distance / step  # may be inf (1e308 / 1e-10): compared before any int conversion
    if not ratio < 10_000_000:
        raise ValueError(
            f"max_distance / step = {ratio:.4g} gives more than 10^7 points; at most 10^7 are allowed"
        )
    count = int(np.floor(ratio + 1e-9)) + 1
    return np.arange(count, dtype=np.float64) * step
