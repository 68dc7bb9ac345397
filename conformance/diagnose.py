"""Which common bug a failing case of the runner most resembles, as ``assert_rope_close`` names it.

For a failing ``apply`` / ``apply_vjp`` case the output is judged again against mutated oracle runs (a
swapped layout, a reversed rotation, quantised positions, a wrong base, positions shifted by ``k``, a
table built for a shorter length, ...: :mod:`rope_ref.diagnoses`); a worst element that must be exact
gets a readable line (:func:`rope_ref.diagnoses.exact_line`). Only cases up to :data:`MAX_ELEMENTS`
elements are diagnosed (the mutated runs cost a few oracle calls each), and a diagnosis that cannot be
made gives no text: it never changes a verdict.
"""

from __future__ import annotations

import numpy as np

from rope_ref.axes import positions_for_axes
from rope_ref.diagnoses import exact_line
from rope_ref.frequencies import resolve_seq_len
from rope_ref.testing import _diagnose

__all__ = ["MAX_ELEMENTS", "diagnose", "exact_detail"]

#: Largest output (elements) diagnosed; bigger failing cases keep the plain worst-element line.
MAX_ELEMENTS = 1 << 16
_ROTATIONS = {"apply": "x", "apply_vjp": "grad_out"}


def _positions(case) -> np.ndarray:
    pos = np.asarray(case.inputs["positions"], dtype=np.float64)
    axes = case.params.get("axes")
    x_shape = np.shape(case.inputs["x"])
    if axes and pos.shape != tuple(x_shape[:-1]):
        return positions_for_axes(pos, axes, x_shape)
    return pos


def diagnose(case, outputs: dict, comparisons: list, policy) -> str:
    """The common bug a failing rotation case most resembles, or ``""``."""
    if case.op not in _ROTATIONS or len(case.expected) != 1:
        return ""
    (name,) = case.expected
    got = outputs.get(name)
    mine = [c for c in comparisons if c.output == name]
    if got is None or not mine or mine[0].passed or got.size > MAX_ELEMENTS:
        return ""
    try:
        v = np.asarray(case.inputs[_ROTATIONS[case.op]], dtype=np.float64)
        extra = {"x": np.asarray(case.inputs["x"], dtype=np.float64)} if case.op == "apply_vjp" else {}
        pos = _positions(case)
        seq_len = resolve_seq_len(pos, case.rope_config(), case.params.get("seq_len"))
        with np.errstate(all="ignore"):
            text = _diagnose(mine, case, name, v, got, pos, seq_len, case.op, extra, policy)
    except Exception:  # noqa: BLE001 - a diagnosis that cannot be made is no diagnosis
        return ""
    return text or ""


def exact_detail(case, outputs: dict, worst, policy) -> str:
    """A readable line when the worst element is one that must be exact (tol 0, err/tol inf), or ``""``."""
    if worst is None or not worst.note.startswith("exact element") or worst.output not in outputs:
        return ""
    try:
        return exact_line(worst, case, worst.output, outputs[worst.output], policy)
    except Exception:  # noqa: BLE001 - the plain worst-element line stays
        return ""
