"""`RopeConfig`: the validated, immutable description of one RoPE."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ._arrays import check_int, check_real, set_fields
from .scaling_base import Scaling

__all__ = ["RopeConfig", "LAYOUTS", "MAX_HEAD_DIM"]

#: ``"half"``: channel i pairs with i + rotary_dim/2 (GPT-NeoX, HF ``rotate_half``, ChatGLM-6B).
#: ``"interleaved"``: channels 2i and 2i+1 pair (RoFormer eq. 34, GPT-J, Meta LLaMA's complex form).
LAYOUTS = ("half", "interleaved")

#: Largest accepted head dimension. Real models use 64..512; far larger values are caller bugs.
MAX_HEAD_DIM = 65536


@dataclass(frozen=True)
class RopeConfig:
    """One rotary embedding: head size, pairing layout, rotated width, base and scaling.

    ``layout`` has no default on purpose: confusing the two layouts is the most common RoPE bug.
    ``rotary_dim`` (even, ``2..head_dim``, default ``head_dim``) rotates ``x[..., :rotary_dim]`` and
    passes the other channels through unchanged, as HF ``partial_rotary_factor``, ONNX
    ``rotary_embedding_dim`` and GPT-J ``rotary_dim`` do.

    ``RopeConfig.from_hf(config, layout=..., layer_type=...)`` reads an HF config (a ``config.json`` dict,
    a path to one, or a ``PretrainedConfig``); it is defined in :mod:`rope_ref.hf_config`, which sits
    above this module (it needs the scalings).
    """

    head_dim: int
    layout: str
    rotary_dim: int | None = None
    base: float = 10000.0
    scaling: Scaling | None = None

    def __init__(
        self,
        head_dim: int,
        *,
        layout: str,
        rotary_dim: int | None = None,
        base: float = 10000.0,
        scaling: Scaling | None = None,
    ) -> None:
        head_dim = check_int(head_dim, "head_dim")
        if head_dim <= 0 or head_dim % 2:
            raise ValueError(f"head_dim must be a positive even integer, got {head_dim}")
        if head_dim > MAX_HEAD_DIM:
            raise ValueError(
                f"head_dim must be <= {MAX_HEAD_DIM} (no model comes close; is this a hidden size or a "
                f"byte count?), got {head_dim}"
            )
        if not isinstance(layout, str):
            raise TypeError(
                f"layout must be a str, one of {LAYOUTS}, got {type(layout).__name__} {layout!r:.60}"
            )
        if layout not in LAYOUTS:
            raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
        if rotary_dim is None:
            rotary_dim = head_dim
        rotary_dim = check_int(rotary_dim, "rotary_dim")
        if rotary_dim <= 0 or rotary_dim % 2:
            raise ValueError(f"rotary_dim must be a positive even integer, got {rotary_dim}")
        if rotary_dim > head_dim:
            raise ValueError(f"rotary_dim must be <= head_dim ({head_dim}), got {rotary_dim}")
        try:
            base = check_real(base, "base")
        except ValueError:
            raise ValueError(f"base must be a finite number > 1, got {base}") from None
        if not base > 1.0:
            raise ValueError(f"base must be a finite number > 1, got {base}")
        if scaling is not None and not isinstance(scaling, Scaling):
            raise TypeError(
                "scaling must be None or a rope_ref scaling (Linear, NTKAware, ...), "
                f"got {type(scaling).__name__}"
            )
        if scaling is not None:
            try:
                scaling.validate(base, rotary_dim)
            except ValueError as exc:
                raise ValueError(f"scaling does not fit this config: {exc}") from None
        set_fields(self, head_dim=head_dim, layout=layout, rotary_dim=rotary_dim, base=base, scaling=scaling)

    @property
    def n_pairs(self) -> int:
        """Number of rotated channel pairs, ``rotary_dim // 2``."""
        return self.rotary_dim // 2

    def replace(self, **changes: Any) -> RopeConfig:
        """A copy with some fields changed (validated again)."""
        fields = {
            "head_dim": self.head_dim,
            "layout": self.layout,
            "rotary_dim": self.rotary_dim,
            "base": self.base,
            "scaling": self.scaling,
        }
        fields.update(changes)
        head_dim = fields.pop("head_dim")
        return RopeConfig(head_dim, **fields)

    def __repr__(self) -> str:
        parts = [f"head_dim={self.head_dim}", f"layout={self.layout!r}"]
        if self.rotary_dim != self.head_dim:
            parts.append(f"rotary_dim={self.rotary_dim}")
        parts.append(f"base={self.base:g}" if math.isfinite(self.base) else f"base={self.base}")
        if self.scaling is not None:
            parts.append(f"scaling={self.scaling!r}")
        return f"RopeConfig({', '.join(parts)})"
