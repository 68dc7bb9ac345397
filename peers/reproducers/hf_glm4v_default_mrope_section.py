"""HF transformers GLM-4V: the default text config cannot run its own rotary. ``Glm4vTextConfig()``
has ``head_dim = 4096 / 32 = 128`` and no ``partial_rotary_factor`` (so 1.0: 64 frequencies), while
``Glm4vTextRotaryEmbedding`` falls back to ``mrope_section = [8, 12, 12]`` (32 frequencies, the released
GLM-4.1V's ``partial_rotary_factor = 0.5``), and ``recomposition_frequencies`` fails in ``split``
(``models/glm4v/modeling_glm4v.py``; the same in glm4v_moe and glm_image). Exit status 1 while the
behaviour is present.
"""

import sys

import torch
from transformers.models.glm4v.configuration_glm4v import Glm4vTextConfig
from transformers.models.glm4v.modeling_glm4v import Glm4vTextRotaryEmbedding

rope = Glm4vTextRotaryEmbedding(Glm4vTextConfig())
try:
    rope(torch.zeros(1, dtype=torch.float64), torch.arange(8)[None])
except RuntimeError as exc:
    print(f"default Glm4vTextConfig: rotary forward fails: {exc}")
    sys.exit(1)
print("default Glm4vTextConfig: rotary forward runs")
sys.exit(0)
