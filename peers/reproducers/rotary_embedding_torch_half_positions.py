"""rotary-embedding-torch builds positions as ``arange(seq_len, dtype=t.dtype)`` (``get_seq_pos``): bf16
inputs get wrong positions from 257 on, fp16 from 2049; the bad angles land in ``cached_freqs`` and are
reused by later float32 calls.

Exit status 1 while the bug is present.
"""

import sys

import torch
from rotary_embedding_torch import RotaryEmbedding

rope = RotaryEmbedding(dim=64)
q = torch.zeros(1, 2100, 64)
q[0, 2049, 0] = 1.0  # pair 0 (inv_freq 1) at position 2049
bad = []
for dtype, pos in ((torch.bfloat16, 257), (torch.float16, 2049)):
    fresh = RotaryEmbedding(dim=64)
    t = torch.zeros(1, pos + 1, 64, dtype=dtype)
    t[0, pos, 0] = 1.0
    got = fresh.rotate_queries_or_keys(t)[0, pos, :2].float()
    want = torch.tensor([torch.cos(torch.tensor(float(pos))), torch.sin(torch.tensor(float(pos)))])
    err = (got - want).abs().max().item()
    print(f"{dtype}: position {pos} rotated by {err:.3g} away from the right angle")
    bad.append(err > 0.05)
rope.rotate_queries_or_keys(
    torch.zeros(1, 2100, 64, dtype=torch.bfloat16)
)  # fills cached_freqs in bf16 positions
got = rope.rotate_queries_or_keys(q)[0, 2049, :2]
err = (
    (got - torch.tensor([torch.cos(torch.tensor(2049.0)), torch.sin(torch.tensor(2049.0))]))
    .abs()
    .max()
    .item()
)
print(f"float32 call after a bf16 call: error {err:.3g} at position 2049 (cached_freqs reused)")
bad.append(err > 0.05)
sys.exit(1 if any(bad) else 0)
