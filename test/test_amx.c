/* The AMX bf16 GEMM (kernels/cpu/k_amx.c) against double sums of bf16-rounded operands:
 * sizes off the 16/32 tiles, K odd and over several chunks, N over several super-blocks,
 * both layouts of A and of B, bias and accumulation; the bits of a whole GEMM equal those
 * of calls on 32-row / 32-column parts. Skipped (with a note) without AMX. */
#include "test/t.h"
#include "kernels/cpu/k_amx.h"
#include "kernels/k.h"
#include "kernels/k_tfm.h"
#include "rt/half.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static float bf(float x) { return rt_bf16_to_f32(rt_f32_to_bf16(x)); }

/* A as [m][kk] (acs == 1) or [kk][m] (ars == 1); B as [kk][n] or, bt, [n][kk]. */
static int one(int m, int n, int kk, int at, int bt, int bias, int acc)
{
    long lda = at ? m : kk, ldb = bt ? kk : n, ldc = n + 3;
    float *a = malloc(sizeof(float) * (size_t)m * kk), *b = malloc(sizeof(float) * (size_t)kk * n);
    float *c = malloc(sizeof(float) * (size_t)m * ldc), *cb = malloc(sizeof(float) * (size_t)n);
    double *r = malloc(sizeof(double) * (size_t)m * n);
    for (long i = 0; i < (long)m * kk; i++) a[i] = sinf((float)i * 0.37f + 0.2f);
    for (long i = 0; i < (long)kk * n; i++) b[i] = cosf((float)i * 0.53f - 0.1f);
    for (int j = 0; j < n; j++) cb[j] = 0.25f * (float)(j % 7) - 0.5f;
    for (long i = 0; i < (long)m * ldc; i++) c[i] = 0.125f * (float)(i % 5);
    int bad = 0;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = acc ? c[(long)i * ldc + j] : bias ? cb[j] : 0.0, mag = fabs(s);
            for (int k = 0; k < kk; k++) {
                double p = (double)bf(at ? a[(long)k * lda + i] : a[(long)i * lda + k]) *
                           (double)bf(bt ? b[(long)j * ldb + k] : b[(long)k * ldb + j]);
                s += p, mag += fabs(p);
            }
            r[(long)i * n + j] = s;
            (void)mag;
        }
    k_amx_gemm(m, n, kk, a, at ? 1 : lda, at ? lda : 1, b, ldb, bt, c, ldc, bias ? cb : NULL, acc);
    for (int i = 0; i < m && bad < 3; i++)
        for (int j = 0; j < n && bad < 3; j++) {
            double want = r[(long)i * n + j], got = c[(long)i * ldc + j];
            /* fp32 sums of kk products of magnitude <= 1 */
            if (!(fabs(got - want) <= 1e-6 * (kk + 8) + 1e-5 * fabs(want))) {
                t_fail(__FILE__, __LINE__, "m %d n %d k %d at %d bt %d bias %d acc %d: C(%d,%d) %.9g vs %.9g", m, n,
                       kk, at, bt, bias, acc, i, j, got, want);
                bad++;
            }
        }
    for (int i = 0; i < m; i++) /* the padding columns of C are not written */
        for (int j = n; j < ldc; j++) CHECK(c[(long)i * ldc + j] == 0.125f * (float)(((long)i * ldc + j) % 5));
    free(a), free(b), free(c), free(cb), free(r);
    return bad;
}

TEST(amx_gemm_matches_double_sums)
{
    if (!k_amx_ok()) {
        t_note("skipped: no AMX-BF16 on this CPU (or the kernel refused the tile state)");
        return;
    }
    static const int sz[][3] = {{1, 1, 1}, {3, 40, 0}, {16, 16, 32}, {33, 17, 45}, {32, 64, 256}, {70, 100, 257},
                                {5, 1600, 40}, {40, 33, 600}};
    for (int s = 0; s < (int)(sizeof sz / sizeof *sz); s++)
        for (int v = 0; v < 8; v++)
            if (one(sz[s][0], sz[s][1], sz[s][2], v & 1, v >> 1 & 1, v >> 2 & 1, 0)) return;
    CHECK(one(33, 40, 70, 0, 1, 0, 1) == 0);
    CHECK(one(50, 1540, 300, 1, 0, 0, 1) == 0);
}

TEST(amx_gemm_bits_do_not_depend_on_the_split)
{
    if (!k_amx_ok()) {
        t_note("skipped: no AMX-BF16 on this CPU");
        return;
    }
    /* N 1600, K 520: N in super-blocks; N 300, K 1500: K in chunks that fit all of N in
     * one (C narrower than half of K), the 64-column part in one K chunk */
    static const int nk[][2] = {{1600, 520}, {300, 1500}};
    enum { M = 96 };
    for (int s = 0; s < 2; s++) {
        const int N = nk[s][0], K = nk[s][1];
        float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * K * N);
        float *c1 = calloc((size_t)M * N, sizeof(float)), *c2 = calloc((size_t)M * N, sizeof(float));
        for (int i = 0; i < M * K; i++) a[i] = sinf((float)i * 0.11f);
        for (int i = 0; i < K * N; i++) b[i] = cosf((float)i * 0.07f);
        /* A as [M][K] or [K][M] (at: a dW's x^T, whose K chunks follow N: 3 chunks for all
         * 1600 columns, 2 for 1536, 1 for 64), B as [K][N] or [N][K] */
        for (int v = 0; v < 4; v++) {
            int at = v >> 1, bt = v & 1;
            long ars = at ? 1 : K, acs = at ? M : 1;
            const float *a32 = at ? a + 32 : a + 32 * K;
            k_amx_gemm(M, N, K, a, ars, acs, b, bt ? K : N, bt, c1, N, NULL, 0);
            /* rows 0-31 and 32-95; columns 0-63 and 64-N of the second part */
            k_amx_gemm(32, N, K, a, ars, acs, b, bt ? K : N, bt, c2, N, NULL, 0);
            k_amx_gemm(M - 32, 64, K, a32, ars, acs, b, bt ? K : N, bt, c2 + 32 * N, N, NULL, 0);
            k_amx_gemm(M - 32, N - 64, K, a32, ars, acs, bt ? b + 64 * K : b + 64, bt ? K : N, bt, c2 + 32 * N + 64,
                       N, NULL, 0);
            CHECKF(memcmp(c1, c2, sizeof(float) * M * N) == 0, "n %d k %d at %d bt %d", N, K, at, bt);
        }
        free(a), free(b), free(c1), free(c2);
    }
}

/* bf16x3 (k_amx_gemm_x3, --matmul-precision high) against double sums of the fp32
 * operands themselves: within 2^-15 of the products' magnitudes (the split keeps ~16
 * bits of each operand) plus fp32 summation, and at least 50x closer than one bf16
 * product (a lost low part would leave bf16's 2^-8). */
static double x3_err(int m, int n, int kk, int at, int bt, int x3, int bias, int acc, int *bad)
{
    long lda = at ? m : kk, ldb = bt ? kk : n, ldc = n + 1;
    float *a = malloc(sizeof(float) * (size_t)m * kk), *b = malloc(sizeof(float) * (size_t)kk * n);
    float *c = malloc(sizeof(float) * (size_t)m * ldc), *cb = malloc(sizeof(float) * (size_t)n);
    for (long i = 0; i < (long)m * kk; i++) a[i] = sinf((float)i * 0.37f + 0.2f) * (1.0f + (float)(i % 3));
    for (long i = 0; i < (long)kk * n; i++) b[i] = cosf((float)i * 0.53f - 0.1f);
    for (int j = 0; j < n; j++) cb[j] = 0.25f * (float)(j % 7) - 0.5f;
    for (long i = 0; i < (long)m * ldc; i++) c[i] = 0.125f * (float)(i % 5);
    double worst = 0;
    const float *c0 = acc ? NULL : c;
    float *keep = acc ? malloc(sizeof(float) * (size_t)m * ldc) : NULL;
    if (keep) memcpy(keep, c, sizeof(float) * (size_t)m * ldc);
    (void)c0;
    (x3 ? k_amx_gemm_x3 : k_amx_gemm)(m, n, kk, a, at ? 1 : lda, at ? lda : 1, b, ldb, bt, c, ldc, bias ? cb : NULL,
                                      acc);
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = acc ? keep[(long)i * ldc + j] : bias ? cb[j] : 0.0, mag = fabs(s);
            for (int k = 0; k < kk; k++) {
                double p = (double)(at ? a[(long)k * lda + i] : a[(long)i * lda + k]) *
                           (double)(bt ? b[(long)j * ldb + k] : b[(long)k * ldb + j]);
                s += p, mag += fabs(p);
            }
            double e = fabs(c[(long)i * ldc + j] - s);
            if (x3 && !(e <= mag / 32768.0 + 1e-6 * (kk + 8)) && (*bad)++ < 3)
                t_fail(__FILE__, __LINE__, "x3 m %d n %d k %d at %d bt %d bias %d acc %d: C(%d,%d) %.9g vs %.9g", m, n,
                       kk, at, bt, bias, acc, i, j, c[(long)i * ldc + j], s);
            if (mag > 0 && e / mag > worst) worst = e / mag;
        }
    for (int i = 0; i < m; i++) /* the padding column of C is not written */
        if (c[(long)i * ldc + n] != (keep ? keep : c)[(long)i * ldc + n] ||
            c[(long)i * ldc + n] != 0.125f * (float)(((long)i * ldc + n) % 5))
            (*bad)++;
    free(a), free(b), free(c), free(cb), free(keep);
    return worst;
}

TEST(amx_gemm_x3_holds_fp32_operands_to_2e_minus_15)
{
    if (!k_amx_ok()) {
        t_note("skipped: no AMX-BF16 on this CPU");
        return;
    }
    /* tiles' edges, K over two x3 chunks (2048 steps each: 2100 and 4500 as well), odd K */
    static const int sz[][3] = {{1, 1, 1}, {33, 17, 45}, {32, 64, 256}, {70, 100, 257}, {40, 33, 2100}, {5, 300, 40},
                                {48, 40, 4500}};
    for (int s = 0; s < (int)(sizeof sz / sizeof *sz); s++)
        for (int v = 0; v < 8; v++) {
            int bad = 0, at = v & 1, bt = v >> 1 & 1, bias = v >> 2 & 1;
            double e3 = x3_err(sz[s][0], sz[s][1], sz[s][2], at, bt, 1, bias, 0, &bad);
            double e1 = x3_err(sz[s][0], sz[s][1], sz[s][2], at, bt, 0, bias, 0, &bad);
            CHECKF(bad == 0, "m %d n %d k %d v %d", sz[s][0], sz[s][1], sz[s][2], v);
            CHECKF(e3 * 50 < e1, "m %d n %d k %d v %d: x3 %.3g of the magnitude, bf16 %.3g", sz[s][0], sz[s][1],
                   sz[s][2], v, e3, e1);
            if (bad) return;
        }
    int bad = 0;
    x3_err(50, 70, 300, 1, 0, 1, 0, 1, &bad); /* C += */
    x3_err(33, 40, 2100, 0, 1, 1, 0, 1, &bad);
    CHECK(bad == 0);
}

TEST(amx_gemm_x3_bits_do_not_depend_on_the_split)
{
    if (!k_amx_ok()) {
        t_note("skipped: no AMX-BF16 on this CPU");
        return;
    }
    enum { M = 96, N = 1300, K = 700 };
    float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * K * N);
    float *c1 = calloc((size_t)M * N, sizeof(float)), *c2 = calloc((size_t)M * N, sizeof(float));
    for (int i = 0; i < M * K; i++) a[i] = sinf((float)i * 0.11f);
    for (int i = 0; i < K * N; i++) b[i] = cosf((float)i * 0.07f);
    for (int v = 0; v < 4; v++) {
        int at = v >> 1, bt = v & 1;
        long ars = at ? 1 : K, acs = at ? M : 1;
        const float *a32 = at ? a + 32 : a + 32 * K;
        k_amx_gemm_x3(M, N, K, a, ars, acs, b, bt ? K : N, bt, c1, N, NULL, 0);
        k_amx_gemm_x3(32, N, K, a, ars, acs, b, bt ? K : N, bt, c2, N, NULL, 0);
        k_amx_gemm_x3(M - 32, 64, K, a32, ars, acs, b, bt ? K : N, bt, c2 + 32 * N, N, NULL, 0);
        k_amx_gemm_x3(M - 32, N - 64, K, a32, ars, acs, bt ? b + 64 * K : b + 64, bt ? K : N, bt, c2 + 32 * N + 64, N,
                      NULL, 0);
        CHECKF(memcmp(c1, c2, sizeof(float) * M * N) == 0, "at %d bt %d", at, bt);
    }
    free(a), free(b), free(c1), free(c2);
}

/* The layers at --matmul-precision high: nn.Linear's and Conv1D's three products on
 * bf16x3 (other bits than highest's, within 1e-4 of the largest: an operand read in the
 * wrong layout would be off by its whole size); products under 32 wide, and CPUs
 * without AMX, keep the fp32 kernels (highest's bits). */
static double rel(const float *x, const float *y, long n)
{
    double e = 0, m = 0;
    for (long i = 0; i < n; i++) {
        double d = fabs((double)x[i] - y[i]);
        e = d > e ? d : e;
        m = fabs(y[i]) > m ? fabs(y[i]) : m;
    }
    return e / (m > 0 ? m : 1);
}

TEST(matmul_precision_high_in_the_linear_layers)
{
    CHECK(k_set_matmul_precision("medium") == -1);
    for (int hf = 0; hf < 2; hf++)
        for (int s = 0; s < 2; s++) {
            int n = s ? 20 : 100, in = s ? 300 : 70, out = s ? 16 : 90; /* s: under 32 wide */
            float *x = malloc(sizeof(float) * n * in), *w = malloc(sizeof(float) * in * out), *b = malloc(sizeof(float) * out);
            float *dy = malloc(sizeof(float) * n * out), *ws = malloc(sizeof(float) * in * out + 64);
            float *r[2][3];
            for (int p = 0; p < 2; p++) {
                r[p][0] = malloc(sizeof(float) * n * out);
                r[p][1] = malloc(sizeof(float) * n * in);
                r[p][2] = malloc(sizeof(float) * in * out);
            }
            unsigned u = 12345;
#define U01() ((u = u * 1664525u + 1013904223u) >> 8) * (1.0f / 16777216.0f)
            for (int i = 0; i < n * in; i++) x[i] = U01();
            for (int i = 0; i < in * out; i++) w[i] = U01() * 0.1f - 0.03f;
            for (int i = 0; i < out; i++) b[i] = 0.01f * (float)i;
            for (int i = 0; i < n * out; i++) dy[i] = U01() * 0.01f - 0.004f;
#undef U01
            for (int p = 0; p < 2; p++) {
                CHECK(k_set_matmul_precision(p ? "high" : "highest") == 0);
                if (hf) {
                    k_conv1d_hf_fwd(n, in, out, x, w, b, r[p][0]);
                    k_conv1d_hf_bwd(n, in, out, x, w, dy, r[p][1], r[p][2], NULL, ws);
                } else {
                    k_linear_fwd(n, in, out, x, w, b, r[p][0]);
                    k_linear_bwd(n, in, out, x, w, dy, r[p][1], r[p][2], NULL);
                }
            }
            k_set_matmul_precision(NULL);
            long len[3] = {(long)n * out, (long)n * in, (long)in * out};
            for (int q = 0; q < 3; q++) {
                int same = !memcmp(r[0][q], r[1][q], sizeof(float) * (size_t)len[q]);
                if (s || !k_amx_ok()) CHECKF(same, "hf %d s %d product %d: not the fp32 kernels' bits", hf, s, q);
                else CHECKF(!same && rel(r[1][q], r[0][q], len[q]) < 1e-4, "hf %d product %d: %.3g of the largest (same %d)",
                            hf, q, rel(r[1][q], r[0][q], len[q]), same);
            }
            for (int p = 0; p < 2; p++)
                for (int q = 0; q < 3; q++) free(r[p][q]);
            free(x), free(w), free(b), free(dy), free(ws);
        }
}
