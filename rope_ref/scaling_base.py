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
    #: True when some pairs may have frequency 0 (they do not rotate: :class:`rope_ref.scaling.Proportional`).
    zero_frequencies: bool = False

    def inv_freq(self, base: float, rotary_dim: int, seq_len: int | None) -> np.ndarray:
        """Inverse frequencies, float64, shape ``(rotary_dim // 2,)``."""
        raise NotImplementedError

    def attention_factor(self, rotary_dim: int, seq_len: int | None) -> float:
        """The factor HF multiplies cos and sin by ("attention_scaling")."""
        return 1.0

    def validate(self, base: float, rotary_dim: int) -> None:
        """Raise ``ValueError`` if this scaling cannot serve a RoPE of this base and rotary width.

        Evaluates the frequency table at the original length and, for length-dependent types, at a
        very long one, so every check :meth:`inv_freq` makes (factor-list lengths, NTK's d > 2) runs
        when the :class:`~rope_ref.RopeConfig` is built instead of at the first ``apply``.
        """
        for seq_len in (None, 1 << 40) if self.length_dependent else (None,):
            freqs = np.asarray(self.inv_freq(base, rotary_dim, seq_len))
            if freqs.shape != (rotary_dim // 2,) or not np.all(np.isfinite(freqs) & (freqs > 0)):
                raise ValueError(
                    f"{self!r} gives no valid frequency table for rotary_dim={rotary_dim}, base={base}"
                )
        factor = self.attention_factor(rotary_dim, None)
        if not (np.isfinite(factor) and factor > 0):
            raise ValueError(f"{self!r} gives attention factor {factor}; it must be finite and > 0")

    def to_hf(self) -> dict:
        """The HF ``rope_scaling`` / ``rope_parameters`` dict describing this scaling."""
        raise NotImplementedError
