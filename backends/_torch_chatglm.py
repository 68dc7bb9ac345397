"""ChatGLM-6B's 2D positions and rotation, natively in torch.

Semantics are those of :mod:`rope_ref.chatglm`; the source is cited there (THUDM/chatglm-6b
``modeling_chatglm.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rope_ref.chatglm import _check_base, _check_flag, _check_precision, _check_token_ids
from rope_ref.config import RopeConfig

from ._torch_checks import as_positions, check_angle_dtype, check_broadcast, check_kernel, check_x
from ._torch_kernels import apply
from ._torch_tables import expand_tables

__all__ = ["chatglm_position_ids", "chatglm_apply_2d"]


def _first_index(hit: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per row: index of the first True (``seq`` if none) and whether there is one."""
    seq = hit.shape[-1]
    ar = torch.arange(seq, device=hit.device)
    return torch.where(hit, ar, seq).amin(dim=-1), hit.any(dim=-1)


def chatglm_position_ids(
    input_ids: Any,
    *,
    bos_token_id: int,
    mask_token_id: int,
    gmask_token_id: int,
    position_encoding_2d: bool,
) -> torch.Tensor:
    """ChatGLM-6B ``get_position_ids`` (final release), vectorised over rows: int64 tensor.

    Context length = first bos (``<sop>``); mask position = first [gMASK] if the row has one, else first
    [MASK]. 2D: ``(batch, 2, seq)`` with positions frozen at the mask position from the context length on,
    and block ids ``0 .. 0, 1, 2, ...``; 1D: ``(batch, seq)``, frozen only for [MASK] rows.
    """
    if not isinstance(input_ids, torch.Tensor):
        input_ids = torch.as_tensor(np.asarray(input_ids))
    if input_ids.dtype.is_floating_point or input_ids.is_complex() or input_ids.dtype == torch.bool:
        raise TypeError(f"input_ids must be an integer tensor of token ids, got dtype {input_ids.dtype}")
    if input_ids.ndim != 2:
        raise ValueError(f"input_ids must have shape (batch, seq), got shape {tuple(input_ids.shape)}")
    position_encoding_2d = _check_flag(position_encoding_2d, "position_encoding_2d")
    bos, mask, gmask = _check_token_ids(bos_token_id, mask_token_id, gmask_token_id)
    ids = input_ids.to(torch.int64)
    seq = ids.shape[1]
    ctx, has_bos = _first_index(ids == bos)
    gpos, has_g = _first_index(ids == gmask)
    mpos, has_m = _first_index(ids == mask)
    if not bool(has_bos.all()):
        row = int(torch.nonzero(~has_bos)[0, 0])
        raise ValueError(
            f"input_ids row {row} has no bos (<sop>) token {bos}; ChatGLM-6B needs one per row"
        )
    if not bool((has_g | has_m).all()):
        row = int(torch.nonzero(~(has_g | has_m))[0, 0])
        raise ValueError(
            f"input_ids row {row} has neither a [gMASK] token {gmask} nor a [MASK] token "
            f"{mask}; ChatGLM-6B needs one per row"
        )
    mask_position = torch.where(has_g, gpos, mpos)
    ar = torch.arange(seq, device=ids.device).expand(ids.shape[0], seq)
    after = ar >= ctx[:, None]
    freeze = after if position_encoding_2d else after & ~has_g[:, None]
    pos = torch.where(freeze, mask_position[:, None], ar)
    if not position_encoding_2d:
        return pos
    block = torch.where(after, ar - ctx[:, None] + 1, 0)
    return torch.stack((pos, block), dim=1)


def _fp16_tables(ids: torch.Tensor, dim: int, base: float, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The released fp16 table rows, computed the way the released ``RotaryEmbedding`` does in torch.

    ``inv_freq`` float32 then ``.half()``; positions as float16; fp16 product; cos/sin in fp16.
    """
    if ids.dtype.is_floating_point:
        if not bool((ids == torch.floor(ids)).all()):
            raise ValueError(
                f"{name} must be integers under precision='chatglm-6b-fp16' (they index a table)"
            )
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) > 65504):
        raise ValueError(
            f"{name} must be in 0..65504 under precision='chatglm-6b-fp16', got "
            f"{int(ids.min())}..{int(ids.max())}"
        )
    with torch.autocast(ids.device.type, enabled=False):
        exponent = torch.arange(0, dim, 2, dtype=torch.float32, device=ids.device) / dim
        inv = (1.0 / (torch.tensor(base, dtype=torch.float32, device=ids.device) ** exponent)).half()
        freqs = ids.to(torch.float16).unsqueeze(-1) * inv
        return torch.cos(freqs), torch.sin(freqs)


def chatglm_apply_2d(
    x: torch.Tensor,
    position_ids: Any,
    block_position_ids: Any,
    *,
    base: float,
    precision: str,
    angle_dtype: torch.dtype = torch.float32,
    compute_dtype: Any = None,
    kernel: str = "torch",
) -> torch.Tensor:
    """ChatGLM-6B 2D rotary: first half of each head by ``position_ids``, second half by block ids.

    ``precision="float64"``: each half is a half-layout RoPE over ``head_dim/2`` channels, computed with
    this adapter's policy (angles in ``angle_dtype``, rotation by ``kernel``). ``"chatglm-6b-fp16"``:
    the released model's fp16 arithmetic in torch (``q * cos + rotate_half(q) * sin``, every op
    rounded to float16); returns fp16. That arithmetic is the emulation's definition, so it always runs
    as eager torch ops: ``kernel`` and ``angle_dtype`` are validated but do not change it, and a
    ``compute_dtype`` is refused.
    """
    precision = _check_precision(precision)
    base = _check_base(base)
    x = check_x(x, None)
    if x.shape[-1] % 4:
        raise ValueError(f"x.shape[-1] (head_dim) must be a multiple of 4, got x.shape={tuple(x.shape)}")
    half = x.shape[-1] // 2
    lead = tuple(x.shape[:-1])
    pos = as_positions(position_ids, x.device, "position_ids")
    blk = as_positions(block_position_ids, x.device, "block_position_ids")
    check_broadcast(pos, lead, "position_ids")
    check_broadcast(blk, lead, "block_position_ids")
    parts = []
    if precision == "float64":
        cfg = RopeConfig(half, layout="half", base=base)
        for sl, ids in ((slice(0, half), pos), (slice(half, None), blk)):
            parts.append(
                apply(
                    x[..., sl], ids, cfg, angle_dtype=angle_dtype, compute_dtype=compute_dtype, kernel=kernel
                )
            )
        return torch.cat(parts, dim=-1)
    # The float64 path validates these in apply; this path never reaches it.
    check_kernel(kernel)
    check_angle_dtype(angle_dtype)
    if compute_dtype is not None:
        raise ValueError(
            f"compute_dtype applies only to precision='float64'; {precision!r} fixes its own float16 "
            f"arithmetic, got compute_dtype={compute_dtype!r}"
        )
    x16 = x.to(torch.float16)
    q = half // 2
    for sl, ids, name in (
        (slice(0, half), pos, "position_ids"),
        (slice(half, None), blk, "block_position_ids"),
    ):
        cos, sin = expand_tables(*_fp16_tables(ids, half, base, name), x.ndim)
        cos, sin = torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1)
        part = x16[..., sl]
        rotated = torch.cat((-part[..., q:], part[..., :q]), dim=-1)
        parts.append(part * cos + rotated * sin)
    return torch.cat(parts, dim=-1)
