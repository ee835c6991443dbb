// The reduce of the CUDA IPC allreduce (transport/tp_ipc.c): one rank's shard summed
// over every local rank's buffer, read through the IPC mappings, in rank order
// 0..n-1, so the bits are those of the host path's chain (tp_shm_chain, then the
// average's division), as every rank gets them. fp16 / bf16 as the host reduces them:
// in f32, rounded to nearest even after every pairwise step (rt/half.h's conversions).
#include "kernels/cuda/k_cuda_common.cuh"

struct ipc_srcs {
    const void *p[K_CUDA_IPC_MAX];
};

// The host's scalar operators (tp_reduce: x the running result, y the next operand).
__device__ __forceinline__ float ipc_op(float x, float y, int op)
{
    return op == 0 ? __fadd_rn(x, y) : op == 1 ? __fmul_rn(x, y) : op == 2 ? (x < y ? x : y) : (x > y ? x : y);
}

// dt 0 f32, 1 f16, 2 bf16: loads to f32, and the rounding of a result to the type.
template <int DT> __device__ __forceinline__ float ipc_ld(const void *p, size_t i)
{
    if (DT == 0) return ((const float *)p)[i];
    uint16_t h = ((const uint16_t *)p)[i];
    return DT == 1 ? rt_f16_to_f32(h) : rt_bf16_to_f32(h);
}
template <int DT> __device__ __forceinline__ float ipc_round(float x)
{
    return DT == 0 ? x : DT == 1 ? rt_f16_to_f32(rt_f32_to_f16(x)) : rt_bf16_to_f32(rt_f32_to_bf16(x));
}

// op: 0 sum, 1 prod, 2 min, 3 max (tp_op's order); div > 1: then divided (average).
template <int DT> __global__ void ipc_reduce(ipc_srcs s, int n, void *dst, size_t count, int op, int div)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x) {
        float acc = ipc_ld<DT>(s.p[0], i);
        for (int k = 1; k < n; k++) acc = ipc_round<DT>(ipc_op(acc, ipc_ld<DT>(s.p[k], i), op));
        if (div > 1) acc = __fdiv_rn(acc, (float)div);
        if (DT == 0) ((float *)dst)[i] = acc;
        else ((uint16_t *)dst)[i] = DT == 1 ? rt_f32_to_f16(acc) : rt_f32_to_bf16(acc);
    }
}

int k_cuda_ipc_reduce(int dt, const void *const *src, int n, void *dst, size_t count, int op, int div, port_stream s)
{
    if (n < 1 || n > K_CUDA_IPC_MAX || op < 0 || op > 3 || dt < 0 || dt > 2) {
        port_cuda_fail("k_cuda_ipc_reduce: %d operands (1 to %d), op %d, dtype %d", n, K_CUDA_IPC_MAX, op, dt);
        return -1;
    }
    if (!count) return 0;
    ipc_srcs a = {};
    for (int k = 0; k < n; k++) a.p[k] = src[k];
    cudaStream_t st = (cudaStream_t)s;
    if (dt == 0) K_LAUNCH(ipc_reduce<0>, k_cuda_blocks(count), K_CUDA_THREADS, 0, st)(a, n, dst, count, op, div);
    else if (dt == 1) K_LAUNCH(ipc_reduce<1>, k_cuda_blocks(count), K_CUDA_THREADS, 0, st)(a, n, dst, count, op, div);
    else K_LAUNCH(ipc_reduce<2>, k_cuda_blocks(count), K_CUDA_THREADS, 0, st)(a, n, dst, count, op, div);
    return k_cuda_check_launch("k_cuda_ipc_reduce", "dtype %d n=%d count=%zu op=%d", dt, n, count, op);
}
