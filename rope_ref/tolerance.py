"""The tolerance model: how far a backend's output may be from the float64 golden value, per element.

The derivation is in ``docs/tolerance.md``; in short, for a backend with precision policy
(``io_dtype``, ``angle_dtype``, ``compute_dtype``) and unit roundoffs ``u_io``, ``u_a``, ``u_c``:

* the angle m * theta_i of a correct implementation carries a *relative* error of at most
  ``k_i * u_a`` with ``k_i = PHASE_SLACK + 2 |ln theta_i|`` (position rounding, the product, and the
  inverse frequency ``base ** (-2i/d)`` whose exponent rounding is amplified by ``|ln theta_i|``
  (Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., §1.5 on condition numbers);
* the rotation of pair (a, b) with radius r = hypot(x_a, x_b) and attention factor A moves each
  output by at most ``A r |d angle|`` for an angle error ``d angle`` (the derivative of
  ``A (x_a cos t - x_b sin t)`` in t is ``-y_b``, and ``|y_b| <= A r``), plus a few roundings of size
  ``A r u`` in the I/O, angle and compute dtypes (Higham §2.2 model ``fl(a op b) = (a op b)(1 + d)``,
  ``|d| <= u``).

Hence for every rotated element ``|got - expected| <= A r (k_i |m theta_i| u_a + ROUND_SLACK u_r) + floor``
with ``u_r = u_io + u_a + u_c``. Pass-through channels, position 0 when A = 1, and integer ids are
exact. NaN and infinity never pass. Angles are always judged at float32 precision or better: a
backend that declares bfloat16 or float16 angles is held to float32 angles, because half-precision
angles are the bug (``docs/known-bugs.md`` §1), not a policy.

Each rule name of :attr:`rope_ref.case.Case.tolerance` maps to one function here. The model sits in
rope_ref, below both users: :mod:`rope_ref.testing` and the conformance runner
(``rope_ref.conformance.tolerance`` re-exports it).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .case import Case, config_from_dict, placed_positions, spec_from_dict, v_heads_index
from .config import RopeConfig
from .frequencies import angles, attention_factor, inv_freq, resolve_seq_len
from .multiaxis import _resolved_seq_len
from .precision import PrecisionPolicy
from .rotation import pair_indices
from .scaling import YaRN

__all__ = [
    "RULES",
    "UNIT_ROUNDOFF",
    "PHASE_SLACK",
    "ROUND_SLACK",
    "Comparison",
    "unit_roundoff",
    "angle_roundoff",
    "element_tolerance",
    "compare_output",
    "check_case",
    "round_to",
]

#: Unit roundoff u = 2^-p of each dtype (p = significand bits incl. the implicit one); IEEE 754-2008
#: binary64/32/16 and Google's bfloat16 (8 significand bits).
UNIT_ROUNDOFF = {"float64": 2.0**-53, "float32": 2.0**-24, "float16": 2.0**-11, "bfloat16": 2.0**-8}

#: Smallest positive normal number of each dtype: a floor for outputs near zero (flush-to-zero devices).
_TINY = {"float64": 2.0**-1022, "float32": 2.0**-126, "float16": 2.0**-14, "bfloat16": 2.0**-126}

#: Constant part of the per-pair phase factor k_i = PHASE_SLACK + 2 |ln theta_i| (see docs/tolerance.md).
PHASE_SLACK = 8.0
#: Number of unit roundoffs allowed for the rotation arithmetic, the cos/sin evaluation and the casts.
ROUND_SLACK = 8.0
#: Emulation rule: fp16 ulps (2 u16 each) of the pair radius a faithful fp16 port may differ by.
EMULATION_ULPS = 3.0

RULES = ("exact", "table", "trig", "rotation", "emulation", "decay", "scale")

#: Roundings in a float evaluation of the MLA softmax scale qk_head_dim^-0.5 * (0.1 m ln f + 1)^2: the
#: power, the logarithm, two products and a sum in mscale, its square and the final product (7, plus one
#: for the log's own error, which mscale's condition number below 1 does not amplify).
SCALE_ROUNDINGS = 8.0


def unit_roundoff(dtype: str) -> float:
    """u of a canonical dtype name (``float64`` ... ``bfloat16``)."""
    if dtype not in UNIT_ROUNDOFF:
        raise ValueError(f"dtype must be one of {sorted(UNIT_ROUNDOFF)}, got {dtype!r}")
    return UNIT_ROUNDOFF[dtype]


def angle_roundoff(policy: PrecisionPolicy) -> float:
    """u of the angle dtype, capped at float32's: half-precision angles are never admitted."""
    return min(unit_roundoff(policy.angle_dtype), UNIT_ROUNDOFF["float32"])


def _rounding(policy: PrecisionPolicy) -> float:
    """u_r = u_io + u_a + u_c: the roundings a rotation may pick up in each dtype it passes through."""
    return unit_roundoff(policy.io_dtype) + angle_roundoff(policy) + unit_roundoff(policy.compute_dtype)


def _floor(policy: PrecisionPolicy) -> float:
    return 4.0 * max(_TINY[policy.io_dtype], _TINY[policy.compute_dtype])


def _table_dtype(policy: PrecisionPolicy) -> str:
    """The dtype tables (inv_freq, attention factor, decay sums) are judged in: the angle dtype, at least
    float32. They are never held in the I/O dtype, so its roundoff and its tiny floor do not apply."""
    return "float64" if policy.angle_dtype == "float64" else "float32"


def _table_floor(policy: PrecisionPolicy) -> float:
    """4 tiny of the table dtype: a floor for flushed subnormals, never the I/O dtype's (much larger) one."""
    return 4.0 * _TINY[_table_dtype(policy)]


#: Roundings in the float32 evaluation of YaRN's correction bound corr(beta) = d ln(L0 / (2 pi beta)) /
#: (2 ln base): |d corr| <= YARN_CORR_SLACK (|corr| + d / (2 ln base)) u_a (docs/tolerance.md, "YaRN").
YARN_CORR_SLACK = 4.0


def _scaling_phase_factor(cfg, omega: np.ndarray) -> np.ndarray:
    """Extra relative inv_freq error (in units of u_a) a scaling's own arithmetic adds, per pair.

    Only YaRN with ``truncate=False`` has one: its ramp bounds are real numbers, so rounding them moves
    the ramp r_i by dr_i <= (|d low| + |d high|) / (high - low) + 3 u_a, and omega_i = theta_i (1 - r_i
    (1 - 1/f)) by a relative (1 - 1/f) dr_i / (1 - r_i (1 - 1/f)), up to f times dr_i near r_i = 1.
    With ``truncate=True`` the bounds are integers and rounding cannot move them.
    """
    scaling = getattr(cfg, "scaling", None)
    extra = np.zeros(np.shape(omega))
    if not isinstance(scaling, YaRN) or scaling.truncate or np.ndim(omega) != 1:
        return extra
    d, base, f = cfg.rotary_dim, float(cfg.base), float(scaling.factor)
    if f <= 1.0:
        return extra
    scale = d / (2.0 * np.log(base))
    low, high = scaling.correction_range(base, d)
    if low == high:
        high += 0.001
    u_a = UNIT_ROUNDOFF["float32"]
    d_low = YARN_CORR_SLACK * (abs(low) + scale) * u_a
    d_high = YARN_CORR_SLACK * (abs(high) + scale) * u_a
    i = np.arange(np.size(omega), dtype=np.float64)
    r = np.clip((i - low) / (high - low), 0.0, 1.0)
    dr = (d_low + d_high) / (high - low) + 3.0 * u_a
    moved = (i > low - d_low) & (i < high + d_high)  # pairs a rounded bound can reach
    g = 1.0 - 1.0 / f
    return np.where(moved, g * dr / (1.0 - r * g) / u_a, 0.0)


def _phase_factor(omega: np.ndarray) -> np.ndarray:
    """k_i = PHASE_SLACK + 2 |ln theta_i|, the relative angle error (in units of u_a) of pair i."""
    with np.errstate(divide="ignore"):
        log = np.abs(np.log(np.abs(omega)))
    return PHASE_SLACK + 2.0 * np.where(np.isfinite(log), log, 0.0)


# -- oracle quantities the rules need (angles, frequencies, attention factor) --------------------------


def _rope_terms(cfg, positions: np.ndarray, seq_len: int | None):
    """``(theta, omega, A)``: angles (positions.shape + (n,)), inverse frequencies and attention factor."""
    pos = np.asarray(positions, dtype=np.float64)
    seq_len = resolve_seq_len(pos, cfg, seq_len)
    return angles(pos, cfg, seq_len=seq_len), inv_freq(cfg, seq_len), attention_factor(cfg, seq_len)


def _pairs(cfg) -> tuple[np.ndarray, np.ndarray]:
    return pair_indices(cfg)


def _rotation_bounds(v: np.ndarray, positions: np.ndarray, cfg, seq_len: int | None, policy: PrecisionPolicy):
    """Per-element tolerance and exact mask for rotating ``v`` (``(..., head_dim)``) by ``positions``.

    Also returns ``(a, b, amplitude, norm_tol)`` for the pair-norm check: ``|y_pair|`` must equal
    ``A r`` up to roundoff whatever the phase.
    """
    theta, omega, factor = _rope_terms(cfg, positions, seq_len)
    lead = v.shape[:-1]
    theta = np.broadcast_to(
        theta.reshape((1,) * (len(lead) - positions.ndim) + theta.shape), lead + theta.shape[-1:]
    )
    a, b = _pairs(cfg)
    radius = np.hypot(v[..., a], v[..., b])
    amplitude = abs(factor) * radius
    k = _phase_factor(omega) + _scaling_phase_factor(cfg, omega)
    tol, exact, norm_tol = _pair_bounds(v.shape, cfg.rotary_dim, a, b, amplitude, k * np.abs(theta), policy)
    if factor == 1.0:
        zero = np.broadcast_to(
            (positions == 0).reshape((1,) * (len(lead) - positions.ndim) + positions.shape), lead
        )
        exact[..., : cfg.rotary_dim] |= zero[..., None]
    tol[exact] = 0.0
    return tol, exact, (a, b, amplitude, norm_tol)


def _pair_bounds(shape, rotary_dim: int, a, b, amplitude, phase, policy: PrecisionPolicy):
    """``(tol, exact, norm_tol)`` of a rotation whose pair ``(a, b)`` has amplitude ``A r`` and angle error
    ``phase * u_a`` (``phase = k |theta|``): ``A r (k |theta| u_a + ROUND_SLACK u_r) + floor`` on both
    channels of each pair, the pass-through channels from ``rotary_dim`` on exact (the caller adds the
    pairs it knows are exact and zeroes their tolerance)."""
    u_r, floor = _rounding(policy), _floor(policy)
    pair_tol = amplitude * (phase * angle_roundoff(policy) + ROUND_SLACK * u_r) + floor
    tol = np.zeros(shape, dtype=np.float64)
    tol[..., a] = pair_tol
    tol[..., b] = pair_tol
    exact = np.zeros(shape, dtype=bool)
    exact[..., rotary_dim:] = True
    return tol, exact, amplitude * ROUND_SLACK * u_r + floor


def _multiaxis_bounds(v: np.ndarray, positions: np.ndarray, spec, policy: PrecisionPolicy):
    """Per-element tolerance, exact mask and pair-norm data of ``multiaxis_apply``.

    The 1D rotation bound applied pair by pair: pair ``i`` has angle ``m^(s(i)) phi_i``, frequency ``phi_i``
    and attention factor ``A_i`` of its stream's table.
    """
    seq_len = _resolved_seq_len(positions, spec, None)
    phi, amp = spec.pair_frequencies(seq_len)
    streams = np.asarray(spec.streams)
    k = _phase_factor(phi)
    for s, table in enumerate(spec.tables):
        sel = streams == s
        if sel.any():
            extra = _scaling_phase_factor(table, inv_freq(table, seq_len))
            k[sel] = k[sel] + extra[np.asarray(spec.freq_index)[sel]]
    lead = v.shape[:-1]
    m = np.moveaxis(positions, 0, -1)[..., streams]
    m = np.broadcast_to(m.reshape((1,) * (len(lead) - (m.ndim - 1)) + m.shape), lead + m.shape[-1:])
    theta = m * phi
    a, b = spec.pair_indices()
    amplitude = np.abs(amp) * np.hypot(v[..., a], v[..., b])
    tol, exact, norm_tol = _pair_bounds(v.shape, spec.rotary_dim, a, b, amplitude, k * np.abs(theta), policy)
    keep = (m == 0) & (amp == 1.0)
    exact[..., a] |= keep
    exact[..., b] |= keep
    tol[exact] = 0.0
    return tol, exact, (a, b, amplitude, norm_tol)


#: Kernel-shape operations and the input each output rotates.
_KERNEL_SOURCES = {
    "apply_axes": {"out": "x"},
    "round_trip": {"out": "x"},
    "apply_qk": {"q": "q", "k": "k"},
    "apply_qkv": {"out": "qkv"},
}


def _kernel_bounds(case: Case, name: str, policy: PrecisionPolicy) -> tuple[np.ndarray, np.ndarray, list]:
    """``(tol, exact, norms)`` of output ``name`` of a kernel-shape case: :func:`_rotation_bounds` applied
    to the placed positions (negated for ``inverse``; seq_len from the forward positions). ``round_trip``:
    the first rotation's bound carried through the second (``sqrt(2) A`` times it) plus the second's, whose
    input pairs have radius ``|A| r`` (the bound of ``|A| x``); no pair-norm check. ``apply_qkv``: V exact."""
    cfg = config_from_dict(case.config)
    p = case.params
    inverse = bool(p.get("inverse", False))
    v = np.asarray(case.inputs[_KERNEL_SOURCES[case.op][name]], dtype=np.float64)
    pos = placed_positions(case.inputs, p, v.shape)
    forward = placed_positions(case.inputs, p, np.shape(case.inputs["q"])) if case.op == "apply_qk" else pos
    seq_len = resolve_seq_len(forward, cfg, p.get("seq_len"))
    signed = -pos if inverse else pos
    tol, exact, (a, b, amp, ntol) = _rotation_bounds(v, signed, cfg, seq_len, policy)
    if case.op == "round_trip":  # the intermediate's pairs have radius |A| r: the bound of |A| x
        factor = abs(attention_factor(cfg, seq_len))
        tol2, exact2, _ = _rotation_bounds(factor * v, -signed, cfg, seq_len, policy)
        tol = math.sqrt(2.0) * factor * tol + tol2
        exact = exact & exact2
        tol[exact] = 0.0
        return tol, exact, []
    norms = [(slice(None), a, b, amp, ntol)]
    if case.op == "apply_qkv":
        vi = v_heads_index(p, v.ndim)
        tol[vi] = 0.0
        exact[vi] = True
        amp = amp.copy()
        ntol = np.array(ntol, copy=True)
        amp[vi] = np.hypot(v[..., a], v[..., b])[vi]
        ntol = np.broadcast_to(ntol, amp.shape).copy()
        ntol[vi] = 0.0
        norms = [(slice(None), a, b, amp, ntol)]
    return tol, exact, norms


def _chatglm_halves(case: Case) -> list[tuple[slice, np.ndarray, object]]:
    """ChatGLM-6B 2D: ``(channels, ids, cfg)`` per half (``rope_ref.chatglm.apply_2d``)."""
    x = case.inputs["x"]
    half = x.shape[-1] // 2
    cfg = RopeConfig(half, layout="half", base=float(case.params.get("base", 10000.0)))
    pos = np.asarray(case.inputs["position_ids"], dtype=np.float64)
    blk = np.asarray(case.inputs["block_position_ids"], dtype=np.float64)
    return [(slice(0, half), pos, cfg), (slice(half, None), blk, cfg)]


@dataclass(frozen=True)
class _Bounds:
    tol: np.ndarray
    exact: np.ndarray
    norms: list  # [(channels, a, b, amplitude, norm_tol)] for rotation cases


def element_tolerance(case: Case, name: str, policy: PrecisionPolicy) -> _Bounds:
    """The allowed absolute error of every element of ``case.expected[name]`` under ``policy``."""
    rule = case.tolerance
    expected = np.asarray(case.expected[name], dtype=np.float64)
    if rule not in RULES:
        raise ValueError(f"case {case.id!r}: unknown tolerance rule {rule!r}; expected one of {RULES}")
    u_a = angle_roundoff(policy)
    if rule == "exact":
        return _Bounds(np.zeros(expected.shape), np.ones(expected.shape, dtype=bool), [])
    if rule == "table":
        k = _phase_factor(expected)
        if case.op == "inv_freq" and case.config is not None:
            k = k + _scaling_phase_factor(case.rope_config(), expected)
        tol = np.abs(expected) * k * u_a + _table_floor(policy)
        return _Bounds(tol, np.zeros(expected.shape, dtype=bool), [])
    if rule == "trig":
        cfg = case.rope_config()
        theta, omega, factor = _rope_terms(cfg, case.inputs["positions"], case.params.get("seq_len"))
        k = _phase_factor(omega) + _scaling_phase_factor(cfg, omega)
        tol = abs(factor) * (k * np.abs(theta) * u_a + ROUND_SLACK * _rounding(policy))
        return _Bounds(tol + _floor(policy), np.zeros(expected.shape, dtype=bool), [])
    if rule == "decay":
        return _Bounds(_decay_tolerance(case, expected, policy), np.zeros(expected.shape, dtype=bool), [])
    if rule == "scale":
        tol = SCALE_ROUNDINGS * unit_roundoff(_table_dtype(policy)) * np.abs(expected)
        return _Bounds(tol, np.zeros(expected.shape, dtype=bool), [])
    if case.op in _KERNEL_SOURCES:
        return _Bounds(*_kernel_bounds(case, name, policy))
    if case.op == "multiaxis_apply":
        v = np.asarray(case.inputs["x"], dtype=np.float64)
        pos = np.asarray(case.inputs["positions"], dtype=np.float64)
        spec = spec_from_dict(case.params["spec"])
        tol, exact, (a, b, amp, ntol) = _multiaxis_bounds(v, pos, spec, policy)
        return _Bounds(tol, exact, [(slice(None), a, b, amp, ntol)])
    if case.op == "chatglm_apply_2d":
        return _chatglm_bounds(case, expected, policy, emulation=rule == "emulation")
    if rule == "emulation":
        raise ValueError(f"case {case.id!r}: the 'emulation' rule is defined for chatglm_apply_2d only")
    # rotation: apply (input x) and apply_vjp (its VJP rotates grad_out by -angle: same bound).
    v = case.inputs["grad_out" if case.op == "apply_vjp" else "x"]
    cfg = case.rope_config()
    positions = np.asarray(case.inputs["positions"], dtype=np.float64)
    tol, exact, (a, b, amp, ntol) = _rotation_bounds(
        np.asarray(v, dtype=np.float64), positions, cfg, case.params.get("seq_len"), policy
    )
    return _Bounds(tol, exact, [(slice(None), a, b, amp, ntol)])


def _chatglm_bounds(case: Case, expected: np.ndarray, policy: PrecisionPolicy, *, emulation: bool) -> _Bounds:
    x = np.asarray(case.inputs["x"], dtype=np.float64)
    tol = np.zeros(expected.shape)
    exact = np.zeros(expected.shape, dtype=bool)
    norms = []
    for channels, ids, cfg in _chatglm_halves(case):
        part = x[..., channels]
        if emulation:
            # Faithful fp16 ports (fused or eager) agree within a few fp16 ulps of the pair radius.
            a, b = _pairs(cfg)
            radius = np.hypot(part[..., a], part[..., b]).astype(np.float64)
            pair_tol = EMULATION_ULPS * 2.0 * UNIT_ROUNDOFF["float16"] * radius + 2.0**-24
            t = np.zeros(part.shape)
            t[..., a] = pair_tol
            t[..., b] = pair_tol
            tol[..., channels] = t
            continue
        t, e, (a, b, amp, ntol) = _rotation_bounds(part, ids, cfg, None, policy)
        tol[..., channels] = t
        exact[..., channels] = e
        norms.append((channels, a, b, amp, ntol))
    return _Bounds(tol, exact, norms)


def _decay_tolerance(case: Case, expected: np.ndarray, policy: PrecisionPolicy) -> np.ndarray:
    """Bound for RoFormer's (1/n) sum_j |S_j(r)|, S_j = sum_{k<j} e^{i r theta_k} (n = rotary_dim / 2).

    Phase errors add at most sum_k k_k |r| theta_k u_a to every |S_j|; the cumulative sums add at most
    n^2 u_t (naive summation, Higham §4.2) and the modulus a few u_t |value|. Decay has no activations:
    u_t = u_a + u_c (no I/O roundoff), and the floor is the table dtype's.
    """
    cfg = case.rope_config()
    r = np.abs(np.asarray(case.inputs["distances"], dtype=np.float64))
    seq_len = resolve_seq_len(r, cfg, case.params.get("seq_len"))
    omega = inv_freq(cfg, seq_len)
    phase = float(np.sum(_phase_factor(omega) * omega)) * angle_roundoff(policy)
    n = omega.size
    u_t = angle_roundoff(policy) + unit_roundoff(policy.compute_dtype)
    return phase * r + u_t * (n * n + ROUND_SLACK * np.abs(expected)) + _table_floor(policy)


# -- comparison --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Comparison:
    """The verdict on one output: the worst element (largest error / tolerance) and how many failed."""

    output: str
    passed: bool
    n_bad: int
    n_total: int
    index: tuple[int, ...] | None = None
    expected: float = float("nan")
    got: float = float("nan")
    tol: float = float("nan")
    ratio: float = 0.0
    note: str = ""

    def describe(self) -> str:
        """``out[1, 0, 3]: expected 0.12, got 0.57, |err| 0.45 > tol 1.2e-06 (ratio 3.7e+05)``."""
        where = self.output + ("[" + ", ".join(map(str, self.index)) + "]" if self.index else "")
        err = abs(self.got - self.expected)
        text = (
            f"{where}: expected {self.expected:.9g}, got {self.got:.9g}, |err| {err:.3g}, "
            f"tol {self.tol:.3g}, err/tol {self.ratio:.3g}"
        )
        extra = f"; {self.n_bad} of {self.n_total} elements out of tolerance"
        return text + extra + (f" ({self.note})" if self.note else "")


def _worst(
    output: str, expected: np.ndarray, got: np.ndarray, tol: np.ndarray, exact: np.ndarray, note: str = ""
) -> Comparison:
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        err = np.abs(got - expected)
        bad_value = ~np.isfinite(got) & np.isfinite(expected)
        ratio = np.where(tol > 0, err / np.where(tol > 0, tol, 1.0), np.where(err > 0, np.inf, 0.0))
    ratio = np.where(bad_value | np.isnan(err), np.inf, ratio)
    ratio = np.where(exact & (got != expected) & ~(np.isnan(got) & np.isnan(expected)), np.inf, ratio)
    bad = ratio > 1.0
    n_bad = int(np.count_nonzero(bad))
    if ratio.size == 0:
        return Comparison(output, True, 0, 0, note=note)
    flat = int(np.argmax(ratio))
    idx = tuple(int(i) for i in np.unravel_index(flat, ratio.shape)) if ratio.ndim else ()
    worst_note = note
    if n_bad and bool(exact.reshape(-1)[flat]):
        worst_note = (note + "; " if note else "") + "exact element (pass-through or position 0)"
    if n_bad and not np.isfinite(got.reshape(-1)[flat]):
        worst_note = (note + "; " if note else "") + "non-finite value"
    return Comparison(
        output,
        n_bad == 0,
        n_bad,
        int(ratio.size),
        idx,
        float(expected.reshape(-1)[flat]),
        float(got.reshape(-1)[flat]),
        float(tol.reshape(-1)[flat]),
        float(ratio.reshape(-1)[flat]),
        worst_note,
    )


def round_to(values: np.ndarray, dtype: str) -> np.ndarray:
    """``values`` rounded to ``dtype`` (to nearest, ties to even), returned as float64."""
    v = np.asarray(values, dtype=np.float64)
    if dtype == "bfloat16":
        bits = v.astype(np.float32).view(np.uint32).astype(np.uint64)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return bits.astype(np.uint32).view(np.float32).astype(np.float64)
    with np.errstate(over="ignore"):
        return v.astype(np.dtype(dtype)).astype(np.float64)


def _exact_alternative(expected: np.ndarray, got: np.ndarray, exact: np.ndarray, policy) -> np.ndarray:
    """``got`` with exact elements that equal ``expected`` rounded to a narrower declared compute dtype
    replaced by ``expected``: a backend computing in float32 for float64 I/O (torchtune, MLX) returns x
    rounded to float32 at position 0 and in pass-through channels, which is correct for that policy."""
    if unit_roundoff(policy.compute_dtype) <= unit_roundoff(policy.io_dtype) or not exact.any():
        return got
    alt = round_to(expected, policy.compute_dtype)
    return np.where(exact & (got == alt), expected, got)


def compare_output(case: Case, name: str, got: np.ndarray, policy: PrecisionPolicy) -> list[Comparison]:
    """Judge ``got`` (already float64, same shape as expected) against ``case.expected[name]``."""
    expected = np.asarray(case.expected[name], dtype=np.float64)
    got = np.asarray(got, dtype=np.float64)
    if got.shape != expected.shape:
        raise ValueError(f"{name}: got shape {got.shape}, expected {expected.shape}")
    bounds = element_tolerance(case, name, policy)
    judged = _exact_alternative(expected, got, bounds.exact, policy) if case.tolerance != "exact" else got
    results = [_worst(name, expected, judged, bounds.tol, bounds.exact)]
    for channels, a, b, amplitude, norm_tol in bounds.norms:
        part = got[..., channels]
        with np.errstate(invalid="ignore", over="ignore"):
            norm = np.hypot(part[..., a], part[..., b])
        results.append(
            _worst(
                f"{name} pair norm",
                amplitude,
                norm,
                norm_tol,
                np.zeros(norm.shape, dtype=bool),
                "|y_pair| must equal A*|x_pair| at any phase",
            )
        )
    return results


def check_case(case: Case, outputs: dict[str, np.ndarray], policy: PrecisionPolicy) -> list[Comparison]:
    """Judge every expected output of ``case``; ``outputs`` maps the expected names to float64 arrays."""
    results: list[Comparison] = []
    for name in case.expected:
        results.extend(compare_output(case, name, outputs[name], policy))
    return results
