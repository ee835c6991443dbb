/* Transformer kernels (kernels/k_tfm.h): LayerNorm, GELU, token + position embedding,
 * causal attention (flash and stored) and the fused classifier. Forwards against naive
 * double loops, backwards against central differences of those loops (small shapes)
 * and against their analytic double backward (larger shapes, T not a multiple of the
 * 64-row tiles); bitwise agreement across thread counts, agreement across ISA paths. */
#include "test/t.h"
#include "test/t_util.h"
#include "kernels/k.h"
#include "kernels/k_math.h"
#include "kernels/k_tfm.h"
#include "kernels/cpu/k_amx.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rs = 0x2545F4914F6CDD1DULL;
static double drand(void) /* uniform in [-1, 1) */
{
    rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17;
    return (double)(rs >> 40) * 0x1p-24 * 2.0 - 1.0;
}
static float *rnd(size_t n, double amp)
{
    float *p = malloc(n * sizeof *p + 64);
    for (size_t i = 0; i < n; i++) p[i] = (float)(amp * drand());
    return p;
}
static double *dbuf(size_t n) { return calloc(n + 1, sizeof(double)); }
static float *fz(size_t n) { return calloc(n + 16, sizeof(float)); }
static double *todbl(const float *x, size_t n)
{
    double *d = dbuf(n);
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}

/* Central differences of a scalar function f(x) (double), at every element of x. */
typedef double (*loss_fn)(void *ctx, const double *x);
static void fd_grad(loss_fn f, void *ctx, double *x, size_t n, double h, double *g)
{
    for (size_t i = 0; i < n; i++) {
        double x0 = x[i];
        x[i] = x0 + h;
        double lp = f(ctx, x);
        x[i] = x0 - h;
        double lm = f(ctx, x);
        x[i] = x0;
        g[i] = (lp - lm) / (2 * h);
    }
}

/* ---------------------------------------------------------------- LayerNorm */
typedef struct ln_ctx { int n, c; const double *x, *w, *b; const float *g; int which; } ln_ctx;

static void ln_ref(int n, int c, const double *x, const double *w, const double *b, double *y)
{
    for (int r = 0; r < n; r++) {
        double m = 0, v = 0;
        for (int i = 0; i < c; i++) m += x[r * c + i];
        m /= c;
        for (int i = 0; i < c; i++) v += (x[r * c + i] - m) * (x[r * c + i] - m);
        double rs = 1.0 / sqrt(v / c + 1e-5);
        for (int i = 0; i < c; i++) y[r * c + i] = (x[r * c + i] - m) * rs * w[i] + b[i];
    }
}

/* L = sum g * LN(x; w, b) as a function of x, w or b (which = 0, 1, 2) */
static double ln_loss(void *vc, const double *v)
{
    ln_ctx *k = vc;
    double *y = dbuf((size_t)k->n * k->c), L = 0;
    ln_ref(k->n, k->c, k->which == 0 ? v : k->x, k->which == 1 ? v : k->w, k->which == 2 ? v : k->b, y);
    for (long i = 0; i < (long)k->n * k->c; i++) L += y[i] * k->g[i];
    free(y);
    return L;
}

TEST(kernels_layernorm_fwd_bwd)
{
    static const int cases[][2] = {{3, 7}, {5, 16}, {4, 33}, {2, 100}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        int n = cases[ci][0], c = cases[ci][1];
        size_t nx = (size_t)n * c;
        float *x = rnd(nx, 2.0), *w = rnd(c, 1.0), *b = rnd(c, 0.5), *g = rnd(nx, 1.0);
        for (int i = 0; i < c; i++) w[i] += 1.5f;
        float *y = fz(nx), *mean = fz(n), *rstd = fz(n), *dx = fz(nx), *dw = fz(c), *db = fz(c);
        double *xd = todbl(x, nx), *wd = todbl(w, c), *bd = todbl(b, c), *ref = dbuf(nx);
        k_layernorm_fwd(n, c, x, w, b, 1e-5f, y, mean, rstd);
        ln_ref(n, c, xd, wd, bd, ref);
        CHECK_CLOSE("layernorm fwd", y, ref, nx, 2e-6);
        for (size_t i = 0; i < (size_t)c; i++) { dw[i] = 7.0f; db[i] = 7.0f; } /* overwritten */
        k_layernorm_bwd(n, c, x, w, mean, rstd, g, dx, dw, db);
        ln_ctx k = {n, c, xd, wd, bd, g, 0};
        double *fd = dbuf(nx);
        fd_grad(ln_loss, &k, xd, nx, 1e-4, fd);
        CHECK_CLOSE("layernorm dx", dx, fd, nx, 2e-5);
        k.which = 1;
        fd_grad(ln_loss, &k, wd, c, 1e-4, fd);
        CHECK_CLOSE("layernorm dw", dw, fd, c, 2e-5);
        k.which = 2;
        fd_grad(ln_loss, &k, bd, c, 1e-4, fd);
        CHECK_CLOSE("layernorm db", db, fd, c, 2e-5);
        /* dx over dy (in place) gives the same bits */
        float *g2 = malloc(nx * sizeof(float));
        memcpy(g2, g, nx * sizeof(float));
        k_layernorm_bwd(n, c, x, w, mean, rstd, g2, g2, NULL, NULL);
        CHECK(memcmp(g2, dx, nx * sizeof(float)) == 0);
        free(x); free(w); free(b); free(g); free(y); free(mean); free(rstd); free(dx); free(dw);
        free(db); free(xd); free(wd); free(bd); free(ref); free(fd); free(g2);
    }
}

/* ---------------------------------------------------------------- GELU */
static double gelu_ref(double x) { return 0.5 * x * (1 + tanh(sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }

TEST(kernels_gelu_fwd_bwd)
{
    enum { N = 1000 };
    float *x = rnd(N, 6.0), *y = fz(N), *g = rnd(N, 1.0), *dx = fz(N);
    x[0] = 0.0f; x[1] = -0.0f; x[2] = 1e-6f; x[3] = -1e-6f; x[4] = 30.0f; x[5] = -30.0f;
    x[6] = 1e-3f; x[7] = 200.0f; x[8] = -200.0f;
    double *ref = dbuf(N), *fd = dbuf(N);
    for (int i = 0; i < N; i++) ref[i] = gelu_ref(x[i]);
    k_gelu_fwd(N, x, y);
    CHECK_CLOSE("gelu fwd", y, ref, N, 1e-6);
    /* each element's own relative error too: the tails (tiny negative outputs) keep
     * theirs, up to the float rounding of the exponent's argument */
    for (int i = 0; i < N; i++)
        CHECKF(fabs(y[i] - ref[i]) <= 1e-5 * fabs(ref[i]) + 1e-30, "gelu(%g) = %.9g want %.9g", x[i], y[i], ref[i]);
    k_gelu_bwd(N, x, g, dx);
    for (int i = 0; i < N; i++) {
        double h = 1e-4 * (fabs(x[i]) > 1 ? fabs(x[i]) : 1);
        fd[i] = g[i] * (gelu_ref(x[i] + h) - gelu_ref(x[i] - h)) / (2 * h);
    }
    CHECK_CLOSE("gelu bwd", dx, fd, N, 1e-6);
    /* in place, and the same bits on every ISA path */
    float *y2 = fz(N), *d2 = fz(N);
    const char *isas[] = {"generic", "avx2", "avx512"};
    for (int k = 0; k < 3; k++) {
        if (k_set_isa(isas[k]) != 0) continue;
        memcpy(y2, x, N * sizeof(float));
        k_gelu_fwd(N, y2, y2);
        CHECKF(memcmp(y2, y, N * sizeof(float)) == 0, "gelu fwd on %s differs", isas[k]);
        memcpy(d2, g, N * sizeof(float));
        k_gelu_bwd(N, x, d2, d2);
        CHECKF(memcmp(d2, dx, N * sizeof(float)) == 0, "gelu bwd on %s differs", isas[k]);
    }
    k_set_isa(NULL);
    free(x); free(y); free(g); free(dx); free(ref); free(fd); free(y2); free(d2);
}

/* ---------------------------------------------------------------- SiLU */
static double silu_ref(double x) { return x / (1 + exp(-x)); }

/* Against the definition and finite differences; on every ISA path the same bits as
 * kernels/k_math.h's scalar k_silu / k_silu_grad (the device's math: the vector lanes
 * run its steps), GELU's likewise, over sizes that leave vector tails. */
TEST(kernels_silu_fwd_bwd_and_shared_math)
{
    enum { N = 1003 };
    float *x = rnd(N, 12.0), *y = fz(N), *g = rnd(N, 1.0), *dx = fz(N), *want = fz(N), *wd = fz(N);
    static const float edge[] = {0.0f, -0.0f, 1e-6f, -1e-6f, 30.0f, -30.0f, 86.9f, -86.9f, 87.5f, -87.5f,
                                 88.5f, -88.5f, 200.0f, -200.0f, INFINITY, -INFINITY};
    memcpy(x, edge, sizeof edge);
    double *ref = dbuf(N), *fd = dbuf(N);
    for (int i = 0; i < N; i++) ref[i] = silu_ref(x[i]);
    k_silu_fwd(N, x, y);
    for (int i = 16; i < N; i++) /* the finite ones away from exp's clamp */
        CHECKF(fabs(y[i] - ref[i]) <= 1e-6 * fabs(ref[i]) + 1e-30, "silu(%g) = %.9g want %.9g", x[i], y[i], ref[i]);
    CHECK(y[0] == 0.0f && y[4] == 30.0f && y[12] == 200.0f && isinf(y[14]) && y[14] > 0);
    k_silu_bwd(N, x, g, dx);
    for (int i = 16; i < N; i++) {
        double h = 1e-4 * (fabs(x[i]) > 1 ? fabs(x[i]) : 1);
        fd[i] = g[i] * (silu_ref(x[i] + h) - silu_ref(x[i] - h)) / (2 * h);
    }
    CHECK_CLOSE("silu bwd", dx + 16, fd + 16, N - 16, 1e-6);
    float *y2 = fz(N), *d2 = fz(N);
    const char *isas[] = {"generic", "avx2", "avx512"};
    for (int f = 0; f < 2; f++) { /* SiLU, GELU */
        for (int i = 0; i < N; i++) {
            want[i] = f ? k_gelu(x[i]) : k_silu(x[i]);
            wd[i] = f ? k_gelu_grad(x[i], g[i]) : k_silu_grad(x[i], g[i]);
        }
        for (int k = 0; k < 3; k++) {
            if (k_set_isa(isas[k]) != 0) continue;
            for (int n = N; n >= N - 17; n -= 17) { /* vector tails of every length */
                memcpy(y2, x, (size_t)n * sizeof(float)); /* in place */
                (f ? k_gelu_fwd : k_silu_fwd)((size_t)n, y2, y2);
                CHECKF(memcmp(y2, want, (size_t)n * sizeof(float)) == 0, "%s fwd n=%d on %s: not k_math.h's bits",
                       f ? "gelu" : "silu", n, isas[k]);
                memcpy(d2, g, (size_t)n * sizeof(float));
                (f ? k_gelu_bwd : k_silu_bwd)((size_t)n, x, d2, d2);
                CHECKF(memcmp(d2, wd, (size_t)n * sizeof(float)) == 0, "%s bwd n=%d on %s: not k_math.h's bits",
                       f ? "gelu" : "silu", n, isas[k]);
            }
        }
    }
    k_set_isa(NULL);
    free(x); free(y); free(g); free(dx); free(want); free(wd); free(ref); free(fd); free(y2); free(d2);
}

/* ---------------------------------------------------------------- embedding */
TEST(kernels_tok_pos_embed_fwd_bwd)
{
    int b = 3, len = 11, c = 70, vocab = 19;
    size_t nr = (size_t)b * len, ny = nr * c;
    int32_t *ids = malloc(sizeof(int32_t) * nr);
    for (size_t i = 0; i < nr; i++) ids[i] = (int32_t)((i * 7 + i / 4) % 13 + (i % 3) * 2); /* repeats */
    float *wte = rnd((size_t)vocab * c, 1.0), *wpe = rnd((size_t)len * c, 1.0), *y = fz(ny), *g = rnd(ny, 1.0);
    float *dwte = fz((size_t)vocab * c), *dwpe = fz((size_t)len * c);
    double *ref = dbuf(ny + (size_t)vocab * c);
    k_tok_pos_embed_fwd(b, len, c, ids, len, wte, wpe, y);
    for (size_t r = 0; r < nr; r++)
        for (int i = 0; i < c; i++) ref[r * c + i] = (double)(wte[ids[r] * c + i] + wpe[(r % len) * c + i]);
    CHECK_CLOSE("embed fwd", y, ref, ny, 0.0);
    /* L = sum g*y is linear in both tables: its gradients are these sums. */
    for (int acc = 0; acc < 2; acc++) {
        for (int i = 0; i < vocab * c; i++) dwte[i] = acc ? 0.25f * (float)(i % 5) : 3.0f;
        for (int i = 0; i < len * c; i++) dwpe[i] = 3.0f;
        k_tok_pos_embed_bwd(b, len, c, vocab, ids, len, g, dwte, dwpe, acc);
        for (int i = 0; i < vocab * c; i++) ref[i] = acc ? 0.25 * (i % 5) : 0.0;
        for (size_t r = 0; r < nr; r++)
            for (int i = 0; i < c; i++) ref[ids[r] * c + i] += g[r * c + i];
        CHECK_CLOSE(acc ? "embed dwte (acc)" : "embed dwte", dwte, ref, (size_t)vocab * c, 1e-6);
        memset(ref, 0, sizeof(double) * len * c);
        for (size_t r = 0; r < nr; r++)
            for (int i = 0; i < c; i++) ref[(r % len) * c + i] += g[r * c + i];
        CHECK_CLOSE("embed dwpe", dwpe, ref, (size_t)len * c, 1e-6);
    }
    free(ids); free(wte); free(wpe); free(y); free(g); free(dwte); free(dwpe); free(ref);
}

/* ---------------------------------------------------------------- Conv1D (w [in, out]) */
TEST(kernels_conv1d_hf_fwd_bwd)
{
    static const int cases[][3] = {{7, 5, 3}, {33, 17, 40}, {64, 48, 96}, {130, 70, 20}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        int n = cases[ci][0], in = cases[ci][1], out = cases[ci][2];
        float *x = rnd((size_t)n * in, 1.0), *w = rnd((size_t)in * out, 1.0), *b = rnd(out, 1.0), *g = rnd((size_t)n * out, 1.0);
        float *y = fz((size_t)n * out), *dx = fz((size_t)n * in), *dw = fz((size_t)in * out), *db = fz(out);
        void *ws = malloc(k_conv1d_hf_workspace(in, out));
        double *ry = dbuf((size_t)n * out), *rdx = dbuf((size_t)n * in), *rdw = dbuf((size_t)in * out), *rdb = dbuf(out);
        for (int r = 0; r < n; r++)
            for (int o = 0; o < out; o++) {
                double v = b[o];
                for (int i = 0; i < in; i++) v += (double)x[r * in + i] * w[i * out + o];
                ry[r * out + o] = v;
                rdb[o] += g[r * out + o];
                for (int i = 0; i < in; i++) {
                    rdx[r * in + i] += (double)g[r * out + o] * w[i * out + o];
                    rdw[i * out + o] += (double)g[r * out + o] * x[r * in + i];
                }
            }
        /* L = sum g * y is linear in x, w and b: these sums are its exact gradients */
        k_conv1d_hf_fwd(n, in, out, x, w, b, y);
        k_conv1d_hf_bwd(n, in, out, x, w, g, dx, dw, db, ws);
        CHECK_CLOSE("conv1d_hf fwd", y, ry, (size_t)n * out, 1e-6);
        CHECK_CLOSE("conv1d_hf dx", dx, rdx, (size_t)n * in, 1e-6);
        CHECK_CLOSE("conv1d_hf dw", dw, rdw, (size_t)in * out, 1e-6);
        CHECK_CLOSE("conv1d_hf db", db, rdb, out, 1e-6);
        /* the same bits on 1, 2 and 3 threads */
        float *dx2 = fz((size_t)n * in), *dw2 = fz((size_t)in * out), *y2 = fz((size_t)n * out);
        for (int t = 2; t <= 3; t++) {
            k_set_threads(t);
            k_conv1d_hf_fwd(n, in, out, x, w, b, y2);
            k_conv1d_hf_bwd(n, in, out, x, w, g, dx2, dw2, NULL, ws);
            CHECK(!memcmp(y, y2, sizeof(float) * (size_t)n * out) && !memcmp(dx, dx2, sizeof(float) * (size_t)n * in) &&
                  !memcmp(dw, dw2, sizeof(float) * (size_t)in * out));
        }
        k_set_threads(1);
        free(x); free(w); free(b); free(g); free(y); free(dx); free(dw); free(db); free(ws); free(ry); free(rdx);
        free(rdw); free(rdb); free(dx2); free(dw2); free(y2);
    }
}

/* ---------------------------------------------------------------- attention */
/* The naive stored-softmax attention in double: fwd (y, and p[b,h,t,t] if asked) and
 * its analytic backward. */
static void attn_ref_fwd(int B, int T, int H, int hd, const double *qkv, double *y, double *pst)
{
    int C = H * hd;
    double *p = dbuf(T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < T; i++) {
                const double *q = qkv + ((long)b * T + i) * 3 * C + h * hd;
                double mx = -INFINITY, s = 0;
                for (int j = 0; j <= i; j++) {
                    const double *k = qkv + ((long)b * T + j) * 3 * C + C + h * hd;
                    double d = 0;
                    for (int e = 0; e < hd; e++) d += q[e] * k[e];
                    p[j] = d / sqrt((double)hd);
                    if (p[j] > mx) mx = p[j];
                }
                for (int j = 0; j <= i; j++) s += (p[j] = exp(p[j] - mx));
                double *yo = y + ((long)b * T + i) * C + h * hd;
                for (int e = 0; e < hd; e++) yo[e] = 0;
                for (int j = 0; j <= i; j++) {
                    p[j] /= s;
                    if (pst) pst[(((long)b * H + h) * T + i) * T + j] = p[j];
                    const double *v = qkv + ((long)b * T + j) * 3 * C + 2 * C + h * hd;
                    for (int e = 0; e < hd; e++) yo[e] += p[j] * v[e];
                }
            }
    free(p);
}

static void attn_ref_bwd(int B, int T, int H, int hd, const double *qkv, const double *pst, const float *dy,
                         double *dqkv)
{
    int C = H * hd;
    double sc = 1.0 / sqrt((double)hd), *dp = dbuf(T);
    memset(dqkv, 0, sizeof(double) * (size_t)B * T * 3 * C);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < T; i++) {
                const double *p = pst + (((long)b * H + h) * T + i) * T;
                const float *g = dy + ((long)b * T + i) * C + h * hd;
                long qi = ((long)b * T + i) * 3 * C + h * hd;
                double dsum = 0;
                for (int j = 0; j <= i; j++) {
                    long vj = ((long)b * T + j) * 3 * C + 2 * C + h * hd;
                    dp[j] = 0;
                    for (int e = 0; e < hd; e++) {
                        dp[j] += g[e] * qkv[vj + e];
                        dqkv[vj + e] += p[j] * g[e];
                    }
                    dsum += p[j] * dp[j];
                }
                for (int j = 0; j <= i; j++) {
                    long kj = ((long)b * T + j) * 3 * C + C + h * hd;
                    double ds = p[j] * (dp[j] - dsum) * sc;
                    for (int e = 0; e < hd; e++) {
                        dqkv[qi + e] += ds * qkv[kj + e];
                        dqkv[kj + e] += ds * qkv[qi + e];
                    }
                }
            }
    free(dp);
}

typedef struct at_ctx { int b, t, h, hd; const float *g; } at_ctx;
static double attn_loss(void *vc, const double *qkv)
{
    at_ctx *k = vc;
    size_t ny = (size_t)k->b * k->t * k->h * k->hd;
    double *y = dbuf(ny), L = 0;
    attn_ref_fwd(k->b, k->t, k->h, k->hd, qkv, y, NULL);
    for (size_t i = 0; i < ny; i++) L += y[i] * k->g[i];
    free(y);
    return L;
}

/* Runs both kernels on one shape and checks them against the reference; `fd` also
 * checks the reference's backward against central differences. */
static void attn_case(int B, int T, int H, int hd, double amp, int fd)
{
    int C = H * hd;
    size_t nq = (size_t)B * T * 3 * C, ny = (size_t)B * T * C, na = (size_t)B * H * T * T;
    float *qkv = rnd(nq, amp), *g = rnd(ny, 1.0), *y = fz(ny), *lse = fz((size_t)B * H * T);
    float *dq = fz(nq), *ys = fz(ny), *att = fz(na), *dqs = fz(nq);
    double *qd = todbl(qkv, nq), *yr = dbuf(ny), *pr = dbuf(na), *dr = dbuf(nq);
    char what[96];
    attn_ref_fwd(B, T, H, hd, qd, yr, pr);
    attn_ref_bwd(B, T, H, hd, qd, pr, g, dr);
    if (fd) {
        double *f = dbuf(nq);
        at_ctx k = {B, T, H, hd, g};
        fd_grad(attn_loss, &k, qd, nq, 1e-5, f);
        snprintf(what, sizeof what, "attention ref bwd vs differences b%d t%d h%d hd%d", B, T, H, hd);
        double *tmp = f; /* compare double to double through a float copy of the reference */
        float *rf = fz(nq);
        for (size_t i = 0; i < nq; i++) rf[i] = (float)dr[i];
        CHECK_CLOSE(what, rf, tmp, nq, 1e-6);
        free(f); free(rf);
    }
    for (size_t i = 0; i < nq; i++) dq[i] = 5.0f; /* overwritten */
    k_attention_fwd(B, T, H, hd, qkv, y, lse);
    k_attention_bwd(B, T, H, hd, qkv, y, lse, g, dq);
    snprintf(what, sizeof what, "flash fwd b%d t%d h%d hd%d", B, T, H, hd);
    CHECK_CLOSE(what, y, yr, ny, 2e-6);
    snprintf(what, sizeof what, "flash bwd b%d t%d h%d hd%d", B, T, H, hd);
    CHECK_CLOSE(what, dq, dr, nq, 2e-5);
    for (size_t i = 0; i < nq; i++) dqs[i] = 5.0f;
    k_attention_stored_fwd(B, T, H, hd, qkv, ys, att);
    k_attention_stored_bwd(B, T, H, hd, qkv, att, g, dqs);
    snprintf(what, sizeof what, "stored fwd b%d t%d h%d hd%d", B, T, H, hd);
    CHECK_CLOSE(what, ys, yr, ny, 2e-6);
    snprintf(what, sizeof what, "stored att b%d t%d h%d hd%d", B, T, H, hd);
    CHECK_CLOSE(what, att, pr, na, 2e-6);
    snprintf(what, sizeof what, "stored bwd b%d t%d h%d hd%d", B, T, H, hd);
    CHECK_CLOSE(what, dqs, dr, nq, 2e-5);
    /* lse = log sum exp of the scaled scores */
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < T; i += 1 + T / 7) {
                double s = 0;
                const double *q = qd + ((long)b * T + i) * 3 * C + h * hd;
                for (int j = 0; j <= i; j++) {
                    const double *k = qd + ((long)b * T + j) * 3 * C + C + h * hd;
                    double d = 0;
                    for (int e = 0; e < hd; e++) d += q[e] * k[e];
                    s += exp(d / sqrt((double)hd));
                }
                CHECK_NEAR(lse[((long)b * H + h) * T + i], log(s), 2e-6);
            }
    free(qkv); free(g); free(y); free(lse); free(dq); free(ys); free(att); free(dqs);
    free(qd); free(yr); free(pr); free(dr);
}

TEST(kernels_attention_small_differences)
{
    attn_case(2, 5, 2, 4, 1.0, 1);
    attn_case(1, 9, 3, 8, 1.5, 1);
    attn_case(1, 1, 1, 3, 1.0, 1);
}

TEST(kernels_attention_vs_naive)
{
    /* T around and across the 64-row tiles; hd odd, small and GPT-2's 64; large
     * scores (amp 3 with hd 64: logits of tens) to exercise the running max. */
    static const int cases[][4] = {{2, 63, 2, 16}, {1, 64, 3, 8}, {2, 65, 2, 12}, {1, 130, 2, 7},
                                   {1, 200, 1, 64}, {1, 129, 4, 33}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        attn_case(cases[i][0], cases[i][1], cases[i][2], cases[i][3], i == 4 ? 3.0 : 1.0, 0);
}

/* --amp bf16's attention (AMX tiles where the CPU has them): against the double
 * reference at bf16's accuracy (products of bf16-rounded operands, fp32 sums), across
 * the 64-row tiles; on an AMX CPU it must not be the fp32 kernel's result. */
#define BF16_FWD_TOL 1e-2 /* observed 2-3e-3 (bf16 operands); fp32 kernels: 2e-6 */
#define BF16_BWD_TOL 1e-2
static void attn_bf16_case(int B, int T, int H, int hd, double fwd_tol, double bwd_tol)
{
    int C = H * hd;
    size_t nq = (size_t)B * T * 3 * C, ny = (size_t)B * T * C, na = (size_t)B * H * T * T;
    float *qkv = rnd(nq, 1.0), *g = rnd(ny, 1.0), *y = fz(ny), *lse = fz((size_t)B * H * T), *dq = fz(nq);
    float *y32 = fz(ny), *lse32 = fz((size_t)B * H * T);
    double *qd = todbl(qkv, nq), *yr = dbuf(ny), *pr = dbuf(na), *dr = dbuf(nq);
    char what[96];
    attn_ref_fwd(B, T, H, hd, qd, yr, pr);
    attn_ref_bwd(B, T, H, hd, qd, pr, g, dr);
    for (size_t i = 0; i < nq; i++) dq[i] = 5.0f; /* overwritten */
    k_attention_fwd_bf16(B, T, H, hd, qkv, y, lse);
    k_attention_bwd_bf16(B, T, H, hd, qkv, y, lse, g, dq);
    snprintf(what, sizeof what, "bf16 flash fwd b%d t%d h%d hd%d", B, T, H, hd);
    CHECK_CLOSE(what, y, yr, ny, fwd_tol);
    snprintf(what, sizeof what, "bf16 flash bwd b%d t%d h%d hd%d", B, T, H, hd);
    CHECK_CLOSE(what, dq, dr, nq, bwd_tol);
    k_attention_fwd(B, T, H, hd, qkv, y32, lse32);
    if (k_amx_ok()) CHECKF(memcmp(y, y32, ny * sizeof(float)) != 0, "bf16 attention gave fp32's bits (t %d)", T);
    free(qkv); free(g); free(y); free(lse); free(dq); free(y32); free(lse32);
    free(qd); free(yr); free(pr); free(dr);
}

TEST(kernels_attention_bf16_vs_naive)
{
    if (!k_amx_ok()) t_note("no AMX-BF16: --amp bf16's attention runs the fp32 kernels here");
    static const int cases[][4] = {{2, 63, 2, 16}, {1, 130, 2, 64}, {1, 129, 3, 33}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        attn_bf16_case(cases[i][0], cases[i][1], cases[i][2], cases[i][3], BF16_FWD_TOL, BF16_BWD_TOL);
}

/* ---------------------------------------------------------------- classifier */
static double cl_ref(int n, int c, int v, const double *x, const double *w, const int32_t *t, double scale,
                     double *dx, double *dw, double *rows)
{
    double L = 0, *lg = dbuf(v);
    if (dx) memset(dx, 0, sizeof(double) * n * c);
    if (dw) memset(dw, 0, sizeof(double) * (size_t)v * c);
    for (int r = 0; r < n; r++) {
        if (rows) rows[r] = 0;
        if (t[r] < 0 || t[r] >= v) continue;
        double mx = -INFINITY, s = 0;
        for (int j = 0; j < v; j++) {
            double d = 0;
            for (int i = 0; i < c; i++) d += x[r * c + i] * w[(long)j * c + i];
            lg[j] = d;
            if (d > mx) mx = d;
        }
        for (int j = 0; j < v; j++) s += exp(lg[j] - mx);
        double lr = mx + log(s) - lg[t[r]];
        L += lr;
        if (rows) rows[r] = lr;
        if (!dx) continue;
        for (int j = 0; j < v; j++) {
            double gj = scale * (exp(lg[j] - mx) / s - (j == t[r]));
            for (int i = 0; i < c; i++) {
                dx[r * c + i] += gj * w[(long)j * c + i];
                dw[(long)j * c + i] += gj * x[r * c + i];
            }
        }
    }
    free(lg);
    return L;
}

typedef struct cl_ctx { int n, c, v, which; const double *x, *w; const int32_t *t; double scale; } cl_ctx;
static double cl_loss(void *vc, const double *p)
{
    cl_ctx *k = vc;
    return k->scale * cl_ref(k->n, k->c, k->v, k->which ? k->x : p, k->which ? p : k->w, k->t, 0, NULL, NULL, NULL);
}

static void cl_case(int n, int c, int v, double amp, int fd)
{
    size_t nx = (size_t)n * c, nw = (size_t)v * c;
    float *x = rnd(nx, amp), *w = rnd(nw, amp), *dx = fz(nx), *dw = fz(nw), *rows = fz(n);
    int32_t *t = malloc(sizeof(int32_t) * n);
    for (int r = 0; r < n; r++) t[r] = r % 7 == 3 ? -100 : (int32_t)((r * 2654435761u) % (unsigned)v);
    double *xd = todbl(x, nx), *wd = todbl(w, nw), *rdx = dbuf(nx), *rdw = dbuf(nw), *rr = dbuf(n);
    double scale = 1.0 / n;
    void *ws = malloc(k_classifier_workspace(n, c, v));
    double L = k_classifier_fwd_bwd(n, c, v, x, w, t, (float)scale, rows, dx, dw, 0, ws);
    double Lr = cl_ref(n, c, v, xd, wd, t, scale, rdx, rdw, rr);
    char what[96];
    CHECK_NEAR(L, Lr, 1e-6);
    snprintf(what, sizeof what, "classifier rows n%d c%d v%d", n, c, v);
    CHECK_CLOSE(what, rows, rr, n, 1e-6);
    snprintf(what, sizeof what, "classifier dx n%d c%d v%d", n, c, v);
    CHECK_CLOSE(what, dx, rdx, nx, 1e-5);
    snprintf(what, sizeof what, "classifier dw n%d c%d v%d", n, c, v);
    CHECK_CLOSE(what, dw, rdw, nw, 1e-5);
    /* forward alone: the same loss bits; acc_dw adds */
    CHECK(k_classifier_fwd_bwd(n, c, v, x, w, t, (float)scale, NULL, NULL, NULL, 0, ws) == L);
    float *dw2 = malloc(nw * sizeof(float));
    for (size_t i = 0; i < nw; i++) dw2[i] = 1.0f;
    k_classifier_fwd_bwd(n, c, v, x, w, t, (float)scale, NULL, NULL, dw2, 1, ws);
    for (size_t i = 0; i < nw; i++) rdw[i] += 1.0;
    CHECK_CLOSE("classifier dw acc", dw2, rdw, nw, 1e-5);
    if (fd) {
        cl_ctx k = {n, c, v, 0, xd, wd, t, scale};
        double *f = dbuf(nw > nx ? nw : nx);
        fd_grad(cl_loss, &k, xd, nx, 1e-5, f);
        CHECK_CLOSE("classifier dx vs differences", dx, f, nx, 1e-5);
        k.which = 1;
        fd_grad(cl_loss, &k, wd, nw, 1e-5, f);
        CHECK_CLOSE("classifier dw vs differences", dw, f, nw, 1e-5);
        free(f);
    }
    free(x); free(w); free(dx); free(dw); free(rows); free(t); free(xd); free(wd); free(rdx);
    free(rdw); free(rr); free(ws); free(dw2);
}

TEST(kernels_classifier_fused)
{
    cl_case(9, 5, 13, 1.0, 1);
    cl_case(20, 19, 300, 2.0, 0);
    /* a vocabulary big enough for several row blocks (50000 -> 80 rows a block) */
    cl_case(170, 6, 50000, 1.0, 0);
}

/* ---------------------------------------------------------------- threads and ISAs */
enum { TB = 2, TT = 97, TH = 3, THD = 20, TC = TH * THD, TV = 700 };
#define T_NR ((size_t)TB * TT)
#define T_OUT (T_NR * TC * 9 + 2 * TC + T_NR * 2 + (size_t)TB * TH * TT + (size_t)TV * TC + 1)

static void tfm_all(const float *x, const float *qkv, const float *g3, const float *w, const int32_t *ids,
                    const float *wte, float *o)
{
    size_t nx = T_NR * TC;
    float *y = o, *mean = y + nx, *rstd = mean + T_NR, *dx = rstd + T_NR, *dw = dx + nx, *db = dw + TC;
    k_layernorm_fwd((int)T_NR, TC, x, w, w + TC, 1e-5f, y, mean, rstd);
    k_layernorm_bwd((int)T_NR, TC, x, w, mean, rstd, g3, dx, dw, db);
    float *gy = db + TC, *gdx = gy + nx;
    k_gelu_fwd(nx, x, gy);
    k_gelu_bwd(nx, x, g3, gdx);
    float *ay = gdx + nx, *lse = ay + nx, *dqkv = lse + (size_t)TB * TH * TT;
    k_attention_fwd(TB, TT, TH, THD, qkv, ay, lse);
    k_attention_bwd(TB, TT, TH, THD, qkv, ay, lse, g3, dqkv);
    float *cdx = dqkv + 3 * nx, *cdw = cdx + nx, *loss = cdw + (size_t)TV * TC;
    void *ws = malloc(k_classifier_workspace((int)T_NR, TC, TV));
    *loss = (float)k_classifier_fwd_bwd((int)T_NR, TC, TV, x, wte, ids, 0.01f, NULL, cdx, cdw, 0, ws);
    free(ws);
}

static void tfm_inputs(float **x, float **qkv, float **g3, float **w, int32_t **ids, float **wte)
{
    size_t nx = T_NR * TC;
    *x = rnd(nx, 2.0);
    *qkv = rnd(3 * nx, 1.0);
    *g3 = rnd(3 * nx, 1.0);
    *w = rnd(2 * TC, 1.0);
    *wte = rnd((size_t)TV * TC, 0.5);
    *ids = malloc(sizeof(int32_t) * T_NR);
    for (size_t i = 0; i < T_NR; i++) (*ids)[i] = (int32_t)((i * 37) % TV);
}

TEST(kernels_tfm_threads_bitwise)
{
    float *x, *qkv, *g3, *w, *wte;
    int32_t *ids;
    tfm_inputs(&x, &qkv, &g3, &w, &ids, &wte);
    float *ref = fz(T_OUT), *o = fz(T_OUT);
    k_set_threads(1);
    tfm_all(x, qkv, g3, w, ids, wte, ref);
    for (int t = 2; t <= 3; t++) {
        k_set_threads(t);
        memset(o, 0, T_OUT * sizeof(float));
        tfm_all(x, qkv, g3, w, ids, wte, o);
        CHECKF(memcmp(o, ref, T_OUT * sizeof(float)) == 0, "%d threads differ from 1", t);
    }
    k_set_threads(1);
    free(x); free(qkv); free(g3); free(w); free(ids); free(wte); free(ref); free(o);
}

TEST(kernels_tfm_isa_paths_agree)
{
    const char *isas[] = {"generic", "avx2", "avx512"};
    float *x, *qkv, *g3, *w, *wte;
    int32_t *ids;
    tfm_inputs(&x, &qkv, &g3, &w, &ids, &wte);
    float *ref = fz(T_OUT), *o = fz(T_OUT);
    CHECK(k_set_isa("generic") == 0);
    tfm_all(x, qkv, g3, w, ids, wte, ref);
    double *rd = todbl(ref, T_OUT);
    for (int i = 1; i < 3; i++) {
        if (k_set_isa(isas[i]) != 0) continue; /* not on this CPU */
        tfm_all(x, qkv, g3, w, ids, wte, o);
        CHECK_CLOSE(isas[i], o, rd, T_OUT, 2e-5);
    }
    k_set_isa(NULL);
    free(x); free(qkv); free(g3); free(w); free(ids); free(wte); free(ref); free(o); free(rd);
}
