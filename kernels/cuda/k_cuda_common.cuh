// Shared by the kernels/cuda/*.cu files: the launch macro, launch checking, the
// counter-based RNG, the f16/bf16 bit conversions (rt/half.h: the host's code, bit for
// bit) and a deterministic block reduction.
#pragma once
#include "kernels/cuda/k_cuda.h"
#include "rt/half.h"
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

// kernel<<<grid, block, shmem, stream>>>(args) is written K_LAUNCH(kernel, grid, block,
// shmem, stream)(args): nvcc launches it on the GPU; built for the SIMT executor
// (test/simt, make test) the same source queues the kernel on the CPU. A template
// kernel goes in parentheses with its template arguments: K_LAUNCH((k<A, B>), ...).
#ifdef DDPRT_SIMT
#define K_LAUNCH(k, grid, block, shmem, stream) SIMT_LAUNCH(k, grid, block, shmem, stream)
#else
#define K_LAUNCH(k, grid, block, shmem, stream) k<<<grid, block, shmem, stream>>>
#endif

#define K_CUDA_THREADS 256

static inline unsigned k_cuda_blocks(size_t n, int threads = K_CUDA_THREADS)
{
    size_t b = (n + threads - 1) / threads;
    // Grid-stride loops cover the rest; the cap keeps gridDim.x legal for any n.
    return (unsigned)(b < 65535u * 16u ? (b ? b : 1) : 65535u * 16u);
}

// After every launch: a bad configuration or an earlier sticky fault shows up here and
// is reported with the kernel's name and shapes (fmt/...: the shapes, printf-style).
int k_cuda_check_launch(const char *kernel, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// ---- RNG: the same integer arithmetic as kernels/cpu/k_elementwise.c (splitmix64).
__device__ __forceinline__ uint64_t k_cuda_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

static inline uint64_t k_cuda_rng_key(uint64_t seed)
{
    uint64_t z = seed ^ 0x6A09E667F3BCC909ULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

// (z >> 40) has 24 bits: its conversion to float and the scaling are exact, so the
// value is the CPU's bit for bit.
__device__ __forceinline__ float k_cuda_rng_at(uint64_t key, uint64_t counter)
{
    uint64_t z = k_cuda_mix64(key + (counter + 1) * 0x9E3779B97F4A7C15ULL);
    return (float)(z >> 40) * 0x1p-24f;
}

// ---- Block sum of one double per thread (blockDim.x == K_CUDA_THREADS). A fixed tree:
// the same order on every run and every GPU.
__device__ __forceinline__ double k_cuda_block_sum(double v, double *sh)
{
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int w = K_CUDA_THREADS / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads();
    return r;
}

// ---- Activations the memory plan keeps in 16 bits (K_CUDA_MM_X16 / _Y16, nn/plan.c):
// element i of an array of type t (K_CUDA_ACT_F32, K_CUDA_MM_BF16 or K_CUDA_MM_F16).
// Loads widen exactly; stores round to nearest even, the bits the tensor cores' operand
// rounding (cvt.rn) gives, so a product reading a stored 16-bit activation multiplies what
// it would have rounded the fp32 value to. The type is uniform over a launch: no divergence.
__host__ __device__ __forceinline__ float k_act_ld(const void *p, int t, size_t i)
{
    if (t == K_CUDA_ACT_F32) return ((const float *)p)[i];
    uint16_t u = ((const uint16_t *)p)[i];
    return t == K_CUDA_MM_BF16 ? rt_bf16_to_f32(u) : rt_f16_to_f32(u);
}
__host__ __device__ __forceinline__ void k_act_st(void *p, int t, size_t i, float v)
{
    if (t == K_CUDA_ACT_F32) ((float *)p)[i] = v;
    else ((uint16_t *)p)[i] = t == K_CUDA_MM_BF16 ? rt_f32_to_bf16(v) : rt_f32_to_f16(v);
}
// The 16-bit type conv / linear's mm flags name for x (K_CUDA_MM_X16) or y (_Y16).
static inline int k_act_of(int mm, int flag) { return (mm & flag) ? (mm & K_CUDA_MM_TYPE) : K_CUDA_ACT_F32; }
// 16-bit activations exist only beside 16-bit products (--amp bf16 / fp16).
static inline int k_act_mm_check(int mm, const char *kernel, const char *shapes)
{
    if (!(mm & (K_CUDA_MM_X16 | K_CUDA_MM_Y16)) || k_cuda_mm16(mm)) return 0;
    port_cuda_fail("%s(%s): 16-bit activations need bf16 or f16 products, not precision %d", kernel, shapes,
                   mm & K_CUDA_MM_TYPE);
    return -1;
}
// " (16-bit: bf16 x, f32 y)" for launch errors, "" when every activation is fp32: the
// fp32 kernels' messages stay as they were.
static inline const char *k_act_desc(char *buf, size_t len, int xt, int yt)
{
    static const char *const nm[] = {"f32", "bf16", "f16"};
    if (!xt && !yt) return "";
    snprintf(buf, len, " (16-bit: %s x, %s y)", nm[xt % 3], nm[yt % 3]);
    return buf;
}
