"""The interface every long-context scaling type implements (see :mod:`rope_ref.scaling`).

``rope_ref.frequencies`` only talks to scalings through this interface, so adding a scaling type
never touches the rotation code.
"""

from __future__ import annotations

import numpy as np


class Scaling:
    """Base class of the frozen scaling dataclasses passed as ``RopeConfig(scaling=...)``."""

    #: True when the frequencies depend on the sequence length (dynamic NTK, LongRoPE).
    length_dependent: bool = False

    def inv_freq(self, base: float, rotary_dim: int, seq_len: int | None) -> np.ndarray:
        """Inverse frequencies, float64, shape ``(rotary_dim // 2,)``."""
        raise NotImplementedError

    def attention_factor(self, rotary_dim: int, seq_len: int | None) -> float:
        """The factor HF multiplies cos and sin by ("attention_scaling")."""
        return 1.0

    def to_hf(self) -> dict:
        """The HF ``rope_scaling`` / ``rope_parameters`` dict describing this scaling."""
        raise NotImplementedError
