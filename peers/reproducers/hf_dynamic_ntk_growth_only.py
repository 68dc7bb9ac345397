"""HF transformers dynamic NTK: after a long call, a call longer than L0 but shorter than the long one keeps
the long call's base (``dynamic_rope_update`` only recomputes on growth), while HF's own
``_compute_dynamic_ntk_parameters(seq_len=3000)`` gives a smaller base.

Exit status 1 while the behaviour is present.
"""

import sys

import torch
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

cfg = LlamaConfig(
    hidden_size=128,
    num_attention_heads=2,
    head_dim=64,
    max_position_embeddings=2048,
    rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0},
)
rope = LlamaRotaryEmbedding(cfg)
x = torch.zeros(1, dtype=torch.float64)
rope(x, torch.arange(16384)[None])
rope(x, torch.arange(3000)[None])
got = rope.inv_freq.double()
want = ROPE_INIT_FUNCTIONS["dynamic"](cfg, None, seq_len=3000)[0].double()
rel = ((got - want).abs() / want).max().item()
print(f"max relative inv_freq difference at seq_len 3000 after 16384: {rel:.3g}")
sys.exit(1 if rel > 1e-6 else 0)
