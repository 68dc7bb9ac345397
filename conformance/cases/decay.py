"""Decay: RoFormer's long-term decay bound (operation ``decay_upper_bound``, §3.4.3)."""

from __future__ import annotations

from typing import Any

import numpy as np

from rope_ref import decay
from rope_ref.case import Case

from .common import id_number, make_case, make_config, rope_config
from .operations import operation

__all__ = ["decay_cases"]


@operation("decay_upper_bound")
def _decay_upper_bound(config: dict[str, Any] | None, inputs: dict, params: dict) -> dict[str, np.ndarray]:
    return {"out": decay.relative_upper_bound(inputs["distances"], rope_config(config))}


def decay_cases() -> list[Case]:
    """The relative upper bound at four (head_dim, base) settings and relative distances up to 4096."""
    r = [0, 1, 2, 4, 8, 10, 16, 20, 32, 50, 64, 100, 128, 150, 200, 250, 256]
    cases = []
    for d, base, dist in (
        (128, 1e4, r),
        (64, 1e4, [10, 50, 100, 200, 256]),
        (256, 1e4, [10, 50, 100, 200, 256]),
        (128, 5e5, [10, 100, 256, 4096]),
    ):
        cases.append(
            make_case(
                f"decay_upper_bound-d{d}_base{id_number(base)}",
                "decay_upper_bound",
                make_config(d, "half", base=base),
                {"distances": np.asarray(dist, dtype=np.float64)},
                bug_class="decay",
                tolerance="decay",
                description="RoFormer §3.4.3: (1/(d/2)) sum_j |S_j(r)| (Figure 2; Su's blog uses d=128)",
            )
        )
    return cases
