/* Linear (nn.Linear layout: w[out,in]) on the GEMMs in k_gemm.c.
 *   y  = x w^T + b      NT form: dot products along `in`
 *   dx = dy w           NN form, rows of the batch split across threads
 *   dW = dy^T x         NN form with A = dy^T (strided), rows of dW split across threads
 *   db = column sums of dy, rows added in order
 * Every output element is computed by one task in a fixed order, so results do not
 * depend on the thread count. */
#include "kernels/k.h"
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

void k_linear_fwd(int n, int in, int out, const float *x, const float *w, const float *b, float *y)
{
    lin_job j = {.n = n, .in = in, .out = out, .x = x, .w = w, .b = b, .y = y};
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
