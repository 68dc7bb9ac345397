"""torchtune as a peer: its three RoPE modules.

What is called: ``torchtune/modules/position_embeddings.py`` ``RotaryPositionalEmbeddings`` (interleaved
pairs), ``torchtune/models/phi3/_position_embeddings.py`` ``Phi3RotaryPositionalEmbeddings`` (half
layout) and ``torchtune/models/llama3_1/_position_embeddings.py`` ``Llama3ScaledRoPE`` (Llama 3.1
scaling, interleaved), each as ``module(x, input_pos=positions)`` with ``x`` shaped ``[b, s, n_h, h_d]``.
cos/sin are the modules' own ``cache`` rows; ``inv_freq`` is their ``theta`` buffer.

``import torchtune`` insists on torchao and pulls the data-set stack; these three files import only
torch, so when the package import fails they are loaded from the installed distribution by path
(:func:`_load`), unchanged.

Precision: ``theta`` and the cache in float32 (``arange(max_seq_len, dtype=theta.dtype)``), the rotation
in float32 (``x.float()``), one rounding to the activation dtype (``type_as``). The cache holds
``max_seq_len`` rows; the adapter sizes it to the case (up to 2^20 rows).

Kernel shapes (issue 16): ``apply_axes`` is ``module(x, input_pos=ids)`` with ``x`` a ``(B, S, H, D)``
view (``bhsd`` and ``sbhd`` permuted, ``thd`` as ``(1, T, H, D)``) and HF-style ``(B, S)`` ids (an offset
becomes ``offset + arange(S)``, ``cu_seqlens`` per-token ids); ``apply_qk`` calls it on q and on k, as
torchtune's ``MultiHeadAttention`` does. No inverse rotation (the cache holds ``+sin``), no packed qkv.
"""

from __future__ import annotations

import importlib
import importlib.util
from pathlib import Path
from typing import Any

import numpy as np

from ._glue import Peer, Unsupported, integer_positions, layout_permutation, tokens
from ._kernel_glue import _TO_BSHD, KernelShapes

__all__ = ["TorchtunePeer", "make_backend", "available"]

_FILES = {
    "RotaryPositionalEmbeddings": "modules/position_embeddings.py",
    "Phi3RotaryPositionalEmbeddings": "models/phi3/_position_embeddings.py",
    "Llama3ScaledRoPE": "models/llama3_1/_position_embeddings.py",
}
_MAX_ROWS = 1 << 20


def _load(cls: str):
    """The torchtune class ``cls``: by package import, else from its file in the installed distribution."""
    mod_name = "torchtune." + _FILES[cls][:-3].replace("/", ".")
    try:
        return getattr(importlib.import_module(mod_name), cls)
    except ImportError:
        pass
    spec = importlib.util.find_spec("torchtune")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("torchtune is not installed")
    path = Path(list(spec.submodule_search_locations)[0]) / _FILES[cls]
    file_spec = importlib.util.spec_from_file_location(f"_rope_ref_torchtune_{cls}", path)
    module = importlib.util.module_from_spec(file_spec)
    file_spec.loader.exec_module(module)
    return getattr(module, cls)


def available(**_: Any) -> tuple[bool, str]:
    try:
        _load("RotaryPositionalEmbeddings")
    except (ImportError, OSError) as exc:
        return False, f"torchtune is not installed ({exc})"
    return True, ""


class TorchtunePeer(KernelShapes, Peer):
    peer = "torchtune"
    distribution = "torchtune"
    precisions = ("fp32", "fp16", "bf16")
    compute_dtype = "float32"
    cannot = {"attention_factor": "torchtune's RoPE modules have no attention factor"}
    notes = (
        "RotaryPositionalEmbeddings (interleaved), Phi3RotaryPositionalEmbeddings (half), "
        "Llama3ScaledRoPE (llama3, half layout through HF's permute channel order)",
        "no partial rotary, no linear/NTK/dynamic/YaRN/LongRoPE; integer positions only",
    )

    kernel_cannot = {"apply_qkv": "torchtune's RoPE modules rotate one tensor (no packed-qkv call)"}

    def _module(self, cfg, rows: int):
        if cfg.rotary_dim != cfg.head_dim:
            raise Unsupported("torchtune's RoPE modules rotate the whole head (no partial rotary)")
        s = cfg.scaling.to_hf() if cfg.scaling is not None else {"rope_type": "default"}
        if s["rope_type"] not in ("default", "llama3"):
            raise Unsupported(f"torchtune has no {s['rope_type']!r} RoPE scaling")
        if rows > _MAX_ROWS:
            raise Unsupported(f"torchtune precomputes max_seq_len cache rows; {rows} > 2^20 rows skipped")
        rows = max(rows, 4096)
        if s["rope_type"] == "llama3":
            cls, kw = (
                "Llama3ScaledRoPE",
                {
                    "scale_factor": s["factor"],
                    "low_freq_factor": s["low_freq_factor"],
                    "high_freq_factor": s["high_freq_factor"],
                    "old_context_len": s["original_max_position_embeddings"],
                },
            )
        else:
            cls, kw = (
                ("Phi3RotaryPositionalEmbeddings" if cfg.layout == "half" else "RotaryPositionalEmbeddings"),
                {},
            )
        key = (cls, cfg.head_dim, float(cfg.base), tuple(sorted(kw.items())), rows)
        if key not in self._modules:
            self._modules[key] = _load(cls)(cfg.head_dim, max_seq_len=rows, base=cfg.base, **kw)
        return self._modules[key], cls

    def _inv_freq(self, cfg, seq_len):
        return self._module(cfg, 1)[0].theta

    def _run(self, x, pos: np.ndarray, cfg):
        import torch

        p = integer_positions(pos, "torchtune (cache lookup by input_pos)")
        module, cls = self._module(cfg, int(p.max()) + 1 if p.size else 1)
        d = cfg.head_dim
        permute = cfg.layout == "half" and cls != "Phi3RotaryPositionalEmbeddings"
        flat = x.reshape(-1, d)
        if permute:
            perm = layout_permutation(d, d)
            flat = flat[:, perm]
        y = module(flat.reshape(1, -1, 1, d), input_pos=torch.from_numpy(p).reshape(1, -1)).reshape(-1, d)
        return y[:, np.argsort(perm)] if permute else y

    def _apply(self, x, positions, cfg, seq_len):
        lead, pos = tokens(tuple(x.shape), self.to_numpy(positions))
        return self._run(x, pos, cfg).reshape(*lead, cfg.head_dim)

    def _apply_vjp(self, x, positions, cfg, grad_out, seq_len):
        return self.torch_vjp(x, positions, cfg, grad_out, seq_len)

    def _cos_sin(self, positions, cfg, seq_len):
        import torch

        p = self.to_numpy(positions)
        ip = integer_positions(p.reshape(-1), "torchtune (cache lookup by input_pos)")
        module, cls = self._module(cfg, int(ip.max()) + 1 if ip.size else 1)
        rows = module.cache[torch.from_numpy(ip)]
        k = cfg.rotary_dim // 2
        if cls == "Phi3RotaryPositionalEmbeddings":  # [cos(f), cos(f), sin(f), sin(f)]
            cos, sin = rows[:, :k], rows[:, 2 * k : 3 * k]
        else:  # [..., k, 2] = stack(cos, sin)
            cos, sin = rows[..., 0], rows[..., 1]
        return cos.reshape(p.shape + (k,)), sin.reshape(p.shape + (k,))

    # -- the shapes real kernels see (issue 16) ------------------------------------------------------
    def _k_axes(self, x, cfg, axes, p, inverse):
        import torch

        if inverse:
            raise Unsupported("torchtune's RoPE modules have no inverse rotation (the cache holds +sin)")
        grid = p.grid if p.grid.ndim == 2 else p.grid[None]
        ids = integer_positions(grid, "torchtune (cache lookup by input_pos)")
        module, cls = self._module(cfg, int(ids.max()) + 1 if ids.size else 1)
        to, back = _TO_BSHD[axes]
        xv = to(x)  # (B, S, H, D)
        permute = cfg.layout == "half" and cls != "Phi3RotaryPositionalEmbeddings"
        if permute:
            perm = layout_permutation(cfg.head_dim, cfg.head_dim)
            xv = xv[..., perm]
        y = module(xv, input_pos=torch.from_numpy(np.ascontiguousarray(ids)))
        if permute:
            y = y[..., np.argsort(perm)]
        return back(y)


def make_backend(precision: str | None = None) -> TorchtunePeer:
    return TorchtunePeer(precision)
