"""The q/k pair Triton kernel (issue 16): q and k, with different head counts, in one launch.

Programs ``0 .. programs_q - 1`` rotate tiles of q's rows, the rest tiles of k's rows; each tile is
:func:`~rope_ref.backends._triton_kernels.rope_rows`'s computation (RoFormer eq. 34, one rounding).
Imported only by :mod:`._torch_triton_qk`, on first use.
"""

import triton
import triton.language as tl

from ._triton_kernels import round_out

__all__ = ["rope_rows_qk"]


@triton.jit
def _tile(
    tile, x_ptr, cos_ptr, sin_ptr, out_ptr,
    n_rows, size1, size2, size3,
    sx0, sx1, sx2, sx3, sxd,
    sc0, sc1, sc2, sc3, scd,
    ss0, ss1, ss2, ss3, ssd,
    so0, so1, so2, so3,
    n_pairs, n_pass,
    INTERLEAVED: tl.constexpr, FP64: tl.constexpr,
    ROWS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_P: tl.constexpr,
):  # fmt: skip
    rows = tile.to(tl.int64) * ROWS + tl.arange(0, ROWS).to(tl.int64)
    row_ok = rows < n_rows
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


@triton.jit
def rope_rows_qk(
    q_ptr, qc_ptr, qs_ptr, qo_ptr, q_rows, q1, q2, q3,
    sq0, sq1, sq2, sq3, sqd, sqc0, sqc1, sqc2, sqc3, sqcd,
    sqs0, sqs1, sqs2, sqs3, sqsd, sqo0, sqo1, sqo2, sqo3,
    k_ptr, kc_ptr, ks_ptr, ko_ptr, k_rows, k1, k2, k3,
    sk0, sk1, sk2, sk3, skd, skc0, skc1, skc2, skc3, skcd,
    sks0, sks1, sks2, sks3, sksd, sko0, sko1, sko2, sko3,
    n_pairs, n_pass, programs_q,
    INTERLEAVED: tl.constexpr, FP64: tl.constexpr,
    ROWS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_P: tl.constexpr,
):  # fmt: skip
    pid = tl.program_id(0)
    if pid < programs_q:
        _tile(pid, q_ptr, qc_ptr, qs_ptr, qo_ptr, q_rows, q1, q2, q3,
              sq0, sq1, sq2, sq3, sqd, sqc0, sqc1, sqc2, sqc3, sqcd, sqs0, sqs1, sqs2, sqs3, sqsd,
              sqo0, sqo1, sqo2, sqo3, n_pairs, n_pass, INTERLEAVED, FP64, ROWS, BLOCK_N, BLOCK_P)  # fmt: skip
    else:
        _tile(pid - programs_q, k_ptr, kc_ptr, ks_ptr, ko_ptr, k_rows, k1, k2, k3,
              sk0, sk1, sk2, sk3, skd, skc0, skc1, skc2, skc3, skcd, sks0, sks1, sks2, sks3, sksd,
              sko0, sko1, sko2, sko3, n_pairs, n_pass, INTERLEAVED, FP64, ROWS, BLOCK_N, BLOCK_P)  # fmt: skip
