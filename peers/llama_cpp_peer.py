"""llama.cpp's RoPE as a peer, through its tensor library ggml (``ggml-python``, pinned 0.0.45).

What is called: ggml's own CPU operators, built into a graph and computed (``ggml_graph_compute_with_ctx``,
one thread), exactly as llama.cpp's model graphs call them:

* ``ggml_rope_ext(ctx, a, b, c, n_dims, mode, n_ctx_orig, freq_base, freq_scale, ext_factor, attn_factor,
  beta_fast, beta_slow)``: ``mode`` NORMAL (pairs ``(2i, 2i+1)``) or NEOX (pairs ``(i, i + n_dims/2)``),
  ``n_dims`` the rotary dim (partial rotary passes the rest through), ``a`` the activations laid out as
  llama.cpp does (``ne = (head_dim, n_head, n_tokens)``: one row per token), ``b`` one int32 position per
  token, ``c`` the per-frequency divisors (llama.cpp's ``rope_freqs`` / ``rope_long`` / ``rope_short``);
* ``ggml_rope_ext_back`` (the rotation by ``-sin``): the VJP, and the inverse rotation of the kernel shapes;
* ``ggml_rope_multi`` (modes MROPE and IMROPE, four int32 positions per token) for M-RoPE.

What llama.cpp decides on the host, before ggml runs, is restated here from llama.cpp's own code (commit
``a458664f`` of ggml-org/llama.cpp, and the ``001d906a`` copy of ``src/llama-context.cpp``), because
``ggml-python`` ships only ggml:

* YaRN (``convert_hf_to_gguf.py`` ``TextModel.set_gguf_parameters``, ``llama_context::llama_context``):
  ``freq_scale = 1/factor``, ``ext_factor = 1``, ``n_ctx_orig`` = original_max_position_embeddings,
  ``beta_fast`` / ``beta_slow`` from the config (defaults 32 / 1); the converter writes no ``truncate``, and
  ggml's ``ggml_rope_yarn_corr_dims`` always floors and ceils. The attention factor handed to ggml is
  ``get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim)`` when the GGUF has a YaRN log
  multiplier (DeepSeek-2's converter writes ``mscale_all_dim``; llama.cpp reads no ``mscale``: it takes 1,
  or ``mscale_all_dim`` for DeepSeek-2 when that is not 1), else ``get_mscale(factor)``; times
  ``1 / (1 + 0.1 ln factor)``, which cancels the factor ggml multiplies in itself when ``ext_factor != 0``.
  An explicit ``attention_factor`` is written to the GGUF but overwritten there.
* Llama 3 (``LlamaModel.generate_extra_tensors``): ``rope_freqs[i]`` = 1, ``factor``, or
  ``1 / ((1 - smooth) / factor + smooth)``, with ``old_context_len`` read from the top level of the HF config
  (default 8192), which HF Llama 3.x configs do not have (theirs sits in ``rope_scaling``), and the
  frequencies taken over ``head_dim`` (the config's ``head_dim``), not the rotary dim.
* LongRoPE (``Phi3MiniModel``): ``rope_long`` / ``rope_short`` from ``long_factor`` / ``short_factor``;
  ``llama_model::get_rope_factors`` picks long when the context's ``n_ctx_seq`` (padded to 256 tokens)
  exceeds ``n_ctx_orig``; here the context is sized to the case's sequence length. Attention factor
  ``sqrt(1 + ln(scale) / ln(original_max))`` (``rope.scaling.attn_factor``) with the converter's
  ``scale = max_position_embeddings / original_max_position_embeddings``; a RopeConfig carries no
  ``max_position_embeddings``, so ``factor`` stands for it (HF derives Phi-3's factor the same way).
* Linear: ``freq_scale = 1/factor``.

Not expressible (unsupported, with the reason): dynamic NTK and static NTK (no such scaling in llama.cpp),
fractional positions and positions beyond int32 (``b`` is ``GGML_TYPE_I32``), bfloat16 and float64 (ggml's
rope takes F32 and F16 tensors only), ``inv_freq`` (computed inside the kernel, no accessor), M-RoPE with
interleaved pairs (ggml's M-RoPE rotates NEOX halves). Arguments ggml would abort on (``GGML_ASSERT``) are
refused before the call, so a bad case never takes the runner down.

Kernel shapes (issue 16): llama.cpp flattens a batch into tokens (a ubatch) with one position each, so
every axes layout is run as ``(n_tokens, n_head, head_dim)`` with per-token ids; q and k are two calls (the
graph's ``Qcur`` and ``Kcur``); the inverse rotation is ``ggml_rope_ext_back``; no packed qkv, no in place.

Precision: positions become float in the kernel, angles, cos/sin and the rotation are float32; F16
activations are read to float32 and rounded once on the way out.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from rope_ref.conformance.protocol import PrecisionPolicy

from ._glue import OPS, Peer, Unsupported, probe_cos_sin, tokens
from ._kernel_glue import KernelShapes

__all__ = ["LlamaCppPeer", "RopeArgs", "rope_args", "make_backend", "available", "PIN"]

PIN = "ggml-python==0.0.45"
INT32_MAX = 2**31 - 1

#: llama_hparams defaults (src/llama-hparams.h)
_BETA_FAST, _BETA_SLOW = 32.0, 1.0


def available(**_: Any) -> tuple[bool, str]:
    try:
        import ggml

        ggml.ggml_rope_ext  # noqa: B018
    except (ImportError, AttributeError, OSError) as exc:
        return False, (
            f"ggml-python is not installed ({exc}); pip install {PIN} "
            "(builds ggml with cmake and a C compiler, about 40 s)"
        )
    return True, ""


# -- llama.cpp's host-side rules: the arguments of ggml_rope_ext for a config ----------------------------


@dataclass(frozen=True)
class RopeArgs:
    """The scalar arguments of ``ggml_rope_ext`` plus its frequency-factor tensor ``c`` (or ``None``)."""

    n_dims: int
    mode: str  # "normal" | "neox"
    n_ctx_orig: int = 0
    freq_base: float = 10000.0
    freq_scale: float = 1.0
    ext_factor: float = 0.0
    attn_factor: float = 1.0
    beta_fast: float = _BETA_FAST
    beta_slow: float = _BETA_SLOW
    factors: tuple[float, ...] | None = None


def _get_mscale(scale: float, mscale: float) -> float:
    """llama-context.cpp's ``get_mscale`` lambda, in float32 as there."""
    f32 = np.float32
    if scale <= 1.0:
        return 1.0
    return float(f32(0.1) * f32(mscale) * np.log(f32(scale)) + f32(1.0))


def _yarn_attn_factor(s: dict) -> float:
    """``cparams.yarn_attn_factor`` (llama_context::llama_context) for a YaRN GGUF converted from ``s``."""
    f32 = np.float32
    factor = float(f32(1.0) / (f32(1.0) / f32(s["factor"])))  # 1 / rope_freq_scale, in float
    log_mul = float(s.get("mscale_all_dim", 0.0) or 0.0)  # rope.scaling.yarn_log_multiplier (DeepSeek-2)
    if log_mul != 0.0:
        mscale = log_mul if log_mul != 1.0 else 1.0  # [TAG_DEEPSEEK2_YARN_LOG_MUL_FIX]; config mscale unread
        attn = f32(_get_mscale(factor, mscale)) / f32(_get_mscale(factor, log_mul))
    else:
        attn = f32(_get_mscale(factor, 1.0))
    attn = attn * (f32(1.0) / (f32(1.0) + f32(0.1) * np.log(f32(factor))))
    return float(attn)


def _llama3_factors(s: dict, base: float, dim: int) -> tuple[float, ...]:
    """``rope_freqs`` as ``convert_hf_to_gguf.py`` ``LlamaModel.generate_extra_tensors`` writes them.

    ``old_context_len = self.hparams.get("original_max_position_embeddings", 8192)``: the top level of the HF
    config, where Llama 3.x configs have no such key (theirs is inside ``rope_scaling``), so 8192."""
    hparams: dict = {}  # the top-level keys an HF Llama 3 config.json has for RoPE besides rope_scaling
    freqs = 1.0 / (np.float32(base) ** (np.arange(0, dim, 2, dtype=np.float32) / np.float32(dim)))
    factor = s.get("factor", 8.0)
    low_freq_factor = s.get("low_freq_factor", 1.0)
    high_freq_factor = s.get("high_freq_factor", 4.0)
    old_context_len = hparams.get("original_max_position_embeddings", 8192)
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    out = []
    for freq in freqs.astype(np.float32):
        wavelen = 2 * math.pi / freq
        if wavelen < high_freq_wavelen:
            out.append(1.0)
        elif wavelen > low_freq_wavelen:
            out.append(float(factor))
        else:
            smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
            out.append(float(1 / ((1 - smooth) / factor + smooth)))
    return tuple(float(np.float32(v)) for v in out)


def _pad256(n: int) -> int:
    return (n + 255) // 256 * 256


def rope_args(cfg, seq_len: int | None = None) -> RopeArgs:
    """The ``ggml_rope_ext`` arguments llama.cpp computes for ``cfg`` (a :class:`rope_ref.RopeConfig`).

    ``seq_len`` sizes the context (LongRoPE's long/short choice); :class:`Unsupported` for scalings llama.cpp
    does not have."""
    s = cfg.scaling.to_hf() if cfg.scaling is not None else {"rope_type": "default"}
    kind = s["rope_type"]
    args = RopeArgs(
        n_dims=int(cfg.rotary_dim),
        mode="neox" if cfg.layout == "half" else "normal",
        n_ctx_orig=int(s.get("original_max_position_embeddings") or 0),
        freq_base=float(cfg.base),
    )
    if kind == "default":
        return args
    if kind == "linear":
        return replace(args, freq_scale=1.0 / float(s["factor"]))
    if kind == "yarn":
        return replace(
            args,
            freq_scale=1.0 / float(s["factor"]),
            ext_factor=1.0,
            attn_factor=_yarn_attn_factor(s),
            beta_fast=float(s.get("beta_fast", _BETA_FAST)),
            beta_slow=float(s.get("beta_slow", _BETA_SLOW)),
        )
    if kind == "llama3":
        # the converter's dim is head_dim (config "head_dim" or hidden_size // n_heads), not the rotary dim
        return replace(args, factors=_llama3_factors(s, float(cfg.base), int(cfg.head_dim)))
    if kind == "longrope":
        orig = int(s["original_max_position_embeddings"])
        n_ctx_seq = _pad256(int(seq_len) if seq_len else orig)
        ext = s["long_factor"] if n_ctx_seq > orig else s["short_factor"]
        scale = float(s.get("factor", 1.0))
        attn = math.sqrt(1 + math.log(scale) / math.log(orig)) if scale > 1.0 else 1.0
        return replace(args, factors=tuple(float(v) for v in ext), attn_factor=attn)
    raise Unsupported(f"llama.cpp has no {kind!r} RoPE scaling (dynamic and static NTK are not in llama.cpp)")


# -- running ggml ----------------------------------------------------------------------------------------

_IO = {"float32": np.float32, "float16": np.float16}


def _mode(ggml, name: str) -> int:
    return {
        "normal": ggml.GGML_ROPE_TYPE_NORMAL,
        "neox": ggml.GGML_ROPE_TYPE_NEOX,
        "mrope": ggml.GGML_ROPE_TYPE_MROPE,
        "imrope": ggml.GGML_ROPE_TYPE_IMROPE,
    }[name]


def _check(x_shape: tuple[int, ...], pos: np.ndarray, args: RopeArgs) -> np.ndarray:
    """The positions as int32, after the checks ggml would abort on (GGML_ASSERT) or silently wrap."""
    head_dim = x_shape[-1]
    if args.n_dims % 2 or args.n_dims > head_dim or args.n_dims <= 0:
        raise Unsupported(
            f"ggml_rope_ext aborts unless 0 < n_dims <= head_dim and n_dims is even (n_dims={args.n_dims})"
        )
    if args.factors is not None and len(args.factors) < args.n_dims // 2:
        raise Unsupported("ggml_rope_ext aborts when the frequency factors are fewer than n_dims / 2")
    p = np.asarray(pos)
    if p.dtype.kind == "f":
        if not np.all(np.isfinite(p)) or np.any(p != np.round(p)):
            raise Unsupported(
                "ggml takes integer positions only (GGML_TYPE_I32); this case has fractional ones"
            )
        if p.size and float(np.abs(p).max()) > INT32_MAX:
            raise Unsupported(
                f"ggml takes positions as int32 (GGML_TYPE_I32); position {float(np.abs(p).max()):.0f} "
                "exceeds 2^31 - 1"
            )
    p = p.astype(np.int64)
    if p.size and int(np.abs(p).max()) > INT32_MAX:
        raise Unsupported(
            f"ggml takes positions as int32 (GGML_TYPE_I32); position {int(np.abs(p).max())} exceeds 2^31 - 1"
        )
    return p.astype(np.int32)


def run_rope(
    x: np.ndarray,
    pos: np.ndarray,
    args: RopeArgs,
    *,
    back: bool = False,
    sections: tuple[int, int, int, int] | None = None,
    multi_mode: str = "",
) -> np.ndarray:
    """ggml's rope on ``x`` ``(n_tokens, n_head, head_dim)`` (float32 or float16) at int32 ``pos``
    (``(n_tokens,)``, or ``(4, n_tokens)`` for M-RoPE with ``sections``); returns a new array, x's dtype."""
    import ctypes

    import ggml
    from ggml.utils import to_numpy

    n_tok, n_head, head_dim = x.shape
    gtype = ggml.GGML_TYPE_F16 if x.dtype == np.float16 else ggml.GGML_TYPE_F32
    n_pos = pos.size
    mem = 2 * x.size * 4 + n_pos * 4 + (head_dim + 16) * 8 + ggml.ggml_graph_overhead()
    mem += 16 * ggml.ggml_tensor_overhead() + (1 << 20)
    ctx = ggml.ggml_init(ggml.ggml_init_params(mem_size=mem, mem_buffer=None))
    if not ctx:
        raise MemoryError("ggml_init failed")
    try:
        a = ggml.ggml_new_tensor_3d(ctx, gtype, head_dim, n_head, n_tok)
        to_numpy(a)[...] = np.ascontiguousarray(x).reshape(n_tok, n_head, head_dim)
        b = ggml.ggml_new_tensor_1d(ctx, ggml.GGML_TYPE_I32, n_pos)
        to_numpy(b)[...] = np.ascontiguousarray(pos, dtype=np.int32).reshape(-1)
        c = None
        if args.factors is not None:
            c = ggml.ggml_new_tensor_1d(ctx, ggml.GGML_TYPE_F32, len(args.factors))
            to_numpy(c)[...] = np.asarray(args.factors, dtype=np.float32)
        scalars = (
            args.n_ctx_orig,
            args.freq_base,
            args.freq_scale,
            args.ext_factor,
            args.attn_factor,
            args.beta_fast,
            args.beta_slow,
        )
        if sections is not None:
            secs = (ctypes.c_int * 4)(*sections)
            fn = ggml.ggml_rope_multi_back if back else ggml.ggml_rope_multi
            node = fn(ctx, a, b, c, args.n_dims, secs, _mode(ggml, multi_mode), *scalars)
        else:
            fn = ggml.ggml_rope_ext_back if back else ggml.ggml_rope_ext
            node = fn(ctx, a, b, c, args.n_dims, _mode(ggml, args.mode), *scalars)
        graph = ggml.ggml_new_graph(ctx)
        ggml.ggml_build_forward_expand(graph, node)
        ggml.ggml_graph_compute_with_ctx(ctx, graph, 1)
        return np.array(to_numpy(node), copy=True).reshape(n_tok, n_head, head_dim)
    finally:
        ggml.ggml_free(ctx)


# -- the peer --------------------------------------------------------------------------------------------


class LlamaCppPeer(KernelShapes, Peer):
    peer = "llama.cpp"
    distribution = "ggml-python"
    precisions = ("fp32", "fp16")
    cannot = {"inv_freq": "ggml computes the frequencies inside the rope kernel (no accessor)"}
    notes = (
        "ggml's own ggml_rope_ext / ggml_rope_ext_back / ggml_rope_multi (ggml-python); one row per token",
        "YaRN, Llama 3 and LongRoPE arguments as llama.cpp's converter and context compute them",
        "cos/sin and the attention factor read with unit-vector probes",
    )
    kernel_cannot = {"apply_qkv": "llama.cpp rotates Qcur and Kcur separately (no packed-qkv rope)"}

    def policies(self, io: str) -> dict[str, PrecisionPolicy]:
        return dict.fromkeys(OPS, PrecisionPolicy(io, "float32", "float32"))

    def from_numpy(self, array: np.ndarray, dtype: str | None = None) -> Any:
        a = np.array(array, copy=True)
        return a if dtype is None else a.astype(_IO[self.io])

    def to_numpy(self, array: Any) -> np.ndarray:
        return np.asarray(array)

    def _rotate(self, x, positions, cfg, seq_len, *, back: bool = False) -> np.ndarray:
        lead, pos = tokens(tuple(np.shape(x)), np.asarray(positions))
        args = rope_args(cfg, seq_len if seq_len is not None else _seq_len(pos))
        p = _check(tuple(np.shape(x)), pos, args)
        flat = np.asarray(x, dtype=_IO[self.io]).reshape(-1, 1, cfg.head_dim)
        return run_rope(flat, p, args, back=back).reshape(*lead, cfg.head_dim)

    def _apply(self, x, positions, cfg, seq_len):
        return self._rotate(x, positions, cfg, seq_len)

    def _apply_vjp(self, x, positions, cfg, grad_out, seq_len):
        return self._rotate(grad_out, positions, cfg, seq_len, back=True)

    def _probe(self, flat_pos: np.ndarray, cfg, seq_len) -> tuple[np.ndarray, np.ndarray]:
        k = cfg.rotary_dim // 2

        def rotate(e: np.ndarray) -> np.ndarray:
            x = e.reshape(-1, cfg.head_dim).astype(np.float32)
            args = rope_args(cfg, seq_len if seq_len is not None else _seq_len(flat_pos))
            p = _check(x.shape, np.repeat(flat_pos, k), args)
            return run_rope(x[:, None, :], p, args)[:, 0, :].astype(np.float64).reshape(e.shape)

        return probe_cos_sin(rotate, flat_pos.size, cfg)

    def _cos_sin(self, positions, cfg, seq_len):
        p = np.asarray(positions)
        cos, sin = self._probe(p.reshape(-1), cfg, seq_len)
        k = cfg.rotary_dim // 2
        return cos.reshape(p.shape + (k,)), sin.reshape(p.shape + (k,))

    def _attention_factor(self, cfg, seq_len):
        cos, _ = self._probe(np.zeros(1, dtype=np.int64), cfg, seq_len if seq_len is not None else None)
        return float(cos[0, 0])  # cos(0) * mscale: the magnitude ggml gives every pair

    # -- M-RoPE ----------------------------------------------------------------------------------------
    def mrope_position_ids(self, *args: Any, **kwargs: Any):
        raise Unsupported(_NOT_GGML["mrope"], "operation")

    def mrope_decode_ids(self, *args: Any, **kwargs: Any):
        raise Unsupported(_NOT_GGML["mrope"], "operation")

    def vision_ids(self, *args: Any, **kwargs: Any):
        raise Unsupported(_NOT_GGML["vision"], "operation")

    def mla_softmax_scale(self, cfg):
        raise Unsupported(_NOT_GGML["mla"], "operation")

    def multiaxis_apply(self, x, positions, spec):
        pos = np.asarray(positions)
        streams = np.asarray(spec.streams)
        cfg = spec.tables[0]
        if any(t != cfg for t in spec.tables[1:]):
            raise Unsupported("ggml's M-RoPE uses one base and one scaling for every stream")
        if list(spec.freq_index) != list(range(spec.n_pairs)) or spec.blocks != 1:
            raise Unsupported("ggml's M-RoPE takes frequency i for pair i, in one block")
        if spec.rotary_dim != cfg.rotary_dim:
            raise Unsupported("these pairs do not cover the table's rotary dim")
        if spec.n_streams == 1:  # plain RoPE written as a multi-axis spec
            if spec.layout != cfg.layout:
                raise Unsupported("the pair layout differs from the table's layout")
            return self._rotate(x, pos[0], cfg, None)
        if spec.layout != "half" or spec.n_streams != 3:
            raise Unsupported("ggml's M-RoPE (MROPE / IMROPE) rotates NEOX halves over 3 streams (t, h, w)")
        sections = tuple(int((streams == s).sum()) for s in range(3)) + (0,)
        mode = "mrope" if np.all(np.diff(streams) >= 0) else "imrope"
        ggml_streams = _multi_streams(mode, sections, spec.n_pairs)
        if np.any((ggml_streams != streams) & (ggml_streams != 3)):
            raise Unsupported(
                f"these streams are not ggml's {mode.upper()} order for sections {sections[:3]}"
            )
        lead = tuple(np.shape(x))[:-1]
        ids = np.stack([np.broadcast_to(pos[s], lead).reshape(-1) for s in range(3)])
        args = rope_args(cfg, _seq_len(ids))
        p = _check(tuple(np.shape(x)), ids, args)
        p4 = np.concatenate([p, _fourth_row(p)[None]], axis=0)
        flat = np.asarray(x, dtype=_IO[self.io]).reshape(-1, 1, cfg.head_dim)
        y = run_rope(flat, p4, args, sections=sections, multi_mode=mode)
        return y.reshape(*lead, cfg.head_dim)

    # -- the shapes real kernels see (issue 16) ------------------------------------------------------
    def _k_axes(self, x, cfg, axes, p, inverse):
        xv = np.asarray(x)
        to, back = _TO_THD[axes]
        t = to(xv)  # (n_tokens, H, D)
        ids = np.asarray(p.grid).reshape(-1)
        args = rope_args(cfg, p.seq_len)
        q = _check(t.shape, ids, args)
        y = run_rope(np.ascontiguousarray(t, dtype=_IO[self.io]), q, args, back=inverse)
        return back(y, xv.shape)


#: operations llama.cpp does on the host (C++ outside ggml), which ggml-python does not ship
_NOT_GGML = {
    "mrope": "llama.cpp builds M-RoPE position ids in mtmd (C++ host code), not in ggml",
    "vision": "llama.cpp builds vision patch ids in mtmd / clip (C++ host code), not in ggml",
    "mla": "llama.cpp's MLA softmax scale is set in its DeepSeek-2 graph builder (C++), not in ggml",
}


def _seq_len(pos: np.ndarray) -> int:
    """HF's rule for a length-dependent choice: ``max(position) + 1`` (the context llama.cpp is sized to)."""
    p = np.asarray(pos)
    return int(np.max(p)) + 1 if p.size and np.isfinite(np.max(p)) and np.max(p) < 2**62 else 1


def _fourth_row(p: np.ndarray) -> np.ndarray:
    """The fourth position row llama.cpp gives M-RoPE: a text token's position broadcast to every row
    (``llama_batch_allocr``), and 0 for image tokens (``mtmd-helper``'s ``set_position_mrope_2d``:
    "last pos dim is unused")."""
    text = (p[0] == p[1]) & (p[1] == p[2])
    return np.where(text, p[0], 0).astype(np.int32)


def _multi_streams(mode: str, sections: tuple[int, ...], n_pairs: int) -> np.ndarray:
    """Stream (0 t, 1 h, 2 w, 3 e) of each pair, as ``ggml_mrope_cache_init`` assigns them."""
    s0, s1, s2, s3 = sections
    total = s0 + s1 + s2 + s3
    out = np.empty(n_pairs, dtype=np.int64)
    for i in range(n_pairs):
        sector = i % total
        if mode == "imrope":
            if sector % 3 == 1 and sector < 3 * s1:
                out[i] = 1
            elif sector % 3 == 2 and sector < 3 * s2:
                out[i] = 2
            elif sector % 3 == 0 and sector < 3 * s0:
                out[i] = 0
            else:
                out[i] = 3
        else:
            out[i] = 0 if sector < s0 else 1 if sector < s0 + s1 else 2 if sector < s0 + s1 + s2 else 3
    return out


def _bshd_in(t):
    b, s, h, d = t.shape
    return t.reshape(b * s, h, d)


def _bshd_out(y, shape):
    return y.reshape(shape)


def _bhsd_in(t):
    return _bshd_in(t.transpose(0, 2, 1, 3))


def _bhsd_out(y, shape):
    b, h, s, d = shape
    return y.reshape(b, s, h, d).transpose(0, 2, 1, 3)


def _sbhd_in(t):
    return _bshd_in(t.transpose(1, 0, 2, 3))


def _sbhd_out(y, shape):
    s, b, h, d = shape
    return y.reshape(b, s, h, d).transpose(1, 0, 2, 3)


#: axes -> (to llama.cpp's (n_tokens, n_head, head_dim) with tokens in the id grid's order, back)
_TO_THD = {
    "thd": (lambda t: t, _bshd_out),
    "bshd": (_bshd_in, _bshd_out),
    "bhsd": (_bhsd_in, _bhsd_out),
    "sbhd": (_sbhd_in, _sbhd_out),
}


def make_backend(precision: str | None = None) -> LlamaCppPeer:
    return LlamaCppPeer(precision)
