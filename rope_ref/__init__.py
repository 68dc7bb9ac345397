"""rope-ref: a spec-faithful float64 reference for Rotary Position Embedding (RoPE).

The oracle computes everything in float64 NumPy and follows RoFormer (Su et al., arXiv 2104.09864):
theta_i = base^(-2i/d), each channel pair rotated by position * theta_i. See ``docs/spec.md``.
Heavy libraries (torch, cupy, matplotlib) are never imported here.
"""

from __future__ import annotations

from .attention import attention
from .config import LAYOUTS, RopeConfig
from .frequencies import angles, attention_factor, cos_sin, default_inv_freq, inv_freq
from .rotation import (
    apply,
    apply_complex,
    inverse_layout_permutation,
    layout_permutation,
    pair_indices,
    rotation_matrix,
)
from .scaling_base import Scaling
from .sinusoidal import sinusoidal_embedding

__version__ = "0.1.0"

__all__ = [
    "LAYOUTS",
    "RopeConfig",
    "Scaling",
    "__version__",
    "angles",
    "apply",
    "apply_complex",
    "attention",
    "attention_factor",
    "cos_sin",
    "default_inv_freq",
    "inv_freq",
    "inverse_layout_permutation",
    "layout_permutation",
    "pair_indices",
    "rotation_matrix",
    "sinusoidal_embedding",
]
