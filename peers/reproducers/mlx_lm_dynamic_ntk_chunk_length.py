"""mlx-lm ``rope_utils.DynamicNTKScalingRoPE`` takes the dynamic-NTK length from the call (``offset + L``):
a chunk of a longer sequence (``mlx_lm.generate`` prefills in chunks of ``prefill_step_size``) is rotated
with the base of the chunk's end, not of the sequence, so one prompt is rotated with several bases.

Rotates positions 3000..3007 of an 8192-token sequence (d=16, factor 2, L0 2048) as one chunk (offset
3000) and compares with HF's ``_compute_dynamic_ntk_parameters(seq_len=8192)`` (float64 restatement:
rope_ref.apply with seq_len). Exit status 1 while the bug is present.
"""

import sys

import mlx.core as mx
import numpy as np
from mlx_lm.models.rope_utils import initialize_rope

import rope_ref
from rope_ref.scaling import scaling_from_hf

s = {"rope_type": "dynamic", "factor": 2.0}
rope = initialize_rope(16, 10000.0, False, s, 2048)
x = np.random.default_rng(0).standard_normal((1, 1, 8, 16)).astype(np.float32)
got = np.array(rope(mx.array(x), offset=3000), dtype=np.float64)
cfg = rope_ref.RopeConfig(
    16, layout="half", scaling=scaling_from_hf({**s, "original_max_position_embeddings": 2048})
)
want = rope_ref.apply(x.astype(np.float64), np.arange(3000, 3008), cfg, seq_len=8192)
err = float(np.abs(got - want).max())
print(
    f"chunk at offset 3000 of an 8192-token sequence: max |error| {err:.3g} (base of length 3008, not 8192)"
)
sys.exit(1 if err > 1e-3 else 0)
