"""The golden case catalogue: every case the shipped suite checks, one module per case family.

Each family module builds its cases (each naming the bug class it targets, :data:`BUG_CLASSES`) and
registers the oracle evaluation of the operations it introduces in one table
(:data:`~conformance.cases.operations.OPERATIONS`); :mod:`.common` holds the helpers they share and
imports none of them. :data:`FAMILIES` lists the builders in manifest order: adding a family is one new
module plus one line there (``docs/catalogue.md``). :func:`build_catalogue` is deterministic;
:func:`evaluate` turns a case's config, inputs and params into expected tensors (generation and
``golden verify``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from rope_ref.case import Case

from . import (
    chatglm,
    covering,
    decay,
    gradient,
    kernel_shapes,
    multiaxis,
    rotation,
    scaling,
    state,
    tables,
    tails,
)
from .bug_classes import BUG_CLASSES
from .custom import CUSTOM_OPS, custom_cases, revealing_positions
from .operations import OPERATIONS, auxiliary, evaluate

__all__ = [
    "BUG_CLASSES",
    "FAMILIES",
    "OPERATIONS",
    "build_catalogue",
    "evaluate",
    "auxiliary",
    "custom_cases",
    "CUSTOM_OPS",
    "revealing_positions",
]

#: The builder of every shipped family, in manifest order (a case that another ``requires`` comes first).
FAMILIES = (
    tables.tables_cases,
    rotation.rotation_cases,
    scaling.scaling_cases,
    gradient.gradient_cases,
    chatglm.chatglm_cases,
    decay.decay_cases,
    covering.crossed_cases,
    rotation.negative_cases,
    scaling.explicit_seq_len_cases,
    scaling.scaling_parameter_cases,
    scaling.scaling_partial_cases,
    state.state_order_cases,
    tails.tail_cases,
    chatglm.chatglm_incremental_cases,
    multiaxis.multiaxis_cases,
    kernel_shapes.kernel_shape_cases,
    multiaxis.multiaxis_realistic_cases,
    kernel_shapes.kernel_shape_inverse_and_seq_len_cases,
)


def build_catalogue() -> list[Case]:
    """Every shipped case, in manifest order (the dynamic-NTK long case precedes its short partner)."""
    cases = [case for family in FAMILIES for case in family()]
    _check_finite(cases)
    ids = [c.id for c in cases]
    if len(set(ids)) != len(ids):
        dup = sorted({i for i in ids if ids.count(i) > 1})
        raise RuntimeError(f"duplicate case ids in the catalogue: {dup}")
    return cases


def _check_finite(cases: Iterable[Case]) -> None:
    for case in cases:
        for name, arr in {**case.inputs, **case.expected}.items():
            if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
                raise RuntimeError(f"case {case.id}: tensor {name} is not finite")
            if math.prod(arr.shape) == 0:
                raise RuntimeError(f"case {case.id}: tensor {name} is empty")
