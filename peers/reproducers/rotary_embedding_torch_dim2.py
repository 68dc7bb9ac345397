"""rotary-embedding-torch: ``RotaryEmbedding(dim=2)`` raises ZeroDivisionError, because ``__init__`` always
evaluates ``theta_rescale_factor ** (dim / (dim - 2))`` (even for the default factor 1).

Exit status 1 while the bug is present.
"""

import sys

from rotary_embedding_torch import RotaryEmbedding

try:
    RotaryEmbedding(dim=2)
except ZeroDivisionError as exc:
    print(f"RotaryEmbedding(dim=2) raises ZeroDivisionError: {exc}")
    sys.exit(1)
print("RotaryEmbedding(dim=2) constructs")
