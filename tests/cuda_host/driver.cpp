// Host driver: runs the kernels of backends/rope_kernels.cu (the file itself, found on the include
// path) on the CPU, one emulated CUDA thread at a time, for tests/backends/test_cuda_host_emulation.py.
//
// rope_host_launch takes what cuLaunchKernel takes (kernel name, grid, block, and `args`, an array of
// pointers to each kernel argument), so the Python side passes the argument tuple that
// rope_ref.backends.cupy builds for CuPy, packed the way CuPy packs it. Blocks run in order (or in
// reverse order, to expose threads that depend on each other); a block range lets a test run only
// some blocks of a huge grid. Threads of a block run one after the other: the kernels use no shared
// memory and no barriers, and each output element belongs to one thread, so any order is valid.
#include "cuda_host_shim.h"

#include "rope_kernels.cu"

namespace {

typedef unsigned long long u64_t;

template <class Body>
void run_grid(const unsigned int* grid, const unsigned int* block, u64_t block_begin, u64_t block_end,
              int reverse, Body body) {
    gridDim = {grid[0], grid[1], grid[2]};
    blockDim = {block[0], block[1], block[2]};
    const u64_t n_blocks = (u64_t)grid[0] * grid[1] * grid[2];
    const u64_t n_threads = (u64_t)block[0] * block[1] * block[2];
    if (block_end > n_blocks) block_end = n_blocks;
    for (u64_t i = block_begin; i < block_end; ++i) {
        const u64_t b = reverse ? block_end - 1 - (i - block_begin) : i;
        blockIdx = {(unsigned int)(b % grid[0]), (unsigned int)(b / grid[0] % grid[1]),
                    (unsigned int)(b / grid[0] / grid[1])};
        for (u64_t j = 0; j < n_threads; ++j) {
            const u64_t t = reverse ? n_threads - 1 - j : j;
            threadIdx = {(unsigned int)(t % block[0]), (unsigned int)(t / block[0] % block[1]),
                         (unsigned int)(t / block[0] / block[1])};
            body();
        }
    }
}

template <class T>
T arg(void** args, int i) {
    T v;
    memcpy(&v, args[i], sizeof v);
    return v;
}

typedef void (*ApplyF32)(const float*, float*, const double*, const double*, const RopeShape, int, int, int,
                         int, float, float);
typedef void (*ApplyU16)(const unsigned short*, unsigned short*, const double*, const double*,
                         const RopeShape, int, int, int, int, float, float);

template <class T, class Kernel>
void launch_apply(Kernel kernel, const unsigned int* grid, const unsigned int* block, void** a, u64_t b0,
                  u64_t b1, int reverse) {
    const T* x = arg<const T*>(a, 0);
    T* out = arg<T*>(a, 1);
    const double* pos = arg<const double*>(a, 2);
    const double* inv = arg<const double*>(a, 3);
    const RopeShape shape = arg<RopeShape>(a, 4);
    const int n_pairs = arg<int>(a, 5), n_pass = arg<int>(a, 6), half = arg<int>(a, 7), copy = arg<int>(a, 8);
    const float factor = arg<float>(a, 9), sign = arg<float>(a, 10);
    run_grid(grid, block, b0, b1, reverse,
             [&] { kernel(x, out, pos, inv, shape, n_pairs, n_pass, half, copy, factor, sign); });
}

}  // namespace

extern "C" {

// 0 on success, -1 for an unknown kernel name.
int rope_host_launch(const char* name, const unsigned int* grid, const unsigned int* block, void** args,
                     u64_t block_begin, u64_t block_end, int reverse) {
    if (!strcmp(name, "rope_apply_f32")) {
        launch_apply<float, ApplyF32>(rope_apply_f32, grid, block, args, block_begin, block_end, reverse);
    } else if (!strcmp(name, "rope_apply_f16")) {
        launch_apply<unsigned short, ApplyU16>(rope_apply_f16, grid, block, args, block_begin, block_end,
                                               reverse);
    } else if (!strcmp(name, "rope_apply_bf16")) {
        launch_apply<unsigned short, ApplyU16>(rope_apply_bf16, grid, block, args, block_begin, block_end,
                                               reverse);
    } else if (!strcmp(name, "rope_cos_sin_f32")) {
        const double* pos = arg<const double*>(args, 0);
        const double* inv = arg<const double*>(args, 1);
        const i64 n_positions = arg<i64>(args, 2);
        const int n_pairs = arg<int>(args, 3);
        const float factor = arg<float>(args, 4);
        float* cos_out = arg<float*>(args, 5);
        float* sin_out = arg<float*>(args, 6);
        run_grid(grid, block, block_begin, block_end, reverse,
                 [&] { rope_cos_sin_f32(pos, inv, n_positions, n_pairs, factor, cos_out, sin_out); });
    } else {
        return -1;
    }
    return 0;
}

u64_t rope_host_sizeof_shape(void) { return sizeof(RopeShape); }

// The kernels' own I/O conversions (IoF16 / IoBF16), element-wise, for exhaustive checks.
void rope_host_f16_load(const unsigned short* v, float* f, i64 n) {
    for (i64 i = 0; i < n; ++i) f[i] = IoF16::load(v[i]);
}
void rope_host_f16_store(const float* f, unsigned short* v, i64 n) {
    for (i64 i = 0; i < n; ++i) v[i] = IoF16::store(f[i]);
}
void rope_host_bf16_load(const unsigned short* v, float* f, i64 n) {
    for (i64 i = 0; i < n; ++i) f[i] = IoBF16::load(v[i]);
}
void rope_host_bf16_store(const float* f, unsigned short* v, i64 n) {
    for (i64 i = 0; i < n; ++i) v[i] = IoBF16::store(f[i]);
}

}  // extern "C"
