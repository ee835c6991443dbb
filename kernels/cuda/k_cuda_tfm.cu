// The transformer kernels on the device (kernels/k_tfm.h's twins): LayerNorm, GELU,
// token + position embedding, Hugging Face's Conv1D (causal attention: k_cuda_attn.cu),
// and the tied classifier with softmax cross-entropy fused a block of rows at a time.
// Launched with K_LAUNCH (nvcc on a GPU, the SIMT executor in make test). No atomics:
// every sum has one owner and a fixed order (the same bits on every run and GPU).
// GELU is the CPU's bit for bit (both are kernels/k_math.h's k_gelu); the rest matches the CPU to rounding (sums in another order).
#include "kernels/cuda/k_cuda_tc_gemm.cuh"
#include "kernels/k_math.h"
#include "kernels/k_tfm.h"
#include <stdio.h>

namespace {

// ---- GELU: kernels/k_math.h's, the CPU's own math (so the same bits).
// x and y of element types xt / yt (fp32, or 16-bit activations: k_act_ld / k_act_st).
__global__ void gelu_fwd(size_t n, const void *x, int xt, void *y, int yt)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        k_act_st(y, yt, i, k_gelu(k_act_ld(x, xt, i)));
}

__global__ void gelu_bwd(size_t n, const void *x, int xt, const float *dy, float *dx)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dx[i] = k_gelu_grad(k_act_ld(x, xt, i), dy[i]);
}

// ---- LayerNorm: one block per row, sums in double over a fixed tree.
__global__ void __launch_bounds__(K_CUDA_THREADS)
ln_fwd(int n, int c, const float *x, const float *w, const float *b, float eps, void *y, int yt, float *mean,
       float *rstd)
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
            k_act_st(y, yt, (size_t)r * c + i, b ? v + b[i] : v);
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

// Column sums over n rows, two at once (LayerNorm's dw = sum dy xhat and db = sum dy; a
// bias's db): a block of 32 columns x 32 row lanes. Lane r of a column adds rows r,
// r + 32, ... in order, then the 32 partials meet in a fixed tree in shared memory: a
// fixed order, and 32 times the warps of one thread per column (which read 2048 rows
// one after another: 0.45 ms a LayerNorm on an H200).
template <class F> __global__ void __launch_bounds__(1024) col_sums2(int n, int c, F f, float *o1, float *o2)
{
    __shared__ float s1[32][33], s2[32][33];
    const int tx = threadIdx.x % 32, ty = threadIdx.x / 32, i = blockIdx.x * 32 + tx;
    float a = 0.0f, b = 0.0f;
    if (i < c)
        for (int r = ty; r < n; r += 32) f(r, i, a, b);
    s1[ty][tx] = a, s2[ty][tx] = b;
    __syncthreads();
    for (int w = 16; w > 0; w >>= 1) {
        if (ty < w) s1[ty][tx] += s1[ty + w][tx], s2[ty][tx] += s2[ty + w][tx];
        __syncthreads();
    }
    if (ty == 0 && i < c) {
        if (o1) o1[i] = s1[0][tx];
        if (o2) o2[i] = s2[0][tx];
    }
}
struct LnWb { // a += dy xhat, b += dy
    const float *x, *mean, *rstd, *dy; int c;
    __device__ void operator()(int r, int i, float &a, float &b) const
    {
        float g = dy[(size_t)r * c + i];
        a += g * ((x[(size_t)r * c + i] - mean[r]) * rstd[r]);
        b += g;
    }
};
struct DyCols { // b += dy
    const float *dy; int c;
    __device__ void operator()(int r, int i, float &, float &b) const { b += dy[(size_t)r * c + i]; }
};

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
// The later tokens are scanned 128 at a time: the matches are compacted in order into
// shared memory (ballots), then each thread adds its dimensions' dy over them. Each
// thread scanning every later token itself (two divisions a token, for every 128
// dimensions) took 0.92-0.99 ms of GPT small's 10.7 ms step on an H200.
#define TPE_B 128
__global__ void __launch_bounds__(TPE_B)
tpe_bwd_wte(int b, int len, int c, const int32_t *ids, int ld, const float *dy, float *dwte, int acc)
{
    __shared__ int list[TPE_B], wcnt[TPE_B / 32];
    const int ntok = b * len, tid = threadIdx.x, lane = tid % 32, w = tid / 32;
    for (int tok = blockIdx.x; tok < ntok; tok += gridDim.x) {
        int id = ids[(size_t)(tok / len) * ld + tok % len], seen = 0;
        for (int u = tid; u < tok; u += TPE_B) seen |= ids[(size_t)(u / len) * ld + u % len] == id;
        if (__syncthreads_or(seen)) continue; // an earlier token has it
        for (int k0 = 0; k0 < c; k0 += TPE_B) {
            const int k = k0 + tid;
            float s = 0.0f;
            for (int u0 = tok; u0 < ntok; u0 += TPE_B) {
                int u = u0 + tid, f = u < ntok && ids[(size_t)(u / len) * ld + u % len] == id;
                unsigned bal = __ballot_sync(0xffffffffu, f);
                if (lane == 0) wcnt[w] = __popc(bal);
                __syncthreads();
                int at = 0, total = 0;
                for (int i = 0; i < TPE_B / 32; i++) at += i < w ? wcnt[i] : 0, total += wcnt[i];
                if (f) list[at + __popc(bal & ((1u << lane) - 1u))] = u;
                __syncthreads();
                if (k < c)
                    for (int m = 0; m < total; m++) s += dy[(size_t)list[m] * c + k];
                __syncthreads(); // list and wcnt are rewritten next
            }
            if (k < c) dwte[(size_t)id * c + k] = acc ? dwte[(size_t)id * c + k] + s : s;
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
struct PutAct { // y = v + bias[n], y of element type yt (K_CUDA_MM_Y16)
    void *y; const float *bias; int ld, yt;
    __host__ __device__ void operator()(int, int m, int n, float v) const
    {
        k_act_st(y, yt, (size_t)m * ld + n, v + (bias ? bias[n] : 0.0f));
    }
};


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

int k_cuda_gelu_fwd_t(size_t n, const void *x, int xt, void *y, int yt, port_stream s)
{
    K_LAUNCH(gelu_fwd, k_cuda_blocks(n), K_CUDA_THREADS, 0, (cudaStream_t)s)(n, x, xt, y, yt);
    char d_[48];
    return k_cuda_check_launch("k_cuda_gelu_fwd", "n=%zu%s", n, k_act_desc(d_, sizeof d_, xt, yt));
}

int k_cuda_gelu_bwd_t(size_t n, const void *x, int xt, const float *dy, float *dx, port_stream s)
{
    K_LAUNCH(gelu_bwd, k_cuda_blocks(n), K_CUDA_THREADS, 0, (cudaStream_t)s)(n, x, xt, dy, dx);
    char d_[48];
    return k_cuda_check_launch("k_cuda_gelu_bwd", "n=%zu%s", n, k_act_desc(d_, sizeof d_, xt, 0));
}

int k_cuda_gelu_fwd(size_t n, const float *x, float *y, port_stream s)
{
    return k_cuda_gelu_fwd_t(n, x, K_CUDA_ACT_F32, y, K_CUDA_ACT_F32, s);
}

int k_cuda_gelu_bwd(size_t n, const float *x, const float *dy, float *dx, port_stream s)
{
    return k_cuda_gelu_bwd_t(n, x, K_CUDA_ACT_F32, dy, dx, s);
}

static unsigned row_blocks(int n) { return (unsigned)(n < 65535 ? (n > 0 ? n : 1) : 65535); }

int k_cuda_layernorm_fwd_t(int n, int c, const float *x, const float *w, const float *b, float eps, void *y, int yt,
                           float *mean, float *rstd, port_stream s)
{
    K_LAUNCH(ln_fwd, row_blocks(n), K_CUDA_THREADS, 0, (cudaStream_t)s)(n, c, x, w, b, eps, y, yt, mean, rstd);
    char d_[48];
    return k_cuda_check_launch("k_cuda_layernorm_fwd", "n=%d c=%d%s", n, c, k_act_desc(d_, sizeof d_, 0, yt));
}

int k_cuda_layernorm_fwd(int n, int c, const float *x, const float *w, const float *b, float eps, float *y,
                         float *mean, float *rstd, port_stream s)
{
    return k_cuda_layernorm_fwd_t(n, c, x, w, b, eps, y, K_CUDA_ACT_F32, mean, rstd, s);
}

int k_cuda_layernorm_bwd(int n, int c, const float *x, const float *w, const float *mean, const float *rstd,
                         const float *dy, float *dx, float *dw, float *db, port_stream s)
{
    cudaStream_t cs = (cudaStream_t)s;
    if (dw || db) { // first: dx may overwrite dy
        LnWb f = {x, mean, rstd, dy, c};
        K_LAUNCH((col_sums2<LnWb>), (c + 31) / 32, 1024, 0, cs)(n, c, f, dw, db);
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
    K_LAUNCH(tpe_bwd_wte, row_blocks(b * len), TPE_B, 0, cs)(b, len, c, ids, ld, dy, dwte, acc);
    return k_cuda_check_launch("k_cuda_tok_pos_embed_bwd (wte)", "b=%d len=%d c=%d", b, len, c);
}

// For n rows exactly (the op plans every batch size): the split-K partials, after the
// backward's 16-bit dy (k_dy16) at bf16 / f16.
size_t k_cuda_conv1d_hf_workspace_mm(int mm, int n, int in, int out)
{
    size_t a = k_cuda_gemm_ws_bytes(n, out, in), b = k_cuda_gemm_ws_bytes(n, in, out);
    size_t c = k_cuda_gemm_ws_bytes(in, out, n);
    size_t m = a > b ? a : b;
    return (m > c ? m : c) + k_dy16_bytes(mm, n, out);
}

size_t k_cuda_conv1d_hf_workspace(int n, int in, int out)
{
    return k_cuda_conv1d_hf_workspace_mm(K_CUDA_MM_BF16, n, in, out);
}

int k_cuda_conv1d_hf_fwd(int n, int in, int out, const float *x, const float *w, const float *b, float *y, void *ws,
                         port_stream s)
{
    return k_cuda_conv1d_hf_fwd_mm(K_CUDA_MM_FP32, n, in, out, x, w, NULL, b, y, ws, s);
}

int k_cuda_conv1d_hf_bwd(int n, int in, int out, const float *x, const float *w, const float *dy, float *dx,
                         float *dw, float *db, void *ws, port_stream s)
{
    return k_cuda_conv1d_hf_bwd_mm(K_CUDA_MM_FP32, n, in, out, x, w, NULL, dy, dx, dw, db, ws, s);
}

// 16-bit operands (w16, a 16-bit x) by cp.async where k_tc_raw takes them (k_cuda.h).
int k_cuda_conv1d_hf_fwd_mm(int mm, int n, int in, int out, const float *x, const float *w, const uint16_t *w16,
                            const float *b, float *y, void *ws, port_stream s)
{
    char shp[96];
    snprintf(shp, sizeof shp, "n=%d in=%d out=%d", n, in, out);
    const char *k = "k_cuda_conv1d_hf_fwd";
    if (k_act_mm_check(mm, k, shp)) return -1;
    cudaStream_t cs = (cudaStream_t)s;
    KgRowB bb = {w, out}; // w [in x out] = B(k, n) by rows of n: TcRawMN for its copy
    if (mm & (K_CUDA_MM_X16 | K_CUDA_MM_Y16)) {
        PutAct st = {y, b, out, k_act_of(mm, K_CUDA_MM_Y16)};
        TcRawK xr;
        if ((mm & K_CUDA_MM_X16) && k_tc_raw(xr, mm, x, in))
            return k_cuda_gemm_w16<TcRawMN, true>(mm, k, shp, n, out, in, xr, w16, out, bb, st, ws, cs);
        KgActRowA a = {x, in, k_act_of(mm, K_CUDA_MM_X16)};
        return k_cuda_gemm_w16<TcRawMN, true>(mm, k, shp, n, out, in, a, w16, out, bb, st, ws, cs);
    }
    KgRowA a = {x, in};
    Put st = {y, b, out, 0};
    return k_cuda_gemm_w16<TcRawMN, false>(mm, k, shp, n, out, in, a, w16, out, bb, st, ws, cs);
}

int k_cuda_conv1d_hf_bwd_mm(int mm, int n, int in, int out, const float *x, const float *w, const uint16_t *w16,
                            const float *dy, float *dx, float *dw, float *db, void *ws, port_stream s)
{
    cudaStream_t cs = (cudaStream_t)s;
    char shp[96];
    snprintf(shp, sizeof shp, "n=%d in=%d out=%d", n, in, out);
    if (k_act_mm_check(mm, "k_cuda_conv1d_hf_bwd", shp)) return -1;
    KDy16 d; // dy's 16-bit copy where it is made; d.ws past it
    if (k_dy16(d, mm, n, out, dy, ws, cs)) return -1;
    if (dx) { // dx[n, in] = dy[n, out] w^T
        const char *k = "k_cuda_conv1d_hf_bwd (input grad)";
        KgRowA a = {dy, out};
        KgColB b = {w, out};
        Put st = {dx, NULL, in, 0};
        if (d.raw ? k_cuda_gemm_w16<TcRawK, true>(mm, k, shp, n, in, out, d.k, w16, out, b, st, d.ws, cs)
                : k_cuda_gemm_w16<TcRawK, false>(mm, k, shp, n, in, out, a, w16, out, b, st, d.ws, cs))
            return -1;
    }
    if (dw) { // dw[in, out] = x^T dy
        const char *k = "k_cuda_conv1d_hf_bwd (weight grad)";
        KgRowB b = {dy, out};
        Put st = {dw, NULL, out, 0};
        TcRawMN xr;
        KgActColA xa = {x, in, k_act_of(mm, K_CUDA_MM_X16)};
        KgColA a = {x, in};
        bool x16 = mm & K_CUDA_MM_X16, xraw = x16 && k_tc_raw(xr, mm, x, in);
        if (d.raw ? (xraw ? k_cuda_gemm_mm16(mm, k, shp, in, out, n, xr, d.mn, st, d.ws, cs)
                   : x16 ? k_cuda_gemm_mm16(mm, k, shp, in, out, n, xa, d.mn, st, d.ws, cs)
                         : k_cuda_gemm_mm16(mm, k, shp, in, out, n, a, d.mn, st, d.ws, cs))
            : !x16 ? k_cuda_gemm_mm(mm & K_CUDA_MM_TYPE, k, shp, in, out, n, a, b, st, d.ws, cs)
            : xraw ? k_cuda_gemm_mm16(mm, k, shp, in, out, n, xr, b, st, d.ws, cs)
                   : k_cuda_gemm_mm16(mm, k, shp, in, out, n, xa, b, st, d.ws, cs))
            return -1;
    }
    if (!db) return 0;
    DyCols f = {dy, out};
    K_LAUNCH((col_sums2<DyCols>), (out + 31) / 32, 1024, 0, cs)(n, out, f, (float *)NULL, db);
    return k_cuda_check_launch("k_cuda_conv1d_hf_bwd (bias grad)", "%s", shp);
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
