/* LeNet on the GPU: see nn/lenet_cuda.h. The forward and backward below are
 * nn/lenet.c line for line with k_cuda_ kernels, so the CPU path is the reference. */
#include "nn/lenet_cuda.h"
#include <stdio.h>
#include <string.h>

#if DDPRT_CUDA
#include "kernels/cuda/k_cuda.h"
#include "ports/cuda/port_cuda.h"
#include "rt/arena.h"
#include "rt/log.h"
#include "transport/tp_staged.h"

#define PLANE 784 /* 28 x 28 */

struct nn_cuda {
    rt_arena dev, pin;
    void *dev_base, *stage;     /* device arena block; allreduce staging (pinned) */
    nn_lenet m;                 /* device pointers; the host model's layout */
    float *mom;                 /* momentum, device */
    void *ws;                   /* split-K workspace */
    float *x[2], *hx[2];        /* batch: device and pinned, double-buffered */
    int32_t *y[2], *hy[2];
    double *sums, *hsums;       /* loss sum and correct count: device, pinned */
    int slot;
    port_stream compute, copy;
    port_event copied[2], consumed[2];
    tp_comm *comm;
    tp_staging st;
    tp_dev_cuda dc;
    int have_dc;
    char desc[400];
};

static nn_cuda g_dev; /* one device per process */

/* A device error ends the rank with one line (the peers then see it leave). */
#define KC(call) do { if (call) rt_fatal("cuda: %s (last kernel: %s)", port_cuda_errmsg(), k_cuda_last_kernel()); } while (0)

nn_cuda *nn_cuda_open(int device, char *err, size_t errlen)
{
    /* Ranks beyond the GPU count share GPUs (local rank modulo the count). */
    int count = port_cuda_device_count();
    if (port_cuda_init(count > 0 ? device % count : device, err, errlen)) return NULL;
    memset(&g_dev, 0, sizeof g_dev);
    snprintf(g_dev.desc, sizeof g_dev.desc, "%s", port_cuda_device_desc());
    return &g_dev;
}

const char *nn_cuda_desc(const nn_cuda *g) { return g->desc; }

static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

/* Split-K scratch for every batch size up to B (it is not monotonic in the batch). */
static size_t ws_bytes(const nn_lenet *m, int B)
{
    size_t need = 0;
    for (int n = 1; n <= B; n++) {
        k_conv_shape c1 = m->conv1, c2 = m->conv2;
        c1.n = c2.n = n;
        need = max_sz(need, k_cuda_conv2d_workspace(&c1));
        need = max_sz(need, k_cuda_conv2d_workspace(&c2));
        need = max_sz(need, k_cuda_linear_workspace(n, 320, 50));
        need = max_sz(need, k_cuda_linear_workspace(n, 50, 10));
    }
    return need;
}

/* Device memory: run on a planning arena, then on the real one. */
static int carve_dev(nn_cuda *g, rt_arena *a, int B)
{
    if (nn_lenet_build(&g->m, a, B)) return -1;
    g->mom = rt_arena_alloc(a, g->m.nparams * sizeof(float), RT_MEM_OPTIM, "momentum");
    g->ws = rt_arena_alloc(a, max_sz(ws_bytes(&g->m, B), 64), RT_MEM_WORKSPACE, "split-K workspace");
    for (int i = 0; i < 2; i++) {
        g->x[i] = rt_arena_alloc(a, (size_t)B * PLANE * sizeof(float), RT_MEM_DATA, "batch images");
        g->y[i] = rt_arena_alloc(a, (size_t)B * sizeof(int32_t), RT_MEM_DATA, "batch labels");
    }
    g->sums = rt_arena_alloc(a, 2 * sizeof(double), RT_MEM_OTHER, "loss sums");
    return 0;
}

static void carve_pin(nn_cuda *g, rt_arena *a, int B, int staged)
{
    for (int i = 0; i < 2; i++) {
        g->hx[i] = rt_arena_alloc(a, (size_t)B * PLANE * sizeof(float), RT_MEM_DATA, "batch images (pinned)");
        g->hy[i] = rt_arena_alloc(a, (size_t)B * sizeof(int32_t), RT_MEM_DATA, "batch labels (pinned)");
    }
    g->hsums = rt_arena_alloc(a, 2 * sizeof(double), RT_MEM_OTHER, "loss sums (pinned)");
    g->stage = staged ? rt_arena_alloc(a, tp_staging_bytes(TP_STAGE_DEFAULT_CHUNK, TP_STAGE_DEFAULT_SLOTS),
                                          RT_MEM_COMM, "allreduce staging")
                         : NULL;
}

int nn_cuda_setup(nn_cuda *g, int max_batch, tp_comm *comm, int mem_report, char *err, size_t errlen)
{
    int B = max_batch, staged = comm != NULL;
    rt_arena plan;
    rt_arena_plan(&plan, "device");
    if (carve_dev(g, &plan, B)) { snprintf(err, errlen, "--device cuda: unknown model"); return -1; }
    if (mem_report) rt_arena_report(&plan);
    if (port_dev_malloc(&g->dev_base, plan.high, "device arena")) goto fail;
    rt_arena_init_from(&g->dev, "device", g->dev_base, plan.high);
    carve_dev(g, &g->dev, B);

    rt_arena_plan(&plan, "pinned");
    carve_pin(g, &plan, B, staged);
    if (mem_report) rt_arena_report(&plan);
    void *pin;
    if (port_pinned_malloc(&pin, plan.high, "pinned arena")) goto fail;
    rt_arena_init_from(&g->pin, "pinned", pin, plan.high);
    carve_pin(g, &g->pin, B, staged);

    if (port_stream_create(&g->compute, "compute stream") || port_stream_create(&g->copy, "batch copy stream"))
        goto fail;
    for (int i = 0; i < 2; i++)
        if (port_event_create(&g->copied[i], 0, "batch event") || port_event_create(&g->consumed[i], 0, "batch event"))
            goto fail;
    g->comm = comm;
    if (staged) {
        if (tp_dev_cuda_init(&g->dc, g->compute, TP_STAGE_DEFAULT_SLOTS)) goto fail;
        g->have_dc = 1;
        if (tp_staging_init(&g->st, &tp_dev_cuda_ops, &g->dc, g->stage, TP_STAGE_DEFAULT_CHUNK,
                            TP_STAGE_DEFAULT_SLOTS))
            goto fail;
    }
    return 0;
fail:
    snprintf(err, errlen, "--device cuda: %s", port_cuda_errmsg());
    return -1;
}

int nn_cuda_upload(nn_cuda *g, const float *params, const float *momentum)
{
    size_t b = g->m.nparams * sizeof(float);
    /* Straight from the host arena (pageable): once per run, not worth staging. */
    if (port_memcpy_h2d(g->m.params, params, b, g->compute, "upload parameters") ||
        port_memcpy_h2d(g->mom, momentum, b, g->compute, "upload momentum") ||
        port_memset_dev(g->m.grads, 0, b, g->compute, "zero gradients") ||
        port_stream_sync(g->compute, "upload"))
        return -1;
    return 0;
}

int nn_cuda_download(nn_cuda *g, float *params, float *momentum)
{
    size_t b = g->m.nparams * sizeof(float);
    if (port_memcpy_d2h(params, g->m.params, b, g->compute, "download parameters") ||
        (momentum && port_memcpy_d2h(momentum, g->mom, b, g->compute, "download momentum")) ||
        port_stream_sync(g->compute, "download"))
        return -1;
    return 0;
}

/* The batch to the device on the copy stream; compute waits for it by event. The
 * pinned slot is reused two batches later, after its copy has finished; the device
 * slot after the step that read it. */
static void put_batch(nn_cuda *g, const float *x, const int32_t *y, int n)
{
    int s = g->slot ^= 1;
    KC(port_event_sync(g->copied[s], "batch copy"));
    memcpy(g->hx[s], x, (size_t)n * PLANE * sizeof(float));
    memcpy(g->hy[s], y, (size_t)n * sizeof(int32_t));
    KC(port_stream_wait_event(g->copy, g->consumed[s]));
    KC(port_memcpy_h2d(g->x[s], g->hx[s], (size_t)n * PLANE * sizeof(float), g->copy, "batch images"));
    KC(port_memcpy_h2d(g->y[s], g->hy[s], (size_t)n * sizeof(int32_t), g->copy, "batch labels"));
    KC(port_event_record(g->copied[s], g->copy));
    KC(port_stream_wait_event(g->compute, g->copied[s]));
}

#define P(i) (m->params + m->p[i].offset)
#define G(i) (m->grads + m->p[i].offset)

static void forward(nn_cuda *g, const float *x, int n, int train, uint64_t seed, uint64_t step)
{
    nn_lenet *m = &g->m;
    port_stream s = g->compute;
    m->conv1.n = m->conv2.n = n;
    uint64_t ctr = step * (uint64_t)m->max_batch * 100; /* as nn/lenet.c */
    KC(k_cuda_conv2d_fwd(&m->conv1, x, P(0), P(1), m->c1, g->ws, s));
    KC(k_cuda_maxpool2d_fwd(n, 10, 24, 24, 2, 2, m->c1, m->p1, m->p1i, s));
    KC(k_cuda_relu_fwd((size_t)n * 1440, m->p1, m->p1, s));
    KC(k_cuda_conv2d_fwd(&m->conv2, m->p1, P(2), P(3), m->c2, g->ws, s));
    const float *d2 = m->c2;
    if (train) {
        KC(k_cuda_dropout2d_fwd(n, 20, 64, m->drop2d_p, seed, ctr, m->c2, m->d2, m->m2, s));
        d2 = m->d2;
    }
    KC(k_cuda_maxpool2d_fwd(n, 20, 8, 8, 2, 2, d2, m->p2, m->p2i, s));
    KC(k_cuda_relu_fwd((size_t)n * 320, m->p2, m->p2, s));
    KC(k_cuda_linear_fwd(n, 320, 50, m->p2, P(4), P(5), m->f1, g->ws, s));
    KC(k_cuda_relu_fwd((size_t)n * 50, m->f1, m->f1, s));
    const float *d3 = m->f1;
    if (train) {
        KC(k_cuda_dropout_fwd((size_t)n * 50, m->drop_p, seed, ctr + (uint64_t)m->max_batch * 20, m->f1, m->d3,
                              m->m3, s));
        d3 = m->d3;
    }
    KC(k_cuda_linear_fwd(n, 50, 10, d3, P(6), P(7), m->f2, g->ws, s));
    KC(k_cuda_log_softmax_fwd(n, 10, m->f2, m->lp, s));
}

static void backward(nn_cuda *g, const float *x, const int32_t *labels, int n)
{
    nn_lenet *m = &g->m;
    port_stream s = g->compute;
    float *ga = m->ga, *gb = m->gb;
    KC(k_cuda_log_softmax_nll_bwd(n, 10, m->lp, labels, 1.0f / (float)n, ga, s));
    KC(k_cuda_linear_bwd(n, 50, 10, m->d3, P(6), ga, gb, G(6), G(7), g->ws, s));
    KC(k_cuda_dropout_bwd((size_t)n * 50, m->drop_p, m->m3, gb, gb, s));
    KC(k_cuda_relu_bwd((size_t)n * 50, m->f1, gb, gb, s));
    KC(k_cuda_linear_bwd(n, 320, 50, m->p2, P(4), gb, ga, G(4), G(5), g->ws, s));
    KC(k_cuda_relu_bwd((size_t)n * 320, m->p2, ga, ga, s));
    KC(k_cuda_maxpool2d_bwd(n, 20, 8, 8, 2, 2, ga, m->p2i, gb, s));
    KC(k_cuda_dropout2d_bwd(n, 20, 64, m->drop2d_p, m->m2, gb, gb, s));
    KC(k_cuda_conv2d_bwd(&m->conv2, m->p1, P(2), gb, ga, G(2), G(3), g->ws, s));
    KC(k_cuda_relu_bwd((size_t)n * 1440, m->p1, ga, ga, s));
    KC(k_cuda_maxpool2d_bwd(n, 10, 24, 24, 2, 2, ga, m->p1i, gb, s));
    KC(k_cuda_conv2d_bwd(&m->conv1, x, P(0), gb, NULL, G(0), G(1), g->ws, s));
}

/* Loss sum and correct count back to the host: the step's one synchronisation. */
static void read_sums(nn_cuda *g, int n, const int32_t *labels, double *loss, long *correct)
{
    KC(k_cuda_nll_loss_sum(n, 10, g->m.lp, labels, g->sums, g->compute));
    KC(port_memcpy_d2h(g->hsums, g->sums, 2 * sizeof(double), g->compute, "loss"));
    KC(port_stream_sync(g->compute, "training step"));
    *loss = g->hsums[0];
    if (correct) *correct = (long)g->hsums[1];
}

double nn_cuda_step(nn_cuda *g, const float *x, const int32_t *y, int n, const k_sgd_cfg *sgd, uint64_t seed,
                    uint64_t step)
{
    nn_lenet *m = &g->m;
    put_batch(g, x, y, n);
    int s = g->slot;
    forward(g, g->x[s], n, 1, seed, step);
    /* Loss sums now; they come back with the step's one synchronisation, after SGD. */
    KC(k_cuda_nll_loss_sum(n, 10, m->lp, g->y[s], g->sums, g->compute));
    backward(g, g->x[s], g->y[s], n);
    KC(port_event_record(g->consumed[s], g->compute));
    if (g->comm && tp_allreduce_device(g->comm, m->grads, m->nparams, RT_F32, TP_AVG, &g->st))
        rt_fatal("%s", tp_staging_errmsg(&g->st));
    KC(k_cuda_sgd_step(m->nparams, sgd, step == 0, m->params, m->grads, g->mom, g->compute));
    KC(port_memcpy_d2h(g->hsums, g->sums, 2 * sizeof(double), g->compute, "loss"));
    KC(port_stream_sync(g->compute, "training step"));
    return g->hsums[0] / n;
}

double nn_cuda_eval(nn_cuda *g, const float *x, const int32_t *y, int n, long *correct)
{
    put_batch(g, x, y, n);
    int s = g->slot;
    forward(g, g->x[s], n, 0, 0, 0);
    KC(port_event_record(g->consumed[s], g->compute));
    double loss;
    read_sums(g, n, g->y[s], &loss, correct);
    return loss;
}

void nn_cuda_close(nn_cuda *g)
{
    if (!g) return;
    if (g->compute) (void)port_stream_sync(g->compute, "shutdown");
    if (g->have_dc) tp_dev_cuda_destroy(&g->dc);
    for (int i = 0; i < 2; i++) {
        port_event_destroy(g->copied[i]);
        port_event_destroy(g->consumed[i]);
    }
    port_stream_destroy(g->compute);
    port_stream_destroy(g->copy);
    port_dev_free(g->dev_base);
    port_pinned_free(g->pin.base);
    memset(g, 0, sizeof *g);
}

#else /* no CUDA port in this build: every entry point says so */

static const char nocuda[] =
    "--device cuda: this build has no CUDA port (nvcc was not found at build time); use --device cpu";

nn_cuda *nn_cuda_open(int device, char *err, size_t errlen)
{
    (void)device;
    snprintf(err, errlen, "%s", nocuda);
    return NULL;
}
int nn_cuda_setup(nn_cuda *g, int max_batch, tp_comm *comm, int mem_report, char *err, size_t errlen)
{
    (void)g; (void)max_batch; (void)comm; (void)mem_report;
    snprintf(err, errlen, "%s", nocuda);
    return -1;
}
int nn_cuda_upload(nn_cuda *g, const float *params, const float *momentum) { (void)g; (void)params; (void)momentum; return -1; }
int nn_cuda_download(nn_cuda *g, float *params, float *momentum) { (void)g; (void)params; (void)momentum; return -1; }
double nn_cuda_step(nn_cuda *g, const float *x, const int32_t *y, int n, const k_sgd_cfg *sgd, uint64_t seed,
                    uint64_t step)
{
    (void)g; (void)x; (void)y; (void)n; (void)sgd; (void)seed; (void)step;
    return 0;
}
double nn_cuda_eval(nn_cuda *g, const float *x, const int32_t *y, int n, long *correct)
{
    (void)g; (void)x; (void)y; (void)n;
    *correct = 0;
    return 0;
}
const char *nn_cuda_desc(const nn_cuda *g) { (void)g; return ""; }
void nn_cuda_close(nn_cuda *g) { (void)g; }
#endif
