"""The PyTorch adapter (``rope_ref.backends.torch``; conformance names ``torch`` and ``torch:cuda``).

Public API: :func:`apply` (functional; ``axes=``, ``offset=``, ``cu_seqlens=``, ``inverse=``, ``inplace=``),
:func:`apply_qk` (q and k with different head counts, one table build), :func:`apply_qkv` /
:func:`split_qkv` (packed ``(..., Hq + 2 Hk, D)``, V untouched),
:class:`RotaryEmbedding` (``nn.Module`` with a cos/sin cache),
:func:`rotate` / :func:`apply_rotary_pos_emb` (with precomputed half-width tables, HF drop-in),
:class:`RotateFunction` (autograd with the inverse rotation as backward), and the conformance backend
:class:`TorchBackend` with :func:`make_backend` / :func:`available`. See ``docs/backends/torch.md``.

Precision policy (declared to the suite): angles ``position * inv_freq`` and cos/sin in float32
(float64 under the ``fp64`` policy or ``angle_dtype=torch.float64``); rotation arithmetic in the input
dtype for float32/float64 and in float32 for float16/bfloat16 inputs, rounded once at the output.

Kernels (``kernel=``): ``"torch"`` (default; eager torch ops on any device), ``"triton"`` (one fused
Triton kernel for CUDA tensors; conformance name ``torch:triton``) and ``"cpp"`` (one fused C++ pass
on CPU tensors, built on first use; ``backends/_torch_cpp.py``).
"""

from __future__ import annotations

from typing import Any

try:
    import torch as _torch
except ImportError as _exc:  # pragma: no cover - torch is installed in CI
    _torch = None
    _IMPORT_ERROR: ImportError | None = _exc
else:
    _IMPORT_ERROR = None

__all__ = [
    "apply",
    "apply_qk",
    "apply_qkv",
    "split_qkv",
    "rotate",
    "apply_rotary_pos_emb",
    "RotaryEmbedding",
    "RotateFunction",
    "rotate_reference",
    "chatglm_position_ids",
    "chatglm_apply_2d",
    "decay_upper_bound",
    "multiaxis_apply",
    "TorchBackend",
    "POLICIES",
    "make_backend",
    "available",
]

if _torch is not None:
    from ._torch_backend import POLICIES, TorchBackend
    from ._torch_chatglm import chatglm_apply_2d, chatglm_position_ids
    from ._torch_core import RotateFunction, rotate_reference
    from ._torch_decay import decay_upper_bound
    from ._torch_kernels import apply, apply_qk, apply_qkv, split_qkv  # issue 16
    from ._torch_module import RotaryEmbedding, apply_rotary_pos_emb, rotate
    from ._torch_multiaxis import multiaxis_apply  # issue 20; docs/backends/torch.md


def available(device: str = "cpu", kernel: str = "torch", **_: Any) -> tuple[bool, str]:
    """``(True, "")`` if torch (and ``kernel``) can run on ``device`` here, else ``(False, reason)``.

    Never raises. ``kernel="triton"`` also needs the ``triton`` package, and CUDA (or Triton's
    interpreter, ``TRITON_INTERPRET=1``, for CPU tensors).
    """
    if _torch is None:
        return False, f"torch is not installed ({_IMPORT_ERROR}); pip install 'rope-ref[torch]'"
    try:
        dev = _torch.device(device)
    except (RuntimeError, TypeError) as exc:
        return False, f"invalid torch device {device!r}: {exc}"
    if dev.type == "cuda" and not _torch.cuda.is_available():
        return False, f"torch {_torch.__version__} sees no CUDA device (torch.cuda.is_available() is False)"
    from ._torch_checks import check_kernel
    from ._torch_triton import triton_status

    try:
        check_kernel(kernel)
    except ValueError as exc:
        return False, str(exc)
    if kernel == "cpp":
        from ._torch_cpp import missing_tools

        if dev.type != "cpu":
            return False, f"kernel='cpp' runs on CPU tensors, not {dev.type}"
        missing = missing_tools()
        return (False, f"kernel='cpp' needs {missing}") if missing else (True, "")
    return triton_status(dev) if kernel == "triton" else (True, "")


def make_backend(precision: str | None = None, device: str = "cpu", **options: Any) -> TorchBackend:
    """The conformance backend; ``precision`` is ``fp32`` (default), ``fp16``, ``bf16`` or ``fp64``.

    ``options``: ``autograd`` (``"function"`` or ``"native"``) and ``kernel`` (``"torch"`` or ``"triton"``).
    """
    ok, reason = available(device, **options)
    if not ok:
        from rope_ref.conformance.protocol import BackendUnavailable

        raise BackendUnavailable(reason)
    return TorchBackend(precision=precision, device=device, **options)
