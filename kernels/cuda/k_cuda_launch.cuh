// Launch helpers for kernels whose per-element maths lives in __host__ __device__
// functors, so that K_CUDA_EMULATE (test/cuda_emu) runs the very same maths as host
// loops and checks it against references on machines without a GPU.
//   k_cuda_each(n, f, s):   f(i) for every i < n (a grid-stride kernel; emulated: a loop)
//   K_CUDA_CHECK(...):      k_cuda_check_launch, or 0 when emulated (nothing launched)
//   k_cuda_tree_sum_host:   the order k_cuda_block_sum adds in, for the emulation of
//                           the per-channel block reductions
#pragma once
#include "kernels/cuda/k_cuda_common.cuh"

__host__ __device__ __forceinline__ int k_cuda_imin(int a, int b) { return a < b ? a : b; }
__host__ __device__ __forceinline__ int k_cuda_imax(int a, int b) { return a > b ? a : b; }

#ifdef K_CUDA_EMULATE
#define K_CUDA_CHECK(...) 0
template <class F> static inline void k_cuda_each(size_t n, F f, port_stream)
{
    for (size_t i = 0; i < n; i++) f(i);
}
#else
#define K_CUDA_CHECK(...) k_cuda_check_launch(__VA_ARGS__)
template <class F> __global__ void k_cuda_each_kernel(size_t n, F f)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) f(i);
}
template <class F> static inline void k_cuda_each(size_t n, F f, port_stream s)
{
    k_cuda_each_kernel<<<k_cuda_blocks(n), K_CUDA_THREADS, 0, (cudaStream_t)s>>>(n, f);
}
#endif

// v[0..n) summed as the shared-memory tree of k_cuda_block_sum (n a power of two):
// v[t] += v[t + w] for w = n/2, n/4, ..., 1. Destroys v.
static inline double k_cuda_tree_sum_host(double *v, int n)
{
    for (int w = n / 2; w > 0; w >>= 1)
        for (int t = 0; t < w; t++) v[t] += v[t + w];
    return v[0];
}
