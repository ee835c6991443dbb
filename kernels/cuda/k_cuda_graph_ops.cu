// Layer-graph ops of kernels/k.h on the GPU: max pool (with padding or not), global average
// pool, residual add, embedding (channels-first output) and max over time. The maths
// of each output element is a functor run by k_cuda_each (k_cuda_launch.cuh). No
// atomics: every output is written by one thread, in a fixed order, so results repeat
// bit for bit.
#include "kernels/cuda/k_cuda_launch.cuh"

namespace {

// ---- max pool with padding: one thread per output. Padded cells are skipped (never
// win, as PyTorch's -inf padding); the scan is the CPU's: first maximum wins ties
// (strict >), a NaN is always taken (the last NaN wins).
struct PoolFwd {
    int h, w, ks, st, pad, p, q;
    const void *x; int xt; void *y; int yt; int32_t *idx; // x, y: k_act_ld / k_act_st types
    __host__ __device__ void operator()(size_t o) const
    {
        size_t pl = o / ((size_t)p * q);
        int pq = (int)(o % ((size_t)p * q)), oh = pq / q, ow = pq % q;
        size_t x0 = pl * h * w;
        int h0 = oh * st - pad, w0 = ow * st - pad;
        int hs = k_cuda_imax(h0, 0), he = k_cuda_imin(h0 + ks, h);
        int ws = k_cuda_imax(w0, 0), we = k_cuda_imin(w0 + ks, w);
        float m = -INFINITY;
        int32_t a = hs * w + ws;
        for (int ih = hs; ih < he; ih++)
            for (int iw = ws; iw < we; iw++) {
                int off = ih * w + iw;
                float v = k_act_ld(x, xt, x0 + off);
                if (v > m || v != v) { m = v; a = off; }
            }
        k_act_st(y, yt, o, m);
        idx[o] = a;
    }
};

// One thread per input element: it adds the dy of every window that covers it and
// chose it, in window order (the order of the CPU's scatter). In padded coordinates
// (ih + pad) window oh covers rows [oh*st, oh*st + ks).
struct PoolBwd {
    int h, w, ks, st, pad, p, q;
    const float *dy; const int32_t *idx; float *dx;
    __host__ __device__ void operator()(size_t i) const
    {
        size_t pl = i / ((size_t)h * w);
        int off = (int)(i % ((size_t)h * w)), ih = off / w + pad, iw = off % w + pad;
        int oh_lo = ih >= ks ? (ih - ks) / st + 1 : 0, oh_hi = k_cuda_imin(ih / st, p - 1);
        int ow_lo = iw >= ks ? (iw - ks) / st + 1 : 0, ow_hi = k_cuda_imin(iw / st, q - 1);
        const float *dyp = dy + pl * p * q;
        const int32_t *ip = idx + pl * p * q;
        float s = 0.0f;
        for (int oh = oh_lo; oh <= oh_hi; oh++)
            for (int ow = ow_lo; ow <= ow_hi; ow++)
                if (ip[oh * q + ow] == off) s += dyp[oh * q + ow];
        dx[i] = s;
    }
};

// ---- global average pool: one thread per plane, a sequential sum in double (planes
// are small at the head of a network: 7x7, 8x8).
struct AvgFwd {
    int hw; const void *x; int xt; float *y;
    __host__ __device__ void operator()(size_t pl) const
    {
        double s = 0.0;
        for (int i = 0; i < hw; i++) s += k_act_ld(x, xt, pl * hw + i);
        y[pl] = (float)(s / hw);
    }
};
struct AvgBwd {
    int hw; const float *dy; float *dx;
    __host__ __device__ void operator()(size_t i) const { dx[i] = dy[i / hw] / (float)hw; }
};

struct Add { // relu: the fused add -> ReLU (the unfused ops' bits)
    const void *a, *b; void *y; int at, bt, yt, relu;
    __host__ __device__ void operator()(size_t i) const
    {
        float v = k_act_ld(a, at, i) + k_act_ld(b, bt, i);
        k_act_st(y, yt, i, relu && v < 0.0f ? 0.0f : v);
    }
};

// ---- embedding: y[i, d, t] = table[ids[i*len + t], d], one thread per output.
struct EmbFwd {
    int len, dim; const int32_t *ids; const float *table; float *y;
    __host__ __device__ void operator()(size_t o) const
    {
        size_t i = o / ((size_t)dim * len);
        int r = (int)(o % ((size_t)dim * len)), d = r / len, t = r % len;
        y[o] = table[(size_t)ids[i * len + t] * dim + d];
    }
};

// The gradient of row ids[j], column d, from token j (its first use) on: the tokens
// that use the row, added in token order from zero, as the CPU's zero-then-accumulate.
// The kernel finds the matching tokens 32 at a time (a warp ballot) but adds term(t, d)
// in token order, so the bits are the CPU's.
struct EmbRowSum {
    int ntok, len, dim; const int32_t *ids; const float *dy;
    __host__ __device__ float term(int t, int d) const { return dy[((size_t)(t / len) * dim + d) * len + t % len]; }
};

// ---- max over time: one thread per (n, c) row; first max wins, a NaN is taken.
struct MaxTimeFwd {
    int len; const float *x; float *y; int32_t *idx;
    __host__ __device__ void operator()(size_t r) const
    {
        const float *xr = x + r * len;
        float m = -INFINITY;
        int32_t a = 0;
        for (int t = 0; t < len; t++) {
            float v = xr[t];
            if (v > m || v != v) { m = v; a = t; }
        }
        y[r] = m;
        idx[r] = a;
    }
};
struct MaxTimeBwd {
    int len; const float *dy; const int32_t *idx; float *dx;
    __host__ __device__ void operator()(size_t i) const
    {
        size_t r = i / len;
        dx[i] = idx[r] == (int32_t)(i % len) ? dy[r] : 0.0f;
    }
};

// One block per token j (grid-stride): the block first checks whether an earlier token
// uses the same row; only the first user (the row's leader) writes the row, each
// thread one column, so no two threads ever write the same element. blockDim is a
// multiple of 32 and every branch around the ballot is warp-uniform (d0, t0).
__global__ void emb_bwd_rows(int ntok, EmbRowSum f, float *dtable)
{
    const int lane = threadIdx.x & 31;
    for (int j = blockIdx.x; j < ntok; j += gridDim.x) {
        int32_t v = f.ids[j];
        int dup = 0;
        for (int t = threadIdx.x; t < j && !dup; t += blockDim.x) dup = f.ids[t] == v;
        if (__syncthreads_or(dup)) continue;
        for (int d0 = threadIdx.x - lane; d0 < f.dim; d0 += blockDim.x) {
            int d = d0 + lane;
            float s = 0.0f;
            for (int t0 = j; t0 < ntok; t0 += 32) {
                int t = t0 + lane;
                unsigned m = __ballot_sync(0xffffffffu, t < ntok && f.ids[t] == v);
                for (; m; m &= m - 1) // matching tokens, lowest (earliest) first
                    if (d < f.dim) s += f.term(t0 + __ffs(m) - 1, d);
            }
            if (d < f.dim) dtable[(size_t)v * f.dim + d] = s;
        }
    }
}

int pool_args_bad(const char *kernel, int n, int c, int h, int w, int ks, int st, int pad)
{
    // PyTorch's limits: beyond them a window can lie wholly in the padding.
    if (ks >= 1 && st >= 1 && pad >= 0 && 2 * pad <= ks && h + 2 * pad >= ks && w + 2 * pad >= ks) return 0;
    port_cuda_fail("%s(n=%d c=%d h=%d w=%d ks=%d st=%d pad=%d): needs ks, st >= 1, 0 <= pad <= ks/2 and a "
                   "window that fits", kernel, n, c, h, w, ks, st, pad);
    return -1;
}

// Without padding (floor mode) the same kernels with pad 0: the same windows, scan and
// bits as a pool of its own.
int pool_fwd(const char *kernel, int n, int c, int h, int w, int ks, int st, int pad, const void *x, int xt, void *y,
             int yt, int32_t *idx, port_stream s)
{
    if (pool_args_bad(kernel, n, c, h, w, ks, st, pad)) return -1;
    int p = (h + 2 * pad - ks) / st + 1, q = (w + 2 * pad - ks) / st + 1;
    k_cuda_each((size_t)n * c * p * q, PoolFwd{h, w, ks, st, pad, p, q, x, xt, y, yt, idx}, s);
    return k_cuda_check_launch(kernel, "n=%d c=%d h=%d w=%d ks=%d st=%d pad=%d", n, c, h, w, ks, st, pad);
}

int pool_bwd(const char *kernel, int n, int c, int h, int w, int ks, int st, int pad, const float *dy,
             const int32_t *idx, float *dx, port_stream s)
{
    if (pool_args_bad(kernel, n, c, h, w, ks, st, pad)) return -1;
    int p = (h + 2 * pad - ks) / st + 1, q = (w + 2 * pad - ks) / st + 1;
    k_cuda_each((size_t)n * c * h * w, PoolBwd{h, w, ks, st, pad, p, q, dy, idx, dx}, s);
    return k_cuda_check_launch(kernel, "n=%d c=%d h=%d w=%d ks=%d st=%d pad=%d", n, c, h, w, ks, st, pad);
}

} // namespace

int k_cuda_maxpool2d_pad_fwd(int n, int c, int h, int w, int ks, int st, int pad, const float *x, float *y,
                             int32_t *idx, port_stream s)
{
    return pool_fwd("k_cuda_maxpool2d_pad_fwd", n, c, h, w, ks, st, pad, x, K_CUDA_ACT_F32, y, K_CUDA_ACT_F32, idx, s);
}

int k_cuda_maxpool2d_pad_fwd_t(int n, int c, int h, int w, int ks, int st, int pad, const void *x, int xt, void *y,
                               int yt, int32_t *idx, port_stream s)
{
    return pool_fwd("k_cuda_maxpool2d_pad_fwd", n, c, h, w, ks, st, pad, x, xt, y, yt, idx, s);
}

int k_cuda_maxpool2d_pad_bwd(int n, int c, int h, int w, int ks, int st, int pad, const float *dy,
                             const int32_t *idx, float *dx, port_stream s)
{
    return pool_bwd("k_cuda_maxpool2d_pad_bwd", n, c, h, w, ks, st, pad, dy, idx, dx, s);
}

int k_cuda_maxpool2d_fwd(int n, int c, int h, int w, int ks, int st, const float *x, float *y, int32_t *idx,
                         port_stream s)
{
    return pool_fwd("k_cuda_maxpool2d_fwd", n, c, h, w, ks, st, 0, x, K_CUDA_ACT_F32, y, K_CUDA_ACT_F32, idx, s);
}

int k_cuda_maxpool2d_bwd(int n, int c, int h, int w, int ks, int st, const float *dy, const int32_t *idx,
                         float *dx, port_stream s)
{
    return pool_bwd("k_cuda_maxpool2d_bwd", n, c, h, w, ks, st, 0, dy, idx, dx, s);
}

int k_cuda_global_avgpool_fwd_t(int n, int c, int hw, const void *x, int xt, float *y, port_stream s)
{
    k_cuda_each((size_t)n * c, AvgFwd{hw, x, xt, y}, s);
    char d_[48];
    return k_cuda_check_launch("k_cuda_global_avgpool_fwd", "n=%d c=%d hw=%d%s", n, c, hw, k_act_desc(d_, sizeof d_, xt, 0));
}

int k_cuda_global_avgpool_fwd(int n, int c, int hw, const float *x, float *y, port_stream s)
{
    return k_cuda_global_avgpool_fwd_t(n, c, hw, x, K_CUDA_ACT_F32, y, s);
}

int k_cuda_global_avgpool_bwd(int n, int c, int hw, const float *dy, float *dx, port_stream s)
{
    k_cuda_each((size_t)n * c * hw, AvgBwd{hw, dy, dx}, s);
    return k_cuda_check_launch("k_cuda_global_avgpool_bwd", "n=%d c=%d hw=%d", n, c, hw);
}

int k_cuda_add_t(size_t n, const void *a, int at, const void *b, int bt, void *y, int yt, port_stream s)
{
    k_cuda_each(n, Add{a, b, y, at, bt, yt, 0}, s);
    char d_[48];
    return k_cuda_check_launch("k_cuda_add", "n=%zu%s", n, k_act_desc(d_, sizeof d_, at | bt, yt));
}

int k_cuda_add_relu_t(size_t n, const void *a, int at, const void *b, int bt, void *y, int yt, port_stream s)
{
    k_cuda_each(n, Add{a, b, y, at, bt, yt, 1}, s);
    char d_[48];
    return k_cuda_check_launch("k_cuda_add_relu", "n=%zu%s", n, k_act_desc(d_, sizeof d_, at | bt, yt));
}

int k_cuda_add(size_t n, const float *a, const float *b, float *y, port_stream s)
{
    return k_cuda_add_t(n, a, K_CUDA_ACT_F32, b, K_CUDA_ACT_F32, y, K_CUDA_ACT_F32, s);
}

int k_cuda_embedding_fwd(int n, int len, int dim, const int32_t *ids, const float *table, float *y,
                         port_stream s)
{
    k_cuda_each((size_t)n * dim * len, EmbFwd{len, dim, ids, table, y}, s);
    return k_cuda_check_launch("k_cuda_embedding_fwd", "n=%d len=%d dim=%d", n, len, dim);
}

int k_cuda_embedding_bwd(int n, int len, int dim, int vocab, const int32_t *ids, const float *dy, float *dtable,
                         port_stream s)
{
    int ntok = n * len;
    EmbRowSum f = {ntok, len, dim, ids, dy};
    cudaError_t e = cudaMemsetAsync(dtable, 0, (size_t)vocab * dim * sizeof(float), (cudaStream_t)s);
    if (e != cudaSuccess) {
        port_cuda_fail("k_cuda_embedding_bwd(n=%d len=%d dim=%d vocab=%d): zeroing dtable: %s", n, len, dim, vocab,
                       cudaGetErrorString(e));
        return -1;
    }
    if (ntok == 0 || dim == 0) return 0;
    int threads = dim >= K_CUDA_THREADS ? K_CUDA_THREADS : (dim + 31) / 32 * 32;
    K_LAUNCH(emb_bwd_rows, ntok < 65535 * 16 ? ntok : 65535 * 16, threads, 0, (cudaStream_t)s)(ntok, f, dtable);
    return k_cuda_check_launch("k_cuda_embedding_bwd", "n=%d len=%d dim=%d vocab=%d", n, len, dim, vocab);
}

int k_cuda_max_time_fwd(int n, int c, int len, const float *x, float *y, int32_t *idx, port_stream s)
{
    k_cuda_each((size_t)n * c, MaxTimeFwd{len, x, y, idx}, s);
    return k_cuda_check_launch("k_cuda_max_time_fwd", "n=%d c=%d len=%d", n, c, len);
}

int k_cuda_max_time_bwd(int n, int c, int len, const float *dy, const int32_t *idx, float *dx, port_stream s)
{
    k_cuda_each((size_t)n * c * len, MaxTimeBwd{len, dy, idx, dx}, s);
    return k_cuda_check_launch("k_cuda_max_time_bwd", "n=%d c=%d len=%d", n, c, len);
}
