/* The emulated layer-graph CUDA kernels against the real CPU kernels (kernels/cpu),
 * not only the naive references of emu_graph.c: on ResNet-18/20 and TextCNN shapes,
 * the pairs the graph executor swaps when a model moves to the GPU. Bit for bit where
 * k_cuda.h promises it (pooling, add, embedding, max over time, concat copies), to
 * rounding elsewhere (batchnorm, global average pool, log_softmax backward). */
#include "kernels/cuda/k_cuda.h"
#include "test/cuda_emu/emu.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int emu_cpu_kernels(int *cases);

static float *rnd(size_t n, unsigned seed, float scale, float shift)
{
    float *p = malloc(n * sizeof(float) + 4);
    for (size_t i = 0; i < n; i++) p[i] = scale * (2.0f * k_rand_uniform(seed, i) - 1.0f) + shift;
    return p;
}

#define SAME(a, b, n) (memcmp((a), (b), (n) * 4) == 0)

static int pool(int n, int c, int h, int w, int ks, int st, int pad)
{
    int p = (h + 2 * pad - ks) / st + 1, q = (w + 2 * pad - ks) / st + 1;
    size_t nx = (size_t)n * c * h * w, ny = (size_t)n * c * p * q;
    float *x = rnd(nx, 1, 1, 0), *dy = rnd(ny, 2, 1, 0), *y = malloc(ny * 4), *y2 = malloc(ny * 4);
    float *dx = malloc(nx * 4), *dx2 = malloc(nx * 4);
    int32_t *i1 = malloc(ny * 4), *i2 = malloc(ny * 4);
    k_maxpool2d_pad_fwd(n, c, h, w, ks, st, pad, x, y, i1);
    k_maxpool2d_pad_bwd(n, c, h, w, ks, st, pad, dy, i1, dx);
    int bad = k_cuda_maxpool2d_pad_fwd(n, c, h, w, ks, st, pad, x, y2, i2, NULL) ||
              k_cuda_maxpool2d_pad_bwd(n, c, h, w, ks, st, pad, dy, i2, dx2, NULL);
    bad |= !SAME(y, y2, ny) || !SAME(i1, i2, ny) || !SAME(dx, dx2, nx);
    if (bad) printf("FAIL cpu-vs-emu maxpool n=%d c=%d %dx%d ks=%d st=%d pad=%d\n", n, c, h, w, ks, st, pad);
    free(x); free(dy); free(y); free(y2); free(dx); free(dx2); free(i1); free(i2);
    return bad;
}

/* The whole training-mode BN op both ways: statistics, the running-statistics update
 * (the CPU op's loop in nn/ops/bn.c against k_cuda_bn_finish), forward, backward. */
static int bn(int n, int c, int hw)
{
    size_t nx = (size_t)n * c * hw;
    float *x = rnd(nx, 3, 2, 0.7f), *dy = rnd(nx, 4, 1, 0), *g = rnd(c, 5, 1, 1), *b = rnd(c, 6, 1, 0);
    float *m1 = malloc(c * 4), *v1 = malloc(c * 4), *m2 = malloc(c * 4), *v2 = malloc(c * 4), *is2 = malloc(c * 4);
    float *rm1 = rnd(c, 7, 1, 0), *rv1 = rnd(c, 8, 0.5f, 1), *rm2 = malloc(c * 4), *rv2 = malloc(c * 4);
    float *y1 = malloc(nx * 4), *y2 = malloc(nx * 4), *dx1 = malloc(nx * 4), *dx2 = malloc(nx * 4);
    float *dg1 = malloc(c * 4), *db1 = malloc(c * 4), *dg2 = malloc(c * 4), *db2 = malloc(c * 4);
    memcpy(rm2, rm1, c * 4);
    memcpy(rv2, rv1, c * 4);
    double cnt = (double)n * hw, unb = cnt / (cnt - 1);
    k_bn_stats(n, c, hw, x, m1, v1);
    for (int k = 0; k < c; k++) { /* nn/ops/bn.c */
        rm1[k] = 0.9f * rm1[k] + 0.1f * m1[k];
        rv1[k] = (float)(0.9f * rv1[k] + 0.1f * v1[k] * unb);
        v1[k] = 1.0f / sqrtf(v1[k] + 1e-5f);
    }
    k_bn_fwd(n, c, hw, x, m1, v1, g, b, y1);
    k_bn_bwd_sums(n, c, hw, x, m1, v1, dy, dg1, db1);
    k_bn_bwd_dx(n, c, hw, x, m1, v1, g, dg1, db1, cnt, dy, dx1);
    int bad = k_cuda_bn_stats(n, c, hw, x, m2, v2, NULL) ||
              k_cuda_bn_finish(c, m2, v2, 1e-5f, 0.1f, cnt, is2, rm2, rv2, NULL) ||
              k_cuda_bn_fwd(n, c, hw, x, m2, is2, g, b, y2, NULL) ||
              k_cuda_bn_bwd_sums(n, c, hw, x, m2, is2, dy, dg2, db2, NULL) ||
              k_cuda_bn_bwd_dx(n, c, hw, x, m2, is2, g, dg2, db2, cnt, dy, dx2, NULL);
    double e[8] = {emu_relerr(m2, m1, c), emu_relerr(is2, v1, c), emu_relerr(rm2, rm1, c), emu_relerr(rv2, rv1, c),
                   emu_relerr(y2, y1, nx), emu_relerr(dg2, dg1, c), emu_relerr(db2, db1, c), emu_relerr(dx2, dx1, nx)};
    for (int i = 0; i < 8; i++) bad |= !(e[i] < 1e-5);
    if (bad)
        printf("FAIL cpu-vs-emu bn n=%d c=%d hw=%d: mean %.2g invstd %.2g rmean %.2g rvar %.2g y %.2g dgamma %.2g "
               "dbeta %.2g dx %.2g\n", n, c, hw, e[0], e[1], e[2], e[3], e[4], e[5], e[6], e[7]);
    free(x); free(dy); free(g); free(b); free(m1); free(v1); free(m2); free(v2); free(is2); free(rm1); free(rv1);
    free(rm2); free(rv2); free(y1); free(y2); free(dx1); free(dx2); free(dg1); free(db1); free(dg2); free(db2);
    return bad;
}

static int avg_add(int n, int c, int hw)
{
    size_t nx = (size_t)n * c * hw, ny = (size_t)n * c;
    float *x = rnd(nx, 9, 1, 0), *x2 = rnd(nx, 10, 1, 0), *dy = rnd(ny, 11, 1, 0);
    float *y1 = malloc(ny * 4), *y2 = malloc(ny * 4), *d1 = malloc(nx * 4), *d2 = malloc(nx * 4);
    k_global_avgpool_fwd(n, c, hw, x, y1);
    k_global_avgpool_bwd(n, c, hw, dy, d1);
    int bad = k_cuda_global_avgpool_fwd(n, c, hw, x, y2, NULL) || k_cuda_global_avgpool_bwd(n, c, hw, dy, d2, NULL);
    double ey = emu_relerr(y2, y1, ny), ed = emu_relerr(d2, d1, nx);
    bad |= !(ey < 1e-6 && ed < 1e-6);
    k_add(nx, x, x2, d1);
    bad |= k_cuda_add(nx, x, x2, d2, NULL) || !SAME(d1, d2, nx);
    if (bad) printf("FAIL cpu-vs-emu avgpool/add n=%d c=%d hw=%d: y %.2g dx %.2g\n", n, c, hw, ey, ed);
    free(x); free(x2); free(dy); free(y1); free(y2); free(d1); free(d2);
    return bad;
}

/* TextCNN: embedding, then max over time of a conv output, and the concat copies. */
static int text(int n, int len, int dim, int vocab, int filters)
{
    size_t ntok = (size_t)n * len, ny = ntok * dim, nt = (size_t)vocab * dim;
    int32_t *ids = malloc(ntok * 4);
    for (size_t i = 0; i < ntok; i++) ids[i] = (int32_t)(k_rand_uniform(12, i) * vocab);
    float *tab = rnd(nt, 13, 1, 0), *dy = rnd(ny, 14, 1, 0), *y1 = malloc(ny * 4), *y2 = malloc(ny * 4);
    float *dt1 = malloc(nt * 4), *dt2 = malloc(nt * 4);
    k_embedding_fwd(n, len, dim, ids, tab, y1);
    k_embedding_bwd(n, len, dim, vocab, ids, dy, dt1);
    int bad = k_cuda_embedding_fwd(n, len, dim, ids, tab, y2, NULL) ||
              k_cuda_embedding_bwd(n, len, dim, vocab, ids, dy, dt2, NULL);
    bad |= !SAME(y1, y2, ny) || !SAME(dt1, dt2, nt);
    int L = len - 2; /* a width-3 conv's output */
    size_t nx = (size_t)n * filters * L, nm = (size_t)n * filters;
    float *x = rnd(nx, 15, 1, 0), *dm = rnd(nm, 16, 1, 0), *m1 = malloc(nm * 4), *m2 = malloc(nm * 4);
    float *dx1 = malloc(nx * 4), *dx2 = malloc(nx * 4);
    int32_t *i1 = malloc(nm * 4), *i2 = malloc(nm * 4);
    k_max_time_fwd(n, filters, L, x, m1, i1);
    k_max_time_bwd(n, filters, L, dm, i1, dx1);
    bad |= k_cuda_max_time_fwd(n, filters, L, x, m2, i2, NULL) || k_cuda_max_time_bwd(n, filters, L, dm, i2, dx2, NULL);
    bad |= !SAME(m1, m2, nm) || !SAME(i1, i2, nm) || !SAME(dx1, dx2, nx);
    /* concat of three [n, filters] pieces (the CPU op's memcpys) and back */
    float *cat1 = malloc(3 * nm * 4), *cat2 = malloc(3 * nm * 4), *back = malloc(nm * 4);
    for (int k = 0; k < 3; k++)
        for (int s = 0; s < n; s++) memcpy(cat1 + (size_t)s * 3 * filters + k * filters, m1 + (size_t)s * filters, filters * 4);
    for (int k = 0; k < 3; k++) bad |= k_cuda_copy_rows(n, filters, m1, filters, cat2 + k * filters, 3 * (size_t)filters, NULL);
    bad |= !SAME(cat1, cat2, 3 * nm);
    bad |= k_cuda_copy_rows(n, filters, cat2 + filters, 3 * (size_t)filters, back, filters, NULL) || !SAME(back, m1, nm);
    if (bad) printf("FAIL cpu-vs-emu textcnn n=%d len=%d dim=%d vocab=%d filters=%d\n", n, len, dim, vocab, filters);
    free(ids); free(tab); free(dy); free(y1); free(y2); free(dt1); free(dt2); free(x); free(dm); free(m1); free(m2);
    free(dx1); free(dx2); free(i1); free(i2); free(cat1); free(cat2); free(back);
    return bad;
}

/* log_softmax backward where it is not the loss's (the CPU op's loop, nn/ops/elementwise.c). */
static int lsm(int n, int c)
{
    size_t nx = (size_t)n * c;
    float *x = rnd(nx, 17, 3, 0), *y = malloc(nx * 4), *dy = rnd(nx, 18, 1, 0), *d1 = malloc(nx * 4), *d2 = malloc(nx * 4);
    k_log_softmax_fwd(n, c, x, y);
    for (int s = 0; s < n; s++) {
        double sum = 0;
        for (int k = 0; k < c; k++) sum += dy[(size_t)s * c + k];
        for (int k = 0; k < c; k++) d1[(size_t)s * c + k] = dy[(size_t)s * c + k] - expf(y[(size_t)s * c + k]) * (float)sum;
    }
    int bad = k_cuda_log_softmax_bwd(n, c, y, dy, d2, NULL) || !(emu_relerr(d2, d1, nx) < 1e-6);
    if (bad) printf("FAIL cpu-vs-emu log_softmax bwd n=%d c=%d\n", n, c);
    free(x); free(y); free(dy); free(d1); free(d2);
    return bad;
}

int emu_cpu_kernels(int *cases)
{
    int bad = 0;
    /* ResNet-18 stem pool (reduced batch and channels), ResNet-20/18 BN and head. */
    bad += pool(2, 8, 112, 112, 3, 2, 1), (*cases)++;
    bad += pool(4, 16, 32, 32, 3, 2, 1), (*cases)++;
    static const int bns[][3] = {{4, 16, 32 * 32}, {4, 64, 8 * 8}, {2, 64, 56 * 56}, {4, 512, 7 * 7}};
    for (int i = 0; i < 4; i++, (*cases)++) bad += bn(bns[i][0], bns[i][1], bns[i][2]);
    bad += avg_add(8, 64, 64), (*cases)++;
    bad += avg_add(4, 512, 49), (*cases)++;
    bad += text(4, 64, 128, 20000, 100), (*cases)++;
    bad += text(3, 9, 16, 7, 5), (*cases)++;
    bad += lsm(64, 10), (*cases)++;
    bad += lsm(3, 1000), (*cases)++;
    return bad;
}
