"""rope-ref: a spec-faithful float64 reference for Rotary Position Embedding (RoPE).

The oracle computes everything in float64 NumPy and follows RoFormer (Su et al., arXiv 2104.09864):
theta_i = base^(-2i/d), each channel pair rotated by position * theta_i. See ``docs/spec.md``.
Heavy libraries (torch, cupy, matplotlib) are never imported here; mpmath (for the exact tables) is
imported the first time a table is built. ``rope_ref.testing`` (the assertion helpers) is imported on
use: ``from rope_ref.testing import assert_rope_close``.
"""

from __future__ import annotations

from . import axes as axes  # rope_ref.axes: axis conventions ("bshd", "bhsd", "sbhd", "thd")
from . import chatglm as chatglm  # rope_ref.chatglm: ChatGLM-6B 2D positions
from . import decay as decay  # rope_ref.decay; imports matplotlib only inside plot_decay
from . import hf_config as hf_config  # rope_ref.hf_config: RopeConfig.from_hf (HF config.json)
from . import layers as layers  # rope_ref.layers: per-layer RoPE (Gemma 3, Llama 4 NoPE)
from . import mla as mla  # rope_ref.mla: DeepSeek MLA rope part and softmax scale
from . import mrope as mrope  # rope_ref.mrope: M-RoPE (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, GLM-4V)
from . import multiaxis as multiaxis  # rope_ref.multiaxis: one mechanism for multi-axis position ids
from . import positions as positions  # rope_ref.positions: ids from cu_seqlens (varlen) and cache offsets
from . import threads as threads  # rope_ref.threads: opt-in worker threads for apply's blocks
from . import vision_rope as vision_rope  # rope_ref.vision_rope: 2D ViT RoPE (Qwen2-VL, Pixtral)
from .attention import attention
from .config import LAYOUTS, RopeConfig
from .frequencies import angles, attention_factor, cos_sin, default_inv_freq, inv_freq
from .multiaxis import MultiAxisRope
from .presets import preset, preset_names
from .rotation import (
    apply,
    apply_complex,
    inverse_layout_permutation,
    layout_permutation,
    pair_indices,
    rotation_matrix,
)
from .scaling import DynamicNTK, Linear, Llama3, LongRoPE, NTKAware, Proportional, YaRN, scaling_from_hf
from .scaling_base import Scaling
from .sinusoidal import sinusoidal_embedding

__version__ = "0.2.0"

__all__ = [
    "LAYOUTS",
    "DynamicNTK",
    "Linear",
    "Llama3",
    "LongRoPE",
    "Proportional",
    "MultiAxisRope",
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
