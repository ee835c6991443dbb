/* Linear with bf16 operands and fp32 accumulation (--amp bf16).
 * Native path (vdpbf16ps):
 *   y  = x w^T + b   x and w converted to bf16, dot products along `in` (NT form)
 *   dx = dy w        NN form: A = dy packed to bf16, B = w converted panel by panel
 *   dW = dy^T x      NN form: A = dy^T, B = x
 * Tasks split the rows of y, or the 32-column blocks of dx / dW; each output element
 * is one task's fixed-order sum, so results do not depend on the thread count.
 * Portable path: rounded copies of x, w, dy through k_linear_fwd/bwd. db is the fp32
 * column sum of dy on both paths. */
#include "kernels/k.h"
#include "kernels/cpu/k_bf16.h"
#include "kernels/cpu/k_gemm.h"
#include "kernels/cpu/k_int.h"

#define LB_PARTS 8

typedef struct lb_dims { long x16, w16, pa, panels, panel_elems, total, px, pw, pdy, ptotal; } lb_dims;

static long r64(long b) { return (b + 63) & ~63L; }

static lb_dims lb_dims_of(int n, int in, int out)
{
    lb_dims d;
    long pa = (long)k_bf16_pack_a_elems(n, out), pb = (long)k_bf16_pack_a_elems(out, n);
    d.panel_elems = (long)k_bf16_panel_elems(n > out ? n : out);
    d.x16 = 0;
    d.w16 = r64(2L * n * in);
    d.pa = d.w16 + r64(2L * out * in);
    d.panels = d.pa + r64(2 * (pa > pb ? pa : pb));
    d.total = d.panels + LB_PARTS * r64(2 * d.panel_elems);
    d.px = 0;
    d.pw = r64(4L * n * in);
    d.pdy = d.pw + r64(4L * out * in);
    d.ptotal = d.pdy + r64(4L * n * out);
    return d;
}

size_t k_linear_bf16_workspace(int n, int in, int out)
{
    lb_dims d = lb_dims_of(n, in, out);
    return (size_t)(d.total > d.ptotal ? d.total : d.ptotal);
}

typedef struct lb_job {
    int n, in, out, parts, m, kk;
    const uint16_t *x16, *w16, *pa;
    const float *b, *bsrc;
    float *y, *c;
    char *panels;
    long panel_bytes;
} lb_job;

static int lb_parts(long units, long flops)
{
    int t = k_threads();
    if (t <= 1 || flops < (1L << 20)) return 1;
    long p = units < 4L * t ? units : 4L * t;
    return (int)(p < LB_PARTS ? p : LB_PARTS);
}

static void lb_fwd_task(void *ctx, int task)
{
    const lb_job *j = ctx;
    long lo, hi;
    k_split(j->n, j->parts, task, &lo, &hi);
    k_bf16_gemm_nt((int)(hi - lo), j->out, j->in, 1, j->x16 + lo * j->in, j->in, 0, j->w16, NULL, j->in, 0,
                   j->y + lo * j->out, j->out, j->b, 0);
}

void k_linear_fwd_bf16(int n, int in, int out, const float *x, const float *w, const float *b, float *y, void *ws)
{
    lb_dims d = lb_dims_of(n, in, out);
    if (!k_isa_bf16()) {
        float *xr = (float *)((char *)ws + d.px), *wr = (float *)((char *)ws + d.pw);
        k_bf16_round_span((size_t)n * in, x, xr);
        k_bf16_round_span((size_t)out * in, w, wr);
        k_linear_fwd(n, in, out, xr, wr, b, y);
        return;
    }
    uint16_t *x16 = (uint16_t *)((char *)ws + d.x16), *w16 = (uint16_t *)((char *)ws + d.w16);
    k_bf16_operand_span((size_t)n * in, x, x16);
    k_bf16_operand_span((size_t)out * in, w, w16);
    lb_job j = {.n = n, .in = in, .out = out, .x16 = x16, .w16 = w16, .b = b, .y = y};
    j.parts = lb_parts(n, 2L * n * in * out);
    k_parallel_for(j.parts, lb_fwd_task, &j);
}

/* C[m x in] = A (packed, m x kk) B[kk x in], columns split in 32-wide blocks. */
static void lb_nn_task(void *ctx, int task)
{
    const lb_job *j = ctx;
    long lo, hi, units = (j->in + 31) / 32;
    k_split(units, j->parts, task, &lo, &hi);
    long c0 = lo * 32, c1 = hi * 32 < j->in ? hi * 32 : j->in;
    if (c0 >= c1) return;
    k_bf16_gemm_nn(j->m, (int)(c1 - c0), j->kk, j->pa, j->bsrc + c0, j->in, NULL, j->c + c0, j->in, NULL, 0,
                   (uint16_t *)(j->panels + task * j->panel_bytes));
}

void k_linear_bwd_bf16(int n, int in, int out, const float *x, const float *w, const float *dy, float *dx,
                       float *dw, float *db, void *ws)
{
    lb_dims d = lb_dims_of(n, in, out);
    if (!k_isa_bf16()) {
        float *xr = (float *)((char *)ws + d.px), *wr = (float *)((char *)ws + d.pw);
        float *dyr = (float *)((char *)ws + d.pdy);
        k_bf16_round_span((size_t)n * in, x, xr);
        k_bf16_round_span((size_t)out * in, w, wr);
        k_bf16_round_span((size_t)n * out, dy, dyr);
        k_linear_bwd(n, in, out, xr, wr, dyr, dx, dw, NULL);
    } else {
        uint16_t *pa = (uint16_t *)((char *)ws + d.pa);
        lb_job j = {.n = n, .in = in, .out = out, .pa = pa, .panels = (char *)ws + d.panels,
                    .panel_bytes = r64(2 * d.panel_elems)};
        j.parts = lb_parts((in + 31) / 32, 2L * n * in * out);
        if (dx) {
            k_bf16_pack_a(n, out, dy, out, 1, pa);
            j.m = n, j.kk = out, j.bsrc = w, j.c = dx;
            k_parallel_for(j.parts, lb_nn_task, &j);
        }
        if (dw) {
            k_bf16_pack_a(out, n, dy, 1, out, pa);
            j.m = out, j.kk = n, j.bsrc = x, j.c = dw;
            k_parallel_for(j.parts, lb_nn_task, &j);
        }
    }
    if (db) {
        for (int o = 0; o < out; o++) db[o] = 0.0f;
        for (long r = 0; r < n; r++)
            for (int o = 0; o < out; o++) db[o] += dy[r * out + o];
    }
}
