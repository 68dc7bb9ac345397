"""mlx-lm ``YarnRoPE`` ignores an explicit YaRN ``attention_factor`` (it uses get_mscale(factor)).

Exit status 1 while the bug is present.
"""

import sys

from mlx_lm.models.rope_utils import initialize_rope

s = {"rope_type": "yarn", "factor": 64.0, "original_max_position_embeddings": 4096, "attention_factor": 1.0}
rope = initialize_rope(64, 10000.0, False, s, 262144)
print(f"mlx-lm attention factor {rope.mscale:.6g}; HF uses the explicit attention_factor 1.0")
sys.exit(1 if abs(rope.mscale - 1.0) > 1e-6 else 0)
