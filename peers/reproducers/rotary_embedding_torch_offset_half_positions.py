"""rotary-embedding-torch, offset form: ``rotate_queries_or_keys(t, offset=...)`` on a bf16 (or fp16)
tensor builds its positions as ``arange(seq_len, dtype=t.dtype) + offset`` (``get_seq_pos``), so a KV-cache
offset past 256 (bf16) or 2048 (fp16) rotates tokens by rounded positions. Checked against a float64
rotation of the same bf16/fp16 input.

Exit status 1 while the bug is present.
"""

import sys

import numpy as np
import torch
from rotary_embedding_torch import RotaryEmbedding

bad = []
for dtype, offset in ((torch.bfloat16, 1000), (torch.float16, 2500)):
    rope = RotaryEmbedding(dim=16)  # fresh module: nothing cached
    t = torch.zeros(1, 1, 7, 16, dtype=dtype)  # (batch, heads, seq, dim): the default seq_dim=-2
    t[0, 0, :, 0] = 1.0  # pair 0 (inv_freq 1): its output is (cos m, sin m)
    got = rope.rotate_queries_or_keys(t, offset=offset)[0, 0, :, :2].double().numpy()
    m = offset + np.arange(7, dtype=np.float64)
    want = np.stack([np.cos(m), np.sin(m)], axis=-1)
    err = float(np.abs(got - want).max())
    print(f"{dtype}, offset={offset}: worst error {err:.3g} (rounding of the output alone is < 0.01)")
    bad.append(err > 0.05)
sys.exit(1 if any(bad) else 0)
