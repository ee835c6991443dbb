// Activation kernels beyond relu: leaky relu, SiLU. Plain grid-stride kernels, one
// thread per element, launched with K_LAUNCH (nvcc on a GPU, the SIMT executor in make
// test); each result depends only on its index and is the CPU kernel's bit for bit
// (leaky relu: one compare, one rounded product; SiLU: kernels/k_math.h's k_silu, the
// CPU's own math); a NaN input gives the GPU's canonical NaN where x86 keeps its payload
// (the device tests compare NaNs as NaNs).
#include "kernels/cuda/k_cuda_common.cuh"
#include "kernels/k_math.h"

__global__ void leaky_relu_fwd(size_t n, float slope, const float *x, float *y)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float v = x[i];
        y[i] = v > 0.0f ? v : __fmul_rn(v, slope);
    }
}

__global__ void leaky_relu_bwd(size_t n, float slope, const float *x, const float *dy, float *dx)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float g = dy[i];
        dx[i] = x[i] > 0.0f ? g : __fmul_rn(g, slope);
    }
}

int k_cuda_leaky_relu_fwd(size_t n, float slope, const float *x, float *y, port_stream s)
{
    K_LAUNCH(leaky_relu_fwd, k_cuda_blocks(n), K_CUDA_THREADS, 0, (cudaStream_t)s)(n, slope, x, y);
    return k_cuda_check_launch("k_cuda_leaky_relu_fwd", "n=%zu slope=%g", n, slope);
}

int k_cuda_leaky_relu_bwd(size_t n, float slope, const float *x, const float *dy, float *dx, port_stream s)
{
    K_LAUNCH(leaky_relu_bwd, k_cuda_blocks(n), K_CUDA_THREADS, 0, (cudaStream_t)s)(n, slope, x, dy, dx);
    return k_cuda_check_launch("k_cuda_leaky_relu_bwd", "n=%zu slope=%g", n, slope);
}

__global__ void silu_fwd(size_t n, const float *x, float *y)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        y[i] = k_silu(x[i]);
}

__global__ void silu_bwd(size_t n, const float *x, const float *dy, float *dx)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dx[i] = k_silu_grad(x[i], dy[i]);
}

int k_cuda_silu_fwd(size_t n, const float *x, float *y, port_stream s)
{
    K_LAUNCH(silu_fwd, k_cuda_blocks(n), K_CUDA_THREADS, 0, (cudaStream_t)s)(n, x, y);
    return k_cuda_check_launch("k_cuda_silu_fwd", "n=%zu", n);
}

int k_cuda_silu_bwd(size_t n, const float *x, const float *dy, float *dx, port_stream s)
{
    K_LAUNCH(silu_bwd, k_cuda_blocks(n), K_CUDA_THREADS, 0, (cudaStream_t)s)(n, x, dy, dx);
    return k_cuda_check_launch("k_cuda_silu_bwd", "n=%zu", n);
}
