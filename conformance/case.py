"""One golden case in memory: what the runner executes and the tolerance model judges.

The on-disk form (``manifest.json`` + safetensors) is described in ``docs/golden-format.md``; the
loader turns each manifest entry into a :class:`Case`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Case", "OPS"]

#: Operations a case can exercise; each is a method of :class:`~rope_ref.conformance.protocol.Backend`.
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

    def rope_config(self):
        """The :class:`rope_ref.RopeConfig` described by :attr:`config`."""
        from rope_ref import RopeConfig

        if self.config is None:
            raise ValueError(f"case {self.id!r} ({self.op}) has no RoPE config")
        cfg = dict(self.config)
        scaling = cfg.pop("scaling", None)
        if scaling is not None:
            from rope_ref.scaling import scaling_from_hf

            scaling = scaling_from_hf(scaling)
        head_dim = cfg.pop("head_dim")
        return RopeConfig(head_dim, scaling=scaling, **cfg)
