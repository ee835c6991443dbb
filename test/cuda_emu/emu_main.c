/* t-cuda-emu: the conv and linear kernels of kernels/cuda built with K_CUDA_EMULATE
 * (their operand functors, split-K slicing and epilogues run as host loops) against
 * the CPU kernels. It checks the implicit-GEMM index maths (gathers, strides, padding,
 * layouts) on machines without a GPU; test/test_cuda_port.c runs it. Exit 0 when all
 * shapes agree. emu_graph.c does the same for the layer-graph ops, emu_cpu.c against
 * the CPU kernels; emu_train.c and emu_ddp.c run whole training steps of the graph
 * executor's device path (nn/graph_cuda.c) on an emulated device (emu_port.c). */
#include "kernels/cuda/k_cuda.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int emu_graph_ops(int *cases);   /* emu_graph.c */
int emu_graph_train(int *cases); /* emu_train.c */
int emu_graph_ddp(int *cases);   /* emu_ddp.c */
int emu_cpu_kernels(int *cases); /* emu_cpu.c */

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

/* bias 0: no bias (ResNet's convs): b and db NULL, as the CPU kernels accept. */
static int conv_case(int n, int c, int h, int w, int k, int r, int s, int st, int pad, int bias)
{
    k_conv_shape sh = {.n = n, .c = c, .h = h, .w = w, .k = k, .r = r, .s = s, .stride = st, .pad = pad};
    k_conv_shape_init(&sh);
    size_t nx = (size_t)n * c * h * w, nw = (size_t)k * c * r * s, ny = (size_t)n * k * sh.p * sh.q;
    float *x = rnd(nx, 1), *wt = rnd(nw, 2), *b = rnd(k, 3), *dy = rnd(ny, 4);
    float *y = malloc(ny * 4 + 4), *dx = malloc(nx * 4 + 4), *dw = malloc(nw * 4 + 4), *db = malloc(k * 4 + 4);
    float *y2 = malloc(ny * 4 + 4), *dx2 = malloc(nx * 4 + 4), *dw2 = malloc(nw * 4 + 4), *db2 = malloc(k * 4 + 4);
    void *ws = aligned_alloc(64, (k_conv2d_workspace(&sh) + 64) / 64 * 64);
    void *ws2 = malloc(k_cuda_conv2d_workspace(&sh) + 64);
    float *bb = bias ? b : NULL, *dbb = bias ? db : NULL, *dbb2 = bias ? db2 : NULL;
    k_conv2d_fwd(&sh, x, wt, bb, y, ws);
    k_conv2d_bwd(&sh, x, wt, dy, dx, dw, dbb, ws);
    int bad = k_cuda_conv2d_fwd(&sh, x, wt, bb, y2, ws2, NULL) ||
              k_cuda_conv2d_bwd(&sh, x, wt, dy, dx2, dw2, dbb2, ws2, NULL);
    double e[4] = {relerr(y2, y, ny), relerr(dx2, dx, nx), relerr(dw2, dw, nw), bias ? relerr(db2, db, k) : 0};
    for (int i = 0; i < 4; i++) bad |= !(e[i] < 1e-4);
    if (bad)
        printf("FAIL conv n=%d c=%d %dx%d k=%d %dx%d stride=%d pad=%d bias=%d: rel err y %.2g dx %.2g dw %.2g db %.2g\n",
               n, c, h, w, k, r, s, st, pad, bias, e[0], e[1], e[2], e[3]);
    free(x); free(wt); free(b); free(dy); free(y); free(dx); free(dw); free(db);
    free(y2); free(dx2); free(dw2); free(db2); free(ws); free(ws2);
    return bad;
}

static int linear_case(int n, int in, int out, int bias)
{
    float *x = rnd((size_t)n * in, 5), *w = rnd((size_t)out * in, 6), *b = rnd(out, 7), *dy = rnd((size_t)n * out, 8);
    float *y = malloc((size_t)n * out * 4), *dx = malloc((size_t)n * in * 4), *dw = malloc((size_t)out * in * 4),
          *db = malloc(out * 4);
    float *y2 = malloc((size_t)n * out * 4), *dx2 = malloc((size_t)n * in * 4), *dw2 = malloc((size_t)out * in * 4),
          *db2 = malloc(out * 4);
    void *ws = malloc(k_cuda_linear_workspace(n, in, out) + 64);
    float *bb = bias ? b : NULL, *dbb = bias ? db : NULL, *dbb2 = bias ? db2 : NULL;
    k_linear_fwd(n, in, out, x, w, bb, y);
    k_linear_bwd(n, in, out, x, w, dy, dx, dw, dbb);
    int bad = k_cuda_linear_fwd(n, in, out, x, w, bb, y2, ws, NULL) ||
              k_cuda_linear_bwd(n, in, out, x, w, dy, dx2, dw2, dbb2, ws, NULL);
    double e[4] = {relerr(y2, y, (size_t)n * out), relerr(dx2, dx, (size_t)n * in), relerr(dw2, dw, (size_t)out * in),
                   bias ? relerr(db2, db, out) : 0};
    for (int i = 0; i < 4; i++) bad |= !(e[i] < 1e-4);
    if (bad)
        printf("FAIL linear n=%d in=%d out=%d bias=%d: rel err y %.2g dx %.2g dw %.2g db %.2g\n", n, in, out, bias, e[0],
               e[1], e[2], e[3]);
    free(x); free(w); free(b); free(dy); free(y); free(dx); free(dw); free(db);
    free(y2); free(dx2); free(dw2); free(db2); free(ws);
    return bad;
}

int main(void)
{
    int bad = 0, cases = 0;
    /* LeNet (split-K engages on the weight gradients), ResNet-like small batches,
     * strided and padded, non-square kernels, 1x1. */
    static const int convs[][9] = {
        {64, 1, 28, 28, 10, 5, 5, 1, 0}, {64, 10, 12, 12, 20, 5, 5, 1, 0}, {1, 1, 28, 28, 10, 5, 5, 1, 0},
        {2, 16, 14, 14, 32, 3, 3, 1, 1}, {2, 16, 15, 15, 24, 3, 3, 2, 1}, {3, 5, 9, 11, 7, 3, 2, 3, 2},
        {2, 8, 7, 7, 8, 1, 1, 1, 0},     {1, 3, 5, 5, 4, 5, 5, 1, 2},     {4, 6, 10, 8, 5, 4, 3, 2, 0},
        /* ResNet (with and without bias): the 7x7 s2 p3 stem (full 224 input), 1x1 s2
         * projections, 3x3 s2 p1. */
        {1, 3, 224, 224, 16, 7, 7, 2, 3}, {2, 4, 20, 21, 8, 7, 7, 2, 3},  {2, 16, 14, 14, 32, 1, 1, 2, 0},
        {2, 8, 15, 15, 16, 1, 1, 2, 0},   {2, 32, 8, 8, 64, 3, 3, 2, 1},
        /* TextCNN's conv1d over [n, embed, len] as 1 x width: widths 3, 4, 5. */
        {4, 128, 1, 64, 100, 1, 3, 1, 0}, {4, 128, 1, 64, 100, 1, 4, 1, 0}, {4, 128, 1, 64, 100, 1, 5, 1, 0},
    };
    for (size_t i = 0; i < sizeof convs / sizeof convs[0]; i++, cases++) {
        const int *v = convs[i];
        bad += conv_case(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], 1);
        if (i >= 9 && i < 14) bad += conv_case(v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], 0), cases++;
    }
    for (int i = 0; i < 20; i++, cases++) {
#define RN(lo, hi, j) ((lo) + (int)(k_rand_uniform(900 + i, j) * ((hi) - (lo) + 1)))
        int r = RN(1, 5, 0), s = RN(1, 5, 1), st = RN(1, 3, 2), pad = RN(0, 2, 3);
        bad += conv_case(RN(1, 4, 4), RN(1, 9, 5), RN(r, 16, 6), RN(s, 16, 7), RN(1, 17, 8), r, s, st, pad, i % 2);
    }
    static const int lins[][3] = {{64, 320, 50}, {64, 50, 10}, {1, 320, 50}, {1000, 320, 50}, {7, 33, 65}, {129, 1, 3}};
    for (size_t i = 0; i < sizeof lins / sizeof lins[0]; i++, cases++) bad += linear_case(lins[i][0], lins[i][1], lins[i][2], i != 4);
    bad += emu_graph_ops(&cases);
    bad += emu_cpu_kernels(&cases);
    bad += emu_graph_train(&cases);
    bad += emu_graph_ddp(&cases);
    printf("%d of %d shapes agree with the CPU kernels and references\n", cases - bad, cases);
    return bad != 0;
}
