"""RoFormer's long-term decay bound (§3.4.3, eqs. 35-37), natively in torch.

Semantics are :func:`rope_ref.decay.relative_upper_bound`; the source is cited there.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rope_ref.config import RopeConfig
from rope_ref.frequencies import resolve_seq_len

from ._torch_checks import as_positions
from ._torch_tables import angle_tables, freq_table

__all__ = ["decay_upper_bound"]


def decay_upper_bound(
    distances: Any, cfg: RopeConfig, *, seq_len: int | None = None, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """RoFormer's relative upper bound (1/(d/2)) sum_{j=1}^{d/2} |S_j(r)|, S_j = sum_{i<j} e^{i r theta_i}.

    RoFormer §3.4.3 (text after eq. 37, Figure 2); ``d`` is the rotary width. Computed in ``dtype``
    with cumulative sums over the pairs. Length-dependent scalings see ``max|r| + 1`` unless ``seq_len``.
    """
    device = distances.device if isinstance(distances, torch.Tensor) else torch.device("cpu")
    r = as_positions(distances, device, "distances")
    if seq_len is None and r.numel():
        seq_len = resolve_seq_len(np.asarray([float(r.abs().max())]), cfg, None)
    inv, _ = freq_table(cfg, seq_len, dtype, r.device)
    cos, sin = angle_tables(r, inv, 1.0)
    return torch.hypot(torch.cumsum(cos, dim=-1), torch.cumsum(sin, dim=-1)).mean(dim=-1)
