"""Tables: inverse frequencies, attention factor and cos/sin tables (operations ``inv_freq``,
``attention_factor``, ``cos_sin``) at the default settings, partial rotary and revealing positions."""

from __future__ import annotations

from typing import Any

import numpy as np

import rope_ref
from rope_ref.case import Case

from .common import id_number, make_config, rope_aux, rope_config, table_cases, table_rows
from .operations import operation

__all__ = ["tables_cases"]


@operation("inv_freq")
def _inv_freq(config: dict[str, Any] | None, inputs: dict, params: dict) -> dict[str, np.ndarray]:
    return {"out": rope_ref.inv_freq(rope_config(config), params.get("seq_len"))}


@operation("attention_factor")
def _attention_factor(config: dict[str, Any] | None, inputs: dict, params: dict) -> dict[str, np.ndarray]:
    value = rope_ref.attention_factor(rope_config(config), params.get("seq_len"))
    return {"value": np.array(value, dtype=np.float64)}


@operation("cos_sin", auxiliary=rope_aux)
def _cos_sin(config: dict[str, Any] | None, inputs: dict, params: dict) -> dict[str, np.ndarray]:
    cos, sin = rope_ref.cos_sin(inputs["positions"], rope_config(config), seq_len=params.get("seq_len"))
    return {"cos": cos, "sin": sin}


def tables_cases() -> list[Case]:
    """The default tables at four head sizes and three bases, partial rotary, and cos/sin at revealing
    positions (bf16/fp16 limits, very large, fractional, per-row)."""
    cases = []
    for d in (64, 80, 128, 256):
        for base in (1e4, 5e5, 1e6):
            cases += table_cases(
                f"default_d{d}_base{id_number(base)}",
                make_config(d, "half", base=base),
                bug_class="tables",
                ops=("inv_freq",),
                description=f"theta_i = base^(-2i/d), d={d}, base={base:g} (RoFormer eq. 15)",
            )
    rows = [
        (
            "default_d128",
            make_config(128, "half"),
            ("attention_factor",),
            None,
            "tables",
            "no scaling: attention factor exactly 1",
        )
    ]
    for d, rd, layout in ((80, 32, "half"), (80, 20, "half"), (256, 64, "half"), (128, 64, "interleaved")):
        config = make_config(d, layout, rotary_dim=rd)
        desc = f"exponent over rotary_dim={rd}, not head_dim={d}"
        rows.append((f"partial_d{d}_r{rd}", config, ("inv_freq",), None, "inv_freq_exponent", desc))
    rows += [
        (
            "d64_precision_positions",
            make_config(64, "half"),
            ("cos_sin",),
            [0, 1, 2, 3, 100, 255, 256, 257, 2047, 2048, 2049, 4095],
            "tables",
            "cos/sin table at the bf16 (257) and fp16 (2049) integer limits",
        ),
        (
            "d128_base5e5_large",
            make_config(128, "half", base=5e5),
            ("cos_sin",),
            [32768, 131071, 2**20, 2**24 - 1, 2**24],
            "large_position_trig",
            "cos/sin at very large positions (float32 phase, sin/cos range reduction)",
        ),
        (
            "d32_fractional",
            make_config(32, "half"),
            ("cos_sin",),
            [0.5, 1.25, 2.75, 100.5, 1000.125],
            "fractional_positions",
            "fractional positions must not be rounded",
        ),
        (
            "d32_per_row",
            make_config(32, "half"),
            ("cos_sin",),
            [[0, 1, 2, 3], [7, 3, 3, 90], [0, 0, 0, 0]],
            "per_row_positions",
            "2-D (batch, seq) positions: one table row per row, no mixing across rows",
        ),
    ]
    return cases + table_rows(rows)
