/* ddprt-bench-kernels: times every CPU kernel on LeNet's shapes and projects the
 * training step and epoch time from the sum; --model resnet20|resnet18 times the
 * ResNet conv shapes and layer kernels instead, --model linear the models' linear
 * layers and square GEMMs.
 *   ddprt-bench-kernels [--model M] [--threads N] [--batch N] [--iters N] [--isa generic|avx2|avx512]
 * Times are medians over --iters repeats (this machine is shared: medians resist noise).
 * Every rate is also printed as a share of the machine's measured limits (k_probe.c):
 * GFLOP/s of the FMA peak of the ISA in use, GB/s of the copy bandwidth between two
 * buffers of the kernel's size (x threads when more than one runs). */
#include "kernels/k.h"
#include "rt/isa.h"
#include "apps/bench-kernels/bench_tfm.h"
#if DDPRT_CUDA
#include "apps/bench-kernels/bench_kernels.h"
#endif
#include "ports/posix/port.h"
#include "rt/args.h"
#include "rt/env.h"
#include "rt/version.h"
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The measured limits: FMA peak (per thread, times the thread count) and copy
 * bandwidth per buffer size (cached: the LeNet table repeats sizes). */
static double fma_peak;
static double copy_at(size_t bytes)
{
    static size_t sz[64];
    static double bw[64];
    static int n;
    for (int i = 0; i < n; i++)
        if (sz[i] == bytes) return bw[i];
    double g = k_probe_copy_gbps(bytes);
    if (n < 64) sz[n] = bytes, bw[n++] = g;
    return g;
}
/* 100 * rate / limit: GFLOP/s against the FMA peak, GB/s against the copy bandwidth of
 * `bytes` per buffer (a kernel reading a and writing b moves both, as the copy does). */
static double pct_flop(double gflops) { return fma_peak > 0 ? 100.0 * gflops / (fma_peak * k_threads()) : 0; }
static double pct_copy(double gbps, size_t bytes)
{
    double c = copy_at(bytes);
    return c > 0 ? 100.0 * gbps / c : 0;
}

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

/* With one thread, the calling thread's CPU time: other jobs on this shared machine
 * then only slow us through caches and memory, not through preemption. */
static int use_cpu_clock, force_wall;
static const char *conv_filter; /* --conv: only the convs whose name contains it */
static int with_bf16 = 1;       /* --bf16 off: skip the bf16 columns */
static int with_convs = 1;      /* --convs off: resnet's layer table only */
static int64_t bench_now_ns(void)
{
    if (!use_cpu_clock) return port_now_ns();
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void bench_batch(int b, int iters)
{
    bench_ctx c;
    ctx_init(&c, b);
    double *t = malloc(sizeof(double) * iters), total = 0, conv_total = 0, flop_total = 0;
    printf("\nbatch %d (median of %d, %s; %% = of the FMA peak, or of the copy bandwidth at the kernel's size)\n",
           b, iters, use_cpu_clock ? "thread CPU time" : "wall time");
    printf("%-22s %-22s %10s %15s %6s\n", "kernel", "shape", "time_us", "rate", "%");
    for (int k = 0; k < C_COUNT; k++) {
        for (int w = 0; w < 3; w++) run_case(&c, k);
        for (int i = 0; i < iters; i++) {
            int64_t t0 = bench_now_ns();
            run_case(&c, k);
            t[i] = (bench_now_ns() - t0) * 1e-3;
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
        double rate = work / (med * 1e3);
        printf("%-22s %-22s %10.1f %7.1f %-7s %5.0f%%\n", name, shape, med, rate, is_flop ? "GFLOP/s" : "GB/s",
               is_flop ? pct_flop(rate) : pct_copy(rate, (size_t)(work / 2)));
    }
    long steps = (60000 + b - 1) / b;
    printf("LeNet step (fwd+bwd+sgd), sum of medians: %.1f us (convs %.1f us), %.1f GFLOP/s overall (%.0f%% of peak)\n",
           total, conv_total, flop_total / (total * 1e3), pct_flop(flop_total / (total * 1e3)));
    printf("projected epoch (60000 samples, %ld steps): %.2f s\n", steps, total * steps * 1e-6);
    free(t);
}

/* ---- ResNet conv shapes: one row per distinct conv (x how often the model uses
 * it), forward and backward (dx, dw; no bias as torchvision), then the model's conv
 * total weighted by those counts, and the memory-bound layer kernels. */
typedef struct rn_conv { const char *name; int c, h, k, r, stride, pad, count, need_dx; } rn_conv;

static const rn_conv rn20[] = {
    {"conv1 (stem)", 1, 28, 16, 3, 1, 1, 1, 0},
    {"layer1 3x3", 16, 28, 16, 3, 1, 1, 6, 1},
    {"layer2.0 3x3 s2", 16, 28, 32, 3, 2, 1, 1, 1},
    {"layer2.0 downsample", 16, 28, 32, 1, 2, 0, 1, 1},
    {"layer2 3x3", 32, 14, 32, 3, 1, 1, 5, 1},
    {"layer3.0 3x3 s2", 32, 14, 64, 3, 2, 1, 1, 1},
    {"layer3.0 downsample", 32, 14, 64, 1, 2, 0, 1, 1},
    {"layer3 3x3", 64, 7, 64, 3, 1, 1, 5, 1},
};
static const rn_conv rn18[] = {
    {"conv1 7x7 s2 (stem)", 3, 224, 64, 7, 2, 3, 1, 0},
    {"layer1 3x3", 64, 56, 64, 3, 1, 1, 4, 1},
    {"layer2.0 3x3 s2", 64, 56, 128, 3, 2, 1, 1, 1},
    {"layer2.0 downsample", 64, 56, 128, 1, 2, 0, 1, 1},
    {"layer2 3x3", 128, 28, 128, 3, 1, 1, 3, 1},
    {"layer3.0 3x3 s2", 128, 28, 256, 3, 2, 1, 1, 1},
    {"layer3.0 downsample", 128, 28, 256, 1, 2, 0, 1, 1},
    {"layer3 3x3", 256, 14, 256, 3, 1, 1, 3, 1},
    {"layer4.0 3x3 s2", 256, 14, 512, 3, 2, 1, 1, 1},
    {"layer4.0 downsample", 256, 14, 512, 1, 2, 0, 1, 1},
    {"layer4 3x3", 512, 7, 512, 3, 1, 1, 3, 1},
};


static double median_us(int iters, void (*fn)(void *), void *arg)
{
    double *t = malloc(sizeof(double) * iters), m;
    fn(arg); /* warm-up (page faults, caches) */
    for (int i = 0; i < iters; i++) {
        int64_t t0 = bench_now_ns();
        fn(arg);
        t[i] = (bench_now_ns() - t0) * 1e-3;
    }
    qsort(t, iters, sizeof *t, cmp_d);
    m = t[iters / 2];
    free(t);
    return m;
}

typedef struct rn_arg {
    k_conv_shape sh;
    float *x, *w, *y, *dx, *dw;
    void *ws;
    int need_dx, op, bf16;
    size_t n;
    int32_t *idx;
    float *a, *b, *c, *d, *e;
} rn_arg;

static void rn_conv_fwd(void *p)
{
    rn_arg *a = p;
    if (a->bf16) k_conv2d_fwd_bf16(&a->sh, a->x, a->w, NULL, a->y, a->ws);
    else k_conv2d_fwd(&a->sh, a->x, a->w, NULL, a->y, a->ws);
}
static void rn_conv_bwd(void *p)
{
    rn_arg *a = p;
    if (a->bf16) k_conv2d_bwd_bf16(&a->sh, a->x, a->w, a->y, a->need_dx ? a->dx : NULL, a->dw, NULL, a->ws);
    else k_conv2d_bwd(&a->sh, a->x, a->w, a->y, a->need_dx ? a->dx : NULL, a->dw, NULL, a->ws);
}

/* Memory-bound kernels on one activation shape [n, c, h, w]. */
enum { M_BN_STATS, M_BN_FWD, M_BN_SUMS, M_BN_DX, M_RELU_F, M_RELU_B, M_ADD, M_POOL_F, M_POOL_B,
       M_GAP_F, M_GAP_B, M_COUNT };
static void rn_mem(void *p)
{
    rn_arg *a = p;
    const k_conv_shape *s = &a->sh;
    int hw = s->h * s->w;
    switch (a->op) {
    case M_BN_STATS: k_bn_stats(s->n, s->c, hw, a->x, a->c, a->d); break;
    case M_BN_FWD: k_bn_fwd(s->n, s->c, hw, a->x, a->c, a->d, a->e, a->e, a->y); break;
    case M_BN_SUMS: k_bn_bwd_sums(s->n, s->c, hw, a->x, a->c, a->d, a->dx, a->e, a->e + s->c); break;
    case M_BN_DX: k_bn_bwd_dx(s->n, s->c, hw, a->x, a->c, a->d, a->e, a->e, a->e + s->c,
                              (double)s->n * hw, a->dx, a->y); break;
    case M_RELU_F: k_relu_fwd(a->n, a->x, a->y); break;
    case M_RELU_B: k_relu_bwd(a->n, a->x, a->dx, a->y); break;
    case M_ADD: k_add(a->n, a->x, a->dx, a->y); break;
    case M_POOL_F: k_maxpool2d_pad_fwd(s->n, s->c, s->h, s->w, 3, 2, 1, a->x, a->y, a->idx); break;
    case M_POOL_B: k_maxpool2d_pad_bwd(s->n, s->c, s->h, s->w, 3, 2, 1, a->y, a->idx, a->dx); break;
    case M_GAP_F: k_global_avgpool_fwd(s->n, s->c, hw, a->x, a->y); break;
    case M_GAP_B: k_global_avgpool_bwd(s->n, s->c, hw, a->y, a->dx); break;
    }
}

static void bench_resnet(const char *model, int b, int iters)
{
    int r18 = !strcmp(model, "resnet18");
    const rn_conv *L = r18 ? rn18 : rn20;
    int nl = r18 ? (int)(sizeof rn18 / sizeof rn18[0]) : (int)(sizeof rn20 / sizeof rn20[0]);
    size_t wsz = 0, xmax = 0, ymax = 0, wmax = 0;
    for (int i = 0; i < nl; i++) {
        k_conv_shape sh = {b, L[i].c, L[i].h, L[i].h, L[i].k, L[i].r, L[i].r, L[i].stride, L[i].pad, 0, 0};
        k_conv_shape_init(&sh);
        size_t ws = k_conv2d_workspace(&sh), nx = (size_t)b * sh.c * sh.h * sh.w;
        if (k_conv2d_bf16_workspace(&sh) > ws) ws = k_conv2d_bf16_workspace(&sh);
        size_t ny = (size_t)b * sh.k * sh.p * sh.q, nw = (size_t)sh.k * sh.c * sh.r * sh.s;
        if (ws > wsz) wsz = ws;
        if (nx > xmax) xmax = nx;
        if (ny > ymax) ymax = ny;
        if (nw > wmax) wmax = nw;
    }
    size_t mem = (size_t)b * (r18 ? 64 * 112 * 112 : 16 * 28 * 28); /* the layer kernels' shape */
    if (mem > xmax) xmax = mem;
    if (mem > ymax) ymax = mem;
    rn_arg a = {.x = fbuf(xmax), .dx = fbuf(xmax), .y = fbuf(ymax), .w = fbuf(wmax), .dw = fbuf(wmax)};
    a.ws = aligned_alloc(64, (wsz + 63) / 64 * 64);
    if (with_convs) {
        printf("\n%s convs, batch %d (median of %d, %s; bwd = dx + dw, stem dw only; GFLOP/s effective: the direct "
               "conv's FLOPs / time; %% = of the FMA peak; alg: the parts run as Winograd F(2x2,3x3), f fwd x dX w dW, F X: F(4x4,3x3), C D: F(4x4,3x3) channels-last, - direct)\n",
               model, b, iters, use_cpu_clock ? "thread CPU time" : "wall time");
        printf("%-22s %-24s %3s %3s %10s %8s %4s %10s %8s %4s | %8s %8s %6s %6s\n", "conv", "shape", "x", "alg", "fwd_us",
               "GFLOP/s", "%", "bwd_us", "GFLOP/s", "%", "bf16 fwd", "bf16 bwd", "fwd x", "bwd x");
    }
    double tf = 0, tb = 0, ff = 0, fb = 0, tf16 = 0, tb16 = 0;
    for (int i = 0; i < nl && with_convs; i++) {
        if (conv_filter && !strstr(L[i].name, conv_filter)) continue;
        a.sh = (k_conv_shape){b, L[i].c, L[i].h, L[i].h, L[i].k, L[i].r, L[i].r, L[i].stride, L[i].pad, 0, 0};
        k_conv_shape_init(&a.sh);
        a.need_dx = L[i].need_dx;
        double fl = 2.0 * b * a.sh.k * a.sh.p * a.sh.q * a.sh.c * a.sh.r * a.sh.s;
        double blf = fl * (a.need_dx ? 2 : 1);
        a.bf16 = 0;
        double uf = median_us(iters, rn_conv_fwd, &a), ub = median_us(iters, rn_conv_bwd, &a);
        a.bf16 = 1; /* --amp bf16: bf16 operands, fp32 accumulation */
        double uf16 = with_bf16 ? median_us(iters, rn_conv_fwd, &a) : 0, ub16 = with_bf16 ? median_us(iters, rn_conv_bwd, &a) : 0;
        a.bf16 = 0;
        char shape[64];
        snprintf(shape, sizeof shape, "%dx%d->%d %dx%d s%d p%d", a.sh.c, a.sh.h, a.sh.k, a.sh.r,
                 a.sh.s, a.sh.stride, a.sh.pad);
        int wp = k_conv2d_winograd_parts(&a.sh);
        char alg[4] = {wp & 1 ? (wp & 16 ? 'C' : wp & 8 ? 'F' : 'f') : '-', wp & 2 ? (wp & 16 ? 'D' : wp & 8 ? 'X' : 'x') : '-',
                       wp & 4 ? 'w' : '-', 0};
        printf("%-22s %-24s %3d %3s %10.0f %8.1f %4.0f %10.0f %8.1f %4.0f | %8.0f %8.0f %6.2f %6.2f\n", L[i].name, shape,
               L[i].count, alg, uf, fl / (uf * 1e3), pct_flop(fl / (uf * 1e3)), ub, blf / (ub * 1e3),
               pct_flop(blf / (ub * 1e3)), uf16, ub16, uf16 > 0 ? uf / uf16 : 0, ub16 > 0 ? ub / ub16 : 0);
        tf += uf * L[i].count; tb += ub * L[i].count;
        tf16 += uf16 * L[i].count; tb16 += ub16 * L[i].count;
        ff += fl * L[i].count; fb += blf * L[i].count;
    }
    double gf = ff / (tf * 1e3), gb = fb / (tb * 1e3), gfb = (ff + fb) / ((tf + tb) * 1e3);
    if (with_convs) printf("all convs x count: fwd %.1f ms %.1f GFLOP/s (%.0f%%), bwd %.1f ms %.1f GFLOP/s (%.0f%%), fwd+bwd %.1f "
           "GFLOP/s = %.0f%% of the %.1f GFLOP/s peak (%s)\n", tf * 1e-3, gf, pct_flop(gf), tb * 1e-3, gb, pct_flop(gb),
           gfb, pct_flop(gfb), fma_peak * k_threads(), k_isa());
    if (with_bf16 && with_convs)
        printf("bf16 (%s):        fwd %.1f ms %.1f GFLOP/s, bwd %.1f ms %.1f GFLOP/s, fwd+bwd %.1f GFLOP/s: "
               "%.2fx fp32\n", k_isa(), tf16 * 1e-3, ff / (tf16 * 1e3), tb16 * 1e-3, fb / (tb16 * 1e3),
               (ff + fb) / ((tf16 + tb16) * 1e3), (tf + tb) / (tf16 + tb16));
    if (conv_filter) goto out;

    /* Memory-bound layers on the model's largest activations. */
    int mc = r18 ? 64 : 16, mh = r18 ? 112 : 28;
    a.sh = (k_conv_shape){b, mc, mh, mh, 0, 1, 1, 1, 0, 0, 0};
    a.n = (size_t)b * mc * mh * mh;
    a.c = fbuf(mc); a.d = fbuf(mc); a.e = fbuf(2 * mc);
    for (int i = 0; i < mc; i++) a.d[i] = 1.0f;
    a.idx = malloc(sizeof(int32_t) * a.n);
    printf("%-22s %-24s %10s %8s %8s %5s   (copy: one buffer of the shape to another, same clock)\n", "layer",
           "shape", "time_us", "GB/s", "copy", "%");
    static const char *names[M_COUNT] = {"bn stats", "bn fwd", "bn bwd sums", "bn bwd dx", "relu fwd",
                                         "relu bwd", "add", "maxpool 3/2/1 fwd", "maxpool 3/2/1 bwd",
                                         "global avgpool fwd", "global avgpool bwd"};
    for (int op = 0; op < M_COUNT; op++) {
        if ((op == M_POOL_F || op == M_POOL_B) && !r18) continue;
        a.op = op;
        k_conv_shape s0 = a.sh;
        if (op == M_GAP_F || op == M_GAP_B) { /* the head: last stage's output */
            a.sh.c = r18 ? 512 : 64;
            a.sh.h = a.sh.w = 7;
        }
        if (op == M_POOL_B) { a.op = M_POOL_F; rn_mem(&a); a.op = op; }
        double el = (double)a.sh.n * a.sh.c * a.sh.h * a.sh.w, out = el / 4;
        double bytes[M_COUNT] = {4 * el, 8 * el, 8 * el, 12 * el, 8 * el, 12 * el, 12 * el,
                                 4 * el + 8 * out, 8 * out + 4 * el, 4 * el, 4 * el};
        double us = median_us(iters, rn_mem, &a);
        char shape[64];
        snprintf(shape, sizeof shape, "%dx%dx%dx%d", a.sh.n, a.sh.c, a.sh.h, a.sh.w);
        size_t buf = (size_t)el * sizeof(float);
        printf("%-22s %-24s %10.0f %8.1f %8.1f %4.0f%%\n", names[op], shape, us, bytes[op] / (us * 1e3), copy_at(buf),
               pct_copy(bytes[op] / (us * 1e3), buf));
        a.sh = s0;
    }
    free(a.c); free(a.d); free(a.e); free(a.idx);
out:
    free(a.x); free(a.dx); free(a.y); free(a.w); free(a.dw); free(a.ws);
}

/* ---- linear layers (k_linear_*: y = x w^T + b; bwd = dx and dW, as in training but
 * the first layer's dx) on the models' shapes, and square GEMMs. */
typedef struct lin_arg { int n, in, out, bf16; float *x, *w, *b, *y, *dy, *dx, *dw, *db; void *ws; } lin_arg;
static void lin_fwd(void *p)
{
    lin_arg *l = p;
    if (l->bf16) k_linear_fwd_bf16(l->n, l->in, l->out, l->x, l->w, l->b, l->y, l->ws);
    else k_linear_fwd(l->n, l->in, l->out, l->x, l->w, l->b, l->y);
}
static void lin_bwd(void *p)
{
    lin_arg *l = p;
    if (l->bf16) k_linear_bwd_bf16(l->n, l->in, l->out, l->x, l->w, l->dy, l->dx, l->dw, l->db, l->ws);
    else k_linear_bwd(l->n, l->in, l->out, l->x, l->w, l->dy, l->dx, l->dw, l->db);
}

/* The bf16 columns (--amp bf16's kernels: bf16 operands, fp32 sums) as a share of the
 * peak of the unit they run on: the measured vdpbf16ps peak (two multiply-adds per
 * fp32 lane, yet half the FMA rate on Sapphire Rapids), or the FMA peak where the
 * linear layers round operands and run the fp32 GEMMs (k_bf16_linear_dot). */
static void bench_linear(int batch, int iters)
{
    static const struct { const char *name; int n, in, out; } L[] = {
        {"lenet fc1", 64, 320, 50},      {"lenet fc2", 64, 50, 10},     {"resnet20 fc", 128, 64, 10},
        {"resnet18 fc", 32, 512, 1000},  {"textcnn fc", 64, 300, 2},    {"square 256", 256, 256, 256},
        {"square 512", 512, 512, 512},   {"square 1024", 1024, 1024, 1024}, {"wide 64x4096->1024", 64, 4096, 1024},
        {"gpt qkv 384->1152", 2048, 384, 1152}, {"gpt proj 384->384", 2048, 384, 384},
        {"gpt fc 384->1536", 2048, 384, 1536}, {"gpt fc2 1536->384", 2048, 1536, 384},
    };
    double bpk = k_probe_bf16_gflops(), top = k_bf16_linear_dot() ? bpk : fma_peak;
    const char *form = rt_env_str(RT_ENV_BF16_GEMM);
    printf("\nlinear (median of %d, %s; bwd = dx + dW + db; %% = of the FMA peak; bf16 = --amp bf16's kernels on "
           "%s, DDPRT_BF16_GEMM=%s (%s): %% = of the peak of the unit in use, FMA or vdpbf16ps (measured "
           "%.1f GFLOP/s per thread)%s)\n", iters, use_cpu_clock ? "thread CPU time" : "wall time", k_isa(),
           form && *form ? form : "auto", k_bf16_linear_dot() ? "vdpbf16ps" : "fp32 FMAs on bf16-rounded operands", bpk, with_bf16 ? "" : "; --bf16 off: not run");
    printf("%-22s %-20s %10s %8s %4s %10s %8s %4s | %9s %8s %4s %9s %8s %4s\n", "layer", "n x in -> out", "fwd_us",
           "GFLOP/s", "%", "bwd_us", "GFLOP/s", "%", "bf16 fwd", "GFLOP/s", "%", "bf16 bwd", "GFLOP/s", "%");
    for (size_t i = 0; i < sizeof L / sizeof L[0]; i++) {
        lin_arg l = {.n = batch ? batch : L[i].n, .in = L[i].in, .out = L[i].out};
        size_t nx = (size_t)l.n * l.in, nw = (size_t)l.out * l.in, ny = (size_t)l.n * l.out;
        l.x = fbuf(nx); l.w = fbuf(nw); l.b = fbuf(l.out); l.y = fbuf(ny); l.dy = fbuf(ny);
        l.dx = fbuf(nx); l.dw = fbuf(nw); l.db = fbuf(l.out);
        l.ws = malloc(k_linear_bf16_workspace(l.n, l.in, l.out));
        double fl = 2.0 * l.n * l.in * l.out, uf = median_us(iters, lin_fwd, &l), ub = median_us(iters, lin_bwd, &l);
        double uf16 = 0, ub16 = 0;
        if (with_bf16) {
            l.bf16 = 1;
            uf16 = median_us(iters, lin_fwd, &l), ub16 = median_us(iters, lin_bwd, &l);
        }
        char shape[48];
        snprintf(shape, sizeof shape, "%dx%d -> %d", l.n, l.in, l.out);
        printf("%-22s %-20s %10.1f %8.1f %4.0f %10.1f %8.1f %4.0f", L[i].name, shape, uf, fl / (uf * 1e3),
               pct_flop(fl / (uf * 1e3)), ub, 2 * fl / (ub * 1e3), pct_flop(2 * fl / (ub * 1e3)));
        if (with_bf16)
            printf(" | %9.1f %8.1f %4.0f %9.1f %8.1f %4.0f", uf16, fl / (uf16 * 1e3),
                   pct_flop(fl / (uf16 * 1e3)) * fma_peak / top, ub16, 2 * fl / (ub16 * 1e3),
                   pct_flop(2 * fl / (ub16 * 1e3)) * fma_peak / top);
        printf("\n");
        free(l.x); free(l.w); free(l.b); free(l.y); free(l.dy); free(l.dx); free(l.dw); free(l.db); free(l.ws);
    }
}

typedef struct bk_opts {
    const char *device, *model, *clock, *isa, *conv, *bf16, *convs;
    int threads, batch, iters;
    int smoke;
} bk_opts;

#define K(n, t, dom, field, lo, hi, ch, h) {n, 0, t, dom, offsetof(bk_opts, field), lo, hi, ch, NULL, h, 0, NULL}
/* A flag with its default, written once (rt_args_defaults; the usage prints it). */
#define KD(n, t, dom, field, lo, hi, ch, dflt, h) {n, 0, t, dom, offsetof(bk_opts, field), lo, hi, ch, NULL, h, 0, dflt}
static const rt_arg flags[] = {
    KD("device", RT_ARG_STR, RT_ARG_ANY, device, 0, 0, "cpu|cuda", "cpu", "cpu or cuda (the GPU table; CUDA builds)"),
    KD("model", RT_ARG_STR, RT_ARG_ANY, model, 0, 0, "lenet|resnet20|resnet18|linear|transformer", "lenet",
       "lenet, resnet20, resnet18, linear or transformer"),
    K("clock", RT_ARG_STR, RT_ARG_ANY, clock, 0, 0, "cpu|wall", "cpu (the thread's CPU time, 1 thread) or wall"),
    KD("threads", RT_ARG_INT, RT_ARG_RANGE, threads, 1, 1024, NULL, "1", "compute threads"),
    K("batch", RT_ARG_INT, RT_ARG_RANGE, batch, 1, 1 << 20, NULL, "batch (default: lenet 64 and 1024, resnet20 128, resnet18 32)"),
    K("iters", RT_ARG_INT, RT_ARG_RANGE, iters, 1, 1 << 20, NULL, "repeats per kernel, the median is shown"),
    K("isa", RT_ARG_STR, RT_ARG_ANY, isa, 0, 0, NULL, "generic, avx2, avx512, ...: the kernels' instruction set"),
    K("conv", RT_ARG_STR, RT_ARG_ANY, conv, 0, 0, NULL, "resnet: only the convs whose name contains this"),
    K("bf16", RT_ARG_STR, RT_ARG_ANY, bf16, 0, 0, "on|off", "resnet, linear: the bf16 columns (default: on)"),
    K("convs", RT_ARG_STR, RT_ARG_ANY, convs, 0, 0, "on|off", "resnet: the conv table (off: the layer table only)"),
    K("smoke", RT_ARG_FLAG, RT_ARG_ANY, smoke, 0, 0, NULL,
      "--device cuda: only the tensor-core rows, once each at tiny shapes (checks the program, e.g. on the SIMT "
      "executor; the times mean nothing)"),
};
static const rt_args spec = {"ddprt-bench-kernels", flags, RT_NARGS(flags), 0, 0};

static const char head[] =
    "usage: ddprt-bench-kernels [flags]\n\n"
    "Times each CPU kernel on the model's shapes (median of N repeats). lenet (default):\n"
    "projects the training step and epoch time; without --batch, batch 64 and 1024.\n"
    "resnet20 (1x28x28, batch 128) / resnet18 (3x224x224, batch 32): every conv shape\n"
    "fwd and bwd in GFLOP/s, the weighted conv total, and BN/relu/add/pool in GB/s. linear:\n"
    "the models' linear layers and square GEMMs, fwd and bwd. Every rate is also given as a\n"
    "share of the measured FMA peak (10 independent FMA chains) or of the copy bandwidth at\n"
    "the kernel's size. Timed by the thread's CPU time with 1 thread (--clock wall: wall\n"
    "time). --device cuda: the CUDA kernels against cuBLAS/cuDNN when found. transformer:\n"
    "attention (online softmax vs stored probabilities) and the fused classifier at GPT-2 shapes.\n\n";

int main(int argc, char **argv)
{
    bk_opts o = {0};
    char err[512];
    if (rt_args_defaults(&spec, &o, err, sizeof err)) {
        fprintf(stderr, "ddprt-bench-kernels: error: the option table: %s\n", err);
        return 2;
    }
    int rc = rt_args_main(&spec, &o, argc, argv, NULL, NULL, head, NULL);
    if (rc >= 0) return rc;
    if (rt_env_check(err, sizeof err)) {
        fprintf(stderr, "ddprt-bench-kernels: error: %s\n", err);
        return 2;
    }
    int batch = o.batch, iters = o.iters;
    const char *model = o.model;
    if (!strcmp(o.device, "cuda")) {
#if DDPRT_CUDA
        return k_cuda_bench_run(batch, iters, o.smoke);
#else
        fprintf(stderr, "ddprt-bench-kernels: --device cuda: this build has no CUDA port (nvcc was not found at build time)\n");
        return 1;
#endif
    }
    force_wall = o.clock && !strcmp(o.clock, "wall");
    conv_filter = o.conv;
    with_bf16 = !o.bf16 || strcmp(o.bf16, "off");
    with_convs = !o.convs || strcmp(o.convs, "off");
    /* The kernels' settings from the flags, applied once (kernels/k.h). */
    k_settings ks;
    char kerr[256];
    k_settings_default(&ks);
    ks.threads = o.threads;
    if (o.isa) ks.isa = rt_isa_parse(o.isa);
    if ((o.isa && ks.isa < 0) || k_settings_apply(&ks, kerr, sizeof kerr)) {
        fprintf(stderr, "ddprt-bench-kernels: error: --isa %s: unknown or not supported by this CPU\n", o.isa);
        return 2;
    }
    use_cpu_clock = k_threads() == 1 && !force_wall;
    fma_peak = k_probe_fma_gflops();
    printf("ddprt kernels: isa %s, threads %d; measured FMA peak %.1f GFLOP/s per thread (10 independent chains, "
           "thread CPU time)\n", k_isa(), k_threads(), fma_peak);
    if (!strcmp(model, "linear")) bench_linear(batch, iters ? iters : 21);
    else if (!strcmp(model, "resnet20") || !strcmp(model, "resnet18")) {
        int r18 = model[6] == '1';
        bench_resnet(model, batch ? batch : (r18 ? 32 : 128), iters ? iters : (r18 ? 5 : 11));
    } else if (!strcmp(model, "transformer")) {
        bench_tfm(iters ? iters : 5);
    } else if (batch) bench_batch(batch, iters ? iters : (batch >= 512 ? 21 : 101));
    else {
        bench_batch(64, iters ? iters : 101);
        bench_batch(1024, iters ? iters : 21);
    }
    return 0;
}
