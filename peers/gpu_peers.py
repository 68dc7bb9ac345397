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

Kernel shapes (issue 16: ``apply_axes``, ``apply_qk``, ``apply_qkv``; ``round_trip`` through
``apply_axes``), each through the call the library documents for that shape, with no reshaping into
one ``(..., D)`` form behind its back:

* flash-attn: ``apply_rotary_emb`` on ``bshd`` (``bhsd``/``sbhd`` as permuted views: the kernel reads
  strides) with ``seqlen_offsets`` (an int or ``(B,)``), and on ``thd`` varlen with ``cu_seqlens``,
  ``max_seqlen`` and the start offsets as ``seqlen_offsets``; ids only when every row is ``arange + offset``
  (or every row is the same, gathered into the table), ``thd`` ids split into runs of consecutive
  positions (one varlen sequence per run); q and k as two calls; packed qkv through
  ``apply_rotary_emb_qkv_`` (``(B, S, 3, H, D)`` when ``Hq == Hk``, else ``num_heads_q``), ``thd`` qkv
  through the varlen call on the q+k head slice; in place when asked. Inverse: ``conjugate=True`` where the
  signature has it, else ``-sin``. Tables from the oracle.
* Liger: ``liger_rotary_pos_emb(q, k, cos, sin)`` on ``(B, H, S, D)`` views of any axes (``thd`` as one
  batch row), HF-style ``(1 | B, S, D)`` cos/sin at the ids (any ids), ``-sin`` for the inverse; tables
  from the oracle; out of place (the kernel writes into contiguous inputs, so they are copies).
* vLLM: ``vllm._custom_ops.rotary_embedding(positions, query, key, head_size, cos_sin_cache, is_neox)`` on
  token rows ``(T, H * D)`` (``thd``, and ``bshd``/``sbhd`` whose token axes merge), one position per
  token (built from an offset or ``cu_seqlens`` the way vLLM's model runner does), in place; packed qkv as
  q/k column slices of the ``(T, (Hq + 2 Hk) * D)`` projection, like vLLM's models. The
  ``cos_sin_cache`` is an input: built from the oracle (sin negated for the inverse).
* TransformerEngine: ``apply_rotary_pos_emb(t, freqs, tensor_format=sbhd|bshd|thd, start_positions=...,
  cu_seqlens=..., fused=True)`` with TE's own angle table (negated for the inverse); ``bhsd`` as a
  permuted ``bshd`` view; ids as for flash-attn.
* FlashInfer: ``apply_rope`` / ``apply_rope_inplace`` with ``indptr`` and ``offsets`` (``thd`` varlen, and
  ``bshd`` offsets as one segment per row) and ``apply_rope_pos_ids`` / ``..._inplace`` with per-token ids,
  on ``(T, H, D)`` token views; packed qkv as head slices. No inverse (cos/sin live in the kernel).
"""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from typing import Any

import numpy as np
from rope_ref.conformance.protocol import PrecisionPolicy

from ._glue import OPS, Peer, Unsupported, integer_positions, tokens
from ._kernel_glue import KernelShapes, _Positions

__all__ = ["GpuPeer", "make_backend", "available", "KERNEL_SUPPORT"]

_IMPORT = {
    "flash-attn": ("flash_attn.layers.rotary", "flash-attn"),
    "liger-kernel": ("liger_kernel.transformers.rope", "liger-kernel"),
    "vllm": ("vllm.model_executor.layers.rotary_embedding", "vllm"),
    "transformer-engine": ("transformer_engine.pytorch.attention.rope", "transformer-engine"),
    "flashinfer": ("flashinfer.rope", "flashinfer-python"),
}
_VLLM_OPS = "vllm._custom_ops"
_ORACLE_TABLES = {"flash-attn", "liger-kernel"}
_KERNEL_OPS = ("apply_axes", "apply_qk", "apply_qkv", "round_trip")

#: library -> the kernel-shape operations its documented API expresses
KERNEL_SUPPORT = {
    "flash-attn": ("apply_axes", "apply_qk", "apply_qkv"),
    "liger-kernel": ("apply_qk",),
    "vllm": ("apply_qk", "apply_qkv"),
    "transformer-engine": ("apply_axes",),
    "flashinfer": ("apply_qk", "apply_qkv"),
}
#: why a library has no call for an operation (reported unsupported, reason "operation")
_NO_CALL = {
    "liger-kernel": "Liger's liger_rotary_pos_emb(q, k, cos, sin) has no single-tensor or packed-qkv call",
    "vllm": "vLLM's rotary_embedding op rotates a query and a key together (no single-tensor call)",
    "transformer-engine": "TE's apply_rotary_pos_emb rotates one tensor (no q/k or packed-qkv call)",
    "flashinfer": "FlashInfer's apply_rope* rotate a query and a key together (no single-tensor call)",
}
#: library -> kernel-shape operations it runs in place when asked
_INPLACE = {
    "flash-attn": frozenset({"apply_axes", "apply_qk", "apply_qkv"}),
    "vllm": frozenset({"apply_qk", "apply_qkv"}),
    "flashinfer": frozenset({"apply_qk", "apply_qkv"}),
}
#: library -> kernel-shape operations whose cos/sin tables are the oracle's (inputs of the kernel)
_KERNEL_TABLES = {
    "flash-attn": frozenset({"apply_axes", "apply_qk", "apply_qkv", "round_trip"}),
    "liger-kernel": frozenset({"apply_qk"}),
    "vllm": frozenset({"apply_qk", "apply_qkv"}),
}
_SHORT = {
    "flash-attn": "fa",
    "liger-kernel": "liger",
    "vllm": "vllm",
    "transformer-engine": "te",
    "flashinfer": "fi",
}


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


@dataclass
class _RowPlan:
    """How a shared-table kernel (flash-attn, TE) sees the positions: token ``s`` of row (or sequence) ``b``
    reads table row ``s + offsets[b]``; ``table`` holds the position of each table row."""

    table: np.ndarray
    offsets: Any = 0  # an int, or an int64 array (B,) / (N,)
    cu: np.ndarray | None = None
    max_seqlen: int | None = None


def _row_plan(p: _Positions, peer: str) -> _RowPlan:
    grid = p.grid
    if grid.ndim == 2:  # (B, S): per-row offsets into one arange table, or one id row shared by all rows
        b, s = grid.shape
        if p.offset is not None or (
            b and np.array_equal(grid - grid[:, :1], np.broadcast_to(np.arange(s), grid.shape))
        ):
            starts = integer_positions(grid[:, 0] if s else np.zeros(b), peer)
            rows = int(starts.max(initial=0)) + s
            offsets = p.offset if isinstance(p.offset, int) else starts
            return _RowPlan(np.arange(max(rows, 1)), offsets)
        if np.all(grid == grid[:1]):
            return _RowPlan(np.asarray(grid[0]), 0)
        raise Unsupported(
            f"{peer} reads token s of row b at table row s + offset[b]: (B, S) ids must be arange + a "
            "per-row offset, or one row shared by every batch row (these are neither)"
        )
    if p.cu is not None:
        cu, starts = p.cu, p.starts
    else:  # per-token thd ids: one varlen sequence per run of consecutive positions
        g = integer_positions(grid, peer)
        breaks = np.flatnonzero(np.diff(g) != 1) + 1
        cu = np.concatenate([[0], breaks, [g.size]]).astype(np.int64) if g.size else np.zeros(1, np.int64)
        starts = g[cu[:-1]]
    lengths = np.diff(cu)
    st = np.broadcast_to(np.asarray(starts), lengths.shape)
    rows = int((st + lengths).max(initial=0))
    max_seqlen = p.max_seqlen if p.max_seqlen is not None else int(lengths.max(initial=0))
    return _RowPlan(np.arange(max(rows, max_seqlen, 1)), starts, cu, max_seqlen)


def _params(fn) -> set[str]:
    try:
        return set(inspect.signature(fn).parameters)
    except (TypeError, ValueError):  # a C extension without a signature
        return set()


def _bshd_view(t, axes: str):
    """``t`` as a (B, S, H, D) view for axes with b and s (both permutations are their own inverse)."""
    return {"bhsd": lambda: t.permute(0, 2, 1, 3), "sbhd": lambda: t.permute(1, 0, 2, 3)}.get(
        axes, lambda: t
    )()


_TO_BHSD = {
    "bhsd": lambda t: t,
    "bshd": lambda t: t.transpose(1, 2),
    "sbhd": lambda t: t.permute(1, 2, 0, 3),
    "thd": lambda t: t.unsqueeze(0).transpose(1, 2),
}
_FROM_BHSD = {
    "bhsd": lambda t: t,
    "bshd": lambda t: t.transpose(1, 2),
    "sbhd": lambda t: t.permute(2, 0, 1, 3),
    "thd": lambda t: t.transpose(1, 2)[0],
}


def _token_ids(p: _Positions, axes: str) -> np.ndarray:
    """One id per token, in the order of the merged token axes (b-major for bshd, s-major for sbhd)."""
    return (p.grid.T if axes == "sbhd" else p.grid).reshape(-1)


def _tokens3(t, axes: str, inplace: bool, peer: str):
    """``t`` as ``(T, H, D)`` token rows: a view when its token axes merge, else (out of place) a copy."""
    if axes == "bhsd":
        raise Unsupported(
            f"{peer} takes token rows (num_tokens, heads, head_dim); a bhsd tensor has no token axis"
        )
    if axes == "thd":
        return t
    n_tok, heads, d = t.shape[0] * t.shape[1], t.shape[2], t.shape[3]
    try:
        return t.view(n_tok, heads, d)
    except RuntimeError:
        if inplace:
            raise Unsupported(
                f"{peer} in place needs token rows of one stride; this view's token axes do not merge"
            ) from None
        return t.reshape(n_tok, heads, d)


def _rows2(t3, inplace: bool, peer: str):
    """``(T, H, D)`` as vLLM's flattened ``(T, H * D)`` rows (a view in place, a copy otherwise)."""
    if not inplace:
        return t3.reshape(t3.shape[0], -1).clone()
    try:
        return t3.view(t3.shape[0], -1)
    except RuntimeError:
        raise Unsupported(f"{peer} in place needs each token's heads contiguous (H * D per row)") from None


class GpuPeer(KernelShapes, Peer):
    precisions = ("fp32", "fp16", "bf16")

    def __init__(
        self, library: str = "flash-attn", precision: str | None = None, device: str = "cuda"
    ) -> None:
        self.library = library
        self.peer = library
        self.device = device
        self.distribution = _IMPORT[library][1]
        base = frozenset({"apply", "apply_vjp"}) if library in _ORACLE_TABLES else frozenset()
        self.oracle_tables = base | _KERNEL_TABLES.get(library, frozenset())
        self.inplace_ops = _INPLACE.get(library, frozenset())
        self.cannot = {
            "inv_freq": f"{library} exposes no inverse-frequency function",
            "attention_factor": f"{library} exposes no attention factor",
            "cos_sin": f"{library} exposes no cos/sin accessor on this path",
        }
        if library in ("vllm", "flashinfer"):
            self.cannot["apply_vjp"] = f"{library}'s rope kernel is inference-only (no backward)"
        self.notes = ("tables from the oracle (cos/sin are inputs)",) if library in _ORACLE_TABLES else ()
        if library in _KERNEL_TABLES:
            self.notes += (
                f"kernel shapes: tables from the oracle for {', '.join(sorted(_KERNEL_TABLES[library]))}",
            )
        self._mod = importlib.import_module(_IMPORT[library][0])
        self._cache: dict[Any, Any] = {}
        super().__init__(precision)

    def policies(self, io: str) -> dict[str, PrecisionPolicy]:
        def policy(op: str) -> PrecisionPolicy:
            return PrecisionPolicy(io, "float64" if op in self.oracle_tables else "float32", "float32")

        return {op: policy(op) for op in (*OPS, *_KERNEL_OPS)}

    def from_numpy(self, array: np.ndarray, dtype: str | None = None) -> Any:
        if dtype is None:
            return np.array(array, copy=True)
        return super().from_numpy(array, dtype).to(self.device)

    def _scaling(self, cfg) -> dict:
        return cfg.scaling.to_hf() if cfg.scaling is not None else {"rope_type": "default"}

    def _oracle(self, pos: np.ndarray, cfg, seq_len, dtype):
        import torch

        import rope_ref

        cos, sin = rope_ref.cos_sin(np.asarray(pos, dtype=np.float64), cfg, seq_len=seq_len)
        return (torch.from_numpy(cos).to(self.device, dtype), torch.from_numpy(sin).to(self.device, dtype))

    def _tensor(self, array, dtype: str = "int32"):
        import torch

        return torch.as_tensor(np.ascontiguousarray(array).astype(dtype), device=self.device)

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
            ).to(self.device)
            q = x.reshape(n, d).clone()
            y = rope.forward_cuda(torch.from_numpy(p).to(self.device), q, q.clone())[0]
        elif lib == "transformer-engine":
            p = integer_positions(pos, "transformer-engine")
            if self._scaling(cfg)["rope_type"] != "default":
                raise Unsupported(
                    "TE's RotaryPositionEmbedding has only linear interpolation; not mapped here"
                )
            emb = self._mod.RotaryPositionEmbedding(rd, rotary_base=float(cfg.base), interleaved=inter)
            freqs = emb(int(p.max()) + 1)[torch.from_numpy(p).to(self.device)]  # (n, 1, 1, rd) angles
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
                torch.from_numpy(p.astype(np.int32)).to(self.device),
                rotary_dim=rd,
                interleave=inter,
                rope_scale=float(s.get("factor", 1.0)),
                rope_theta=float(cfg.base),
            )[0]
        return y.reshape(*lead, d)

    def _apply_vjp(self, x, positions, cfg, grad_out, seq_len):
        return self.torch_vjp(x, positions, cfg, grad_out, seq_len)

    # -- the shapes real kernels see (issue 16) --------------------------------------------------------------
    def _no_call(self, op: str) -> str | None:
        return None if op in KERNEL_SUPPORT[self.library] else _NO_CALL[self.library]

    def _not_in_place(self, op: str) -> str:
        return f"{self.library} does not run {op} in place"

    def _rotate_axes(self, x, cfg, axes, p, inverse, inplace):
        return getattr(self, f"_{_SHORT[self.library]}_axes")(x, cfg, axes, p, inverse, inplace)

    def _rotate_qk(self, q, k, cfg, axes, p, inverse, inplace):
        return getattr(self, f"_{_SHORT[self.library]}_qk")(q, k, cfg, axes, p, inverse, inplace)

    def _rotate_qkv(self, qkv, cfg, axes, hq, hk, p, inverse, inplace):
        return getattr(self, f"_{_SHORT[self.library]}_qkv")(qkv, cfg, axes, hq, hk, p, inverse, inplace)

    # flash-attn ---------------------------------------------------------------------------------------------
    def _fa_prepare(self, p: _Positions, cfg, dtype, inverse: bool, fn):
        plan = _row_plan(p, "flash-attn")
        cos, sin = self._oracle(plan.table, cfg, p.seq_len, dtype)
        kw: dict[str, Any] = {"interleaved": cfg.layout == "interleaved"}
        if inverse:
            if "conjugate" in _params(fn):
                kw["conjugate"] = True
            else:
                sin = -sin
        scalar = np.ndim(plan.offsets) == 0
        kw["seqlen_offsets"] = int(plan.offsets) if scalar else self._tensor(plan.offsets)
        return plan, cos, sin, kw

    def _fa_rotate(self, v, p: _Positions, cfg, inverse: bool, inplace: bool):
        fn = self._mod.apply_rotary_emb
        plan, cos, sin, kw = self._fa_prepare(p, cfg, v.dtype, inverse, fn)
        if plan.cu is not None:
            kw.update(cu_seqlens=self._tensor(plan.cu), max_seqlen=plan.max_seqlen)
        return fn(v, cos, sin, inplace=inplace, **kw)

    def _fa_axes(self, x, cfg, axes, p, inverse, inplace):
        out = self._fa_rotate(_bshd_view(x, axes), p, cfg, inverse, inplace)
        return x if inplace else _bshd_view(out, axes)

    def _fa_qk(self, q, k, cfg, axes, p, inverse, inplace):
        return tuple(self._fa_axes(t, cfg, axes, p, inverse, inplace) for t in (q, k))

    def _fa_qkv(self, qkv, cfg, axes, hq, hk, p, inverse, inplace):
        work = qkv if inplace else qkv.clone()
        v = _bshd_view(work, axes)
        if axes == "thd":  # apply_rotary_emb_qkv_ has no varlen form: the varlen call on the q+k head slice
            self._fa_rotate(v[:, : hq + hk], p, cfg, inverse, True)
            return work
        fn = self._mod.apply_rotary_emb_qkv_
        _, cos, sin, kw = self._fa_prepare(p, cfg, v.dtype, inverse, fn)
        packed = None
        if hq == hk:
            try:
                packed = v.view(v.shape[0], v.shape[1], 3, hq, v.shape[3])
            except RuntimeError:
                packed = None
        if packed is None:
            if "num_heads_q" not in _params(fn):
                raise Unsupported("this flash-attn's apply_rotary_emb_qkv_ has no num_heads_q (GQA packing)")
            packed, kw["num_heads_q"] = v, hq
        fn(packed, cos, sin, **kw)
        return work

    # Liger --------------------------------------------------------------------------------------------------
    def _liger_qk(self, q, k, cfg, axes, p, inverse, inplace):
        import torch

        if cfg.layout == "interleaved" or cfg.rotary_dim != cfg.head_dim:
            raise Unsupported("Liger's rope kernel is half layout over the whole head only")
        grid = p.grid if p.grid.ndim == 2 else p.grid[None]
        if np.all(grid == grid[:1]):
            grid = grid[:1]
        cos, sin = self._oracle(grid, cfg, p.seq_len, q.dtype)  # (1 | B, S, D / 2)
        cos, sin = torch.cat([cos, cos], -1), torch.cat([sin, sin], -1)
        if inverse:
            sin = -sin
        to, back = _TO_BHSD[axes], _FROM_BHSD[axes]
        qo, ko = self._mod.liger_rotary_pos_emb(to(q.clone()), to(k.clone()), cos, sin)
        return back(qo), back(ko)

    # vLLM ---------------------------------------------------------------------------------------------------
    def _vllm_call(self, qf, kf, cfg, p, axes, inverse, dtype):
        import torch

        ids = integer_positions(_token_ids(p, axes), "vllm")
        cos, sin = self._oracle(np.arange(int(ids.max(initial=0)) + 1), cfg, p.seq_len, dtype)
        cache = torch.cat([cos, -sin if inverse else sin], -1)  # (max_position, rotary_dim)
        ops = importlib.import_module(_VLLM_OPS)
        ops.rotary_embedding(self._tensor(ids, "int64"), qf, kf, cfg.head_dim, cache, cfg.layout == "half")

    def _vllm_qk(self, q, k, cfg, axes, p, inverse, inplace):
        qf, kf = (_rows2(_tokens3(t, axes, inplace, "vllm"), inplace, "vllm") for t in (q, k))
        self._vllm_call(qf, kf, cfg, p, axes, inverse, q.dtype)
        return (q, k) if inplace else (qf.view(q.shape), kf.view(k.shape))

    def _vllm_qkv(self, qkv, cfg, axes, hq, hk, p, inverse, inplace):
        flat = _rows2(_tokens3(qkv, axes, inplace, "vllm"), inplace, "vllm")  # (T, (Hq + 2 Hk) * D)
        d = cfg.head_dim
        self._vllm_call(flat[:, : hq * d], flat[:, hq * d : (hq + hk) * d], cfg, p, axes, inverse, qkv.dtype)
        return qkv if inplace else flat.view(qkv.shape)

    # TransformerEngine --------------------------------------------------------------------------------------
    def _te_axes(self, x, cfg, axes, p, inverse, inplace):
        if self._scaling(cfg)["rope_type"] != "default":
            raise Unsupported("TE's RotaryPositionEmbedding has only linear interpolation; not mapped here")
        inter = cfg.layout == "interleaved"
        fn = self._mod.apply_rotary_pos_emb
        params = _params(fn)
        if inter and params and "interleaved" not in params:
            raise Unsupported("this TE's apply_rotary_pos_emb has no interleaved layout")
        plan = _row_plan(p, "transformer-engine")
        table = integer_positions(plan.table, "transformer-engine")
        key = ("te", cfg.rotary_dim, float(cfg.base), inter)
        if key not in self._cache:
            self._cache[key] = self._mod.RotaryPositionEmbedding(
                cfg.rotary_dim, rotary_base=float(cfg.base), interleaved=inter
            )
        emb = self._cache[key](int(table.max(initial=0)) + 1).to(self.device)  # (rows, 1, 1, rd) angles
        freqs = emb[self._tensor(table, "int64")]
        if inverse:
            freqs = -freqs
        kw: dict[str, Any] = {"interleaved": inter} if "interleaved" in params or not params else {}
        if plan.cu is not None:
            kw["cu_seqlens"] = self._tensor(plan.cu)
        offsets = np.asarray(plan.offsets)
        if np.any(offsets != 0):
            if params and "start_positions" not in params:
                raise Unsupported("this TE's apply_rotary_pos_emb has no start_positions (offsets)")
            n = plan.cu.size - 1 if plan.cu is not None else x.shape[axes.index("b")]
            kw["start_positions"] = self._tensor(np.broadcast_to(offsets, (n,)))
        if axes == "bhsd":  # a permuted bshd view (TE reads strides); sbhd, bshd and thd go as they are
            out = fn(x.permute(0, 2, 1, 3), freqs, tensor_format="bshd", fused=True, **kw)
            return out.permute(0, 2, 1, 3)
        return fn(x, freqs, tensor_format=axes, fused=True, **kw)

    # FlashInfer ---------------------------------------------------------------------------------------------
    def _fi_args(self, cfg, p: _Positions, axes: str, inverse: bool):
        """``(suffix, positional args, keywords)`` of ``apply_rope`` (segments) or ``apply_rope_pos_ids``."""
        s = self._scaling(cfg)
        if s["rope_type"] not in ("default", "linear"):
            raise Unsupported(f"flashinfer.apply_rope* has no {s['rope_type']!r} scaling")
        if inverse:
            raise Unsupported("FlashInfer computes cos/sin inside the kernel and has no inverse rotation")
        kw = dict(
            rotary_dim=cfg.rotary_dim,
            interleave=cfg.layout == "interleaved",
            rope_scale=float(s.get("factor", 1.0)),
            rope_theta=float(cfg.base),
        )
        if p.cu is not None:  # thd varlen: indptr and per-sequence offsets
            starts = np.broadcast_to(np.asarray(p.starts), (p.cu.size - 1,))
            return "", (self._tensor(p.cu), self._tensor(starts)), kw
        if p.offset is not None and axes == "bshd":  # one segment per batch row, its cache offset
            b, s_len = p.grid.shape
            indptr = np.arange(b + 1) * s_len
            return "", (self._tensor(indptr), self._tensor(np.broadcast_to(np.asarray(p.offset), (b,)))), kw
        ids = integer_positions(_token_ids(p, axes), "flashinfer")
        return "_pos_ids", (self._tensor(ids),), kw

    def _fi_qk(self, q, k, cfg, axes, p, inverse, inplace):
        suffix, args, kw = self._fi_args(cfg, p, axes, inverse)
        q3, k3 = (_tokens3(t, axes, inplace, "flashinfer") for t in (q, k))
        if inplace:
            getattr(self._mod, f"apply_rope{suffix}_inplace")(q3, k3, *args, **kw)
            return q, k
        qo, ko = getattr(self._mod, f"apply_rope{suffix}")(q3, k3, *args, **kw)
        return qo.reshape(q.shape), ko.reshape(k.shape)

    def _fi_qkv(self, qkv, cfg, axes, hq, hk, p, inverse, inplace):
        suffix, args, kw = self._fi_args(cfg, p, axes, inverse)
        work = _tokens3(qkv, axes, inplace, "flashinfer")
        if not inplace:
            work = work.clone()
        getattr(self._mod, f"apply_rope{suffix}_inplace")(work[:, :hq], work[:, hq : hq + hk], *args, **kw)
        return qkv if inplace else work.reshape(qkv.shape)


def make_backend(precision: str | None = None, library: str = "flash-attn") -> GpuPeer:
    return GpuPeer(library, precision)
