/* Relu, max pool, dropout(2d), the RNG, log_softmax + NLL, SGD and init. */
#include "test/t.h"
#include "test/t_util.h"
#include "kernels/k.h"
#include "kernels/cpu/k_gemm.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rs = 0x9E3779B97F4A7C15ULL;
static float frand(void) { return t_uniform(&rs); }

TEST(kernels_relu_fwd_bwd)
{
    enum { N = 1000 };
    float x[N], y[N], dy[N], dx[N];
    for (int i = 0; i < N; i++) { x[i] = frand(); dy[i] = frand(); }
    x[3] = 0.0f; x[4] = NAN;
    k_relu_fwd(N, x, y);
    for (int i = 0; i < N; i++)
        if (i != 4) CHECK(y[i] == (x[i] > 0 ? x[i] : 0.0f));
    CHECK(isnan(y[4])); /* like torch.relu */
    k_relu_bwd(N, y, dy, dx);
    for (int i = 0; i < N; i++)
        if (i != 4) CHECK(dx[i] == (x[i] > 0 ? dy[i] : 0.0f));
    /* Finite difference away from the kink. */
    for (int i = 0; i < 50; i++) {
        if (fabsf(x[i]) < 0.05f || i == 4) continue;
        float a = x[i] + 0.01f, b = x[i] - 0.01f, ya, yb;
        k_relu_fwd(1, &a, &ya);
        k_relu_fwd(1, &b, &yb);
        CHECK_NEAR((ya - yb) / 0.02f * dy[i], dx[i], 1e-4);
    }
}

static void naive_pool(int planes, int h, int w, int ks, int st, const float *x, float *y, int32_t *idx)
{
    int p = (h - ks) / st + 1, q = (w - ks) / st + 1;
    for (int pl = 0; pl < planes; pl++)
        for (int i = 0; i < p; i++)
            for (int j = 0; j < q; j++) {
                int best = -1;
                for (int a = 0; a < ks; a++)
                    for (int b = 0; b < ks; b++) {
                        int off = (i * st + a) * w + j * st + b;
                        if (best < 0 || x[pl * h * w + off] > x[pl * h * w + best]) best = off;
                    }
                y[(pl * p + i) * q + j] = x[pl * h * w + best];
                idx[(pl * p + i) * q + j] = best;
            }
}

TEST(kernels_maxpool_fwd_bwd)
{
    /* LeNet's 2x2/2 (unrolled path), odd sizes (floor), overlapping 3/2, and 3/3. */
    const int cases[][6] = {{2, 3, 24, 24, 2, 2}, {1, 2, 7, 9, 2, 2}, {2, 2, 9, 8, 3, 2}, {1, 1, 9, 9, 3, 3},
                            {1, 2, 5, 39, 2, 2}, {2, 20, 8, 8, 2, 2}};
    for (int ci = 0; ci < 6; ci++) {
        int n = cases[ci][0], c = cases[ci][1], h = cases[ci][2], w = cases[ci][3];
        int ks = cases[ci][4], st = cases[ci][5];
        int p = (h - ks) / st + 1, q = (w - ks) / st + 1, planes = n * c;
        int nx = planes * h * w, ny = planes * p * q;
        float *x = malloc(nx * sizeof *x), *y = malloc(ny * sizeof *y), *ry = malloc(ny * sizeof *y);
        float *dy = malloc(ny * sizeof *y), *dx = malloc(nx * sizeof *x);
        int32_t *idx = malloc(ny * sizeof *idx), *ridx = malloc(ny * sizeof *idx);
        /* Distinct values (a shuffled ramp) so finite differences with a step below the
         * gaps are exact. */
        for (int i = 0; i < nx; i++) x[i] = (float)((i * 7919) % nx) - nx / 2;
        for (int i = 0; i < ny; i++) dy[i] = frand();
        naive_pool(planes, h, w, ks, st, x, ry, ridx);
        k_maxpool2d_fwd(n, c, h, w, ks, st, x, y, idx);
        CHECK(memcmp(y, ry, ny * sizeof *y) == 0);
        CHECK(memcmp(idx, ridx, ny * sizeof *idx) == 0);
        for (int i = 0; i < nx; i++) dx[i] = 9.0f;
        k_maxpool2d_bwd(n, c, h, w, ks, st, dy, idx, dx);
        for (int i = 0; i < nx; i += (nx > 300 ? 7 : 1)) {
            float s = x[i];
            double lp = 0, lm = 0;
            x[i] = s + 0.25f;
            k_maxpool2d_fwd(n, c, h, w, ks, st, x, y, idx);
            for (int t = 0; t < ny; t++) lp += (double)y[t] * dy[t];
            x[i] = s - 0.25f;
            k_maxpool2d_fwd(n, c, h, w, ks, st, x, y, idx);
            for (int t = 0; t < ny; t++) lm += (double)y[t] * dy[t];
            x[i] = s;
            CHECK_NEAR((lp - lm) / 0.5, dx[i], 1e-5);
        }
        free(x); free(y); free(ry); free(dy); free(dx); free(idx); free(ridx);
    }
}

TEST(kernels_maxpool_ties_and_nan)
{
    /* Ties: the first maximum in the window (row-major) wins, as in PyTorch. */
    float x[16] = {1, 1, 5, 2, 1, 1, 5, 5, 0, 3, -1, -1, 3, 3, -1, -1};
    float y[4], dy[4] = {1, 2, 3, 4}, dx[16];
    int32_t idx[4];
    k_maxpool2d_fwd(1, 1, 4, 4, 2, 2, x, y, idx);
    CHECK_EQ(idx[0], 0); CHECK_EQ(idx[1], 2); CHECK_EQ(idx[2], 9); CHECK_EQ(idx[3], 10);
    CHECK(y[0] == 1 && y[1] == 5 && y[2] == 3 && y[3] == -1);
    k_maxpool2d_bwd(1, 1, 4, 4, 2, 2, dy, idx, dx);
    CHECK(dx[0] == 1 && dx[1] == 0 && dx[2] == 2 && dx[9] == 3 && dx[10] == 4 && dx[15] == 0);
    /* Generic path (3x3/3) ties too. */
    float z[9] = {2, 7, 7, 7, 1, 7, 0, 0, 0};
    float zy;
    int32_t zi;
    k_maxpool2d_fwd(1, 1, 3, 3, 3, 3, z, &zy, &zi);
    CHECK(zy == 7 && zi == 1);
    /* NaN propagates and is the argmax. */
    x[5] = NAN;
    k_maxpool2d_fwd(1, 1, 4, 4, 2, 2, x, y, idx);
    CHECK(isnan(y[0]) && idx[0] == 5);
    z[4] = NAN;
    k_maxpool2d_fwd(1, 1, 3, 3, 3, 3, z, &zy, &zi);
    CHECK(isnan(zy) && zi == 4);
    /* Two NaNs: PyTorch's scan takes every NaN, so the last one is the argmax. */
    z[7] = NAN;
    k_maxpool2d_fwd(1, 1, 3, 3, 3, 3, z, &zy, &zi);
    CHECK(isnan(zy) && zi == 7);
    x[6] = NAN; x[1] = NAN;
    k_maxpool2d_fwd(1, 1, 4, 4, 2, 2, x, y, idx);
    CHECK(isnan(y[0]) && idx[0] == 5 && isnan(y[1]) && idx[1] == 6);
    /* All -inf: the first element, like PyTorch's initial index. */
    float m[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    k_maxpool2d_fwd(1, 1, 2, 2, 2, 2, m, y, idx);
    CHECK(idx[0] == 0 && isinf(y[0]));
    /* Rows wide enough for the vector paths (17 outputs: two blocks of 8 and a tail):
     * ties, NaNs and -inf in every window position, against the scalar scan. */
    enum { W = 34, Q = 17 };
    float r[2 * W], ry[Q], rdy[Q], rdx[2 * W];
    int32_t ri[Q];
    const float vals[] = {1, 1, 2, NAN, -INFINITY, 2, 0, NAN};
    for (int i = 0; i < 2 * W; i++) r[i] = vals[(i * 5 + i / W * 3) % 8];
    for (int i = 0; i < Q; i++) rdy[i] = (float)(i + 1);
    k_maxpool2d_fwd(1, 1, 2, W, 2, 2, r, ry, ri);
    for (int o = 0; o < Q; o++) {
        int at[4] = {2 * o, 2 * o + 1, W + 2 * o, W + 2 * o + 1}, best = at[0];
        for (int t = 1; t < 4; t++)
            if (r[at[t]] > r[best] || isnan(r[at[t]])) best = at[t];
        CHECKF(ri[o] == best, "output %d: argmax %d, want %d", o, ri[o], best);
        CHECK(memcmp(&ry[o], &r[best], sizeof(float)) == 0);
    }
    for (int i = 0; i < 2 * W; i++) rdx[i] = 9.0f;
    k_maxpool2d_bwd(1, 1, 2, W, 2, 2, rdy, ri, rdx);
    for (int i = 0; i < 2 * W; i++) {
        float want = 0.0f;
        for (int o = 0; o < Q; o++)
            if (ri[o] == i) want += rdy[o];
        CHECKF(rdx[i] == want, "dx[%d] = %g, want %g", i, rdx[i], want);
    }
}

TEST(kernels_rng_counter_based)
{
    /* Known values pin the definition (the CUDA twin must reproduce them). */
    float u0 = k_rand_uniform(0, 0), u1 = k_rand_uniform(0, 1), v0 = k_rand_uniform(1, 0);
    CHECK(u0 >= 0 && u0 < 1 && u1 >= 0 && u1 < 1);
    CHECK(u0 != u1 && u0 != v0);
    CHECK_EQ((long)(u0 * 16777216.0f), 9638282);
    CHECK_EQ((long)(u1 * 16777216.0f), 14238297);
    CHECK_EQ((long)(v0 * 16777216.0f), 9447545);
    CHECK(k_rand_uniform(42, 12345) == k_rand_uniform(42, 12345));
    /* Mean and variance of U[0,1) over 200k draws. */
    double s = 0, s2 = 0;
    int n = 200000;
    for (int i = 0; i < n; i++) {
        double u = k_rand_uniform(7, (uint64_t)i);
        CHECK(u >= 0.0 && u < 1.0);
        s += u; s2 += u * u;
    }
    CHECK_NEAR(s / n, 0.5, 0.005);
    CHECK_NEAR(s2 / n - (s / n) * (s / n), 1.0 / 12, 0.002);
}

TEST(kernels_dropout)
{
    enum { N = 100000 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y), *y2 = malloc(N * sizeof *y);
    float *dy = malloc(N * sizeof *y), *dx = malloc(N * sizeof *y);
    uint8_t *m = malloc(N), *m2 = malloc(N);
    for (int i = 0; i < N; i++) { x[i] = frand() + 2.0f; dy[i] = frand(); }
    const float ps[] = {0.5f, 0.2f, 0.0f, 1.0f};
    for (int pi = 0; pi < 4; pi++) {
        float p = ps[pi];
        k_dropout_fwd(N, p, 1234, 0, x, y, m);
        long kept = 0;
        for (int i = 0; i < N; i++) {
            kept += m[i];
            /* Survivors scaled by 1/(1-p), the rest zero. */
            if (m[i]) CHECK_NEAR(y[i], x[i] / (1.0 - p), 1e-6);
            else CHECK(y[i] == 0.0f);
        }
        double frac = (double)kept / N, sd = sqrt(p * (1 - p) / N);
        CHECKF(fabs(frac - (1 - p)) <= 5 * sd + 1e-12, "p=%g kept %g", p, frac);
        /* Same seed and offset: same mask. Other offset: a different mask, and element
         * i at offset o equals element i+o at offset 0. */
        k_dropout_fwd(N, p, 1234, 0, x, y2, m2);
        CHECK(memcmp(m, m2, N) == 0 && memcmp(y, y2, N * sizeof *y) == 0);
        if (p > 0 && p < 1) {
            k_dropout_fwd(N - 10, p, 1234, 10, x, y2, m2);
            CHECK(memcmp(m2, m + 10, N - 10) == 0);
            CHECK(memcmp(m2, m, N - 10) != 0);
            k_dropout_fwd(N, p, 99, 0, x, y2, m2);
            CHECK(memcmp(m, m2, N) != 0);
        }
        k_dropout_bwd(N, p, m, dy, dx);
        for (int i = 0; i < N; i++)
            CHECK(dx[i] == (m[i] ? (float)(dy[i] * (1.0f / (1.0f - p))) : 0.0f) || fabsf(dx[i] - dy[i] / (1 - p)) < 1e-6);
    }
    /* Thread count does not change the mask. */
    k_dropout_fwd(N, 0.3f, 5, 77, x, y, m);
    k_set_threads(3);
    k_dropout_fwd(N, 0.3f, 5, 77, x, y2, m2);
    k_set_threads(1);
    CHECK(memcmp(m, m2, N) == 0 && memcmp(y, y2, N * sizeof *y) == 0);
    free(x); free(y); free(y2); free(dy); free(dx); free(m); free(m2);
}

TEST(kernels_dropout2d_planes)
{
    enum { NB = 64, C = 20, HW = 64 };
    int np = NB * C;
    float *x = malloc(sizeof(float) * np * HW), *y = malloc(sizeof(float) * np * HW), *dx = malloc(sizeof(float) * np * HW);
    uint8_t m[NB * C], m2[NB * C];
    for (int i = 0; i < np * HW; i++) x[i] = frand();
    k_dropout2d_fwd(NB, C, HW, 0.5f, 31, 1000, x, y, m);
    int kept = 0;
    for (int pl = 0; pl < np; pl++) {
        kept += m[pl];
        CHECK(m[pl] == (k_rand_uniform(31, 1000 + (uint64_t)pl) >= 0.5f));
        for (int i = 0; i < HW; i++) /* whole planes kept (x2) or zeroed */
            CHECK(y[pl * HW + i] == (m[pl] ? x[pl * HW + i] * 2.0f : 0.0f));
    }
    CHECKF(abs(kept - np / 2) < 5 * 18, "kept %d of %d", kept, np);
    k_dropout2d_fwd(NB, C, HW, 0.5f, 31, 1000, x, y, m2);
    CHECK(memcmp(m, m2, sizeof m) == 0);
    k_dropout2d_bwd(NB, C, HW, 0.5f, m, x, dx);
    CHECK(memcmp(dx, y, sizeof(float) * np * HW) == 0);
    free(x); free(y); free(dx);
}

TEST(kernels_log_softmax_nll)
{
    enum { N = 5, K = 10 };
    float x[N * K], lp[N * K], dx[N * K];
    int32_t lab[N] = {3, 0, 9, 5, 1};
    for (int i = 0; i < N * K; i++) x[i] = 3 * frand();
    x[2 * K + 9] = 10.0f; /* row 2 predicts its label */
    /* Huge logits: a naive exp would overflow. */
    x[4 * K + 0] = 1e30f; x[4 * K + 1] = 1e30f - 1e24f; x[3 * K + 2] = -1e30f;
    k_log_softmax_fwd(N, K, x, lp);
    for (int i = 0; i < N * K; i++) CHECK(!isnan(lp[i]));
    CHECK(lp[4 * K + 0] == 0.0f || fabsf(lp[4 * K + 0]) < 1e-6f);
    for (int i = 0; i < 4; i++) {
        double m = -1e300, s = 0;
        for (int j = 0; j < K; j++) m = fmax(m, x[i * K + j]);
        for (int j = 0; j < K; j++) s += exp((double)x[i * K + j] - m);
        double ssum = 0;
        for (int j = 0; j < K; j++) {
            CHECK_NEAR(lp[i * K + j], x[i * K + j] - m - log(s), 1e-5);
            ssum += exp(lp[i * K + j]);
        }
        CHECK_NEAR(ssum, 1.0, 1e-5);
    }
    long correct = -1;
    double loss = k_nll_loss_sum(N, K, lp, lab, &correct);
    double want = 0;
    long wc = 0;
    for (int i = 0; i < N; i++) {
        want -= lp[i * K + lab[i]];
        int am = 0;
        for (int j = 1; j < K; j++) if (lp[i * K + j] > lp[i * K + am]) am = j;
        wc += am == lab[i];
    }
    CHECK_NEAR(loss, want, 1e-6);
    CHECK_EQ(correct, wc);
    CHECK(wc >= 1);
    /* Backward of mean NLL(log_softmax(x)) against central differences (rows 0..3). */
    k_log_softmax_nll_bwd(N, K, lp, lab, 1.0f / N, dx);
    for (int i = 0; i < 4 * K; i++) {
        float s = x[i];
        float yp[N * K], ym[N * K];
        x[i] = s + 1e-2f;
        k_log_softmax_fwd(N, K, x, yp);
        x[i] = s - 1e-2f;
        k_log_softmax_fwd(N, K, x, ym);
        x[i] = s;
        double fd = (k_nll_loss_sum(4, K, yp, lab, NULL) - k_nll_loss_sum(4, K, ym, lab, NULL)) / (2e-2 * N);
        CHECK_NEAR(dx[i], fd, 1e-3);
    }
    /* Ignored labels add nothing and get zero gradient. */
    int32_t ign[2] = {-100, 2};
    CHECK_NEAR(k_nll_loss_sum(2, K, lp, ign, &correct), -lp[K + 2], 1e-6);
    k_log_softmax_nll_bwd(2, K, lp, ign, 1.0f, dx);
    for (int j = 0; j < K; j++) CHECK(dx[j] == 0.0f);
}

TEST(kernels_sgd_hand_computed)
{
    float p, g = 0.5f, v;
    k_sgd_cfg c = {0.1f, 0.9f, 0.0f, 0.0f, 0};
    /* momentum 0.9: v = 0.5, 0.95, 1.355; p = 0.95, 0.855, 0.7195 */
    p = 1.0f;
    k_sgd_step(1, &c, 1, &p, &g, &v); CHECK_NEAR(p, 0.95, 1e-6); CHECK_NEAR(v, 0.5, 1e-7);
    k_sgd_step(1, &c, 0, &p, &g, &v); CHECK_NEAR(p, 0.855, 1e-6); CHECK_NEAR(v, 0.95, 1e-6);
    k_sgd_step(1, &c, 0, &p, &g, &v); CHECK_NEAR(p, 0.7195, 1e-6); CHECK_NEAR(v, 1.355, 1e-6);
    /* Nesterov: p -= lr*(g + m*v): 0.905, 0.7695 */
    c.nesterov = 1; p = 1.0f;
    k_sgd_step(1, &c, 1, &p, &g, &v); CHECK_NEAR(p, 0.905, 1e-6);
    k_sgd_step(1, &c, 0, &p, &g, &v); CHECK_NEAR(p, 0.7695, 1e-6);
    /* Weight decay 0.1, no momentum (v unused, may be NULL): 0.94, 0.8806 */
    k_sgd_cfg d = {0.1f, 0.0f, 0.0f, 0.1f, 0};
    p = 1.0f;
    k_sgd_step(1, &d, 1, &p, &g, NULL); CHECK_NEAR(p, 0.94, 1e-6);
    k_sgd_step(1, &d, 0, &p, &g, NULL); CHECK_NEAR(p, 0.8806, 1e-6);
    /* Dampening 0.5 (ignored on the first step, as in PyTorch): v = 0.5, 0.7 */
    k_sgd_cfg e = {0.1f, 0.9f, 0.5f, 0.0f, 0};
    p = 1.0f;
    k_sgd_step(1, &e, 1, &p, &g, &v); CHECK_NEAR(p, 0.95, 1e-6);
    k_sgd_step(1, &e, 0, &p, &g, &v); CHECK_NEAR(v, 0.7, 1e-6); CHECK_NEAR(p, 0.88, 1e-6);
    /* Weight decay with momentum: g' = 0.5 + 0.1*1 = 0.6 -> v = 0.6, p = 0.94;
     * g' = 0.5 + 0.094 = 0.594, v = 0.54 + 0.594 = 1.134, p = 0.8266 */
    k_sgd_cfg f = {0.1f, 0.9f, 0.0f, 0.1f, 0};
    p = 1.0f;
    k_sgd_step(1, &f, 1, &p, &g, &v); CHECK_NEAR(p, 0.94, 1e-6);
    k_sgd_step(1, &f, 0, &p, &g, &v); CHECK_NEAR(v, 1.134, 1e-6); CHECK_NEAR(p, 0.8266, 1e-6);
    /* Vector lanes and the scalar tail agree with a double-precision reference. */
    enum { M = 37 };
    float pv[M], gv[M], vv[M];
    double pr[M], vr[M];
    for (int i = 0; i < M; i++) { pv[i] = (float)(pr[i] = frand()); gv[i] = frand(); }
    for (int step = 0; step < 3; step++) {
        k_sgd_cfg h = {0.05f, 0.9f, 0.1f, 0.01f, step == 2};
        k_sgd_step(M, &h, step == 0, pv, gv, vv);
        for (int i = 0; i < M; i++) {
            double d = gv[i] + 0.01 * pr[i];
            vr[i] = step == 0 ? d : 0.9 * vr[i] + 0.9 * d;
            pr[i] -= 0.05 * (step == 2 ? d + 0.9 * vr[i] : vr[i]);
            CHECK_NEAR(pv[i], pr[i], 1e-6);
            CHECK_NEAR(vv[i], vr[i], 1e-6);
        }
    }
    /* A long vector through the pool equals the single-thread result. */
    enum { N = 100000 };
    float *p1 = malloc(N * sizeof *p1), *p2 = malloc(N * sizeof *p1), *gg = malloc(N * sizeof *p1);
    float *v1 = malloc(N * sizeof *p1), *v2 = malloc(N * sizeof *p1);
    for (int i = 0; i < N; i++) { p1[i] = p2[i] = frand(); gg[i] = frand(); }
    k_sgd_step(N, &f, 1, p1, gg, v1);
    k_sgd_step(N, &f, 0, p1, gg, v1);
    k_set_threads(2);
    k_sgd_step(N, &f, 1, p2, gg, v2);
    k_sgd_step(N, &f, 0, p2, gg, v2);
    k_set_threads(1);
    CHECK(memcmp(p1, p2, N * sizeof *p1) == 0 && memcmp(v1, v2, N * sizeof *v1) == 0);
    free(p1); free(p2); free(gg); free(v1); free(v2);
}

/* The rounding contract of k.h: each product and sum rounded on its own, so every ISA
 * (vector body and scalar tail alike) and the GPU's kernel give the same bits. */
TEST(kernels_sgd_rounds_each_op_on_every_isa)
{
    enum { N = 1003 };
    static const char *isas[] = {"generic", "avx2", "avx512"};
    static float p0[N], g[N], v0[N], p[N], v[N], pr[N], vr[N];
    for (int i = 0; i < N; i++) {
        p0[i] = 2.0f * k_rand_uniform(71, i) - 1.0f;
        g[i] = 2.0f * k_rand_uniform(72, i) - 1.0f;
        v0[i] = 2.0f * k_rand_uniform(73, i) - 1.0f;
    }
    k_sgd_cfg cfgs[] = {{0.1f, 0.9f, 0.1f, 1e-4f, 1}, {0.01f, 0.5f, 0, 0, 0}, {0.05f, 0, 0, 0.01f, 0}};
    for (int k = 0; k < 3; k++)
        for (int c = 0; c < 3; c++)
            for (int first = 0; first <= 1; first++) {
                if (k_set_isa(isas[k]) != 0) continue;
                const k_sgd_cfg *f = &cfgs[c];
                for (int i = 0; i < N; i++) {
                    volatile float wp = f->weight_decay * p0[i], d = g[i] + wp, step = d;
                    if (f->momentum != 0.0f) {
                        volatile float mv = f->momentum * v0[i], dd = (1.0f - f->dampening) * d;
                        volatile float b = first ? d : mv + dd, mb = f->momentum * b;
                        vr[i] = b;
                        step = f->nesterov ? d + mb : b;
                    }
                    volatile float ls = -f->lr * step;
                    pr[i] = ls + p0[i];
                }
                memcpy(p, p0, sizeof p), memcpy(v, v0, sizeof v);
                k_sgd_step(N, f, first, p, g, v);
                CHECKF(!memcmp(p, pr, sizeof p) && (f->momentum == 0.0f || !memcmp(v, vr, sizeof v)),
                       "isa %s cfg %d first %d: not every op rounded on its own", isas[k], c, first);
            }
    k_set_isa(NULL);
}

TEST(kernels_init_uniform_bounds)
{
    enum { N = 50000 };
    float *w = malloc(N * sizeof *w), *w2 = malloc(N * sizeof *w);
    float bound = 1.0f / sqrtf(25.0f); /* conv1: fan_in 25 */
    k_init_uniform(N, bound, 3, 0, w);
    double s = 0, s2 = 0, mn = 1, mx = -1;
    for (int i = 0; i < N; i++) {
        CHECK(w[i] >= -bound && w[i] <= bound);
        s += w[i]; s2 += (double)w[i] * w[i];
        mn = fmin(mn, w[i]); mx = fmax(mx, w[i]);
    }
    CHECK_NEAR(s / N, 0.0, 0.005);
    CHECK_NEAR(s2 / N, bound * bound / 3.0, 0.002);
    CHECK(mn < -0.99 * bound && mx > 0.99 * bound);
    k_init_uniform(N - 5, bound, 3, 5, w2);
    CHECK(memcmp(w + 5, w2, (N - 5) * sizeof *w) == 0);
    free(w); free(w2);
}

/* Cross-entropy = log_softmax + NLL; its gradient (softmax - onehot) matches central
 * differences of the loss in double precision. */
TEST(kernels_cross_entropy_value_and_gradient)
{
    enum { N = 5, C = 7 };
    float x[N * C], lp[N * C], g[N * C];
    int32_t y[N] = {0, 6, 3, 3, 1};
    for (int i = 0; i < N * C; i++) x[i] = (float)((i * 37 % 23) - 11) * 0.3f;
    long correct = -1;
    double loss = k_cross_entropy_fwd(N, C, x, y, lp, &correct);
    double ref = 0;
    for (int i = 0; i < N; i++) {
        double m = -1e30, s = 0;
        for (int j = 0; j < C; j++) m = fmax(m, x[i * C + j]);
        for (int j = 0; j < C; j++) s += exp(x[i * C + j] - m);
        ref -= x[i * C + y[i]] - m - log(s);
    }
    CHECK_NEAR(loss, ref, 1e-5);
    CHECK(correct >= 0 && correct <= N);
    k_log_softmax_nll_bwd(N, C, lp, y, 1.0f, g);
    for (int k = 0; k < N * C; k += 3) {
        float save = x[k], tmp[N * C];
        x[k] = save + 1e-2f;
        double up = k_cross_entropy_fwd(N, C, x, y, tmp, NULL);
        x[k] = save - 1e-2f;
        double dn = k_cross_entropy_fwd(N, C, x, y, tmp, NULL);
        x[k] = save;
        CHECK_NEAR(g[k], (up - dn) / 2e-2, 2e-3);
    }
}

/* k_gemm_nn packs A itself (per K chunk, groups of row blocks, vector transposes for
 * the contiguous layouts); k_gemm_nn_packed reads a panel packed by k_gemm_pack_a's
 * plain copy. The same FMAs in the same order: the same bits, for every layout, with
 * several row-block groups, K chunks and N blocks, partial ones included, on every ISA. */
TEST(kernels_gemm_nn_packs_as_pack_a)
{
    static const int shapes[][3] = {{200, 300, 600}, {7, 5, 9}, {97, 130, 257}, {25, 33, 15}, {1, 40, 3}};
    static const char *isas[] = {"generic", "avx2", "avx512"};
    enum { MAXA = 200 * 600 + 64, MAXC = 200 * 300 };
    static float a[3 * MAXA], b[600 * 300], bias[200], c0[MAXC], c1[MAXC], ap[(200 + 11) * 600];
    for (long i = 0; i < 3 * MAXA; i++) a[i] = 2.0f * k_rand_uniform(81, (uint64_t)i) - 1.0f;
    for (long i = 0; i < 600 * 300; i++) b[i] = 2.0f * k_rand_uniform(82, (uint64_t)i) - 1.0f;
    for (int i = 0; i < 200; i++) bias[i] = k_rand_uniform(83, (uint64_t)i);
    for (int s = 0; s < 3; s++) {
        if (k_set_isa(isas[s]) != 0) continue;
        for (size_t h = 0; h < sizeof shapes / sizeof shapes[0]; h++) {
            int m = shapes[h][0], n = shapes[h][1], kk = shapes[h][2];
            /* rows contiguous (padded), columns contiguous, both strided */
            long lay[3][2] = {{kk + 3, 1}, {1, m + 5}, {2 * kk + 1, 2}};
            for (int l = 0; l < 3; l++)
                for (int mode = 0; mode < 3; mode++) {
                    const float *bi = mode == 1 ? bias : NULL;
                    int acc = mode == 2;
                    for (int i = 0; i < m * n; i++) c0[i] = c1[i] = k_rand_uniform(84, (uint64_t)i);
                    k_gemm_nn(m, n, kk, a, lay[l][0], lay[l][1], b, n, c0, n, bi, acc);
                    k_gemm_pack_a(m, kk, a, lay[l][0], lay[l][1], ap);
                    k_gemm_nn_packed(m, n, kk, ap, b, n, NULL, c1, n, bi, acc);
                    CHECKF(!memcmp(c0, c1, sizeof(float) * (size_t)(m * n)), "isa %s %dx%dx%d layout %d mode %d",
                           isas[s], m, n, kk, l, mode);
                }
        }
    }
    k_set_isa(NULL);
}
