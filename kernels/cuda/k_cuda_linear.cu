// nn.Linear forward and backward on the tiled SGEMM (k_cuda_gemm.cuh).
//   forward:      y[n,out]  = x[n,in] @ w[out,in]^T + b[out]
//   input grad:   dx[n,in]  = dy[n,out] @ w[out,in]
//   weight grad:  dw[out,in] = dy^T[out,n] @ x[n,in]   (split-K over the batch)
//   bias grad:    db[out]   = column sums of dy, rows added in order (as the CPU)
#include "kernels/cuda/k_cuda_tc_gemm.cuh"
#include <stdio.h>

namespace {

// y of type yt (fp32, or 16 bits: K_CUDA_MM_Y16).
struct StoreBias {
    void *y; const float *b; int ld, yt;
    __host__ __device__ void operator()(int, int m, int n, float v) const
    {
        k_act_st(y, yt, (size_t)m * ld + n, v + (b ? b[n] : 0.0f));
    }
};

struct Store {
    float *y; int ld;
    __host__ __device__ void operator()(int, int m, int n, float v) const { y[(size_t)m * ld + n] = v; }
};

__global__ void linear_bias_grad(int n, int out, const float *dy, float *db)
{
    int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= out) return;
    float s = 0.0f;
    for (int r = 0; r < n; r++) s += dy[(size_t)r * out + o];
    db[o] = s;
}

} // namespace

// The split-K partials, after the backward's 16-bit dy (k_dy16) at bf16 / f16.
size_t k_cuda_linear_workspace_mm(int mm, int n, int in, int out)
{
    size_t a = k_cuda_gemm_ws_bytes(n, out, in), b = k_cuda_gemm_ws_bytes(n, in, out);
    size_t c = k_cuda_gemm_ws_bytes(out, in, n);
    size_t m = a > b ? a : b;
    return (m > c ? m : c) + k_dy16_bytes(mm, n, out);
}

size_t k_cuda_linear_workspace(int n, int in, int out) { return k_cuda_linear_workspace_mm(K_CUDA_MM_BF16, n, in, out); }

int k_cuda_linear_fwd(int n, int in, int out, const float *x, const float *w, const float *b, float *y,
                      void *ws, port_stream s)
{
    return k_cuda_linear_fwd_mm(K_CUDA_MM_FP32, n, in, out, x, w, NULL, b, y, ws, s);
}

int k_cuda_linear_bwd(int n, int in, int out, const float *x, const float *w, const float *dy, float *dx,
                      float *dw, float *db, void *ws, port_stream s)
{
    return k_cuda_linear_bwd_mm(K_CUDA_MM_FP32, n, in, out, x, w, NULL, dy, dx, dw, db, ws, s);
}

int k_cuda_linear_fwd_mm(int mm, int n, int in, int out, const float *x, const float *w, const uint16_t *w16,
                         const float *b, float *y, void *ws, port_stream s)
{
    char shp[96];
    snprintf(shp, sizeof shp, "n=%d in=%d out=%d", n, in, out);
    const char *k = "k_cuda_linear_fwd";
    if (k_act_mm_check(mm, k, shp)) return -1;
    KgColB bb = {w, in};
    StoreBias st = {y, b, out, k_act_of(mm, K_CUDA_MM_Y16)};
    cudaStream_t cs = (cudaStream_t)s;
    if (mm & K_CUDA_MM_X16) { // a 16-bit x: by cp.async too (both operands: the 3-stage kernel)
        TcRawK xr;
        if (k_tc_raw(xr, mm, x, in))
            return k_cuda_gemm_w16<TcRawK, true>(mm, k, shp, n, out, in, xr, w16, in, bb, st, ws, cs);
        KgActRowA a = {x, in, k_act_of(mm, K_CUDA_MM_X16)};
        return k_cuda_gemm_w16<TcRawK, true>(mm, k, shp, n, out, in, a, w16, in, bb, st, ws, cs);
    }
    KgRowA a = {(const float *)x, in};
    return k_cuda_gemm_w16<TcRawK, false>(mm, k, shp, n, out, in, a, w16, in, bb, st, ws, cs);
}

int k_cuda_linear_bwd_mm(int mm, int n, int in, int out, const float *x, const float *w, const uint16_t *w16,
                         const float *dy, float *dx, float *dw, float *db, void *ws, port_stream s)
{
    cudaStream_t cs = (cudaStream_t)s;
    char shp[96];
    snprintf(shp, sizeof shp, "n=%d in=%d out=%d", n, in, out);
    if (k_act_mm_check(mm, "k_cuda_linear_bwd", shp)) return -1;
    KDy16 d; // dy's 16-bit copy where it is made; d.ws past it
    if (k_dy16(d, mm, n, out, dy, ws, cs)) return -1;
    if (dx) {
        const char *k = "k_cuda_linear_bwd (input grad)";
        KgRowA a = {dy, out};
        KgRowB b = {w, in};
        Store st = {dx, in};
        if (d.raw ? k_cuda_gemm_w16<TcRawMN, true>(mm, k, shp, n, in, out, d.k, w16, in, b, st, d.ws, cs)
                : k_cuda_gemm_w16<TcRawMN, false>(mm, k, shp, n, in, out, a, w16, in, b, st, d.ws, cs))
            return -1;
    }
    KgColA a = {dy, out};
    Store st = {dw, in};
    const char *kw = "k_cuda_linear_bwd (weight grad)";
    TcRawMN xr;
    KgActRowB xa = {x, in, k_act_of(mm, K_CUDA_MM_X16)};
    KgRowB xf = {x, in};
    bool x16 = mm & K_CUDA_MM_X16, xraw = x16 && k_tc_raw(xr, mm, x, in); // a 16-bit x by cp.async where aligned
    if (d.raw ? (xraw ? k_cuda_gemm_mm16(mm, kw, shp, out, in, n, d.mn, xr, st, d.ws, cs)
               : x16 ? k_cuda_gemm_mm16(mm, kw, shp, out, in, n, d.mn, xa, st, d.ws, cs)
                     : k_cuda_gemm_mm16(mm, kw, shp, out, in, n, d.mn, xf, st, d.ws, cs))
        : xraw ? k_cuda_gemm_mm16(mm, kw, shp, out, in, n, a, xr, st, d.ws, cs)
        : x16  ? k_cuda_gemm_mm16(mm, kw, shp, out, in, n, a, xa, st, d.ws, cs)
               : k_cuda_gemm_mm(mm & K_CUDA_MM_TYPE, kw, shp, out, in, n, a, xf, st, d.ws, cs))
        return -1;
    if (!db) return 0; // no bias
    K_LAUNCH(linear_bias_grad, (out + 127) / 128, 128, 0, cs)(n, out, dy, db);
    return k_cuda_check_launch("k_cuda_linear_bwd (bias grad)", "%s", shp);
}
