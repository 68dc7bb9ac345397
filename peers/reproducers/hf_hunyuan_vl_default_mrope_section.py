"""HF transformers HunYuan-VL: the default text config cannot run its own rotary. ``HunYuanVLTextConfig()``
has ``rope_parameters = {"rope_type": "default", "rope_theta": 10000.0}`` and no ``mrope_section``, while
``HunYuanVLRotaryEmbedding.forward`` expands the position ids to ``len(self.mrope_section)`` axes
(``models/hunyuan_vl/modeling_hunyuan_vl.py``): ``len(None)`` raises. Exit status 1 while the behaviour
is present.
"""

import sys

import torch
from transformers.models.hunyuan_vl.configuration_hunyuan_vl import HunYuanVLTextConfig
from transformers.models.hunyuan_vl.modeling_hunyuan_vl import HunYuanVLRotaryEmbedding

config = HunYuanVLTextConfig()
sections = config.rope_parameters.get("mrope_section")
error = None
try:
    HunYuanVLRotaryEmbedding(config)(torch.zeros(1, dtype=torch.float64), torch.arange(8)[None])
except TypeError as exc:
    error = exc
print(f"default HunYuanVLTextConfig: mrope_section {sections}; rotary forward: {error or 'runs'}")
sys.exit(1 if error is not None else 0)
