"""The covering of crossed axes (``docs/catalogue.md``): scaling type x position regime x layout x
partial rotary x operation, every pair of values of any two axes in some case (42 rows)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from rope_ref.case import Case

from .common import activation_cases, longrope_scaling, make_config, table_cases

__all__ = [
    "COVER_SCALINGS",
    "COVER_REGIMES",
    "COVER_LAYOUTS",
    "COVER_PARTIAL",
    "COVER_OPS",
    "COVER_POSITIONS",
    "covering_rows",
    "pairwise_gaps",
    "crossed_cases",
]

#: Axis values of the crossed covering: scaling type, position regime, layout, partial rotary, operation.
COVER_SCALINGS = ("none", "linear", "ntk", "dynamic", "yarn", "llama3", "longrope")
COVER_REGIMES = ("small", "precision", "large", "negative", "fractional", "per_row")
COVER_LAYOUTS = ("half", "interleaved")
COVER_PARTIAL = (False, True)
COVER_OPS = ("cos_sin", "apply", "apply_vjp")
_COVER_D, _COVER_RD = 32, 24  # partial rotary: 24 of 32 channels (the 3/4 ratio of Phi-4-mini's 96/128)

#: Positions of each regime: 1-D, except ``per_row`` (batch, seq). Negative positions stay within
#: +-3000 so that every length rule (max(positions) + 1, or max |position| + 1) stays below the 4096
#: original context of the length-dependent scalings.
COVER_POSITIONS: dict[str, list] = {
    "small": [0, 1, 2, 5, 17, 100],
    "precision": [255, 256, 257, 2047, 2048, 2049, 4095, 4097],
    "large": [2**20, 2**20 + 3, 5_000_001, 2**24 - 1, 2**24],
    "negative": [-1, -2, -255, -257, -2049, -3000, 0, 7],
    "fractional": [0.5, 1.25, 257.5, 2048.75, 4096.125, 10000.5],
    "per_row": [[0, 1, 2, 3], [257, 2049, 4097, 9000], [5, 5, 100000, 3]],
}


def covering_rows() -> list[tuple[str, str, str, bool, str]]:
    """``(scaling, regime, layout, partial, op)`` rows: every scaling x regime pair once (42 rows), with

    layout = (r + s) mod 2, partial = (r // 2 + s) mod 2, op = (r + s) mod 3 for scaling index s and regime
    index r. Every pair of values of any two axes appears in some row (:func:`pairwise_gaps`); pairs with
    a layout count only in ``apply``/``apply_vjp`` rows, since a cos/sin table has no layout.
    """
    rows = []
    for s, scaling in enumerate(COVER_SCALINGS):
        for r, regime in enumerate(COVER_REGIMES):
            rows.append(
                (
                    scaling,
                    regime,
                    COVER_LAYOUTS[(r + s) % 2],
                    COVER_PARTIAL[(r // 2 + s) % 2],
                    COVER_OPS[(r + s) % 3],
                )
            )
    return rows


def pairwise_gaps(rows: Sequence[tuple]) -> list[tuple[str, str, Any, Any]]:
    """Pairs of axis values no row covers (an empty list for a pairwise covering)."""
    axes = (COVER_SCALINGS, COVER_REGIMES, COVER_LAYOUTS, COVER_PARTIAL, COVER_OPS)
    names = ("scaling", "regime", "layout", "partial", "op")
    gaps = []
    for i, j in itertools.combinations(range(len(axes)), 2):
        have = {
            (row[i], row[j]) for row in rows if not (2 in (i, j) and row[4] == "cos_sin")
        }  # a cos/sin table has no layout: layout pairs need a rotation op
        for a in axes[i]:
            for b in axes[j]:
                if (names[i], names[j]) == ("layout", "op") and b == "cos_sin":
                    continue
                if (a, b) not in have:
                    gaps.append((names[i], names[j], a, b))
    return gaps


#: ``(HF-style scaling dict, base)`` of each covering scaling type except LongRoPE (original context 4096).
_COVER_SCALING: dict[str, tuple[dict | None, float]] = {
    "none": (None, 10000.0),
    "linear": ({"rope_type": "linear", "factor": 4.0}, 10000.0),
    "ntk": ({"rope_type": "ntk", "factor": 4.0}, 10000.0),
    "dynamic": ({"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 4096}, 10000.0),
    "yarn": ({"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 4096}, 10000.0),
    "llama3": (
        {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 4096,
        },
        500000.0,
    ),
}


def _cover_scaling(name: str, rotary_dim: int) -> tuple[dict | None, float]:
    """``(HF-style scaling dict, base)`` of one covering scaling type (original context 4096)."""
    if name == "longrope":  # its factor lists have one entry per rotated pair
        return longrope_scaling(rotary_dim // 2, 16.0), 10000.0
    return _COVER_SCALING[name]


def crossed_cases() -> list[Case]:
    """One case per :func:`covering_rows` row: a ``cos_sin`` table, or ``apply`` / ``apply_vjp``."""
    cases = []
    for scaling, regime, layout, partial, op in covering_rows():
        rd = _COVER_RD if partial else _COVER_D
        sc, base = _cover_scaling(scaling, rd)
        cfg = make_config(_COVER_D, layout, rotary_dim=rd, base=base, scaling=sc)
        pos = np.asarray(COVER_POSITIONS[regime])
        tag = f"x_{scaling}_{regime}" + ("" if op == "cos_sin" else f"_{layout}")
        tag += f"_r{rd}" if partial else ""
        desc = (
            f"covering row: {scaling} scaling, {regime} positions, {layout} layout, rotary {rd} of {_COVER_D}"
        )
        if op == "cos_sin":
            cases += table_cases(
                tag, cfg, bug_class="crossed_axes", ops=("cos_sin",), positions=pos, description=desc
            )
            continue
        if regime == "per_row":
            shape, placed = (pos.shape[0], pos.shape[1], 1, _COVER_D), pos[:, :, None]
        else:
            shape, placed = (pos.shape[0], 1, _COVER_D), pos[:, None]
        cases += activation_cases(tag, op, cfg, shape, placed, bug_class="crossed_axes", description=desc)
    return cases
