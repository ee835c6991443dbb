/* ddprt-bench-kernels: times every CPU kernel on LeNet's shapes and projects the
 * training step and epoch time from the sum.
 *   ddprt-bench-kernels [--threads N] [--batch N] [--iters N] [--isa generic|avx2|avx512]
 * Times are medians over --iters repeats (this machine is shared: medians resist noise). */
#include "kernels/k.h"
#if DDPRT_CUDA
#include "kernels/cuda/k_cuda.h"
#endif
#include "ports/posix/port.h"
#include "rt/version.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct bench_ctx {
    int b;                                 /* batch */
    k_conv_shape c1, c2;
    float *x, *w1, *b1, *y1, *p1, *r1, *w2, *b2, *y2, *d2, *p2, *r2;
    float *w3, *b3, *y3, *r3, *d3, *w4, *b4, *y4, *lp;
    float *g_lp, *g4, *g3, *gr2, *gp2, *gy2, *gr1, *gp1, *gy1;
    float *dw1, *db1, *dw2, *db2, *dw3, *db3, *dw4, *db4, *params, *grads, *mom;
    int32_t *i1, *i2, *labels;
    uint8_t *m2, *m3;
    void *ws1, *ws2;
    size_t nparams;
} bench_ctx;

static float *fbuf(size_t n)
{
    float *p = aligned_alloc(64, ((n * sizeof(float)) + 63) / 64 * 64);
    if (!p) { perror("alloc"); exit(1); }
    for (size_t i = 0; i < n; i++) p[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    return p;
}

static void ctx_init(bench_ctx *c, int b)
{
    memset(c, 0, sizeof *c);
    c->b = b;
    c->c1 = (k_conv_shape){b, 1, 28, 28, 10, 5, 5, 1, 0, 0, 0};
    c->c2 = (k_conv_shape){b, 10, 12, 12, 20, 5, 5, 1, 0, 0, 0};
    k_conv_shape_init(&c->c1);
    k_conv_shape_init(&c->c2);
    c->x = fbuf((size_t)b * 784);
    c->w1 = fbuf(250); c->b1 = fbuf(10); c->y1 = fbuf((size_t)b * 5760);
    c->p1 = fbuf((size_t)b * 1440); c->r1 = fbuf((size_t)b * 1440);
    c->w2 = fbuf(5000); c->b2 = fbuf(20); c->y2 = fbuf((size_t)b * 1280); c->d2 = fbuf((size_t)b * 1280);
    c->p2 = fbuf((size_t)b * 320); c->r2 = fbuf((size_t)b * 320);
    c->w3 = fbuf(16000); c->b3 = fbuf(50); c->y3 = fbuf((size_t)b * 50); c->r3 = fbuf((size_t)b * 50);
    c->d3 = fbuf((size_t)b * 50); c->w4 = fbuf(500); c->b4 = fbuf(10); c->y4 = fbuf((size_t)b * 10);
    c->lp = fbuf((size_t)b * 10);
    c->g_lp = fbuf((size_t)b * 10); c->g4 = fbuf((size_t)b * 50); c->g3 = fbuf((size_t)b * 50);
    c->gr2 = fbuf((size_t)b * 320); c->gp2 = fbuf((size_t)b * 320); c->gy2 = fbuf((size_t)b * 1280);
    c->gr1 = fbuf((size_t)b * 1440); c->gp1 = fbuf((size_t)b * 1440); c->gy1 = fbuf((size_t)b * 5760);
    c->dw1 = fbuf(250); c->db1 = fbuf(10); c->dw2 = fbuf(5000); c->db2 = fbuf(20);
    c->dw3 = fbuf(16000); c->db3 = fbuf(50); c->dw4 = fbuf(500); c->db4 = fbuf(10);
    c->nparams = 250 + 10 + 5000 + 20 + 16000 + 50 + 500 + 10;
    c->params = fbuf(c->nparams); c->grads = fbuf(c->nparams); c->mom = fbuf(c->nparams);
    c->i1 = malloc(sizeof(int32_t) * b * 1440); c->i2 = malloc(sizeof(int32_t) * b * 320);
    c->labels = malloc(sizeof(int32_t) * b);
    for (int i = 0; i < b; i++) c->labels[i] = i % 10;
    c->m2 = malloc((size_t)b * 20); c->m3 = malloc((size_t)b * 50);
    c->ws1 = aligned_alloc(64, (k_conv2d_workspace(&c->c1) + 63) / 64 * 64);
    c->ws2 = aligned_alloc(64, (k_conv2d_workspace(&c->c2) + 63) / 64 * 64);
    /* The pool kernels read idx written by a forward: run the forwards once. */
    k_maxpool2d_fwd(b, 10, 24, 24, 2, 2, c->y1, c->p1, c->i1);
    k_maxpool2d_fwd(b, 20, 8, 8, 2, 2, c->d2, c->p2, c->i2);
    k_dropout2d_fwd(b, 20, 64, 0.5f, 1, 0, c->y2, c->d2, c->m2);
    k_dropout_fwd((size_t)b * 50, 0.5f, 1, 0, c->r3, c->d3, c->m3);
}

/* One row of the table: each kernel is a numbered case so one function times them all. */
enum { C_CONV1_F, C_POOL1_F, C_RELU1_F, C_CONV2_F, C_DROP2_F, C_POOL2_F, C_RELU2_F, C_FC1_F,
       C_RELU3_F, C_DROP3_F, C_FC2_F, C_LSM_F, C_NLL,
       C_LSM_B, C_FC2_B, C_DROP3_B, C_RELU3_B, C_FC1_B, C_RELU2_B, C_POOL2_B, C_DROP2_B,
       C_CONV2_B, C_RELU1_B, C_POOL1_B, C_CONV1_B, C_SGD, C_COUNT };

static void run_case(bench_ctx *c, int k)
{
    int b = c->b;
    k_sgd_cfg sgd = {0.01f, 0.5f, 0.0f, 0.0f, 0};
    switch (k) {
    case C_CONV1_F: k_conv2d_fwd(&c->c1, c->x, c->w1, c->b1, c->y1, c->ws1); break;
    case C_POOL1_F: k_maxpool2d_fwd(b, 10, 24, 24, 2, 2, c->y1, c->p1, c->i1); break;
    case C_RELU1_F: k_relu_fwd((size_t)b * 1440, c->p1, c->r1); break;
    case C_CONV2_F: k_conv2d_fwd(&c->c2, c->r1, c->w2, c->b2, c->y2, c->ws2); break;
    case C_DROP2_F: k_dropout2d_fwd(b, 20, 64, 0.5f, 1, 0, c->y2, c->d2, c->m2); break;
    case C_POOL2_F: k_maxpool2d_fwd(b, 20, 8, 8, 2, 2, c->d2, c->p2, c->i2); break;
    case C_RELU2_F: k_relu_fwd((size_t)b * 320, c->p2, c->r2); break;
    case C_FC1_F: k_linear_fwd(b, 320, 50, c->r2, c->w3, c->b3, c->y3); break;
    case C_RELU3_F: k_relu_fwd((size_t)b * 50, c->y3, c->r3); break;
    case C_DROP3_F: k_dropout_fwd((size_t)b * 50, 0.5f, 1, 0, c->r3, c->d3, c->m3); break;
    case C_FC2_F: k_linear_fwd(b, 50, 10, c->d3, c->w4, c->b4, c->y4); break;
    case C_LSM_F: k_log_softmax_fwd(b, 10, c->y4, c->lp); break;
    case C_NLL: { long ok; (void)k_nll_loss_sum(b, 10, c->lp, c->labels, &ok); } break;
    case C_LSM_B: k_log_softmax_nll_bwd(b, 10, c->lp, c->labels, 1.0f / b, c->g_lp); break;
    case C_FC2_B: k_linear_bwd(b, 50, 10, c->d3, c->w4, c->g_lp, c->g4, c->dw4, c->db4); break;
    case C_DROP3_B: k_dropout_bwd((size_t)b * 50, 0.5f, c->m3, c->g4, c->g3); break;
    case C_RELU3_B: k_relu_bwd((size_t)b * 50, c->r3, c->g3, c->g3); break;
    case C_FC1_B: k_linear_bwd(b, 320, 50, c->r2, c->w3, c->g3, c->gr2, c->dw3, c->db3); break;
    case C_RELU2_B: k_relu_bwd((size_t)b * 320, c->r2, c->gr2, c->gp2); break;
    case C_POOL2_B: k_maxpool2d_bwd(b, 20, 8, 8, 2, 2, c->gp2, c->i2, c->gy2); break;
    case C_DROP2_B: k_dropout2d_bwd(b, 20, 64, 0.5f, c->m2, c->gy2, c->gy2); break;
    case C_CONV2_B: k_conv2d_bwd(&c->c2, c->r1, c->w2, c->gy2, c->gr1, c->dw2, c->db2, c->ws2); break;
    case C_RELU1_B: k_relu_bwd((size_t)b * 1440, c->r1, c->gr1, c->gp1); break;
    case C_POOL1_B: k_maxpool2d_bwd(b, 10, 24, 24, 2, 2, c->gp1, c->i1, c->gy1); break;
    case C_CONV1_B: k_conv2d_bwd(&c->c1, c->x, c->w1, c->gy1, NULL, c->dw1, c->db1, c->ws1); break;
    case C_SGD: k_sgd_step(c->nparams, &sgd, 0, c->params, c->grads, c->mom); break;
    }
}

/* name, shape, work (flop or bytes) for each case. */
static void describe(const bench_ctx *c, int k, const char **name, char *shape, double *work, int *is_flop)
{
    double b = c->b, conv1 = 2.0 * b * 10 * 576 * 25, conv2 = 2.0 * b * 20 * 64 * 250;
    *is_flop = 0;
    switch (k) {
#define D(ID, NAME, SHAPE, WORK, FLOP) case ID: *name = NAME; snprintf(shape, 64, SHAPE, c->b); *work = WORK; *is_flop = FLOP; break;
    D(C_CONV1_F, "conv1 fwd", "%dx1x28x28 k10 5x5", conv1, 1)
    D(C_POOL1_F, "maxpool1 fwd", "%dx10x24x24 /2", b * 5760 * 4 + b * 1440 * 8, 0)
    D(C_RELU1_F, "relu1 fwd", "%dx1440", b * 1440 * 8, 0)
    D(C_CONV2_F, "conv2 fwd", "%dx10x12x12 k20 5x5", conv2, 1)
    D(C_DROP2_F, "dropout2d fwd", "%dx20x8x8", b * 1280 * 8, 0)
    D(C_POOL2_F, "maxpool2 fwd", "%dx20x8x8 /2", b * 1280 * 4 + b * 320 * 8, 0)
    D(C_RELU2_F, "relu2 fwd", "%dx320", b * 320 * 8, 0)
    D(C_FC1_F, "fc1 fwd", "%dx320 -> 50", 2.0 * b * 320 * 50, 1)
    D(C_RELU3_F, "relu3 fwd", "%dx50", b * 50 * 8, 0)
    D(C_DROP3_F, "dropout fwd", "%dx50", b * 50 * 9, 0)
    D(C_FC2_F, "fc2 fwd", "%dx50 -> 10", 2.0 * b * 50 * 10, 1)
    D(C_LSM_F, "log_softmax fwd", "%dx10", b * 80, 0)
    D(C_NLL, "nll loss", "%dx10", b * 40, 0)
    D(C_LSM_B, "lsm+nll bwd", "%dx10", b * 80, 0)
    D(C_FC2_B, "fc2 bwd", "%dx50 -> 10", 4.0 * b * 50 * 10, 1)
    D(C_DROP3_B, "dropout bwd", "%dx50", b * 50 * 9, 0)
    D(C_RELU3_B, "relu3 bwd", "%dx50", b * 50 * 12, 0)
    D(C_FC1_B, "fc1 bwd", "%dx320 -> 50", 4.0 * b * 320 * 50, 1)
    D(C_RELU2_B, "relu2 bwd", "%dx320", b * 320 * 12, 0)
    D(C_POOL2_B, "maxpool2 bwd", "%dx20x8x8 /2", b * 1280 * 4 + b * 320 * 8, 0)
    D(C_DROP2_B, "dropout2d bwd", "%dx20x8x8", b * 1280 * 8, 0)
    D(C_CONV2_B, "conv2 bwd (dw,db,dx)", "%dx10x12x12 k20 5x5", 2 * conv2, 1)
    D(C_RELU1_B, "relu1 bwd", "%dx1440", b * 1440 * 12, 0)
    D(C_POOL1_B, "maxpool1 bwd", "%dx10x24x24 /2", b * 5760 * 4 + b * 1440 * 8, 0)
    D(C_CONV1_B, "conv1 bwd (dw,db)", "%dx1x28x28 k10 5x5", conv1, 1)
    case C_SGD: *name = "sgd momentum"; snprintf(shape, 64, "%zu params", c->nparams);
        *work = c->nparams * 20.0; break;
#undef D
    }
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void bench_batch(int b, int iters)
{
    bench_ctx c;
    ctx_init(&c, b);
    double *t = malloc(sizeof(double) * iters), total = 0, conv_total = 0, flop_total = 0;
    printf("\nbatch %d (median of %d)\n", b, iters);
    printf("%-22s %-22s %10s %10s\n", "kernel", "shape", "time_us", "rate");
    for (int k = 0; k < C_COUNT; k++) {
        for (int w = 0; w < 3; w++) run_case(&c, k);
        for (int i = 0; i < iters; i++) {
            int64_t t0 = port_now_ns();
            run_case(&c, k);
            t[i] = (port_now_ns() - t0) * 1e-3;
        }
        qsort(t, iters, sizeof *t, cmp_d);
        double med = t[iters / 2], work = 0;
        const char *name = "?";
        char shape[64];
        int is_flop = 0;
        describe(&c, k, &name, shape, &work, &is_flop);
        total += med;
        if (k == C_CONV1_F || k == C_CONV2_F || k == C_CONV1_B || k == C_CONV2_B) conv_total += med;
        if (is_flop) flop_total += work;
        printf("%-22s %-22s %10.1f %7.1f %s\n", name, shape, med, work / (med * 1e3),
               is_flop ? "GFLOP/s" : "GB/s");
    }
    long steps = (60000 + b - 1) / b;
    printf("LeNet step (fwd+bwd+sgd), sum of medians: %.1f us (convs %.1f us), %.1f GFLOP/s overall\n",
           total, conv_total, flop_total / (total * 1e3));
    printf("projected epoch (60000 samples, %ld steps): %.2f s\n", steps, total * steps * 1e-6);
    free(t);
}

static void usage(void)
{
    printf("usage: ddprt-bench-kernels [--device cpu|cuda] [--threads N] [--batch N] [--iters N] [--isa generic|avx2|avx512]\n"
           "Times each CPU kernel on LeNet's shapes (median of N repeats) and projects the\n"
           "training step and epoch time. Without --batch: batch 64 and 1024.\n");
}

int main(int argc, char **argv)
{
    if (rt_version_arg(argc, argv)) return 0;
    int threads = 1, batch = 0, iters = 0;
    /* --device cuda: the GPU table (kernels/cuda/k_cuda_bench.c), in CUDA builds. */
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--device") && !strcmp(argv[i + 1], "cuda")) {
#if DDPRT_CUDA
            return k_cuda_bench_main(argc, argv);
#else
            fprintf(stderr, "ddprt-bench-kernels: --device cuda: this build has no CUDA port (nvcc was not found at build time)\n");
            return 1;
#endif
        }
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { usage(); return 0; }
        if (!v) { fprintf(stderr, "ddprt-bench-kernels: %s needs a value\n", a); return 2; }
        if (!strcmp(a, "--threads")) threads = atoi(v);
        else if (!strcmp(a, "--batch")) batch = atoi(v);
        else if (!strcmp(a, "--iters")) iters = atoi(v);
        else if (!strcmp(a, "--device") && !strcmp(v, "cpu")) {}
        else if (!strcmp(a, "--isa")) {
            if (k_set_isa(v) != 0) {
                fprintf(stderr, "ddprt-bench-kernels: --isa %s: unknown or not supported by this CPU\n", v);
                return 2;
            }
        } else { fprintf(stderr, "ddprt-bench-kernels: unknown flag %s\n", a); usage(); return 2; }
        i++;
    }
    if (threads < 1 || batch < 0 || iters < 0) { fprintf(stderr, "ddprt-bench-kernels: bad value\n"); return 2; }
    k_set_threads(threads);
    printf("ddprt kernels: isa %s, threads %d\n", k_isa(), k_threads());
    if (batch) bench_batch(batch, iters ? iters : (batch >= 512 ? 21 : 101));
    else {
        bench_batch(64, iters ? iters : 101);
        bench_batch(1024, iters ? iters : 21);
    }
    return 0;
}
