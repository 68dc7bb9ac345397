"""One golden case in memory: what the runner executes and the tolerance model judges.

The on-disk form (``manifest.json`` + safetensors) is described in ``docs/golden-format.md``; the
loader turns each manifest entry into a :class:`Case`. The functions here read the JSON forms a case
stores back into oracle objects: a ``config`` dict (:func:`config_from_dict`), a multi-axis ``spec``
(:func:`spec_from_dict`) and a kernel-shape case's positions form (:func:`placed_positions`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .axes import positions_for_axes
from .config import RopeConfig
from .multiaxis import MultiAxisRope
from .positions import positions_from_cu_seqlens, positions_from_offset
from .scaling import scaling_from_hf

__all__ = ["Case", "OPS", "config_from_dict", "spec_from_dict", "placed_positions", "v_heads_index"]

#: Operations a case can exercise; each is a method of :class:`rope_ref.conformance.protocol.Backend`.
OPS = (
    "inv_freq",
    "attention_factor",
    "cos_sin",
    "apply",
    "apply_vjp",
    "chatglm_position_ids",
    "chatglm_apply_2d",
    "decay_upper_bound",
    "chatglm_next_position_ids",
    "multiaxis_apply",
    "mrope_position_ids",
    "mrope_decode_ids",
    "vision_ids",
    "mla_softmax_scale",
    "apply_axes",
    "apply_qk",
    "apply_qkv",
    "round_trip",
)


@dataclass
class Case:
    """A single check: call ``op`` with ``inputs`` and ``params``, compare with ``expected``.

    ``config`` is the RoPE as a plain dict (``head_dim``, ``layout``, ``rotary_dim``, ``base``,
    ``scaling``: an HF-style ``rope_scaling`` dict or ``None``), or ``None`` for ops that take no
    RopeConfig (ChatGLM ids and 2D apply). ``io_dtype`` names the activation dtype the stored inputs
    were quantised for (``None``: the case applies to every precision policy). ``tolerance`` names the
    tolerance rule (see ``docs/tolerance.md``). ``bug_class`` names the family of real bugs the case
    targets (``docs/known-bugs.md``).

    ``aux`` holds reference quantities that are never passed to the backend but let a reader judge the
    result without reimplementing the scalings: ``inv_freq`` and ``attention_factor`` of ``apply``,
    ``apply_vjp`` and ``cos_sin`` cases, at the resolved ``seq_len``. ``requires`` lists ids of cases
    that must run earlier on the same backend instance for this case to mean anything (the dynamic-NTK
    state-leak pair); a runner that selects this case runs them first.
    """

    id: str
    op: str
    config: dict[str, Any] | None
    inputs: dict[str, np.ndarray]
    expected: dict[str, np.ndarray]
    bug_class: str
    tolerance: str
    params: dict[str, Any] = field(default_factory=dict)
    io_dtype: str | None = None
    description: str = ""
    requires: list[str] = field(default_factory=list)
    aux: dict[str, np.ndarray] = field(default_factory=dict)

    def rope_config(self) -> RopeConfig:
        """The :class:`rope_ref.RopeConfig` described by :attr:`config`."""
        if self.config is None:
            raise ValueError(f"case {self.id!r} ({self.op}) has no RoPE config")
        return config_from_dict(self.config)


def config_from_dict(config: dict[str, Any]) -> RopeConfig:
    """The :class:`rope_ref.RopeConfig` of a stored config dict (``head_dim``, ``layout``, ``rotary_dim``,
    ``base``, ``scaling``: an HF-style ``rope_scaling`` dict or ``None``)."""
    cfg = dict(config)
    scaling = cfg.pop("scaling", None)
    if scaling is not None:
        scaling = scaling_from_hf(scaling)
    head_dim = cfg.pop("head_dim")
    return RopeConfig(head_dim, scaling=scaling, **cfg)


def spec_from_dict(d: dict[str, Any]) -> MultiAxisRope:
    """The :class:`~rope_ref.multiaxis.MultiAxisRope` of a stored ``spec`` object (``multiaxis_apply``)."""
    return MultiAxisRope(
        int(d["head_dim"]),
        layout=d["layout"],
        streams=d["streams"],
        tables=tuple(config_from_dict(t) for t in d["tables"]),
        freq_index=d["freq_index"],
        blocks=int(d["blocks"]),
    )


def _kernel_ids(inputs: dict[str, np.ndarray], params: dict[str, Any], shape: tuple[int, ...]) -> np.ndarray:
    """The ids a kernel-shape case's positions form stands for: ``(B, S)`` / ``(S,)`` / ``(T,)`` float64."""
    axes = params["axes"]
    form = params.get("form", "ids")
    if form == "ids":
        return np.asarray(inputs["positions"], dtype=np.float64)
    if form == "offset":
        offset = inputs["offset"] if "offset" in inputs else params["offset"]
        seq = shape[axes.index("s")]
        return positions_from_offset(offset, seq, batch=shape[axes.index("b")])
    if form == "cu_seqlens":
        starts = inputs.get("start_offsets", params.get("start_offset"))
        return positions_from_cu_seqlens(inputs["cu_seqlens"], starts)
    raise ValueError(f"unknown positions form {form!r}; expected ids, offset or cu_seqlens")


def placed_positions(inputs: dict[str, np.ndarray], params: dict[str, Any], shape: tuple[int, ...]):
    """Float64 positions of a kernel-shape case broadcast over ``shape[:-1]`` (the activation's leading
    axes); ``params`` names the ``axes`` and the positions ``form`` (``ids``, ``offset``, ``cu_seqlens``)."""
    ids = _kernel_ids(inputs, params, shape)
    placed = positions_for_axes(ids, params["axes"], shape)
    return np.broadcast_to(placed, shape[:-1]).astype(np.float64)


def v_heads_index(params: dict[str, Any], ndim: int) -> tuple:
    """Index of the V heads of an ``apply_qkv`` case's packed ``qkv`` (its last ``num_heads_kv`` heads)."""
    hq, hk = int(params["num_heads_q"]), int(params["num_heads_kv"])
    h = params["axes"].index("h")
    return (slice(None),) * h + (slice(hq + hk, hq + 2 * hk),) + (slice(None),) * (ndim - h - 1)
