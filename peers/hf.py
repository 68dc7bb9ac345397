"""Hugging Face transformers as a peer: ``hf:llama``, ``hf:gpt-neox``, ``hf:glm``, ``hf:gptj``.

What is called (transformers 5.x, ``src/transformers/``):

* tables: ``modeling_rope_utils.ROPE_INIT_FUNCTIONS[rope_type](config, device, seq_len=...)`` and each
  model's ``<Model>RotaryEmbedding.compute_default_rope_parameters`` (the stateless functions);
* cos/sin and rotation: the model's ``<Model>RotaryEmbedding(config).forward(x, position_ids)`` (with its
  ``@dynamic_rope_update`` state, one module per config kept across cases, as in a loaded model) and
  ``models/<model>/modeling_<model>.apply_rotary_pos_emb``;
* GPT-J: ``models/gptj/modeling_gptj.create_sinusoidal_positions`` and ``apply_rotary_pos_emb`` (the
  partial-rotary split is ``GPTJAttention.forward``'s, restated here as an axis plan).

Precision (read from those functions): inverse frequencies and angles in float32
(``position_ids.float() * inv_freq.float()``), cos/sin rounded to the activation dtype, the rotation in
the activation dtype. The float64 policy is therefore io float64 with float32 angles.

Kernel shapes (issue 16): ``apply_qk`` is one ``apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=...)``
call with cos/sin from the rotary module at HF ``(B, S)`` position_ids (an offset becomes
``offset + arange(S)``, ``cu_seqlens`` per-token ids of one ``(1, T)`` row); ``unsqueeze_dim=1`` for
``bhsd``, ``2`` for ``bshd`` (``sbhd`` as a permuted ``bshd`` view, ``thd`` as ``(1, T, H, D)``); q and k
may have different head counts (the cos/sin broadcast over heads, as in GQA models). ``apply_axes`` is the
same call with ``k = q``. GPT-J: its ``apply_rotary_pos_emb(tensor, sin, cos)`` on ``bshd`` views. The
inverse rotation passes ``-sin``. No packed-qkv call; out of place.

:class:`KernelShapes` is the mixin the CPU peers share for these operations.
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np
from rope_ref.conformance.protocol import PrecisionPolicy

from ._glue import OPS, Peer, Unsupported, config_key, emulated_length, integer_positions, tokens
from ._kernel_glue import _TO_BSHD, _TO_BSHD_OR_BHSD, KernelShapes

__all__ = ["HFPeer", "make_backend", "available", "FAMILIES"]

_AXES = ("bshd", "bhsd", "sbhd", "thd")


# family -> (module, config class, rotary class, layout, partial rotary allowed, scalings allowed)
FAMILIES: dict[str, tuple[str, str, str, str, bool, bool]] = {
    "llama": ("llama", "LlamaConfig", "LlamaRotaryEmbedding", "half", False, True),
    "gpt-neox": ("gpt_neox", "GPTNeoXConfig", "GPTNeoXRotaryEmbedding", "half", True, True),
    "glm": ("glm", "GlmConfig", "GlmRotaryEmbedding", "interleaved", True, True),
    "gptj": ("gptj", "GPTJConfig", "", "interleaved", True, False),
}
_HEADS = 2


def available(family: str = "llama", **_: Any) -> tuple[bool, str]:
    try:
        importlib.import_module(f"transformers.models.{FAMILIES[family][0]}.modeling_{FAMILIES[family][0]}")
    except ImportError as exc:
        return False, f"transformers is not installed or lacks {family} ({exc})"
    return True, ""


class HFPeer(KernelShapes, Peer):
    """One HF model family's RoPE, driven through its own modules and functions."""

    kernel_cannot = {
        "apply_qkv": "transformers' apply_rotary_pos_emb takes q and k (models split a packed qkv first)"
    }

    distribution = "transformers"
    precisions = ("fp64", "fp32", "fp16", "bf16")

    def __init__(self, family: str = "llama", precision: str | None = None) -> None:
        self.family = family
        self.peer = f"hf:{family}"
        mod, cfg_cls, rot_cls, self.layout, self.partial, self.scalings = FAMILIES[family]
        self._mod = importlib.import_module(f"transformers.models.{mod}.modeling_{mod}")
        self._cfg_cls = getattr(importlib.import_module("transformers"), cfg_cls)
        self._rot_cls = getattr(self._mod, rot_cls) if rot_cls else None
        self.cannot = {}
        self.notes = (
            f"{self.layout} layout only; "
            + ("partial rotary via partial_rotary_factor" if self.partial else "rotates the full head")
            + (
                ""
                if self.scalings
                else "; no rope scaling, base fixed at 10000 (create_sinusoidal_positions)"
            ),
        )
        super().__init__(precision)

    def policies(self, io: str) -> dict[str, PrecisionPolicy]:
        p = dict.fromkeys(OPS, PrecisionPolicy(io, "float32", io))
        p["inv_freq"] = p["attention_factor"] = p["cos_sin"] = PrecisionPolicy(io, "float32", "float32")
        return p

    # -- configs ----------------------------------------------------------------------------------------
    def _check(self, cfg, layout: bool = True) -> None:
        if layout and cfg.layout != self.layout:
            raise Unsupported(f"hf:{self.family} implements the {self.layout} layout only")
        if cfg.rotary_dim != cfg.head_dim and not self.partial:
            raise Unsupported(f"hf:{self.family} rotates the whole head (no partial rotary)")
        if self.family == "gptj" and (cfg.scaling is not None or cfg.base != 10000.0):
            raise Unsupported("GPT-J's create_sinusoidal_positions has base 10000 and no scaling")

    def _hf_config(self, cfg):
        self._check(cfg, layout=False)
        scaling = cfg.scaling.to_hf() if cfg.scaling is not None else {"rope_type": "default"}
        rope_type = scaling.get("rope_type")
        if rope_type == "ntk":
            raise Unsupported("transformers 5 has no static NTK-aware rope type ('ntk' was removed)")
        params = dict(scaling, rope_theta=float(cfg.base))
        factor = float(scaling.get("factor", 1.0))
        orig = scaling.get("original_max_position_embeddings")
        if rope_type == "dynamic":
            max_pos = int(orig or 2048)  # HF's dynamic NTK takes L0 from max_position_embeddings
            params.pop("original_max_position_embeddings", None)
        elif rope_type in ("yarn", "longrope", "llama3") and orig:
            max_pos = int(round(orig * factor))
        else:
            max_pos = 4096
        # explicit always: GPT-NeoX (rotary_pct 0.25) and GLM (0.5) default to partial rotary
        params["partial_rotary_factor"] = cfg.rotary_dim / cfg.head_dim
        kwargs = dict(
            hidden_size=cfg.head_dim * _HEADS,
            num_attention_heads=_HEADS,
            num_key_value_heads=_HEADS,
            max_position_embeddings=max_pos,
        )
        if self.family == "gptj":
            return self._cfg_cls(n_embd=cfg.head_dim * _HEADS, n_head=_HEADS, rotary_dim=cfg.rotary_dim)
        kwargs["head_dim"] = cfg.head_dim
        if self.family == "gpt-neox":
            kwargs.pop("num_key_value_heads")
        return self._cfg_cls(rope_parameters=params, **kwargs)

    def _module(self, cfg):
        key = config_key(cfg)
        if key not in self._modules:
            self._modules[key] = self._rot_cls(self._hf_config(cfg))
        return self._modules[key]

    # -- tables -----------------------------------------------------------------------------------------
    def _init(self, cfg, seq_len):
        from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

        hf = self._hf_config(cfg)
        rope_type = hf.rope_parameters.get("rope_type", "default")
        if rope_type == "default":
            return self._rot_cls.compute_default_rope_parameters(hf)
        return ROPE_INIT_FUNCTIONS[rope_type](hf, None, seq_len=seq_len)

    def _inv_freq(self, cfg, seq_len):
        if self.family == "gptj":
            raise Unsupported(
                "GPT-J exposes no inverse-frequency function (only the sin/cos table)", "operation"
            )
        return self._init(cfg, seq_len)[0]

    def _attention_factor(self, cfg, seq_len):
        if self.family == "gptj":
            raise Unsupported("GPT-J has no attention factor", "operation")
        return float(self._init(cfg, seq_len)[1])

    # -- cos/sin and rotation ---------------------------------------------------------------------------
    def _tables(self, x, pos: np.ndarray, cfg, seq_len=None):
        """HF cos/sin for flat positions ``pos`` ((1, N, rotary_dim) in the model's own layout).

        ``@dynamic_rope_update`` takes the length from ``max(position_ids) + 1``; an explicit longer
        ``seq_len`` is emulated by one extra position ``seq_len - 1`` whose row is dropped (a prefill).
        """
        import torch

        if self.family == "gptj":
            p = integer_positions(pos, "GPT-J (table lookup by position id)")
            n = int(p.max()) + 1 if p.size else 1
            if n > 1 << 20:
                raise Unsupported("GPT-J precomputes a table of max_position_embeddings rows; >2^20 skipped")
            table = self._mod.create_sinusoidal_positions(n, cfg.rotary_dim)
            sincos = table[torch.from_numpy(p)][None].to(x.dtype)
            sin, cos = torch.split(sincos, sincos.shape[-1] // 2, dim=-1)
            return cos, sin
        rope_type = cfg.scaling.to_hf()["rope_type"] if cfg.scaling is not None else "default"
        extra = 0
        if rope_type in ("dynamic", "longrope") and seq_len is not None:
            length = emulated_length(pos, seq_len, f"hf:{self.family} (@dynamic_rope_update)")
            if length > int(np.max(pos)) + 1:
                pos, extra = np.append(pos, length - 1), 1
        position_ids = torch.from_numpy(np.array(pos))[None]
        cos, sin = self._module(cfg)(x, position_ids)
        return (cos[:, : cos.shape[1] - extra], sin[:, : sin.shape[1] - extra]) if extra else (cos, sin)

    def _apply(self, x, positions, cfg, seq_len):
        self._check(cfg)
        lead, pos = tokens(tuple(x.shape), self.to_numpy(positions))
        d = cfg.head_dim
        if self.family == "gptj":
            q = x.reshape(1, -1, 1, d)  # GPTJAttention: (batch, seq, heads, head_dim)
            cos, sin = self._tables(q, pos, cfg)
            r = cfg.rotary_dim
            rot = self._mod.apply_rotary_pos_emb(q[..., :r], sin, cos)
            import torch

            return torch.cat([rot, q[..., r:]], dim=-1).reshape(*lead, d)
        q = x.reshape(1, 1, -1, d)  # (batch, heads, seq, head_dim), unsqueeze_dim=1
        cos, sin = self._tables(q, pos, cfg, seq_len)
        return self._mod.apply_rotary_pos_emb(q, q, cos, sin)[0].reshape(*lead, d)

    def _apply_vjp(self, x, positions, cfg, grad_out, seq_len):
        return self.torch_vjp(x, positions, cfg, grad_out, seq_len)

    def _cos_sin(self, positions, cfg, seq_len):
        import torch

        self._check(cfg)
        p = self.to_numpy(positions)
        dummy = torch.zeros(1, dtype=torch.float32)
        cos, sin = self._tables(dummy, p.reshape(-1), cfg, seq_len)
        k = cfg.rotary_dim // 2
        shape = p.shape + (k,)
        return cos[0, :, :k].reshape(shape), sin[0, :, :k].reshape(shape)

    # -- the shapes real kernels see (issue 16) ------------------------------------------------------
    def _k_axes(self, x, cfg, axes, p, inverse):
        if self.family == "gptj":
            return self._gptj_axes(x, cfg, axes, p, inverse)
        return self._k_qk(x, None, cfg, axes, p, inverse)[0]

    def _k_qk(self, q, k, cfg, axes, p, inverse):
        import torch

        if self.family == "gptj":
            return super()._k_qk(q, k, cfg, axes, p, inverse)
        self._check(cfg)
        to, back = _TO_BSHD_OR_BHSD[axes]
        qv = to(q)
        kv = qv if k is None else to(k)
        grid = p.grid if p.grid.ndim == 2 else p.grid[None]
        rope_type = cfg.scaling.to_hf()["rope_type"] if cfg.scaling is not None else "default"
        longer = p.seq_len is not None and p.seq_len != int(grid.max()) + 1
        if rope_type in ("dynamic", "longrope") and longer:
            cos, sin = self._tables(qv, grid.reshape(-1), cfg, p.seq_len)  # a longer prefill, emulated
            cos, sin = cos.reshape(*grid.shape, -1), sin.reshape(*grid.shape, -1)
        else:
            cos, sin = self._module(cfg)(qv, torch.from_numpy(np.array(grid)))  # (B, S, rotary_dim)
        if inverse:
            sin = -sin
        unsqueeze = 1 if axes == "bhsd" else 2
        qo, ko = self._mod.apply_rotary_pos_emb(qv, kv, cos, sin, unsqueeze_dim=unsqueeze)
        return back(qo), back(ko)

    def _gptj_axes(self, x, cfg, axes, p, inverse):
        import torch

        self._check(cfg)
        to, back = _TO_BSHD[axes]
        xv = to(x)  # GPTJAttention's (B, S, H, D)
        grid = p.grid if p.grid.ndim == 2 else p.grid[None]
        cos, sin = self._tables(xv, grid.reshape(-1), cfg)
        cos, sin = cos.reshape(*grid.shape, -1), sin.reshape(*grid.shape, -1)
        if inverse:
            sin = -sin
        r = cfg.rotary_dim
        y = torch.cat([self._mod.apply_rotary_pos_emb(xv[..., :r], sin, cos), xv[..., r:]], dim=-1)
        return back(y)


def make_backend(precision: str | None = None, family: str = "llama") -> HFPeer:
    return HFPeer(family, precision)
