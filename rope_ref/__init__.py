"""rope-ref: a spec-faithful float64 reference for Rotary Position Embedding (RoPE).

The oracle computes everything in float64 NumPy and follows RoFormer (Su et al., arXiv 2104.09864):
theta_i = base^(-2i/d), each channel pair rotated by position * theta_i. See ``docs/spec.md``.
Heavy libraries (torch, cupy, matplotlib) are never imported here.
"""

from __future__ import annotations

from . import chatglm as chatglm  # rope_ref.chatglm: ChatGLM-6B 2D positions
from . import decay as decay  # rope_ref.decay; imports matplotlib only inside plot_decay
from .attention import attention
from .config import LAYOUTS, RopeConfig
from .frequencies import angles, attention_factor, cos_sin, default_inv_freq, inv_freq
from .presets import preset, preset_names
from .rotation import (
    apply,
    apply_complex,
    inverse_layout_permutation,
    layout_permutation,
    pair_indices,
    rotation_matrix,
)
from .scaling import DynamicNTK, Linear, Llama3, LongRoPE, NTKAware, YaRN, scaling_from_hf
from .scaling_base import Scaling
from .sinusoidal import sinusoidal_embedding

__version__ = "0.1.0"

__all__ = [
    "LAYOUTS",
    "DynamicNTK",
    "Linear",
    "Llama3",
    "LongRoPE",
    "NTKAware",
    "RopeConfig",
    "Scaling",
    "YaRN",
    "scaling_from_hf",
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
    "preset",
    "preset_names",
    "rotation_matrix",
    "sinusoidal_embedding",
]
