/* Linear (nn.Linear layout: w[out,in]) on the GEMMs in k_gemm.c.
 *   y  = x w^T + b      NT form: dot products along `in`; large layers (lin_use_pb) as
 *                       an NN GEMM with W^T packed (k_gemm_nt_pb), rows or columns
 *                       split across threads
 *   dx = dy w           NN form, rows of the batch split across threads
 *   dW = dy^T x         NN form with A = dy^T (strided), rows of dW split across threads
 *   db = column sums of dy, rows added in order
 * Every output element is computed by one task in a fixed order, so results do not
 * depend on the thread count. At --matmul-precision high (k_f32_matmul_x3_ok) the three
 * products run as bf16x3 on AMX tiles instead (k_linear_bf16.c), db as here. */
#include "kernels/k.h"
#include "kernels/cpu/k_bf16.h"
#include "kernels/cpu/k_gemm.h"
#include "kernels/cpu/k_int.h"

typedef struct lin_job {
    int n, in, out, parts;
    const float *x, *w, *b, *dy;
    float *y, *dx, *dw;
} lin_job;

/* Enough tasks to balance the pool, none for small problems. */
static int lin_parts(long rows, long flops)
{
    int t = k_threads();
    if (t <= 1 || flops < (1L << 20)) return 1;
    return (int)(rows < 4L * t ? rows : 4L * t);
}

static void lin_fwd_task(void *ctx, int task)
{
    const lin_job *j = ctx;
    long lo, hi;
    k_split(j->n, j->parts, task, &lo, &hi);
    k_gemm_nt((int)(hi - lo), j->out, j->in, j->x + lo * j->in, j->in, j->w, j->in,
              j->y + lo * j->out, j->out, j->b, 0);
}

/* The packed form (k_gemm_nt_pb) on rows [lo, hi) or, when the batch is smaller than
 * `out`, on columns [lo, hi) in units of 32 (whole panels for every ISA): each task packs
 * the operand it shares with the others (W^T on a row split, x on a column split), so
 * the split that repeats the smaller one. The bits do not depend on the split. */
#define LIN_PB_CU 32
static void lin_fwd_pb_task(void *ctx, int task)
{
    const lin_job *j = ctx;
    long lo, hi;
    if (j->n >= j->out) {
        k_split(j->n, j->parts, task, &lo, &hi);
        k_gemm_nt_pb((int)(hi - lo), j->out, j->in, j->x + lo * j->in, j->in, j->w, j->in,
                     j->y + lo * j->out, j->out, j->b, 0);
    } else {
        k_split((j->out + LIN_PB_CU - 1) / LIN_PB_CU, j->parts, task, &lo, &hi);
        lo *= LIN_PB_CU;
        hi = hi * LIN_PB_CU < j->out ? hi * LIN_PB_CU : j->out;
        if (hi <= lo) return;
        k_gemm_nt_pb(j->n, (int)(hi - lo), j->in, j->x, j->in, j->w + lo * j->in, j->in, j->y + lo,
                     j->out, j->b ? j->b + lo : NULL, 0);
    }
}

/* The packed form pays once W^T's panels are reused by enough rows and either the
 * dot products are short (the old form's horizontal sums) or W overflows L1/L2 (the
 * old form streams W once per 4 rows). Measured (thread CPU time, packed / dot form):
 * AVX-512 32x512->1000 1.3x, 32x512->256 0.92x, 32x256->256 1.0x, 32x512->128 0.77x,
 * 64x256->256 1.3x, 64x512->128 1.0x, 128x512->128 1.2x, 128x64->1000 2x, 1024^3 2.7x,
 * x->10 and x->32 0.2-0.7x, 16x512->1000 1.14x; AVX2 32x512->1000 1.25x,
 * 32x256->1000 1.08x, 64x64->128 1.2x, 64x256->256 1.0x, 64x512->256 0.92x,
 * 64x512->128 0.82x, 1024^3 1.7x; generic (SSE2) slower everywhere (0.8-0.95x).
 * Decided on the whole layer's shape and the ISA, never on a task's share. */
static int lin_use_pb(int n, int in, int out)
{
    int isa = k_isa_level();
    long w = (long)in * out;
    if (isa < K_ISA_AVX2 || out < 128) return 0;
    if (isa >= K_ISA_AVX512)
        return n >= 32 && (in <= 128 || w >= 256L * 1024 || (n >= 64 && w >= 64L * 1024));
    return (n >= 64 && in <= 128) || (n >= 32 && w >= 256L * 1024);
}

void k_linear_fwd(int n, int in, int out, const float *x, const float *w, const float *b, float *y)
{
    lin_job j = {.n = n, .in = in, .out = out, .x = x, .w = w, .b = b, .y = y};
    if (k_f32_matmul_x3_ok(n, out, in)) {
        k_f32_matmul_x3(n, out, in, x, in, 1, w, in, 1, y, out, b);
        return;
    }
    if (n > 0 && out > 0 && lin_use_pb(n, in, out)) {
        long units = n >= out ? n : (out + LIN_PB_CU - 1) / LIN_PB_CU;
        j.parts = lin_parts(units, 2L * n * in * out);
        k_parallel_for(j.parts, lin_fwd_pb_task, &j);
        return;
    }
    j.parts = lin_parts(n, 2L * n * in * out);
    k_parallel_for(j.parts, lin_fwd_task, &j);
}

static void lin_dx_task(void *ctx, int task)
{
    const lin_job *j = ctx;
    long lo, hi;
    k_split(j->n, j->parts, task, &lo, &hi);
    k_gemm_nn((int)(hi - lo), j->in, j->out, j->dy + lo * j->out, j->out, 1, j->w, j->in,
              j->dx + lo * j->in, j->in, NULL, 0);
}

static void lin_dw_task(void *ctx, int task)
{
    const lin_job *j = ctx;
    long lo, hi;
    k_split(j->out, j->parts, task, &lo, &hi);
    k_gemm_nn((int)(hi - lo), j->in, j->n, j->dy + lo, 1, j->out, j->x, j->in,
              j->dw + lo * j->in, j->in, NULL, 0);
}

void k_linear_bwd(int n, int in, int out, const float *x, const float *w, const float *dy,
                  float *dx, float *dw, float *db)
{
    lin_job j = {.n = n, .in = in, .out = out, .x = x, .w = w, .dy = dy, .dx = dx, .dw = dw};
    long flops = 2L * n * in * out;
    if (dx && k_f32_matmul_x3_ok(n, in, out)) {
        k_f32_matmul_x3(n, in, out, dy, out, 1, w, in, 0, dx, in, NULL);
        dx = NULL;
    }
    if (dw && k_f32_matmul_x3_ok(out, in, n)) {
        k_f32_matmul_x3(out, in, n, dy, 1, out, x, in, 0, dw, in, NULL);
        dw = NULL;
    }
    if (dx) {
        j.parts = lin_parts(n, flops);
        k_parallel_for(j.parts, lin_dx_task, &j);
    }
    if (dw) {
        j.parts = lin_parts(out, flops);
        k_parallel_for(j.parts, lin_dw_task, &j);
    }
    if (db) {
        for (int o = 0; o < out; o++) db[o] = 0.0f;
        for (long r = 0; r < n; r++)
            for (int o = 0; o < out; o++) db[o] += dy[r * out + o];
    }
}
