"""Other people's RoPE as conformance backends: the subjects the suite exists to check.

Each peer wraps one real library and calls that library's own functions; nothing here re-implements
RoPE math. Importing this package imports no library: :func:`get_peer` loads an adapter module on
first use, and :func:`peer_status` says, without raising, whether a peer can run here.

Names (``rope-ref conformance run --backend hf:llama``, ``rope-ref ecosystem``) map to
``(module, options)``; each module defines ``make_backend(precision=None, **options)`` and
``available(**options) -> (ok, reason)``, the same contract as the built-in backends.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

__all__ = ["PEERS", "GPU_PEERS", "peer_names", "get_peer", "peer_status", "FINDINGS_DIR"]

#: Peers whose kernels need a CUDA GPU (run when one is present, otherwise listed as not run).
GPU_PEERS = ("flash-attn", "liger-kernel", "vllm", "transformer-engine", "flashinfer")


def _variants(module: str, option: str, names: tuple[str, ...], prefix: str = "") -> dict[str, tuple]:
    """``prefix + name -> (module, {option: name})`` for each name: one adapter module, several peers."""
    return {prefix + name: (module, {option: name}) for name in names}


#: name -> (adapter module relative to this package, options for make_backend/available)
PEERS: dict[str, tuple[str, dict[str, Any]]] = {
    **_variants("hf", "family", ("llama", "gpt-neox", "glm", "gptj"), "hf:"),
    **_variants("onnx_peers", "flavour", ("onnxruntime", "onnxruntime:contrib", "onnx-reference")),
    "rotary-embedding-torch": ("rotary_embedding_torch_peer", {}),
    "torchtune": ("torchtune_peer", {}),
    **_variants("keras_hub_peer", "keras_backend", ("torch", "jax"), "keras-hub:"),
    **_variants("mlx_peers", "flavour", ("mlx", "mlx-lm")),
    "llama.cpp": ("llama_cpp_peer", {}),
    **_variants("vllm_peer", "flavour", ("cpu", "native"), "vllm:"),
    **_variants("gpu_peers", "library", GPU_PEERS),
}

#: One findings file per peer (``<name with ':' as '_'>.toml``): the known failures, each explained.
FINDINGS_DIR = Path(__file__).with_name("findings")


def peer_names() -> list[str]:
    return list(PEERS)


def _module(name: str):
    if name not in PEERS:
        raise ValueError(f"unknown peer {name!r}; peers are {', '.join(PEERS)}")
    return importlib.import_module(f"{__name__}.{PEERS[name][0]}")


def peer_status(name: str) -> tuple[bool, str]:
    """``(True, "")`` if the peer can run here, else ``(False, why)``; never raises for a known name."""
    try:
        module = _module(name)
    except ImportError as exc:  # the adapter itself imports lazily; this is a broken install
        return False, f"adapter import failed: {exc}"
    return module.available(**PEERS[name][1])


def get_peer(name: str, precision: str | None = None):
    """A ready backend for peer ``name`` (``BackendUnavailable`` if the library or device is missing)."""
    from rope_ref.conformance.protocol import BackendUnavailable

    ok, reason = peer_status(name)
    if not ok:
        raise BackendUnavailable(reason)
    return _module(name).make_backend(precision=precision, **PEERS[name][1])
