/* The blocked bf16 GEMM (k_bf16_gemm.c) and the linear layers' two forms under
 * --amp bf16 (vdpbf16ps GEMMs, or bf16-rounded operands through the fp32 ones): against
 * double sums of bf16-rounded operands on shapes that cross every blocking edge (m
 * below one row block, n and K not multiples of the tiles, K odd, several K chunks,
 * row groups and column super-blocks), the vectorised packing against the scalar one,
 * and the bits against the column split and the thread count. */
#include "test/t.h"
#include "kernels/cpu/k_amx.h"
#include "kernels/k.h"
#include "kernels/k_tfm.h"
#include "kernels/cpu/k_bf16.h"
#include "kernels/cpu/k_int.h"
#include "rt/half.h"
#include "rt/isa.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rs = 0x2545F4914F6CDD1DULL;
static float frand(void)
{
    rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17;
    return (float)((rs >> 40) * 0x1p-24 * 2.0 - 1.0);
}
static float *rnd(size_t n)
{
    float *p = malloc(n * sizeof *p + 64);
    for (size_t i = 0; i < n; i++) p[i] = frand();
    return p;
}
static double bf(float x) { return rt_bf16_to_f32(rt_f32_to_bf16(x)); }

/* |c - sum bf(a) bf(b) - bias| within fp32 summation error of the products' sizes. */
static int close_to(double c, double ref, double mag) { return fabs(c - ref) <= 2e-6 * mag + 1e-7; }

/* C = cbias + A B for A(i,k) = a[i*ars + k*acs], B(k,j) = b[k*ldb + j] or b[j*ldb + k]. */
static int check_gemm(int m, int n, int kk, long ars, long acs, int bt, int bias, const char *what)
{
    long ldb = bt ? kk + 3 : n + 5;
    float *a = rnd((size_t)((m - 1) * ars + (kk - 1) * acs + 1)), *b = rnd((size_t)(bt ? n : kk) * ldb), *cb = rnd((size_t)n);
    float *c = malloc(sizeof(float) * (size_t)m * n);
    uint16_t *ap = malloc(2 * k_bf16_pack_a_elems(m, kk));
    k_bf16_pack_a(m, kk, a, ars, acs, ap);
    k_bf16_gemm_blk(m, n, kk, ap, b, ldb, bt, c, n, bias ? cb : NULL, 0);
    int bad = 0;
    for (int i = 0; i < m && bad < 3; i++)
        for (int j = 0; j < n; j++) {
            double s = bias ? cb[j] : 0, mag = fabs(s);
            for (int k = 0; k < kk; k++) {
                double p = bf(a[i * ars + k * acs]) * bf(bt ? b[(long)j * ldb + k] : b[(long)k * ldb + j]);
                s += p, mag += fabs(p);
            }
            if (!close_to(c[(long)i * n + j], s, mag) && bad++ < 3)
                t_fail(__FILE__, __LINE__, "%s %dx%dx%d bt %d: C[%d][%d] = %.9g, reference %.9g", what, m, n, kk, bt, i, j,
                       c[(long)i * n + j], s);
        }
    free(a); free(b); free(cb); free(c); free(ap);
    return !bad;
}

TEST(bf16_blocked_gemm_matches_rounded_reference)
{
    if (!k_isa_bf16()) return; /* vdpbf16ps only; the linear tests below cover the other path */
    /* m, n, kk: one partial row block and panel; K odd; 2 K chunks (512) and odd; 17 row
     * blocks = 3 groups of 8 with 1100 columns = 3 super-blocks of 512 */
    static const int sh[][3] = {{5, 7, 3}, {1, 45, 33}, {13, 33, 1}, {12, 32, 64}, {40, 70, 515}, {199, 1100, 515}};
    for (int s = 0; s < 6; s++) {
        int m = sh[s][0], n = sh[s][1], kk = sh[s][2];
        for (int bt = 0; bt < 2; bt++) {
            if (s == 5 && bt) continue; /* the large one once is enough */
            check_gemm(m, n, kk, kk, 1, bt, s & 1, "A rows");          /* acs == 1: the transposing pack */
            if (s < 5) check_gemm(m, n, kk, 1, m + 2, bt, 1, "A cols"); /* ars == 1: pairs of rows */
        }
    }
    check_gemm(30, 40, 17, 40, 2, 0, 1, "A strided"); /* neither stride 1: the scalar pack */
}

/* The packs give the scalar loop's bits (ISA avx512 runs it). */
TEST(bf16_pack_a_vector_matches_scalar)
{
    if (!k_isa_bf16()) return;
    static const int sh[][2] = {{1, 1}, {12, 32}, {13, 33}, {29, 70}, {7, 5}};
    for (int s = 0; s < 5; s++)
        for (int cols = 0; cols < 2; cols++) {
            int m = sh[s][0], kk = sh[s][1];
            long ars = cols ? 1 : kk + 1, acs = cols ? m + 3 : 1;
            float *a = rnd((size_t)(cols ? kk : m) * (cols ? m + 3 : kk + 1));
            size_t ne = k_bf16_pack_a_elems(m, kk);
            uint16_t *v = calloc(ne, 2), *r = calloc(ne, 2);
            k_bf16_pack_a(m, kk, a, ars, acs, v);
            CHECK(k_set_isa("avx512") == 0);
            k_bf16_pack_a(m, kk, a, ars, acs, r);
            k_set_isa(NULL);
            CHECKF(!memcmp(v, r, 2 * ne), "pack %dx%d %s", m, kk, cols ? "cols" : "rows");
            free(a); free(v); free(r);
        }
}

/* A column split at any multiple of 32 (threads' tasks) gives the same bits. */
TEST(bf16_blocked_gemm_bits_do_not_depend_on_the_split)
{
    if (!k_isa_bf16()) return;
    int m = 50, n = 600, kk = 601;
    float *a = rnd((size_t)m * kk), *b = rnd((size_t)kk * n), *cb = rnd((size_t)n);
    float *c0 = malloc(4L * m * n), *c1 = malloc(4L * m * n);
    uint16_t *ap = malloc(2 * k_bf16_pack_a_elems(m, kk));
    k_bf16_pack_a(m, kk, a, kk, 1, ap);
    for (int bt = 0; bt < 2; bt++) {
        long ldb = bt ? kk : n;
        k_bf16_gemm_blk(m, n, kk, ap, b, ldb, bt, c0, n, cb, 0);
        k_bf16_gemm_blk(m, 96, kk, ap, b, ldb, bt, c1, n, cb, 0);
        k_bf16_gemm_blk(m, n - 96, kk, ap, bt ? b + 96 * ldb : b + 96, ldb, bt, c1 + 96, n, cb + 96, 0);
        CHECKF(!memcmp(c0, c1, 4L * m * n), "bt %d: split at 96 changed bits", bt);
    }
    free(a); free(b); free(cb); free(c0); free(c1); free(ap);
}

/* nn.Linear (w[out][in]) and Conv1D (w[in][out]) layers under both forms, 1 and 3
 * threads: bf16-operand references; the same bits for both thread counts. */
TEST(bf16_linear_forms_match_reference_and_agree_across_threads)
{
    static const int lc[][3] = {{70, 40, 37}, {130, 515, 96}, {9, 33, 1100}, {64, 50, 10}};
    for (int ci = 0; ci < 4; ci++) {
        int n = lc[ci][0], in = lc[ci][1], out = lc[ci][2];
        float *x = rnd((size_t)n * in), *w = rnd((size_t)out * in), *b = rnd(out), *g = rnd((size_t)n * out);
        double *ry = calloc((size_t)n * out, 8), *rdx = calloc((size_t)n * in, 8), *rdw = calloc((size_t)out * in, 8);
        double *my = calloc((size_t)n * out, 8), *mdx = calloc((size_t)n * in, 8), *mdw = calloc((size_t)out * in, 8);
        for (int i = 0; i < n; i++)
            for (int o = 0; o < out; o++) {
                double s = b[o], gv = bf(g[i * out + o]), ms = fabs(b[o]);
                for (int k = 0; k < in; k++) {
                    double wv = bf(w[o * in + k]), xv = bf(x[i * in + k]); /* Linear: w[o][k] */
                    s += xv * wv, ms += fabs(xv * wv);
                    rdx[i * in + k] += gv * wv, mdx[i * in + k] += fabs(gv * wv);
                    rdw[o * in + k] += gv * xv, mdw[o * in + k] += fabs(gv * xv);
                }
                ry[i * out + o] = s, my[i * out + o] = ms;
            }
        size_t ws_n = k_conv1d_hf_bf16_workspace(n, in, out);
        void *ws = malloc(ws_n > k_linear_bf16_workspace(n, in, out) ? ws_n : k_linear_bf16_workspace(n, in, out));
        float *wt = malloc(4L * in * out); /* Conv1D's weight: wt[k][o] = w[o][k] */
        for (int o = 0; o < out; o++)
            for (int k = 0; k < in; k++) wt[k * out + o] = w[o * in + k];
        float *y[2], *dx[2], *dw[2], *db[2];
        for (int t = 0; t < 2; t++)
            y[t] = malloc(4L * n * out), dx[t] = malloc(4L * n * in), dw[t] = malloc(4L * out * in), db[t] = malloc(4L * out);
        static const char *const forms[] = {"dpbf16", "fma", "amx"};
        for (int form = 0; form < 3; form++)
            for (int hf = 0; hf < 2; hf++) {
                if (form == 2 && !k_amx_ok()) continue; /* AMX (Sapphire Rapids on): where the CPU has it */
                CHECK(k_bf16_set_gemm(forms[form]) == 0);
                for (int t = 0; t < 2; t++) {
                    k_set_threads(t ? 3 : 1);
                    if (hf) {
                        k_conv1d_hf_fwd_bf16(n, in, out, x, wt, b, y[t], ws);
                        k_conv1d_hf_bwd_bf16(n, in, out, x, wt, g, dx[t], dw[t], db[t], ws);
                    } else {
                        k_linear_fwd_bf16(n, in, out, x, w, b, y[t], ws);
                        k_linear_bwd_bf16(n, in, out, x, w, g, dx[t], dw[t], db[t], ws);
                    }
                }
                k_set_threads(1);
                int bad = 0;
                for (long e = 0; e < (long)n * out; e++) bad += !close_to(y[0][e], ry[e], my[e]);
                for (long e = 0; e < (long)n * in; e++) bad += !close_to(dx[0][e], rdx[e], mdx[e]);
                for (int o = 0; o < out; o++)
                    for (int k = 0; k < in; k++) /* Conv1D's dW is [in][out] */
                        bad += !close_to(dw[0][hf ? (long)k * out + o : (long)o * in + k], rdw[o * in + k], mdw[o * in + k]);
                CHECKF(!bad, "case %d %s %s: %d elements off the reference", ci, hf ? "conv1d_hf" : "linear",
                       forms[form], bad);
                CHECKF(!memcmp(y[0], y[1], 4L * n * out) && !memcmp(dx[0], dx[1], 4L * n * in) &&
                           !memcmp(dw[0], dw[1], 4L * out * in) && !memcmp(db[0], db[1], 4L * out),
                       "case %d %s %s: 1 and 3 threads differ", ci, hf ? "conv1d_hf" : "linear", forms[form]);
            }
        k_bf16_set_gemm(NULL);
        for (int t = 0; t < 2; t++) { free(y[t]); free(dx[t]); free(dw[t]); free(db[t]); }
        free(x); free(w); free(wt); free(b); free(g); free(ws);
        free(ry); free(rdx); free(rdw); free(my); free(mdx); free(mdw);
    }
}

/* k_bf16_round_span (the fma form's operands) gives rt/half.h's scalar bits on every
 * path: random bit patterns, NaNs and infinities included. */
TEST(bf16_round_span_matches_scalar_on_every_isa)
{
    enum { N = 1037 };
    uint32_t *u = malloc(4 * N);
    float *x = (float *)(void *)u, *y = malloc(4 * N);
    for (int i = 0; i < N; i++) {
        rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17;
        u[i] = (uint32_t)(rs >> 13);
    }
    u[0] = 0x7f800000u, u[1] = 0xff800001u, u[2] = 0x7fc00000u, u[3] = 0x3f808000u, u[4] = 0x3f818000u;
    for (int k = 0; k < RT_NISA; k++) {
        if (k_set_isa(rt_isa_name(k)) != 0) continue;
        k_bf16_round_span(N, x, y);
        for (int i = 0; i < N; i++) {
            float r = rt_bf16_to_f32(rt_f32_to_bf16(x[i]));
            CHECKF(!memcmp(&r, y + i, 4), "%s: element %d (bits %08x)", rt_isa_name(k), i, u[i]);
        }
    }
    k_set_isa(NULL);
    free(u); free(y);
}
