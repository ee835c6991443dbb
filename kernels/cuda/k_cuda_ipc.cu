// The reduce of the CUDA IPC allreduce (transport/tp_ipc.c): one rank's shard summed
// over every local rank's buffer, read through the IPC mappings, in rank order
// 0..n-1, so the bits are those of the host path's chain (tp_shm_chain, then the
// average's division), as every rank gets them.
#include "kernels/cuda/k_cuda_common.cuh"

struct ipc_srcs {
    const float *p[K_CUDA_IPC_MAX];
};

// op: 0 sum, 1 prod, 2 min, 3 max (tp_op's order); div > 1: then divided (average).
__global__ void ipc_reduce_f32(ipc_srcs s, int n, float *dst, size_t count, int op, int div)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < count; i += (size_t)gridDim.x * blockDim.x) {
        float acc = s.p[0][i];
        for (int k = 1; k < n; k++) {
            float v = s.p[k][i];
            acc = op == 0 ? __fadd_rn(acc, v) : op == 1 ? __fmul_rn(acc, v) : op == 2 ? (v < acc ? v : acc)
                                                                                      : (v > acc ? v : acc);
        }
        dst[i] = div > 1 ? __fdiv_rn(acc, (float)div) : acc;
    }
}

int k_cuda_ipc_reduce_f32(const float *const *src, int n, float *dst, size_t count, int op, int div, port_stream s)
{
    if (n < 1 || n > K_CUDA_IPC_MAX || op < 0 || op > 3) {
        port_cuda_fail("k_cuda_ipc_reduce_f32: %d operands (1 to %d), op %d", n, K_CUDA_IPC_MAX, op);
        return -1;
    }
    if (!count) return 0;
    ipc_srcs a = {};
    for (int k = 0; k < n; k++) a.p[k] = src[k];
    K_LAUNCH(ipc_reduce_f32, k_cuda_blocks(count), K_CUDA_THREADS, 0, (cudaStream_t)s)(a, n, dst, count, op, div);
    return k_cuda_check_launch("k_cuda_ipc_reduce_f32", "n=%d count=%zu op=%d", n, count, op);
}
