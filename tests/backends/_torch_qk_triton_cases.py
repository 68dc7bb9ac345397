"""Run by ``tests/backends/test_torch_kernel_shapes.py`` in a subprocess with ``TRITON_INTERPRET=1``: the q/k
pair Triton kernel (one launch) against the oracle and against two single-tensor launches."""

from __future__ import annotations

import numpy as np
import torch
from rope_ref.backends import _torch_triton_qk as tq
from rope_ref.backends import torch as rt

import rope_ref
from rope_ref.testing import assert_rope_close

launches = []
triton, kernel = tq._kernel()


class Counting:
    def __getitem__(self, grid):
        launches.append(grid)
        return kernel[grid]


tq._kernel = lambda: (triton, Counting())

for cfg in (
    rope_ref.RopeConfig(16, layout="half"),
    rope_ref.RopeConfig(16, layout="interleaved", rotary_dim=12),
):
    for dtype in (torch.float32, torch.bfloat16):
        for hq, hk in ((32, 8), (17, 1), (16, 4)):
            base = torch.randn(5, 2, hq + 2 * hk, 16).to(dtype)  # sbhd buffer; q and k are slices of it
            q, k = base[:, :, :hq], base[:, :, hq : hq + hk]
            ids = np.arange(10).reshape(2, 5) * 7
            before = len(launches)
            qr, kr = rt.apply_qk(q, k, torch.as_tensor(ids), cfg, axes="sbhd", kernel="triton")
            assert len(launches) == before + 1, "q and k must go in one launch"
            assert_rope_close(qr, q, ids, cfg, axes="sbhd")
            assert_rope_close(kr, k, ids, cfg, axes="sbhd")
            one_q = rt.apply(q, torch.as_tensor(ids), cfg, axes="sbhd", kernel="triton")
            one_k = rt.apply(k, torch.as_tensor(ids), cfg, axes="sbhd", kernel="triton")
            assert torch.equal(qr, one_q) and torch.equal(kr, one_k)
            v = base[:, :, hq + hk :].clone()
            rt.apply_qk(q, k, torch.as_tensor(ids), cfg, axes="sbhd", kernel="triton", inplace=True)
            assert torch.equal(q, qr) and torch.equal(k, kr) and torch.equal(base[:, :, hq + hk :], v)
print("ok", len(launches))
