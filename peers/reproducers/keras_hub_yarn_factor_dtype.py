"""keras-hub evaluates the YaRN attention factor in the layer's compute dtype: under ``mixed_bfloat16``
the factor for ``factor=10`` is the bf16 number 1.2265625, not 0.1*ln(10) + 1 = 1.2302585 (float32: right).

The applied factor is read through the public call (position 0 maps e0 to ``cos(0) * factor``, and cos(0) = 1
is exact in every dtype). Exit status 1 while the bug is present.
"""

import math
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from keras_hub.layers import RotaryEmbedding  # noqa: E402

d, factor = 64, 10.0
want = 0.1 * math.log(factor) + 1.0  # float64
errors = {}
for policy in ("float32", "mixed_float16", "mixed_bfloat16"):
    layer = RotaryEmbedding(
        10000.0, scaling_factor=factor, rope_type="yarn", original_max_position_embeddings=2048, dtype=policy
    )
    x = np.zeros((1, 1, 1, d), np.float32)
    x[..., 0] = 1.0
    y = layer(keras.ops.convert_to_tensor(x, dtype=layer.compute_dtype))
    got = float(keras.ops.convert_to_numpy(keras.ops.cast(y, "float32"))[0, 0, 0, 0])
    errors[policy] = abs(got - want) / want
    print(f"{policy}: factor {got:.8g} (float64 {want:.8g}), relative error {errors[policy]:.3g}")
# a float32 factor is within 2^-23 of the exact value; the half-precision policies should match it
sys.exit(1 if max(errors.values()) > 1e-6 else 0)
