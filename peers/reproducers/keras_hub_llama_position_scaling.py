"""keras-hub ``LlamaRotaryEmbedding(position_scaling_factor=4)`` rotates as if the factor were 1: the
override of ``_get_inverse_freq`` drops the linear factor the base ``RotaryEmbedding`` applies.

Linear scaling (position interpolation) rotates position ``p`` by ``(p / factor) * inv_freq``; the reference
is that formula in float64. Exit status 1 while the bug is present.
"""

import os
import sys

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from keras_hub.layers import RotaryEmbedding  # noqa: E402
from keras_hub.src.models.llama.llama_rotary_embedding import LlamaRotaryEmbedding  # noqa: E402

d, base, factor, pos = 64, 10000.0, 4.0, 1000
x = np.zeros((1, 1, 1, d), np.float32)
x[..., 0] = 1.0  # pair 0 (inverse frequency 1): output channels 0 and d/2 are cos and sin of its angle
want = np.array([np.cos(pos / factor), np.sin(pos / factor)])
errors = {}
for name, layer in (
    (
        "LlamaRotaryEmbedding(position_scaling_factor=4)",
        LlamaRotaryEmbedding(base, position_scaling_factor=factor),
    ),
    ("RotaryEmbedding(scaling_factor=4)", RotaryEmbedding(base, scaling_factor=factor)),
):
    y = keras.ops.convert_to_numpy(layer(x, positions=np.array([pos]))).astype(np.float64)[0, 0, 0]
    errors[name] = np.abs(y[[0, d // 2]] - want).max()
    print(f"{name}: cos/sin at position {pos} off by {errors[name]:.3g}")
sys.exit(1 if errors["LlamaRotaryEmbedding(position_scaling_factor=4)"] > 1e-4 else 0)
