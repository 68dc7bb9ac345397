"""Shared setup of the reproducers for llama.cpp's host-side findings (``llama_cpp_host_*.py``).

They need llama.cpp's own host code, which ggml-python does not ship: libllama through llama-cpp-python's
bindings, and the vendored converter (``conversion/*.py``) and ``gguf-py``, both from the environment that
``peers/envs/llama_cpp.sh`` builds (llama-cpp-python 0.3.36, which vendors llama.cpp at a fixed commit).
Without it a reproducer exits 2 with one line saying how to build it; with it, 1 while its bug is present.

The model is a tiny random llama-family GGUF written with the vendored ``gguf`` writer: one layer, 2 heads of
32, a vocabulary of 16 dummy tokens (``tokenizer.ggml.model = "none"``), F32 weights. Only its RoPE metadata
matters: what the converter writes for a config and what libllama then does with it.
"""

from __future__ import annotations

import ctypes
import os
import sys
from pathlib import Path

import numpy as np

N_EMBD, N_HEAD, N_FF, N_VOCAB, N_CTX_TRAIN = 64, 2, 96, 16, 4096
HEAD_DIM = N_EMBD // N_HEAD


def vendored_source() -> Path:
    """The vendored llama.cpp tree (converter and gguf-py), or exit 2 naming the environment script."""
    hint = Path(sys.prefix) / "llama-cpp-src.txt"
    src = os.environ.get("LLAMA_CPP_SRC") or (hint.read_text().strip() if hint.is_file() else "")
    if not src or not (Path(src) / "gguf-py").is_dir():
        print("needs llama.cpp's source (converter, gguf-py): run `bash peers/envs/llama_cpp.sh` and use its "
              "python, or set LLAMA_CPP_SRC to a llama.cpp checkout")
        sys.exit(2)
    for sub in ("gguf-py", "."):
        path = str(Path(src) / sub)
        if path not in sys.path:
            sys.path.insert(0, path)
    return Path(src)


def llama_cpp_module():
    """llama-cpp-python's low-level bindings, or exit 2 naming the environment script."""
    try:
        import llama_cpp
    except ImportError:
        print("needs llama-cpp-python 0.3.36 (libllama): run `bash peers/envs/llama_cpp.sh`, use its python")
        sys.exit(2)
    return llama_cpp


def write_tiny_model(path: Path, arch: str, rope: dict, seed: int = 0) -> Path:
    """A one-layer ``arch`` model (``llama`` or ``mistral3``) whose RoPE metadata is ``rope``:
    ``{"freq_base", "scaling_type", "factor", "orig_ctx", "yarn_attn_factor", "yarn_log_mul"}`` (optional keys
    left out are not written, as the converter leaves them out)."""
    vendored_source()
    import gguf

    rng = np.random.default_rng(seed)
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_context_length(N_CTX_TRAIN)
    writer.add_embedding_length(N_EMBD)
    writer.add_block_count(1)
    writer.add_feed_forward_length(N_FF)
    writer.add_head_count(N_HEAD)
    writer.add_head_count_kv(N_HEAD)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(HEAD_DIM)
    writer.add_rope_freq_base(rope.get("freq_base", 10000.0))
    writer.add_tokenizer_model("none")
    writer.add_vocab_size(N_VOCAB)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    if "scaling_type" in rope:
        writer.add_rope_scaling_type(gguf.RopeScalingType(rope["scaling_type"]))
        writer.add_rope_scaling_factor(rope["factor"])
        writer.add_rope_scaling_orig_ctx_len(rope["orig_ctx"])
    if "yarn_attn_factor" in rope:
        writer.add_rope_scaling_yarn_attn_factor(rope["yarn_attn_factor"])
    if "yarn_log_mul" in rope:
        writer.add_rope_scaling_yarn_log_mul(rope["yarn_log_mul"])

    def weight(*shape: int, scale: float = 0.3) -> np.ndarray:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    writer.add_tensor("token_embd.weight", weight(N_VOCAB, N_EMBD, scale=1.0))
    writer.add_tensor("output_norm.weight", np.ones(N_EMBD, np.float32))
    writer.add_tensor("output.weight", weight(N_VOCAB, N_EMBD))
    writer.add_tensor("blk.0.attn_norm.weight", np.ones(N_EMBD, np.float32))
    for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
        writer.add_tensor(f"blk.0.{name}.weight", weight(N_EMBD, N_EMBD))
    writer.add_tensor("blk.0.ffn_norm.weight", np.ones(N_EMBD, np.float32))
    writer.add_tensor("blk.0.ffn_gate.weight", weight(N_FF, N_EMBD))
    writer.add_tensor("blk.0.ffn_up.weight", weight(N_FF, N_EMBD))
    writer.add_tensor("blk.0.ffn_down.weight", weight(N_EMBD, N_FF))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


class Logs:
    """libllama's log lines, captured while the object is alive (llama_log_set)."""

    def __init__(self, llama_cpp):
        self.lines: list[str] = []

        @llama_cpp.llama_log_callback
        def keep(level, text, user_data):
            self.lines.append(text.decode("utf-8", "replace"))

        self._callback = keep  # keep a reference: libllama calls it later
        llama_cpp.llama_log_set(keep, ctypes.c_void_p(0))


def last_token_logits(model_path: Path, n_ctx: int = 2048, **context: float) -> np.ndarray:
    """Logits of the last of 8 tokens placed at positions 1000..1007 (beyond the YaRN original context),
    through libllama with the context parameters ``context`` (e.g. ``yarn_attn_factor=0.5``)."""
    llama_cpp = llama_cpp_module()
    llama_cpp.llama_backend_init()
    mparams = llama_cpp.llama_model_default_params()
    model = llama_cpp.llama_model_load_from_file(str(model_path).encode(), mparams)
    if not model:
        raise RuntimeError(f"libllama could not load {model_path}")
    cparams = llama_cpp.llama_context_default_params()
    cparams.n_ctx = n_ctx
    cparams.n_batch = 8
    cparams.n_threads = cparams.n_threads_batch = 1
    for key, value in context.items():
        setattr(cparams, key, value)
    ctx = llama_cpp.llama_init_from_model(model, cparams)
    try:
        batch = llama_cpp.llama_batch_init(8, 0, 1)
        tokens = [3, 7, 1, 12, 5, 9, 2, 14]
        for i, tok in enumerate(tokens):
            batch.token[i] = tok
            batch.pos[i] = 1000 + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = i == len(tokens) - 1
        batch.n_tokens = len(tokens)
        if llama_cpp.llama_decode(ctx, batch) != 0:
            raise RuntimeError("llama_decode failed")
        logits = llama_cpp.llama_get_logits_ith(ctx, len(tokens) - 1)
        out = np.array([logits[i] for i in range(N_VOCAB)], dtype=np.float64)
        llama_cpp.llama_batch_free(batch)
        return out
    finally:
        llama_cpp.llama_free(ctx)
        llama_cpp.llama_model_free(model)


def get_mscale(scale: float, mscale: float = 1.0) -> float:
    """DeepSeek-V2's yarn_get_mscale (deepseek-ai/DeepSeek-V2, modeling_deepseek.py), as HF's
    _compute_yarn_parameters uses it."""
    import math

    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0
