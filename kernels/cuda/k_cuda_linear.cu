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

// w [out][in] -> wt [in][out]: 32 x 32 tiles through shared memory (rows read and written
// whole), 256 threads as 8 rows of 32.
__global__ void linear_w_transpose(int out, int in, const float *w, float *wt)
{
    __shared__ float t[32][33];
    const int i0 = blockIdx.x * 32, o0 = blockIdx.y * 32, tx = threadIdx.x & 31, ty = threadIdx.x >> 5;
    for (int j = ty; j < 32; j += 8)
        if (o0 + j < out && i0 + tx < in) t[j][tx] = w[(size_t)(o0 + j) * in + i0 + tx];
    __syncthreads();
    for (int j = ty; j < 32; j += 8)
        if (i0 + j < in && o0 + tx < out) wt[(size_t)(i0 + j) * out + o0 + tx] = t[tx][j];
}

__global__ void linear_bias_grad(int n, int out, const float *dy, float *db)
{
    int o = blockIdx.x * blockDim.x + threadIdx.x;
    if (o >= out) return;
    float s = 0.0f;
    for (int r = 0; r < n; r++) s += dy[(size_t)r * out + o];
    db[o] = s;
}

} // namespace

// TF32's input grad by TMA (linear_dx_tma): w transposed at the workspace's front, [in][out]
// (wgmma takes tf32 K-major only, and dx = dy w reads w along out); 0 where not taken (other
// precisions, rows of out not 16-byte aligned).
static size_t k_wt_bytes(int mm, int in, int out)
{
    return (mm & K_CUDA_MM_TYPE) == K_CUDA_MM_TF32 && out % 4 == 0 ? ((size_t)in * out * 4 + 255) / 256 * 256 : 0;
}

// The split-K partials, after the backward's 16-bit dy (k_dy16) at bf16 / f16, or w's
// transpose at TF32 (k_wt_bytes).
size_t k_cuda_linear_workspace_mm(int mm, int n, int in, int out)
{
    size_t a = k_cuda_gemm_ws_bytes(n, out, in), b = k_cuda_gemm_ws_bytes(n, in, out);
    size_t c = k_cuda_gemm_ws_bytes(out, in, n);
    size_t m = a > b ? a : b;
    return (m > c ? m : c) + k_dy16_bytes(mm, n, out) + k_wt_bytes(mm, in, out);
}

// dx = dy w at TF32 by TMA (wt_gemm<TF32>: both operands k-contiguous fp32): w
// transposed into the workspace's front, then the product with B = wt [in][out] (k
// along out, as the gathering loader's order: the same sums), its split partials past
// it. Where TMA and tf32 wgmma are on and the product takes the 128 tile; 0 done, -1
// failed, 1 not taken.
static int linear_dx_tma(int mm, const char *k, const char *shp, int n, int in, int out, const float *dy,
                         const float *w, float *dx, void *ws, cudaStream_t cs)
{
    const size_t wtb = k_wt_bytes(mm, in, out);
    if (!wtb || !ws || ((uintptr_t)ws & 15) || !k_tf32_on_wgmma() || !k_cuda_tma_on() || k_cuda_gemm_tile(n, in) != 128)
        return 1;
    float *wt = (float *)ws;
    K_LAUNCH(linear_w_transpose, dim3((in + 31) / 32, (out + 31) / 32), 256, 0, cs)(out, in, w, wt);
    if (k_cuda_check_launch(k, "%s (w transposed for TMA)", shp)) return -1;
    KgRowA a = {dy, out};
    KgColB b = {wt, out};
    Store st = {dx, in};
    return k_cuda_gemm_mm(K_CUDA_MM_TF32, k, shp, n, in, out, a, b, st, (char *)ws + wtb, cs);
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
    int dxr = 1;
    if (dx && !d.raw) dxr = linear_dx_tma(mm, "k_cuda_linear_bwd (input grad)", shp, n, in, out, dy, w, dx, d.ws, cs);
    if (dxr < 0) return -1;
    if (dx && dxr) {
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
