"""Kernel tails (issue 15): head and row counts that leave a last partial tile (``apply``)."""

from __future__ import annotations

import numpy as np

from rope_ref.case import Case

from .common import activation_rows, make_config

__all__ = ["tail_cases"]

#: ``(name, x shape (B, S, H, D), layout, description)``.
_SHAPES = (
    ("heads28_d32", (1, 3, 28, 32), "half", "28 heads (Qwen2-7B), 84 rows"),
    ("heads40_d16", (1, 3, 40, 16), "interleaved", "40 heads (Llama-2-13B), 120 rows"),
    ("heads52_d32", (1, 1, 52, 32), "half", "52 heads (Falcon-40B-like), 52 rows"),
    ("heads71_d8", (1, 5, 71, 8), "half", "71 heads (Falcon-7B), 355 rows: several hundred rows"),
)


def tail_cases() -> list[Case]:
    """Shapes that hit the last partial tile of a kernel: odd head counts and row counts."""
    rows = []
    for name, shape, layout, desc in _SHAPES:
        b, s = shape[0], shape[1]
        pos = (np.arange(s) * 257 + 3)[None, :, None] + np.arange(b)[:, None, None] * 13
        desc = f"x (B,S,H,D)={shape}: {desc}; every row and head rotated"
        rows.append(
            (
                f"tail_{name}",
                make_config(shape[-1], layout),
                shape,
                pos,
                "kernel_tails",
                desc,
                {"axes": "bshd"},
            )
        )
    return activation_rows("apply", rows)
