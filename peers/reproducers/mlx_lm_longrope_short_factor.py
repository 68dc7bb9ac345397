"""mlx-lm ``SuScaledRoPE`` (Phi-3 LongRoPE) never uses ``short_factor``: short sequences get long factors.

Exit status 1 while the bug is present.
"""

import sys

import mlx.core as mx
import numpy as np
from mlx_lm.models.rope_utils import initialize_rope

short = [1.0 + 0.05 * i for i in range(16)]
long = [1.25**i for i in range(16)]
s = {
    "rope_type": "longrope",
    "short_factor": short,
    "long_factor": long,
    "original_max_position_embeddings": 4096,
    "factor": 32.0,
}
rope = initialize_rope(32, 10000.0, False, s, 131072)
x = mx.zeros((1, 4001, 32))
x[0, 4000, 15] = 1.0  # pair 15 at position 4000 of a 4001-token sequence (< 4096: short factors apply)
y = np.array(rope(x))[0, 4000]
inv_short = 1.0 / (short[15] * 10000.0 ** (30 / 32))
print(
    f"cos at position 4000, pair 15: got {y[15] / rope._scale:.6f}, "
    f"short factors give {np.cos(4000 * inv_short):.6f}"
)
sys.exit(1 if abs(y[15] / rope._scale - np.cos(4000 * inv_short)) > 1e-4 else 0)
