// The small kernels the layer-graph executor needs beside k.h's twins (nn/ops/cuda.c):
// channel concat as strided row copies, log_softmax backward where it is not fused with
// the loss, and the int64 counter of BatchNorm's num_batches_tracked (functors run by
// k_cuda_each).
#include "kernels/cuda/k_cuda_launch.cuh"
#include <math.h>

namespace {

struct CopyRows {
    size_t len, sstride, dstride; const float *src; float *dst;
    __host__ __device__ void operator()(size_t i) const
    {
        size_t r = i / len, k = i % len;
        dst[r * dstride + k] = src[r * sstride + k];
    }
};

// One thread per row: the CPU's formula (sum of dy in double, then dy - exp(y) * sum).
struct LsmBwd {
    int c; const float *y, *dy; float *dx;
    __host__ __device__ void operator()(size_t r) const
    {
        const float *yr = y + r * c, *dyr = dy + r * c;
        double s = 0;
        for (int k = 0; k < c; k++) s += dyr[k];
        for (int k = 0; k < c; k++) dx[r * c + k] = dyr[k] - expf(yr[k]) * (float)s;
    }
};

struct AddI64 {
    int64_t *x; int64_t v;
    __host__ __device__ void operator()(size_t) const { *x += v; }
};

} // namespace

int k_cuda_copy_rows(int rows, size_t len, const float *src, size_t src_stride, float *dst, size_t dst_stride,
                     port_stream s)
{
    if (rows <= 0 || !len) return 0;
    k_cuda_each((size_t)rows * len, CopyRows{len, src_stride, dst_stride, src, dst}, s);
    return k_cuda_check_launch("k_cuda_copy_rows", "rows=%d len=%zu", rows, len);
}

int k_cuda_log_softmax_bwd(int n, int classes, const float *y, const float *dy, float *dx, port_stream s)
{
    if (n <= 0) return 0;
    k_cuda_each((size_t)n, LsmBwd{classes, y, dy, dx}, s);
    return k_cuda_check_launch("k_cuda_log_softmax_bwd", "n=%d classes=%d", n, classes);
}

int k_cuda_add_i64(int64_t *x, int64_t v, port_stream s)
{
    k_cuda_each(1, AddI64{x, v}, s);
    return k_cuda_check_launch("k_cuda_add_i64", "v=%lld", (long long)v);
}
