/* Winograd convs (kernels/cpu/k_conv_wino.c), forced on with k_conv_set_algo:
 * "winograd" (F(2x2,3x3)) and "winograd4" (F(4x4,3x3) forward and dX, F(2x2) dW):
 * forward, dX and dW against naive double loops on
 * "winograd4c" (F(4x4) forward and dX channels-last, k_conv_winoc.c):
 * ResNet-like and awkward shapes (planes not a multiple of the 2x2 tile, 7x7, 5x9,
 * channel counts not multiples of 8/16, batches not a multiple of the image group),
 * the same bits for 1 and 2 threads, and "direct" giving the direct kernel's bits.
 * test_isa_paths reruns this file on every ISA level the CPU has. */
#include "test/t.h"
#include "test/t_util.h"
#include "kernels/k.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rs = 0x9e3779b97f4a7c15ULL;
static float *rnd(size_t n) { return t_uniform_buf(&rs, n); }

static k_conv_shape shape(int n, int c, int h, int w, int k)
{
    k_conv_shape sh = {n, c, h, w, k, 3, 3, 1, 1, 0, 0};
    k_conv_shape_init(&sh);
    return sh;
}

/* x[n][c][i][j], 0 outside the plane */
static double at(const k_conv_shape *sh, const float *x, int ch, long n, int c, int i, int j)
{
    if (i < 0 || i >= sh->h || j < 0 || j >= sh->w) return 0.0;
    return x[((n * ch + c) * sh->h + i) * sh->w + j];
}

static void naive(const k_conv_shape *sh, const float *x, const float *w, const float *b, const float *dy, double *y,
                  double *dx, double *dw, double *db)
{
    const int C = sh->c, K = sh->k, H = sh->h, W = sh->w;
    for (long n = 0; n < sh->n; n++)
        for (int k = 0; k < K; k++)
            for (int p = 0; p < H; p++)
                for (int q = 0; q < W; q++) {
                    double s = b[k];
                    for (int c = 0; c < C; c++)
                        for (int r = 0; r < 3; r++)
                            for (int t = 0; t < 3; t++)
                                s += at(sh, x, C, n, c, p + r - 1, q + t - 1) * w[((k * C + c) * 3 + r) * 3 + t];
                    y[((n * K + k) * H + p) * W + q] = s;
                }
    for (long n = 0; n < sh->n; n++)
        for (int c = 0; c < C; c++)
            for (int i = 0; i < H; i++)
                for (int j = 0; j < W; j++) {
                    double s = 0;
                    for (int k = 0; k < K; k++)
                        for (int r = 0; r < 3; r++)
                            for (int t = 0; t < 3; t++)
                                s += at(sh, dy, K, n, k, i - r + 1, j - t + 1) * w[((k * C + c) * 3 + r) * 3 + t];
                    dx[((n * C + c) * H + i) * W + j] = s;
                }
    for (int k = 0; k < K; k++) {
        db[k] = 0;
        for (int c = 0; c < C; c++)
            for (int r = 0; r < 3; r++)
                for (int t = 0; t < 3; t++) {
                    double s = 0;
                    for (long n = 0; n < sh->n; n++)
                        for (int p = 0; p < H; p++)
                            for (int q = 0; q < W; q++)
                                s += dy[((n * K + k) * H + p) * W + q] * at(sh, x, C, n, c, p + r - 1, q + t - 1);
                    dw[((k * C + c) * 3 + r) * 3 + t] = s;
                }
        for (long e = 0; e < (long)sh->n * H * W; e++) db[k] += dy[(e / (H * W) * K + k) * H * W + e % (H * W)];
    }
}

typedef struct { float *y, *dx, *dw, *db; } outs;

static outs run(const k_conv_shape *sh, const float *x, const float *w, const float *b, const float *dy)
{
    size_t nx = (size_t)sh->n * sh->c * sh->h * sh->w, ny = (size_t)sh->n * sh->k * sh->p * sh->q;
    outs o = {malloc(ny * 4), malloc(nx * 4), malloc((size_t)sh->k * sh->c * 36), malloc((size_t)sh->k * 4)};
    void *ws = malloc(k_conv2d_workspace(sh));
    memset(ws, 0xff, k_conv2d_workspace(sh)); /* NaNs: scratch the kernels read before writing shows */
    k_conv2d_fwd(sh, x, w, b, o.y, ws);
    k_conv2d_bwd(sh, x, w, dy, o.dx, o.dw, o.db, ws);
    free(ws);
    return o;
}

static void outs_free(outs *o) { free(o->y), free(o->dx), free(o->dw), free(o->db); }

static int same(const float *a, const float *b, size_t n) { return !memcmp(a, b, n * sizeof(float)); }

/* n c h w k: ResNet-20's 14x14 c32 and ResNet-18-like 28x28 (small batch); 7x7 with a
 * batch that is not a multiple of the image group (13 images, 8 slots); 5x9; odd
 * planes and channel counts; a plane wider than one vector of tiles. F(4x4) runs only
 * where the workspace covers it (14x14+ planes, 64+ channels; elsewhere winograd4
 * runs F(2x2)): 28x28, and 15x18 (neither a multiple of the 4x4 tile) on 3 images. */
static const int cases[][5] = {
    {3, 32, 14, 14, 32}, {2, 64, 28, 28, 64}, {13, 16, 7, 7, 20}, {3, 17, 5, 9, 9},
    {2, 19, 11, 6, 13},  {1, 5, 3, 3, 4},     {2, 8, 9, 37, 24},  {3, 64, 15, 18, 65},
    /* winograd4c's channels-last path (channels a multiple of the level's vector;
     * kernels_winoc_per_image checks that it ran): ResNet-20's 28x28 c16, 7x7 c64 on
     * 13 images (groups of 5), planes not a multiple of 4 with c != k */
    {2, 16, 28, 28, 16}, {13, 64, 7, 7, 64},  {2, 16, 9, 37, 32}, {2, 48, 15, 18, 16},
};
#define NCASES (int)(sizeof cases / sizeof cases[0])

static const char *const algos[] = {"winograd", "winograd4", "winograd4c"};
#define NALGOS (int)(sizeof algos / sizeof algos[0])

TEST(kernels_wino_matches_naive)
{
    for (int ci = 0; ci < NCASES; ci++)
    for (int ai = 0; ai < NALGOS; ai++) {
        k_conv_shape sh = shape(cases[ci][0], cases[ci][1], cases[ci][2], cases[ci][3], cases[ci][4]);
        size_t nx = (size_t)sh.n * sh.c * sh.h * sh.w, ny = (size_t)sh.n * sh.k * sh.p * sh.q;
        size_t nw = (size_t)sh.k * sh.c * 9;
        float *x = rnd(nx), *w = rnd(nw), *b = rnd(sh.k), *dy = rnd(ny);
        double *y = malloc(ny * 8), *dx = malloc(nx * 8), *dw = malloc(nw * 8), *db = malloc(sh.k * 8);
        naive(&sh, x, w, b, dy, y, dx, dw, db);
        CHECK(k_conv_set_algo(algos[ai]) == 0);
        outs o = run(&sh, x, w, b, dy);
        char what[96];
        /* normwise relative error (t_check_close): F(2x2) < 1e-6; F(4x4) (its
         * transforms' 1/6, 1/24, 4, 8 round) ~3e-6 at 32 channels, 1.2e-5 at 256 */
        snprintf(what, sizeof what, "%s case %d fwd", algos[ai], ci);
        CHECK_CLOSE(what, o.y, y, ny, 1e-5);
        snprintf(what, sizeof what, "%s case %d dx", algos[ai], ci);
        CHECK_CLOSE(what, o.dx, dx, nx, 1e-5);
        snprintf(what, sizeof what, "%s case %d dw", algos[ai], ci);
        CHECK_CLOSE(what, o.dw, dw, nw, 1e-5);
        snprintf(what, sizeof what, "%s case %d db", algos[ai], ci);
        CHECK_CLOSE(what, o.db, db, sh.k, 1e-5);
        /* the direct path stays right and is another computation (the switch is live) */
        CHECK(k_conv_set_algo("direct") == 0);
        outs d = run(&sh, x, w, b, dy);
        snprintf(what, sizeof what, "direct case %d fwd", ci);
        CHECK_CLOSE(what, d.y, y, ny, 2e-6);
        CHECKF(!same(d.y, o.y, ny) && !same(d.dx, o.dx, nx) && !same(d.dw, o.dw, nw),
               "case %d: winograd and direct gave the same bits", ci);
        k_conv_set_algo(NULL);
        outs_free(&o), outs_free(&d);
        free(x), free(w), free(b), free(dy), free(y), free(dx), free(dw), free(db);
    }
}

TEST(kernels_wino_threads_bitwise)
{
    k_conv_shape shs[3] = {shape(13, 16, 7, 7, 32), shape(10, 64, 14, 14, 64), shape(11, 16, 28, 28, 16)};
    for (int si = 0; si < 3 * NALGOS; si++) {
        k_conv_shape *sh = &shs[si / NALGOS];
        CHECK(k_conv_set_algo(algos[si % NALGOS]) == 0);
        size_t nx = (size_t)sh->n * sh->c * sh->h * sh->w, ny = (size_t)sh->n * sh->k * sh->p * sh->q;
        size_t nw = (size_t)sh->k * sh->c * 9;
        float *x = rnd(nx), *w = rnd(nw), *b = rnd(sh->k), *dy = rnd(ny);
        k_set_threads(1);
        outs a = run(sh, x, w, b, dy);
        k_set_threads(2);
        outs c = run(sh, x, w, b, dy);
        k_set_threads(1);
        CHECKF(same(a.y, c.y, ny) && same(a.dx, c.dx, nx) && same(a.dw, c.dw, nw) && same(a.db, c.db, sh->k),
               "shape %d %s: 1 and 2 threads differ", si / NALGOS, algos[si % NALGOS]);
        outs_free(&a), outs_free(&c);
        free(x), free(w), free(b), free(dy);
    }
    k_conv_set_algo(NULL);
}

/* "direct": the direct kernel's bits. The same conv on the input zero-padded by hand
 * with pad 0 (a shape Winograd never takes) runs the direct kernel over the same taps
 * in the same order. */
TEST(kernels_wino_direct_switch_keeps_the_direct_bits)
{
    k_conv_shape sh = shape(4, 64, 14, 14, 64), sp = sh;
    sp.h += 2, sp.w += 2, sp.pad = 0;
    k_conv_shape_init(&sp);
    size_t nx = (size_t)sh.n * sh.c * sh.h * sh.w, ny = (size_t)sh.n * sh.k * sh.p * sh.q;
    size_t npx = (size_t)sp.n * sp.c * sp.h * sp.w;
    float *x = rnd(nx), *w = rnd((size_t)sh.k * sh.c * 9), *b = rnd(sh.k), *xp = calloc(npx, 4);
    for (long i = 0; i < (long)sh.n * sh.c; i++)
        for (int r = 0; r < sh.h; r++)
            memcpy(xp + (i * sp.h + r + 1) * sp.w + 1, x + (i * sh.h + r) * sh.w, sh.w * sizeof(float));
    float *y = malloc(ny * 4), *yp = malloc(ny * 4), *yw = malloc(ny * 4);
    size_t wsb = k_conv2d_workspace(&sh) > k_conv2d_workspace(&sp) ? k_conv2d_workspace(&sh) : k_conv2d_workspace(&sp);
    void *ws = malloc(wsb);
    CHECK(k_conv_set_algo("bogus") == -1);
    CHECK(k_conv_set_algo("direct") == 0);
    k_conv2d_fwd(&sh, x, w, b, y, ws);
    k_conv2d_fwd(&sp, xp, w, b, yp, ws);
    CHECK(same(y, yp, ny));
    CHECK(k_conv_set_algo("winograd") == 0);
    k_conv2d_fwd(&sh, x, w, b, yw, ws);
    CHECK(!same(y, yw, ny));
    k_conv_set_algo(NULL);
    free(x), free(w), free(b), free(xp), free(y), free(yp), free(yw), free(ws);
}

/* winograd4c runs the channels-last kernels where the channels fit the level's vector
 * (parts bit 16), not elsewhere; and each image's forward and dX are its own bits:
 * the same in a batch of 13 (image groups of 5 on 7x7 c64, slots) as alone. */
TEST(kernels_winoc_per_image)
{
    k_conv_shape sh = shape(13, 64, 7, 7, 64), one = shape(1, 64, 7, 7, 64), odd = shape(2, 18, 7, 7, 18);
    CHECK(k_conv_set_algo("winograd4c") == 0);
    CHECK((k_conv2d_winograd_parts(&sh) & 27) == 27);
    CHECK(!(k_conv2d_winograd_parts(&odd) & 16));
    CHECK(k_conv_set_algo("winograd4") == 0);
    CHECK(!(k_conv2d_winograd_parts(&sh) & 16));
    CHECK(k_conv_set_algo("winograd4c") == 0);
    size_t nx = (size_t)sh.n * sh.c * sh.h * sh.w, ny = (size_t)sh.n * sh.k * sh.p * sh.q;
    size_t ix = nx / sh.n, iy = ny / sh.n;
    float *x = rnd(nx), *w = rnd((size_t)sh.k * sh.c * 9), *b = rnd(sh.k), *dy = rnd(ny);
    float *y = malloc(ny * 4), *dx = malloc(nx * 4), *y1 = malloc(iy * 4), *dx1 = malloc(ix * 4);
    void *ws = malloc(k_conv2d_workspace(&sh));
    memset(ws, 0xff, k_conv2d_workspace(&sh));
    k_conv2d_fwd(&sh, x, w, b, y, ws);
    k_conv2d_bwd(&sh, x, w, dy, dx, NULL, NULL, ws);
    for (int i = 0; i < sh.n; i += 4) {
        k_conv2d_fwd(&one, x + i * ix, w, b, y1, ws);
        k_conv2d_bwd(&one, x + i * ix, w, dy + i * iy, dx1, NULL, NULL, ws);
        CHECKF(same(y1, y + i * iy, iy) && same(dx1, dx + i * ix, ix), "image %d: alone and in the batch differ", i);
    }
    k_conv_set_algo(NULL);
    free(x), free(w), free(b), free(dy), free(y), free(dx), free(y1), free(dx1), free(ws);
}
