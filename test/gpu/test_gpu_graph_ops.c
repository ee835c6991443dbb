/* The layer-graph CUDA kernels (k_cuda_bn.cu, k_cuda_graph_ops.cu) against the naive
 * references of test/t_ref_graph.h on ResNet and TextCNN shapes and random ones:
 * pooling, add, embedding and max over time bit for bit; batchnorm and global avgpool
 * to rounding. Each also runs twice and must repeat bit for bit. */
#include "test/gpu/g.h"
#include "test/t_ref_graph.h"
#include <math.h>

#define RN(lo, hi, j) ((lo) + (int)(k_rand_uniform(seed, j) * ((hi) - (lo) + 1)))

static void pool_case(int n, int c, int h, int w, int ks, int st, int pad)
{
    g_init();
    int p = (h + 2 * pad - ks) / st + 1, q = (w + 2 * pad - ks) / st + 1;
    size_t nx = (size_t)n * c * h * w, ny = (size_t)n * c * p * q;
    float *x = g_rand(nx, 11), *dy = g_rand(ny, 12), *y = malloc(ny * 4), *dx = malloc(nx * 4);
    int32_t *idx = malloc(ny * 4), *hidx = malloc(ny * 4);
    if (nx > 1) x[1] = x[0];
    if (nx > 7) x[7] = NAN;
    ref_maxpool_pad_fwd(n, c, h, w, ks, st, pad, x, y, idx);
    ref_maxpool_pad_bwd(n, c, h, w, ks, st, pad, dy, idx, dx);
    float *gx = g_up(x, nx * 4), *gdy = g_up(dy, ny * 4), *gy = g_dev(ny * 4), *gdx = g_dev(nx * 4);
    int32_t *gidx = g_dev(ny * 4);
    g_need(k_cuda_maxpool2d_pad_fwd(n, c, h, w, ks, st, pad, gx, gy, gidx, NULL) == 0, "maxpool pad fwd");
    g_need(k_cuda_maxpool2d_pad_bwd(n, c, h, w, ks, st, pad, gdy, gidx, gdx, NULL) == 0, "maxpool pad bwd");
    g_down(hidx, gidx, ny * 4);
    CHECKF(g_ndiff(g_result(gy, ny), y, ny, 4) == 0 && g_ndiff(hidx, idx, ny, 4) == 0,
           "maxpool fwd n=%d c=%d %dx%d ks=%d st=%d pad=%d", n, c, h, w, ks, st, pad);
    CHECKF(g_ndiff(g_result(gdx, nx), dx, nx, 4) == 0, "maxpool bwd n=%d c=%d %dx%d ks=%d st=%d pad=%d", n, c, h,
           w, ks, st, pad);
}

TEST(gpu_maxpool_pad_bit_exact)
{
    pool_case(G_BIG(32, 2), G_BIG(64, 8), 112, 112, 3, 2, 1); /* ResNet-18 stem */
    pool_case(64, 10, 24, 24, 2, 2, 0);   /* LeNet */
    pool_case(3, 5, 13, 11, 3, 2, 1);
    pool_case(1, 2, 7, 6, 5, 3, 2);
    for (int i = 0; i < 10; i++) {
        uint64_t seed = 300 + i;
        int ks = RN(1, 5, 0), st = RN(1, 3, 1), pad = RN(0, ks / 2, 2);
        pool_case(RN(1, 4, 3), RN(1, 9, 4), RN(ks, 30, 5), RN(ks, 30, 6), ks, st, pad);
    }
}

static void bn_case(int n, int c, int hw, float shift)
{
    g_init();
    size_t nx = (size_t)n * c * hw;
    float *x = g_rand(nx, 21), *dy = g_rand(nx, 22), *g = g_rand(c, 23), *b = g_rand(c, 24);
    for (size_t i = 0; i < nx; i++) x[i] = x[i] * 3.0f + shift;
    float *mean = malloc(c * 4), *var = malloc(c * 4), *is = malloc(c * 4), *y = malloc(nx * 4), *dx = malloc(nx * 4);
    float *dg = malloc(c * 4), *db = malloc(c * 4);
    double m = (double)n * hw;
    ref_bn_stats(n, c, hw, x, mean, var);
    for (int i = 0; i < c; i++) is[i] = 1.0f / sqrtf(var[i] + 1e-5f);
    ref_bn_fwd(n, c, hw, x, mean, is, g, b, y);
    ref_bn_bwd_sums(n, c, hw, x, mean, is, dy, dg, db);
    ref_bn_bwd_dx(n, c, hw, x, mean, is, g, dg, db, m, dy, dx);

    float *gx = g_up(x, nx * 4), *gdy = g_up(dy, nx * 4), *gg = g_up(g, c * 4), *gb = g_up(b, c * 4);
    float *gmean = g_dev(c * 4), *gvar = g_dev(c * 4), *gis = g_dev(c * 4), *gy = g_dev(nx * 4), *gdx = g_dev(nx * 4);
    float *gdg = g_dev(c * 4), *gdb = g_dev(c * 4);
    g_need(k_cuda_bn_stats(n, c, hw, gx, gmean, gvar, NULL) == 0, "bn stats");
    g_need(k_cuda_bn_finish(c, gmean, gvar, 1e-5f, 0.1f, m, gis, NULL, NULL, NULL) == 0, "bn finish");
    float *rmean = g_result(gmean, c), *rvar = g_result(gvar, c), *ris = g_result(gis, c);
    double e0 = g_relerr(rmean, mean, c), e1 = g_relerr(rvar, var, c), e2 = g_relerr(ris, is, c);
    /* The rest from the reference statistics, so each kernel is checked alone. */
    float *gmr = g_up(mean, c * 4), *gisr = g_up(is, c * 4), *gdgr = g_up(dg, c * 4), *gdbr = g_up(db, c * 4);
    g_need(k_cuda_bn_fwd(n, c, hw, gx, gmr, gisr, gg, gb, gy, NULL) == 0, "bn fwd");
    g_need(k_cuda_bn_bwd_sums(n, c, hw, gx, gmr, gisr, gdy, gdg, gdb, NULL) == 0, "bn bwd sums");
    g_need(k_cuda_bn_bwd_dx(n, c, hw, gx, gmr, gisr, gg, gdgr, gdbr, m, gdy, gdx, NULL) == 0, "bn bwd dx");
    float *rdg = g_result(gdg, c), *rdb = g_result(gdb, c);
    double e3 = g_relerr(g_result(gy, nx), y, nx), e4 = g_relerr(rdg, dg, c), e5 = g_relerr(rdb, db, c);
    double e6 = g_relerr(g_result(gdx, nx), dx, nx);
    CHECKF(e0 < 1e-6 && e1 < 1e-6 && e2 < 1e-6 && e3 < 2e-6 && e4 < 1e-6 && e5 < 1e-6 && e6 < 1e-5,
           "bn n=%d c=%d hw=%d: mean %.2g var %.2g invstd %.2g y %.2g dgamma %.2g dbeta %.2g dx %.2g", n, c, hw, e0,
           e1, e2, e3, e4, e5, e6);
    /* Fixed-order reductions: a second run repeats bit for bit. */
    g_need(k_cuda_bn_stats(n, c, hw, gx, gmean, gvar, NULL) == 0, "bn stats");
    g_need(k_cuda_bn_bwd_sums(n, c, hw, gx, gmr, gisr, gdy, gdg, gdb, NULL) == 0, "bn bwd sums");
    CHECK(g_ndiff(g_result(gvar, c), rvar, c, 4) == 0 && g_ndiff(g_result(gmean, c), rmean, c, 4) == 0);
    CHECK(g_ndiff(g_result(gdg, c), rdg, c, 4) == 0 && g_ndiff(g_result(gdb, c), rdb, c, 4) == 0);
}

TEST(gpu_batchnorm_resnet_and_random_shapes)
{
    bn_case(G_BIG(32, 2), G_BIG(64, 4), 112 * 112, 0.5f); /* ResNet-18 bn1 at batch 32 */
    bn_case(G_BIG(32, 4), G_BIG(512, 32), 49, 0.5f);       /* layer4 */
    bn_case(G_BIG(128, 8), 16, 28 * 28, 1000.0f);          /* resnet20 on 28x28, a large mean */
    bn_case(300, 3, 1, 0.0f);
    for (int i = 0; i < 6; i++) {
        uint64_t seed = 400 + i;
        bn_case(RN(1, 16, 0), RN(1, 70, 1), RN(1, 300, 2), 0.1f * i);
    }
}

TEST(gpu_batchnorm_running_statistics)
{
    g_init();
    int c = 37;
    double count = 32.0 * 49;
    float *mean = g_rand(c, 61), *var = g_rand(c, 62), *rm = g_rand(c, 63), *rv = g_rand(c, 64);
    for (int i = 0; i < c; i++) { var[i] = var[i] * var[i] + 0.01f; rv[i] = rv[i] * rv[i] + 1.0f; }
    float *gm = g_up(mean, c * 4), *gv = g_up(var, c * 4), *grm = g_up(rm, c * 4), *grv = g_up(rv, c * 4);
    float *gis = g_dev(c * 4);
    g_need(k_cuda_bn_finish(c, gm, gv, 1e-5f, 0.1f, count, gis, grm, grv, NULL) == 0, "bn finish");
    float *is = g_result(gis, c), *rm2 = g_result(grm, c), *rv2 = g_result(grv, c);
    for (int i = 0; i < c; i++) {
        CHECK_NEAR(is[i], 1.0 / sqrt(var[i] + 1e-5), 1e-6 * is[i]);
        CHECK_NEAR(rm2[i], 0.9 * rm[i] + 0.1 * mean[i], 1e-6);
        CHECK_NEAR(rv2[i], 0.9 * rv[i] + 0.1 * var[i] * count / (count - 1), 1e-6 * rv2[i]);
    }
}

TEST(gpu_global_avgpool_and_add)
{
    g_init();
    static const int shapes[][3] = {{G_BIG(32, 4), 512, 49}, {G_BIG(128, 8), 64, 64}, {3, 5, 1}, {2, 3, 3136}};
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        int n = shapes[t][0], c = shapes[t][1], hw = shapes[t][2];
        size_t nx = (size_t)n * c * hw, ny = (size_t)n * c;
        float *x = g_rand(nx, 31), *x2 = g_rand(nx, 32), *dy = g_rand(ny, 33), *y = malloc(ny * 4), *dx = malloc(nx * 4);
        ref_global_avgpool_fwd(n, c, hw, x, y);
        ref_global_avgpool_bwd(n, c, hw, dy, dx);
        float *gx = g_up(x, nx * 4), *gx2 = g_up(x2, nx * 4), *gdy = g_up(dy, ny * 4), *gy = g_dev(ny * 4);
        float *gdx = g_dev(nx * 4);
        g_need(k_cuda_global_avgpool_fwd(n, c, hw, gx, gy, NULL) == 0, "avgpool fwd");
        g_need(k_cuda_global_avgpool_bwd(n, c, hw, gdy, gdx, NULL) == 0, "avgpool bwd");
        double ey = g_relerr(g_result(gy, ny), y, ny), ex = g_relerr(g_result(gdx, nx), dx, nx);
        CHECKF(ey < 1e-6 && ex < 1e-6, "avgpool n=%d c=%d hw=%d: y %.2g dx %.2g", n, c, hw, ey, ex);
        for (size_t i = 0; i < nx; i++) dx[i] = x[i] + x2[i];
        g_need(k_cuda_add(nx, gx, gx2, gx, NULL) == 0, "add"); /* in place */
        CHECK(g_ndiff(g_result(gx, nx), dx, nx, 4) == 0);
    }
}

static void emb_case(int n, int len, int dim, int vocab)
{
    g_init();
    size_t ntok = (size_t)n * len, ny = ntok * dim, nt = (size_t)vocab * dim;
    int32_t *ids = malloc(ntok * 4);
    for (size_t i = 0; i < ntok; i++) ids[i] = (int32_t)(k_rand_uniform(41, i) * vocab);
    float *table = g_rand(nt, 42), *dy = g_rand(ny, 43), *y = malloc(ny * 4), *dt = malloc(nt * 4);
    ref_embedding_fwd(n, len, dim, ids, table, y);
    ref_embedding_bwd(n, len, dim, vocab, ids, dy, dt);
    int32_t *gids = g_up(ids, ntok * 4);
    float *gt = g_up(table, nt * 4), *gdy = g_up(dy, ny * 4), *gy = g_dev(ny * 4), *gdt = g_up(table, nt * 4);
    g_need(k_cuda_embedding_fwd(n, len, dim, gids, gt, gy, NULL) == 0, "embedding fwd");
    g_need(k_cuda_embedding_bwd(n, len, dim, vocab, gids, gdy, gdt, NULL) == 0, "embedding bwd");
    CHECKF(g_ndiff(g_result(gy, ny), y, ny, 4) == 0, "embedding fwd n=%d len=%d dim=%d", n, len, dim);
    CHECKF(g_ndiff(g_result(gdt, nt), dt, nt, 4) == 0, "embedding bwd n=%d len=%d dim=%d vocab=%d", n, len, dim,
           vocab);
}

TEST(gpu_embedding_bit_exact)
{
    emb_case(64, 64, 128, 20000); /* TextCNN */
    emb_case(64, 64, 300, 5);     /* every row used by ~800 tokens */
    emb_case(8, 16, 12, 50);
    emb_case(1, 1, 3, 2);
    emb_case(2, 700, 257, 1000);  /* dim over one block */
}

TEST(gpu_max_time_bit_exact)
{
    g_init();
    static const int shapes[][3] = {{64, 100, 62}, {64, 100, 61}, {64, 100, 60}, {3, 5, 7}, {2, 3, 1}};
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        int n = shapes[t][0], c = shapes[t][1], len = shapes[t][2];
        size_t nx = (size_t)n * c * len, ny = (size_t)n * c;
        float *x = g_rand(nx, 51), *dy = g_rand(ny, 52), *y = malloc(ny * 4), *dx = malloc(nx * 4);
        int32_t *idx = malloc(ny * 4), *hidx = malloc(ny * 4);
        if (len > 2) x[2] = x[1] = 5.0f;
        if (nx > 2 * (size_t)len) x[len + 1] = NAN;
        ref_max_time_fwd(n, c, len, x, y, idx);
        ref_max_time_bwd(n, c, len, dy, idx, dx);
        float *gx = g_up(x, nx * 4), *gdy = g_up(dy, ny * 4), *gy = g_dev(ny * 4), *gdx = g_dev(nx * 4);
        int32_t *gidx = g_dev(ny * 4);
        g_need(k_cuda_max_time_fwd(n, c, len, gx, gy, gidx, NULL) == 0, "max_time fwd");
        g_need(k_cuda_max_time_bwd(n, c, len, gdy, gidx, gdx, NULL) == 0, "max_time bwd");
        g_down(hidx, gidx, ny * 4);
        CHECKF(g_ndiff(g_result(gy, ny), y, ny, 4) == 0 && g_ndiff(hidx, idx, ny, 4) == 0, "max_time fwd %zu", t);
        CHECKF(g_ndiff(g_result(gdx, nx), dx, nx, 4) == 0, "max_time bwd %zu", t);
    }
}
