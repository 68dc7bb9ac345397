"""Per-layer RoPE: models whose layers use different RoPEs, or none.

* **Gemma 3** (HF ``models/gemma3/configuration_gemma3.py`` ``Gemma3TextConfig.__init__``: ``layer_types``
  from ``sliding_window_pattern`` 6; ``modeling_gemma3.py`` ``Gemma3TextModel.__init__`` builds
  ``rotary_emb_local`` with ``rope_theta = rope_local_base_freq`` and ``rope_scaling = default``,
  ``Gemma3DecoderLayer.forward`` picks it for sliding layers): layer ``i`` is local (sliding window) unless
  ``(i + 1) % 6 == 0``. Local layers: base ``rope_local_base_freq`` = 10000, no scaling. Global layers:
  base ``rope_theta`` = 1e6 with the config's ``rope_scaling`` (linear, factor 8, on 4B/12B/27B; none on 1B).
  Half layout (``rotate_half``).
* **Llama 4** (``models/llama4/configuration_llama4.py`` ``no_rope_layers``: 1 = RoPE, 0 = NoPE, default
  ``int((i + 1) % no_rope_layer_interval != 0)`` with interval 4; ``modeling_llama4.py``
  ``Llama4TextAttention``: ``use_rope = no_rope_layers[layer_idx]``): NoPE layers get no rotation, which
  :meth:`LayerRopes.rope` answers with ``None`` and :meth:`LayerRopes.apply` with the identity.
  Interleaved pairs (``apply_rotary_emb`` via ``view_as_complex``), llama3 scaling.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._arrays import as_float64, check_int
from .config import RopeConfig
from .hf_config import config_dict, rope_config_from_hf, rope_configs_from_hf
from .preset_table import PresetTable
from .rotation import apply as _apply
from .scaling import Linear, Llama3

__all__ = ["LayerRopes", "gemma3", "llama4", "preset", "preset_names", "from_hf"]


@dataclass(frozen=True)
class LayerRopes:
    """Every layer's RoPE: ``ropes[i]`` is a :class:`~rope_ref.RopeConfig` or ``None`` (NoPE)."""

    name: str
    ropes: tuple[RopeConfig | None, ...]

    @property
    def num_layers(self) -> int:
        """Number of layers."""
        return len(self.ropes)

    def rope(self, layer_idx: int) -> RopeConfig | None:
        """The RoPE of layer ``layer_idx`` (``None``: the layer uses no positional rotation)."""
        i = check_int(layer_idx, "layer_idx", minimum=0)
        if i >= len(self.ropes):
            raise ValueError(f"layer_idx must be < num_layers={len(self.ropes)}, got {i}")
        return self.ropes[i]

    def apply(self, x: Any, positions: Any, layer_idx: int, *, seq_len: int | None = None) -> np.ndarray:
        """:func:`rope_ref.apply` with layer ``layer_idx``'s RoPE; a NoPE layer returns ``x`` (as float64)."""
        cfg = self.rope(layer_idx)
        if cfg is None:
            return as_float64(x, "x").copy()
        return _apply(x, positions, cfg, seq_len=seq_len)


def gemma3(
    num_layers: int,
    head_dim: int,
    *,
    global_factor: float | None,
    rope_theta: float = 1e6,
    rope_local_base_freq: float = 10000.0,
    sliding_window_pattern: int = 6,
) -> LayerRopes:
    """Gemma 3 layers: local (``(i + 1) % pattern != 0``) vs global, see the module docstring."""
    n = check_int(num_layers, "num_layers", minimum=1)
    pattern = check_int(sliding_window_pattern, "sliding_window_pattern", minimum=1)
    local = RopeConfig(head_dim, layout="half", base=rope_local_base_freq)
    scaling = None if global_factor is None else Linear(global_factor)
    glob = RopeConfig(head_dim, layout="half", base=rope_theta, scaling=scaling)
    return LayerRopes("gemma3", tuple(local if (i + 1) % pattern else glob for i in range(n)))


def llama4(num_layers: int, rope: RopeConfig, *, no_rope_layers: Any = None, interval: int = 4) -> LayerRopes:
    """Llama 4 layers: ``rope`` where ``no_rope_layers[i]`` is 1, ``None`` (NoPE) where it is 0.

    ``no_rope_layers`` defaults (also when empty, as the released config treats ``[]``) to
    ``int((i + 1) % interval != 0)``.
    """
    n = check_int(num_layers, "num_layers", minimum=1)
    interval = check_int(interval, "interval", minimum=1)
    if no_rope_layers is None or len(no_rope_layers) == 0:
        flags = [int((i + 1) % interval != 0) for i in range(n)]
    else:
        flags = [check_int(v, f"no_rope_layers[{i}]") for i, v in enumerate(no_rope_layers)]
        if len(flags) != n or not set(flags) <= {0, 1}:
            raise ValueError(f"no_rope_layers must hold {n} entries of 0 or 1, got {list(no_rope_layers)}")
    return LayerRopes("llama4", tuple(rope if f else None for f in flags))


_PRESETS = {
    # google/gemma-3-1b-pt config.json: 26 layers, head_dim 256, rope_theta 1e6, rope_scaling null.
    "gemma-3-1b": lambda: gemma3(26, 256, global_factor=None),
    # google/gemma-3-4b-pt text_config: 34 layers, head_dim 256, rope_scaling {linear, factor 8}.
    "gemma-3-4b": lambda: gemma3(34, 256, global_factor=8.0),
    # google/gemma-3-12b-pt text_config: 48 layers, head_dim 256, linear factor 8.
    "gemma-3-12b": lambda: gemma3(48, 256, global_factor=8.0),
    # google/gemma-3-27b-pt text_config: 62 layers, head_dim 128, linear factor 8.
    "gemma-3-27b": lambda: gemma3(62, 128, global_factor=8.0),
    # meta-llama/Llama-4-Scout-17B-16E config.json text_config: 48 layers, head_dim 128, rope_theta 5e5,
    # rope_scaling llama3 {factor 8, low 1, high 4, original 8192}, no_rope_layers [1, 1, 1, 0] * 12.
    "llama-4-scout": lambda: llama4(
        48,
        RopeConfig(
            128,
            layout="interleaved",
            base=500000.0,
            scaling=Llama3(8.0, low_freq_factor=1.0, high_freq_factor=4.0, original_max_position=8192),
        ),
        no_rope_layers=[1, 1, 1, 0] * 12,
    ),
}


_TABLE = PresetTable("per-layer", _PRESETS)
#: Names accepted by :func:`preset`, sorted.
preset_names = _TABLE.names


def preset(name: str) -> LayerRopes:
    """A released model's per-layer RoPE by name (see :func:`preset_names`)."""
    return _TABLE.build(name)


def _layer_types(text: Any, n: int, pattern_default: int | None) -> list[str]:
    """Each layer's type: ``layer_types`` as given, else Gemma 3's ``sliding_window_pattern`` rule."""
    types = text.get("layer_types")
    if types is not None:
        if not isinstance(types, (list, tuple)) or len(types) != n:
            raise ValueError(f"layer_types must list num_hidden_layers={n} layer types, got {types!r:.80}")
        return [str(t) for t in types]
    if pattern_default is None:
        raise ValueError("config has rope_parameters keyed by layer type but no layer_types list")
    pattern = check_int(
        text.get("sliding_window_pattern", pattern_default), "sliding_window_pattern", minimum=1
    )
    return ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n)]


def _per_layer_theta(text: Mapping[str, Any], n: int, layout: str | None) -> tuple[RopeConfig | None, ...]:
    """``layer_rope_theta``: layer ``i`` uses base ``layer_rope_theta[i]``, 0 = NoPE, every other key the
    config's (``models/granite_swa/modeling_granite_swa.py`` ``GraniteSWAModel.__init__``: one rotary per
    distinct non-zero theta, ``rope_parameters = {**rope_parameters, "rope_theta": theta}``)."""
    thetas = text["layer_rope_theta"]
    if not isinstance(thetas, (list, tuple)) or len(thetas) != n:
        raise ValueError(
            f"layer_rope_theta must be a list of num_hidden_layers={n} bases, got {thetas!r:.80}"
        )
    rest = {k: v for k, v in text.items() if k != "layer_rope_theta"}
    params = rest.get("rope_parameters") if isinstance(rest.get("rope_parameters"), Mapping) else {}
    made: dict[float, RopeConfig] = {}
    for theta in {t for t in thetas if t}:
        cfg = {**rest, "rope_parameters": {**params, "rope_theta": theta}}
        made[theta] = rope_config_from_hf(cfg, layout=layout)
    return tuple(made[t] if t else None for t in thetas)


def from_hf(config: Any, *, layout: str | None = None) -> LayerRopes:
    """Every layer's RoPE from an HF config: Gemma 3 (``layer_types``, else ``sliding_window_pattern``),
    Llama 4 (``no_rope_layers``, ``no_rope_layer_interval``), Granite SWA (``layer_rope_theta``: a base per
    layer, 0 = NoPE) or any config whose ``rope_parameters`` is
    keyed by the layer types that ``layer_types`` lists.

    ``config``: a ``config.json`` dict, a path to one or a ``PretrainedConfig``-like object
    (:func:`rope_ref.hf_config.config_dict`); a multimodal wrapper's ``text_config`` is used.
    """
    config = config_dict(config)
    text = config.get("text_config") if isinstance(config.get("text_config"), Mapping) else config
    if text.get("num_hidden_layers") is None:
        raise ValueError("config is missing the key 'num_hidden_layers' (needed for per-layer RoPE)")
    n = check_int(text["num_hidden_layers"], "num_hidden_layers", minimum=1)
    name = str(config.get("_name_or_path") or config.get("model_type") or "layers")
    model_type = text.get("model_type") or config.get("model_type")
    if model_type in ("llama4", "llama4_text") or "no_rope_layers" in text:
        interval = text.get("no_rope_layer_interval", 4)
        made = llama4(
            n,
            rope_config_from_hf(config, layout=layout),
            no_rope_layers=text.get("no_rope_layers"),
            interval=interval,
        )
        return LayerRopes(name, made.ropes)
    if text.get("layer_rope_theta") is not None:
        return LayerRopes(name, _per_layer_theta(text, n, layout))
    ropes = rope_configs_from_hf(config, layout=layout)
    if set(ropes) == {"default"}:
        raise ValueError(
            f"config of model_type {model_type!r} has one RoPE for every layer: use RopeConfig.from_hf"
        )
    types = _layer_types(text, n, 6 if model_type in ("gemma3", "gemma3_text") else None)
    params = text.get("rope_parameters") if isinstance(text.get("rope_parameters"), Mapping) else {}
    nope = {k for k, v in params.items() if v is None}  # ``{"full_attention": None}``: NoPE layers (Beam)
    missing = sorted(set(types) - set(ropes) - nope)
    if missing:
        raise ValueError(
            f"layer_types names {missing}, which have no RoPE in the config (has {sorted(ropes)})"
        )
    return LayerRopes(name, tuple(ropes.get(t) for t in types))
