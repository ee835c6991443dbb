/* Linear with bf16 operands and fp32 accumulation (--amp bf16).
 * Native path (vdpbf16ps), every product a cache-blocked NN GEMM (k_bf16_gemm_blk) on
 * A packed once into the workspace (k_bf16_matmul):
 *   y  = x w^T + b   A = x, B = W^T packed by transposing w's rows (bias per column);
 *                    very narrow outputs (< 32) keep the dot-product form (NT)
 *   dx = dy w        A = dy, B = w
 *   dW = dy^T x      A = dy^T, B = x
 * Tasks split the columns of C in units of 32; each output element is one fixed-order
 * sum, so results do not depend on the thread count. With AMX (k_amx.c: DDPRT_BF16_GEMM
 * amx, or auto where the CPU has it) the same three products run on tiles instead,
 * each part packing its own operands. The fp32 layers' products at --matmul-precision
 * high go through the same AMX tasks in bf16x3 (k_f32_matmul_x3).
 * Otherwise (no AVX512-BF16, or where vdpbf16ps is slower than the FMAs:
 * k_bf16_linear_dot): rounded copies of x, w, dy through k_linear_fwd/bwd, the same
 * products summed in k order. db is the fp32 column sum of dy on both paths. */
#include "kernels/k.h"
#include "kernels/cpu/k_amx.h"
#include "kernels/cpu/k_bf16.h"
#include "kernels/cpu/k_gemm.h"
#include "kernels/cpu/k_int.h"
#include "rt/env.h"
#include <string.h>

#define LB_PARTS 8

/* ---- which GEMMs (kernels/cpu/k_settings.c): 0 auto, 1 dpbf16, 2 fma, 3 amx */

/* vdpbf16ps for the linear layers? Intel's (Sapphire Rapids: one 512-bit vdpbf16ps per
 * two cycles, 112 GFLOP/s against 224 for vfmadd231ps) loses to the fp32 GEMMs on
 * bf16-rounded operands; AMD's Zen 4/5 run it at twice the FMA rate. By vendor, not by
 * a timing, so that a run's bits do not depend on the machine's load. */
static int form(void) { return k_bf16_gemm_now(); }

/* AMX tiles (k_amx.c) for k_bf16_matmul: asked for, or auto where the CPU has them. */
static int use_amx(void)
{
    int f = form();
    return (f == 3 || f == 0) && k_amx_ok();
}

static int not_intel(void)
{
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
    __builtin_cpu_init();
    return !__builtin_cpu_is("intel");
#else
    return 1;
#endif
}

int k_bf16_linear_dot(void)
{
    if (!k_isa_bf16()) return 0;
    int f = form();
    if (f == 3 || (f == 0 && k_amx_ok())) return k_amx_ok(); /* amx where there is none: fma */
    return f ? f == 1 : not_intel();
}

/* Convs have no AMX form: vdpbf16ps where it runs at twice the FMA rate (or asked for),
 * else the fp32 kernels on rounded operands (on Intel, --amp bf16 ResNets ran at
 * 0.58-0.66x fp32 with vdpbf16ps). */
int k_bf16_conv_dot(void)
{
    if (!k_isa_bf16()) return 0;
    int f = form();
    return f == 1 || (f == 0 && not_intel());
}

typedef struct lb_dims { long x16, w16, pa, total, px, pw, pdy, ptotal; } lb_dims;

static long r64(long b) { return (b + 63) & ~63L; }
static long packed(int m, int kk) { return 2 * (long)k_bf16_pack_a_elems(m, kk); }

static lb_dims lb_dims_of(int n, int in, int out)
{
    lb_dims d;
    long pa = packed(n, in), t;
    if ((t = packed(n, out)) > pa) pa = t;
    if ((t = packed(out, n)) > pa) pa = t;
    if ((t = packed(in, n)) > pa) pa = t; /* Conv1D's dW (k_linear_t.c): A = x^T */
    d.x16 = 0;
    d.w16 = r64(2L * n * in);
    d.pa = d.w16 + r64(2L * out * in);
    d.total = d.pa + r64(pa);
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

static int lb_parts(long units, long flops)
{
    int t = k_threads();
    if (t <= 1 || flops < (1L << 20)) return 1;
    long p = units < 4L * t ? units : 4L * t;
    return (int)(p < LB_PARTS ? p : LB_PARTS);
}

typedef struct lb_mm {
    int m, n, kk, bt, parts, x3;
    const float *a, *b, *cbias;
    long ars, acs, ldb, ldc;
    float *c;
    uint16_t *pa;
} lb_mm;

static void lb_pack_task(void *ctx, int task)
{
    const lb_mm *j = ctx;
    long lo, hi;
    k_split((j->m + K_BF16_MR - 1) / K_BF16_MR, j->parts, task, &lo, &hi);
    k_bf16_pack_a_blocks(j->m, j->kk, j->a, j->ars, j->acs, (int)lo, (int)hi, j->pa);
}

static void lb_mm_task(void *ctx, int task)
{
    const lb_mm *j = ctx;
    long lo, hi;
    k_split((j->n + 31) / 32, j->parts, task, &lo, &hi);
    long c0 = lo * 32, c1 = hi * 32 < j->n ? hi * 32 : j->n;
    if (c0 >= c1) return;
    k_bf16_gemm_blk(j->m, (int)(c1 - c0), j->kk, j->pa, j->bt ? j->b + c0 * j->ldb : j->b + c0, j->ldb, j->bt,
                    j->c + c0, j->ldc, j->cbias ? j->cbias + c0 : NULL, 0);
}

/* The AMX form packs its own operands, per 32-column part of C (k_amx_gemm's bits do not
 * depend on such a split). */
static void lb_amx_task(void *ctx, int task)
{
    const lb_mm *j = ctx;
    long lo, hi;
    k_split((j->n + 31) / 32, j->parts, task, &lo, &hi);
    long c0 = lo * 32, c1 = hi * 32 < j->n ? hi * 32 : j->n;
    if (c0 < c1)
        (j->x3 ? k_amx_gemm_x3 : k_amx_gemm)(j->m, (int)(c1 - c0), j->kk, j->a, j->ars, j->acs,
                                             j->bt ? j->b + c0 * j->ldb : j->b + c0, j->ldb, j->bt, j->c + c0, j->ldc,
                                             j->cbias ? j->cbias + c0 : NULL, 0);
}

/* ---- fp32 matmul precision (kernels/cpu/k_settings.c): "high" where this CPU runs it */
/* DDPRT_ISA below avx512bf16 stands for a CPU without AMX too */
int k_f32_matmul_high(void) { return k_matmul_high_now() && k_isa_bf16() && k_amx_ok(); }

/* Products of at least 32 in every dimension: below that the tiles run mostly empty and
 * the fp32 kernels are as fast. */
int k_f32_matmul_x3_ok(int m, int n, int kk)
{
    return m >= 32 && n >= 32 && kk >= 32 && k_f32_matmul_high();
}

void k_f32_matmul_x3(int m, int n, int kk, const float *a, long ars, long acs, const float *b, long ldb, int bt,
                     float *c, long ldc, const float *cbias)
{
    lb_mm j = {.m = m, .n = n, .kk = kk, .bt = bt, .a = a, .b = b, .cbias = cbias, .ars = ars, .acs = acs,
               .ldb = ldb, .ldc = ldc, .c = c, .x3 = 1};
    j.parts = lb_parts((n + 31) / 32, 6L * m * n * kk);
    k_parallel_for(j.parts, lb_amx_task, &j);
}

void k_bf16_matmul(int m, int n, int kk, const float *a, long ars, long acs, const float *b, long ldb, int bt,
                   float *c, long ldc, const float *cbias, uint16_t *pa)
{
    if (m <= 0 || n <= 0) return;
    lb_mm j = {.m = m, .n = n, .kk = kk, .bt = bt, .a = a, .b = b, .cbias = cbias, .ars = ars, .acs = acs,
               .ldb = ldb, .ldc = ldc, .c = c, .pa = pa};
    long flops = 2L * m * n * kk;
    if (use_amx()) {
        j.parts = lb_parts((n + 31) / 32, flops);
        k_parallel_for(j.parts, lb_amx_task, &j);
        return;
    }
    j.parts = lb_parts((m + K_BF16_MR - 1) / K_BF16_MR, flops);
    k_parallel_for(j.parts, lb_pack_task, &j);
    j.parts = lb_parts((n + 31) / 32, flops);
    k_parallel_for(j.parts, lb_mm_task, &j);
}

typedef struct lb_job {
    int n, in, out, parts;
    const uint16_t *x16, *w16;
    const float *b;
    float *y;
} lb_job;

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
    if (!k_bf16_linear_dot()) {
        float *xr = (float *)((char *)ws + d.px), *wr = (float *)((char *)ws + d.pw);
        k_bf16_round_span((size_t)n * in, x, xr);
        k_bf16_round_span((size_t)out * in, w, wr);
        k_linear_fwd(n, in, out, xr, wr, b, y);
        return;
    }
    if (out >= 32) {
        k_bf16_matmul(n, out, in, x, in, 1, w, in, 1, y, out, b, (uint16_t *)((char *)ws + d.pa));
        return;
    }
    uint16_t *x16 = (uint16_t *)((char *)ws + d.x16), *w16 = (uint16_t *)((char *)ws + d.w16);
    k_bf16_operand_span((size_t)n * in, x, x16);
    k_bf16_operand_span((size_t)out * in, w, w16);
    lb_job j = {.n = n, .in = in, .out = out, .x16 = x16, .w16 = w16, .b = b, .y = y};
    j.parts = lb_parts(n, 2L * n * in * out);
    k_parallel_for(j.parts, lb_fwd_task, &j);
}

void k_linear_bwd_bf16(int n, int in, int out, const float *x, const float *w, const float *dy, float *dx,
                       float *dw, float *db, void *ws)
{
    lb_dims d = lb_dims_of(n, in, out);
    if (!k_bf16_linear_dot()) {
        float *xr = (float *)((char *)ws + d.px), *wr = (float *)((char *)ws + d.pw);
        float *dyr = (float *)((char *)ws + d.pdy);
        k_bf16_round_span((size_t)n * in, x, xr);
        k_bf16_round_span((size_t)out * in, w, wr);
        k_bf16_round_span((size_t)n * out, dy, dyr);
        k_linear_bwd(n, in, out, xr, wr, dyr, dx, dw, NULL);
    } else {
        uint16_t *pa = (uint16_t *)((char *)ws + d.pa);
        if (dx) k_bf16_matmul(n, in, out, dy, out, 1, w, in, 0, dx, in, NULL, pa);
        if (dw) k_bf16_matmul(out, in, n, dy, 1, out, x, in, 0, dw, in, NULL, pa);
    }
    if (db) {
        for (int o = 0; o < out; o++) db[o] = 0.0f;
        for (long r = 0; r < n; r++)
            for (int o = 0; o < out; o++) db[o] += dy[r * out + o];
    }
}
