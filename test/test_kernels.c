/* Conv2d and linear kernels: forwards against naive double-precision loops, backwards
 * against central finite differences of those loops, and agreement across SIMD paths
 * and thread counts. Sizes are kept small so the suite stays fast under sanitizers. */
#include "test/t.h"
#include "test/t_util.h"
#include "kernels/k.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static uint64_t rs = 88172645463325252ULL;
static float *rnd(size_t n) { return t_uniform_buf(&rs, n); }
static float *zeros(size_t n) { return calloc(n + 16, sizeof(float)); }

/* ---------------------------------------------------------------- conv reference */
typedef struct { const k_conv_shape *sh; const float *x, *w, *b, *g; } conv_ref;

static double xat(const k_conv_shape *sh, const float *x, const double *dx_pert, long pi,
                  int n, int c, int ih, int iw)
{
    if (ih < 0 || ih >= sh->h || iw < 0 || iw >= sh->w) return 0.0;
    long i = (((long)n * sh->c + c) * sh->h + ih) * sh->w + iw;
    return x[i] + (dx_pert && i == pi ? *dx_pert : 0.0);
}

static void naive_conv(const k_conv_shape *sh, const float *x, const float *w, const float *b, double *y)
{
    for (int n = 0; n < sh->n; n++)
        for (int k = 0; k < sh->k; k++)
            for (int p = 0; p < sh->p; p++)
                for (int q = 0; q < sh->q; q++) {
                    double s = b ? b[k] : 0.0;
                    for (int c = 0; c < sh->c; c++)
                        for (int r = 0; r < sh->r; r++)
                            for (int t = 0; t < sh->s; t++)
                                s += xat(sh, x, NULL, -1, n, c, p * sh->stride - sh->pad + r,
                                         q * sh->stride - sh->pad + t) *
                                     w[((k * sh->c + c) * sh->r + r) * sh->s + t];
                    y[(((long)n * sh->k + k) * sh->p + p) * sh->q + q] = s;
                }
}

/* L = sum(y * g): its gradient is conv_bwd(dy = g). Perturb one element of x, w or b. */
static double conv_loss(const conv_ref *c, int which, long i, double h)
{
    const k_conv_shape *sh = c->sh;
    size_t nx = (size_t)sh->n * sh->c * sh->h * sh->w, nw = (size_t)sh->k * sh->c * sh->r * sh->s;
    double *xx = malloc(nx * sizeof *xx), *ww = malloc(nw * sizeof *ww), *bb = malloc(sh->k * sizeof *bb);
    for (size_t t = 0; t < nx; t++) xx[t] = c->x[t];
    for (size_t t = 0; t < nw; t++) ww[t] = c->w[t];
    for (int t = 0; t < sh->k; t++) bb[t] = c->b[t];
    (which == 0 ? xx : which == 1 ? ww : bb)[i] += h;
    double L = 0.0;
    for (int n = 0; n < sh->n; n++)
        for (int k = 0; k < sh->k; k++)
            for (int p = 0; p < sh->p; p++)
                for (int q = 0; q < sh->q; q++) {
                    double s = bb[k];
                    for (int ch = 0; ch < sh->c; ch++)
                        for (int r = 0; r < sh->r; r++) {
                            int ih = p * sh->stride - sh->pad + r;
                            if (ih < 0 || ih >= sh->h) continue;
                            for (int t = 0; t < sh->s; t++) {
                                int iw = q * sh->stride - sh->pad + t;
                                if (iw < 0 || iw >= sh->w) continue;
                                s += xx[(((long)n * sh->c + ch) * sh->h + ih) * sh->w + iw] *
                                     ww[((k * sh->c + ch) * sh->r + r) * sh->s + t];
                            }
                        }
                    L += s * c->g[(((long)n * sh->k + k) * sh->p + p) * sh->q + q];
                }
    free(xx); free(ww); free(bb);
    return L;
}

static k_conv_shape shp(int n, int c, int h, int w, int k, int r, int s, int st, int pad)
{
    k_conv_shape sh = {n, c, h, w, k, r, s, st, pad, 0, 0};
    k_conv_shape_init(&sh);
    return sh;
}

/* LeNet's two convs (small batch), strided / padded / non-square ones, 1x1, a batch
 * larger than the slot count, and a wide-CRS small-PQ one. Then ResNet's kinds at
 * small batch: 3x3 "same" (dX as a conv), 7x7 planes with many outputs (dW as NN
 * GEMM; batch 10 > the 8 slots, so slots sum images), 3x3 stride 2, the 1x1 stride-2
 * projection, the 7x7/2 pad-3 stem, 5x5 same, 12x12 planes (dW in image groups of 4),
 * 7x7 "same" planes with 3 images a slot (AVX2, AVX-512: interleaved groups, fwd, dW, dX),
 * a stem-like 7x7/2 on an odd 93x93 plane whose 47x47 outputs (2209 >= 2048) take
 * AVX2's column-chunked dW. Then stride 2 on even planes (AVX2: dX as 4 phase convs):
 * 3x3 on a 10x12 plane, 3x3 on 6x6 planes in interleaved groups of 8 images (9 a
 * slot: a whole group and a cut one), 1x1 on an 8x16 plane, and stride 2 on 299-wide rows
 * (150 outputs: the plane builders' masks past 128 columns). */
static const int conv_cases[][9] = {
    {2, 1, 28, 28, 10, 5, 5, 1, 0},  {2, 10, 12, 12, 20, 5, 5, 1, 0}, {2, 3, 9, 7, 5, 3, 3, 2, 1},
    {3, 2, 8, 11, 4, 3, 2, 1, 1},    {2, 4, 6, 6, 3, 1, 1, 1, 0},    {11, 2, 5, 5, 3, 3, 3, 1, 0},
    {2, 16, 6, 6, 7, 3, 3, 1, 1},    {1, 3, 10, 9, 6, 4, 3, 3, 2},   {2, 2, 7, 7, 17, 2, 2, 2, 0},
    {2, 17, 9, 9, 6, 3, 3, 1, 1},    {10, 3, 7, 7, 128, 3, 3, 1, 1}, {10, 2, 9, 9, 130, 3, 3, 2, 1},
    {2, 5, 11, 11, 7, 3, 3, 2, 1},   {2, 6, 8, 9, 10, 1, 1, 2, 0},   {2, 3, 17, 16, 8, 7, 7, 2, 3},
    {2, 16, 10, 10, 6, 5, 5, 1, 2},   {18, 2, 12, 12, 4, 3, 3, 1, 1},  {24, 16, 7, 7, 8, 3, 3, 1, 1},
    {1, 3, 93, 93, 3, 7, 7, 2, 3},   {3, 6, 10, 12, 9, 3, 3, 2, 1},  {72, 3, 6, 6, 5, 3, 3, 2, 1},
    {3, 6, 8, 16, 11, 1, 1, 2, 0},   {1, 2, 5, 299, 4, 3, 3, 2, 1},
};
#define NCASES (int)(sizeof conv_cases / sizeof conv_cases[0])

static k_conv_shape case_shape(int i)
{
    const int *a = conv_cases[i];
    return shp(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8]);
}

TEST(kernels_conv_shape_init)
{
    k_conv_shape a = shp(64, 1, 28, 28, 10, 5, 5, 1, 0);
    CHECK_EQ(a.p, 24); CHECK_EQ(a.q, 24);
    k_conv_shape b = shp(1, 3, 9, 7, 5, 3, 3, 2, 1);
    CHECK_EQ(b.p, 5); CHECK_EQ(b.q, 4);
    CHECK(k_conv2d_workspace(&a) > 0);
}

TEST(kernels_conv_fwd_matches_naive)
{
    for (int ci = 0; ci < NCASES; ci++) {
        k_conv_shape sh = case_shape(ci);
        size_t nx = (size_t)sh.n * sh.c * sh.h * sh.w, nw = (size_t)sh.k * sh.c * sh.r * sh.s;
        size_t ny = (size_t)sh.n * sh.k * sh.p * sh.q;
        float *x = rnd(nx), *w = rnd(nw), *b = rnd(sh.k), *y = zeros(ny);
        void *ws = malloc(k_conv2d_workspace(&sh));
        double *ref = malloc(ny * sizeof *ref);
        naive_conv(&sh, x, w, b, ref);
        k_conv2d_fwd(&sh, x, w, b, y, ws);
        char what[64];
        snprintf(what, sizeof what, "conv fwd case %d", ci);
        /* auto may run F(4x4,3x3) Winograd (test_kernels_wino.c: ~1e-5 of the largest) */
        double tol = k_conv2d_winograd_parts(&sh) & 8 ? 1e-5 : 2e-6;
        CHECK_CLOSE(what, y, ref, ny, tol);
        k_conv2d_fwd(&sh, x, w, NULL, y, ws); /* no bias */
        for (size_t i = 0; i < ny; i++) ref[i] -= b[(i / ((size_t)sh.p * sh.q)) % sh.k];
        CHECK_CLOSE(what, y, ref, ny, tol);
        free(x); free(w); free(b); free(y); free(ws); free(ref);
    }
}

/* Central differences of the double-precision loss; L is linear in each variable so
 * the difference is exact up to rounding. Large tensors are sampled. */
static void fd_check(const char *what, const conv_ref *c, int which, const float *grad, long n)
{
    int stride = n > 40 ? (int)(n / 40) : 1;
    double h = 0.5, maxref = 1.0, maxerr = 0.0;
    long at = 0;
    double want_at = 0;
    for (long i = 0; i < n; i += stride) {
        double fd = (conv_loss(c, which, i, h) - conv_loss(c, which, i, -h)) / (2 * h);
        if (fabs(fd) > maxref) maxref = fabs(fd);
        if (fabs(fd - grad[i]) > maxerr) { maxerr = fabs(fd - grad[i]); at = i; want_at = fd; }
    }
    CHECKF(maxerr / maxref <= 1e-5, "%s: element %ld got %.7g want %.7g", what, at, grad[at], want_at);
}

TEST(kernels_conv_bwd_finite_diff)
{
    for (int ci = 0; ci < NCASES; ci++) {
        k_conv_shape sh = case_shape(ci);
        long nx = (long)sh.n * sh.c * sh.h * sh.w, nw = (long)sh.k * sh.c * sh.r * sh.s;
        long ny = (long)sh.n * sh.k * sh.p * sh.q;
        float *x = rnd(nx), *w = rnd(nw), *b = rnd(sh.k), *g = rnd(ny);
        float *dx = zeros(nx), *dw = zeros(nw), *db = zeros(sh.k);
        void *ws = malloc(k_conv2d_workspace(&sh));
        /* Garbage in the outputs: backward must overwrite, not accumulate. */
        for (long i = 0; i < nx; i++) dx[i] = 7.0f;
        for (long i = 0; i < nw; i++) dw[i] = 7.0f;
        k_conv2d_bwd(&sh, x, w, g, dx, dw, db, ws);
        conv_ref c = {&sh, x, w, b, g};
        char what[64];
        snprintf(what, sizeof what, "case %d dx", ci);
        fd_check(what, &c, 0, dx, nx);
        snprintf(what, sizeof what, "case %d dw", ci);
        fd_check(what, &c, 1, dw, nw);
        snprintf(what, sizeof what, "case %d db", ci);
        fd_check(what, &c, 2, db, sh.k);
        /* dx == NULL (first layer): dw and db unchanged. */
        float *dw2 = zeros(nw), *db2 = zeros(sh.k);
        k_conv2d_bwd(&sh, x, w, g, NULL, dw2, db2, ws);
        CHECK(memcmp(dw, dw2, nw * sizeof(float)) == 0);
        CHECK(memcmp(db, db2, sh.k * sizeof(float)) == 0);
        free(x); free(w); free(b); free(g); free(dx); free(dw); free(db); free(dw2); free(db2);
        free(ws);
    }
}

/* dW over 2 MiB (ResNet-18's layer4 kind: small planes, many channels) is one NN GEMM
 * over several images' columns: whole groups, a group cut by the slot's end (48 images
 * in 8 slots of 6, groups of 5), odd planes and stride 2, channel counts off the vector
 * width. Sampled dW elements and db against double sums, every ISA level. */
TEST(kernels_conv_dw_image_groups)
{
    static const int cases[][9] = {{48, 203, 9, 9, 301, 3, 3, 2, 1}, {20, 113, 7, 7, 520, 3, 3, 1, 1}};
    static const char *isas[] = {"generic", "avx2", "avx512"};
    for (int ci = 0; ci < 2; ci++) {
        const int *a = cases[ci];
        k_conv_shape sh = shp(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8]);
        long nx = (long)sh.n * sh.c * sh.h * sh.w, nw = (long)sh.k * sh.c * sh.r * sh.s;
        long ny = (long)sh.n * sh.k * sh.p * sh.q, pq = (long)sh.p * sh.q, crs = (long)sh.c * sh.r * sh.s;
        float *x = rnd(nx), *w = rnd(nw), *g = rnd(ny), *dw = zeros(nw), *db = zeros(sh.k);
        void *ws = malloc(k_conv2d_workspace(&sh));
        for (int s = 0; s < 3; s++) {
            if (k_set_isa(isas[s]) != 0) continue;
            for (long i = 0; i < nw; i++) dw[i] = 7.0f;
            k_conv2d_bwd(&sh, x, w, g, NULL, dw, db, ws);
            double maxerr = 0, maxref = 1e-30;
            long at = 0;
            for (long e = 0; e < nw; e += 97) {
                int k = (int)(e / crs), c = (int)(e % crs / (sh.r * sh.s)), r = (int)(e % (sh.r * sh.s) / sh.s),
                    sc = (int)(e % sh.s);
                double ref = 0;
                for (int n = 0; n < sh.n; n++)
                    for (int p = 0; p < sh.p; p++)
                        for (int q = 0; q < sh.q; q++) {
                            int ih = p * sh.stride - sh.pad + r, iw = q * sh.stride - sh.pad + sc;
                            if (ih < 0 || ih >= sh.h || iw < 0 || iw >= sh.w) continue;
                            ref += (double)g[((long)n * sh.k + k) * pq + (long)p * sh.q + q] *
                                   x[(((long)n * sh.c + c) * sh.h + ih) * sh.w + iw];
                        }
                if (fabs(ref) > maxref) maxref = fabs(ref);
                if (fabs(ref - dw[e]) > maxerr) maxerr = fabs(ref - dw[e]), at = e;
            }
            CHECKF(maxerr / maxref <= 1e-5, "dw groups case %d isa %s: element %ld off by %g of %g", ci, isas[s], at,
                   maxerr, maxref);
            for (int k = 0; k < sh.k; k += 7) {
                double ref = 0;
                for (int n = 0; n < sh.n; n++)
                    for (long j = 0; j < pq; j++) ref += g[((long)n * sh.k + k) * pq + j];
                CHECKF(fabs(ref - db[k]) <= 1e-5 * (1 + fabs(ref)) * sh.n, "db case %d isa %s k %d: %g vs %g", ci,
                       isas[s], k, db[k], ref);
            }
        }
        k_set_isa(NULL);
        free(x); free(w); free(g); free(dw); free(db); free(ws);
    }
}

/* Every element of dX and dW against double sums, on every ISA level: AVX2's dX of
 * stride-2 convs as 4 phase convs (3x3 on 10x12 planes; 6x6 planes in interleaved
 * groups of 8, 9 images a slot; 1x1 on 8x16) and the dW with the taps broadcast
 * (AVX2 and AVX-512: 32 filters in groups of 8 images cut by the slot's end, AVX2: 48
 * filters of a 1x1; 20 filters: the NT form); finite differences sample only ~40
 * elements. */
TEST(kernels_conv_bwd_all_elements)
{
    static const int cases[][9] = {{3, 6, 10, 12, 9, 3, 3, 2, 1}, {72, 3, 6, 6, 5, 3, 3, 2, 1},
                                   {3, 6, 8, 16, 11, 1, 1, 2, 0}, {80, 7, 9, 9, 32, 3, 3, 1, 1},
                                   {10, 40, 7, 7, 48, 1, 1, 1, 0},  {3, 5, 6, 6, 20, 3, 3, 1, 1}};
    static const char *isas[] = {"generic", "avx2", "avx512"};
    for (int ci = 0; ci < 6; ci++) {
        const int *a = cases[ci];
        k_conv_shape sh = shp(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8]);
        long nx = (long)sh.n * sh.c * sh.h * sh.w, nw = (long)sh.k * sh.c * sh.r * sh.s;
        long ny = (long)sh.n * sh.k * sh.p * sh.q;
        float *x = rnd(nx), *w = rnd(nw), *g = rnd(ny), *dx = zeros(nx), *dw = zeros(nw);
        double *rx = calloc((size_t)nx, sizeof(double)), *rw = calloc((size_t)nw, sizeof(double));
        void *ws = malloc(k_conv2d_workspace(&sh));
        for (int n = 0; n < sh.n; n++)
            for (int k = 0; k < sh.k; k++)
                for (int p = 0; p < sh.p; p++)
                    for (int q = 0; q < sh.q; q++) {
                        double gv = g[(((long)n * sh.k + k) * sh.p + p) * sh.q + q];
                        for (int c = 0; c < sh.c; c++)
                            for (int r = 0; r < sh.r; r++)
                                for (int t = 0; t < sh.s; t++) {
                                    int ih = p * sh.stride - sh.pad + r, iw = q * sh.stride - sh.pad + t;
                                    if (ih < 0 || ih >= sh.h || iw < 0 || iw >= sh.w) continue;
                                    long xi = (((long)n * sh.c + c) * sh.h + ih) * sh.w + iw;
                                    long wi = (((long)k * sh.c + c) * sh.r + r) * sh.s + t;
                                    rx[xi] += gv * w[wi];
                                    rw[wi] += gv * x[xi];
                                }
                    }
        for (int s = 0; s < 3; s++) {
            if (k_set_isa(isas[s]) != 0) continue;
            for (long i = 0; i < nx; i++) dx[i] = 7.0f;
            for (long i = 0; i < nw; i++) dw[i] = 7.0f;
            k_conv2d_bwd(&sh, x, w, g, dx, dw, NULL, ws);
            for (int which = 0; which < 2; which++) {
                const float *got = which ? dw : dx;
                const double *ref = which ? rw : rx;
                long cnt = which ? nw : nx, at = 0;
                double maxerr = 0, maxref = 1.0;
                for (long i = 0; i < cnt; i++) {
                    if (fabs(ref[i]) > maxref) maxref = fabs(ref[i]);
                    if (fabs(ref[i] - got[i]) > maxerr) maxerr = fabs(ref[i] - got[i]), at = i;
                }
                CHECKF(maxerr / maxref <= 1e-5, "case %d isa %s %s: element %ld got %.7g want %.7g", ci, isas[s],
                       which ? "dw" : "dx", at, got[at], ref[at]);
            }
        }
        k_set_isa(NULL);
        free(x); free(w); free(g); free(dx); free(dw); free(rx); free(rw); free(ws);
    }
}

/* ---------------------------------------------------------------- linear */
static void naive_linear(int n, int in, int out, const float *x, const float *w, const float *b, double *y)
{
    for (int i = 0; i < n; i++)
        for (int o = 0; o < out; o++) {
            double s = b ? b[o] : 0.0;
            for (int j = 0; j < in; j++) s += (double)x[i * in + j] * w[o * in + j];
            y[i * out + o] = s;
        }
}

static const int lin_cases[][3] = {{64, 320, 50}, {64, 50, 10}, {3, 7, 5}, {1, 1, 1}, {13, 33, 17}, {5, 300, 2}};

TEST(kernels_linear_fwd_bwd)
{
    for (size_t ci = 0; ci < sizeof lin_cases / sizeof lin_cases[0]; ci++) {
        int n = lin_cases[ci][0], in = lin_cases[ci][1], out = lin_cases[ci][2];
        float *x = rnd((size_t)n * in), *w = rnd((size_t)out * in), *b = rnd(out), *g = rnd((size_t)n * out);
        float *y = zeros((size_t)n * out), *dx = zeros((size_t)n * in), *dw = zeros((size_t)out * in), *db = zeros(out);
        double *ref = malloc(sizeof(double) * ((size_t)n * in + (size_t)out * in + n * out));
        char what[64];
        snprintf(what, sizeof what, "linear %dx%dx%d fwd", n, in, out);
        naive_linear(n, in, out, x, w, b, ref);
        k_linear_fwd(n, in, out, x, w, b, y);
        CHECK_CLOSE(what, y, ref, (size_t)n * out, 2e-6);
        for (size_t i = 0; i < (size_t)out * in; i++) dw[i] = 5.0f;
        k_linear_bwd(n, in, out, x, w, g, dx, dw, db);
        /* L = sum(y*g) is bilinear, so its exact gradients are these sums (in double). */
        for (int i = 0; i < n; i++)
            for (int j = 0; j < in; j++) {
                double s = 0;
                for (int o = 0; o < out; o++) s += (double)g[i * out + o] * w[o * in + j];
                ref[i * in + j] = s;
            }
        snprintf(what, sizeof what, "linear %dx%dx%d dx", n, in, out);
        CHECK_CLOSE(what, dx, ref, (size_t)n * in, 2e-6);
        for (int o = 0; o < out; o++)
            for (int j = 0; j < in; j++) {
                double s = 0;
                for (int i = 0; i < n; i++) s += (double)g[i * out + o] * x[i * in + j];
                ref[o * in + j] = s;
            }
        snprintf(what, sizeof what, "linear %dx%dx%d dw", n, in, out);
        CHECK_CLOSE(what, dw, ref, (size_t)out * in, 2e-6);
        for (int o = 0; o < out; o++) {
            double s = 0;
            for (int i = 0; i < n; i++) s += g[i * out + o];
            ref[o] = s;
        }
        CHECK_CLOSE("linear db", db, ref, out, 2e-6);
        /* One finite difference through the real kernel, as a sanity check of signs. */
        int j0 = in / 2, o0 = out / 2;
        float save = w[o0 * in + j0];
        double h = 1e-2, lp = 0, lm = 0;
        w[o0 * in + j0] = save + (float)h;
        k_linear_fwd(n, in, out, x, w, b, y);
        for (int i = 0; i < n * out; i++) lp += (double)y[i] * g[i];
        w[o0 * in + j0] = save - (float)h;
        k_linear_fwd(n, in, out, x, w, b, y);
        for (int i = 0; i < n * out; i++) lm += (double)y[i] * g[i];
        w[o0 * in + j0] = save;
        CHECK_NEAR((lp - lm) / (2 * h), dw[o0 * in + j0], 2e-3);
        k_linear_bwd(n, in, out, x, w, g, NULL, dw, db); /* dx not needed */
        free(x); free(w); free(b); free(g); free(y); free(dx); free(dw); free(db); free(ref);
    }
}

/* ---------------------------------------------------------------- paths and threads */
typedef struct { float *y, *dx, *dw, *db, *ly, *ldx, *ldw, *ldb, *r, *py, *pdx, *s; } outs;

static void run_all(const k_conv_shape *sh, const float *x, const float *w, const float *b,
                    const float *g, void *ws, outs *o, const float *lx, const float *lw,
                    const float *lb, const float *lg)
{
    k_conv2d_fwd(sh, x, w, b, o->y, ws);
    k_conv2d_bwd(sh, x, w, g, o->dx, o->dw, o->db, ws);
    /* fc1's shape: big enough to be split across threads */
    k_linear_fwd(64, 320, 50, lx, lw, lb, o->ly);
    k_linear_bwd(64, 320, 50, lx, lw, lg, o->ldx, o->ldw, o->ldb);
    k_relu_fwd(1000, x, o->r);
    /* max pool 2x2 on the conv output (vector path when q >= 8), and SGD */
    int32_t *idx = malloc(sizeof(int32_t) * sh->n * sh->k * (sh->p / 2) * (sh->q / 2) + 64);
    k_maxpool2d_fwd(sh->n, sh->k, sh->p, sh->q, 2, 2, o->y, o->py, idx);
    k_maxpool2d_bwd(sh->n, sh->k, sh->p, sh->q, 2, 2, o->py, idx, o->pdx);
    free(idx);
    k_sgd_cfg c = {0.1f, 0.9f, 0.0f, 0.01f, 1};
    float v[1000];
    memcpy(o->s, x, sizeof v);
    k_sgd_step(1000, &c, 1, o->s, lg, v);
    k_sgd_step(1000, &c, 0, o->s, lg, v);
}

static outs outs_new(const k_conv_shape *sh)
{
    size_t nx = (size_t)sh->n * sh->c * sh->h * sh->w, nw = (size_t)sh->k * sh->c * sh->r * sh->s;
    outs o = {zeros((size_t)sh->n * sh->k * sh->p * sh->q), zeros(nx), zeros(nw), zeros(sh->k),
              zeros(64 * 50), zeros(64 * 320), zeros(50 * 320), zeros(50), zeros(1000),
              zeros((size_t)sh->n * sh->k * sh->p * sh->q), zeros((size_t)sh->n * sh->k * sh->p * sh->q),
              zeros(1000)};
    return o;
}

static void outs_cmp(const k_conv_shape *sh, const outs *a, const outs *b, double tol, const char *what)
{
    size_t nx = (size_t)sh->n * sh->c * sh->h * sh->w, nw = (size_t)sh->k * sh->c * sh->r * sh->s;
    size_t ny = (size_t)sh->n * sh->k * sh->p * sh->q;
    size_t n[12] = {ny, nx, nw, sh->k, 64 * 50, 64 * 320, 50 * 320, 50, 1000,
                    (size_t)sh->n * sh->k * (sh->p / 2) * (sh->q / 2), ny, 1000};
    float *const *pa = &a->y, *const *pb = &b->y;
    for (int t = 0; t < 12; t++) {
        if (tol == 0.0) {
            CHECKF(memcmp(pa[t], pb[t], n[t] * sizeof(float)) == 0, "%s: output %d differs", what, t);
            continue;
        }
        double *ref = malloc(n[t] * sizeof *ref);
        for (size_t i = 0; i < n[t]; i++) ref[i] = pb[t][i];
        char w2[80];
        snprintf(w2, sizeof w2, "%s output %d", what, t);
        CHECK_CLOSE(w2, pa[t], ref, n[t], tol);
        free(ref);
    }
}

TEST(kernels_isa_paths_agree)
{
    const char *isas[] = {"generic", "avx2", "avx512"};
    k_conv_shape shs[4] = {shp(3, 10, 12, 12, 20, 5, 5, 1, 0), shp(2, 1, 28, 28, 10, 5, 5, 1, 0),
                           shp(2, 16, 8, 8, 130, 3, 3, 1, 1), shp(3, 5, 12, 12, 16, 3, 3, 2, 1)};
    CHECK(k_set_isa("bogus") == -1);
    for (int si = 0; si < 4; si++) {
        k_conv_shape *sh = &shs[si];
        size_t nx = (size_t)sh->n * sh->c * sh->h * sh->w, nw = (size_t)sh->k * sh->c * sh->r * sh->s;
        float *x = rnd(nx > 1000 ? nx : 1000), *w = rnd(nw), *b = rnd(sh->k);
        float *g = rnd((size_t)sh->n * sh->k * sh->p * sh->q);
        float *lx = rnd(64 * 320), *lw = rnd(50 * 320), *lb = rnd(50), *lg = rnd(64 * 50);
        void *ws = malloc(k_conv2d_workspace(sh));
        CHECK(k_set_isa("generic") == 0);
        outs ref = outs_new(sh);
        run_all(sh, x, w, b, g, ws, &ref, lx, lw, lb, lg);
        for (int i = 1; i < 3; i++) {
            if (k_set_isa(isas[i]) != 0) { t_note("%s not supported here: skipped", isas[i]); continue; }
            CHECK(strcmp(k_isa(), isas[i]) == 0);
            outs o = outs_new(sh);
            run_all(sh, x, w, b, g, ws, &o, lx, lw, lb, lg);
            outs_cmp(sh, &o, &ref, 1e-5, isas[i]);
        }
        k_set_isa(NULL);
    }
}

TEST(kernels_threads_agree_bitwise)
{
    k_conv_shape sh = shp(13, 10, 12, 12, 20, 5, 5, 1, 0);
    k_conv_shape sh1 = shp(9, 1, 28, 28, 10, 5, 5, 1, 0);
    k_conv_shape sh2 = shp(10, 16, 8, 8, 130, 3, 3, 1, 1), sh3 = shp(9, 5, 12, 12, 16, 3, 3, 2, 1);
    k_conv_shape *shs[4] = {&sh, &sh1, &sh2, &sh3};
    for (int si = 0; si < 4; si++) {
        k_conv_shape *s = shs[si];
        size_t nx = (size_t)s->n * s->c * s->h * s->w, nw = (size_t)s->k * s->c * s->r * s->s;
        float *x = rnd(nx), *w = rnd(nw), *b = rnd(s->k), *g = rnd((size_t)s->n * s->k * s->p * s->q);
        float *lx = rnd(64 * 320), *lw = rnd(50 * 320), *lb = rnd(50), *lg = rnd(64 * 50);
        void *ws = malloc(k_conv2d_workspace(s));
        k_set_threads(1);
        CHECK_EQ(k_threads(), 1);
        outs ref = outs_new(s);
        run_all(s, x, w, b, g, ws, &ref, lx, lw, lb, lg);
        for (int t = 2; t <= 4; t++) {
            k_set_threads(t);
            CHECK_EQ(k_threads(), t);
            outs o = outs_new(s);
            run_all(s, x, w, b, g, ws, &o, lx, lw, lb, lg);
            char what[32];
            snprintf(what, sizeof what, "%d threads", t);
            outs_cmp(s, &o, &ref, 0.0, what);
        }
        k_set_threads(1);
    }
}

TEST(kernels_pool_survives_fork)
{
    /* A child forked after k_set_threads has no workers; kernels must still run. */
    k_set_threads(2);
    pid_t pid = fork();
    if (pid == 0) {
        k_conv_shape sh = shp(8, 2, 6, 6, 3, 3, 3, 1, 0);
        float *x = rnd(8 * 72), *w = rnd(54), *y = zeros(8 * 48);
        void *ws = malloc(k_conv2d_workspace(&sh));
        k_conv2d_fwd(&sh, x, w, NULL, y, ws);
        _exit(k_threads() == 1 ? 0 : 3);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    k_set_threads(1);
}
