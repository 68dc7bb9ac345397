// Host driver for the multi-axis kernels of backends/rope_kernels.cu (tests/backends/test_cupy_multiaxis_host.py).
//
// driver.cpp (and through it the shipped .cu file) compiled with ROPE_WITH_MULTIAXIS defined, as
// rope_ref.backends.cupy compiles it for NVRTC, plus one more entry point that launches a
// rope_multiaxis_apply_* kernel the way cuLaunchKernel does: `args` is an array of pointers to each
// kernel argument, blocks run in order (or reversed), one emulated thread at a time.
#define ROPE_WITH_MULTIAXIS 1
#include "driver.cpp"

namespace {

template <class T, class Kernel>
void launch_multiaxis(Kernel kernel, const unsigned int* grid, const unsigned int* block, void** a,
                      u64_t b0, u64_t b1, int reverse) {
    const T* x = arg<const T*>(a, 0);
    T* out = arg<T*>(a, 1);
    const double* pos = arg<const double*>(a, 2);
    const i64 stream_stride = arg<i64>(a, 3);
    const int* pair_stream = arg<const int*>(a, 4);
    const double* pair_freq = arg<const double*>(a, 5);
    const float* pair_factor = arg<const float*>(a, 6);
    const RopeShape shape = arg<RopeShape>(a, 7);
    const int n_pairs = arg<int>(a, 8), n_pass = arg<int>(a, 9), half = arg<int>(a, 10);
    const int blocks = arg<int>(a, 11), copy = arg<int>(a, 12);
    const float sign = arg<float>(a, 13);
    run_grid(grid, block, b0, b1, reverse, [&] {
        kernel(x, out, pos, stream_stride, pair_stream, pair_freq, pair_factor, shape, n_pairs, n_pass, half,
               blocks, copy, sign);
    });
}

}  // namespace

extern "C" {

// 0 on success, -1 for an unknown kernel name.
int rope_host_multiaxis_launch(const char* name, const unsigned int* grid, const unsigned int* block,
                               void** args, u64_t block_begin, u64_t block_end, int reverse) {
    if (!strcmp(name, "rope_multiaxis_apply_f32")) {
        launch_multiaxis<float>(rope_multiaxis_apply_f32, grid, block, args, block_begin, block_end, reverse);
    } else if (!strcmp(name, "rope_multiaxis_apply_f16")) {
        launch_multiaxis<unsigned short>(rope_multiaxis_apply_f16, grid, block, args, block_begin, block_end,
                                         reverse);
    } else if (!strcmp(name, "rope_multiaxis_apply_bf16")) {
        launch_multiaxis<unsigned short>(rope_multiaxis_apply_bf16, grid, block, args, block_begin, block_end,
                                         reverse);
    } else {
        return -1;
    }
    return 0;
}

}  // extern "C"
