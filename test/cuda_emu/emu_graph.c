/* The layer-graph ops of kernels/cuda (k_cuda_bn.cu, k_cuda_graph_ops.cu) built with
 * K_CUDA_EMULATE: their per-element functors and per-channel reduction trees run as
 * host loops, against the naive references of test/t_ref_graph.h. Checks the index
 * maths (padding, windows, channels-first layouts, leaders of embedding rows) and the
 * formulas; the launch configurations, shared memory and __syncthreads_or are only
 * checked on a GPU (test/gpu/test_gpu_graph_ops.c). */
#include "kernels/cuda/k_cuda.h"
#include "test/t_ref_graph.h"
#include <stdio.h>
#include <stdlib.h>

int emu_graph_ops(int *cases);

static float *rnd(size_t n, unsigned seed)
{
    float *p = malloc(n * sizeof(float) + 4);
    for (size_t i = 0; i < n; i++) p[i] = 2.0f * k_rand_uniform(seed, i) - 1.0f;
    return p;
}

static double relerr(const float *a, const float *b, size_t n)
{
    double m = 0, e = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= e)) e = d; /* NaN counts as worst */
        if (fabs(b[i]) > m) m = fabs(b[i]);
    }
    return e / (m > 0 ? m : 1);
}

static int same(const void *a, const void *b, size_t bytes) { return memcmp(a, b, bytes) == 0; }

static int pool_case(int n, int c, int h, int w, int ks, int st, int pad)
{
    int p = (h + 2 * pad - ks) / st + 1, q = (w + 2 * pad - ks) / st + 1;
    size_t nx = (size_t)n * c * h * w, ny = (size_t)n * c * p * q;
    float *x = rnd(nx, 11), *dy = rnd(ny, 12), *y = malloc(ny * 4), *y2 = malloc(ny * 4);
    float *dx = malloc(nx * 4), *dx2 = malloc(nx * 4);
    int32_t *idx = malloc(ny * 4), *idx2 = malloc(ny * 4);
    if (nx > 1) x[1] = x[0];    /* a tie */
    if (nx > 7) x[7] = NAN;     /* a NaN wins its windows */
    if (nx > 9) x[9] = -INFINITY;
    ref_maxpool_pad_fwd(n, c, h, w, ks, st, pad, x, y, idx);
    ref_maxpool_pad_bwd(n, c, h, w, ks, st, pad, dy, idx, dx);
    int bad = k_cuda_maxpool2d_pad_fwd(n, c, h, w, ks, st, pad, x, y2, idx2, NULL) ||
              k_cuda_maxpool2d_pad_bwd(n, c, h, w, ks, st, pad, dy, idx, dx2, NULL);
    bad |= !same(y, y2, ny * 4) || !same(idx, idx2, ny * 4) || !same(dx, dx2, nx * 4);
    if (bad) printf("FAIL maxpool n=%d c=%d %dx%d ks=%d st=%d pad=%d\n", n, c, h, w, ks, st, pad);
    free(x); free(dy); free(y); free(y2); free(dx); free(dx2); free(idx); free(idx2);
    return bad;
}

static int bn_case(int n, int c, int hw, float shift)
{
    size_t nx = (size_t)n * c * hw;
    float *x = rnd(nx, 21), *dy = rnd(nx, 22), *g = rnd(c, 23), *b = rnd(c, 24);
    for (size_t i = 0; i < nx; i++) x[i] = x[i] * 3.0f + shift; /* an offset: the variance must not cancel */
    float *mean = malloc(c * 4), *var = malloc(c * 4), *mean2 = malloc(c * 4), *var2 = malloc(c * 4);
    float *is = malloc(c * 4), *y = malloc(nx * 4), *y2 = malloc(nx * 4), *dx = malloc(nx * 4), *dx2 = malloc(nx * 4);
    float *dg = malloc(c * 4), *db = malloc(c * 4), *dg2 = malloc(c * 4), *db2 = malloc(c * 4);
    float *rm = rnd(c, 25), *rv = malloc(c * 4), *rm2 = malloc(c * 4), *rv2 = malloc(c * 4), *is2 = malloc(c * 4);
    int bad = 0;
    ref_bn_stats(n, c, hw, x, mean, var);
    bad |= k_cuda_bn_stats(n, c, hw, x, mean2, var2, NULL);
    double e[8] = {relerr(mean2, mean, c), relerr(var2, var, c)};
    for (int i = 0; i < c; i++) is[i] = 1.0f / sqrtf(var[i] + 1e-5f);
    /* Then the rest from the reference statistics, so each step is checked alone. */
    ref_bn_fwd(n, c, hw, x, mean, is, g, b, y);
    bad |= k_cuda_bn_fwd(n, c, hw, x, mean, is, g, b, y2, NULL);
    e[2] = relerr(y2, y, nx);
    ref_bn_bwd_sums(n, c, hw, x, mean, is, dy, dg, db);
    bad |= k_cuda_bn_bwd_sums(n, c, hw, x, mean, is, dy, dg2, db2, NULL);
    e[3] = relerr(dg2, dg, c);
    e[4] = relerr(db2, db, c);
    double m = (double)n * hw;
    ref_bn_bwd_dx(n, c, hw, x, mean, is, g, dg, db, m, dy, dx);
    bad |= k_cuda_bn_bwd_dx(n, c, hw, x, mean, is, g, dg, db, m, dy, dx2, NULL);
    e[5] = relerr(dx2, dx, nx);
    /* gamma/beta NULL = 1/0 */
    ref_bn_fwd(n, c, hw, x, mean, is, NULL, NULL, y);
    bad |= k_cuda_bn_fwd(n, c, hw, x, mean, is, NULL, NULL, y2, NULL);
    e[6] = relerr(y2, y, nx);
    /* finish: invstd and the running statistics (momentum 0.1, unbiased variance) */
    for (int i = 0; i < c; i++) { rv[i] = 1.0f + rm[i] * rm[i]; rm2[i] = rm[i]; rv2[i] = rv[i]; }
    bad |= k_cuda_bn_finish(c, mean, var, 1e-5f, 0.1f, m, is2, rm2, rv2, NULL);
    double ef = 0;
    for (int i = 0; i < c; i++) {
        double erm = 0.9 * rm[i] + 0.1 * mean[i], erv = 0.9 * rv[i] + 0.1 * var[i] * m / (m - 1);
        ef = fmax(ef, fmax(fabs(is2[i] - is[i]) / is[i], fmax(fabs(rm2[i] - erm) / fmax(1, fabs(erm)), fabs(rv2[i] - erv) / erv)));
    }
    e[7] = ef;
    static const double tol[8] = {1e-6, 1e-6, 2e-6, 1e-6, 1e-6, 1e-5, 2e-6, 1e-6};
    for (int i = 0; i < 8; i++) bad |= !(e[i] <= tol[i]);
    if (bad)
        printf("FAIL bn n=%d c=%d hw=%d: rel err mean %.2g var %.2g y %.2g dgamma %.2g dbeta %.2g dx %.2g y(no affine) "
               "%.2g finish %.2g\n", n, c, hw, e[0], e[1], e[2], e[3], e[4], e[5], e[6], e[7]);
    free(x); free(dy); free(g); free(b); free(mean); free(var); free(mean2); free(var2); free(is); free(y);
    free(y2); free(dx); free(dx2); free(dg); free(db); free(dg2); free(db2); free(rm); free(rv); free(rm2);
    free(rv2); free(is2);
    return bad;
}

static int avg_add_case(int n, int c, int hw)
{
    size_t nx = (size_t)n * c * hw, ny = (size_t)n * c;
    float *x = rnd(nx, 31), *x2 = rnd(nx, 32), *dy = rnd(ny, 33);
    float *y = malloc(ny * 4), *y2 = malloc(ny * 4), *dx = malloc(nx * 4), *dx2 = malloc(nx * 4);
    ref_global_avgpool_fwd(n, c, hw, x, y);
    ref_global_avgpool_bwd(n, c, hw, dy, dx);
    int bad = k_cuda_global_avgpool_fwd(n, c, hw, x, y2, NULL) || k_cuda_global_avgpool_bwd(n, c, hw, dy, dx2, NULL);
    double ey = relerr(y2, y, ny), ex = relerr(dx2, dx, nx);
    bad |= !(ey < 1e-6 && ex < 1e-6);
    /* add, in place on a (y may alias a) */
    for (size_t i = 0; i < nx; i++) dx[i] = x[i] + x2[i];
    bad |= k_cuda_add(nx, x, x2, x, NULL) || !same(x, dx, nx * 4);
    if (bad) printf("FAIL avgpool/add n=%d c=%d hw=%d: rel err y %.2g dx %.2g\n", n, c, hw, ey, ex);
    free(x); free(x2); free(dy); free(y); free(y2); free(dx); free(dx2);
    return bad;
}

static int emb_case(int n, int len, int dim, int vocab)
{
    size_t ntok = (size_t)n * len, ny = ntok * dim, nt = (size_t)vocab * dim;
    int32_t *ids = malloc(ntok * 4);
    for (size_t i = 0; i < ntok; i++) ids[i] = (int32_t)(k_rand_uniform(41, i) * vocab);
    float *table = rnd(nt, 42), *dy = rnd(ny, 43), *y = malloc(ny * 4), *y2 = malloc(ny * 4);
    float *dt = malloc(nt * 4), *dt2 = malloc(nt * 4);
    for (size_t i = 0; i < nt; i++) dt2[i] = 99.0f; /* must be zeroed */
    ref_embedding_fwd(n, len, dim, ids, table, y);
    ref_embedding_bwd(n, len, dim, vocab, ids, dy, dt);
    int bad = k_cuda_embedding_fwd(n, len, dim, ids, table, y2, NULL) ||
              k_cuda_embedding_bwd(n, len, dim, vocab, ids, dy, dt2, NULL);
    bad |= !same(y, y2, ny * 4) || !same(dt, dt2, nt * 4);
    if (bad) printf("FAIL embedding n=%d len=%d dim=%d vocab=%d\n", n, len, dim, vocab);
    free(ids); free(table); free(dy); free(y); free(y2); free(dt); free(dt2);
    return bad;
}

static int maxtime_case(int n, int c, int len)
{
    size_t nx = (size_t)n * c * len, ny = (size_t)n * c;
    float *x = rnd(nx, 51), *dy = rnd(ny, 52), *y = malloc(ny * 4), *y2 = malloc(ny * 4);
    float *dx = malloc(nx * 4), *dx2 = malloc(nx * 4);
    int32_t *idx = malloc(ny * 4), *idx2 = malloc(ny * 4);
    if (len > 2) { x[2] = x[1] = 5.0f; } /* tie: the first wins */
    if (nx > 2 * (size_t)len) x[len + 1] = NAN;
    ref_max_time_fwd(n, c, len, x, y, idx);
    ref_max_time_bwd(n, c, len, dy, idx, dx);
    int bad = k_cuda_max_time_fwd(n, c, len, x, y2, idx2, NULL) || k_cuda_max_time_bwd(n, c, len, dy, idx, dx2, NULL);
    bad |= !same(y, y2, ny * 4) || !same(idx, idx2, ny * 4) || !same(dx, dx2, nx * 4);
    if (bad) printf("FAIL max_time n=%d c=%d len=%d\n", n, c, len);
    free(x); free(dy); free(y); free(y2); free(dx); free(dx2); free(idx); free(idx2);
    return bad;
}

int emu_graph_ops(int *cases)
{
    int bad = 0;
    /* ResNet's stem pool (3x3 s2 p1, 112 -> 56), LeNet's 2x2, overlapping, odd sizes. */
    static const int pools[][7] = {{2, 8, 112, 112, 3, 2, 1}, {2, 3, 24, 24, 2, 2, 0}, {3, 5, 13, 11, 3, 2, 1},
                                   {2, 4, 9, 9, 3, 1, 1},     {1, 2, 7, 6, 5, 3, 2},   {1, 1, 1, 1, 1, 1, 0},
                                   {2, 3, 8, 8, 4, 4, 2},     {1, 2, 5, 5, 2, 1, 1}};
    for (size_t i = 0; i < sizeof pools / sizeof pools[0]; i++, (*cases)++) {
        const int *v = pools[i];
        bad += pool_case(v[0], v[1], v[2], v[3], v[4], v[5], v[6]);
    }
    /* ResNet-18/20 BN shapes (small batch), odd hw, one value per plane, a big offset. */
    static const int bns[][3] = {{4, 64, 56 * 56}, {4, 512, 49}, {8, 16, 28 * 28}, {3, 7, 5}, {300, 3, 1}, {1, 5, 1000}};
    for (size_t i = 0; i < sizeof bns / sizeof bns[0]; i++, (*cases)++)
        bad += bn_case(bns[i][0], bns[i][1], bns[i][2], i == 2 ? 1000.0f : 0.5f);
    static const int avgs[][3] = {{8, 512, 49}, {16, 64, 64}, {3, 5, 1}, {2, 3, 300}};
    for (size_t i = 0; i < sizeof avgs / sizeof avgs[0]; i++, (*cases)++) bad += avg_add_case(avgs[i][0], avgs[i][1], avgs[i][2]);
    /* TextCNN (shorter batch), many repeats of few rows, one token. */
    static const int embs[][4] = {{4, 64, 128, 20000}, {8, 16, 12, 50}, {3, 7, 300, 5}, {1, 1, 3, 2}};
    for (size_t i = 0; i < sizeof embs / sizeof embs[0]; i++, (*cases)++)
        bad += emb_case(embs[i][0], embs[i][1], embs[i][2], embs[i][3]);
    /* TextCNN's conv outputs (seq 64 minus widths 3/4/5 + 1), odd, length 1. */
    static const int mts[][3] = {{64, 100, 62}, {64, 100, 60}, {3, 5, 7}, {2, 3, 1}};
    for (size_t i = 0; i < sizeof mts / sizeof mts[0]; i++, (*cases)++) bad += maxtime_case(mts[i][0], mts[i][1], mts[i][2]);
    return bad;
}
