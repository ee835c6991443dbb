/* Layer-graph kernels (padded max pool, BatchNorm, global average pool, add,
 * embedding, max over time): forwards against naive double loops, backwards against
 * central differences of those loops (BatchNorm as the full composite stats + forward),
 * bitwise agreement across thread counts, and agreement across SIMD paths. */
#include "test/t.h"
#include "test/t_util.h"
#include "kernels/k.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rs = 0x9E3779B97F4A7C15ULL;
static float *rnd(size_t n) { return t_uniform_buf(&rs, n); }
/* Distinct values (no ties, gaps >= 2^-12), shuffled: max pooling's argmax is stable
 * under the small perturbations of the finite differences. */
static float *distinct(size_t n)
{
    float *p = malloc(n * sizeof *p + 64);
    for (size_t i = 0; i < n; i++) p[i] = (float)((double)i * 0x1p-12 - (double)n * 0x1p-13);
    for (size_t i = n; i > 1; i--) {
        rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17;
        size_t j = rs % i;
        float t = p[i - 1]; p[i - 1] = p[j]; p[j] = t;
    }
    return p;
}
static double *dbuf(size_t n) { return calloc(n + 1, sizeof(double)); }
static float *fz(size_t n) { return calloc(n + 16, sizeof(float)); }

/* ---------------------------------------------------------------- max pool, padded */
/* PyTorch's loop: window clipped to the image, scan from its first cell, strict >,
 * a NaN always taken. */
static void naive_pool(int planes, int h, int w, int ks, int st, int pad, const double *x,
                       double *y, int32_t *idx)
{
    int p = (h + 2 * pad - ks) / st + 1, q = (w + 2 * pad - ks) / st + 1;
    for (int pl = 0; pl < planes; pl++)
        for (int oh = 0; oh < p; oh++)
            for (int ow = 0; ow < q; ow++) {
                int h0 = oh * st - pad, w0 = ow * st - pad, h1 = h0 + ks, w1 = w0 + ks;
                if (h0 < 0) h0 = 0;
                if (w0 < 0) w0 = 0;
                if (h1 > h) h1 = h;
                if (w1 > w) w1 = w;
                double m = -INFINITY;
                int32_t a = h0 * w + w0;
                for (int i = h0; i < h1; i++)
                    for (int j = w0; j < w1; j++) {
                        double v = x[(long)pl * h * w + i * w + j];
                        if (v > m || isnan(v)) { m = v; a = i * w + j; }
                    }
                y[((long)pl * p + oh) * q + ow] = m;
                if (idx) idx[((long)pl * p + oh) * q + ow] = a;
            }
}

/* n, c, h, w, ks, st, pad: ResNet's stem (3/2/1) on odd and even sizes, overlapping
 * and non-overlapping windows, pad 0 (the unpadded kernel), a window wider than pad. */
static const int pool_cases[][7] = {
    {2, 3, 9, 9, 3, 2, 1}, {1, 2, 8, 7, 3, 2, 1}, {2, 2, 6, 5, 2, 2, 1}, {1, 3, 5, 5, 3, 1, 1},
    {2, 2, 7, 9, 3, 2, 0}, {1, 2, 11, 10, 5, 2, 2}, {3, 1, 16, 16, 3, 2, 1}, {1, 1, 1, 1, 3, 1, 1},
};

TEST(kernels_maxpool_pad_fwd_bwd)
{
    for (size_t ci = 0; ci < sizeof pool_cases / sizeof pool_cases[0]; ci++) {
        const int *a = pool_cases[ci];
        int n = a[0], c = a[1], h = a[2], w = a[3], ks = a[4], st = a[5], pad = a[6];
        int p = (h + 2 * pad - ks) / st + 1, q = (w + 2 * pad - ks) / st + 1;
        size_t nx = (size_t)n * c * h * w, ny = (size_t)n * c * p * q;
        float *x = distinct(nx), *y = fz(ny), *g = rnd(ny), *dx = fz(nx);
        int32_t *idx = malloc(ny * sizeof *idx + 4), *ridx = malloc(ny * sizeof *ridx + 4);
        double *xd = dbuf(nx), *ref = dbuf(ny);
        for (size_t i = 0; i < nx; i++) xd[i] = x[i];
        naive_pool(n * c, h, w, ks, st, pad, xd, ref, ridx);
        k_maxpool2d_pad_fwd(n, c, h, w, ks, st, pad, x, y, idx);
        char what[64];
        snprintf(what, sizeof what, "pool case %zu fwd", ci);
        CHECK_CLOSE(what, y, ref, ny, 0.0);
        CHECKF(memcmp(idx, ridx, ny * sizeof *idx) == 0, "pool case %zu: idx differs", ci);
        for (size_t i = 0; i < nx; i++) dx[i] = 9.0f; /* backward overwrites */
        k_maxpool2d_pad_bwd(n, c, h, w, ks, st, pad, g, idx, dx);
        /* Central differences of L = sum(g * pool(x)); h below half the value gaps. */
        double *fd = dbuf(nx), hh = 0x1p-14;
        double *yp = dbuf(ny);
        for (size_t i = 0; i < nx; i++) {
            double l[2];
            for (int sgn = 0; sgn < 2; sgn++) {
                xd[i] = x[i] + (sgn ? -hh : hh);
                naive_pool(n * c, h, w, ks, st, pad, xd, yp, NULL);
                l[sgn] = 0;
                for (size_t o = 0; o < ny; o++) l[sgn] += yp[o] * g[o];
            }
            xd[i] = x[i];
            fd[i] = (l[0] - l[1]) / (2 * hh);
        }
        snprintf(what, sizeof what, "pool case %zu dx", ci);
        CHECK_CLOSE(what, dx, fd, nx, 1e-6);
        free(x); free(y); free(g); free(dx); free(idx); free(ridx); free(xd); free(ref); free(fd); free(yp);
    }
}

TEST(kernels_maxpool_pad_ties_nan)
{
    /* All equal: every window's argmax is its first cell inside the image. */
    float x[25], y[9];
    int32_t idx[9];
    for (int i = 0; i < 25; i++) x[i] = 0.5f;
    k_maxpool2d_pad_fwd(1, 1, 5, 5, 3, 2, 1, x, y, idx);
    int32_t want[9] = {0, 1, 3, 5, 6, 8, 15, 16, 18};
    for (int i = 0; i < 9; i++) { CHECK(y[i] == 0.5f); CHECK_EQ(idx[i], want[i]); }
    /* -inf everywhere: -inf out, first cell; a NaN propagates (the last NaN wins). */
    for (int i = 0; i < 25; i++) x[i] = -INFINITY;
    x[12] = NAN; x[18] = NAN;
    k_maxpool2d_pad_fwd(1, 1, 5, 5, 3, 2, 1, x, y, idx);
    CHECK(isinf(y[0]) && y[0] < 0); CHECK_EQ(idx[0], 0);
    CHECK(isinf(y[1]) && y[1] < 0); CHECK_EQ(idx[1], 1);
    CHECK(isnan(y[4])); CHECK_EQ(idx[4], 18);
    CHECK(isnan(y[8])); CHECK_EQ(idx[8], 18);
    /* The same rules on planes wide enough for the vector path: ties, -inf and NaN
     * against the naive loop, two planes of 40x37. */
    enum { PH = 40, PW = 37, PN = 2 * PH * PW, PO = 2 * 20 * 19 };
    float *bx = malloc(sizeof(float) * PN), *by = malloc(sizeof(float) * PO);
    int32_t *bi = malloc(sizeof(int32_t) * PO), *ri = malloc(sizeof(int32_t) * PO);
    double *bd = dbuf(PN), *rd = dbuf(PO);
    for (int i = 0; i < PN; i++) {
        bx[i] = (float)((i * 7) % 3) * 0.25f; /* many ties */
        if (i % 23 == 0) bx[i] = -INFINITY;
        if (i % 97 == 5) bx[i] = NAN;
        bd[i] = bx[i];
    }
    k_maxpool2d_pad_fwd(1, 2, PH, PW, 3, 2, 1, bx, by, bi);
    naive_pool(2, PH, PW, 3, 2, 1, bd, rd, ri);
    for (int i = 0; i < PO; i++) {
        CHECKF(memcmp(&bi[i], &ri[i], sizeof(int32_t)) == 0, "output %d: idx %d want %d", i, bi[i], ri[i]);
        CHECKF(isnan(rd[i]) ? isnan(by[i]) : by[i] == rd[i], "output %d: %g want %g", i, by[i], rd[i]);
    }
    free(bx); free(by); free(bi); free(ri); free(bd); free(rd);
}

/* The 3/2/1 pool's vector planes (k_pool_simd.h: row scans, edges forced, a NaN
 * block redone) against the scalar scan and the scatter backward, bit for bit:
 * every size from 1 to past two vectors of outputs, NaNs, infinities, signed zeros
 * and ties (values and gradients). test_isa_paths runs it on every ISA path. */
static void scatter_bwd(int planes, int h, int w, int p, int q, const float *dy, const int32_t *idx, float *dx)
{
    for (int pl = 0; pl < planes; pl++) {
        float *d = dx + (long)pl * h * w;
        memset(d, 0, sizeof(float) * h * w);
        for (int o = 0; o < p * q; o++) d[idx[(long)pl * p * q + o]] += dy[(long)pl * p * q + o];
    }
}

static float special(unsigned r, int mode)
{
    static const float sp[] = {NAN, -NAN, INFINITY, -INFINITY, -0.0f, 0.0f, 0.5f, -1.0f, 0.5f};
    float f = (float)((double)(r % 16777213u) * 1.1e-6 - 9.0); /* full mantissas: sums depend on order */
    if (mode == 0) return f;
    return r % 3 ? sp[r % 9] : r % 2 ? f : (float)(r % 8) * 0.25f; /* mostly specials and ties */
}

TEST(kernels_maxpool_3s2p1_bits)
{
    static const int sz[] = {1, 2, 3, 4, 5, 8, 9, 16, 17, 31, 34, 37, 64, 67};
    enum { NS = sizeof sz / sizeof sz[0], PLANES = 2 };
    for (int hi = 0; hi < NS; hi++)
        for (int wi = 0; wi < NS; wi++)
            for (int mode = 0; mode < 2; mode++) {
                int h = sz[hi], w = sz[wi], p = (h - 1) / 2 + 1, q = (w - 1) / 2 + 1;
                size_t nx = (size_t)PLANES * h * w, ny = (size_t)PLANES * p * q;
                float *x = malloc(nx * sizeof *x), *y = malloc(ny * sizeof *y), *ry = malloc(ny * sizeof *ry);
                float *dy = malloc(ny * sizeof *dy), *dx = malloc(nx * sizeof *dx), *rdx = malloc(nx * sizeof *rdx);
                int32_t *idx = malloc(ny * sizeof *idx), *ridx = malloc(ny * sizeof *ridx);
                double *xd = dbuf(nx), *yd = dbuf(ny);
                for (size_t i = 0; i < nx; i++) {
                    rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17;
                    x[i] = special((unsigned)(rs >> 20), mode);
                    if (mode == 0) x[i] = (float)((int)x[i] / 4); /* ties: cells the max of several windows */
                    xd[i] = x[i];
                }
                for (size_t i = 0; i < ny; i++) {
                    rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17;
                    dy[i] = special((unsigned)(rs >> 20), mode);
                }
                naive_pool(PLANES, h, w, 3, 2, 1, xd, yd, ridx);
                for (size_t i = 0; i < ny; i++) ry[i] = (float)yd[i]; /* NaN payloads: see below */
                k_maxpool2d_pad_fwd(PLANES, 1, h, w, 3, 2, 1, x, y, idx);
                for (size_t i = 0; i < ny; i++) {
                    /* The winner's own bits: x at its index (NaN payload, signed zero). */
                    int ok = idx[i] == ridx[i] && memcmp(&y[i], &x[(i / (p * q)) * h * w + ridx[i]], sizeof(float)) == 0;
                    CHECKF(ok, "%dx%d mode %d output %zu: y %g idx %d, want %g idx %d", h, w, mode, i, y[i], idx[i],
                           ry[i], ridx[i]);
                    if (!ok) break;
                }
                scatter_bwd(PLANES, h, w, p, q, dy, ridx, rdx);
                for (size_t i = 0; i < nx; i++) dx[i] = 9.0f; /* backward overwrites */
                k_maxpool2d_pad_bwd(PLANES, 1, h, w, 3, 2, 1, dy, ridx, dx);
                CHECKF(memcmp(dx, rdx, nx * sizeof *dx) == 0, "%dx%d mode %d: dx differs from the scatter", h, w, mode);
                free(x); free(y); free(ry); free(dy); free(dx); free(rdx); free(idx); free(ridx); free(xd); free(yd);
            }
}

/* ---------------------------------------------------------------- BatchNorm */
#define BN_EPS 1e-5
/* L = sum(g * BN(x)) with batch statistics (biased variance), all in double. */
static double bn_loss(int n, int c, int hw, const double *x, const double *gm, const double *bt,
                      const float *g, double *y)
{
    double L = 0, cnt = (double)n * hw;
    for (int ch = 0; ch < c; ch++) {
        double s = 0, ss = 0;
        for (int i = 0; i < n; i++)
            for (int t = 0; t < hw; t++) s += x[((long)i * c + ch) * hw + t];
        double mu = s / cnt;
        for (int i = 0; i < n; i++)
            for (int t = 0; t < hw; t++) {
                double d = x[((long)i * c + ch) * hw + t] - mu;
                ss += d * d;
            }
        double is = 1.0 / sqrt(ss / cnt + BN_EPS);
        for (int i = 0; i < n; i++)
            for (int t = 0; t < hw; t++) {
                long k = ((long)i * c + ch) * hw + t;
                double v = (x[k] - mu) * is * gm[ch] + bt[ch];
                if (y) y[k] = v;
                L += v * g[k];
            }
    }
    return L;
}

/* The kernels as a training layer uses them: stats, invstd, forward, then backward. */
static void bn_run(int n, int c, int hw, const float *x, const float *gm, const float *bt,
                   const float *g, float *mean, float *var, float *y, float *dgm, float *dbt,
                   float *dx)
{
    float *is = fz(c);
    k_bn_stats(n, c, hw, x, mean, var);
    for (int ch = 0; ch < c; ch++) is[ch] = (float)(1.0 / sqrt((double)var[ch] + BN_EPS));
    k_bn_fwd(n, c, hw, x, mean, is, gm, bt, y);
    k_bn_bwd_sums(n, c, hw, x, mean, is, g, dgm, dbt);
    k_bn_bwd_dx(n, c, hw, x, mean, is, gm, dgm, dbt, (double)n * hw, g, dx);
    free(is);
}

static const int bn_cases[][3] = {{2, 3, 35}, {3, 4, 49}, {4, 3, 1}, {2, 5, 17}, {1, 2, 64}, {2, 2, 100}};

/* Channel ch's mean and biased variance of x (n x c x hw), in double. */
static void ref_stats(int n, int c, int hw, const float *x, int ch, double *mean, double *var)
{
    double s = 0, ss = 0;
    for (int i = 0; i < n; i++) for (int t = 0; t < hw; t++) s += x[((long)i * c + ch) * hw + t];
    s /= (double)n * hw;
    for (int i = 0; i < n; i++)
        for (int t = 0; t < hw; t++) { double d = x[((long)i * c + ch) * hw + t] - s; ss += d * d; }
    *mean = s, *var = ss / ((double)n * hw);
}

TEST(kernels_bn_fwd_bwd_composite)
{
    for (size_t ci = 0; ci < sizeof bn_cases / sizeof bn_cases[0]; ci++) {
        int n = bn_cases[ci][0], c = bn_cases[ci][1], hw = bn_cases[ci][2];
        size_t nx = (size_t)n * c * hw;
        float *x = rnd(nx), *gm = rnd(c), *bt = rnd(c), *g = rnd(nx);
        for (size_t i = 0; i < nx; i++) x[i] = x[i] * 2.0f + 0.3f * (float)(i % 3);
        float *mean = fz(c), *var = fz(c), *y = fz(nx), *dgm = fz(c), *dbt = fz(c), *dx = fz(nx);
        for (size_t i = 0; i < nx; i++) dx[i] = 7.0f;
        bn_run(n, c, hw, x, gm, bt, g, mean, var, y, dgm, dbt, dx);
        double *xd = dbuf(nx), *gd = dbuf(c), *bd = dbuf(c), *yr = dbuf(nx), *ref = dbuf(nx);
        for (size_t i = 0; i < nx; i++) xd[i] = x[i];
        for (int i = 0; i < c; i++) { gd[i] = gm[i]; bd[i] = bt[i]; }
        bn_loss(n, c, hw, xd, gd, bd, g, yr);
        char what[64];
        snprintf(what, sizeof what, "bn case %zu fwd", ci);
        CHECK_CLOSE(what, y, yr, nx, 2e-5);
        /* mean and biased variance */
        for (int ch = 0; ch < c; ch++) {
            double s, ss;
            ref_stats(n, c, hw, x, ch, &s, &ss);
            CHECK_NEAR(mean[ch], s, 1e-6);
            CHECK_NEAR(var[ch], ss, 1e-6);
        }
        /* Central differences (h small: BN is nonlinear in x). */
        double h = 1e-5;
        for (size_t i = 0; i < nx; i++) {
            xd[i] = x[i] + h;
            double lp = bn_loss(n, c, hw, xd, gd, bd, g, NULL);
            xd[i] = x[i] - h;
            ref[i] = (lp - bn_loss(n, c, hw, xd, gd, bd, g, NULL)) / (2 * h);
            xd[i] = x[i];
        }
        snprintf(what, sizeof what, "bn case %zu dx", ci);
        CHECK_CLOSE(what, dx, ref, nx, 2e-4);
        for (int k = 0; k < 2; k++) {
            double *par = k ? bd : gd;
            for (int ch = 0; ch < c; ch++) {
                double s = par[ch];
                par[ch] = s + h;
                double lp = bn_loss(n, c, hw, xd, gd, bd, g, NULL);
                par[ch] = s - h;
                ref[ch] = (lp - bn_loss(n, c, hw, xd, gd, bd, g, NULL)) / (2 * h);
                par[ch] = s;
            }
            snprintf(what, sizeof what, "bn case %zu %s", ci, k ? "dbeta" : "dgamma");
            CHECK_CLOSE(what, k ? dbt : dgm, ref, c, 1e-5);
        }
        free(x); free(gm); free(bt); free(g); free(mean); free(var); free(y); free(dgm); free(dbt);
        free(dx); free(xd); free(gd); free(bd); free(yr); free(ref);
    }
}

TEST(kernels_bn_null_affine_and_offset_stats)
{
    /* gamma/beta NULL = 1/0; stats of data far from zero keep their variance. */
    int n = 3, c = 2, hw = 40;
    size_t nx = (size_t)n * c * hw;
    float *x = rnd(nx), *y = fz(nx), *y1 = fz(nx), one[2] = {1, 1}, zero[2] = {0, 0};
    for (size_t i = 0; i < nx; i++) x[i] = 1000.0f + x[i] * 0.01f;
    float mean[2], var[2], is[2];
    k_bn_stats(n, c, hw, x, mean, var);
    for (int ch = 0; ch < c; ch++) {
        double s, ss;
        ref_stats(n, c, hw, x, ch, &s, &ss);
        CHECKF(fabs(var[ch] - ss) <= 1e-4 * ss, "var %g want %g", var[ch], ss);
        is[ch] = (float)(1.0 / sqrt(var[ch] + BN_EPS));
    }
    k_bn_fwd(n, c, hw, x, mean, is, NULL, NULL, y);
    k_bn_fwd(n, c, hw, x, mean, is, one, zero, y1);
    CHECK(memcmp(y, y1, nx * sizeof(float)) == 0);
    free(x); free(y); free(y1);
}

/* ---------------------------------------------------------------- small ops */
TEST(kernels_global_avgpool_add)
{
    int n = 3, c = 5, hw = 49;
    size_t nx = (size_t)n * c * hw;
    float *x = rnd(nx), *y = fz(n * c), *g = rnd(n * c), *dx = fz(nx);
    double *ref = dbuf(nx);
    k_global_avgpool_fwd(n, c, hw, x, y);
    for (int pl = 0; pl < n * c; pl++) {
        double s = 0;
        for (int t = 0; t < hw; t++) s += x[pl * hw + t];
        ref[pl] = s / hw;
    }
    CHECK_CLOSE("avgpool fwd", y, ref, n * c, 1e-6);
    k_global_avgpool_bwd(n, c, hw, g, dx);
    for (size_t i = 0; i < nx; i++) ref[i] = (double)g[i / hw] / hw; /* L = sum g*y is linear */
    CHECK_CLOSE("avgpool bwd", dx, ref, nx, 1e-6);
    /* add, also in place (y aliasing a or b), on an odd length */
    float *a = rnd(1001), *b = rnd(1001), *s = fz(1001);
    k_add(1001, a, b, s);
    for (int i = 0; i < 1001; i++) CHECK(s[i] == a[i] + b[i]);
    k_add(1001, a, b, a);
    CHECK(memcmp(a, s, 1001 * sizeof(float)) == 0);
    k_add(1001, b, s, s);
    for (int i = 0; i < 1001; i++) CHECK(s[i] == b[i] + a[i]);
    free(x); free(y); free(g); free(dx); free(ref); free(a); free(b); free(s);
}

TEST(kernels_embedding_fwd_bwd)
{
    int n = 3, len = 37, dim = 21, vocab = 50;
    int32_t *ids = malloc(sizeof(int32_t) * n * len);
    for (int i = 0; i < n * len; i++) ids[i] = (i * 7 + i / 5) % 13 + (i % 3) * 11; /* repeats */
    float *tab = rnd((size_t)vocab * dim), *y = fz((size_t)n * dim * len), *g = rnd((size_t)n * dim * len);
    float *dt = fz((size_t)vocab * dim);
    double *ref = dbuf((size_t)vocab * dim + (size_t)n * dim * len);
    k_embedding_fwd(n, len, dim, ids, tab, y);
    for (int i = 0; i < n; i++)
        for (int d = 0; d < dim; d++)
            for (int t = 0; t < len; t++) ref[((long)i * dim + d) * len + t] = tab[ids[i * len + t] * dim + d];
    CHECK_CLOSE("embedding fwd", y, ref, (size_t)n * dim * len, 0.0);
    for (int i = 0; i < vocab * dim; i++) dt[i] = 3.0f; /* zeroed by the kernel */
    k_embedding_bwd(n, len, dim, vocab, ids, g, dt);
    /* L = sum g*y is linear in the table: its gradient is this scatter-add. */
    memset(ref, 0, sizeof(double) * vocab * dim);
    for (int i = 0; i < n; i++)
        for (int t = 0; t < len; t++)
            for (int d = 0; d < dim; d++) ref[ids[i * len + t] * dim + d] += g[((long)i * dim + d) * len + t];
    CHECK_CLOSE("embedding bwd", dt, ref, (size_t)vocab * dim, 1e-6);
    /* onto a zero table: the same bits; onto itself: twice the gradient */
    float *dz = fz((size_t)vocab * dim);
    k_embedding_bwd_add(n, len, dim, vocab, ids, g, dz);
    CHECK(!memcmp(dz, dt, sizeof(float) * vocab * dim));
    k_embedding_bwd_add(n, len, dim, vocab, ids, g, dz);
    for (int i = 0; i < vocab * dim; i++) ref[i] *= 2;
    CHECK_CLOSE("embedding bwd onto a sum", dz, ref, (size_t)vocab * dim, 1e-6);
    free(dz);
    free(ids); free(tab); free(y); free(g); free(dt); free(ref);
}

TEST(kernels_max_time_fwd_bwd)
{
    int n = 2, c = 5, len = 13;
    size_t nx = (size_t)n * c * len;
    float *x = distinct(nx), *y = fz(n * c), *g = rnd(n * c), *dx = fz(nx);
    int32_t idx[10];
    x[3 * len + 2] = x[3 * len + 9] = 10.0f; /* tie: the first wins */
    x[4 * len + 5] = NAN;                    /* NaN propagates */
    k_max_time_fwd(n, c, len, x, y, idx);
    for (int r = 0; r < n * c; r++) {
        if (r == 4) { CHECK(isnan(y[r])); CHECK_EQ(idx[r], 5); continue; }
        int a = 0;
        for (int t = 1; t < len; t++) if (x[r * len + t] > x[r * len + a]) a = t;
        CHECK_EQ(idx[r], a);
        CHECK(y[r] == x[r * len + a]);
    }
    CHECK_EQ(idx[3], 2);
    for (size_t i = 0; i < nx; i++) dx[i] = 5.0f;
    k_max_time_bwd(n, c, len, g, idx, dx);
    for (int r = 0; r < n * c; r++)
        for (int t = 0; t < len; t++) CHECK(dx[r * len + t] == (t == idx[r] ? g[r] : 0.0f));
    free(x); free(y); free(g); free(dx);
}

/* ---------------------------------------------------------------- threads and ISAs */
/* Every op on shapes above the parallel threshold; outputs concatenated. */
enum { G_NB = 4, G_NC = 16, G_HW = 1156, G_NX = G_NB * G_NC * G_HW }; /* 34x34 planes */
enum { E_N = 8, E_LEN = 64, E_DIM = 130, E_VOC = 300 };
#define G_OUT ((size_t)G_NX * 5 + 17 * 17 * G_NB * G_NC * 2 + G_NB * G_NC * 2 + G_NC * 4 + \
               (size_t)E_N * E_LEN * E_DIM + E_VOC * E_DIM + G_NB * G_NC * 34 + G_NX)

static void graph_all(const float *x, const float *g, const int32_t *ids, const float *tab, float *o)
{
    float *gm = o, *bt = gm + G_NC, *mean = bt + G_NC, *var = mean + G_NC;
    for (int ch = 0; ch < G_NC; ch++) { gm[ch] = 1.0f + 0.1f * ch; bt[ch] = 0.05f * ch; }
    float *y = var + G_NC, *dx = y + G_NX, *dgm = dx + G_NX, *dbt = dgm + G_NB * G_NC;
    bn_run(G_NB, G_NC, G_HW, x, gm, bt, g, mean, var, y, dgm, dbt, dx);
    float *py = dbt + G_NB * G_NC, *pdx = py + 17 * 17 * G_NB * G_NC;
    int32_t *idx = malloc(sizeof(int32_t) * 17 * 17 * G_NB * G_NC);
    k_maxpool2d_pad_fwd(G_NB, G_NC, 34, 34, 3, 2, 1, x, py, idx);
    k_maxpool2d_pad_bwd(G_NB, G_NC, 34, 34, 3, 2, 1, g, idx, pdx);
    float *ay = pdx + G_NX, *ady = ay + 17 * 17 * G_NB * G_NC, *sum = ady + G_NX;
    k_global_avgpool_fwd(G_NB, G_NC, G_HW, x, ay);
    k_global_avgpool_bwd(G_NB, G_NC, G_HW, g, ady);
    k_add(G_NX, x, g, sum);
    float *ey = sum + G_NX, *et = ey + (size_t)E_N * E_LEN * E_DIM, *my = et + E_VOC * E_DIM;
    k_embedding_fwd(E_N, E_LEN, E_DIM, ids, tab, ey);
    k_embedding_bwd(E_N, E_LEN, E_DIM, E_VOC, ids, g, et);
    /* max over time on 34-long rows of x (treated as [n*c*34, 34]) */
    k_max_time_fwd(G_NB * G_NC, 34, 34, x, my, idx);
    k_max_time_bwd(G_NB * G_NC, 34, 34, g, idx, my + G_NB * G_NC * 34);
    free(idx);
}

static void graph_inputs(float **x, float **g, int32_t **ids, float **tab)
{
    *x = rnd(G_NX);
    *g = rnd(G_NX);
    *tab = rnd((size_t)E_VOC * E_DIM);
    *ids = malloc(sizeof(int32_t) * E_N * E_LEN);
    for (int i = 0; i < E_N * E_LEN; i++) (*ids)[i] = (i * 37) % E_VOC;
}

TEST(kernels_graph_threads_bitwise)
{
    float *x, *g, *tab;
    int32_t *ids;
    graph_inputs(&x, &g, &ids, &tab);
    float *ref = fz(G_OUT), *o = fz(G_OUT);
    k_set_threads(1);
    graph_all(x, g, ids, tab, ref);
    for (int t = 2; t <= 3; t++) {
        k_set_threads(t);
        memset(o, 0, G_OUT * sizeof(float));
        graph_all(x, g, ids, tab, o);
        CHECKF(memcmp(o, ref, G_OUT * sizeof(float)) == 0, "%d threads differ from 1", t);
    }
    k_set_threads(1);
    free(x); free(g); free(tab); free(ids); free(ref); free(o);
}

TEST(kernels_graph_isa_paths_agree)
{
    const char *isas[] = {"generic", "avx2", "avx512"};
    float *x, *g, *tab;
    int32_t *ids;
    graph_inputs(&x, &g, &ids, &tab);
    float *ref = fz(G_OUT), *o = fz(G_OUT);
    double *rd = dbuf(G_OUT);
    CHECK(k_set_isa("generic") == 0);
    graph_all(x, g, ids, tab, ref);
    for (size_t i = 0; i < G_OUT; i++) rd[i] = ref[i];
    for (int i = 1; i < 3; i++) {
        if (k_set_isa(isas[i]) != 0) continue; /* not on this CPU */
        graph_all(x, g, ids, tab, o);
        CHECK_CLOSE(isas[i], o, rd, G_OUT, 2e-5);
    }
    k_set_isa(NULL);
    free(x); free(g); free(tab); free(ids); free(ref); free(o); free(rd);
}
