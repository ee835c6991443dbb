/* ddprt-bench-kernels --model transformer: attention (online softmax, recompute in
 * backward) against the stored-probabilities version at GPT-2's head shapes, and the
 * fused classifier. One row per case: medians of `iters` rounds, the two attention
 * versions alternating within a round; the memory each keeps between forward and
 * backward besides y (lse, or the probabilities). */
#include "kernels/k.h"
#include "kernels/k_tfm.h"
#include "ports/posix/port.h"
#include "apps/bench-kernels/bench_tfm.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float *buf(size_t n, unsigned seed)
{
    float *p = malloc(n * sizeof(float) + 64);
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = (float)((seed >> 8) * 0x1p-24 - 0.5);
    }
    return p;
}

static int cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmpd);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void bench_tfm(int rounds)
{
    printf("median of %d rounds\n", rounds);
    printf("%-34s %10s %10s %10s %10s %12s %12s\n", "attention b,t,h,hd", "flash fwd", "flash bwd", "stored fwd",
           "stored bwd", "flash MiB", "stored MiB");
    static const int cases[][4] = {{8, 256, 6, 64}, {4, 256, 12, 64}, {1, 1024, 12, 64}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int B = cases[c][0], T = cases[c][1], H = cases[c][2], hd = cases[c][3], C = H * hd;
        size_t nq = (size_t)B * T * 3 * C, ny = (size_t)B * T * C, na = (size_t)B * H * T * T;
        float *qkv = buf(nq, 1), *dy = buf(ny, 2), *y = buf(ny, 3), *dq = buf(nq, 4);
        float *lse = buf((size_t)B * H * T, 5), *att = buf(na, 6);
        double t[4][64];
        if (rounds > 64) rounds = 64;
        for (int r = 0; r < rounds; r++) {
            double t0 = port_now_s();
            k_attention_fwd(B, T, H, hd, qkv, y, lse);
            double t1 = port_now_s();
            k_attention_bwd(B, T, H, hd, qkv, y, lse, dy, dq);
            double t2 = port_now_s();
            k_attention_stored_fwd(B, T, H, hd, qkv, y, att);
            double t3 = port_now_s();
            k_attention_stored_bwd(B, T, H, hd, qkv, att, dy, dq);
            double t4 = port_now_s();
            t[0][r] = t1 - t0; t[1][r] = t2 - t1; t[2][r] = t3 - t2; t[3][r] = t4 - t3;
        }
        char name[64];
        snprintf(name, sizeof name, "%d,%d,%d,%d", B, T, H, hd);
        /* saved between forward and backward beyond y: lse vs the probabilities */
        printf("%-34s %8.2fms %8.2fms %8.2fms %8.2fms %12.2f %12.2f\n", name, 1e3 * median(t[0], rounds),
               1e3 * median(t[1], rounds), 1e3 * median(t[2], rounds), 1e3 * median(t[3], rounds),
               (double)B * H * T * 4 / 1048576.0, (double)na * 4 / 1048576.0);
        free(qkv); free(dy); free(y); free(dq); free(lse); free(att);
    }
    printf("%-34s %10s %10s %12s\n", "classifier n,c,v", "fwd", "fwd+bwd", "ws MiB");
    static const int cl[][3] = {{2048, 384, 256}, {256, 768, 50257}};
    for (size_t c = 0; c < sizeof cl / sizeof cl[0]; c++) {
        int n = cl[c][0], C = cl[c][1], V = cl[c][2];
        float *x = buf((size_t)n * C, 7), *w = buf((size_t)V * C, 8), *dx = buf((size_t)n * C, 9);
        float *dw = buf((size_t)V * C, 10);
        int32_t *tg = malloc(sizeof(int32_t) * n);
        for (int i = 0; i < n; i++) tg[i] = (i * 7919) % V;
        size_t wsb = k_classifier_workspace(n, C, V);
        void *ws = malloc(wsb);
        double t[2][64];
        for (int r = 0; r < rounds; r++) {
            double t0 = port_now_s();
            k_classifier_fwd_bwd(n, C, V, x, w, tg, 1.0f / n, NULL, NULL, NULL, 0, ws);
            double t1 = port_now_s();
            k_classifier_fwd_bwd(n, C, V, x, w, tg, 1.0f / n, NULL, dx, dw, 0, ws);
            double t2 = port_now_s();
            t[0][r] = t1 - t0; t[1][r] = t2 - t1;
        }
        char name[64];
        snprintf(name, sizeof name, "%d,%d,%d", n, C, V);
        printf("%-34s %8.2fms %8.2fms %12.2f\n", name, 1e3 * median(t[0], rounds), 1e3 * median(t[1], rounds),
               (double)wsb / 1048576.0);
        free(x); free(w); free(dx); free(dw); free(tg); free(ws);
    }
}
