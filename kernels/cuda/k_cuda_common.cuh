// Shared by the kernels/cuda/*.cu files: launch checking, the counter-based RNG, the
// f16/bf16 bit conversions and a deterministic block reduction.
#pragma once
#include "kernels/cuda/k_cuda.h"
#include <cuda_runtime.h>
#include <stdint.h>

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

// ---- f16 / bf16: bit-level twins of transport/tp_reduce.c (round to nearest even,
// subnormals and NaNs handled the same way), so device and host roundings agree.
__device__ __forceinline__ float k_cuda_u2f(uint32_t u) { return __uint_as_float(u); }

__device__ __forceinline__ float k_cuda_f16_to_f32(uint16_t h)
{
    uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff;
    if (e == 0x1f) return k_cuda_u2f(s | 0x7f800000u | (m << 13));
    if (e) return k_cuda_u2f(s | ((e + 112) << 23) | (m << 13));
    if (!m) return k_cuda_u2f(s);
    e = 113;
    while (!(m & 0x400)) { m <<= 1; e--; }
    return k_cuda_u2f(s | (e << 23) | ((m & 0x3ff) << 13));
}

__device__ __forceinline__ uint16_t k_cuda_f32_to_f16(float f)
{
    uint32_t u = __float_as_uint(f), a = u & 0x7fffffffu;
    uint16_t s = (uint16_t)((u >> 16) & 0x8000);
    if (a > 0x7f800000u) return (uint16_t)(s | 0x7e00 | ((a >> 13) & 0x3ff));
    if (a >= 0x477ff000u) return (uint16_t)(s | 0x7c00);
    if (a >= 0x38800000u) {
        uint32_t r = a - 0x38000000u;
        r += 0xfffu + ((r >> 13) & 1);
        return (uint16_t)(s | (r >> 13));
    }
    if (a <= 0x33000000u) return s;
    uint32_t e = a >> 23, mant = (a & 0x7fffffu) | 0x800000u, sh = 126 - e;
    uint32_t h = mant >> sh, rem = mant & ((1u << sh) - 1), half = 1u << (sh - 1);
    if (rem > half || (rem == half && (h & 1))) h++;
    return (uint16_t)(s | h);
}

__device__ __forceinline__ float k_cuda_bf16_to_f32(uint16_t h) { return k_cuda_u2f((uint32_t)h << 16); }

__device__ __forceinline__ uint16_t k_cuda_f32_to_bf16(float f)
{
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1)) >> 16);
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
