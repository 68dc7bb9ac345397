// Fused rotary position embedding kernels for rope_ref's CuPy backend (rope_ref.backends.cupy).
//
// RoFormer (Su et al., arXiv 2104.09864) eq. 34: for every channel pair (a, b) of the layout,
//     y_a = x_a cos(m theta_i) - x_b sin(m theta_i),   y_b = x_b cos(m theta_i) + x_a sin(m theta_i),
// with cos and sin multiplied by the attention factor (HF transformers `apply_rotary_pos_emb`).
// Layout "half" pairs channel i with i + rotary_dim/2; "interleaved" pairs 2i with 2i+1.
// Channels rotary_dim..head_dim-1 are copied bit for bit.
//
// One pass: every element of x is read once and every element of the output written once. A thread
// owns one (token, lane): lane < n_pairs rotates pair `lane`, other lanes copy one pass-through
// channel. The angle and its sincosf are computed once per (token, pair) and reused across the
// "inner" axes along which the positions broadcast (typically the heads), so the transcendental
// and index arithmetic is amortised over many elements.
//
// Angles: (float)(position * inv_freq) with position and inv_freq in float64, i.e. the exact product
// rounded once to float32 (relative error <= 2^-24), then sincosf (CUDA C Programming Guide,
// "Mathematical Functions": sinf/cosf maximum error 2 ulp over the full range; no fast-math
// intrinsics). The rotation is computed in float32; outputs are rounded to nearest even.
//
// Indexing is 64-bit throughout (tensors beyond 2^31 elements). Strides are in elements and may be
// arbitrary for the leading axes; the last axis must be contiguous. The kernel-shape kernels
// (rope_qkv_apply_*, issue 16) take strides for every axis, the channel axis included, rotate q and k
// (any head counts) in one launch, copy or leave V, and form positions from ids, offsets or cu_seqlens.
//
// The source is self-contained (no #include): it compiles unchanged under `nvcc -ptx` and under
// NVRTC (cupy.RawModule) without locating cuda_fp16.h / cuda_bf16.h. fp16 conversions use the PTX
// `cvt` instructions that cuda_fp16.h wraps; bf16 conversions are bit manipulations (bf16 is the
// upper half of an IEEE float32; rounding is round-to-nearest-even, NaN kept quiet).

#define ROPE_MAX_OUTER 4
#define ROPE_UNROLL 4

typedef long long i64;
typedef unsigned long long u64;

struct IoF32 {
    typedef float storage;
    static __device__ __forceinline__ float load(float v) { return v; }
    static __device__ __forceinline__ float store(float f) { return f; }
};

struct IoF16 {
    typedef unsigned short storage;
    static __device__ __forceinline__ float load(unsigned short v) {
#ifdef __CUDA_ARCH__
        float f;
        asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v));
        return f;
#else  // host emulation (tests/cuda_host): exact binary16 -> binary32
        const unsigned int sign = ((unsigned int)v & 0x8000u) << 16, e = ((unsigned int)v >> 10) & 0x1fu;
        const unsigned int m = (unsigned int)v & 0x3ffu;
        if (e == 0x1fu) return __uint_as_float(sign | 0x7f800000u | (m << 13));  // inf, NaN
        if (e != 0) return __uint_as_float(sign | ((e + 112u) << 23) | (m << 13));
        const float mag = (float)m * 5.9604644775390625e-8f;  // subnormal or zero: m * 2^-24, exact
        return sign ? -mag : mag;
#endif
    }
    static __device__ __forceinline__ unsigned short store(float f) {
#ifdef __CUDA_ARCH__
        unsigned short v;
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(v) : "f"(f));
        return v;
#else  // host emulation (tests/cuda_host): binary32 -> binary16, round to nearest even
        const unsigned int u = __float_as_uint(f), a = u & 0x7fffffffu, sign = (u >> 16) & 0x8000u;
        if (a > 0x7f800000u) return (unsigned short)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // quiet NaN
        if (a >= 0x477ff000u) return (unsigned short)(sign | 0x7c00u);  // |f| >= 65520: inf
        if (a >= 0x38800000u) {  // normal binary16: rebias the exponent, round the 13 dropped bits
            const unsigned int r = a - 0x38000000u;
            return (unsigned short)(sign | ((r + 0xfffu + ((r >> 13) & 1u)) >> 13));
        }
        // subnormal or zero: adding 0.5f rounds |f| to a multiple of 2^-24 (nearest even) in hardware
        return (unsigned short)(sign | (__float_as_uint(__uint_as_float(a) + 0.5f) - 0x3f000000u));
#endif
    }
};

struct IoBF16 {
    typedef unsigned short storage;
    static __device__ __forceinline__ float load(unsigned short v) {
        return __uint_as_float(((unsigned int)v) << 16);
    }
    static __device__ __forceinline__ unsigned short store(float f) {
        unsigned int u = __float_as_uint(f);
        if ((u & 0x7fffffffu) > 0x7f800000u) {
            return (unsigned short)((u >> 16) | 0x0040u);  // NaN: keep it a (quiet) NaN
        }
        u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
        return (unsigned short)(u >> 16);
    }
};

// Shape of one launch: the leading axes of x split into "outer" axes (one thread row per index)
// and up to two "inner" axes looped over inside the thread (the positions do not vary along them).
struct RopeShape {
    i64 n_outer;
    i64 o_size[ROPE_MAX_OUTER];
    i64 o_xs[ROPE_MAX_OUTER];
    i64 o_os[ROPE_MAX_OUTER];
    i64 o_ps[ROPE_MAX_OUTER];
    i64 i_size0, i_size1;
    i64 i_xs0, i_xs1, i_os0, i_os1;
};

// Offsets of outer index t in x, out and positions. 32-bit division when t fits (the common case).
__device__ __forceinline__ void outer_offsets(const RopeShape& s, i64 t, i64& xo, i64& oo, i64& po) {
    xo = 0;
    oo = 0;
    po = 0;
    if (s.n_outer <= 0xffffffffLL) {
        unsigned int r = (unsigned int)t;
#pragma unroll
        for (int d = ROPE_MAX_OUTER - 1; d >= 0; --d) {
            const unsigned int n = (unsigned int)s.o_size[d];
            const unsigned int q = r / n;
            const i64 k = (i64)(r - q * n);
            r = q;
            xo += k * s.o_xs[d];
            oo += k * s.o_os[d];
            po += k * s.o_ps[d];
        }
    } else {
        u64 r = (u64)t;
#pragma unroll
        for (int d = ROPE_MAX_OUTER - 1; d >= 0; --d) {
            const u64 n = (u64)s.o_size[d];
            const u64 q = r / n;
            const i64 k = (i64)(r - q * n);
            r = q;
            xo += k * s.o_xs[d];
            oo += k * s.o_os[d];
            po += k * s.o_ps[d];
        }
    }
}

// Rotate pair (xa, xb) of n rows (row i at x + i * xs) into channels (oa, ob) of the rows at out + i * os,
// by the scaled cos/sin; `identity` copies the pair bit for bit instead (position 0 with attention
// factor 1, or a V head that is only copied). Channel offsets are in elements (channel index times the
// channel stride). The rows of one call are disjoint (distinct elements), so the ROPE_UNROLL loads of a
// step may all be issued before its stores, in place too.
template <class Io>
__device__ __forceinline__ void rope_rotate_span(const typename Io::storage* x, typename Io::storage* out, i64 n,
                                                 i64 xs, i64 os, i64 xa, i64 xb, i64 oa, i64 ob, float cs,
                                                 float sn, bool identity) {
    typedef typename Io::storage T;
    i64 i = 0;
    for (; i + ROPE_UNROLL <= n; i += ROPE_UNROLL) {
        T va[ROPE_UNROLL], vb[ROPE_UNROLL];
#pragma unroll
        for (int u = 0; u < ROPE_UNROLL; ++u) {
            va[u] = x[(i + u) * xs + xa];
            vb[u] = x[(i + u) * xs + xb];
        }
#pragma unroll
        for (int u = 0; u < ROPE_UNROLL; ++u) {
            T ya = va[u], yb = vb[u];
            if (!identity) {
                const float a = Io::load(va[u]), b = Io::load(vb[u]);
                ya = Io::store(a * cs - b * sn);
                yb = Io::store(b * cs + a * sn);
            }
            out[(i + u) * os + oa] = ya;
            out[(i + u) * os + ob] = yb;
        }
    }
    for (; i < n; ++i) {
        const T va = x[i * xs + xa], vb = x[i * xs + xb];
        T ya = va, yb = vb;
        if (!identity) {
            const float a = Io::load(va), b = Io::load(vb);
            ya = Io::store(a * cs - b * sn);
            yb = Io::store(b * cs + a * sn);
        }
        out[i * os + oa] = ya;
        out[i * os + ob] = yb;
    }
}

// Copy channel xc of n rows (row i at x + i * xs) to channel oc of the rows at out + i * os, bit for bit.
template <class T>
__device__ __forceinline__ void rope_copy_span(const T* x, T* out, i64 n, i64 xs, i64 os, i64 xc, i64 oc) {
    for (i64 i = 0; i < n; ++i) {
        out[i * os + oc] = x[i * xs + xc];
    }
}

// Rotate pair (ia, ib) in every inner row of one outer row (x at xo, out at oo) by the scaled cos/sin;
// `identity` copies the pair bit for bit instead (position 0 with attention factor 1).
template <class Io>
__device__ __forceinline__ void rope_rotate_rows(const typename Io::storage* x, typename Io::storage* out,
                                                 i64 xo, i64 oo, const RopeShape& s, i64 ia, i64 ib, float cs,
                                                 float sn, bool identity) {
    for (i64 i0 = 0; i0 < s.i_size0; ++i0) {
        rope_rotate_span<Io>(x + xo + i0 * s.i_xs0, out + oo + i0 * s.i_os0, s.i_size1, s.i_xs1, s.i_os1, ia, ib,
                             ia, ib, cs, sn, identity);
    }
}

// cos and sin of the float32 angle fl32(m * freq), times the attention factor (the sine also times
// sin_sign: -1 rotates by -m theta). Returns whether the rotation is the identity (position 0 with factor
// 1), which callers copy bit for bit (signed zeros, inf). Shared by every apply kernel.
__device__ __forceinline__ bool rope_scaled_cos_sin(double m, double freq, float factor, float sin_sign,
                                                    float& cs, float& sn) {
    const float angle = (float)(m * freq);
    sincosf(angle, &sn, &cs);
    cs *= factor;
    sn *= factor * sin_sign;
    return (m == 0.0) && (factor == 1.0f);
}

// One pair at position m: cos/sin of the float32 angle fl32(m * freq) times the attention factor, then the
// rotation over every row of the lane (eq. 34). Position 0 with factor 1 is the identity, copied bit for
// bit (signed zeros, inf). Shared by the 1D and the multi-axis kernels.
template <class Io>
__device__ __forceinline__ void rope_pair_rows(const typename Io::storage* x, typename Io::storage* out, i64 xo,
                                               i64 oo, const RopeShape& s, i64 ia, i64 ib, double m,
                                               double freq, float factor, float sin_sign) {
    float sn, cs;
    const bool identity = rope_scaled_cos_sin(m, freq, factor, sin_sign, cs, sn);
    rope_rotate_rows<Io>(x, out, xo, oo, s, ia, ib, cs, sn, identity);
}

// Copy pass-through channel c in every inner row of one outer row.
template <class T>
__device__ __forceinline__ void rope_copy_rows(const T* x, T* out, i64 xo, i64 oo, const RopeShape& s, i64 c) {
    for (i64 i0 = 0; i0 < s.i_size0; ++i0) {
        rope_copy_span(x + xo + i0 * s.i_xs0, out + oo + i0 * s.i_os0, s.i_size1, s.i_xs1, s.i_os1, c, c);
    }
}

template <class Io>
__device__ __forceinline__ void rope_apply_impl(
    const typename Io::storage* x, typename Io::storage* out, const double* positions,
    const double* inv_freq, const RopeShape& s, int n_pairs, int n_pass, int half_layout,
    int copy_pass, float factor, float sin_sign) {
    const int lanes = n_pairs + (copy_pass ? n_pass : 0);
    const i64 rows_per_step = (i64)gridDim.x * blockDim.y;
    for (i64 t = (i64)blockIdx.x * blockDim.y + threadIdx.y; t < s.n_outer; t += rows_per_step) {
        i64 xo, oo, po;
        outer_offsets(s, t, xo, oo, po);
        const double m = positions[po];
        for (int lane = threadIdx.x; lane < lanes; lane += blockDim.x) {
            if (lane < n_pairs) {
                const i64 ia = half_layout ? lane : 2 * (i64)lane;
                const i64 ib = half_layout ? lane + (i64)n_pairs : 2 * (i64)lane + 1;
                rope_pair_rows<Io>(x, out, xo, oo, s, ia, ib, m, inv_freq[lane], factor, sin_sign);
            } else {
                rope_copy_rows(x, out, xo, oo, s, 2 * (i64)n_pairs + (lane - n_pairs));  // pass-through
            }
        }
    }
}

#define ROPE_APPLY_KERNEL(NAME, IO)                                                                   \
    extern "C" __global__ void NAME(const IO::storage* x, IO::storage* out, const double* positions, \
                                    const double* inv_freq, const RopeShape shape, int n_pairs,       \
                                    int n_pass, int half_layout, int copy_pass, float factor,         \
                                    float sin_sign) {                                                 \
        rope_apply_impl<IO>(x, out, positions, inv_freq, shape, n_pairs, n_pass, half_layout,         \
                            copy_pass, factor, sin_sign);                                             \
    }

ROPE_APPLY_KERNEL(rope_apply_f32, IoF32)
ROPE_APPLY_KERNEL(rope_apply_f16, IoF16)
ROPE_APPLY_KERNEL(rope_apply_bf16, IoBF16)

// cos and sin of (float)(position * inv_freq), times the attention factor, float32, shape
// (n_positions, n_pairs) row-major. Same angle rule as the apply kernels.
extern "C" __global__ void rope_cos_sin_f32(const double* positions, const double* inv_freq, i64 n_positions,
                                            int n_pairs, float factor, float* cos_out, float* sin_out) {
    const i64 total = n_positions * (i64)n_pairs;
    const i64 step = (i64)gridDim.x * blockDim.x;
    for (i64 k = (i64)blockIdx.x * blockDim.x + threadIdx.x; k < total; k += step) {
        const i64 p = k / n_pairs;
        const int j = (int)(k - p * n_pairs);
        const float angle = (float)(positions[p] * inv_freq[j]);
        float sn, cs;
        sincosf(angle, &sn, &cs);
        cos_out[k] = cs * factor;
        sin_out[k] = sn * factor;
    }
}

// The shapes real kernels see (issue 16): q, k and v of one attention layer in one launch.
//
// Each tensor is addressed through element strides for all four of its axes (batch b, token s, head h,
// channel d; an axis a tensor lacks has size 1 and stride 0; the packed-token axis t of "thd" is s with
// one batch row), so transposed views, slices of a packed qkv projection and non-unit strides are read
// and written where they lie, without copies. q has heads[0] heads, k heads[1] (GQA: any count; the
// positions do not depend on the head), v heads[2]: v is only copied (its output is the input bit for
// bit; heads[2] is 0 in place, where v is never touched). Positions per (b, s), one of:
//   ROPE_POS_IDS     ids[b * p_b + s * p_s] (float64 ids, any strides);
//   ROPE_POS_OFFSET  base + table[off_at + b] (per batch row; off_at < 0: none) + s;
//   ROPE_POS_VARLEN  s - cu[j] + base + table[off_at + j] (off_at < 0: none), where cu = table[0..n_seq] are
//                    the cu_seqlens and j the sequence holding token s (binary search: the last j < n_seq
//                    with cu[j] <= s, which skips empty sequences). Reads stay inside table[0..n_seq] and
//                    the n_seq start offsets for every s, whatever the values of cu.
// Thread layout: a "row" is one token and one chunk of chunk_heads consecutive heads of the
// concatenation q, k, v (n_chunks chunks per token; the planner splits the heads only when there are too
// few tokens to fill the device). threadIdx.y and the grid-stride loop run over rows, threadIdx.x over
// lanes as in rope_apply_impl: lane < n_pairs rotates its pair, computing the angle and sincosf once and
// applying them to every head of the chunk, q's and k's alike (the angle is shared between q and k);
// other lanes copy one pass-through channel (out of place only). Same angle rule, identity rule,
// rounding and single pass over every element as rope_apply_impl.
#define ROPE_QKV_PARTS 3
#define ROPE_QKV_AXES 4
#define ROPE_POS_IDS 0
#define ROPE_POS_OFFSET 1
#define ROPE_POS_VARLEN 2

struct RopeQkvShape {
    i64 n_b, n_s;               // batch rows and tokens per row ("thd": 1 and T)
    i64 n_chunks, chunk_heads;  // the q, k, v heads of a token in n_chunks chunks of chunk_heads
    i64 heads[ROPE_QKV_PARTS];  // heads of q, k, v (v copied, never rotated)
    i64 x_st[ROPE_QKV_PARTS * ROPE_QKV_AXES];  // element strides (b, s, h, d) of q, k, v
    i64 o_st[ROPE_QKV_PARTS * ROPE_QKV_AXES];  // element strides (b, s, h, d) of their outputs
    i64 pos_mode;               // ROPE_POS_IDS, ROPE_POS_OFFSET or ROPE_POS_VARLEN
    i64 p_b, p_s;               // ROPE_POS_IDS: element strides of ids along b and s
    i64 n_seq;                  // ROPE_POS_VARLEN: sequences (table[0..n_seq] are the cu_seqlens)
    i64 off_at;                 // index in table of the per-row / per-sequence offsets; < 0: none
    i64 base;                   // a scalar offset added to every ROPE_POS_OFFSET / ROPE_POS_VARLEN position
};

__device__ __forceinline__ i64 rope_min_i64(i64 a, i64 b) { return a < b ? a : b; }
__device__ __forceinline__ i64 rope_max_i64(i64 a, i64 b) { return a > b ? a : b; }

// a = q * n + r, 32-bit division when the caller knows a and n fit in 32 bits (the common case).
__device__ __forceinline__ void rope_divmod(i64 a, i64 n, bool small, i64& q, i64& r) {
    if (small) {
        const unsigned int ua = (unsigned int)a, un = (unsigned int)n, uq = ua / un;
        q = (i64)uq;
        r = (i64)(ua - uq * un);
    } else {
        q = a / n;
        r = a - q * n;
    }
}

// The position of token s of batch row b (see the modes above).
__device__ __forceinline__ double rope_token_position(const RopeQkvShape& sh, const double* ids, const i64* table,
                                                      i64 b, i64 s) {
    if (sh.pos_mode == ROPE_POS_IDS) return ids[b * sh.p_b + s * sh.p_s];
    i64 m = sh.base + s;
    if (sh.pos_mode == ROPE_POS_OFFSET) {
        if (sh.off_at >= 0) m += table[sh.off_at + b];
        return (double)m;
    }
    i64 lo = 0, hi = sh.n_seq - 1;  // the last j in [0, n_seq - 1] with cu[j] <= s
    while (lo < hi) {
        const i64 mid = (lo + hi + 1) >> 1;
        if (table[mid] <= s) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    m -= table[lo];
    if (sh.off_at >= 0) m += table[sh.off_at + lo];
    return (double)m;
}

template <class Io>
__device__ __forceinline__ void rope_qkv_impl(
    const typename Io::storage* q, typename Io::storage* q_out, const typename Io::storage* k,
    typename Io::storage* k_out, const typename Io::storage* v, typename Io::storage* v_out, const double* ids,
    const i64* table, const double* inv_freq, const RopeQkvShape& sh, int n_pairs, int n_pass, int half_layout,
    int copy_pass, float factor, float sin_sign) {
    typedef typename Io::storage T;
    const T* const src[ROPE_QKV_PARTS] = {q, k, v};
    T* const dst[ROPE_QKV_PARTS] = {q_out, k_out, v_out};
    const int lanes = n_pairs + (copy_pass ? n_pass : 0);
    const i64 total_heads = sh.heads[0] + sh.heads[1] + sh.heads[2];
    const i64 n_rows = sh.n_b * sh.n_s * sh.n_chunks;
    const bool small = n_rows <= 0xffffffffLL;
    const i64 rows_per_step = (i64)gridDim.x * blockDim.y;
    for (i64 r = (i64)blockIdx.x * blockDim.y + threadIdx.y; r < n_rows; r += rows_per_step) {
        i64 token, chunk, b, s;
        rope_divmod(r, sh.n_chunks, small, token, chunk);
        rope_divmod(token, sh.n_s, small, b, s);
        const double m = rope_token_position(sh, ids, table, b, s);
        const i64 h_begin = chunk * sh.chunk_heads;
        const i64 h_end = rope_min_i64(h_begin + sh.chunk_heads, total_heads);
        for (int lane = threadIdx.x; lane < lanes; lane += blockDim.x) {
            const bool pair = lane < n_pairs;
            i64 ca, cb;  // the lane's channels: its pair, or one pass-through channel (ca == cb)
            float cs = 1.0f, sn = 0.0f;
            bool identity = true;
            if (pair) {
                ca = half_layout ? lane : 2 * (i64)lane;
                cb = half_layout ? lane + (i64)n_pairs : 2 * (i64)lane + 1;
                identity = rope_scaled_cos_sin(m, inv_freq[lane], factor, sin_sign, cs, sn);
            } else {
                ca = cb = 2 * (i64)n_pairs + (lane - n_pairs);
            }
            i64 first = 0;  // index of the part's first head among the q, k, v heads
#pragma unroll
            for (int p = 0; p < ROPE_QKV_PARTS; ++p) {
                const i64 lo = rope_max_i64(h_begin, first) - first;
                const i64 hi = rope_min_i64(h_end, first + sh.heads[p]) - first;
                first += sh.heads[p];
                if (lo >= hi) continue;
                const i64* xs = sh.x_st + p * ROPE_QKV_AXES;
                const i64* os = sh.o_st + p * ROPE_QKV_AXES;
                const T* xr = src[p] + b * xs[0] + s * xs[1] + lo * xs[2];
                T* orow = dst[p] + b * os[0] + s * os[1] + lo * os[2];
                if (pair) {
                    rope_rotate_span<Io>(xr, orow, hi - lo, xs[2], os[2], ca * xs[3], cb * xs[3], ca * os[3],
                                         cb * os[3], cs, sn, identity || p == ROPE_QKV_PARTS - 1);
                } else {
                    rope_copy_span(xr, orow, hi - lo, xs[2], os[2], ca * xs[3], ca * os[3]);
                }
            }
        }
    }
}

#define ROPE_QKV_KERNEL(QKVNAME, IO)                                                                       \
    extern "C" __global__ void QKVNAME(const IO::storage* q, IO::storage* q_out, const IO::storage* k,     \
                                       IO::storage* k_out, const IO::storage* v, IO::storage* v_out,       \
                                       const double* ids, const i64* table, const double* inv_freq,       \
                                       const RopeQkvShape shape, int n_pairs, int n_pass, int half_layout, \
                                       int copy_pass, float factor, float sin_sign) {                      \
        rope_qkv_impl<IO>(q, q_out, k, k_out, v, v_out, ids, table, inv_freq, shape, n_pairs, n_pass,      \
                          half_layout, copy_pass, factor, sin_sign);                                       \
    }

ROPE_QKV_KERNEL(rope_qkv_apply_f32, IoF32)
ROPE_QKV_KERNEL(rope_qkv_apply_f16, IoF16)
ROPE_QKV_KERNEL(rope_qkv_apply_bf16, IoBF16)

// Multi-axis RoPE (rope_ref.multiaxis, docs/multimodal.md): pair i takes its position from stream
// pair_stream[i] (a table lookup) and its frequency and attention factor from pair_freq[i] and
// pair_factor[i]. Positions are (n_streams, ...) with stream s at positions + s * stream_stride and the
// RopeShape position strides over the rest. The rotated channels are `blocks` equal contiguous blocks
// of 2 * (n_pairs / blocks) channels, each paired by the layout on its own (ChatGLM-6B: 2 blocks).
// Same angle rule, identity rule and single pass over x as rope_apply_impl. Compiled only with
// -DROPE_WITH_MULTIAXIS (rope_ref.backends.cupy passes it to NVRTC).
#ifdef ROPE_WITH_MULTIAXIS
template <class Io>
__device__ __forceinline__ void rope_multiaxis_impl(
    const typename Io::storage* x, typename Io::storage* out, const double* positions, i64 stream_stride,
    const int* pair_stream, const double* pair_freq, const float* pair_factor, const RopeShape& s,
    int n_pairs, int n_pass, int half_layout, int blocks, int copy_pass, float sin_sign) {
    const int lanes = n_pairs + (copy_pass ? n_pass : 0);
    const int per_block = n_pairs / blocks;
    const i64 rows_per_step = (i64)gridDim.x * blockDim.y;
    for (i64 t = (i64)blockIdx.x * blockDim.y + threadIdx.y; t < s.n_outer; t += rows_per_step) {
        i64 xo, oo, po;
        outer_offsets(s, t, xo, oo, po);
        for (int lane = threadIdx.x; lane < lanes; lane += blockDim.x) {
            if (lane < n_pairs) {
                const int k = lane / per_block, j = lane - k * per_block;
                const i64 first = 2 * (i64)per_block * k;  // first channel of the lane's block
                const i64 ia = half_layout ? first + j : first + 2 * (i64)j;
                const i64 ib = half_layout ? ia + per_block : ia + 1;
                const double m = positions[po + (i64)pair_stream[lane] * stream_stride];
                rope_pair_rows<Io>(x, out, xo, oo, s, ia, ib, m, pair_freq[lane], pair_factor[lane], sin_sign);
            } else {
                rope_copy_rows(x, out, xo, oo, s, 2 * (i64)n_pairs + (lane - n_pairs));  // pass-through
            }
        }
    }
}

#define ROPE_MULTIAXIS_KERNEL(KNAME, IO)                                                                  \
    extern "C" __global__ void KNAME(const IO::storage* x, IO::storage* out, const double* positions,     \
                                     i64 stream_stride, const int* pair_stream, const double* pair_freq, \
                                     const float* pair_factor, const RopeShape shape, int n_pairs,        \
                                     int n_pass, int half_layout, int blocks, int copy_pass,              \
                                     float sin_sign) {                                                    \
        rope_multiaxis_impl<IO>(x, out, positions, stream_stride, pair_stream, pair_freq, pair_factor,    \
                                shape, n_pairs, n_pass, half_layout, blocks, copy_pass, sin_sign);        \
    }

ROPE_MULTIAXIS_KERNEL(rope_multiaxis_apply_f32, IoF32)
ROPE_MULTIAXIS_KERNEL(rope_multiaxis_apply_f16, IoF16)
ROPE_MULTIAXIS_KERNEL(rope_multiaxis_apply_bf16, IoBF16)
#endif  // ROPE_WITH_MULTIAXIS
