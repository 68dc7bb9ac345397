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
// arbitrary for the leading axes; the last axis must be contiguous.
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

// Rotate pair (ia, ib) in every inner row of one outer row (x at xo, out at oo) by the scaled cos/sin;
// `identity` copies the pair bit for bit instead (position 0 with attention factor 1).
template <class Io>
__device__ __forceinline__ void rope_rotate_rows(const typename Io::storage* x, typename Io::storage* out,
                                                 i64 xo, i64 oo, const RopeShape& s, i64 ia, i64 ib, float cs,
                                                 float sn, bool identity) {
    typedef typename Io::storage T;
    for (i64 i0 = 0; i0 < s.i_size0; ++i0) {
        const T* xr = x + xo + i0 * s.i_xs0;
        T* orow = out + oo + i0 * s.i_os0;
        i64 i1 = 0;
        for (; i1 + ROPE_UNROLL <= s.i_size1; i1 += ROPE_UNROLL) {
            T va[ROPE_UNROLL], vb[ROPE_UNROLL];
#pragma unroll
            for (int u = 0; u < ROPE_UNROLL; ++u) {
                va[u] = xr[(i1 + u) * s.i_xs1 + ia];
                vb[u] = xr[(i1 + u) * s.i_xs1 + ib];
            }
#pragma unroll
            for (int u = 0; u < ROPE_UNROLL; ++u) {
                T ya = va[u], yb = vb[u];
                if (!identity) {
                    const float a = Io::load(va[u]), b = Io::load(vb[u]);
                    ya = Io::store(a * cs - b * sn);
                    yb = Io::store(b * cs + a * sn);
                }
                orow[(i1 + u) * s.i_os1 + ia] = ya;
                orow[(i1 + u) * s.i_os1 + ib] = yb;
            }
        }
        for (; i1 < s.i_size1; ++i1) {
            const T va = xr[i1 * s.i_xs1 + ia], vb = xr[i1 * s.i_xs1 + ib];
            T ya = va, yb = vb;
            if (!identity) {
                const float a = Io::load(va), b = Io::load(vb);
                ya = Io::store(a * cs - b * sn);
                yb = Io::store(b * cs + a * sn);
            }
            orow[i1 * s.i_os1 + ia] = ya;
            orow[i1 * s.i_os1 + ib] = yb;
        }
    }
}

// Copy pass-through channel c in every inner row of one outer row.
// One pair at position m: cos/sin of the float32 angle fl32(m * freq) times the attention factor, then the
// rotation over every row of the lane (eq. 34). Position 0 with factor 1 is the identity, copied bit for
// bit (signed zeros, inf). Shared by the 1D and the multi-axis kernels.
template <class Io>
__device__ __forceinline__ void rope_pair_rows(const typename Io::storage* x, typename Io::storage* out, i64 xo,
                                               i64 oo, const RopeShape& s, i64 ia, i64 ib, double m,
                                               double freq, float factor, float sin_sign) {
    const bool identity = (m == 0.0) && (factor == 1.0f);
    const float angle = (float)(m * freq);
    float sn, cs;
    sincosf(angle, &sn, &cs);
    cs *= factor;
    sn *= factor * sin_sign;
    rope_rotate_rows<Io>(x, out, xo, oo, s, ia, ib, cs, sn, identity);
}

template <class T>
__device__ __forceinline__ void rope_copy_rows(const T* x, T* out, i64 xo, i64 oo, const RopeShape& s, i64 c) {
    for (i64 i0 = 0; i0 < s.i_size0; ++i0) {
        for (i64 i1 = 0; i1 < s.i_size1; ++i1) {
            out[oo + i0 * s.i_os0 + i1 * s.i_os1 + c] = x[xo + i0 * s.i_xs0 + i1 * s.i_xs1 + c];
        }
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
