"""HF transformers Qwen3-Omni-MoE: the default text config cannot run its own rotation.
``Qwen3OmniMoeTextConfig()`` has ``hidden_size = 2048``, 28 heads and no ``head_dim``, so the head size is
``2048 // 28 = 73`` (odd); ``Qwen3OmniMoeThinkerTextRotaryEmbedding`` builds ``arange(0, 73, 2)``: 37
frequencies, cos/sin 74 wide, and ``apply_rotary_pos_emb`` on a 73-channel head fails
(``models/qwen3_omni_moe/modeling_qwen3_omni_moe.py``). Exit status 1 while the behaviour is present.
"""

import sys

import torch
from transformers.models.qwen3_omni_moe.configuration_qwen3_omni_moe import Qwen3OmniMoeTextConfig
from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import (
    Qwen3OmniMoeThinkerTextRotaryEmbedding,
    apply_rotary_pos_emb,
)

config = Qwen3OmniMoeTextConfig()
head = config.hidden_size // config.num_attention_heads
cos, sin = Qwen3OmniMoeThinkerTextRotaryEmbedding(config)(torch.zeros(1), torch.arange(8)[None])
q = torch.randn(1, 1, 8, head)
try:
    apply_rotary_pos_emb(q, q.clone(), cos, sin)
except RuntimeError as exc:
    print(f"default Qwen3OmniMoeTextConfig: head {head}, cos width {cos.shape[-1]}: apply fails: {exc}")
    sys.exit(1)
print(f"default Qwen3OmniMoeTextConfig: head {head}, cos width {cos.shape[-1]}: apply runs")
sys.exit(0)
