"""Gradient: the operation ``apply_vjp`` (the backward pass) in both layouts, partial rotary and YaRN."""

from __future__ import annotations

from typing import Any

import numpy as np

import rope_ref
from rope_ref.case import Case
from rope_ref.frequencies import resolve_seq_len

from .common import activation_rows, make_config, rope_aux, rope_config
from .operations import operation

__all__ = ["gradient_cases"]


@operation("apply_vjp", auxiliary=rope_aux)
def _apply_vjp(config: dict[str, Any] | None, inputs: dict, params: dict) -> dict[str, np.ndarray]:
    # d(apply)/dx = A R(theta) (block-diagonal), so the VJP is A R(theta)^T g = A R(-theta) g: the
    # inverse rotation of the upstream gradient (RoFormer eq. 13; R is orthogonal).
    cfg = rope_config(config)
    pos = np.asarray(inputs["positions"], dtype=np.float64)
    seq_len = resolve_seq_len(pos, cfg, params.get("seq_len"))
    return {"out": rope_ref.apply(inputs["grad_out"], -pos, cfg, seq_len=seq_len)}


def gradient_cases() -> list[Case]:
    """VJP of apply = inverse rotation of grad_out, half / interleaved / partial / YaRN."""
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 512}
    variants = (
        ("vjp_half_d32", make_config(32, "half"), "half layout"),
        ("vjp_interleaved_d32", make_config(32, "interleaved"), "interleaved layout"),
        (
            "vjp_partial_d64_r32",
            make_config(64, "interleaved", rotary_dim=32),
            "partial: pass-through grad unchanged",
        ),
        (
            "vjp_yarn_d32",
            make_config(32, "half", scaling=yarn),
            "YaRN: the attention factor scales the gradient too",
        ),
    )
    rows = []
    for name, cfg, desc in variants:
        shape = (2, 2, 4, 32 if "d32" in name else 64)
        rows.append(
            (
                name,
                cfg,
                shape,
                [0, 5, 600, 2000],
                "gradient",
                f"VJP of apply = inverse rotation of grad_out; {desc}",
            )
        )
    return activation_rows("apply_vjp", rows)
