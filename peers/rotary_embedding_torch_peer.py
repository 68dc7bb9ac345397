"""lucidrains' ``rotary-embedding-torch`` as a peer (``rotary_embedding_torch/rotary_embedding_torch.py``).

What is called: ``RotaryEmbedding(dim=rotary_dim, theta=base, interpolate_factor=...,
theta_rescale_factor=...)``
and, as a user does for a sequence, ``RotaryEmbedding.rotate_queries_or_keys(t, offset=...)``, which builds
its positions itself (``get_seq_pos``: ``arange(seq_len, dtype=t.dtype) + offset``). Integer positions go
through a prefill emulation (the tokens scattered into a zero sequence of length ``max(position) + 1``)
or, past 2^23 elements, one decode call per position with ``offset=position``; fractional positions go
through ``RotaryEmbedding.forward(positions)`` and ``apply_rotary_emb`` (the documented route for
arbitrary positions). One module per config lives across cases, so its ``cached_freqs`` behaves as in a
model. cos/sin are read with unit-vector probes (there is no accessor); ``inv_freq`` is the module's
``freqs`` parameter.

The library pairs channels ``(2i, 2i+1)`` only; half-layout cases are run through HF's
``convert_llama_weights_to_hf.permute`` channel order (``_glue.layout_permutation``). Scalings it has:
linear (``interpolate_factor``, positions divided by the factor) and static NTK (``theta_rescale_factor``).

Kernel shapes (issue 16): ``apply_axes`` is ``rotate_queries_or_keys(t, seq_dim=..., offset=...)`` on the
case's own layout: ``bhsd`` with ``seq_dim=-2`` (the default), ``bshd`` with ``seq_dim=-3``, ``sbhd`` as a
permuted ``bshd`` view; the offset is an int, so per-row offsets (and ``(B, S)`` ids counting up by one
from a per-row start) are one call per row; ``thd`` is one call per ``cu_seqlens`` sequence (or run of
consecutive ids) on its ``(L, H, D)`` slice with ``seq_dim=-3``. Half layout through the same channel
order. ``apply_qk``: the call on q and on k. No inverse rotation, no packed qkv.

Precision: positions in the activation dtype (``get_seq_pos``), angles and cos/sin in float32
(``freqs`` is float32), the rotation in float32 (``t * freqs.cos()`` promotes), one rounding to the
activation dtype at the end (``out.type(dtype)``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._glue import (
    Peer,
    Unsupported,
    config_key,
    layout_permutation,
    prefill_plan,
    probe_tables,
    tokens,
)
from ._kernel_glue import _TO_BSHD, KernelShapes, offset_rows, runs

__all__ = ["RotaryEmbeddingTorchPeer", "make_backend", "available"]


def available(**_: Any) -> tuple[bool, str]:
    try:
        import rotary_embedding_torch  # noqa: F401
    except ImportError as exc:
        return False, f"rotary-embedding-torch is not installed ({exc.name})"
    return True, ""


class RotaryEmbeddingTorchPeer(KernelShapes, Peer):
    peer = "rotary-embedding-torch"
    distribution = "rotary-embedding-torch"
    precisions = ("fp64", "fp32", "fp16", "bf16")
    compute_dtype = "float32"
    cannot = {"attention_factor": "rotary-embedding-torch has no attention factor (scale is xPos only)"}
    notes = (
        "interleaved natively; half layout through HF's permute channel order",
        "integer positions: prefill emulation via rotate_queries_or_keys; "
        "fractional: forward() + apply_rotary_emb",
        "cos/sin read with unit-vector probes",
    )

    kernel_cannot = {"apply_qkv": "rotate_queries_or_keys takes one tensor (no packed-qkv call)"}

    def _module(self, cfg):
        from rotary_embedding_torch import RotaryEmbedding

        key = config_key(cfg)
        if key not in self._modules:
            kw: dict[str, Any] = {}
            s = cfg.scaling.to_hf() if cfg.scaling is not None else {"rope_type": "default"}
            if s["rope_type"] == "linear":
                kw["interpolate_factor"] = float(s["factor"])
            elif s["rope_type"] == "ntk":
                kw["theta_rescale_factor"] = float(s["factor"])
            elif s["rope_type"] != "default":
                raise Unsupported(f"rotary-embedding-torch has no {s['rope_type']!r} scaling")
            self._modules[key] = RotaryEmbedding(dim=cfg.rotary_dim, theta=float(cfg.base), **kw)
        return self._modules[key]

    def _inv_freq(self, cfg, seq_len):
        if cfg.scaling is not None and cfg.scaling.to_hf()["rope_type"] == "linear":
            raise Unsupported(
                "linear scaling here divides positions (interpolate_factor); freqs are unscaled"
            )
        return self._module(cfg).freqs.detach()

    def _rotate(self, x, pos: np.ndarray, cfg):
        """Rotate flat tokens ``x`` (N, head_dim) at flat positions ``pos`` the way a user would."""
        import torch
        from rotary_embedding_torch import apply_rotary_emb

        rope = self._module(cfg)
        n, d = x.shape
        if pos.dtype.kind == "f" and np.any(pos != np.round(pos)):
            # get_seq_pos divides by interpolate_factor; forward() takes the positions as given
            freqs = rope.forward(torch.from_numpy(pos.astype(np.float32)) / rope.interpolate_factor)
            return apply_rotary_emb(freqs, x)
        if pos.size and pos.min() < 0:
            raise Unsupported("rotate_queries_or_keys takes non-negative offsets")
        p = pos.astype(np.int64)
        plan = prefill_plan(p, d)
        if plan is not None:
            length, batch, slots = plan
            z = torch.zeros(batch, length, d, dtype=x.dtype)
            idx, r = torch.from_numpy(slots), torch.from_numpy(p)
            z = z.index_put((idx, r), x)
            return rope.rotate_queries_or_keys(z)[idx, r]
        out = [
            rope.rotate_queries_or_keys(x[i].reshape(1, 1, d), offset=int(p[i])).reshape(d) for i in range(n)
        ]
        return torch.stack(out)

    def _apply(self, x, positions, cfg, seq_len):
        lead, pos = tokens(tuple(x.shape), self.to_numpy(positions))
        flat = x.reshape(-1, cfg.head_dim)
        if cfg.layout == "half":
            perm = layout_permutation(cfg.rotary_dim, cfg.head_dim)
            inv = np.argsort(perm)
            y = self._rotate(flat[:, perm], pos, cfg)[:, inv]
        else:
            y = self._rotate(flat, pos, cfg)
        return y.reshape(*lead, cfg.head_dim)

    def _apply_vjp(self, x, positions, cfg, grad_out, seq_len):
        return self.torch_vjp(x, positions, cfg, grad_out, seq_len)

    def _cos_sin(self, positions, cfg, seq_len):
        import torch

        def rotate_rows(rows: np.ndarray, ids: np.ndarray) -> np.ndarray:
            return self.to_numpy(self._apply(torch.from_numpy(rows), ids, cfg, seq_len))

        return probe_tables(self.to_numpy(positions), cfg, rotate_rows)

    # -- the shapes real kernels see (issue 16) ------------------------------------------------------
    def _k_axes(self, x, cfg, axes, p, inverse):
        import torch

        if inverse:
            raise Unsupported(
                "rotate_queries_or_keys has no inverse rotation (no sign or conjugate argument)"
            )
        rope = self._module(cfg)
        half = cfg.layout == "half"
        perm = layout_permutation(cfg.rotary_dim, cfg.head_dim) if half else None

        def rotate(t, seq_dim: int, offset: int):
            if half:
                return rope.rotate_queries_or_keys(t[..., perm], seq_dim=seq_dim, offset=offset)[
                    ..., np.argsort(perm)
                ]
            return rope.rotate_queries_or_keys(t, seq_dim=seq_dim, offset=offset)

        if axes == "thd":  # one call per sequence, offset = its first position
            parts = [rotate(x[a:b], -3, st) for a, b, st in runs(p, self.peer)]
            return torch.cat(parts, 0) if parts else x.clone()
        seq_dim = -2 if axes == "bhsd" else -3
        to, back = (lambda t: t, lambda t: t) if axes == "bhsd" else _TO_BSHD[axes]
        xv = to(x)
        starts = offset_rows(p.grid, self.peer)
        if starts.size == 0 or np.all(starts == starts[0]):
            return back(rotate(xv, seq_dim, int(starts[0]) if starts.size else 0))
        return back(torch.cat([rotate(xv[b : b + 1], seq_dim, int(st)) for b, st in enumerate(starts)], 0))


def make_backend(precision: str | None = None) -> RotaryEmbeddingTorchPeer:
    return RotaryEmbeddingTorchPeer(precision)
