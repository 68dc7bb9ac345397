"""Build a :class:`~rope_ref.config.RopeConfig` from a Hugging Face ``config.json`` dict.

Follows ``transformers`` v5 semantics (``src/transformers/modeling_rope_utils.py``:
``RotaryEmbeddingConfigMixin.standardize_rope_params`` and the ``_compute_*_parameters`` functions):

* rope dict: ``rope_scaling`` if present and non-empty, else ``rope_parameters``; its type is
  ``rope_type``, else the legacy ``type``, else ``"default"``. A ``rope_parameters`` dict keyed by layer
  type (Gemma 3 style) needs ``layer_type``.
* ``rope_theta``: the rope dict's, else the top-level one. Required (rope-ref does not guess a model's
  default base).
* ``partial_rotary_factor``: the top-level one wins over the rope dict's (HF overwrites); default 1.
* head size: ``qk_rope_head_dim`` (DeepSeek MLA: HF sets ``head_dim = qk_rope_head_dim``), else
  ``head_dim``, else ``hidden_size / num_attention_heads``; rotary width
  ``int(head_size * partial_rotary_factor)``.
* original context for ``yarn``, ``llama3`` and ``longrope``: a top-level
  ``original_max_position_embeddings`` wins (HF's Phi-3 exception), else the rope dict's, else
  ``max_position_embeddings``. ``dynamic`` uses ``max_position_embeddings``, as HF does.
* YaRN ``factor``: the explicit value wins (transformers PR #40320); derived as
  ``max_position_embeddings / original_max_position_embeddings`` only when missing. LongRoPE likewise.

``config.json`` does not say which pairing layout the model uses, so ``layout`` is required.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._arrays import check_int, check_real
from .config import RopeConfig
from .scaling import LongRoPE, scaling_from_hf

__all__ = ["rope_config_from_hf"]

_NEEDS_ORIGINAL = ("yarn", "llama3", "longrope")


def _rope_dict(config: Mapping[str, Any], layer_type: str | None) -> dict[str, Any]:
    raw = config.get("rope_scaling") or config.get("rope_parameters") or {}
    if not isinstance(raw, Mapping):
        raise ValueError(f"rope_scaling / rope_parameters must be a dict, got {type(raw).__name__}")
    nested = bool(raw) and all(isinstance(v, Mapping) for v in raw.values())
    if nested:
        if layer_type is None:
            raise ValueError(
                f"rope_parameters is keyed by layer type {sorted(raw)}; pass layer_type= to choose one"
            )
        if layer_type not in raw:
            raise ValueError(f"layer_type {layer_type!r} is not in rope_parameters (has {sorted(raw)})")
        raw = raw[layer_type]
    elif layer_type is not None:
        raise ValueError(f"layer_type={layer_type!r} given but rope_parameters is not keyed by layer type")
    return dict(raw)


def _head_size(config: Mapping[str, Any]) -> int:
    for key in ("qk_rope_head_dim", "head_dim"):
        if config.get(key) is not None:
            return check_int(config[key], key, minimum=2)
    hidden, heads = config.get("hidden_size"), config.get("num_attention_heads")
    if hidden is None or heads is None:
        missing = "hidden_size" if hidden is None else "num_attention_heads"
        raise ValueError(f"config has no 'head_dim' and is missing {missing!r} to derive it")
    hidden = check_int(hidden, "hidden_size", minimum=1)
    heads = check_int(heads, "num_attention_heads", minimum=1)
    if hidden % heads:
        raise ValueError(f"hidden_size ({hidden}) is not divisible by num_attention_heads ({heads})")
    return hidden // heads


def rope_config_from_hf(
    config: Mapping[str, Any], *, layout: str, layer_type: str | None = None
) -> RopeConfig:
    """The :class:`RopeConfig` an HF model with this ``config.json`` dict uses (see module docstring)."""
    if not isinstance(config, Mapping):
        raise TypeError(f"config must be a dict (a parsed config.json), got {type(config).__name__}")
    rope = _rope_dict(config, layer_type)
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    rope["rope_type"] = rope_type
    rope.pop("type", None)

    theta = rope.pop("rope_theta", None)
    if theta is None:
        theta = config.get("rope_theta")
    if theta is None:
        raise ValueError("config is missing the key 'rope_theta' (top level or inside rope_parameters)")
    theta = check_real(theta, "rope_theta")

    factor = rope.pop("partial_rotary_factor", None)
    if config.get("partial_rotary_factor") is not None:
        factor = config["partial_rotary_factor"]
    factor = 1.0 if factor is None else check_real(factor, "partial_rotary_factor")
    if not 0.0 < factor <= 1.0:
        raise ValueError(f"partial_rotary_factor must be in (0, 1], got {factor}")
    head_dim = _head_size(config)
    rotary_dim = int(head_dim * factor)
    if rotary_dim < 2 or rotary_dim % 2:
        raise ValueError(
            f"partial_rotary_factor={factor} with head size {head_dim} gives rotary width {rotary_dim}, "
            "which is not a positive even integer"
        )

    max_pos = config.get("max_position_embeddings")
    if max_pos is not None:
        max_pos = check_int(max_pos, "max_position_embeddings", minimum=1)
    if rope_type in _NEEDS_ORIGINAL and config.get("original_max_position_embeddings") is not None:
        rope["original_max_position_embeddings"] = config["original_max_position_embeddings"]
    if rope_type == "dynamic" and max_pos is None:
        raise ValueError("config is missing the key 'max_position_embeddings' (needed by dynamic NTK)")
    scaling = scaling_from_hf(rope, max_position_embeddings=max_pos)
    if isinstance(scaling, LongRoPE):
        for key in ("short_factor", "long_factor"):
            if len(getattr(scaling, key)) != rotary_dim // 2:
                raise ValueError(
                    f"rope_scaling key {key!r} must have rotary_dim // 2 = {rotary_dim // 2} entries, "
                    f"got {len(getattr(scaling, key))}"
                )
    return RopeConfig(head_dim, layout=layout, rotary_dim=rotary_dim, base=theta, scaling=scaling)
