"""mlx-lm ``rope_utils.YarnRoPE`` ignores ``truncate=False``: it always floors/ceils the correction range.

Compares 1/_freqs with HF's ``_compute_yarn_parameters`` (float64 restatement: rope_ref.inv_freq).
Exit status 1 while the bug is present.
"""

import sys

import numpy as np
from mlx_lm.models.rope_utils import initialize_rope

import rope_ref
from rope_ref.scaling import scaling_from_hf

s = {
    "rope_type": "yarn",
    "factor": 32.0,
    "original_max_position_embeddings": 4096,
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "truncate": False,
}
rope = initialize_rope(64, 150000.0, False, s, 131072)
got = 1.0 / np.array(rope._freqs, dtype=np.float64)
want = rope_ref.inv_freq(rope_ref.RopeConfig(64, layout="half", base=150000.0, scaling=scaling_from_hf(s)))
rel = np.abs(got - want) / want
print(f"{int((rel > 1e-5).sum())} of {rel.size} pairs off, worst relative error {rel.max():.3g}")
sys.exit(1 if rel.max() > 1e-5 else 0)
