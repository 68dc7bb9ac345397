"""The torch adapter's tables: the frequency table (``inv_freq``, attention factor) and cos/sin.

The *frequency table* (``rotary_dim / 2`` numbers) comes from the oracle's formulas in float64
(:func:`rope_ref.inv_freq`, :func:`rope_ref.attention_factor`) and is then rounded once to the angle
dtype, so every scaling type (linear, NTK, dynamic NTK, YaRN, Llama 3, LongRoPE) is exactly the
oracle's. Everything per position (angles, cos/sin) is native torch.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

import numpy as np
import torch

import rope_ref
from rope_ref.config import RopeConfig
from rope_ref.frequencies import resolve_seq_len

__all__ = [
    "seq_len_of",
    "freq_constants",
    "freq_table",
    "autocast_off",
    "angle_tables",
    "expand_tables",
]


def seq_len_of(pos: torch.Tensor, cfg: RopeConfig, seq_len: int | None) -> int | None:
    """The length a length-dependent scaling sees (HF ``dynamic_rope_update``: max(positions) + 1).

    Reads ``pos.max()`` (a host sync) only for length-dependent scalings without an explicit
    ``seq_len``; the rule is :func:`rope_ref.frequencies.resolve_seq_len`, floor for real positions.
    """
    if seq_len is not None or cfg.scaling is None or not cfg.scaling.length_dependent or pos.numel() == 0:
        return resolve_seq_len(np.zeros(0), cfg, seq_len)
    top = pos.max().item()
    return resolve_seq_len(np.asarray([top], dtype=np.float64), cfg, None)


def _length_free(cfg: RopeConfig, seq_len: int | None) -> int | None:
    """``seq_len`` where the scaling depends on length, else ``None`` (so it never reaches a cache key)."""
    if cfg.scaling is None or not cfg.scaling.length_dependent:
        return None
    return seq_len


@torch.compiler.assume_constant_result
def freq_constants(cfg: RopeConfig, seq_len: int | None) -> tuple[tuple[float, ...], float]:
    """The oracle's float64 ``inv_freq`` and attention factor as Python floats.

    Plain floats (not arrays) so that ``torch.compile`` folds them into the graph as constants. Only
    called with a Python ``int`` (or ``None``) ``seq_len``: a symbolic one goes through
    :func:`_freq_table_op` (see :func:`freq_table`).
    """
    seq_len = _length_free(cfg, seq_len)
    freqs = rope_ref.inv_freq(cfg, seq_len)
    return tuple(float(v) for v in freqs), float(rope_ref.attention_factor(cfg, seq_len))


# -- length-dependent tables under torch.compile -----------------------------------------------------
#
# Dynamo turns an ``int`` argument that changes between calls into a symbolic integer, which
# ``assume_constant_result`` cannot take. For length-dependent scalings (dynamic NTK, LongRoPE) the
# table is a function of that runtime integer, so under ``torch.compile`` it comes from an opaque custom
# op that runs the oracle when the graph runs: no graph break, no recompile per length.

_CONFIG_KEYS: dict[RopeConfig, str] = {}
_CONFIGS: dict[str, RopeConfig] = {}


@torch.compiler.assume_constant_result
def _config_key(cfg: RopeConfig) -> str:
    """A string naming ``cfg`` for the custom op (custom ops cannot take Python objects)."""
    key = _CONFIG_KEYS.get(cfg)
    if key is None:
        key = _CONFIG_KEYS[cfg] = str(len(_CONFIG_KEYS))
        _CONFIGS[key] = cfg
    return key


@torch.library.custom_op("rope_ref::freq_table", mutates_args=())
def _freq_table_op(cfg_key: str, seq_len: int, device: torch.device) -> torch.Tensor:
    """``cat(inv_freq, [attention_factor])`` in float64 on ``device``: the oracle's values at ``seq_len``."""
    freqs, factor = freq_constants(_CONFIGS[cfg_key], seq_len)
    return torch.tensor(freqs + (factor,), dtype=torch.float64, device=device)


@_freq_table_op.register_fake
def _(cfg_key: str, seq_len: int, device: torch.device) -> torch.Tensor:
    return torch.empty(_CONFIGS[cfg_key].rotary_dim // 2 + 1, dtype=torch.float64, device=device)


def freq_table(
    cfg: RopeConfig, seq_len: int | None, dtype: torch.dtype, device: torch.device
) -> tuple[torch.Tensor, float | torch.Tensor]:
    """``(inv_freq, attention_factor)``: the oracle's float64 table rounded once to ``dtype``.

    Under ``torch.compile`` with a length-dependent scaling and a ``seq_len``, the factor is a 0-d
    float64 tensor (it depends on a runtime length); otherwise it is a Python float.
    """
    seq_len = _length_free(cfg, seq_len)
    if seq_len is not None and torch.compiler.is_compiling():
        packed = _freq_table_op(_config_key(cfg), seq_len, torch.device(device))
        return packed[:-1].to(dtype), packed[-1]
    freqs, factor = freq_constants(cfg, seq_len)
    return torch.tensor(freqs, dtype=dtype, device=device), factor


def autocast_off(device_type: str) -> AbstractContextManager:
    """Autocast off on ``device_type`` (devices without autocast, e.g. "meta", have nothing to turn off)."""
    if torch.amp.is_autocast_available(device_type):
        return torch.autocast(device_type, enabled=False)
    return nullcontext()


def angle_tables(
    pos: torch.Tensor, inv_freq: torch.Tensor, factor: float | torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of ``pos * inv_freq`` (shape ``pos.shape + (n,)``), times the attention factor.

    Computed in ``inv_freq.dtype`` (float32 or float64) with autocast off, so neither ``module.half()``
    nor autocast can lower the angle precision (gpt-neox #1003, transformers PR #29285). Integer
    positions convert exactly up to 2**24 in float32 and 2**53 in float64.
    """
    with autocast_off(pos.device.type):
        theta = pos.to(inv_freq.dtype).unsqueeze(-1) * inv_freq
        cos, sin = torch.cos(theta), torch.sin(theta)
        if isinstance(factor, torch.Tensor):  # a runtime value (see freq_table): always multiply
            factor = factor.to(inv_freq.dtype)
            cos, sin = cos * factor, sin * factor
        elif factor != 1.0:
            cos = cos * factor
            sin = sin * factor
    return cos, sin


def expand_tables(cos: torch.Tensor, sin: torch.Tensor, ndim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-pad half-width tables with unit axes so they broadcast over an ``ndim``-d ``x``."""
    lead = ndim - cos.ndim
    if lead < 0:
        raise ValueError(f"cos/sin of shape {tuple(cos.shape)} have more axes than x ({ndim})")
    shape = (1,) * lead + tuple(cos.shape)
    return cos.reshape(shape), sin.reshape(shape)
