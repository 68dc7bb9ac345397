"""The bug classes of the catalogue: each case names one, and ``manifest.json`` lists them in this order.

A new family appends the classes it introduces here (``docs/catalogue.md``, "Adding a family").
"""

from __future__ import annotations

__all__ = ["BUG_CLASSES"]

#: Bug classes: name -> what goes wrong (see ``docs/known-bugs.md`` for the real-world reports).
BUG_CLASSES: dict[str, str] = {
    "tables": "inverse frequencies, attention factor or cos/sin table built wrong (Megatron-Bridge #4195)",
    "layout": "half-split and interleaved pairing confused, or a layout flag ignored (vLLM #49290)",
    "rotation_direction": "rotation sign flipped (x cos + y sin), or a conjugate used in the forward pass",
    "position_offset": "positions shifted by one (arange(1, S+1), wrong past length)",
    "inv_freq_exponent": "frequency exponent taken over head_dim instead of rotary_dim (pie #603, HF #48630)",
    "partial_rotary": "the wrong channel block rotated, or pass-through channels changed (cascadia #69)",
    "head_dims": "kernel paths for unusual head sizes (2..256, 72/80/96/120) broken (vLLM, flash-attn)",
    "heads": "only some heads rotated (aprender #2079), or head/kv index mixed up",
    "per_row_positions": "per-row position ids ignored, e.g. batch row 0's positions reused (HF #29109)",
    "decode_offsets": "seq_len == 1 with batch > 1 and per-row offsets (MLX #3494)",
    "fractional_positions": "non-integer positions rounded or truncated",
    "precision_positions": "positions held in bf16/fp16 (gpt-neox #1003/#1016, Megatron #535, candle #3520)",
    "precision_angles": "the angle product pos * inv_freq computed in bf16/fp16 (HF #29285)",
    "large_position_trig": "float32 phase, sin/cos range reduction at very large positions (tt-metal #51845)",
    "scaling_linear": "linear (PI) scaling dropped or applied twice (sglang #33558, Gemma-3 ports)",
    "scaling_ntk": "static NTK-aware base change dropped or with the wrong exponent",
    "scaling_dynamic": "dynamic NTK base wrong or switched at the wrong length (HF dynamic_rope_update)",
    "scaling_dynamic_state": "dynamic NTK state leaking from a long call into a later short call (HF #25306)",
    "scaling_yarn": "YaRN ramp, correction range or truncate rule wrong (torchtitan #3787, gpt-oss truncate)",
    "yarn_attention_factor": "YaRN attention factor dropped, applied twice, mscale ignored (vLLM #48623)",
    "scaling_llama3": "Llama 3 band scaling dropped or band edges wrong (unsloth #6197, mlxcel #1355)",
    "scaling_longrope_switch": "LongRoPE short/long factors switched at the wrong length (unsloth #10681)",
    "scaling_longrope": "LongRoPE long factors or its attention factor dropped or wrong far beyond the "
    "original context",
    "gradient": "backward pass is not the inverse rotation of the upstream gradient (apex #1750)",
    "chatglm_position_ids": "ChatGLM-6B 2D position/block ids wrong under padding or batching (#833)",
    "chatglm_2d": "ChatGLM-6B 2D rotary halves swapped or rotated with the wrong ids",
    "chatglm_fp16_emulation": "the released ChatGLM-6B fp16 table/rotation not reproduced bit-faithfully",
    "decay": "RoFormer long-term decay bound (relative upper bound, §3.4.3) computed wrong",
    "custom": "golden vectors for a user's own model settings and shapes (--preset, --hf-config)",
    "crossed_axes": "a bug that lives in a combination of axes: a scaling lost on the interleaved or "
    "partial-rotary path, a cos/sin table without its attention factor (docs/catalogue.md)",
    "negative_positions": "negative positions (KV-cache context shift, re-rotation) wrapped, clamped or "
    "taken as unsigned (a cos/sin cache indexed with -k reads row S-k)",
    "explicit_seq_len": "an explicit seq_len ignored and max(positions) + 1 used for a length-dependent "
    "scaling (chunked prefill, a cache allocated for the whole context)",
    "scaling_parameters": "scaling parameters at non-default values ignored: YaRN beta_fast/beta_slow "
    "(Kimi-K2 1/1), truncate, mscale pairs, attention_factor < 1 (mlx-lm, keras-hub)",
    "scaling_partial_rotary": "a scaling applied over head_dim when rotary_dim < head_dim (LongRoPE 96 of "
    "128 in Phi-4-mini, YaRN and Llama 3 with partial rotary)",
    "table_cache_state": "a table cache or switch kept across calls: keyed without the base (Gemma 3 "
    "local/global, 1e4 then 1e6), LongRoPE kept long after a long call, dynamic NTK not reset",
    "kernel_tails": "the last partial tile of rows or heads dropped by a kernel (head counts 28/40/52/71, "
    "row counts not multiples of 32/64/128, several hundred rows)",
    "chatglm_incremental": "ChatGLM-6B incremental decoding ids (next_position_ids) wrong: stale block "
    "id, [MASK] and [gMASK] in one row, left padding",
    "mrope_pairing_flag": "the pairing flag ignored in the multi-axis path: GLM-4V's interleaved pairs "
    "rotated as rotate_half (vLLM #49290, vllm-ascend #12765)",
    "mrope_section_order": "mrope_section applied to the streams in the wrong order (H, T, W)",
    "mrope_interleaved_vs_blocked": "Qwen3-VL's interleaved M-RoPE (pairs cycle T, H, W) read as blocked "
    "sections (vLLM PR #40680)",
    "mrope_partial_rotary": "partial_rotary_factor dropped in the M-RoPE path: every channel rotated "
    "(maxtext #4616)",
    "vision_merge_window_order": "ViT patch ids of Qwen2-VL listed row-major instead of in merge-window "
    "order (or Pixtral's row-major ids reordered)",
    "mrope_temporal_scaling": "Qwen2.5-VL video time ids not scaled by second_per_grid_ts x "
    "tokens_per_second, or the product truncated too early",
    "mrope_left_padding": "M-RoPE ids computed on left-padded rows as if the padding were text",
    "mrope_decode_deltas": "mrope_position_deltas ignored when decoding: new tokens get cache_position + j",
    "mla_second_mscale": "DeepSeek MLA softmax scale without the second YaRN correction "
    "mscale(f, mscale_all_dim)^2, squared twice or with the wrong mscale (HF PR #47435, Megatron #1429, "
    "llama.cpp #7118)",
    "mla_rope_yarn": "DeepSeek MLA rope part (interleaved, YaRN) wrong beyond the original context",
    "axes_convention": "an axes convention (bshd, bhsd, sbhd, thd) misread: (B, S) ids put on the heads, "
    "batch and sequence swapped (TransformerEngine sbhd/bshd, HF unsqueeze_dim)",
    "strided_views": "a kernel that ignores strides: a transposed q, q sliced out of a packed projection "
    "or a non-unit stride read as if contiguous (94% wrong elements, issue 16)",
    "gqa_heads": "q and k with different head counts (GQA/MQA): k rotated with q's head index, or only the "
    "first Hk heads of q rotated (flash-attn apply_rotary_emb_qkv_, vLLM rotary_embedding)",
    "packed_qkv": "packed (.., Hq + 2 Hk, D) projections: V rotated or changed, k heads taken at the wrong "
    "offset (flash-attn apply_rotary_emb_qkv_)",
    "varlen": "packed varlen sequences (cu_seqlens): positions not restarted per sequence, start offsets "
    "ignored, the tail sequence dropped (flash-attn varlen, TransformerEngine thd)",
    "cache_offset": "a KV-cache offset (int or per batch row) applied per token instead of per sequence, "
    "or ignored (MLX offset, keras-hub start_index, vLLM decode)",
    "inplace": "in-place kernels writing past the view they were handed, or q and k aliasing one packed "
    "buffer clobbering each other",
    "inverse_rotation": "the inverse rotation (-m theta, backward and de-rotation) with the wrong sign, "
    "or a length-dependent table taken from the negated positions",
    "vision_rotation": "a 2D vision RoPE (Pixtral) with the wrong frequencies per axis: rows given the first "
    "half of the table instead of its even entries, rows and columns swapped (non-square 12 x 16 grids)",
    "mrope_video_ids": "GLM-4V / Qwen3-VL video ids: a frame's temporal id taken as the frame index k "
    "(Qwen2-VL's rule) instead of 0 at the frame's own start (the timestamps carry time)",
    "mrope_spatial_extent": "M-RoPE height/width ids beyond every temporal id (two images of 28 x 40 and "
    "12 x 16 patches, a 3-frame video, a prefill chunk ending inside the video): a cos/sin table sized by "
    "the temporal stream, spatial ids clamped; stream mix-ups fail by a clear factor at bf16",
    "inverse_fused": "inverse=True dropped by a fused q/k (apply_qk) or packed qkv (apply_qkv) wrapper: "
    "the de-rotation rotates forward",
    "kernel_seq_len": "an explicit seq_len dropped by a kernel-shape call (apply_axes, apply_qk, apply_qkv): "
    "a chunk of a long sequence under dynamic NTK or LongRoPE gets the table of its own last position",
    "inverse_attention_factor": "the inverse rotation under YaRN with a wrong attention factor: recomputed "
    "from the factor alone (mscale pair, attention_factor ignored), dropped or inverted",
}
