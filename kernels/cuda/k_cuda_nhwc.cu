// Channels-last BN sums and pools (k_cuda_nhwc.h). No atomics: every output is written by
// one thread, and the sums' order depends on the shapes only, so a run repeats bit for bit.
//
// BN's per-channel sums over [rows, C]: a block is 32 channels (a warp's lanes, so a
// warp reads 32 consecutive channels of a row) x NB_R row lanes over one strip of rows;
// each thread adds its rows (r = strip start + lane, + NB_R, ...) in double, a fixed
// shared-memory tree adds the row lanes, and the strips' partials go to the workspace.
// A second, per-channel pass adds the strips in order. The strips depend on rows and C
// only (about NB_BLOCKS blocks in all, at least NB_MIN_ROWS rows a strip).
#include "kernels/cuda/k_cuda_launch.cuh"
#include "kernels/cuda/k_cuda_nhwc.h"
#include <algorithm>

#define NB_C 32
#define NB_R 8
#define NB_BLOCKS 1024
#define NB_MIN_ROWS 64

namespace {

struct Strips {
    size_t len; // rows a strip
    int n;      // strips
};
Strips strips(size_t rows, int C)
{
    size_t cb = ((size_t)C + NB_C - 1) / NB_C, want = std::max<size_t>(1, NB_BLOCKS / cb);
    size_t len = std::max<size_t>(NB_MIN_ROWS, (rows + want - 1) / want);
    Strips s = {len, (int)std::max<size_t>(1, (rows + len - 1) / len)};
    return s;
}

// The pass's two per-element terms, added into a and b: F::terms(row, c, a, b).
// mean, var: x and (x - mean)^2 with mean in double from the first pass (mu).
struct StatSum {
    const void *x; int xt, C;
    __host__ __device__ void terms(size_t r, int c, double &a, double &) const { a += k_act_ld(x, xt, r * C + c); }
};
struct StatSq {
    const void *x; int xt, C; const double *mu;
    __host__ __device__ void terms(size_t r, int c, double &a, double &) const
    {
        double d = k_act_ld(x, xt, r * C + c) - mu[c];
        a += d * d;
    }
};
// dbeta, dgamma: k_cuda_bn.cu's BwdPart per element.
struct BwdSum {
    const void *x; int xt, C; const float *mean, *invstd, *gamma, *beta, *dy; int relu;
    __host__ __device__ void terms(size_t r, int c, double &a, double &b) const
    {
        size_t i = r * C + c;
        float g = gamma ? gamma[c] : 1.0f, be = beta ? beta[c] : 0.0f;
        float xh = (k_act_ld(x, xt, i) - mean[c]) * invstd[c];
        float d = relu && !(fmaf(xh, g, be) > 0.0f) ? 0.0f : dy[i];
        a += d;
        b += (double)d * xh;
    }
};

// part[(strip * C + c) * 2 + {0, 1}]: strip blockIdx.y's sums of channel c.
template <class F>
__global__ void __launch_bounds__(NB_C *NB_R) nhwc_part(F f, size_t rows, int C, size_t len, double *part)
{
    __shared__ double sh[2][NB_R][NB_C + 1];
    const int tx = threadIdx.x, ty = threadIdx.y, c = blockIdx.x * NB_C + tx;
    const size_t r0 = (size_t)blockIdx.y * len, r1 = r0 + len < rows ? r0 + len : rows;
    double a = 0.0, b = 0.0;
    if (c < C)
        for (size_t r = r0 + ty; r < r1; r += NB_R) f.terms(r, c, a, b);
    sh[0][ty][tx] = a, sh[1][ty][tx] = b;
    __syncthreads();
    for (int w = NB_R / 2; w > 0; w >>= 1) {
        if (ty < w) sh[0][ty][tx] += sh[0][ty + w][tx], sh[1][ty][tx] += sh[1][ty + w][tx];
        __syncthreads();
    }
    if (ty == 0 && c < C) {
        double *p = part + ((size_t)blockIdx.y * C + c) * 2;
        p[0] = sh[0][0][tx], p[1] = sh[1][0][tx];
    }
}

// The strips in order: k = 0 (a) or 1 (b) of channel c.
__host__ __device__ inline double strip_sum(const double *part, int ns, int C, int c, int k)
{
    double s = 0.0;
    for (int j = 0; j < ns; j++) s += part[((size_t)j * C + c) * 2 + k];
    return s;
}
struct FinMean { // the first pass: mu in double for the second
    const double *part; int ns, C; double m; double *mu;
    __host__ __device__ void operator()(size_t c) const { mu[c] = strip_sum(part, ns, C, (int)c, 0) / m; }
};
struct FinVar {
    const double *part; int ns, C; double m; const double *mu; float *mean, *var;
    __host__ __device__ void operator()(size_t c) const
    {
        mean[c] = (float)mu[c];
        var[c] = (float)(strip_sum(part, ns, C, (int)c, 0) / m);
    }
};
struct FinBwd {
    const double *part; int ns, C; float *dgamma, *dbeta;
    __host__ __device__ void operator()(size_t c) const
    {
        dbeta[c] = (float)strip_sum(part, ns, C, (int)c, 0);
        dgamma[c] = (float)strip_sum(part, ns, C, (int)c, 1);
    }
};

template <class F> void part_launch(F f, size_t rows, int C, Strips st, double *part, cudaStream_t s)
{
    dim3 grid((unsigned)((C + NB_C - 1) / NB_C), (unsigned)st.n), block(NB_C, NB_R);
    K_LAUNCH(nhwc_part<F>, grid, block, 0, s)(f, rows, C, st.len, part);
}

int ws_bad(const char *k, size_t rows, int c, const void *ws)
{
    if (rows && c > 0 && ws && !((uintptr_t)ws & 15) && strips(rows, c).n <= 65535) return 0;
    port_cuda_fail("%s(rows=%zu c=%d): needs rows, c > 0 and a 16-byte aligned workspace of "
                   "k_cuda_bn_nhwc_workspace", k, rows, c);
    return -1;
}

// ---- max pool on [n, h, w, c]: one thread per output (n, oh, ow, c); the NCHW kernel's
// window scan (first maximum wins, a NaN is taken) and its h * w offsets in idx.
struct PoolFwdNhwc {
    int C, h, w, ks, st, pad, p, q; const void *x; int xt; void *y; int yt; int32_t *idx;
    __host__ __device__ void operator()(size_t o) const
    {
        int c = (int)(o % C);
        size_t pix = o / C, nn = pix / ((size_t)p * q);
        int pq = (int)(pix % ((size_t)p * q)), oh = pq / q, ow = pq % q;
        int h0 = oh * st - pad, w0 = ow * st - pad;
        int hs = k_cuda_imax(h0, 0), he = k_cuda_imin(h0 + ks, h), ws = k_cuda_imax(w0, 0), we = k_cuda_imin(w0 + ks, w);
        float m = -INFINITY;
        int32_t a = hs * w + ws;
        for (int ih = hs; ih < he; ih++)
            for (int iw = ws; iw < we; iw++) {
                int off = ih * w + iw;
                float v = k_act_ld(x, xt, (nn * h * w + off) * C + c);
                if (v > m || v != v) { m = v; a = off; }
            }
        k_act_st(y, yt, o, m);
        idx[o] = a;
    }
};
// One thread per input element: the dy of every window that chose it, in window order.
struct PoolBwdNhwc {
    int C, h, w, ks, st, pad, p, q; const float *dy; const int32_t *idx; float *dx;
    __host__ __device__ void operator()(size_t i) const
    {
        int c = (int)(i % C);
        size_t pix = i / C, nn = pix / ((size_t)h * w);
        int off = (int)(pix % ((size_t)h * w)), ih = off / w + pad, iw = off % w + pad;
        int oh_lo = ih >= ks ? (ih - ks) / st + 1 : 0, oh_hi = k_cuda_imin(ih / st, p - 1);
        int ow_lo = iw >= ks ? (iw - ks) / st + 1 : 0, ow_hi = k_cuda_imin(iw / st, q - 1);
        size_t o0 = nn * p * q;
        float s = 0.0f;
        for (int oh = oh_lo; oh <= oh_hi; oh++)
            for (int ow = ow_lo; ow <= ow_hi; ow++) {
                size_t o = (o0 + (size_t)oh * q + ow) * C + c;
                if (idx[o] == off) s += dy[o];
            }
        dx[i] = s;
    }
};

// ---- global average: one thread per (n, c), the plane in order in double (the NCHW
// kernel's sum); neighbouring threads read neighbouring channels.
struct AvgFwdNhwc {
    int C, hw; const void *x; int xt; float *y;
    __host__ __device__ void operator()(size_t nc) const
    {
        size_t nn = nc / C, c = nc % C;
        double s = 0.0;
        for (int i = 0; i < hw; i++) s += k_act_ld(x, xt, (nn * hw + i) * C + c);
        y[nc] = (float)(s / hw);
    }
};
struct AvgBwdNhwc {
    int C, hw; const float *dy; float *dx;
    __host__ __device__ void operator()(size_t i) const
    {
        dx[i] = dy[(i / ((size_t)hw * C)) * C + i % C] / (float)hw;
    }
};

// y[(n * B + b) * A + a] = x[(n * A + a) * B + b], elements of es bytes (2 or 4).
struct Permute {
    int A, B, es; const void *x; void *y;
    __host__ __device__ void operator()(size_t o) const
    {
        size_t ab = (size_t)A * B, nn = o / ab, r = o % ab, b = r / A, a = r % A, i = nn * ab + a * B + b;
        if (es == 4) ((float *)y)[o] = ((const float *)x)[i];
        else ((uint16_t *)y)[o] = ((const uint16_t *)x)[i];
    }
};

} // namespace

size_t k_cuda_bn_nhwc_workspace(size_t rows, int c)
{
    if (!rows || c <= 0) return 0;
    Strips st = strips(rows, c);
    return ((size_t)st.n * c * 2 + c) * sizeof(double);
}

int k_cuda_bn_stats_nhwc(size_t rows, int c, const void *x, int xt, float *mean, float *var, void *ws,
                         port_stream s)
{
    const char *k = "k_cuda_bn_stats_nhwc";
    if (ws_bad(k, rows, c, ws)) return -1;
    Strips st = strips(rows, c);
    double *part = (double *)ws, *mu = part + (size_t)st.n * c * 2;
    cudaStream_t cs = (cudaStream_t)s;
    part_launch(StatSum{x, xt, c}, rows, c, st, part, cs);
    k_cuda_each((size_t)c, FinMean{part, st.n, c, (double)rows, mu}, s);
    part_launch(StatSq{x, xt, c, mu}, rows, c, st, part, cs);
    k_cuda_each((size_t)c, FinVar{part, st.n, c, (double)rows, mu, mean, var}, s);
    char d_[48];
    return k_cuda_check_launch(k, "rows=%zu c=%d%s", rows, c, k_act_desc(d_, sizeof d_, xt, 0));
}

int k_cuda_bn_bwd_sums_nhwc(size_t rows, int c, const void *x, int xt, const float *mean, const float *invstd,
                            const float *gamma, const float *beta, int relu, const float *dy, float *dgamma,
                            float *dbeta, void *ws, port_stream s)
{
    const char *k = relu ? "k_cuda_bn_relu_bwd_sums_nhwc" : "k_cuda_bn_bwd_sums_nhwc";
    if (ws_bad(k, rows, c, ws)) return -1;
    Strips st = strips(rows, c);
    double *part = (double *)ws;
    part_launch(BwdSum{x, xt, c, mean, invstd, gamma, beta, dy, relu}, rows, c, st, part, (cudaStream_t)s);
    k_cuda_each((size_t)c, FinBwd{part, st.n, c, dgamma, dbeta}, s);
    char d_[48];
    return k_cuda_check_launch(k, "rows=%zu c=%d%s", rows, c, k_act_desc(d_, sizeof d_, xt, 0));
}

// k_cuda_graph_ops.cu's limits (PyTorch's: beyond them a window can lie wholly in the padding).
static int pool_args_bad(const char *kernel, int n, int c, int h, int w, int ks, int st, int pad)
{
    if (ks >= 1 && st >= 1 && pad >= 0 && 2 * pad <= ks && h + 2 * pad >= ks && w + 2 * pad >= ks && c > 0) return 0;
    port_cuda_fail("%s(n=%d c=%d h=%d w=%d ks=%d st=%d pad=%d): needs ks, st >= 1, 0 <= pad <= ks/2 and a "
                   "window that fits", kernel, n, c, h, w, ks, st, pad);
    return -1;
}

int k_cuda_maxpool2d_nhwc_fwd(int n, int c, int h, int w, int ks, int st, int pad, const void *x, int xt, void *y,
                              int yt, int32_t *idx, port_stream s)
{
    const char *k = "k_cuda_maxpool2d_nhwc_fwd";
    if (pool_args_bad(k, n, c, h, w, ks, st, pad)) return -1;
    int p = (h + 2 * pad - ks) / st + 1, q = (w + 2 * pad - ks) / st + 1;
    k_cuda_each((size_t)n * p * q * c, PoolFwdNhwc{c, h, w, ks, st, pad, p, q, x, xt, y, yt, idx}, s);
    return k_cuda_check_launch(k, "n=%d c=%d h=%d w=%d ks=%d st=%d pad=%d", n, c, h, w, ks, st, pad);
}

int k_cuda_maxpool2d_nhwc_bwd(int n, int c, int h, int w, int ks, int st, int pad, const float *dy,
                              const int32_t *idx, float *dx, port_stream s)
{
    const char *k = "k_cuda_maxpool2d_nhwc_bwd";
    if (pool_args_bad(k, n, c, h, w, ks, st, pad)) return -1;
    int p = (h + 2 * pad - ks) / st + 1, q = (w + 2 * pad - ks) / st + 1;
    k_cuda_each((size_t)n * h * w * c, PoolBwdNhwc{c, h, w, ks, st, pad, p, q, dy, idx, dx}, s);
    return k_cuda_check_launch(k, "n=%d c=%d h=%d w=%d ks=%d st=%d pad=%d", n, c, h, w, ks, st, pad);
}

int k_cuda_global_avgpool_nhwc_fwd(int n, int c, int hw, const void *x, int xt, float *y, port_stream s)
{
    k_cuda_each((size_t)n * c, AvgFwdNhwc{c, hw, x, xt, y}, s);
    char d_[48];
    return k_cuda_check_launch("k_cuda_global_avgpool_nhwc_fwd", "n=%d c=%d hw=%d%s", n, c, hw,
                               k_act_desc(d_, sizeof d_, xt, 0));
}

int k_cuda_global_avgpool_nhwc_bwd(int n, int c, int hw, const float *dy, float *dx, port_stream s)
{
    k_cuda_each((size_t)n * c * hw, AvgBwdNhwc{c, hw, dy, dx}, s);
    return k_cuda_check_launch("k_cuda_global_avgpool_nhwc_bwd", "n=%d c=%d hw=%d", n, c, hw);
}

int k_cuda_nchw_to_nhwc(int n, int c, int hw, const void *x, void *y, int t, port_stream s)
{
    k_cuda_each((size_t)n * c * hw, Permute{c, hw, t == K_CUDA_ACT_F32 ? 4 : 2, x, y}, s);
    return k_cuda_check_launch("k_cuda_nchw_to_nhwc", "n=%d c=%d hw=%d", n, c, hw);
}

int k_cuda_nhwc_to_nchw(int n, int c, int hw, const void *x, void *y, int t, port_stream s)
{
    k_cuda_each((size_t)n * c * hw, Permute{hw, c, t == K_CUDA_ACT_F32 ? 4 : 2, x, y}, s);
    return k_cuda_check_launch("k_cuda_nhwc_to_nchw", "n=%d c=%d hw=%d", n, c, hw);
}
