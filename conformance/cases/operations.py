"""The one table from operation name to its oracle evaluation.

Each family module registers the operations it introduces with :func:`operation`; importing
:mod:`conformance.cases` imports every family, so the table is complete before any case is built.
:func:`evaluate` is the single place that turns a case's config, inputs and params into expected
tensors (used by generation and by ``golden verify``); :func:`auxiliary` gives the reference quantities
stored beside a case.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Operation", "OPERATIONS", "operation", "evaluate", "auxiliary"]

#: ``(config, inputs, params) -> tensors``: an operation's expected outputs, or its aux quantities.
Evaluator = Callable[[dict[str, Any] | None, dict[str, np.ndarray], dict[str, Any]], dict[str, np.ndarray]]


@dataclass(frozen=True)
class Operation:
    """How the float64 oracle evaluates one operation, and what a case file stores beside it (``aux``)."""

    evaluate: Evaluator
    auxiliary: Evaluator | None = None


#: Operation name -> :class:`Operation`, filled by the family modules.
OPERATIONS: dict[str, Operation] = {}


def operation(name: str, *, auxiliary: Evaluator | None = None) -> Callable[[Evaluator], Evaluator]:
    """Register the decorated function as the oracle evaluation of operation ``name``."""

    def register(evaluator: Evaluator) -> Evaluator:
        if name in OPERATIONS:
            raise RuntimeError(f"operation {name!r} is registered twice")
        OPERATIONS[name] = Operation(evaluator, auxiliary)
        return evaluator

    return register


def evaluate(
    op: str, config: dict[str, Any] | None, inputs: dict[str, np.ndarray], params: dict[str, Any]
) -> dict[str, np.ndarray]:
    """Expected tensors of one case, from the float64 oracle (``rope_ref``)."""
    entry = OPERATIONS.get(op)
    if entry is None:
        raise ValueError(f"unknown op {op!r}")
    return entry.evaluate(config, inputs, params)


def auxiliary(
    op: str, config: dict[str, Any] | None, inputs: dict[str, np.ndarray], params: dict[str, Any]
) -> dict[str, np.ndarray]:
    """Reference quantities stored beside a case (never handed to the backend), from the float64 oracle.

    For ``cos_sin``, ``apply``, ``apply_vjp`` and the kernel-shape operations: ``inv_freq`` (the scaled
    inverse frequencies, ``(rotary_dim/2,)``) and ``attention_factor`` (``()``) at the case's resolved
    ``seq_len``, so that a reader in another language can compute the tolerance
    (``docs/golden-format.md`` §4) without reimplementing the scalings. ``multiaxis_apply``:
    ``pair_inv_freq`` and ``pair_attention_factor`` (``(n_pairs,)``: each pair's frequency and attention
    factor). Other ops: nothing.
    """
    entry = OPERATIONS.get(op)
    if entry is None or entry.auxiliary is None:
        return {}
    return entry.auxiliary(config, inputs, params)
