"""Float positions handed to a keras-hub rotary layer are autocast to the compute dtype by Keras'
``Layer.__call__`` under a half-precision policy, before the layer casts them to float32: bf16 turns 2049
into 2048, fp16 turns 70000 into inf (cos/sin NaN). Integer positions are not affected.

Reference: cos and sin of ``position * inv_freq[0]`` (= the position) in float64. Exit status 1 while the
bug is present.
"""

import os
import sys

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from keras_hub.layers import RotaryEmbedding  # noqa: E402

d = 8
positions = np.array([257.5, 2049.0, 70000.0])


def errors(policy: str, pos: np.ndarray) -> np.ndarray:
    """|cos/sin error| per position: pair 0 (inverse frequency 1) takes e0 to cos at 0 and sin at d/2."""
    layer = RotaryEmbedding(10000.0, dtype=policy)
    x = np.zeros((1, pos.size, 1, d), np.float32)
    x[..., 0] = 1.0
    y = layer(keras.ops.convert_to_tensor(x, dtype=layer.compute_dtype), positions=pos[None])
    got = keras.ops.convert_to_numpy(keras.ops.cast(y, "float32")).astype(np.float64)[0, :, 0][:, [0, d // 2]]
    exact = np.asarray(pos, dtype=np.float64)
    err = np.abs(got - np.stack([np.cos(exact), np.sin(exact)], -1)).max(axis=-1)
    return np.where(np.isfinite(err), err, np.inf)


worst = {}
for policy in ("float32", "mixed_float16", "mixed_bfloat16"):
    err = errors(policy, positions.astype(np.float32))
    worst[policy] = err.max()
    print(f"{policy}, float32 positions {positions.tolist()}: cos/sin errors {np.round(err, 3).tolist()}")
ints = np.array([2049, 70000], dtype=np.int64)
err = errors("mixed_bfloat16", ints)
print(f"mixed_bfloat16, int64 positions {ints.tolist()}: cos/sin errors {np.round(err, 3).tolist()}")
# float32 is right to 1e-5; half precisions may round cos/sin (bf16: 2^-8) but not the positions
sys.exit(1 if worst["mixed_float16"] > 0.01 or worst["mixed_bfloat16"] > 0.02 else 0)
