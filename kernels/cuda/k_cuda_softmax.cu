// log_softmax + NLL (max_pool2d without padding is the padded one of k_cuda_graph_ops.cu).
#include "kernels/cuda/k_cuda_common.cuh"

// ---- log_softmax: one warp per row. Shift by the row max so exp never overflows and
// add the exponentials in double (as the CPU does), then y = x - (max + log(sum)).
#define LSM_ROWS 8 // rows (warps) per block

__global__ void log_softmax_fwd(int n, int classes, const float *x, float *y)
{
    int row = blockIdx.x * LSM_ROWS + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= n) return;
    const float *xr = x + (size_t)row * classes;
    float m = -INFINITY;
    for (int j = lane; j < classes; j += 32) m = fmaxf(m, xr[j]);
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    double sum = 0.0;
    for (int j = lane; j < classes; j += 32) sum += exp((double)xr[j] - m);
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    float lse = (float)(m + log(sum));
    for (int j = lane; j < classes; j += 32) y[(size_t)row * classes + j] = xr[j] - lse;
}

// One block: each thread takes rows tid, tid + 256, ...; then a fixed tree. n is a
// batch (thousands at most), so one block is plenty and the order is fixed.
__global__ void nll_loss_sum(int n, int classes, const float *logp, const int32_t *labels, double *out)
{
    __shared__ double sh[K_CUDA_THREADS];
    double loss = 0.0, ok = 0.0;
    for (int i = threadIdx.x; i < n; i += K_CUDA_THREADS) {
        const float *r = logp + (size_t)i * classes;
        int32_t l = labels[i];
        if (l < 0 || l >= classes) continue;
        loss -= r[l];
        int am = 0;
        for (int j = 1; j < classes; j++)
            if (r[j] > r[am]) am = j;
        ok += am == l;
    }
    loss = k_cuda_block_sum(loss, sh);
    ok = k_cuda_block_sum(ok, sh);
    if (threadIdx.x == 0) { out[0] = loss; out[1] = ok; }
}

__global__ void log_softmax_nll_bwd(int n, int classes, const float *logp, const int32_t *labels, float scale,
                                    float *dx)
{
    size_t total = (size_t)n * classes;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        int row = (int)(i / classes), j = (int)(i % classes);
        int32_t l = labels[row];
        dx[i] = (l < 0 || l >= classes) ? 0.0f : scale * (expf(logp[i]) - (j == l ? 1.0f : 0.0f));
    }
}

int k_cuda_log_softmax_fwd(int n, int classes, const float *x, float *y, port_stream s)
{
    unsigned blocks = n > 0 ? (unsigned)((n + LSM_ROWS - 1) / LSM_ROWS) : 1;
    K_LAUNCH(log_softmax_fwd, blocks, LSM_ROWS * 32, 0, (cudaStream_t)s)(n, classes, x, y);
    return k_cuda_check_launch("k_cuda_log_softmax_fwd", "n=%d classes=%d", n, classes);
}

int k_cuda_nll_loss_sum(int n, int classes, const float *logp, const int32_t *labels, double *out, port_stream s)
{
    K_LAUNCH(nll_loss_sum, 1, K_CUDA_THREADS, 0, (cudaStream_t)s)(n, classes, logp, labels, out);
    return k_cuda_check_launch("k_cuda_nll_loss_sum", "n=%d classes=%d", n, classes);
}

int k_cuda_log_softmax_nll_bwd(int n, int classes, const float *logp, const int32_t *labels, float scale,
                               float *dx, port_stream s)
{
    size_t total = (size_t)n * classes;
    K_LAUNCH(log_softmax_nll_bwd, k_cuda_blocks(total), K_CUDA_THREADS, 0, (cudaStream_t)s)(n, classes, logp,
                                                                                         labels, scale, dx);
    return k_cuda_check_launch("k_cuda_log_softmax_nll_bwd", "n=%d classes=%d", n, classes);
}
