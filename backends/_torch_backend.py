"""The conformance-protocol backend of the torch adapter (:class:`TorchBackend`)."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from rope_ref.conformance.protocol import (
    Backend,
    KernelCall,
    KernelShapeCalls,
    NextPositionIdsFromFullIds,
    PrecisionPolicy,
    canonical_dtype,
)

import rope_ref

from ._torch_chatglm import chatglm_apply_2d, chatglm_position_ids
from ._torch_checks import check_autograd, check_kernel
from ._torch_decay import decay_upper_bound
from ._torch_kernels import apply
from ._torch_kernels import apply_qk as _apply_qk
from ._torch_kernels import apply_qkv as _apply_qkv
from ._torch_module import RotaryEmbedding
from ._torch_tables import freq_table

__all__ = ["TorchBackend", "POLICIES"]

_TORCH_DTYPES = {
    "float64": torch.float64,
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}

#: The policies this adapter offers, by the suite's precision names (io, angle, compute dtypes).
POLICIES = {
    "float64": PrecisionPolicy("float64", "float64", "float64"),
    "float32": PrecisionPolicy("float32", "float32", "float32"),
    "float16": PrecisionPolicy("float16", "float32", "float32"),
    "bfloat16": PrecisionPolicy("bfloat16", "float32", "float32"),
}


class TorchBackend(KernelShapeCalls, NextPositionIdsFromFullIds, Backend):
    """This adapter behind the conformance protocol; every per-position computation is torch.

    ``apply_vjp`` runs real autograd through :class:`RotateFunction` (``autograd="function"``) or plain
    autograd (``"native"``). ``kernel`` picks the rotation kernel (``"torch"``, ``"triton"`` or ``"cpp"``);
    the Triton kernel's names are ``torch:triton`` (CUDA) and, under Triton's interpreter, ``torch+triton``;
    the C++ CPU kernel's is ``torch:cpp``.
    The issue-16 operations (``apply_axes``, ``apply_qk``, ``apply_qkv``, all three also in place; their
    keywords bundled by :class:`KernelShapeCalls`) call :mod:`._torch_kernels` directly on the views the
    runner hands, under the same policy as ``apply``.
    """

    name = "torch"
    version = torch.__version__

    def __init__(
        self,
        precision: str | None = None,
        device: str = "cpu",
        autograd: str = "function",
        kernel: str = "torch",
    ) -> None:
        io = canonical_dtype(precision if precision is not None else "float32", "precision")
        self.precision = POLICIES[io]
        self._io = _TORCH_DTYPES[io]
        self._angle = _TORCH_DTYPES[self.precision.angle_dtype]
        self._device = torch.device(device)
        if self._device.type == "cuda" and self._device.index is None:
            self._device = torch.device("cuda", torch.cuda.current_device())
        self.device = str(self._device)
        self.kernel = check_kernel(kernel)
        if kernel == "cpp":  # the C++ kernel runs on CPU only (its registry name)
            self.name = "torch:cpp"
        elif self._device.type == "cpu":
            self.name = "torch" if kernel == "torch" else f"torch+{kernel}"
        else:
            self.name = f"torch:{self._device.type}" if kernel == "torch" else f"torch:{kernel}"
        self.autograd = check_autograd(autograd)

    # -- conversion ----------------------------------------------------------------------------------
    def from_numpy(self, array: np.ndarray, dtype: str | None = None) -> torch.Tensor:
        t = torch.from_numpy(np.ascontiguousarray(array).copy())
        if dtype is not None:
            t = t.to(_TORCH_DTYPES[canonical_dtype(dtype)])
        return t.to(self._device)

    def to_numpy(self, array: Any) -> np.ndarray:
        if isinstance(array, torch.Tensor):
            t = array.detach().cpu()
            if t.dtype == torch.bfloat16:  # NumPy has no bfloat16; float32 holds it exactly
                t = t.to(torch.float32)
            return t.numpy()
        return np.asarray(array)

    # -- operations ----------------------------------------------------------------------------------
    def inv_freq(self, cfg, seq_len=None):
        return freq_table(cfg, seq_len, self._angle, self._device)[0]

    def attention_factor(self, cfg, seq_len=None):
        return rope_ref.attention_factor(cfg, seq_len)

    def cos_sin(self, positions, cfg, seq_len=None):
        module = RotaryEmbedding(cfg, angle_dtype=self._angle)
        return module.tables(positions, seq_len=seq_len, device=self._device)

    def apply(self, x, positions, cfg, seq_len=None):
        return apply(x, positions, cfg, seq_len=seq_len, **self._options())

    def _options(self) -> dict[str, Any]:
        """This backend's keyword arguments of :func:`apply` (angle dtype, autograd path, kernel)."""
        return {"angle_dtype": self._angle, "autograd": self.autograd, "kernel": self.kernel}

    def apply_vjp(self, x, positions, cfg, grad_out, seq_len=None):
        if seq_len is None:
            # The forward's length-dependent scaling sees max(positions) + 1: fix it for the backward too.
            pos = torch.as_tensor(positions)
            seq_len = rope_ref.frequencies.resolve_seq_len(pos.detach().cpu().double().numpy(), cfg, None)
        leaf = x.detach().clone().requires_grad_(True)
        with torch.enable_grad():
            y = apply(leaf, positions, cfg, seq_len=seq_len, **self._options())
            (grad,) = torch.autograd.grad(y, leaf, grad_out.to(y.dtype))
        return grad

    def chatglm_position_ids(
        self, input_ids, *, bos_token_id, mask_token_id, gmask_token_id, position_encoding_2d
    ):
        return chatglm_position_ids(
            input_ids,
            bos_token_id=bos_token_id,
            mask_token_id=mask_token_id,
            gmask_token_id=gmask_token_id,
            position_encoding_2d=position_encoding_2d,
        )

    def chatglm_apply_2d(self, x, position_ids, block_position_ids, *, base, precision):
        return chatglm_apply_2d(
            x,
            position_ids,
            block_position_ids,
            base=base,
            precision=precision,
            angle_dtype=self._angle,
            kernel=self.kernel,
        )

    def decay_upper_bound(self, distances, cfg):
        return decay_upper_bound(distances, cfg, dtype=self._angle)

    # -- multi-axis operations (issue 20) --------------------------------------------------------------
    #: The id builders and the MLA softmax scale are the oracle's (integer bookkeeping and one scalar,
    #: no torch code of their own): their passes are reported as borrowed.
    oracle_tables = frozenset({"mrope_position_ids", "mrope_decode_ids", "vision_ids", "mla_softmax_scale"})

    def multiaxis_apply(self, x, positions, spec):
        from ._torch_multiaxis import multiaxis_apply

        return multiaxis_apply(x, positions, spec, angle_dtype=self._angle, autograd=self.autograd)

    def mrope_position_ids(self, input_ids, image_grid_thw, video_grid_thw, attention_mask, seconds, **kw):
        from rope_ref import mrope

        grids = (image_grid_thw, video_grid_thw, attention_mask)
        host = [None if a is None else self.to_numpy(a) for a in grids]
        ids, deltas = mrope.position_ids(
            self.to_numpy(input_ids),
            *host,
            second_per_grid_ts=None if seconds is None else self.to_numpy(seconds),
            **kw,
        )
        return torch.from_numpy(ids).to(self._device), torch.from_numpy(deltas).to(self._device)

    def mrope_decode_ids(self, deltas, *, cache_position, n_new):
        from rope_ref import mrope

        ids = mrope.decode_position_ids(self.to_numpy(deltas), cache_position, n_new)
        return torch.from_numpy(ids).to(self._device)

    def vision_ids(self, grids, *, convention, spatial_merge_size):
        from rope_ref import vision_rope

        g = self.to_numpy(grids)
        if convention == "qwen2-vl":
            ids = vision_rope.qwen2_vl_ids(g, spatial_merge_size)
        else:
            ids = vision_rope.pixtral_ids(g)
        return torch.from_numpy(ids).to(self._device)

    def mla_softmax_scale(self, cfg):
        from rope_ref import mla

        return mla.softmax_scale(cfg)

    # -- the shapes real kernels see (issue 16) ---------------------------------------------------------
    #: ``inplace=True`` writes through the handed views (q and k may be slices of one packed buffer).
    inplace_ops = frozenset({"apply_axes", "apply_qk", "apply_qkv"})

    def _kernel_kw(self, call: KernelCall) -> dict[str, Any]:
        """Keywords of the issue-16 kernels: the call's positions form and flags, this backend's policy.

        ``max_seqlen`` is not among them: the kernels find each token's sequence from ``cu_seqlens``.
        The compute dtype is the kernels' default, float32 for float16/bfloat16 and the input dtype
        otherwise, which is what :data:`POLICIES` declares (as :meth:`apply`).
        """
        kw = call.keywords()
        del kw["max_seqlen"]
        return {**kw, **self._options()}

    def _axes_call(self, x, cfg, call):
        return apply(x, cfg=cfg, **self._kernel_kw(call))

    def _qk_call(self, q, k, cfg, call):
        return _apply_qk(q, k, cfg=cfg, **self._kernel_kw(call))

    def _qkv_call(self, qkv, cfg, num_heads_q, num_heads_kv, call):
        kw = self._kernel_kw(call)
        return _apply_qkv(qkv, cfg=cfg, num_heads_q=num_heads_q, num_heads_kv=num_heads_kv, **kw)
