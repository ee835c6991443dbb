/* The linear layer with its weight stored [in, out] (Hugging Face's Conv1D, GPT-2's
 * layout, so checkpoints load without transposing):
 *   y  = x w + b      NN form, rows of the batch split across threads (bias copied in
 *                     first, the product added)
 *   dx = dy w^T       NN form on w transposed into the workspace (the NT form's
 *                     dot products ran at about half the NN form's rate here)
 *   dW = x^T dy       NN form with A = x^T (strided), rows of dW split
 *   db = column sums of dy, rows added in order
 * Each output element is computed by one task in a fixed order: the same bits for any
 * thread count. Under --amp bf16 with vdpbf16ps (k_bf16_linear_dot) the blocked bf16
 * GEMMs read w in place (k_bf16_matmul: y = x w, dx = dy w^T with W^T packed by
 * transposing w's rows, dW = x^T dy); otherwise bf16-rounded copies of x, w, dy go
 * through the fp32 kernels above. At --matmul-precision high (k_f32_matmul_x3_ok) the
 * fp32 products run as bf16x3 on AMX tiles (k_f32_matmul_x3), db as here. */
#include "kernels/k_tfm.h"
#include "kernels/k.h"
#include "kernels/cpu/k_bf16.h"
#include "kernels/cpu/k_gemm.h"
#include "kernels/cpu/k_int.h"
#include "kernels/cpu/k_tr8.h"
#include <string.h>

typedef struct lt_job {
    int n, in, out, parts;
    const float *x, *w, *b, *dy;
    float *y, *dx, *dw, *wt;
} lt_job;

static int lt_parts(long rows, long flops)
{
    int t = k_threads();
    if (t <= 1 || flops < (1L << 20)) return 1;
    return (int)(rows < 4L * t ? rows : 4L * t);
}

static void fwd_task(void *ctx, int task)
{
    const lt_job *j = ctx;
    long lo, hi;
    k_split(j->n, j->parts, task, &lo, &hi);
    for (long r = lo; r < hi; r++) {
        if (j->b) memcpy(j->y + r * j->out, j->b, sizeof(float) * (size_t)j->out);
        else memset(j->y + r * j->out, 0, sizeof(float) * (size_t)j->out);
    }
    k_gemm_nn((int)(hi - lo), j->out, j->in, j->x + lo * j->in, j->in, 1, j->w, j->out, j->y + lo * j->out, j->out,
              NULL, 1);
}

void k_conv1d_hf_fwd(int n, int in, int out, const float *x, const float *w, const float *b, float *y)
{
    if (k_f32_matmul_x3_ok(n, out, in)) {
        k_f32_matmul_x3(n, out, in, x, in, 1, w, out, 0, y, out, b);
        return;
    }
    lt_job j = {.n = n, .in = in, .out = out, .x = x, .w = w, .b = b, .y = y};
    j.parts = lt_parts(n, 2L * n * in * out);
    k_parallel_for(j.parts, fwd_task, &j);
}

static void dx_task(void *ctx, int task)
{
    const lt_job *j = ctx;
    long lo, hi;
    k_split(j->n, j->parts, task, &lo, &hi);
    k_gemm_nn((int)(hi - lo), j->in, j->out, j->dy + lo * j->out, j->out, 1, j->wt, j->in, j->dx + lo * j->in, j->in,
              NULL, 0);
}

/* wt[o][i] = w[i][o] for rows [lo, hi) of w: 8 x 8 blocks through AVX2 registers where
 * the CPU has them (a pure copy: the same bits), the edges one by one. */
#ifdef K_TR8
__attribute__((target("avx2"))) static void transpose_avx2(const lt_job *j, long lo, long hi)
{
    long i0 = lo;
    for (; i0 + 8 <= hi; i0 += 8) {
        int o0 = 0;
        for (; o0 + 8 <= j->out; o0 += 8) {
            __m256 v[8];
            for (int r = 0; r < 8; r++) v[r] = _mm256_loadu_ps(j->w + (i0 + r) * j->out + o0);
            k_tr8(v);
            for (int r = 0; r < 8; r++) _mm256_storeu_ps(j->wt + (long)(o0 + r) * j->in + i0, v[r]);
        }
        for (long i = i0; i < i0 + 8; i++)
            for (int o = o0; o < j->out; o++) j->wt[(long)o * j->in + i] = j->w[i * j->out + o];
    }
    for (long i = i0; i < hi; i++)
        for (int o = 0; o < j->out; o++) j->wt[(long)o * j->in + i] = j->w[i * j->out + o];
}
#endif

static void wt_task(void *ctx, int task)
{
    const lt_job *j = ctx;
    long lo, hi;
    k_split(j->in, j->parts, task, &lo, &hi);
#ifdef K_TR8
    if (k_isa_level() >= K_ISA_AVX2) {
        transpose_avx2(j, lo, hi);
        return;
    }
#endif
    for (long i0 = lo; i0 < hi; i0 += 16) /* 16 x 16 blocks: both sides stay in cache */
        for (int o0 = 0; o0 < j->out; o0 += 16)
            for (long i = i0; i < i0 + 16 && i < hi; i++)
                for (int o = o0; o < o0 + 16 && o < j->out; o++) j->wt[(long)o * j->in + i] = j->w[i * j->out + o];
}

size_t k_conv1d_hf_workspace(int in, int out) { return (size_t)in * (size_t)out * sizeof(float); }

static void dw_task(void *ctx, int task)
{
    const lt_job *j = ctx;
    long lo, hi;
    k_split(j->in, j->parts, task, &lo, &hi);
    k_gemm_nn((int)(hi - lo), j->out, j->n, j->x + lo, 1, j->in, j->dy, j->out, j->dw + lo * j->out, j->out, NULL, 0);
}

void k_conv1d_hf_bwd(int n, int in, int out, const float *x, const float *w, const float *dy, float *dx, float *dw,
                     float *db, void *ws)
{
    lt_job j = {.n = n, .in = in, .out = out, .x = x, .w = w, .dy = dy, .dx = dx, .dw = dw, .wt = ws};
    long flops = 2L * n * in * out;
    if (dw && k_f32_matmul_x3_ok(in, out, n)) {
        k_f32_matmul_x3(in, out, n, x, 1, in, dy, out, 0, dw, out, NULL);
        dw = NULL;
    }
    if (dx && k_f32_matmul_x3_ok(n, in, out)) {
        k_f32_matmul_x3(n, in, out, dy, out, 1, w, out, 1, dx, in, NULL);
        dx = NULL;
    }
    if (dw) {
        j.parts = lt_parts(in, flops);
        k_parallel_for(j.parts, dw_task, &j);
    }
    if (db) {
        memcpy(db, dy, sizeof(float) * (size_t)out);
        for (long r = 1; r < n; r++) k_add_span((size_t)out, db, dy + r * out, db);
    }
    if (dx) {
        j.parts = lt_parts(in, (long)in * out);
        k_parallel_for(j.parts, wt_task, &j);
        j.parts = lt_parts(n, flops);
        k_parallel_for(j.parts, dx_task, &j);
    }
}

void k_transpose(int rows, int cols, const float *a, float *t)
{
    lt_job j = {.in = rows, .out = cols, .w = a, .wt = t};
    j.parts = lt_parts(rows, (long)rows * cols);
    k_parallel_for(j.parts, wt_task, &j);
}

/* [w^T (or dW^T), 64-byte aligned][the bf16 linear's workspace] */
static size_t wt_bytes(int in, int out) { return ((size_t)in * out * sizeof(float) + 63) / 64 * 64; }

size_t k_conv1d_hf_bf16_workspace(int n, int in, int out)
{
    return 2 * wt_bytes(in, out) + k_linear_bf16_workspace(n, in, out);
}

/* The rounded copies of x, w, dy after w^T's two slots (inside k_linear_bf16_workspace,
 * which holds n*in + out*in + n*out floats). */
static float *rounded(void *ws, int in, int out, long off) { return (float *)(void *)((char *)ws + 2 * wt_bytes(in, out) + off); }
static long r64(long b) { return (b + 63) & ~63L; }

void k_conv1d_hf_fwd_bf16(int n, int in, int out, const float *x, const float *w, const float *b, float *y, void *ws)
{
    if (k_bf16_linear_dot()) {
        k_bf16_matmul(n, out, in, x, in, 1, w, out, 0, y, out, b, ws);
        return;
    }
    float *xr = rounded(ws, in, out, 0), *wr = rounded(ws, in, out, r64(4L * n * in));
    k_bf16_round_span((size_t)n * in, x, xr);
    k_bf16_round_span((size_t)in * out, w, wr);
    k_conv1d_hf_fwd(n, in, out, xr, wr, b, y);
}

void k_conv1d_hf_bwd_bf16(int n, int in, int out, const float *x, const float *w, const float *dy, float *dx,
                          float *dw, float *db, void *ws)
{
    if (k_bf16_linear_dot()) {
        if (dw) k_bf16_matmul(in, out, n, x, 1, in, dy, out, 0, dw, out, NULL, ws);
        if (dx) k_bf16_matmul(n, in, out, dy, out, 1, w, out, 1, dx, in, NULL, ws);
    } else {
        long ow = r64(4L * n * in), ody = ow + r64(4L * out * in);
        float *xr = rounded(ws, in, out, 0), *wr = rounded(ws, in, out, ow), *dyr = rounded(ws, in, out, ody);
        if (dw) k_bf16_round_span((size_t)n * in, x, xr);
        if (dx) k_bf16_round_span((size_t)in * out, w, wr);
        k_bf16_round_span((size_t)n * out, dy, dyr);
        k_conv1d_hf_bwd(n, in, out, xr, wr, dyr, dx, dw, NULL, ws);
    }
    if (db) {
        memcpy(db, dy, sizeof(float) * (size_t)out);
        for (long r = 1; r < n; r++) k_add_span((size_t)out, db, dy + r * out, db);
    }
}
