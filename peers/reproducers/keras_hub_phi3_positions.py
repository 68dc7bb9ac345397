"""keras-hub ``Phi3SuScaledRotaryEmbedding`` raises whenever it is called with ``positions=``: the base
``call`` makes positions 2-D, the override's ``einsum("i,j->ij", ...)`` wants them 1-D.

Exit status 1 while the bug is present (0 once the call returns the plain start_index result, which is the
same rotation for positions 0..n-1).
"""

import os
import re
import sys

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from keras_hub.src.models.phi3.phi3_rotary_embedding import Phi3SuScaledRotaryEmbedding  # noqa: E402

d = 8
layer = Phi3SuScaledRotaryEmbedding(
    [1.0] * (d // 2), [2.0] * (d // 2), max_sequence_length=8192, pretraining_sequence_length=4096
)
x = np.random.default_rng(0).standard_normal((1, 3, 1, d)).astype(np.float32)
want = keras.ops.convert_to_numpy(layer(x))  # start_index route: positions 0, 1, 2
try:
    got = keras.ops.convert_to_numpy(layer(x, positions=np.arange(3)))
except Exception as exc:  # noqa: BLE001 - the backend decides the exception type
    lines = [line for line in str(exc).splitlines() if "einsum" in line.lower()] or str(exc).splitlines()
    message = re.sub(r"\x1b\[[0-9;]*m", "", lines[0]).strip()  # keras colours its messages
    print(f"positions=arange(3) raised {type(exc).__name__}: {message}")
    sys.exit(1)
print(f"positions= works; max difference to the start_index call {np.abs(got - want).max():.3g}")
sys.exit(0 if np.allclose(got, want, atol=1e-6) else 1)
