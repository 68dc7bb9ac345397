"""The q/k pair Triton kernel (issue 16): q and k, with different head counts, in one launch.

Programs ``0 .. programs_q - 1`` rotate tiles of q's rows, the rest tiles of k's rows; each tile is
:func:`~rope_ref.backends._triton_kernels.rope_rows` (RoFormer eq. 34, one rounding).
Imported only by :mod:`._torch_triton_qk`, on first use.
"""

import triton
import triton.language as tl

from ._triton_kernels import rope_rows

__all__ = ["rope_rows_qk"]


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
        rope_rows(q_ptr, qc_ptr, qs_ptr, qo_ptr, q_rows, q1, q2, q3,
              sq0, sq1, sq2, sq3, sqd, sqc0, sqc1, sqc2, sqc3, sqcd, sqs0, sqs1, sqs2, sqs3, sqsd,
              sqo0, sqo1, sqo2, sqo3, n_pairs, n_pass, 0,
              INTERLEAVED, FP64, ROWS, BLOCK_N, BLOCK_P)  # fmt: skip
    else:
        rope_rows(k_ptr, kc_ptr, ks_ptr, ko_ptr, k_rows, k1, k2, k3,
              sk0, sk1, sk2, sk3, skd, skc0, skc1, skc2, skc3, skcd, sks0, sks1, sks2, sks3, sksd,
              sko0, sko1, sko2, sko3, n_pairs, n_pass, programs_q,
              INTERLEAVED, FP64, ROWS, BLOCK_N, BLOCK_P)  # fmt: skip
