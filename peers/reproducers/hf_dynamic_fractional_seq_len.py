"""HF transformers dynamic NTK with fractional position ids: ``dynamic_rope_update`` takes
``seq_len = max(position_ids) + 1`` from the float ids without rounding, so the base is computed at a
non-integer length (10001.5 for a last position of 10000.5) instead of the integer length of the sequence
(10001). Exit status 1 while the behaviour is present.
"""

import sys

import torch
from transformers import GlmConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.glm.modeling_glm import GlmRotaryEmbedding

cfg = GlmConfig(
    hidden_size=64,
    num_attention_heads=2,
    num_key_value_heads=2,
    head_dim=32,
    max_position_embeddings=4096,
    rope_parameters={
        "rope_type": "dynamic",
        "factor": 2.0,
        "rope_theta": 10000.0,
        "partial_rotary_factor": 0.75,
    },
)
rope = GlmRotaryEmbedding(cfg)
rope(torch.zeros(1), torch.tensor([[0.5, 1.25, 10000.5]]))
print(f"seq_len HF used: {float(rope.max_seq_len_cached)} (integer length of this sequence: 10001)")
want = ROPE_INIT_FUNCTIONS["dynamic"](cfg, None, seq_len=10001)[0].double()
rel = ((rope.inv_freq.double() - want).abs() / want).max().item()
print(f"max relative inv_freq difference from seq_len=10001: {rel:.3g}")
sys.exit(1 if float(rope.max_seq_len_cached) != 10001 else 0)
