/* Mixed precision (--amp bf16): conversion, the bf16 conv/linear kernels against
 * double-precision loops on bf16-rounded operands (tight) and on the fp32 operands
 * (bf16 tolerance), agreement across ISA paths and thread counts, and a short
 * training run. */
#include "test/t.h"
#include "test/t_util.h"
#include "test/t_data.h"
#include "kernels/k.h"
#include "kernels/cpu/k_bf16.h"
#include "rt/half.h"
#include "rt/isa.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rs = 0x9E3779B97F4A7C15ULL;
static uint64_t rbits(void) { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return rs; }
static float frand(void) { return (float)((rbits() >> 40) * 0x1p-24 * 2.0 - 1.0); }
static float *rnd(size_t n)
{
    float *p = malloc(n * sizeof *p + 64);
    for (size_t i = 0; i < n; i++) p[i] = frand();
    return p;
}
static float fbits(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static double bf(float x) { return rt_bf16_to_f32(rt_f32_to_bf16(x)); }

/* The span conversion equals rt/half.h's scalar one (test_half.c checks that one) on
 * every path: random bit patterns, NaNs and infinities included. */
TEST(bf16_span_conversion_matches_scalar_on_every_isa)
{
    enum { N = 4099 };
    float *x = malloc(sizeof(float) * N);
    uint16_t *a = malloc(2 * N), *b = malloc(2 * N);
    for (int i = 0; i < N; i++) x[i] = fbits((uint32_t)rbits());
    x[5] = fbits(0x7f800000), x[6] = fbits(0xff800001), x[7] = fbits(0x3f808000);
    for (int k = 0; k < RT_NISA; k++) {
        if (k_set_isa(rt_isa_name(k)) != 0) continue;
        k_bf16_from_f32_span(N, x, a);
        for (int i = 0; i < N; i++) b[i] = rt_f32_to_bf16(x[i]);
        CHECKF(memcmp(a, b, 2 * N) == 0, "%s: span conversion differs from scalar", rt_isa_name(k));
    }
    k_set_isa(NULL);
    free(x); free(a); free(b);
}

/* ---------------------------------------------------------------- references */
static k_conv_shape shp(int n, int c, int h, int w, int k, int r, int s, int st, int pad)
{
    k_conv_shape sh = {.n = n, .c = c, .h = h, .w = w, .k = k, .r = r, .s = s, .stride = st, .pad = pad};
    k_conv_shape_init(&sh);
    return sh;
}

/* y, dx, dw, db in double; operands rounded to bf16 first when round. */
static void naive(const k_conv_shape *sh, const float *x, const float *w, const float *b, const float *g,
                  int round, double *y, double *dx, double *dw, double *db)
{
    long nx = (long)sh->n * sh->c * sh->h * sh->w, nw = (long)sh->k * sh->c * sh->r * sh->s;
    memset(dx, 0, sizeof(double) * nx);
    memset(dw, 0, sizeof(double) * nw);
    memset(db, 0, sizeof(double) * sh->k);
    for (int n = 0; n < sh->n; n++)
        for (int k = 0; k < sh->k; k++)
            for (int p = 0; p < sh->p; p++)
                for (int q = 0; q < sh->q; q++) {
                    long yi = (((long)n * sh->k + k) * sh->p + p) * sh->q + q;
                    double s = b[k], gv = round ? bf(g[yi]) : g[yi];
                    db[k] += g[yi];
                    for (int c = 0; c < sh->c; c++)
                        for (int r = 0; r < sh->r; r++)
                            for (int t = 0; t < sh->s; t++) {
                                int ih = p * sh->stride - sh->pad + r, iw = q * sh->stride - sh->pad + t;
                                if (ih < 0 || ih >= sh->h || iw < 0 || iw >= sh->w) continue;
                                long xi = (((long)n * sh->c + c) * sh->h + ih) * sh->w + iw;
                                long wi = (((long)k * sh->c + c) * sh->r + r) * sh->s + t;
                                double xv = round ? bf(x[xi]) : x[xi], wv = round ? bf(w[wi]) : w[wi];
                                s += xv * wv;
                                dx[xi] += gv * wv;
                                dw[wi] += gv * xv;
                            }
                    y[yi] = s;
                }
}

static double rel_err(const float *got, const double *ref, size_t n)
{
    double m = 1e-30, e = 0;
    for (size_t i = 0; i < n; i++) if (fabs(ref[i]) > m) m = fabs(ref[i]);
    for (size_t i = 0; i < n; i++) {
        double d = fabs(got[i] - ref[i]);
        if (!(d <= e)) e = d;
    }
    return e / m;
}

/* ResNet (3x3 same, stride 2, 1x1 projection, stem 7x7/2, small planes with many
 * channels), LeNet and TextCNN (conv1d as 1 x len) shapes. */
static const int cases[][9] = {
    {3, 16, 10, 10, 32, 3, 3, 1, 1}, {3, 16, 9, 9, 32, 3, 3, 2, 1}, {3, 16, 8, 8, 32, 1, 1, 2, 0},
    {2, 3, 12, 12, 16, 3, 3, 1, 1},  {2, 3, 20, 20, 8, 7, 7, 2, 3},  {2, 16, 7, 7, 130, 3, 3, 1, 1},
    {3, 1, 28, 28, 10, 5, 5, 1, 0},  {3, 10, 12, 12, 20, 5, 5, 1, 0}, {3, 32, 1, 20, 16, 1, 3, 1, 0},
    {9, 24, 6, 6, 13, 3, 3, 1, 1},
    {72, 16, 5, 5, 12, 3, 3, 1, 1}, /* 9 images a slot: two dW groups, the second accumulating */
    {2, 16, 48, 48, 32, 3, 3, 1, 1}, /* large: fwd results through the extended scratch, dX not */
};
#define NCASES (int)(sizeof cases / sizeof cases[0])

typedef struct { float *y, *dx, *dw, *db; } cout;

static cout run_conv(const k_conv_shape *sh, const float *x, const float *w, const float *b, const float *g)
{
    size_t nx = (size_t)sh->n * sh->c * sh->h * sh->w, nw = (size_t)sh->k * sh->c * sh->r * sh->s;
    size_t ny = (size_t)sh->n * sh->k * sh->p * sh->q;
    cout o = {malloc(4 * ny), malloc(4 * nx), malloc(4 * nw), malloc(4 * sh->k)};
    void *ws = malloc(k_conv2d_bf16_workspace(sh));
    k_conv2d_fwd_bf16(sh, x, w, b, o.y, ws);
    k_conv2d_bwd_bf16(sh, x, w, g, o.dx, o.dw, o.db, ws);
    free(ws);
    return o;
}

TEST(bf16_conv_matches_reference_on_every_isa)
{
    k_bf16_set_gemm("dpbf16"); /* the vdpbf16ps kernels on avx512bf16, even where auto avoids them */
    for (int ci = 0; ci < NCASES; ci++) {
        const int *a = cases[ci];
        k_conv_shape sh = shp(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8]);
        size_t nx = (size_t)sh.n * sh.c * sh.h * sh.w, nw = (size_t)sh.k * sh.c * sh.r * sh.s;
        size_t ny = (size_t)sh.n * sh.k * sh.p * sh.q;
        float *x = rnd(nx), *w = rnd(nw), *b = rnd(sh.k), *g = rnd(ny);
        double *ry = malloc(8 * ny), *rdx = malloc(8 * nx), *rdw = malloc(8 * nw), *rdb = malloc(8 * sh.k);
        double *fy = malloc(8 * ny), *fdx = malloc(8 * nx), *fdw = malloc(8 * nw), *fdb = malloc(8 * sh.k);
        naive(&sh, x, w, b, g, 1, ry, rdx, rdw, rdb);
        naive(&sh, x, w, b, g, 0, fy, fdx, fdw, fdb);
        cout first = {0};
        for (int k = 0; k < RT_NISA; k++) {
            if (k_set_isa(rt_isa_name(k)) != 0) continue;
            cout o = run_conv(&sh, x, w, b, g);
            const float *got[4] = {o.y, o.dx, o.dw, o.db};
            const double *r[4] = {ry, rdx, rdw, rdb}, *f[4] = {fy, fdx, fdw, fdb};
            size_t n[4] = {ny, nx, nw, (size_t)sh.k};
            for (int t = 0; t < 4; t++) {
                /* db is an fp32 sum of dy as it is on both paths (the device's too): the
                 * fp32 reference at fp32's tolerance. */
                double e = rel_err(got[t], r[t], n[t]), ef = rel_err(got[t], f[t], n[t]);
                CHECKF(t == 3 || e < 1e-4, "case %d %s output %d: rel err %.3g vs bf16-operand reference", ci,
                       rt_isa_name(k), t, e);
                CHECKF(ef < (t == 3 ? 1e-5 : 3e-2), "case %d %s output %d: rel err %.3g vs fp32 reference", ci,
                       rt_isa_name(k), t, ef);
                if (first.y) {
                    const float *pf[4] = {first.y, first.dx, first.dw, first.db};
                    double *tmp = malloc(8 * n[t]);
                    for (size_t i = 0; i < n[t]; i++) tmp[i] = pf[t][i];
                    double ea = rel_err(got[t], tmp, n[t]);
                    CHECKF(ea < (t == 3 ? 1e-5 : 1e-4), "case %d: %s and generic differ in output %d (%.3g)", ci,
                           rt_isa_name(k), t, ea);
                    free(tmp);
                }
            }
            if (!first.y) first = o;
            else { free(o.y); free(o.dx); free(o.dw); free(o.db); }
        }
        k_set_isa(NULL);
        CHECK(first.y != NULL);
        free(first.y); free(first.dx); free(first.dw); free(first.db);
        free(x); free(w); free(b); free(g);
        free(ry); free(rdx); free(rdw); free(rdb); free(fy); free(fdx); free(fdw); free(fdb);
    }
    k_bf16_set_gemm(NULL);
}

static void naive_linear(int n, int in, int out, const float *x, const float *w, const float *b,
                         const float *g, double *y, double *dx, double *dw)
{
    memset(dx, 0, sizeof(double) * n * in);
    memset(dw, 0, sizeof(double) * out * in);
    for (int i = 0; i < n; i++)
        for (int o = 0; o < out; o++) {
            double s = b[o], gv = bf(g[i * out + o]);
            for (int k = 0; k < in; k++) {
                s += bf(x[i * in + k]) * bf(w[o * in + k]);
                dx[i * in + k] += gv * bf(w[o * in + k]);
                dw[o * in + k] += gv * bf(x[i * in + k]);
            }
            y[i * out + o] = s;
        }
}

TEST(bf16_linear_matches_reference_on_every_isa)
{
    static const int lc[][3] = {{64, 320, 50}, {13, 33, 17}, {5, 300, 2}, {1, 1, 1}, {70, 40, 37}, {128, 64, 10}};
    for (int ci = 0; ci < 6; ci++) {
        int n = lc[ci][0], in = lc[ci][1], out = lc[ci][2];
        float *x = rnd((size_t)n * in), *w = rnd((size_t)out * in), *b = rnd(out), *g = rnd((size_t)n * out);
        double *ry = malloc(8L * n * out), *rdx = malloc(8L * n * in), *rdw = malloc(8L * out * in);
        naive_linear(n, in, out, x, w, b, g, ry, rdx, rdw);
        void *ws = malloc(k_linear_bf16_workspace(n, in, out));
        float *y = malloc(4L * n * out), *dx = malloc(4L * n * in), *dw = malloc(4L * out * in), *db = malloc(4L * out);
        int ran = 0;
        for (int k = 0; k < RT_NISA; k++) {
            if (k_set_isa(rt_isa_name(k)) != 0) continue;
            ran++;
            k_linear_fwd_bf16(n, in, out, x, w, b, y, ws);
            k_linear_bwd_bf16(n, in, out, x, w, g, dx, dw, db, ws);
            CHECKF(rel_err(y, ry, (size_t)n * out) < 1e-4, "linear %d %s y", ci, rt_isa_name(k));
            CHECKF(rel_err(dx, rdx, (size_t)n * in) < 1e-4, "linear %d %s dx", ci, rt_isa_name(k));
            CHECKF(rel_err(dw, rdw, (size_t)out * in) < 1e-4, "linear %d %s dw", ci, rt_isa_name(k));
            for (int o = 0; o < out; o++) {
                double s = 0;
                for (int i = 0; i < n; i++) s += g[i * out + o];
                CHECK_NEAR(db[o], s, 1e-4);
            }
        }
        k_set_isa(NULL);
        CHECK(ran >= 1);
        free(ws); free(y); free(dx); free(dw); free(db);
        free(x); free(w); free(b); free(g); free(ry); free(rdx); free(rdw);
    }
}

TEST(bf16_threads_agree_bitwise)
{
    k_bf16_set_gemm("dpbf16");
    for (int pass = 0; pass < 2; pass++) {
        k_set_isa(pass ? "avx2" : NULL); /* the native path, then the portable one */
        for (int ci = 0; ci < NCASES; ci++) {
            const int *a = cases[ci];
            k_conv_shape sh = shp(a[0] + 8, a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8]);
            size_t nx = (size_t)sh.n * sh.c * sh.h * sh.w, nw = (size_t)sh.k * sh.c * sh.r * sh.s;
            size_t ny = (size_t)sh.n * sh.k * sh.p * sh.q;
            float *x = rnd(nx), *w = rnd(nw), *b = rnd(sh.k), *g = rnd(ny);
            k_set_threads(1);
            cout r = run_conv(&sh, x, w, b, g);
            k_set_threads(3);
            cout o = run_conv(&sh, x, w, b, g);
            CHECKF(!memcmp(r.y, o.y, 4 * ny) && !memcmp(r.dx, o.dx, 4 * nx) && !memcmp(r.dw, o.dw, 4 * nw) &&
                       !memcmp(r.db, o.db, 4 * sh.k),
                   "case %d (%s): 1 and 3 threads differ", ci, k_isa());
            free(r.y); free(r.dx); free(r.dw); free(r.db); free(o.y); free(o.dx); free(o.dw); free(o.db);
            free(x); free(w); free(b); free(g);
        }
        int n = 96, in = 300, out = 70;
        float *x = rnd((size_t)n * in), *w = rnd((size_t)out * in), *b = rnd(out), *g = rnd((size_t)n * out);
        void *ws = malloc(k_linear_bf16_workspace(n, in, out));
        float *y[2], *dx[2], *dw[2], *db[2];
        for (int t = 0; t < 2; t++) {
            k_set_threads(t ? 3 : 1);
            y[t] = malloc(4L * n * out), dx[t] = malloc(4L * n * in), dw[t] = malloc(4L * out * in);
            db[t] = malloc(4L * out);
            k_linear_fwd_bf16(n, in, out, x, w, b, y[t], ws);
            k_linear_bwd_bf16(n, in, out, x, w, g, dx[t], dw[t], db[t], ws);
        }
        CHECK(!memcmp(y[0], y[1], 4L * n * out) && !memcmp(dx[0], dx[1], 4L * n * in) &&
              !memcmp(dw[0], dw[1], 4L * out * in) && !memcmp(db[0], db[1], 4L * out));
        k_set_threads(1);
    }
    k_set_isa(NULL);
    k_bf16_set_gemm(NULL);
}

TEST(bf16_amp_training_learns_and_flag_is_validated)
{
    const char *dir;
    char cmd[1024], out[16384];
    CHECKF(t_train_synthetic("amp", 0, 1, "--amp bf16", out, sizeof out, &dir) == 0, "%s", out);
    t_check_accuracy(out, 300, 270, "with --amp bf16");
    snprintf(cmd, sizeof cmd, "%s --data %s --amp fp16 2>&1", t_prog("ddprt-train"), dir);
    CHECK(t_sh(cmd, out, sizeof out) != 0);
    CHECKF(strstr(out, "--amp fp16 needs the CUDA build and a GPU") != NULL, "%s", out);
    snprintf(cmd, sizeof cmd, "%s --data %s --amp fp8 2>&1", t_prog("ddprt-train"), dir);
    CHECK(t_sh(cmd, out, sizeof out) != 0);
    CHECKF(strstr(out, "--amp: expected one of none|bf16|fp16, got 'fp8'") != NULL, "%s", out);
}

/* The native stride-1 path pads images with vpexpandw windows and compacts results
 * with vcompressps windows: the windows give the row-by-row layouts exactly, reads
 * stop at the end of the source (exact-size buffers: ASan checks it), and a bwd call
 * without dX (or without dW) gives the same bits as the full one. */
TEST(bf16_expand_compact_windows_match_row_layouts)
{
    static const int g[][4] = {{16, 28, 28, 1}, {64, 7, 7, 1}, {1, 28, 28, 1}, {3, 40, 40, 3}, {5, 6, 9, 2}, {2, 3, 20, 0}};
    for (int gi = 0; gi < 6; gi++) {
        int c = g[gi][0], h = g[gi][1], w = g[gi][2], pad = g[gi][3];
        long hp = h + 2 * pad, wp = w + 2 * pad, npix = c * hp * wp, total = (npix + wp + 128 + 31) / 32 * 32;
        long nx = (long)c * h * w;
        k_bf16_win *tab = malloc(sizeof *tab * (size_t)(total / 32));
        CHECK_EQ(k_bf16_pad_table(c, h, w, pad, pad, hp, wp, total, tab), total / 32);
        /* Every window: its set bits say which outputs take source elements, src how
         * many came before. */
        long n = 0;
        for (long t = 0; t < total / 32; t++) {
            CHECK_EQ(tab[t].src, n);
            for (int b = 0; b < 32; b++) {
                long e = 32 * t + b, ch = e / (hp * wp), r = e % (hp * wp) / wp - pad, q = e % wp - pad;
                int valid = ch < c && r >= 0 && r < h && q >= 0 && q < w;
                CHECKF(((tab[t].mask >> b) & 1) == (uint32_t)valid, "geometry %d window %ld bit %d", gi, t, b);
                n += valid;
            }
        }
        CHECK_EQ(n, nx);
        long p = hp - 2, qq = wp - 2, n32 = (p * wp + 31) / 32 * 32;
        k_bf16_win *ct = malloc(sizeof *ct * (size_t)(n32 / 16));
        CHECK_EQ(k_bf16_compact_table((int)p, (int)qq, wp, n32, ct), n32 / 16);
        n = 0;
        for (long t = 0; t < n32 / 16; t++) {
            CHECK_EQ(ct[t].src, n);
            for (int b = 0; b < 16; b++) {
                long e = 16 * t + b;
                int valid = e < p * wp && e % wp < qq;
                CHECK(((ct[t].mask >> b) & 1) == (uint32_t)valid);
                n += valid;
            }
        }
        CHECK_EQ(n, p * qq);
        if (k_set_isa("avx512bf16") == 0) {
            float *x = malloc(sizeof(float) * (size_t)nx);
            for (long i = 0; i < nx; i++) x[i] = frand();
            uint16_t *a = malloc(2 * (size_t)total), *b = malloc(2 * (size_t)total);
            memset(a, 0xff, 2 * (size_t)total);
            k_bf16_pad_expand(tab, total / 32, x, nx, a);
            k_bf16_pad_image(c, h, w, pad, (int)hp, (int)wp, x, b, total - npix);
            CHECKF(memcmp(a, b, 2 * (size_t)total) == 0, "geometry %d: expanded image differs", gi);
            free(x); free(a); free(b);
        }
        k_set_isa(NULL);
        free(tab); free(ct);
    }
    static const int cs[][9] = {{20, 16, 7, 7, 24, 3, 3, 1, 1}, {11, 32, 12, 12, 16, 3, 3, 1, 1}, {4, 1, 9, 9, 8, 3, 3, 1, 1}};
    for (int ci = 0; ci < 3; ci++) {
        const int *a = cs[ci];
        k_conv_shape sh = shp(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8]);
        size_t nx = (size_t)sh.n * sh.c * sh.h * sh.w, nw = (size_t)sh.k * sh.c * sh.r * sh.s;
        size_t ny = (size_t)sh.n * sh.k * sh.p * sh.q;
        float *x = rnd(nx), *w = rnd(nw), *gy = rnd(ny), *dx = malloc(4 * nx), *dw = malloc(4 * nw);
        float *dx1 = malloc(4 * nx), *dw1 = malloc(4 * nw);
        void *ws = malloc(k_conv2d_bf16_workspace(&sh));
        k_conv2d_bwd_bf16(&sh, x, w, gy, dx, dw, NULL, ws);
        k_conv2d_bwd_bf16(&sh, x, w, gy, NULL, dw1, NULL, ws);
        k_conv2d_bwd_bf16(&sh, x, w, gy, dx1, NULL, NULL, ws);
        CHECKF(!memcmp(dw, dw1, 4 * nw), "case %d: dW alone differs", ci);
        CHECKF(!memcmp(dx, dx1, 4 * nx), "case %d: dX alone differs", ci);
        free(x); free(w); free(gy); free(dx); free(dw); free(dx1); free(dw1); free(ws);
    }
}
