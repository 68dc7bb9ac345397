"""DeepSeek MLA (multi-head latent attention): the decoupled RoPE part and the softmax-scale correction.

In MLA each query/key head is ``[nope | rope]``: ``qk_nope_head_dim`` channels without position, then
``qk_rope_head_dim`` channels rotated by RoPE (the key's rope part is shared by all heads). The released
code (deepseek-ai/DeepSeek-V3 ``inference/model.py`` ``apply_rotary_emb``: ``view_as_complex`` of
adjacent pairs; HF ``models/deepseek_v2/modeling_deepseek_v2.py`` ``apply_rotary_emb``) pairs the rope
part **interleaved**. HF's DeepSeek-V3 port (``models/deepseek_v3/modeling_deepseek_v3.py``
``apply_rotary_pos_emb_interleave``, ``rope_interleave=True``) first reorders it to
``[x0, x2, x4, ..., x1, x3, ...]`` and rotates with ``rotate_half``; its output stays in that order,
which leaves every q.k unchanged (q and k get the same permutation): :func:`apply_rope_part` with
``convention="hf"``.

Two YaRN corrections must both be present (transformers ``modeling_deepseek_v3.py``
``DeepseekV3Attention.__init__`` / v5 ``yarn_apply_mscale``; DeepSeek-V3 ``MLA.__init__``):

1. cos and sin multiplied by ``mscale(f, mscale) / mscale(f, mscale_all_dim)`` (1 for every released
   config) — :class:`rope_ref.YaRN`'s attention factor;
2. ``softmax_scale = qk_head_dim^-0.5 * mscale(f, mscale_all_dim)^2`` — :func:`softmax_scale`.

``mscale(f, m) = 0.1 m ln f + 1`` for ``f > 1`` (YaRN arXiv 2309.00071 eq. 22; ``yarn_get_mscale``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import _mp
from ._arrays import as_float64, as_positions, check_int, check_real
from .config import RopeConfig
from .hf_config import config_dict, rope_config_from_hf
from .multiaxis import MultiAxisRope, from_config
from .multiaxis import apply as _multiaxis_apply
from .preset_table import PresetTable
from .rotation import layout_permutation
from .scaling import YaRN

__all__ = [
    "MLAConfig",
    "mscale",
    "softmax_scale",
    "apply_rope_part",
    "to_half_layout",
    "preset",
    "preset_names",
    "from_hf",
]


@dataclass(frozen=True)
class MLAConfig:
    """The position-related part of an MLA attention layer.

    ``rope``: the RoPE of the rope sub-head (``head_dim == qk_rope_head_dim``, interleaved, YaRN).
    ``mscale_all_dim``: the YaRN ``mscale_all_dim`` used by the softmax-scale correction (0 or None: none).
    """

    name: str
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    rope: RopeConfig
    mscale_all_dim: float | None

    @property
    def qk_head_dim(self) -> int:
        """``qk_nope_head_dim + qk_rope_head_dim``: the q/k head size the softmax scale uses."""
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def spec(self) -> MultiAxisRope:
        """The rope part as a one-stream multi-axis RoPE."""
        return from_config(self.rope)


def _mscale_exact(factor: float, m: float) -> Any:
    """The exact ``0.1 * m * ln(factor) + 1`` (0.1 the float64 constant, as in the released Python), or 1."""
    if factor <= 1.0:
        return _mp.ctx().mpf(1)
    return _mp.exact(0.1) * _mp.exact(m) * _mp.ctx().log(_mp.exact(factor)) + 1


def mscale(factor: float, mscale: float = 1.0) -> float:
    """``0.1 * mscale * ln(factor) + 1`` (1 if ``factor <= 1``): exact in mpmath, rounded once to float64.

    ``yarn_get_mscale`` of HF ``modeling_deepseek_v3.py`` / DeepSeek-V2's ``modeling_deepseek.py``; the
    same value as :func:`rope_ref.scaling.yarn_get_mscale`.
    """
    return _mp.to_float(_mscale_exact(check_real(factor, "factor"), check_real(mscale, "mscale")))


def softmax_scale(cfg: MLAConfig) -> float:
    """``qk_head_dim^-0.5 * mscale(factor, mscale_all_dim)^2`` (just ``qk_head_dim^-0.5`` without YaRN or
    without ``mscale_all_dim``), evaluated exactly in mpmath (:mod:`rope_ref._mp`) and rounded once.

    HF ``DeepseekV3Attention.__init__``: ``scaling = qk_head_dim ** -0.5``; if ``mscale_all_dim``:
    ``scaling *= mscale * mscale`` with ``mscale = yarn_get_mscale(factor, mscale_all_dim)``. HF's float
    evaluation rounds four times and may differ from this value in the last bit or two.
    """
    if not isinstance(cfg, MLAConfig):
        raise TypeError(f"cfg must be a rope_ref.mla.MLAConfig, got {type(cfg).__name__}")
    mp = _mp.ctx()
    value = 1 / mp.sqrt(mp.mpf(cfg.qk_head_dim))
    scaling = cfg.rope.scaling
    if isinstance(scaling, YaRN) and cfg.mscale_all_dim:
        ms = _mscale_exact(scaling.factor, float(cfg.mscale_all_dim))
        value = value * ms * ms
    return _mp.to_float(value)


def to_half_layout(x_rope: Any) -> np.ndarray:
    """HF's DeepSeek-V3 reordering of an interleaved rope part: ``[x0, x2, ..., x1, x3, ...]``.

    ``q.view(..., d // 2, 2).transpose(4, 3).reshape(..., d)`` in ``apply_rotary_pos_emb_interleave``;
    it is :func:`rope_ref.layout_permutation`.
    """
    x = as_float64(x_rope, "x_rope")
    if x.ndim == 0 or x.shape[-1] % 2:
        raise ValueError(f"x_rope.shape[-1] must be even, got shape {x.shape}")
    d = x.shape[-1]
    return x[..., layout_permutation(RopeConfig(d, layout="interleaved"))]


def apply_rope_part(
    x: Any, positions: Any, cfg: MLAConfig, *, convention: str = "released", seq_len: int | None = None
) -> np.ndarray:
    """Rotate the rope part of ``x`` (``(..., qk_nope_head_dim + qk_rope_head_dim)``, rope part last).

    ``positions`` broadcasts against ``x.shape[:-1]``. The nope part is copied. ``convention``:

    * ``"released"``: the rope part rotated with interleaved pairs, in place (DeepSeek's code);
    * ``"hf"``: the rope part reordered by :func:`to_half_layout`, then rotated with ``rotate_half``, and
      returned in the reordered order (HF DeepSeek-V3 ``rope_interleave=True``); it equals the released
      result's rope part reordered by :func:`to_half_layout`.

    Pass just the key's shared rope part as an ``MLAConfig`` with ``qk_nope_head_dim = 0`` if needed.
    """
    if not isinstance(cfg, MLAConfig):
        raise TypeError(f"cfg must be a rope_ref.mla.MLAConfig, got {type(cfg).__name__}")
    if convention not in ("released", "hf"):
        raise ValueError(f"convention must be 'released' or 'hf', got {convention!r}")
    x = as_float64(x, "x")
    nope = cfg.qk_nope_head_dim
    if x.ndim == 0 or x.shape[-1] != cfg.qk_head_dim:
        raise ValueError(
            f"x.shape[-1] must equal qk_nope_head_dim + qk_rope_head_dim = {cfg.qk_head_dim}, got {x.shape}"
        )
    pos = as_positions(positions)
    out = x.copy()
    if convention == "released":
        out[..., nope:] = _multiaxis_apply(x[..., nope:], pos[None], cfg.spec, seq_len=seq_len)
    else:
        half = from_config(cfg.rope.replace(layout="half"))
        out[..., nope:] = _multiaxis_apply(to_half_layout(x[..., nope:]), pos[None], half, seq_len=seq_len)
    return out


def _yarn(factor: float, beta_fast: float, beta_slow: float, m: float, m_all: float) -> YaRN:
    return YaRN(
        factor,
        original_max_position=4096,
        beta_fast=beta_fast,
        beta_slow=beta_slow,
        mscale=m,
        mscale_all_dim=m_all,
    )


def _deepseek_v2_lite() -> MLAConfig:
    """deepseek-ai/DeepSeek-V2-Lite ``config.json``: qk_nope 128, qk_rope 64, v 128, rope_theta 10000,
    rope_scaling yarn {factor 40, original 4096, beta_fast 32, beta_slow 1, mscale 0.707,
    mscale_all_dim 0.707}."""
    rope = RopeConfig(64, layout="interleaved", base=10000.0, scaling=_yarn(40.0, 32.0, 1.0, 0.707, 0.707))
    return MLAConfig("deepseek-v2-lite", 128, 64, 128, rope, 0.707)


def _deepseek_v3() -> MLAConfig:
    """deepseek-ai/DeepSeek-V3 ``config.json``: qk_nope 128, qk_rope 64, v 128, rope_theta 10000,
    rope_scaling yarn {factor 40, original 4096, beta_fast 32, beta_slow 1, mscale 1.0,
    mscale_all_dim 1.0}."""
    rope = RopeConfig(64, layout="interleaved", base=10000.0, scaling=_yarn(40.0, 32.0, 1.0, 1.0, 1.0))
    return MLAConfig("deepseek-v3", 128, 64, 128, rope, 1.0)


def _kimi_k2() -> MLAConfig:
    """moonshotai/Kimi-K2-Instruct ``config.json``: qk_nope 128, qk_rope 64, v 128, rope_theta 50000,
    rope_scaling yarn {factor 32, original 4096, beta_fast 1.0, beta_slow 1.0, mscale 1.0,
    mscale_all_dim 1.0}. With ``beta_fast == beta_slow`` the YaRN ramp shrinks to ``[floor(c), ceil(c)]``,
    ``c`` the correction dimension of one rotation (a step where ``c`` is an integer)."""
    rope = RopeConfig(64, layout="interleaved", base=50000.0, scaling=_yarn(32.0, 1.0, 1.0, 1.0, 1.0))
    return MLAConfig("kimi-k2", 128, 64, 128, rope, 1.0)


_PRESETS = {"deepseek-v2-lite": _deepseek_v2_lite, "deepseek-v3": _deepseek_v3, "kimi-k2": _kimi_k2}


_TABLE = PresetTable("MLA", _PRESETS)
#: Names accepted by :func:`preset`, sorted.
preset_names = _TABLE.names


def preset(name: str) -> MLAConfig:
    """A released MLA model by name (see :func:`preset_names`)."""
    return _TABLE.build(name)


def from_hf(config: Any, *, layout: str | None = None) -> MLAConfig:
    """The MLA attention of an HF config (DeepSeek-V2/V3, Kimi-K2, or any with ``qk_nope_head_dim``).

    ``config``: a ``config.json`` dict, a path to one or a ``PretrainedConfig``-like object
    (:func:`rope_ref.hf_config.config_dict`). The rope part is :func:`rope_ref.hf_config.rope_config_from_hf`
    (head size ``qk_rope_head_dim``; layout fixed by ``model_type`` / ``rope_interleave``, else ``layout=``);
    ``mscale_all_dim`` comes from the rope dict (``rope_scaling`` or ``rope_parameters``).
    """
    config = config_dict(config)
    sizes = {}
    for key in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
        if config.get(key) is None:
            raise ValueError(f"config is missing the key {key!r}: not an MLA (DeepSeek-V2/V3-style) config")
        sizes[key] = check_int(config[key], key, minimum=0 if key == "qk_nope_head_dim" else 1)
    rope = rope_config_from_hf(config, layout=layout)
    raw = config.get("rope_scaling") or config.get("rope_parameters") or {}
    m_all = raw.get("mscale_all_dim") if isinstance(raw, Mapping) else None
    if m_all is not None:
        m_all = check_real(m_all, "mscale_all_dim")
    name = str(config.get("_name_or_path") or config.get("model_type") or "mla")
    return MLAConfig(
        name, sizes["qk_nope_head_dim"], sizes["qk_rope_head_dim"], sizes["v_head_dim"], rope, m_all
    )
