// Launch helper for kernels whose per-element maths lives in functors:
//   k_cuda_each(n, f, s):   f(i) for every i < n (one grid-stride kernel for them all)
#pragma once
#include "kernels/cuda/k_cuda_common.cuh"

__host__ __device__ __forceinline__ int k_cuda_imin(int a, int b) { return a < b ? a : b; }
__host__ __device__ __forceinline__ int k_cuda_imax(int a, int b) { return a > b ? a : b; }

template <class F> __global__ void k_cuda_each_kernel(size_t n, F f)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) f(i);
}
template <class F> static inline void k_cuda_each(size_t n, F f, port_stream s)
{
    K_LAUNCH((k_cuda_each_kernel<F>), k_cuda_blocks(n), K_CUDA_THREADS, 0, (cudaStream_t)s)(n, f);
}
