// The transformer kernels on the device (kernels/k_tfm.h's twins): LayerNorm, GELU,
// token + position embedding, Hugging Face's Conv1D, causal attention with an online
// softmax (only the log-sum-exp kept, probabilities recomputed in backward), and the
// tied classifier with softmax cross-entropy fused a block of rows at a time.
// Launched with K_LAUNCH (nvcc on a GPU, the SIMT executor in make test). No atomics:
// every sum has one owner and a fixed order (the same bits on every run and GPU).
// GELU is the CPU's bit for bit (its Cephes exp written with rounded operations); the
// rest matches the CPU to rounding (sums in another order).
#include "kernels/cuda/k_cuda_gemm.cuh"
#include "kernels/k_tfm.h"
#include <stdio.h>

namespace {

// ---- GELU as x sigmoid(2u) with the CPU's exp (k_tfm_simd.h): same operations, each
// rounded as the CPU rounds it (no contraction), so the same bits.
__device__ __forceinline__ float cephes_exp(float x)
{
    int under = x < -87.0f;
    float xc = x > 88.0f ? 88.0f : under ? -87.0f : x;
    float t = __fadd_rn(__fmul_rn(xc, 1.44269504088896341f), 12582912.0f);
    float nf = __fsub_rn(t, 12582912.0f);
    float r = __fsub_rn(xc, __fmul_rn(nf, 0.693359375f));
    r = __fsub_rn(r, __fmul_rn(nf, -2.12194440e-4f));
    float p = __fadd_rn(__fmul_rn(1.9875691500e-4f, r), 1.3981999507e-3f);
    p = __fadd_rn(__fmul_rn(p, r), 8.3334519073e-3f);
    p = __fadd_rn(__fmul_rn(p, r), 4.1665795894e-2f);
    p = __fadd_rn(__fmul_rn(p, r), 1.6666665459e-1f);
    p = __fadd_rn(__fmul_rn(p, r), 5.0000001201e-1f);
    p = __fadd_rn(__fadd_rn(__fmul_rn(__fmul_rn(p, r), r), r), 1.0f);
    int e = ((__float_as_int(t) - 0x4B400000) + 127) * (1 << 23);
    return under ? 0.0f : __fmul_rn(p, __int_as_float(e));
}

#define GELU_K0 0.7978845608028654f
#define GELU_K1 0.044715f

__global__ void gelu_fwd(size_t n, const float *x, float *y)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float v = x[i];
        float u = __fadd_rn(v, __fmul_rn(__fmul_rn(__fmul_rn(GELU_K1, v), v), v));
        float e = cephes_exp(__fmul_rn(u, -2.0f * GELU_K0));
        y[i] = __fdiv_rn(v, __fadd_rn(1.0f, e));
    }
}

__global__ void gelu_bwd(size_t n, const float *x, const float *dy, float *dx)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float v = x[i], v2 = __fmul_rn(v, v);
        float u = __fadd_rn(v, __fmul_rn(__fmul_rn(GELU_K1, v2), v));
        float e = cephes_exp(__fmul_rn(u, -2.0f * GELU_K0)), s = __fdiv_rn(1.0f, __fadd_rn(1.0f, e));
        float du = __fmul_rn(GELU_K0, __fadd_rn(1.0f, __fmul_rn(3.0f * GELU_K1, v2)));
        float inner = __fmul_rn(__fmul_rn(e, s), __fmul_rn(__fmul_rn(2.0f, v), du));
        dx[i] = __fmul_rn(dy[i], __fmul_rn(s, __fadd_rn(1.0f, inner)));
    }
}

// ---- LayerNorm: one block per row, sums in double over a fixed tree.
__global__ void __launch_bounds__(K_CUDA_THREADS)
ln_fwd(int n, int c, const float *x, const float *w, const float *b, float eps, float *y, float *mean, float *rstd)
{
    __shared__ double sh[K_CUDA_THREADS];
    for (int r = blockIdx.x; r < n; r += gridDim.x) {
        const float *xr = x + (size_t)r * c;
        double s = 0;
        for (int i = threadIdx.x; i < c; i += blockDim.x) s += xr[i];
        float m = (float)(k_cuda_block_sum(s, sh) / c);
        double q = 0;
        for (int i = threadIdx.x; i < c; i += blockDim.x) {
            double d = (double)xr[i] - m;
            q += d * d;
        }
        float rs = 1.0f / sqrtf((float)(k_cuda_block_sum(q, sh) / c) + eps);
        for (int i = threadIdx.x; i < c; i += blockDim.x) {
            float v = (xr[i] - m) * rs * w[i];
            y[(size_t)r * c + i] = b ? v + b[i] : v;
        }
        if (threadIdx.x == 0) mean[r] = m, rstd[r] = rs;
    }
}

// dx = rstd (dy w - mean(dy w) - xhat mean(dy w xhat)); dx may be dy (each thread
// reads its elements before writing them, the sums come first).
__global__ void __launch_bounds__(K_CUDA_THREADS)
ln_bwd_dx(int n, int c, const float *x, const float *w, const float *mean, const float *rstd, const float *dy,
          float *dx)
{
    __shared__ double sh[K_CUDA_THREADS];
    for (int r = blockIdx.x; r < n; r += gridDim.x) {
        const float *xr = x + (size_t)r * c, *dr = dy + (size_t)r * c;
        float m = mean[r], rs = rstd[r];
        double a = 0, bsum = 0;
        for (int i = threadIdx.x; i < c; i += blockDim.x) {
            float g = dr[i] * w[i];
            a += g;
            bsum += (double)g * ((xr[i] - m) * rs);
        }
        float ma = (float)(k_cuda_block_sum(a, sh) / c), mb = (float)(k_cuda_block_sum(bsum, sh) / c);
        for (int i = threadIdx.x; i < c; i += blockDim.x) {
            float g = dr[i] * w[i];
            dx[(size_t)r * c + i] = rs * (g - ma - (xr[i] - m) * rs * mb);
        }
    }
}

// dw[i] = sum over rows of dy xhat, db[i] = sum of dy: one thread per column, rows in order.
__global__ void ln_bwd_wb(int n, int c, const float *x, const float *mean, const float *rstd, const float *dy,
                          float *dw, float *db)
{
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < c; i += gridDim.x * blockDim.x) {
        float sw = 0.0f, sb = 0.0f;
        for (int r = 0; r < n; r++) {
            float g = dy[(size_t)r * c + i];
            sw += g * ((x[(size_t)r * c + i] - mean[r]) * rstd[r]);
            sb += g;
        }
        if (dw) dw[i] = sw;
        if (db) db[i] = sb;
    }
}

// ---- token + position embedding
__global__ void tpe_fwd(int b, int len, int c, const int32_t *ids, int ld, const float *wte, const float *wpe,
                        float *y)
{
    size_t total = (size_t)b * len * c;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        size_t row = i / c;
        int k = (int)(i % c), t = (int)(row % len), s = (int)(row / len);
        y[i] = wte[(size_t)ids[(size_t)s * ld + t] * c + k] + wpe[(size_t)t * c + k];
    }
}

// dwpe[t] = sum over samples of dy[s, t]: one thread per (t, k), samples in order.
__global__ void tpe_bwd_wpe(int b, int len, int c, const float *dy, float *dwpe)
{
    size_t total = (size_t)len * c;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total; i += (size_t)gridDim.x * blockDim.x) {
        float s = 0.0f;
        for (int q = 0; q < b; q++) s += dy[(size_t)q * len * c + i];
        dwpe[i] = s;
    }
}

__global__ void zero_f(size_t n, float *x)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        x[i] = 0.0f;
}

// dwte: one block per token; the first token with an id sums the dy of every token
// with that id, in token order, into its row (added when acc: a tied classifier
// wrote the row first). Other rows stay as they are (zeroed before unless acc).
__global__ void tpe_bwd_wte(int b, int len, int c, const int32_t *ids, int ld, const float *dy, float *dwte, int acc)
{
    int ntok = b * len;
    for (int tok = blockIdx.x; tok < ntok; tok += gridDim.x) {
        int id = ids[(size_t)(tok / len) * ld + tok % len];
        int first = 1;
        for (int u = 0; u < tok && first; u++) first = ids[(size_t)(u / len) * ld + u % len] != id;
        if (!first) continue;
        for (int k = threadIdx.x; k < c; k += blockDim.x) {
            float s = 0.0f;
            for (int u = tok; u < ntok; u++)
                if (ids[(size_t)(u / len) * ld + u % len] == id) s += dy[(size_t)u * c + k];
            dwte[(size_t)id * c + k] = acc ? dwte[(size_t)id * c + k] + s : s;
        }
    }
}

// ---- the GEMM's store for row-major [rows, cols] outputs (its loaders: k_cuda_gemm.cuh's KgRowA ...)
struct Put { // y = v + bias[n], or y += v when add
    float *y; const float *bias; int ld, add;
    __host__ __device__ void operator()(int, int m, int n, float v) const
    {
        float *p = y + (size_t)m * ld + n;
        *p = add ? *p + v : v + (bias ? bias[n] : 0.0f);
    }
};

__global__ void col_sums(int n, int c, const float *dy, float *db)
{
    for (int o = blockIdx.x * blockDim.x + threadIdx.x; o < c; o += gridDim.x * blockDim.x) {
        float s = 0.0f;
        for (int r = 0; r < n; r++) s += dy[(size_t)r * c + o];
        db[o] = s;
    }
}

// ---- causal attention. qkv rows [t, 3C] (C = h hd): q at column j hd, k at C + j hd,
// v at 2C + j hd. Forward: one thread per (b, head, query row), keys streamed through
// an online softmax; lse[b, h, i] kept.
__device__ __forceinline__ const float *qkv_at(const float *qkv, int t, int h, int hd, int s, int i, int part, int j)
{
    return qkv + ((size_t)s * t + i) * 3 * h * hd + (size_t)part * h * hd + (size_t)j * hd;
}

__global__ void attn_fwd(int b, int t, int h, int hd, float scale, const float *qkv, float *y, float *lse)
{
    size_t rows = (size_t)b * h * t;
    float acc[K_ATTN_MAX_HD];
    for (size_t g = blockIdx.x * (size_t)blockDim.x + threadIdx.x; g < rows; g += (size_t)gridDim.x * blockDim.x) {
        int i = (int)(g % t), hh = (int)(g / t % h), s = (int)(g / ((size_t)t * h));
        const float *q = qkv_at(qkv, t, h, hd, s, i, 0, hh);
        float mx = -INFINITY, l = 0.0f;
        for (int d = 0; d < hd; d++) acc[d] = 0.0f;
        for (int j = 0; j <= i; j++) {
            const float *k = qkv_at(qkv, t, h, hd, s, j, 1, hh), *v = qkv_at(qkv, t, h, hd, s, j, 2, hh);
            float sc = 0.0f;
            for (int d = 0; d < hd; d++) sc += q[d] * k[d];
            sc *= scale;
            float nm = fmaxf(mx, sc), corr = expf(mx - nm), p = expf(sc - nm);
            l = l * corr + p;
            for (int d = 0; d < hd; d++) acc[d] = acc[d] * corr + p * v[d];
            mx = nm;
        }
        float *yr = y + ((size_t)s * t + i) * h * hd + (size_t)hh * hd;
        for (int d = 0; d < hd; d++) yr[d] = acc[d] / l;
        lse[g] = mx + logf(l);
    }
}

// D[b, h, i] = dy_i . y_i (the softmax backward's row term)
__global__ void attn_bwd_d(int b, int t, int h, int hd, const float *y, const float *dy, float *dd)
{
    size_t rows = (size_t)b * h * t;
    for (size_t g = blockIdx.x * (size_t)blockDim.x + threadIdx.x; g < rows; g += (size_t)gridDim.x * blockDim.x) {
        int i = (int)(g % t), hh = (int)(g / t % h), s = (int)(g / ((size_t)t * h));
        size_t o = ((size_t)s * t + i) * h * hd + (size_t)hh * hd;
        float a = 0.0f;
        for (int d = 0; d < hd; d++) a += dy[o + d] * y[o + d];
        dd[g] = a;
    }
}

// P_ij = exp(scale q_i.k_j - lse_i), dS_ij = P_ij (dy_i . v_j - D_i).
__device__ __forceinline__ void attn_pds(const float *qkv, const float *dy, const float *lse, const float *dd, int t,
                                         int h, int hd, float scale, int s, int hh, int i, int j, float *p, float *ds)
{
    const float *q = qkv_at(qkv, t, h, hd, s, i, 0, hh), *k = qkv_at(qkv, t, h, hd, s, j, 1, hh);
    const float *v = qkv_at(qkv, t, h, hd, s, j, 2, hh);
    const float *g = dy + ((size_t)s * t + i) * h * hd + (size_t)hh * hd;
    size_t r = ((size_t)s * h + hh) * t + i;
    float sc = 0.0f, dp = 0.0f;
    for (int d = 0; d < hd; d++) sc += q[d] * k[d], dp += g[d] * v[d];
    *p = expf(sc * scale - lse[r]);
    *ds = *p * (dp - dd[r]);
}

// dq_i = scale sum_{j <= i} dS_ij k_j: one thread per query row.
__global__ void attn_bwd_dq(int b, int t, int h, int hd, float scale, const float *qkv, const float *dy,
                            const float *lse, const float *dd, float *dqkv)
{
    size_t rows = (size_t)b * h * t;
    for (size_t gi = blockIdx.x * (size_t)blockDim.x + threadIdx.x; gi < rows; gi += (size_t)gridDim.x * blockDim.x) {
        int i = (int)(gi % t), hh = (int)(gi / t % h), s = (int)(gi / ((size_t)t * h));
        float *dq = dqkv + ((size_t)s * t + i) * 3 * h * hd + (size_t)hh * hd;
        for (int d = 0; d < hd; d++) dq[d] = 0.0f;
        for (int j = 0; j <= i; j++) {
            float p, ds;
            attn_pds(qkv, dy, lse, dd, t, h, hd, scale, s, hh, i, j, &p, &ds);
            const float *k = qkv_at(qkv, t, h, hd, s, j, 1, hh);
            for (int d = 0; d < hd; d++) dq[d] += ds * scale * k[d];
        }
    }
}

// dk_j = scale sum_{i >= j} dS_ij q_i, dv_j = sum_{i >= j} P_ij dy_i: one thread per key row.
__global__ void attn_bwd_dkv(int b, int t, int h, int hd, float scale, const float *qkv, const float *dy,
                             const float *lse, const float *dd, float *dqkv)
{
    size_t rows = (size_t)b * h * t;
    for (size_t gj = blockIdx.x * (size_t)blockDim.x + threadIdx.x; gj < rows; gj += (size_t)gridDim.x * blockDim.x) {
        int j = (int)(gj % t), hh = (int)(gj / t % h), s = (int)(gj / ((size_t)t * h));
        float *dk = dqkv + ((size_t)s * t + j) * 3 * h * hd + (size_t)h * hd + (size_t)hh * hd;
        float *dv = dk + (size_t)h * hd;
        for (int d = 0; d < hd; d++) dk[d] = 0.0f, dv[d] = 0.0f;
        for (int i = j; i < t; i++) {
            float p, ds;
            attn_pds(qkv, dy, lse, dd, t, h, hd, scale, s, hh, i, j, &p, &ds);
            const float *q = qkv_at(qkv, t, h, hd, s, i, 0, hh);
            const float *g = dy + ((size_t)s * t + i) * h * hd + (size_t)hh * hd;
            for (int d = 0; d < hd; d++) dk[d] += ds * scale * q[d], dv[d] += p * g[d];
        }
    }
}

// ---- the classifier's softmax rows: logits l[r, v] in place; loss per row; with
// grads, l becomes scale (softmax - onehot). One block per row, sums in double.
__global__ void __launch_bounds__(K_CUDA_THREADS)
cl_softmax(int nr, int v, float *l, const int32_t *tgt, float scale, int grads, float *loss_rows)
{
    __shared__ double sh[K_CUDA_THREADS];
    __shared__ float shm[K_CUDA_THREADS];
    for (int r = blockIdx.x; r < nr; r += gridDim.x) {
        float *lr = l + (size_t)r * v;
        int32_t tg = tgt[r];
        if (tg < 0 || tg >= v) {
            if (threadIdx.x == 0 && loss_rows) loss_rows[r] = 0.0f;
            if (grads)
                for (int i = threadIdx.x; i < v; i += blockDim.x) lr[i] = 0.0f;
            continue;
        }
        float mx = -INFINITY;
        for (int i = threadIdx.x; i < v; i += blockDim.x) mx = fmaxf(mx, lr[i]);
        shm[threadIdx.x] = mx;
        __syncthreads();
        for (int w = K_CUDA_THREADS / 2; w > 0; w >>= 1) {
            if ((int)threadIdx.x < w) shm[threadIdx.x] = fmaxf(shm[threadIdx.x], shm[threadIdx.x + w]);
            __syncthreads();
        }
        mx = shm[0];
        float lt = lr[tg];
        double s = 0;
        for (int i = threadIdx.x; i < v; i += blockDim.x) s += (double)expf(lr[i] - mx);
        double sum = k_cuda_block_sum(s, sh);
        if (threadIdx.x == 0 && loss_rows) loss_rows[r] = (float)((double)mx + log(sum) - (double)lt);
        if (grads) {
            float f = (float)(scale / sum);
            for (int i = threadIdx.x; i < v; i += blockDim.x) lr[i] = expf(lr[i] - mx) * f - (i == tg ? scale : 0.0f);
        }
        __syncthreads(); // shm is reused by the next row
    }
}

#define CL_BUDGET (1L << 22) // floats of logits per row block (16 MiB), as the CPU
static int cl_rows(int n, int v)
{
    long r = CL_BUDGET / (v > 0 ? v : 1);
    r = r < 16 ? 16 : r / 16 * 16;
    return (int)(n < r ? n : r);
}

} // namespace

int k_cuda_gelu_fwd(size_t n, const float *x, float *y, port_stream s)
{
    K_LAUNCH(gelu_fwd, k_cuda_blocks(n), K_CUDA_THREADS, 0, (cudaStream_t)s)(n, x, y);
    return k_cuda_check_launch("k_cuda_gelu_fwd", "n=%zu", n);
}

int k_cuda_gelu_bwd(size_t n, const float *x, const float *dy, float *dx, port_stream s)
{
    K_LAUNCH(gelu_bwd, k_cuda_blocks(n), K_CUDA_THREADS, 0, (cudaStream_t)s)(n, x, dy, dx);
    return k_cuda_check_launch("k_cuda_gelu_bwd", "n=%zu", n);
}

static unsigned row_blocks(int n) { return (unsigned)(n < 65535 ? (n > 0 ? n : 1) : 65535); }

int k_cuda_layernorm_fwd(int n, int c, const float *x, const float *w, const float *b, float eps, float *y,
                         float *mean, float *rstd, port_stream s)
{
    K_LAUNCH(ln_fwd, row_blocks(n), K_CUDA_THREADS, 0, (cudaStream_t)s)(n, c, x, w, b, eps, y, mean, rstd);
    return k_cuda_check_launch("k_cuda_layernorm_fwd", "n=%d c=%d", n, c);
}

int k_cuda_layernorm_bwd(int n, int c, const float *x, const float *w, const float *mean, const float *rstd,
                         const float *dy, float *dx, float *dw, float *db, port_stream s)
{
    cudaStream_t cs = (cudaStream_t)s;
    if (dw || db) { // first: dx may overwrite dy
        K_LAUNCH(ln_bwd_wb, (c + 127) / 128, 128, 0, cs)(n, c, x, mean, rstd, dy, dw, db);
        if (k_cuda_check_launch("k_cuda_layernorm_bwd (dw, db)", "n=%d c=%d", n, c)) return -1;
    }
    if (!dx) return 0;
    K_LAUNCH(ln_bwd_dx, row_blocks(n), K_CUDA_THREADS, 0, cs)(n, c, x, w, mean, rstd, dy, dx);
    return k_cuda_check_launch("k_cuda_layernorm_bwd (dx)", "n=%d c=%d", n, c);
}

int k_cuda_tok_pos_embed_fwd(int b, int len, int c, const int32_t *ids, int ld, const float *wte, const float *wpe,
                             float *y, port_stream s)
{
    size_t n = (size_t)b * len * c;
    K_LAUNCH(tpe_fwd, k_cuda_blocks(n), K_CUDA_THREADS, 0, (cudaStream_t)s)(b, len, c, ids, ld, wte, wpe, y);
    return k_cuda_check_launch("k_cuda_tok_pos_embed_fwd", "b=%d len=%d c=%d", b, len, c);
}

int k_cuda_tok_pos_embed_bwd(int b, int len, int c, int vocab, const int32_t *ids, int ld, const float *dy,
                             float *dwte, float *dwpe, int acc, port_stream s)
{
    cudaStream_t cs = (cudaStream_t)s;
    size_t n = (size_t)len * c;
    K_LAUNCH(tpe_bwd_wpe, k_cuda_blocks(n), K_CUDA_THREADS, 0, cs)(b, len, c, dy, dwpe);
    if (k_cuda_check_launch("k_cuda_tok_pos_embed_bwd (wpe)", "b=%d len=%d c=%d", b, len, c)) return -1;
    if (!acc) {
        size_t m = (size_t)vocab * c;
        K_LAUNCH(zero_f, k_cuda_blocks(m), K_CUDA_THREADS, 0, cs)(m, dwte);
        if (k_cuda_check_launch("k_cuda_tok_pos_embed_bwd (zero)", "vocab=%d c=%d", vocab, c)) return -1;
    }
    K_LAUNCH(tpe_bwd_wte, row_blocks(b * len), 128, 0, cs)(b, len, c, ids, ld, dy, dwte, acc);
    return k_cuda_check_launch("k_cuda_tok_pos_embed_bwd (wte)", "b=%d len=%d c=%d", b, len, c);
}

// For n rows exactly (the op plans every batch size).
size_t k_cuda_conv1d_hf_workspace(int n, int in, int out)
{
    size_t a = k_cuda_gemm_ws_bytes(n, out, in), b = k_cuda_gemm_ws_bytes(n, in, out);
    size_t c = k_cuda_gemm_ws_bytes(in, out, n);
    size_t m = a > b ? a : b;
    return m > c ? m : c;
}

int k_cuda_conv1d_hf_fwd(int n, int in, int out, const float *x, const float *w, const float *b, float *y, void *ws,
                         port_stream s)
{
    char shp[96];
    snprintf(shp, sizeof shp, "n=%d in=%d out=%d", n, in, out);
    KgRowA a = {x, in};
    KgRowB bb = {w, out};
    Put st = {y, b, out, 0};
    return k_cuda_gemm("k_cuda_conv1d_hf_fwd", shp, n, out, in, a, bb, st, ws, (cudaStream_t)s);
}

int k_cuda_conv1d_hf_bwd(int n, int in, int out, const float *x, const float *w, const float *dy, float *dx,
                         float *dw, float *db, void *ws, port_stream s)
{
    cudaStream_t cs = (cudaStream_t)s;
    char shp[96];
    snprintf(shp, sizeof shp, "n=%d in=%d out=%d", n, in, out);
    if (dx) { // dx[n, in] = dy[n, out] w^T
        KgRowA a = {dy, out};
        KgColB b = {w, out};
        Put st = {dx, NULL, in, 0};
        if (k_cuda_gemm("k_cuda_conv1d_hf_bwd (input grad)", shp, n, in, out, a, b, st, ws, cs)) return -1;
    }
    if (dw) { // dw[in, out] = x^T dy
        KgColA a = {x, in};
        KgRowB b = {dy, out};
        Put st = {dw, NULL, out, 0};
        if (k_cuda_gemm("k_cuda_conv1d_hf_bwd (weight grad)", shp, in, out, n, a, b, st, ws, cs)) return -1;
    }
    if (!db) return 0;
    K_LAUNCH(col_sums, (out + 127) / 128, 128, 0, cs)(n, out, dy, db);
    return k_cuda_check_launch("k_cuda_conv1d_hf_bwd (bias grad)", "%s", shp);
}

size_t k_cuda_attention_workspace(int b, int t, int h) { return (size_t)b * h * t * sizeof(float); }

int k_cuda_attention_fwd(int b, int t, int h, int hd, const float *qkv, float *y, float *lse, port_stream s)
{
    if (hd > K_ATTN_MAX_HD) {
        port_cuda_fail("k_cuda_attention_fwd: head size %d above %d", hd, K_ATTN_MAX_HD);
        return -1;
    }
    size_t rows = (size_t)b * h * t;
    K_LAUNCH(attn_fwd, k_cuda_blocks(rows, 64), 64, 0, (cudaStream_t)s)(b, t, h, hd, 1.0f / sqrtf((float)hd), qkv, y,
                                                                        lse);
    return k_cuda_check_launch("k_cuda_attention_fwd", "b=%d t=%d h=%d hd=%d", b, t, h, hd);
}

int k_cuda_attention_bwd(int b, int t, int h, int hd, const float *qkv, const float *y, const float *lse,
                         const float *dy, float *dqkv, void *ws, port_stream s)
{
    cudaStream_t cs = (cudaStream_t)s;
    size_t rows = (size_t)b * h * t;
    float *dd = (float *)ws, scale = 1.0f / sqrtf((float)hd);
    K_LAUNCH(attn_bwd_d, k_cuda_blocks(rows), K_CUDA_THREADS, 0, cs)(b, t, h, hd, y, dy, dd);
    if (k_cuda_check_launch("k_cuda_attention_bwd (D)", "b=%d t=%d h=%d hd=%d", b, t, h, hd)) return -1;
    K_LAUNCH(attn_bwd_dq, k_cuda_blocks(rows, 64), 64, 0, cs)(b, t, h, hd, scale, qkv, dy, lse, dd, dqkv);
    if (k_cuda_check_launch("k_cuda_attention_bwd (dq)", "b=%d t=%d h=%d hd=%d", b, t, h, hd)) return -1;
    K_LAUNCH(attn_bwd_dkv, k_cuda_blocks(rows, 64), 64, 0, cs)(b, t, h, hd, scale, qkv, dy, lse, dd, dqkv);
    return k_cuda_check_launch("k_cuda_attention_bwd (dk, dv)", "b=%d t=%d h=%d hd=%d", b, t, h, hd);
}

// For any n' <= n: the GEMMs' split-K scratch depends on the rows of a block, which
// may be any count up to nr (start-up only: a loop over them).
size_t k_cuda_classifier_workspace(int n, int c, int v)
{
    int nr = cl_rows(n > 0 ? n : 1, v);
    size_t g = 0;
    for (int m = 1; m <= nr; m++) {
        size_t a = k_cuda_gemm_ws_bytes(m, v, c), b = k_cuda_gemm_ws_bytes(v, c, m), d = k_cuda_gemm_ws_bytes(m, c, v);
        a = a > b ? a : b;
        a = a > d ? a : d;
        g = g > a ? g : a;
    }
    return ((size_t)nr * v * sizeof(float) + 255) / 256 * 256 + g;
}

int k_cuda_classifier_fwd_bwd(int n, int c, int v, const float *x, const float *w, const int32_t *targets,
                              float scale, float *loss_rows, float *dx, float *dw, int acc_dw, void *ws, port_stream s)
{
    cudaStream_t cs = (cudaStream_t)s;
    int nr = cl_rows(n > 0 ? n : 1, v), grads = dx || dw;
    float *l = (float *)ws;
    void *gws = (char *)ws + ((size_t)nr * v * sizeof(float) + 255) / 256 * 256;
    char shp[96];
    snprintf(shp, sizeof shp, "n=%d c=%d v=%d", n, c, v);
    for (int r0 = 0; r0 < n; r0 += nr) {
        int m = n - r0 < nr ? n - r0 : nr;
        KgRowA a = {x + (size_t)r0 * c, c};
        KgColB b = {w, c};
        Put st = {l, NULL, v, 0};
        if (k_cuda_gemm("k_cuda_classifier (logits)", shp, m, v, c, a, b, st, gws, cs)) return -1;
        K_LAUNCH(cl_softmax, row_blocks(m), K_CUDA_THREADS, 0, cs)(m, v, l, targets + r0, scale, grads,
                                                                    loss_rows ? loss_rows + r0 : NULL);
        if (k_cuda_check_launch("k_cuda_classifier (softmax)", "%s", shp)) return -1;
        if (dw) { // dw[v, c] (+)= l^T x_r; row blocks add in order
            KgColA la = {l, v};
            KgRowB xb = {x + (size_t)r0 * c, c};
            Put sw = {dw, NULL, c, acc_dw || r0 > 0};
            if (k_cuda_gemm("k_cuda_classifier (dw)", shp, v, c, m, la, xb, sw, gws, cs)) return -1;
        }
        if (dx) { // dx_r = l w
            KgRowA la = {l, v};
            KgRowB wb = {w, c};
            Put sx = {dx + (size_t)r0 * c, NULL, c, 0};
            if (k_cuda_gemm("k_cuda_classifier (dx)", shp, m, c, v, la, wb, sx, gws, cs)) return -1;
        }
    }
    return 0;
}

namespace {
__global__ void lm_targets(int b, int len, const int32_t *ids, int32_t *tg)
{
    size_t n = (size_t)b * len;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        tg[i] = ids[(i / len) * (len + 1) + i % len + 1];
}

__global__ void row_means(int n, int len, const float *x, float *y)
{
    for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < n; r += gridDim.x * blockDim.x) {
        double s = 0;
        for (int t = 0; t < len; t++) s += x[(size_t)r * len + t];
        y[r] = (float)(s / len);
    }
}

__global__ void sum_loss(int n, const float *x, double *out)
{
    if (blockIdx.x || threadIdx.x) return;
    double s = 0;
    for (int i = 0; i < n; i++) s += x[i];
    out[0] = s;
    out[1] = 0;
}
} // namespace

int k_cuda_lm_targets(int b, int len, const int32_t *ids, int32_t *tg, port_stream s)
{
    size_t n = (size_t)b * len;
    K_LAUNCH(lm_targets, k_cuda_blocks(n), K_CUDA_THREADS, 0, (cudaStream_t)s)(b, len, ids, tg);
    return k_cuda_check_launch("k_cuda_lm_targets", "b=%d len=%d", b, len);
}

int k_cuda_row_means(int n, int len, const float *x, float *y, port_stream s)
{
    K_LAUNCH(row_means, (n + 127) / 128, 128, 0, (cudaStream_t)s)(n, len, x, y);
    return k_cuda_check_launch("k_cuda_row_means", "n=%d len=%d", n, len);
}

int k_cuda_sum_loss(int n, const float *x, double *out, port_stream s)
{
    K_LAUNCH(sum_loss, 1, 1, 0, (cudaStream_t)s)(n, x, out);
    return k_cuda_check_launch("k_cuda_sum_loss", "n=%d", n);
}
