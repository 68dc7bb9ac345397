"""HF transformers Cohere Compass: the default text config cannot build its own rotary.
``CohereCompassTextConfig()`` has ``layer_types = ["full_attention"] * num_hidden_layers`` and empty
``rope_parameters`` (``models/cohere_compass/configuration_cohere_compass.py``), while
``CohereCompassRotaryEmbedding.__init__`` reads ``config.rope_parameters[layer_type]`` for every layer
type (``models/cohere_compass/modeling_cohere_compass.py``): ``KeyError: 'full_attention'``. Exit status 1
while the behaviour is present.
"""

import sys

from transformers.models.cohere_compass.configuration_cohere_compass import CohereCompassTextConfig
from transformers.models.cohere_compass.modeling_cohere_compass import CohereCompassRotaryEmbedding

try:
    CohereCompassRotaryEmbedding(CohereCompassTextConfig())
except KeyError as exc:
    print(f"default CohereCompassTextConfig: rotary __init__ fails: KeyError {exc}")
    sys.exit(1)
print("default CohereCompassTextConfig: rotary builds")
sys.exit(0)
