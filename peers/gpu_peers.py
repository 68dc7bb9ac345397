"""CUDA-only RoPE kernels as peers, written against their documented APIs; run only where a GPU is.

* ``flash-attn``: ``flash_attn.layers.rotary.apply_rotary_emb(x, cos, sin, interleaved=..., inplace=False)``
  (``flash_attn/layers/rotary.py``; Triton kernel ``flash_attn/ops/triton/rotary.py``). cos/sin are inputs
  ``(seqlen, rotary_dim/2)``: tables from the oracle, one row per token.
* ``liger-kernel``: ``liger_kernel.transformers.rope.liger_rotary_pos_emb(q, k, cos, sin)``
  (``src/liger_kernel/ops/rope.py``): HF's duplicated ``(1, S, D)`` cos/sin, half layout, whole head;
  tables from the oracle.
* ``vllm``: ``vllm.model_executor.layers.rotary_embedding.get_rope(head_size, max_position=...,
  is_neox_style=..., rope_parameters=..., dtype=...)`` and ``forward_cuda(positions, query, key)``
  (its own cos/sin cache, stored in the model dtype).
* ``transformer-engine``: ``transformer_engine.pytorch.attention.rope.RotaryPositionEmbedding(dim,
  rotary_base=...)(max_seq_len)`` for the angles and ``apply_rotary_pos_emb(t, freqs, tensor_format="sbhd",
  interleaved=..., fused=True)``; the angle rows are gathered per token from TE's own table.
* ``flashinfer``: ``flashinfer.rope.apply_rope_pos_ids(q, k, pos_ids, rotary_dim=..., interleave=...,
  rope_scale=..., rope_theta=...)`` (cos/sin computed in the kernel).

Each computes angles and the rotation in float32 and stores in the activation dtype (their docs and
kernels); in-place kernels run on copies.
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np
from rope_ref.conformance.protocol import PrecisionPolicy

from ._glue import OPS, Peer, Unsupported, integer_positions, tokens

__all__ = ["GpuPeer", "make_backend", "available"]

_IMPORT = {
    "flash-attn": ("flash_attn.layers.rotary", "flash-attn"),
    "liger-kernel": ("liger_kernel.transformers.rope", "liger-kernel"),
    "vllm": ("vllm.model_executor.layers.rotary_embedding", "vllm"),
    "transformer-engine": ("transformer_engine.pytorch.attention.rope", "transformer-engine"),
    "flashinfer": ("flashinfer.rope", "flashinfer-python"),
}
_ORACLE_TABLES = {"flash-attn", "liger-kernel"}


def available(library: str = "flash-attn", **_: Any) -> tuple[bool, str]:
    try:
        import torch
    except ImportError:
        return False, "torch is not installed"
    if not torch.cuda.is_available():
        return False, "needs a CUDA GPU (none here)"
    try:
        importlib.import_module(_IMPORT[library][0])
    except Exception as exc:  # noqa: BLE001 - a broken CUDA extension raises more than ImportError
        return False, f"{_IMPORT[library][1]} is not importable ({type(exc).__name__}: {exc})"
    return True, ""


class GpuPeer(Peer):
    precisions = ("fp32", "fp16", "bf16")
    device = "cuda"

    def __init__(self, library: str = "flash-attn", precision: str | None = None) -> None:
        self.library = library
        self.peer = library
        self.distribution = _IMPORT[library][1]
        self.oracle_tables = frozenset({"apply", "apply_vjp"}) if library in _ORACLE_TABLES else frozenset()
        self.cannot = {
            "inv_freq": f"{library} exposes no inverse-frequency function",
            "attention_factor": f"{library} exposes no attention factor",
            "cos_sin": f"{library} exposes no cos/sin accessor on this path",
        }
        if library in ("vllm", "flashinfer"):
            self.cannot["apply_vjp"] = f"{library}'s rope kernel is inference-only (no backward)"
        self.notes = ("tables from the oracle (cos/sin are inputs)",) if library in _ORACLE_TABLES else ()
        self._mod = importlib.import_module(_IMPORT[library][0])
        self._cache: dict[Any, Any] = {}
        super().__init__(precision)

    def policies(self, io: str) -> dict[str, PrecisionPolicy]:
        angle = "float64" if self.library in _ORACLE_TABLES else "float32"
        return dict.fromkeys(OPS, PrecisionPolicy(io, angle, "float32"))

    def from_numpy(self, array: np.ndarray, dtype: str | None = None) -> Any:
        return super().from_numpy(array, dtype).cuda() if dtype is not None else np.array(array, copy=True)

    def _scaling(self, cfg) -> dict:
        return cfg.scaling.to_hf() if cfg.scaling is not None else {"rope_type": "default"}

    def _oracle(self, pos: np.ndarray, cfg, seq_len, dtype):
        import torch

        import rope_ref

        cos, sin = rope_ref.cos_sin(pos.astype(np.float64), cfg, seq_len=seq_len)
        return (torch.from_numpy(cos).to("cuda", dtype), torch.from_numpy(sin).to("cuda", dtype))

    def _apply(self, x, positions, cfg, seq_len):
        import torch

        lead, pos = tokens(tuple(x.shape), np.asarray(positions))
        d, rd, n = cfg.head_dim, cfg.rotary_dim, pos.size
        inter = cfg.layout == "interleaved"
        lib = self.library
        if lib == "flash-attn":
            cos, sin = self._oracle(pos, cfg, seq_len, x.dtype)
            y = self._mod.apply_rotary_emb(x.reshape(1, n, 1, d), cos, sin, interleaved=inter, inplace=False)
        elif lib == "liger-kernel":
            if inter or rd != d:
                raise Unsupported("Liger's rope kernel is half layout over the whole head only")
            cos, sin = self._oracle(pos, cfg, seq_len, x.dtype)
            cos, sin = torch.cat([cos, cos], -1)[None], torch.cat([sin, sin], -1)[None]
            q = x.reshape(1, 1, n, d).clone()
            y = self._mod.liger_rotary_pos_emb(q, q.clone(), cos, sin)[0]
        elif lib == "vllm":
            p = integer_positions(pos, "vllm")
            s = self._scaling(cfg)
            params = None if s["rope_type"] == "default" else dict(s)
            if params is not None:
                params["rope_theta"] = float(cfg.base)
            rope = self._mod.get_rope(
                d,
                max_position=max(int(p.max()) + 1, 4096),
                is_neox_style=not inter,
                rope_parameters=dict(
                    params or {"rope_type": "default", "rope_theta": float(cfg.base)},
                    partial_rotary_factor=rd / d,
                ),
                dtype=x.dtype,
            ).to("cuda")
            q = x.reshape(n, d).clone()
            y = rope.forward_cuda(torch.from_numpy(p).cuda(), q, q.clone())[0]
        elif lib == "transformer-engine":
            p = integer_positions(pos, "transformer-engine")
            if self._scaling(cfg)["rope_type"] != "default":
                raise Unsupported(
                    "TE's RotaryPositionEmbedding has only linear interpolation; not mapped here"
                )
            emb = self._mod.RotaryPositionEmbedding(rd, rotary_base=float(cfg.base), interleaved=inter)
            freqs = emb(int(p.max()) + 1)[torch.from_numpy(p).cuda()]  # (n, 1, 1, rd) angles
            y = self._mod.apply_rotary_pos_emb(
                x.reshape(n, 1, 1, d), freqs, tensor_format="sbhd", interleaved=inter, fused=True
            )
        else:  # flashinfer
            p = integer_positions(pos, "flashinfer")
            s = self._scaling(cfg)
            if s["rope_type"] not in ("default", "linear"):
                raise Unsupported(f"flashinfer.apply_rope_pos_ids has no {s['rope_type']!r} scaling")
            q = x.reshape(n, 1, d).contiguous()
            y = self._mod.apply_rope_pos_ids(
                q,
                q.clone(),
                torch.from_numpy(p.astype(np.int32)).cuda(),
                rotary_dim=rd,
                interleave=inter,
                rope_scale=float(s.get("factor", 1.0)),
                rope_theta=float(cfg.base),
            )[0]
        return y.reshape(*lead, d)

    def _apply_vjp(self, x, positions, cfg, grad_out, seq_len):
        return self.torch_vjp(x, positions, cfg, grad_out, seq_len)


def make_backend(precision: str | None = None, library: str = "flash-attn") -> GpuPeer:
    return GpuPeer(library, precision)
