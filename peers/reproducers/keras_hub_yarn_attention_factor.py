"""keras-hub's YaRN (``RotaryEmbedding(rope_type="yarn")``) scales cos and sin by ``0.1*ln(factor) + 1``
whatever the config says: an explicit ``attention_factor`` and ``mscale`` / ``mscale_all_dim`` (DeepSeek-V3,
Kimi-K2) are not parameters of the layer.

The applied factor is read through the public call: position 0 maps the unit vector e0 to
``cos(0) * factor``. References in float64 from HF ``_compute_yarn_parameters``. Exit status 1 while the bug
is present.
"""

import math
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from keras_hub.layers import RotaryEmbedding  # noqa: E402


def get_mscale(scale: float, m: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0


d = 64
configs = [  # (what HF reads, factor, HF's attention factor)
    ("attention_factor=1.0", 64.0, 1.0),
    ("mscale=1, mscale_all_dim=1 (Kimi-K2)", 32.0, get_mscale(32.0, 1.0) / get_mscale(32.0, 1.0)),
    ("mscale=1, mscale_all_dim=0.707", 40.0, get_mscale(40.0, 1.0) / get_mscale(40.0, 0.707)),
]
x = np.zeros((1, 1, 1, d), np.float32)
x[..., 0] = 1.0
bad = False
for what, factor, want in configs:
    layer = RotaryEmbedding(
        10000.0, scaling_factor=factor, rope_type="yarn", original_max_position_embeddings=4096
    )
    got = float(keras.ops.convert_to_numpy(layer(x))[0, 0, 0, 0])
    print(f"yarn factor {factor:g}, {what}: keras-hub applies {got:.6g}, HF {want:.6g}")
    bad |= abs(got - want) > 1e-5
sys.exit(1 if bad else 0)
