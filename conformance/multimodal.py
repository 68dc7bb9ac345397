"""The multi-axis / M-RoPE / vision / MLA operations of the conformance protocol, as
the runner calls them (:func:`call`; their tolerance is :mod:`rope_ref.tolerance`).

Their cases, oracle evaluation and JSON forms (``params["spec"]``, ``params["mla"]``) are
:mod:`conformance.cases.multiaxis`; the names below are re-exported from there.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rope_ref.case import spec_from_dict

from .cases import evaluate as _evaluate
from .cases.multiaxis import (
    ID_OPS,
    MULTIMODAL_OPS,
    mla_from_dict,
    mla_to_dict,
    mrope_kwargs,
    pair_aux,
    spec_to_dict,
)

__all__ = [
    "MULTIMODAL_OPS",
    "ID_OPS",
    "spec_to_dict",
    "spec_from_dict",
    "mla_to_dict",
    "mla_from_dict",
    "evaluate",
    "pair_aux",
    "call",
]


def evaluate(op: str, inputs: dict[str, np.ndarray], params: dict[str, Any]) -> dict[str, np.ndarray]:
    """Expected tensors of a multimodal case, from the float64 oracle."""
    if op not in MULTIMODAL_OPS:
        raise ValueError(f"unknown multimodal op {op!r}")
    return _evaluate(op, None, inputs, params)


def call(backend, op: str, a: dict[str, Any], params: dict[str, Any]) -> Any:
    """Call ``backend``'s method for ``op`` with the converted inputs ``a`` (the runner's dispatch)."""
    from .protocol import Unsupported

    method = getattr(backend, op, None)
    if method is None:  # a backend class not derived from Backend
        raise Unsupported(f"{op} is not implemented", "operation")
    if op == "multiaxis_apply":
        return method(a["x"], a["positions"], spec_from_dict(params["spec"]))
    if op == "mrope_position_ids":
        return method(
            a["input_ids"],
            a.get("image_grid_thw"),
            a.get("video_grid_thw"),
            a.get("attention_mask"),
            a.get("second_per_grid_ts"),
            **mrope_kwargs(params),
        )
    if op == "mrope_decode_ids":
        return method(a["deltas"], cache_position=params["cache_position"], n_new=params["n_new"])
    if op == "vision_ids":
        return method(
            a["grids"], convention=params["convention"], spatial_merge_size=params["spatial_merge_size"]
        )
    if op == "mla_softmax_scale":
        return method(mla_from_dict(params["mla"]))
    raise ValueError(f"unknown multimodal op {op!r}")
