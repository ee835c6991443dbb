/* Any graph on the GPU: see nn/graph_cuda.h. */
#include "nn/graph_cuda.h"
#include <stdio.h>
#include <string.h>

#if DDPRT_CUDA
#include "kernels/cuda/k_cuda.h"
#include "kernels/cuda/k_cuda_nhwc.h"
#include "ports/cuda/port_cuda.h"
#include "ports/posix/port.h"
#include "rt/arena.h"
#include "rt/env.h"
#include "rt/log.h"
#include <math.h>
#include <stdlib.h>

struct nn_cuda {
    nn_graph *host, dg;         /* the reference graph; its device twin */
    nn_node *nodes;             /* dg's nodes (NN_MAX_NODES, allocated at open) */
    rt_arena dev, pin;
    void *dev_base;
    float *mom;                 /* SGD's momentum, or Adam's exp_avg */
    float *v;                   /* Adam's exp_avg_sq (nn_cuda_use_optim) */
    nn_optim *opt;              /* Adam / AdamW: the trainer's optimizer (settings, step count, host state) */
    nn_optim *clip;             /* --clip-grad-norm: its settings (nn_cuda_use_optim) */
    int accum;                  /* --accum-steps: micro-batches a step (grads summed in dg.grad_sum) */
    nn_scaler scaler;           /* --amp fp16: the loss scale (scale 0: none) */
    int sync_bn;                /* --sync-bn: dg.sync_host planned, the host's sync_sum taken at upload */
    double *norm;               /* the gradients' sum of squares (device), and its chunks' */
    void *norm_ws;
    void *x[2], *hx[2];         /* batch: device and pinned, double-buffered */
    int32_t *y[2], *hy[2];
    double *sums, *hsums;       /* loss sum and correct count: device, pinned */
    size_t in_bytes;            /* bytes per sample (floats or int32 ids) */
    int slot;
    port_stream compute, copy;
    port_event copied[2], consumed[2];
    /* Data parallelism as the trainer wired it (nn_ddp_use_cuda): its hooks, and the
     * pinned memory planned here for its staging. */
    nn_cuda_dp dp;
    void *stage;
    size_t stage_bytes;
    int device;                 /* the comm thread makes it current too */
    char desc[400];
    int wgmma;                  /* the tensor-core products on wgmma (k_cuda_wgmma_setup) */
    unsigned long permutes;     /* conv's permutes of x / dy in training steps (k_cuda_conv2d_chan_last_calls) */
    char wgmma_why[1024]; /* the GEMM probes, TMA and four path probes said in turn */
};

#define KC(call) do { if (call) rt_fatal("cuda: %s (last kernel: %s)", port_cuda_errmsg(), k_cuda_last_kernel()); } while (0)

nn_cuda *nn_cuda_open(int device, char *err, size_t errlen)
{
    int count = port_cuda_device_count();
    device = count > 0 ? device % count : device;
    if (port_cuda_init(device, err, errlen)) return NULL;
    nn_cuda *c = calloc(1, sizeof *c); /* start-up only */
    if (!c || !(c->nodes = calloc(NN_MAX_NODES, sizeof *c->nodes))) {
        free(c);
        snprintf(err, errlen, "--device cuda: out of memory for the device graph's tables");
        return NULL;
    }
    c->device = device;
    snprintf(c->desc, sizeof c->desc, "%s", port_cuda_device_desc());
    port_cuda_set_wait_s(rt_env_timeout_s()); /* every device wait's deadline: DDPRT_TIMEOUT's */
    int wg = k_cuda_wgmma_setup(c->wgmma_why, sizeof c->wgmma_why);
    if (wg == -2) { /* a probe hung: the device cannot go on */
        snprintf(err, errlen, "--device cuda: %s", c->wgmma_why);
        free(c->nodes);
        free(c);
        return NULL;
    }
    c->wgmma = wg == 1;
    return c;
}

int nn_cuda_wgmma(const nn_cuda *c) { return c->wgmma; }
const char *nn_cuda_wgmma_why(const nn_cuda *c) { return c->wgmma_why; }

const char *nn_cuda_desc(const nn_cuda *c) { return c->desc; }
unsigned long nn_cuda_conv_permutes(const nn_cuda *c) { return c->permutes; }
int nn_cuda_nhwc_outputs(const nn_cuda *c, int *outputs)
{
    int k = 0, all = 0;
    for (int i = 1; i < c->dg.nn; i++) {
        int out = c->dg.nodes[i].storage == i && !c->dg.nodes[i].fused_into; /* (a fused BN's is the ReLU's) */
        k += out && c->dg.nodes[i].nhwc;
        all += out;
    }
    *outputs = all;
    return k;
}
int nn_cuda_nhwc_of_kind(const nn_cuda *c, const char *kind, int *nodes)
{
    int k = 0, all = 0;
    for (int i = 1; i < c->dg.nn; i++)
        if (!strcmp(c->dg.nodes[i].op->kind, kind)) k += c->dg.nodes[i].nhwc, all++;
    *nodes = all;
    return k;
}
const char *nn_cuda_errmsg(const nn_cuda *c)
{
    const char *t = c->dp.errmsg ? c->dp.errmsg(c->dp.ctx) : "";
    return t && t[0] ? t : port_cuda_errmsg();
}
nn_graph *nn_cuda_graph(nn_cuda *c) { return &c->dg; }
int nn_cuda_device(const nn_cuda *c) { return c->device; }
port_stream nn_cuda_stream(const nn_cuda *c) { return c->compute; }
void *nn_cuda_stage(const nn_cuda *c) { return c->stage; }
void *nn_cuda_arena(const nn_cuda *c, size_t *bytes)
{
    *bytes = c->dev_base ? c->dev.size : 0;
    return c->dev_base;
}
void nn_cuda_set_dp(nn_cuda *c, const nn_cuda_dp *dp) { c->dp = dp ? *dp : (nn_cuda_dp){0}; }

/* Run on a planning arena, then on the real one. */
static int carve_dev(nn_cuda *c, rt_arena *a, char *err, size_t errlen)
{
    int B = c->host->max_batch;
    c->dg = *c->host;
    memcpy(c->nodes, c->host->nodes, sizeof *c->nodes * (size_t)c->host->nn);
    c->dg.nodes = c->nodes;
    c->dg.on_device = 1;
    c->dg.on_grad_ready = NULL;
    if (nn_graph_carve(&c->dg, a, err, errlen)) return -1;
    /* --amp: the weights in its 16-bit type for the tensor cores (Apex O2's / autocast's
     * cast weights): one block beside the fp32 one, parameter i at the same offset (each
     * 16-float aligned there: 32 bytes here), so one cast kernel refreshes all of them. */
    c->dg.params16 = c->dg.amp != NN_AMP_NONE ? rt_arena_alloc(a, c->dg.nparams * sizeof(uint16_t), RT_MEM_PARAMS,
                                                                "parameters in 16 bits (--amp's tensor-core weights)")
                                              : NULL;
    for (int i = 0; i < c->dg.nn && c->dg.amp != NN_AMP_NONE; i++) { /* ops' own layouts of them (conv's NHWC) */
        nn_node *n = &c->dg.nodes[i];
        size_t e = n->op->w16_elems_cuda ? n->op->w16_elems_cuda(&c->dg, n) : 0;
        n->w16 = e ? rt_arena_alloc(a, e * sizeof(uint16_t), RT_MEM_PARAMS, "16-bit weights in the layouts their "
                                    "products read (conv: KRSC and CRSK)") : NULL;
    }
    c->mom = rt_arena_alloc(a, c->dg.nparams * sizeof(float), RT_MEM_OPTIM, c->opt ? "exp_avg" : "momentum");
    c->v = c->opt ? rt_arena_alloc(a, c->dg.nparams * sizeof(float), RT_MEM_OPTIM, "exp_avg_sq") : NULL;
    c->dg.grad_sum = c->accum > 1 ? rt_arena_alloc(a, c->dg.nparams * sizeof(float), RT_MEM_OPTIM,
                                                   "gradient accumulation (--accum-steps)")
                                  : NULL;
    int sumsq = c->clip || c->scaler.scale > 0; /* the norm, or the loss scaler's inf/NaN check */
    c->norm = sumsq ? rt_arena_alloc(a, sizeof(double), RT_MEM_OPTIM, "gradient norm") : NULL;
    c->norm_ws = sumsq ? rt_arena_alloc(a, k_cuda_sumsq_workspace(c->dg.nparams), RT_MEM_OPTIM, "gradient norm chunks")
                       : NULL;
    for (int i = 0; i < 2; i++) {
        c->x[i] = rt_arena_alloc(a, (size_t)B * c->in_bytes, RT_MEM_DATA, "batch inputs");
        c->y[i] = rt_arena_alloc(a, (size_t)B * sizeof(int32_t), RT_MEM_DATA, "batch labels");
    }
    c->sums = rt_arena_alloc(a, 2 * sizeof(double), RT_MEM_OTHER, "loss sums");
    return 0;
}

static void carve_pin(nn_cuda *c, rt_arena *a)
{
    int B = c->host->max_batch;
    for (int i = 0; i < 2; i++) {
        c->hx[i] = rt_arena_alloc(a, (size_t)B * c->in_bytes, RT_MEM_DATA, "batch inputs (pinned)");
        c->hy[i] = rt_arena_alloc(a, (size_t)B * sizeof(int32_t), RT_MEM_DATA, "batch labels (pinned)");
    }
    c->hsums = rt_arena_alloc(a, 2 * sizeof(double), RT_MEM_OTHER, "loss sums (pinned)");
    int wide = 1;
    for (int i = 1; i < c->dg.nn; i++) wide = c->dg.nodes[i].out.c > wide ? c->dg.nodes[i].out.c : wide;
    c->dg.sync_host = c->sync_bn ? rt_arena_alloc(a, (4 * (size_t)wide + 2) * sizeof(double), RT_MEM_OTHER,
                                                  "SyncBatchNorm sums (pinned)")
                                 : NULL;
    c->stage = c->stage_bytes ? rt_arena_alloc(a, c->stage_bytes, RT_MEM_COMM, "allreduce staging") : NULL;
}

/* Whether parameter i's plain 16-bit copy goes uncast: a conv weight whose op block
 * (n->w16) is all its products read (nn/ops/conv.c's conv_w16). Its bytes (6 a weight:
 * ResNet-18's 11M, ~66 MB an update) for one more launch a conv (the runs between). */
static int cast_skips(const nn_graph *g, int i)
{
    const nn_node *n = &g->nodes[g->p[i].node]; /* (n->w16 is NULL on a planning arena) */
    return g->amp != NN_AMP_NONE && i == n->p0 && n->op->w16_elems_cuda &&
           n->op->w16_elems_cuda(g, n) > 0;
}

/* --mem-report: what the 16-bit activations saved (the plan again with them off). */
static int mem_report_act16(nn_cuda *c, char *err, size_t errlen)
{
    size_t a16 = c->dg.act_bytes;
    int n16 = 0, nout = 0;
    for (int i = 1; i < c->dg.nn; i++) {
        n16 += c->dg.nodes[i].y16;
        nout += c->dg.nodes[i].storage == i && !c->dg.nodes[i].fused_into;
    }
    rt_arena p32;
    rt_arena_plan(&p32, "device");
    c->host->act16 = 0;
    int rc = carve_dev(c, &p32, err, errlen);
    c->host->act16 = 1;
    if (rc) return -1;
    printf("device activations: planned %.2f MiB with %d of %d outputs in 16 bits (--amp-activations 16), "
           "%.2f MiB in fp32 (32)\n", a16 / 1048576.0, n16, nout, c->dg.act_bytes / 1048576.0);
    return 0;
}

int nn_cuda_setup(nn_cuda *c, nn_graph *host, size_t stage_bytes, int mem_report, char *err, size_t errlen)
{
    c->host = host;
    c->stage_bytes = stage_bytes;
    c->in_bytes = nn_shape_numel(host->nodes[0].out) * 4; /* f32 values or int32 ids */
    rt_arena plan;
    rt_arena_plan(&plan, "device");
    if (carve_dev(c, &plan, err, errlen)) return -1;
    if (mem_report) rt_arena_report(&plan);
    if (mem_report && c->dg.amp != NN_AMP_NONE) { /* (a planning arena hands out no addresses) */
        size_t lay = 0;
        for (int i = 0; i < c->dg.nn; i++)
            if (c->dg.nodes[i].op->w16_elems_cuda) lay += c->dg.nodes[i].op->w16_elems_cuda(&c->dg, &c->dg.nodes[i]);
        size_t skip = 0;
        for (int i = 0; i < c->dg.np; i++) skip += cast_skips(&c->dg, i) ? c->dg.p[i].numel : 0;
        printf("device 16-bit weights: %.2f MiB for %zu parameters (%zu of them, convs' with a block, left uncast "
               "there), %.2f MiB in the convs' NHWC layouts (--amp's copies for the tensor cores, made once an "
               "update; in params above)\n",
               c->dg.nparams * sizeof(uint16_t) / 1048576.0, c->dg.nparams, skip, lay * sizeof(uint16_t) / 1048576.0);
    }
    if (mem_report && host->act16 && mem_report_act16(c, err, errlen)) return -1;
    if (port_dev_malloc(&c->dev_base, plan.high, "device arena")) goto fail;
    rt_arena_init_from(&c->dev, "device", c->dev_base, plan.high);
    if (carve_dev(c, &c->dev, err, errlen)) return -1;

    rt_arena_plan(&plan, "pinned");
    carve_pin(c, &plan);
    if (mem_report) rt_arena_report(&plan);
    void *pin;
    if (port_pinned_malloc(&pin, plan.high, "pinned arena")) goto fail;
    rt_arena_init_from(&c->pin, "pinned", pin, plan.high);
    carve_pin(c, &c->pin);

    if (port_stream_create(&c->compute, "compute stream") || port_stream_create(&c->copy, "batch copy stream"))
        goto fail;
    for (int i = 0; i < 2; i++)
        if (port_event_create(&c->copied[i], 0, "batch event") || port_event_create(&c->consumed[i], 0, "batch event"))
            goto fail;
    return 0;
fail:
    snprintf(err, errlen, "--device cuda: %s", port_cuda_errmsg());
    return -1;
}

void nn_cuda_use_optim(nn_cuda *c, nn_optim *o)
{
    c->opt = o->c.kind != NN_OPT_SGD ? o : NULL;
    c->clip = o->c.clip > 0 ? o : NULL;
    c->accum = o->c.accum;
    c->sync_bn = o->c.sync_bn;
}

void nn_cuda_use_scaler(nn_cuda *c, const nn_scaler *s) { c->scaler = *s; }

int nn_cuda_scaler(const nn_cuda *c, nn_scaler *s)
{
    *s = c->scaler;
    return c->scaler.scale > 0;
}

/* The 16-bit weights from the fp32 ones, rounded to nearest even as the products round
 * fp32 operands (the same bits as reading w): after every change of the fp32 weights, i.e.
 * at upload (start-up, resume) and after each optimizer update - once a step, not once
 * a forward (--accum-steps runs several forwards on the same weights), and never for a
 * skipped fp16 step. On the compute stream, so the next forward reads the new copy. The
 * plain copy in runs of parameters between those cast_skips leaves out (one launch a run). */
static int cast_params16(nn_cuda *c)
{
    nn_graph *g = &c->dg;
    if (!g->params16) return 0;
    for (int i = 0; i < g->np;) {
        if (cast_skips(g, i)) {
            i++;
            continue;
        }
        int j = i + 1;
        while (j < g->np && !cast_skips(g, j)) j++;
        size_t a = g->p[i].offset, n = j < g->np ? g->p[j].offset - a : g->nparams - a;
        if (g->amp == NN_AMP_BF16 ? k_cuda_f32_to_bf16(n, g->params + a, g->params16 + a, c->compute)
                                  : k_cuda_f32_to_f16(n, g->params + a, g->params16 + a, c->compute))
            return -1;
        i = j;
    }
    for (int i = 0; i < g->nn; i++)
        if (g->nodes[i].w16 && g->nodes[i].op->w16_prep_cuda(g, &g->nodes[i], c->compute)) return -1;
    return 0;
}

/* Straight from the host arena (pageable): at start-up and checkpoints only. */
int nn_cuda_upload(nn_cuda *c, const float *momentum)
{
    size_t b = c->dg.nparams * sizeof(float);
    if (c->sync_bn) { /* DDP set the host graph's (nn_ddp_enable_sync_bn, after nn_cuda_setup) */
        c->dg.sync_sum = c->host->sync_sum;
        c->dg.sync_ctx = c->host->sync_ctx;
    }
    if (port_memcpy_h2d(c->dg.params, c->host->params, b, c->compute, "upload parameters") ||
        port_memcpy_h2d(c->mom, momentum, b, c->compute, "upload momentum") ||
        (c->opt && port_memcpy_h2d(c->v, c->opt->v, b, c->compute, "upload exp_avg_sq")) ||
        (c->dg.buf_bytes && port_memcpy_h2d(c->dg.bufs, c->host->bufs, c->dg.buf_bytes, c->compute, "upload buffers")) ||
        port_memset_dev(c->dg.grads, 0, b, c->compute, "zero gradients") || cast_params16(c) ||
        port_stream_sync(c->compute, "upload"))
        return -1;
    return 0;
}

int nn_cuda_download(nn_cuda *c, float *momentum)
{
    size_t b = c->dg.nparams * sizeof(float);
    if (port_memcpy_d2h(c->host->params, c->dg.params, b, c->compute, "download parameters") ||
        (c->dg.buf_bytes &&
         port_memcpy_d2h(c->host->bufs, c->dg.bufs, c->dg.buf_bytes, c->compute, "download buffers")) ||
        (momentum && port_memcpy_d2h(momentum, c->mom, b, c->compute, "download momentum")) ||
        (momentum && c->opt && port_memcpy_d2h(c->opt->v, c->v, b, c->compute, "download exp_avg_sq")) ||
        port_stream_sync(c->compute, "download"))
        return -1;
    return 0;
}

/* The batch to the device on the copy stream; compute waits for it by event. The
 * pinned slot is reused two batches later, after its copy has finished; the device
 * slot after the step that read it. */
static void put_batch(nn_cuda *c, const void *x, const int32_t *y, int n)
{
    int s = c->slot ^= 1;
    KC(port_event_sync(c->copied[s], "batch copy"));
    memcpy(c->hx[s], x, (size_t)n * c->in_bytes);
    memcpy(c->hy[s], y, (size_t)n * sizeof(int32_t));
    KC(port_stream_wait_event(c->copy, c->consumed[s]));
    KC(port_memcpy_h2d(c->x[s], c->hx[s], (size_t)n * c->in_bytes, c->copy, "batch inputs"));
    KC(port_memcpy_h2d(c->y[s], c->hy[s], (size_t)n * sizeof(int32_t), c->copy, "batch labels"));
    KC(port_event_record(c->copied[s], c->copy));
    KC(port_stream_wait_event(c->compute, c->copied[s]));
}

/* Adam / AdamW on the device: the CPU's settings (nn_optim_adam_cfg) over the same runs
 * of weight decay, one launch a run; the host's step count advances as nn_optim_step's. */
typedef struct adam_ctx { nn_cuda *c; double lr; } adam_ctx;
static void adam_run(void *ctx, size_t lo, size_t hi, int decay)
{
    adam_ctx *a = ctx;
    nn_cuda *c = a->c;
    if (hi <= lo) return;
    k_adam_cfg k = nn_optim_adam_cfg(c->opt, a->lr, decay);
    nn_graph *g = &c->dg;
    KC(k_cuda_adam_step(hi - lo, &k, g->params + lo, g->grads + lo, c->mom + lo, c->v + lo, c->compute));
}

/* The gradients' sum of squares, on the host (one synchronisation). */
static double grads_sumsq(nn_cuda *c, const char *what)
{
    nn_graph *g = &c->dg;
    double ss;
    KC(k_cuda_sumsq(g->nparams, g->grads, c->norm, c->norm_ws, c->compute));
    KC(port_memcpy_d2h(&ss, c->norm, sizeof ss, c->compute, what));
    KC(port_stream_sync(c->compute, what));
    return ss;
}

/* clip_grad_norm_: the norm comes back to the host (one more synchronisation a step,
 * unless the loss scaler's check has just taken it: ss >= 0), which scales the averaged
 * gradients as nn_optim_clip does. */
static void clip_grads(nn_cuda *c, double ss)
{
    nn_graph *g = &c->dg;
    if (ss < 0) ss = grads_sumsq(c, "gradient norm");
    float coef = nn_optim_clip_coef(c->clip, sqrt(ss), c->clip->c.clip);
    if (coef < 1.0f) KC(k_cuda_scale(g->nparams, coef, g->grads, c->compute));
}

static void optim_step(nn_cuda *c, const k_sgd_cfg *sgd, uint64_t step, double ss)
{
    nn_graph *g = &c->dg;
    if (c->clip) clip_grads(c, ss);
    if (!c->opt) {
        KC(k_cuda_sgd_step(g->nparams, sgd, step == 0, g->params, g->grads, c->mom, c->compute));
        return;
    }
    adam_ctx a = {c, sgd->lr};
    nn_optim_decay_runs(c->opt, c->host, adam_run, &a);
    c->opt->lr = sgd->lr;
    c->opt->t++;
}

/* The loss sums come back with the step's one synchronisation. */
static double read_sums(nn_cuda *c, long *correct)
{
    KC(port_memcpy_d2h(c->hsums, c->sums, 2 * sizeof(double), c->compute, "loss"));
    KC(port_stream_sync(c->compute, "step"));
    if (correct) *correct = (long)c->hsums[1];
    return c->hsums[0];
}

/* --amp fp16: the averaged gradients are the loss scale times the true ones. One sum of
 * squares tells whether any is inf or NaN (every rank's sum is the same after the
 * allreduce, so every rank decides the same); if none is, they are unscaled (before
 * clipping, as GradScaler.unscale_). The unscaled gradients' sum of squares (for the
 * clip), or -1: the step is skipped. */
static double unscale_grads(nn_cuda *c, uint64_t step)
{
    nn_graph *g = &c->dg;
    double s = c->scaler.scale, ss = grads_sumsq(c, "gradient check (loss scale)");
    int finite = isfinite(ss);
    if (finite) KC(k_cuda_scale(g->nparams, (float)(1.0 / s), g->grads, c->compute));
    nn_scaler_update(&c->scaler, finite);
    if (!finite)
        rt_info("rank %d: step %llu: gradients not finite at loss scale %g: step skipped, loss scale now %g",
                c->dp.rank, (unsigned long long)step + 1, s, c->scaler.scale);
    return finite ? ss / (s * s) : -1;
}

/* The averaged gradients, then the update. The staging's end event orders it after the
 * last copy back. */
static void finish_step(nn_cuda *c, const k_sgd_cfg *sgd, uint64_t step)
{
    if (c->dp.finish_grads && c->dp.finish_grads(c->dp.ctx))
        rt_fatal("rank %d: GPU gradient allreduce: %s", c->dp.rank, c->dp.errmsg(c->dp.ctx));
    double ss = -1; /* the gradients' sum of squares when known */
    if (c->scaler.scale > 0 && (ss = unscale_grads(c, step)) < 0) return;
    optim_step(c, sgd, step, ss);
    KC(cast_params16(c));
}

double nn_cuda_step(nn_cuda *c, const void *x, const int32_t *y, int n, const k_sgd_cfg *sgd, uint64_t seed,
                    uint64_t step, int micro)
{
    nn_graph *g = &c->dg;
    int N = c->accum > 1 ? c->accum : 1;
    /* DDP's no_sync on micro-batches 0..N-2, as nn_trainer_step on the CPU */
    g->grad_mode = N == 1 ? NN_GRAD_SET : micro == 0 ? NN_GRAD_STASH_FIRST : micro < N - 1 ? NN_GRAD_STASH
                                                                                          : NN_GRAD_FINAL;
    if (c->dp.sync_buffers && c->dp.sync_buffers(c->dp.ctx)) rt_fatal("%s", c->dp.errmsg(c->dp.ctx));
    put_batch(c, x, y, n);
    int s = c->slot;
    unsigned long p0 = k_cuda_conv2d_chan_last_calls(); /* (the weights' blocks are made after the step) */
    KC(nn_forward_cuda(g, c->x[s], n, 1, seed, step * (uint64_t)N + (uint64_t)micro, c->compute));
    KC(nn_loss_cuda(g, c->y[s], n, c->sums, c->compute));
    g->loss_scale = (float)c->scaler.scale; /* 0: none */
    KC(nn_backward_cuda(g, c->y[s], n, n * N, c->compute)); /* PyTorch's loss / accum_steps */
    c->permutes += k_cuda_conv2d_chan_last_calls() - p0;
    KC(port_event_record(c->consumed[s], c->compute));
    if (micro == N - 1) finish_step(c, sgd, step);
    return read_sums(c, NULL) / n;
}

void nn_cuda_flush(nn_cuda *c, const k_sgd_cfg *sgd, uint64_t step)
{
    nn_graph *g = &c->dg;
    KC(port_memcpy_d2d(g->grads, g->grad_sum, g->nparams * sizeof(float), c->compute, "accumulated gradients"));
    finish_step(c, sgd, step); /* every bucket goes now */
    KC(port_stream_sync(c->compute, "flush"));
}

double nn_cuda_eval(nn_cuda *c, const void *x, const int32_t *y, int n, long *correct)
{
    put_batch(c, x, y, n);
    int s = c->slot;
    KC(nn_forward_cuda(&c->dg, c->x[s], n, 0, 0, 0, c->compute));
    KC(nn_loss_cuda(&c->dg, c->y[s], n, c->sums, c->compute));
    KC(port_event_record(c->consumed[s], c->compute));
    return read_sums(c, correct);
}

void nn_cuda_close(nn_cuda *c)
{
    if (!c) return;
    if (c->compute) (void)port_stream_sync(c->compute, "shutdown");
    for (int i = 0; i < 2; i++) {
        port_event_destroy(c->copied[i]);
        port_event_destroy(c->consumed[i]);
    }
    port_stream_destroy(c->compute);
    port_stream_destroy(c->copy);
    port_dev_free(c->dev_base);
    port_pinned_free(c->pin.base);
    free(c->nodes);
    free(c);
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
int nn_cuda_setup(nn_cuda *c, nn_graph *host, size_t stage_bytes, int mem_report, char *err, size_t errlen)
{
    (void)c; (void)host; (void)stage_bytes; (void)mem_report;
    snprintf(err, errlen, "%s", nocuda);
    return -1;
}
void nn_cuda_use_optim(nn_cuda *c, nn_optim *o) { (void)c; (void)o; }
void nn_cuda_use_scaler(nn_cuda *c, const nn_scaler *s) { (void)c; (void)s; }
int nn_cuda_scaler(const nn_cuda *c, nn_scaler *s) { (void)c; s->scale = 0, s->good = 0; return 0; }
int nn_cuda_upload(nn_cuda *c, const float *momentum) { (void)c; (void)momentum; return -1; }
int nn_cuda_download(nn_cuda *c, float *momentum) { (void)c; (void)momentum; return -1; }
double nn_cuda_step(nn_cuda *c, const void *x, const int32_t *y, int n, const k_sgd_cfg *sgd, uint64_t seed,
                    uint64_t step, int micro)
{
    (void)c; (void)x; (void)y; (void)n; (void)sgd; (void)seed; (void)step; (void)micro;
    return 0;
}
void nn_cuda_flush(nn_cuda *c, const k_sgd_cfg *sgd, uint64_t step) { (void)c; (void)sgd; (void)step; }
double nn_cuda_eval(nn_cuda *c, const void *x, const int32_t *y, int n, long *correct)
{
    (void)c; (void)x; (void)y; (void)n;
    *correct = 0;
    return 0;
}
nn_graph *nn_cuda_graph(nn_cuda *c) { (void)c; return NULL; }
int nn_cuda_device(const nn_cuda *c) { (void)c; return -1; }
port_stream nn_cuda_stream(const nn_cuda *c) { (void)c; return NULL; }
void *nn_cuda_stage(const nn_cuda *c) { (void)c; return NULL; }
void *nn_cuda_arena(const nn_cuda *c, size_t *bytes) { (void)c; *bytes = 0; return NULL; }
void nn_cuda_set_dp(nn_cuda *c, const nn_cuda_dp *dp) { (void)c; (void)dp; }
const char *nn_cuda_errmsg(const nn_cuda *c) { (void)c; return nocuda; }
const char *nn_cuda_desc(const nn_cuda *c) { (void)c; return ""; }
int nn_cuda_wgmma(const nn_cuda *c) { (void)c; return 0; }
const char *nn_cuda_wgmma_why(const nn_cuda *c) { (void)c; return ""; }
unsigned long nn_cuda_conv_permutes(const nn_cuda *c)
{
    (void)c;
    return 0;
}
int nn_cuda_nhwc_outputs(const nn_cuda *c, int *outputs)
{
    (void)c;
    *outputs = 0;
    return 0;
}
int nn_cuda_nhwc_of_kind(const nn_cuda *c, const char *kind, int *nodes)
{
    (void)c, (void)kind;
    *nodes = 0;
    return 0;
}
void nn_cuda_close(nn_cuda *c) { (void)c; }
#endif
