"""HF transformers GLM-4.5 (glm4_moe): the default config gives an odd rotary width, which the rotary
accepts instead of refusing. ``Glm4MoeConfig()`` has ``hidden_size = 4096``, 96 heads (no ``head_dim``:
``4096 // 96 = 42``) and ``partial_rotary_factor = 0.5``, so ``dim = int(42 * 0.5) = 21``;
``Glm4MoeRotaryEmbedding.compute_default_rope_parameters`` builds ``arange(0, 21, 2) / 21``: 11
frequencies ``base^(-2i/21)`` (``models/glm4_moe/modeling_glm4_moe.py``), so the model rotates 22
channels, not the 21 its config states, with exponents over the odd width. Exit status 1 while the
behaviour is present.
"""

import sys

from transformers.models.glm4_moe.configuration_glm4_moe import Glm4MoeConfig
from transformers.models.glm4_moe.modeling_glm4_moe import Glm4MoeRotaryEmbedding

config = Glm4MoeConfig()
head = config.hidden_size // config.num_attention_heads
stated = int(head * config.rope_parameters["partial_rotary_factor"])
rotated = 2 * Glm4MoeRotaryEmbedding(config).inv_freq.numel()
print(f"default Glm4MoeConfig: head {head}, stated rotary width {stated}, channels rotated {rotated}")
sys.exit(1 if stated % 2 and rotated != stated else 0)
