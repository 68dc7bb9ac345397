// Host driver for the kernel-shape kernels of backends/rope_kernels.cu (tests/backends/test_cupy_kernel_shapes_host.py).
//
// driver.cpp (and through it the shipped .cu file, the apply kernels the fallback path launches) plus
// one more entry point that launches a rope_qkv_apply_* kernel the way cuLaunchKernel does: `args` is an
// array of pointers to each kernel argument, blocks run in order (or reversed), one emulated thread at a
// time, so a thread that depended on another one's writes would show.
#include "driver.cpp"

namespace {

template <class T, class Kernel>
void launch_qkv(Kernel kernel, const unsigned int* grid, const unsigned int* block, void** a, u64_t b0,
                u64_t b1, int reverse) {
    const T* q = arg<const T*>(a, 0);
    T* q_out = arg<T*>(a, 1);
    const T* k = arg<const T*>(a, 2);
    T* k_out = arg<T*>(a, 3);
    const T* v = arg<const T*>(a, 4);
    T* v_out = arg<T*>(a, 5);
    const double* ids = arg<const double*>(a, 6);
    const i64* table = arg<const i64*>(a, 7);
    const double* inv = arg<const double*>(a, 8);
    const RopeQkvShape shape = arg<RopeQkvShape>(a, 9);
    const int n_pairs = arg<int>(a, 10), n_pass = arg<int>(a, 11), half = arg<int>(a, 12);
    const int copy = arg<int>(a, 13);
    const float factor = arg<float>(a, 14), sign = arg<float>(a, 15);
    run_grid(grid, block, b0, b1, reverse, [&] {
        kernel(q, q_out, k, k_out, v, v_out, ids, table, inv, shape, n_pairs, n_pass, half, copy, factor, sign);
    });
}

}  // namespace

extern "C" {

// 0 on success, -1 for an unknown kernel name.
int rope_host_qkv_launch(const char* name, const unsigned int* grid, const unsigned int* block, void** args,
                         u64_t block_begin, u64_t block_end, int reverse) {
    if (!strcmp(name, "rope_qkv_apply_f32")) {
        launch_qkv<float>(rope_qkv_apply_f32, grid, block, args, block_begin, block_end, reverse);
    } else if (!strcmp(name, "rope_qkv_apply_f16")) {
        launch_qkv<unsigned short>(rope_qkv_apply_f16, grid, block, args, block_begin, block_end, reverse);
    } else if (!strcmp(name, "rope_qkv_apply_bf16")) {
        launch_qkv<unsigned short>(rope_qkv_apply_bf16, grid, block, args, block_begin, block_end, reverse);
    } else {
        return -1;
    }
    return 0;
}

u64_t rope_host_sizeof_qkv_shape(void) { return sizeof(RopeQkvShape); }

}  // extern "C"
