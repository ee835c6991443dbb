/* The AMX bf16 GEMM (kernels/cpu/k_amx.c) against double sums of bf16-rounded operands,
 * and its bf16x3 form (--matmul-precision high) against those of the fp32 operands:
 * sizes off the 16/32 tiles, K odd and over several chunks, N over several super-blocks,
 * both layouts of A and of B, bias and accumulation; the bits of a whole GEMM equal those
 * of calls on 32-row / 32-column parts; the linear layers at high. Skipped (with a note)
 * without AMX. */
#include "test/t.h"
#include "kernels/cpu/k_amx.h"
#include "kernels/k.h"
#include "kernels/k_tfm.h"
#include "rt/half.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static float bf(float x) { return rt_bf16_to_f32(rt_f32_to_bf16(x)); }

/* A as [m][kk] (acs == 1) or [kk][m] (ars == 1); B as [kk][n] or, bt, [n][kk]. mode 0:
 * k_amx_gemm against double sums of the bf16-rounded operands (fp32 summation's bound);
 * mode 1: k_amx_gemm_x3 against those of the fp32 operands, within 2^-15 of the
 * products' magnitudes plus fp32 summation; mode 2: k_amx_gemm against the fp32
 * operands' sums, no bound (bf16's own error, for comparison). *worst (may be NULL):
 * the largest error relative to the products' magnitudes. Returns the failures. */
static int gemm_case(int m, int n, int kk, int at, int bt, int bias, int acc, int mode, double *worst)
{
    long lda = at ? m : kk, ldb = bt ? kk : n, ldc = n + 3;
    float *a = malloc(sizeof(float) * (size_t)m * kk), *b = malloc(sizeof(float) * (size_t)kk * n);
    float *c = malloc(sizeof(float) * (size_t)m * ldc), *cb = malloc(sizeof(float) * (size_t)n);
    double *r = malloc(sizeof(double) * (size_t)m * n), *mg = malloc(sizeof(double) * (size_t)m * n);
    for (long i = 0; i < (long)m * kk; i++) a[i] = sinf((float)i * 0.37f + 0.2f) * (1.0f + (float)(i % 3));
    for (long i = 0; i < (long)kk * n; i++) b[i] = cosf((float)i * 0.53f - 0.1f);
    for (int j = 0; j < n; j++) cb[j] = 0.25f * (float)(j % 7) - 0.5f;
    for (long i = 0; i < (long)m * ldc; i++) c[i] = 0.125f * (float)(i % 5);
    int bad = 0;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double s = acc ? c[(long)i * ldc + j] : bias ? cb[j] : 0.0, mag = fabs(s);
            for (int k = 0; k < kk; k++) {
                float x = at ? a[(long)k * lda + i] : a[(long)i * lda + k], y = bt ? b[(long)j * ldb + k] : b[(long)k * ldb + j];
                double p = mode ? (double)x * y : (double)bf(x) * bf(y);
                s += p, mag += fabs(p);
            }
            r[(long)i * n + j] = s;
            mg[(long)i * n + j] = mag;
        }
    (mode == 1 ? k_amx_gemm_x3 : k_amx_gemm)(m, n, kk, a, at ? 1 : lda, at ? lda : 1, b, ldb, bt, c, ldc,
                                             bias ? cb : NULL, acc);
    double w = 0;
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double want = r[(long)i * n + j], got = c[(long)i * ldc + j], mag = mg[(long)i * n + j];
            double e = fabs(got - want), tol = mode == 1 ? mag / 32768.0 + 1e-6 * (kk + 8) /* kk sums of |p| <= 2 */
                                                         : 2e-6 * (kk + 8) + 1e-5 * fabs(want);
            if (mag > 0 && e / mag > w) w = e / mag;
            if (mode < 2 && !(e <= tol) && bad++ < 3)
                t_fail(__FILE__, __LINE__, "mode %d m %d n %d k %d at %d bt %d bias %d acc %d: C(%d,%d) %.9g vs %.9g",
                       mode, m, n, kk, at, bt, bias, acc, i, j, got, want);
        }
    for (int i = 0; i < m; i++) /* the padding columns of C are not written */
        for (int j = n; j < ldc; j++) CHECK(c[(long)i * ldc + j] == 0.125f * (float)(((long)i * ldc + j) % 5));
    if (worst) *worst = w;
    free(a), free(b), free(c), free(cb), free(r), free(mg);
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
            if (gemm_case(sz[s][0], sz[s][1], sz[s][2], v & 1, v >> 1 & 1, v >> 2 & 1, 0, 0, NULL)) return;
    CHECK(gemm_case(33, 40, 70, 0, 1, 0, 1, 0, NULL) == 0);
    CHECK(gemm_case(50, 1540, 300, 1, 0, 0, 1, 0, NULL) == 0);
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
        for (int v = 0; v < 8; v++) { /* v & 4: bf16x3 */
            int at = v >> 1 & 1, bt = v & 1;
            long ars = at ? 1 : K, acs = at ? M : 1;
            const float *a32 = at ? a + 32 : a + 32 * K;
            void (*mm)(int, int, int, const float *, long, long, const float *, long, int, float *, long,
                       const float *, int) = v & 4 ? k_amx_gemm_x3 : k_amx_gemm;
            mm(M, N, K, a, ars, acs, b, bt ? K : N, bt, c1, N, NULL, 0);
            /* rows 0-31 and 32-95; columns 0-63 and 64-N of the second part */
            mm(32, N, K, a, ars, acs, b, bt ? K : N, bt, c2, N, NULL, 0);
            mm(M - 32, 64, K, a32, ars, acs, b, bt ? K : N, bt, c2 + 32 * N, N, NULL, 0);
            mm(M - 32, N - 64, K, a32, ars, acs, bt ? b + 64 * K : b + 64, bt ? K : N, bt, c2 + 32 * N + 64, N, NULL, 0);
            CHECKF(memcmp(c1, c2, sizeof(float) * M * N) == 0, "n %d k %d at %d bt %d x3 %d", N, K, at, bt, v >> 2);
        }
        free(a), free(b), free(c1), free(c2);
    }
}

/* bf16x3 (k_amx_gemm_x3, --matmul-precision high) within its bound of the fp32
 * operands' sums (gemm_case mode 1), and at least 50x closer than one bf16 product (a
 * lost low part would leave bf16's 2^-8). */
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
            double e3, e1;
            bad += gemm_case(sz[s][0], sz[s][1], sz[s][2], at, bt, bias, 0, 1, &e3);
            bad += gemm_case(sz[s][0], sz[s][1], sz[s][2], at, bt, bias, 0, 2, &e1);
            CHECKF(bad == 0, "m %d n %d k %d v %d", sz[s][0], sz[s][1], sz[s][2], v);
            CHECKF(e3 * 50 < e1, "m %d n %d k %d v %d: x3 %.3g of the magnitude, bf16 %.3g", sz[s][0], sz[s][1],
                   sz[s][2], v, e3, e1);
            if (bad) return;
        }
    CHECK(gemm_case(50, 70, 300, 1, 0, 0, 1, 1, NULL) == 0); /* C += */
    CHECK(gemm_case(33, 40, 2100, 0, 1, 0, 1, 1, NULL) == 0);
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
    k_set_matmul_precision("high");
    int x3 = k_f32_matmul_high(); /* AMX, and DDPRT_ISA not below avx512bf16 */
    k_set_matmul_precision(NULL);
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
                if (s || !x3) CHECKF(same, "hf %d s %d product %d: not the fp32 kernels' bits", hf, s, q);
                else CHECKF(!same && rel(r[1][q], r[0][q], len[q]) < 1e-4, "hf %d product %d: %.3g of the largest (same %d)",
                            hf, q, rel(r[1][q], r[0][q], len[q]), same);
            }
            for (int p = 0; p < 2; p++)
                for (int q = 0; q < 3; q++) free(r[p][q]);
            free(x), free(w), free(b), free(dy), free(ws);
        }
}
