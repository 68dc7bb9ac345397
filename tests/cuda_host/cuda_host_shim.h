// Host shim for executing backends/rope_kernels.cu on the CPU (tests/backends/test_cuda_host_emulation.py).
//
// Defines the few CUDA names the kernel source uses so that g++ compiles it as plain C++: the
// execution-space qualifiers (empty), the built-in index variables (globals the driver sets before it
// calls a kernel entry point for one emulated thread), and the bit-cast intrinsics. sincosf is
// glibc's (a GNU extension; g++ defines _GNU_SOURCE). __CUDA_ARCH__ stays undefined, so the fp16
// conversions take the portable host branch written in the .cu file instead of the PTX `cvt`.
#ifndef ROPE_CUDA_HOST_SHIM_H
#define ROPE_CUDA_HOST_SHIM_H

#ifdef __CUDA_ARCH__
#error "cuda_host_shim.h is for host compilers only"
#endif

#include <math.h>
#include <string.h>

#define __device__
#define __global__
#define __host__
#define __forceinline__ inline

struct rope_host_dim3 {
    unsigned int x, y, z;
};

// One emulated thread runs at a time per OS thread; thread_local keeps concurrent callers apart.
static thread_local rope_host_dim3 gridDim, blockDim, blockIdx, threadIdx;

static inline float __uint_as_float(unsigned int u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline unsigned int __float_as_uint(float f) {
    unsigned int u;
    memcpy(&u, &f, sizeof u);
    return u;
}

#endif  // ROPE_CUDA_HOST_SHIM_H
