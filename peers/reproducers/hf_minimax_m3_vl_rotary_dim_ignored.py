"""HF transformers MiniMax-M3-VL: the text config's ``rotary_dim`` (64, "Number of head channels rotated by
RoPE; the remaining channels are passed through unchanged", ``configuration_minimax_m3_vl.py``) is never
read: ``MiniMaxM3VLRotaryEmbedding`` takes its width from ``partial_rotary_factor`` (default 1.0), so
cos/sin are ``head_dim`` = 128 wide and ``apply_rotary_pos_emb`` (``rotary_dim = cos.shape[-1]``) rotates
all 128 channels (``models/minimax_m3_vl/modeling_minimax_m3_vl.py``). Float64 check: channel 64 onwards
of a rotated query differ from the input. Exit status 1 while the behaviour is present.
"""

import sys

import torch
from transformers.models.minimax_m3_vl import modeling_minimax_m3_vl as m
from transformers.models.minimax_m3_vl.configuration_minimax_m3_vl import MiniMaxM3VLTextConfig

cfg = MiniMaxM3VLTextConfig()
rope = m.MiniMaxM3VLRotaryEmbedding(cfg).to(torch.float64)
q = torch.randn(1, 1, 4, cfg.head_dim, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
cos, sin = rope(q, torch.arange(100, 104)[None])
y, _ = m.apply_rotary_pos_emb(q, q.clone(), cos, sin)
moved = (y[..., cfg.rotary_dim :] - q[..., cfg.rotary_dim :]).abs().max().item()
print(f"config.rotary_dim = {cfg.rotary_dim}, cos width = {cos.shape[-1]}, head_dim = {cfg.head_dim}")
print(f"max change of the channels past rotary_dim (should stay unchanged): {moved:.3g}")
sys.exit(1 if cos.shape[-1] != cfg.rotary_dim else 0)
