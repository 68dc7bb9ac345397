"""``golden verify``: a golden directory's data against a fresh float64 regeneration, within bounds.

:func:`verify_golden` reads the set through :func:`~.golden_reading.iter_golden` (bounded, each file
once, only while its cases run), refuses a case whose re-evaluation would exceed the reading limits, and
compares each expected tensor with the oracle's regeneration within :func:`regeneration_tolerance`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .case import Case
from .golden_limits import DEFAULT_LIMITS, ReadLimits, check_values
from .golden_manifest import GoldenError
from .golden_reading import iter_golden, plan_golden

__all__ = ["VerifyReport", "regeneration_tolerance", "verify_golden"]


@dataclass
class VerifyReport:
    """Outcome of :func:`verify_golden`: ``problems`` empty means the directory verified."""

    directory: Path
    n_cases: int = 0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    worst_ratio: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.problems


_EPS64 = float(np.finfo(np.float64).eps)


def _position_scale(case: Case) -> float:
    """Largest |position| / |distance| of a case (the float64 phase error grows with it)."""
    scale = 0.0
    for name in ("positions", "position_ids", "block_position_ids", "distances"):
        if name in case.inputs and case.inputs[name].size:
            scale = max(scale, float(np.max(np.abs(case.inputs[name]))))
    if case.op == "inv_freq" or case.op == "attention_factor":
        scale = max(scale, 1.0)
    return scale


def regeneration_tolerance(case: Case, expected: np.ndarray) -> np.ndarray:
    """Per-element bound on |stored - recomputed| for ``verify``: float64 rounding, not bit equality.

    ``64 eps (1 + P) max(1, |e|)``: a few ulps of every operation plus the phase error of float64 angles
    up to position ``P`` (libm's cos/sin and pow may differ by an ulp between platforms). The fp16
    emulation may flip one float16 rounding when float64 libm results differ, so it allows 1 fp16 ulp.
    """
    e = np.abs(np.asarray(expected, dtype=np.float64))
    if case.tolerance == "exact":
        return np.zeros_like(e)
    if case.tolerance == "emulation":
        return np.maximum(e * 2.0**-10, 2.0**-24)
    return 64 * _EPS64 * (1.0 + _position_scale(case)) * np.maximum(1.0, e)


def verify_golden(path: str | os.PathLike | None = None, limits: ReadLimits = DEFAULT_LIMITS) -> VerifyReport:
    """Check a golden directory: schema, checksums, and data against a fresh float64 regeneration.

    Integrity failures raise :class:`GoldenError`, a set over ``limits`` raises
    :class:`~.golden_limits.GoldenLimitError`, both before anything is allocated for the case at fault.
    Each case's expected tensors are recomputed from its *stored* inputs with the oracle and compared
    within :func:`regeneration_tolerance`. For the built-in catalogue (``provenance.source ==
    "catalogue"``) the case ids, ops and configs must also match a fresh
    :func:`~rope_ref.conformance.catalogue.build_catalogue`, and stored inputs are compared with this
    NumPy's regeneration (a difference is only a note: RNG streams may change between versions).
    """
    from .catalogue import build_catalogue

    plan = plan_golden(path, limits)
    report = VerifyReport(directory=plan.root)
    fresh = None
    if plan.manifest["provenance"]["source"] == "catalogue":
        fresh = {c.id: c for c in build_catalogue()}
    stored_ids = []
    rng_differs = 0
    for case in iter_golden(plan):
        report.n_cases += 1
        stored_ids.append(case.id)
        _verify_case(plan.root, case, limits, report)
        if fresh is not None:
            rng_differs += _compare_with_catalogue(case, fresh.get(case.id), report)
    if fresh is not None:
        _stale(stored_ids, list(fresh), report)
        if rng_differs:
            report.notes.append(
                f"{rng_differs} stored input(s) differ from this NumPy's regeneration; expected if "
                f"NumPy's RNG stream changed (the stored inputs are authoritative)"
            )
    return report


def _verify_case(root: Path, case: Case, limits: ReadLimits, report: VerifyReport) -> None:
    from .catalogue import auxiliary, evaluate

    check_values(f"{root}: case {case.id!r}", case.inputs, limits)
    try:
        fresh = evaluate(case.op, case.config, case.inputs, case.params)
        fresh_aux = auxiliary(case.op, case.config, case.inputs, case.params)
    except (ValueError, TypeError, ArithmeticError, RecursionError, IndexError, KeyError) as exc:
        report.problems.append(
            f"{case.id}: the oracle cannot evaluate this case ({' '.join(str(exc).split())})"
        )
        return
    except MemoryError:
        raise GoldenError(
            f"{root}: case {case.id!r}: re-evaluation ran out of memory within the limit case_elements = "
            f"{limits.case_elements} (corrupt or hostile set, or lower the limit)"
        ) from None
    if set(case.aux) != set(fresh_aux):
        report.problems.append(
            f"{case.id}: aux tensors {sorted(case.aux)}, a {case.op} case holds {sorted(fresh_aux)}"
        )
        return
    checks = [("expected", n, v, fresh.get(n)) for n, v in case.expected.items()]
    checks += [("aux", n, v, fresh_aux[n]) for n, v in case.aux.items()]
    for role, name, stored, got in checks:
        if got is None:
            report.problems.append(f"{case.id}: {role}.{name} is not an output of {case.op}")
            continue
        got = np.asarray(got)
        if got.shape != stored.shape:
            report.problems.append(f"{case.id}: {role}.{name} shape {stored.shape}, regeneration {got.shape}")
            continue
        diff = np.abs(stored.astype(np.float64) - got.astype(np.float64))
        tol = regeneration_tolerance(case, got)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(tol > 0, diff / tol, np.where(diff > 0, np.inf, 0.0))
        worst = float(np.max(ratio)) if ratio.size else 0.0
        report.worst_ratio = max(report.worst_ratio, worst)
        if not np.all(np.isfinite(stored)) or worst > 1.0:
            idx = tuple(int(i) for i in np.unravel_index(int(np.argmax(ratio)), ratio.shape))
            report.problems.append(
                f"{case.id}: {role}.{name}{list(idx)} stored {float(stored[idx])!r} but "
                f"regeneration gives {float(got[idx])!r} (|diff|/tol = {worst:.3g})"
            )


def _stale(stored_ids: list[str], fresh_ids: list[str], report: VerifyReport) -> None:
    stored, fresh = set(stored_ids), set(fresh_ids)
    missing = [i for i in fresh_ids if i not in stored]
    extra = [i for i in stored_ids if i not in fresh]
    if missing:
        report.problems.append(
            f"stale golden set: {len(missing)} catalogue case(s) missing, e.g. {missing[:3]}"
        )
    if extra:
        report.problems.append(
            f"stale golden set: {len(extra)} case(s) not in the catalogue, e.g. {extra[:3]}"
        )


def _compare_with_catalogue(case: Case, new: Case | None, report: VerifyReport) -> int:
    """Problems where ``case`` differs from the catalogue's; returns 1 if only its RNG inputs differ."""
    if new is None:
        return 0
    fields = ("op", "config", "params", "io_dtype", "tolerance", "bug_class", "requires")
    if any(getattr(case, f) != getattr(new, f) for f in fields):
        report.problems.append(
            f"{case.id}: op/config/params/tolerance/requires differ from the current catalogue"
        )
        return 0
    differs = 0
    for name, arr in case.inputs.items():
        other = new.inputs.get(name)
        if other is None or other.shape != arr.shape or other.dtype != arr.dtype:
            report.problems.append(f"{case.id}: input {name} differs in shape/dtype from the catalogue")
        elif not np.array_equal(other, arr):
            differs += 1
    return differs
