"""Triton kernels of the torch adapter (imported only by :mod:`._torch_triton`, on first use).

``rope_rows`` rotates a tile of rows by RoFormer (arXiv 2104.09864) eq. 34 in one pass (the q/k pair
kernel calls it as the body of each of its programs); see
:func:`rope_ref.backends._torch_triton.rotate_triton` for the launch and the argument meaning.
"""

import triton
import triton.language as tl

__all__ = ["rope_rows"]


@triton.jit
def to_bf16_rtne(y):
    """float32 -> bfloat16, round to nearest even, by bits (Triton's interpreter truncates)."""
    bits = y.to(tl.uint32, bitcast=True)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    rounded = tl.where(y != y, (bits >> 16) | 0x40, rounded)  # NaN stays a (quiet) NaN
    return rounded.to(tl.uint16).to(tl.bfloat16, bitcast=True)


@triton.jit
def round_out(y, out_ty: tl.constexpr):
    if out_ty == tl.bfloat16:
        return to_bf16_rtne(y.to(tl.float32))
    return y.to(out_ty)


@triton.jit
def rope_rows(
    x_ptr, cos_ptr, sin_ptr, out_ptr,
    n_rows, size1, size2, size3,
    sx0, sx1, sx2, sx3, sxd,
    sc0, sc1, sc2, sc3, scd,
    ss0, ss1, ss2, ss3, ssd,
    so0, so1, so2, so3,
    n_pairs, n_pass, first_tile,
    INTERLEAVED: tl.constexpr, FP64: tl.constexpr,
    ROWS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_P: tl.constexpr,
):  # fmt: skip
    """Rotate rows ``tile * ROWS ..`` of one tensor, ``tile = program_id - first_tile`` (RoFormer eq. 34,
    one rounding per operation). Launched on its own with ``first_tile = 0``; the q/k pair kernel calls
    it once per tensor."""
    tile = tl.program_id(0) - first_tile
    rows = tile.to(tl.int64) * ROWS + tl.arange(0, ROWS).to(tl.int64)
    row_ok = rows < n_rows
    # The flat row index -> up to four leading indices (row-major over size0..size3).
    i3 = rows % size3
    rest = rows // size3
    i2 = rest % size2
    rest = rest // size2
    i1 = rest % size1
    i0 = rest // size1
    x_row = i0 * sx0 + i1 * sx1 + i2 * sx2 + i3 * sx3
    c_row = i0 * sc0 + i1 * sc1 + i2 * sc2 + i3 * sc3
    s_row = i0 * ss0 + i1 * ss1 + i2 * ss2 + i3 * ss3
    o_row = i0 * so0 + i1 * so1 + i2 * so2 + i3 * so3
    pair = tl.arange(0, BLOCK_N)
    ok = row_ok[:, None] & (pair < n_pairs)[None, :]
    if INTERLEAVED:
        col_a = 2 * pair
        col_b = 2 * pair + 1
    else:
        col_a = pair
        col_b = pair + n_pairs
    compute = tl.float64 if FP64 else tl.float32
    xa = tl.load(x_ptr + x_row[:, None] + col_a[None, :] * sxd, mask=ok).to(compute)
    xb = tl.load(x_ptr + x_row[:, None] + col_b[None, :] * sxd, mask=ok).to(compute)
    c = tl.load(cos_ptr + c_row[:, None] + pair[None, :] * scd, mask=ok).to(compute)
    s = tl.load(sin_ptr + s_row[:, None] + pair[None, :] * ssd, mask=ok).to(compute)
    out_ty = out_ptr.dtype.element_ty
    tl.store(out_ptr + o_row[:, None] + col_a[None, :], round_out(xa * c - xb * s, out_ty), mask=ok)
    tl.store(out_ptr + o_row[:, None] + col_b[None, :], round_out(xb * c + xa * s, out_ty), mask=ok)
    if BLOCK_P > 0:
        col_p = 2 * n_pairs + tl.arange(0, BLOCK_P)
        ok_p = row_ok[:, None] & (tl.arange(0, BLOCK_P) < n_pass)[None, :]
        kept = tl.load(x_ptr + x_row[:, None] + col_p[None, :] * sxd, mask=ok_p)
        tl.store(out_ptr + o_row[:, None] + col_p[None, :], kept, mask=ok_p)
