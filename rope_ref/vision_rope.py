"""2D RoPE of vision transformers: Qwen2-VL's ViT and Pixtral, as two-stream multi-axis presets.

Stream 0 is the patch row (height) and stream 1 the patch column (width). Both conventions rotate
``head_dim / 2`` pairs, half of them by the row and half by the column; they differ in which
frequencies go with which axis:

* **Qwen2-VL** (``models/qwen2_vl/modeling_qwen2_vl.py``: ``VisionRotaryEmbedding(head_dim // 2)``,
  ``Qwen2VisionTransformerPretrainedModel.rot_pos_emb``, ``apply_rotary_pos_emb_vision``; the same in
  Qwen2.5-VL and Qwen3-VL): one table ``theta_j = base^(-2j/(head_dim/2))``, ``j < head_dim/4``, used
  twice: pairs ``j < head_dim/4`` take the row, pairs ``head_dim/4 + j`` the column, half layout over the
  whole head. Patches are listed in merge-window order (:func:`qwen2_vl_ids`).
* **Pixtral** (``models/pixtral/modeling_pixtral.py``: ``PixtralRotaryEmbedding``,
  ``position_ids_in_meshgrid``): one table ``f_k = base^(-2k/head_dim)``, ``k < head_dim/2``; the row
  takes the even entries ``f_0, f_2, ...`` (pairs ``j < head_dim/4``) and the column the odd ones
  ``f_1, f_3, ...`` (pairs ``head_dim/4 + j``). HF applies it in the half layout; Mistral's original
  (complex, interleaved) form gives pair ``j`` the same angle (HF's comment: "a different permutation in
  order to obtain the same calculation"), so both layouts are offered. Patches in row-major order.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ._arrays import check_int, check_real, to_numpy
from .config import RopeConfig
from .hf_config import VISION_RULE_BY_MODEL_TYPE, config_dict, vision_part
from .multiaxis import MultiAxisRope
from .preset_table import PresetTable

__all__ = [
    "qwen2_vl",
    "pixtral",
    "axial",
    "qwen2_vl_ids",
    "pixtral_ids",
    "preset",
    "preset_names",
    "from_hf",
]


def _quarter(head_dim: Any) -> int:
    head_dim = check_int(head_dim, "head_dim")
    if head_dim <= 0 or head_dim % 4:
        raise ValueError(f"head_dim must be a positive multiple of 4 (two axes, pairs), got {head_dim}")
    return head_dim // 4


def qwen2_vl(head_dim: int = 80, base: float = 10000.0) -> MultiAxisRope:
    """Qwen2-VL vision RoPE: row on pairs ``j``, column on pairs ``head_dim/4 + j``, both ``theta_j``."""
    q = _quarter(head_dim)
    table = RopeConfig(head_dim // 2, layout="half", base=base)
    return MultiAxisRope(
        head_dim,
        layout="half",
        streams=(0,) * q + (1,) * q,
        tables=(table, table),
        freq_index=tuple(range(q)) * 2,
    )


def pixtral(head_dim: int = 64, base: float = 10000.0, *, layout: str = "half") -> MultiAxisRope:
    """Pixtral vision RoPE: row on pair ``j`` with ``f_{2j}``, column on ``head_dim/4 + j`` with ``f_{2j+1}``.

    ``layout="half"`` is HF's ``PixtralRotaryEmbedding`` + ``rotate_half``; ``"interleaved"`` is the
    complex form of Mistral's original ``precompute_freqs_cis_2d`` (same angle per pair).
    """
    q = _quarter(head_dim)
    table = RopeConfig(head_dim, layout=layout, base=base)
    return MultiAxisRope(
        head_dim,
        layout=layout,
        streams=(0,) * q + (1,) * q,
        tables=(table, table),
        freq_index=tuple(range(0, 2 * q, 2)) + tuple(range(1, 2 * q, 2)),
    )


def axial(
    head_dim: int, base: float = 10000.0, *, layout: str = "half", first: str = "row", alternate: bool = False
) -> MultiAxisRope:
    """The "axial" vision RoPE of transformers 5.x (``compute_axial_rope_parameters``): one table
    ``theta_j = base^(-2j/(head_dim/2))``, ``j < head_dim/4``, shared by the two axes.

    ``first``: the axis on pairs ``j < head_dim/4`` (``"row"``; ``"column"`` swaps them, e.g.
    ``models/inkling2/modeling_inkling2.py`` ``cat([freq_w, freq_h])``). ``alternate``: the axes alternate
    pair by pair with the same ``theta_j`` on pairs ``2j, 2j+1`` (``models/kimi_k25/modeling_kimi_k25.py``
    ``freq.transpose(1, 2).flip(-1).flatten(1)``: column then row). ``layout``: ``"half"`` (``rotate_half``)
    or ``"interleaved"`` (``rotate_pairwise`` with ``repeat_interleave(2)``, SAM 2's memory attention).
    ``axial(d, b)`` is :func:`qwen2_vl`.
    """
    q = _quarter(head_dim)
    if first not in ("row", "column"):
        raise ValueError(f"first must be 'row' or 'column', got {first!r}")
    a, b = (0, 1) if first == "row" else (1, 0)
    if alternate:
        streams, freq = (a, b) * q, tuple(j // 2 for j in range(2 * q))
    else:
        streams, freq = (a,) * q + (b,) * q, tuple(range(q)) * 2
    table = RopeConfig(head_dim // 2, layout="half", base=base)
    return MultiAxisRope(head_dim, layout=layout, streams=streams, tables=(table, table), freq_index=freq)


def _grid_rows(grid: Any, name: str, width: int) -> list[list[int]]:
    g = to_numpy(grid, name)
    if g.dtype.kind not in "iu":
        raise TypeError(f"{name} must be an integer array, got dtype {g.dtype}")
    if g.ndim != 2 or g.shape[1] != width:
        raise ValueError(f"{name} must have shape (n, {width}), got shape {g.shape}")
    rows = g.astype(np.int64).tolist()
    for k, row in enumerate(rows):
        if min(row) < 1:
            raise ValueError(f"{name}[{k}] = {tuple(row)} must be positive")
    return rows


def qwen2_vl_ids(grid_thw: Any, spatial_merge_size: int = 2) -> np.ndarray:
    """``(2, n_patches)`` int64 (row, column) ids of every patch, in the ViT's merge-window order.

    ``rot_pos_emb``: per grid ``(t, h, w)``, patches are listed window by window (``m x m`` windows in
    row-major order, ``m = spatial_merge_size``), row-major inside a window, and the frame repeated ``t``
    times; grids follow each other. ``h`` and ``w`` must be divisible by ``m`` (``ValueError``).
    """
    m = check_int(spatial_merge_size, "spatial_merge_size", minimum=1)
    rows, cols = [], []
    for k, (t, h, w) in enumerate(_grid_rows(grid_thw, "grid_thw", 3)):
        if h % m or w % m:
            raise ValueError(
                f"grid_thw[{k}] = {(t, h, w)}: h and w must be divisible by spatial_merge_size={m}"
            )
        r = np.arange(h).reshape(h // m, m, 1, 1) + np.zeros((1, 1, w // m, m), dtype=np.int64)
        c = np.arange(w).reshape(1, 1, w // m, m) + np.zeros((h // m, m, 1, 1), dtype=np.int64)
        # (block row, in-block row, block col, in-block col) -> (block row, block col, in-row, in-col)
        rows.append(np.tile(r.transpose(0, 2, 1, 3).reshape(-1), t))
        cols.append(np.tile(c.transpose(0, 2, 1, 3).reshape(-1), t))
    return np.stack([np.concatenate(rows), np.concatenate(cols)]).astype(np.int64)


def pixtral_ids(patch_grids: Sequence[Sequence[int]] | Any) -> np.ndarray:
    """``(2, n_patches)`` int64 (row, column) ids of the patches of images of ``(h, w)`` patches each.

    ``position_ids_in_meshgrid``: row-major (``meshgrid(..., indexing="ij")``) per image, images
    concatenated. HF stores them flattened as ``row * max_width + column`` to index a precomputed
    table; the angles are the same.
    """
    rows, cols = [], []
    for h, w in _grid_rows(patch_grids, "patch_grids", 2):
        rows.append(np.repeat(np.arange(h), w))
        cols.append(np.tile(np.arange(w), h))
    return np.stack([np.concatenate(rows), np.concatenate(cols)]).astype(np.int64)


_PRESETS = {
    # Qwen/Qwen2-VL-7B-Instruct and Qwen2.5-VL-7B vision_config: embed/hidden 1280, 16 heads -> 80.
    "qwen2-vl-vision": lambda: qwen2_vl(80),
    "qwen2.5-vl-vision": lambda: qwen2_vl(80),
    # Qwen/Qwen3-VL-8B-Instruct vision_config: hidden 1152, 16 heads -> 72.
    "qwen3-vl-vision": lambda: qwen2_vl(72),
    # mistral-community/pixtral-12b vision_config: hidden 1024, 16 heads -> 64, rope_theta 10000.
    "pixtral-12b-vision": lambda: pixtral(64),
}


_TABLE = PresetTable("vision RoPE", _PRESETS)
#: Names accepted by :func:`preset`, sorted.
preset_names = _TABLE.names


def preset(name: str) -> MultiAxisRope:
    """A released vision tower's 2D RoPE by name (see :func:`preset_names`)."""
    return _TABLE.build(name)


def _vision_head_dim(vision: Any, keys: tuple[str, ...]) -> int:
    if vision.get("head_dim") is not None:
        return check_int(vision["head_dim"], "vision_config.head_dim", minimum=4)
    width = next((k for k in keys if vision.get(k) is not None), None)
    heads = next((k for k in ("num_heads", "num_attention_heads") if vision.get(k) is not None), None)
    if width is None or heads is None:
        raise ValueError(
            f"vision_config needs head_dim, or {' / '.join(keys)} and num_heads, to give the head size"
        )
    w = check_int(vision[width], f"vision_config.{width}", minimum=1)
    h = check_int(vision[heads], f"vision_config.{heads}", minimum=1)
    if w % h:
        raise ValueError(f"vision_config.{width} ({w}) is not divisible by vision_config.{heads} ({h})")
    return w // h


#: The axial rules of :data:`rope_ref.hf_config.VISION_RULE_BY_MODEL_TYPE` (``recomposition_frequencies``).
_AXIAL = {
    # models/mlcd/modeling_mlcd.py (and exaone4_5, glm5_next, lfm3_vl, video_llama_3): cat([h, w]) twice.
    "axial": {},
    # models/inkling2/modeling_inkling2.py: cat([freq_w, freq_h]).repeat_interleave(2), rotate_pairwise.
    # models/sam3/modeling_sam3.py Sam3ViTRotaryEmbedding: cat([h, w]).repeat_interleave(2), rotate_pairwise.
    "axial-interleaved": {"layout": "interleaved"},
    "axial-wh-interleaved": {"first": "column", "layout": "interleaved"},
    # models/kimi_k25/modeling_kimi_k25.py: (w, h) alternating per frequency, then twice (rotate_half).
    "axial-alternate": {"first": "column", "alternate": True},
}
#: Models whose rotary is SAM 2's memory attention (``models/sam2_video/modeling_sam2_video.py``
#: ``Sam2VideoVisionRotaryEmbedding``: head ``memory_attention_hidden_size / (downsample_rate * heads)``,
#: ``cat([h, w]).repeat_interleave(2)``, ``rotate_pairwise``).
_MEMORY_ATTENTION_TYPES = ("sam2_video", "edgetam_video", "sam3_tracker_video")


def _theta(config: Any) -> float:
    rp = config.get("rope_parameters")
    value = rp.get("rope_theta") if isinstance(rp, Mapping) else None
    return check_real(value if value is not None else config.get("rope_theta", 10000.0), "rope_theta")


def _memory_attention(config: Any) -> MultiAxisRope:
    width = check_int(
        config.get("memory_attention_hidden_size", 256), "memory_attention_hidden_size", minimum=1
    )
    rate = check_int(
        config.get("memory_attention_downsample_rate", 1), "memory_attention_downsample_rate", minimum=1
    )
    heads = check_int(
        config.get("memory_attention_num_attention_heads", 1),
        "memory_attention_num_attention_heads",
        minimum=1,
    )
    return axial(width // (rate * heads), _theta(config), layout="interleaved")


def from_hf(config: Any) -> MultiAxisRope:
    """The 2D RoPE of a vision tower from an HF config: the model's ``vision_config``, or the tower's own.

    ``config``: a ``config.json`` dict, a path to one or a ``PretrainedConfig``-like object
    (:func:`rope_ref.hf_config.config_dict`). The tower's ``model_type`` (else the model's) picks the rule
    (:data:`rope_ref.hf_config.VISION_RULE_BY_MODEL_TYPE`). Qwen2-VL family: head size ``embed_dim``
    (Qwen2-VL; its ``hidden_size`` is the merger's output) else ``hidden_size``, over ``num_heads``; base
    10000 (``VisionRotaryEmbedding``'s default). Pixtral: ``head_dim`` else ``hidden_size /
    num_attention_heads``, base ``rope_theta`` (default 10000), HF's half layout.
    """
    config = config_dict(config)
    if config.get("model_type") in _MEMORY_ATTENTION_TYPES:
        return _memory_attention(config)
    part = vision_part(config)
    if part is None:
        raise ValueError("config has no vision_config (and is not a vision tower's own config)")
    rule, vision = part
    if rule is None:
        kind = vision.get("model_type")
        raise ValueError(
            f"rope-ref has no vision RoPE for vision model_type {kind!r} "
            f"(known: {sorted(VISION_RULE_BY_MODEL_TYPE)})"
        )
    if rule == "pixtral":
        head_dim = _vision_head_dim(vision, ("hidden_size",))
        base = check_real(vision.get("rope_theta", 10000.0), "vision_config.rope_theta")
        return pixtral(head_dim, base)
    if rule in _AXIAL:
        return axial(_vision_head_dim(vision, ("hidden_size",)), _theta(vision), **_AXIAL[rule])
    return qwen2_vl(_vision_head_dim(vision, ("embed_dim", "hidden_size")))
