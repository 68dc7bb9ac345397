"""HF transformers dynamic NTK: a call of exactly original_max_position_embeddings tokens after a long call
keeps the long call's base (the reset test in ``modeling_rope_utils.dynamic_rope_update`` is a strict ``<``).

Exit status 1 while the bug is present. float64 comparison against HF's own stateless function.
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
rope(x, torch.arange(16384)[None])  # a long call: base grows
rope(x, torch.arange(2048)[None])  # seq_len == L0: must be back to the unscaled base
got = rope.inv_freq.double()
want = ROPE_INIT_FUNCTIONS["dynamic"](cfg, None, seq_len=2048)[0].double()
rel = ((got - want).abs() / want).max().item()
print(f"max relative inv_freq error after the reset call: {rel:.3g} (0 expected)")
sys.exit(1 if rel > 1e-6 else 0)
