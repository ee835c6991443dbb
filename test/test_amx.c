/* The AMX bf16 GEMM (kernels/cpu/k_amx.c) against double sums of bf16-rounded operands:
 * sizes off the 16/32 tiles, K odd and over several chunks, N over several super-blocks,
 * both layouts of A and of B, bias and accumulation; the bits of a whole GEMM equal those
 * of calls on 32-row / 32-column parts. Skipped (with a note) without AMX. */
#include "test/t.h"
#include "kernels/cpu/k_amx.h"
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
