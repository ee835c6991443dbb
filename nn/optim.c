#include "nn/optim.h"
#include "kernels/k.h"
#include "kernels/k_optim.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The flag's names; the last two are Adam / AdamW with 8-bit state (bitsandbytes'
 * Adam8bit / AdamW8bit), whose kind is adam / adamw (the checkpoint holds fp32 state). */
static const char *const opt_names[] = {"sgd", "adam", "adamw", "adam8bit", "adamw8bit"};
static const char *const sched_names[] = {"none", "step", "multistep", "cosine", "cosine-step"};
static const char *const comp_names[] = {"none", "fp16", "bf16"};

const char *nn_optim_name(int kind) { return opt_names[kind]; }

static int pick(const char *flag, const char *v, const char *const *names, int n, int *out, char *err, size_t errlen)
{
    if (!v) return 0; /* the default (index 0) */
    for (int i = 0; i < n; i++)
        if (!strcmp(v, names[i])) { *out = i; return 0; }
    char list[96] = "";
    for (int i = 0; i < n; i++) snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? "|" : "", names[i]);
    snprintf(err, errlen, "--%s: expected %s, got '%s'", flag, list, v);
    return -1;
}

/* "30,60,90": increasing positive integers. */
static int int_list(const char *flag, const char *v, int *out, int max, int *n, char *err, size_t errlen)
{
    *n = 0;
    if (!v) return 0;
    const char *p = v;
    while (*p) {
        char *end;
        long x = strtol(p, &end, 10);
        if (end == p || x <= 0 || x > 1000000 || (*end && *end != ',') || *n == max || (*n && x <= out[*n - 1])) {
            snprintf(err, errlen, "--%s: expected up to %d increasing positive integers separated by commas, got '%s'",
                     flag, max, v);
            return -1;
        }
        out[(*n)++] = (int)x;
        p = *end ? end + 1 : end;
    }
    if (!*n) { snprintf(err, errlen, "--%s: empty list", flag); return -1; }
    return 0;
}

int nn_optim_parse(const nn_opts *o, nn_optim_cfg *c, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    c->lr = o->lr;
    c->momentum = o->momentum;
    c->weight_decay = o->weight_decay;
    c->nesterov = o->nesterov;
    c->epochs = o->epochs;
    c->no_decay = o->no_decay_bn_bias;
    c->sync_bn = o->sync_bn;
    c->accum = o->accum_steps > 0 ? o->accum_steps : 1;
    c->lr_step = o->lr_step;
    c->gamma = o->lr_gamma;
    c->warmup_epochs = o->warmup_epochs;
    c->clip = o->clip_grad_norm;
    c->beta1 = 0.9;
    c->beta2 = 0.999;
    c->eps = 1e-8;
    int scale = 0;
    static const char *const scale_names[] = {"none", "world"};
    if (pick("optimizer", o->optimizer, opt_names, 5, &c->kind, err, errlen) ||
        pick("lr-schedule", o->lr_schedule, sched_names, 5, &c->sched, err, errlen) ||
        pick("grad-compress", o->grad_compress, comp_names, 3, &c->compress, err, errlen) ||
        pick("lr-scale", o->lr_scale, scale_names, 2, &scale, err, errlen) ||
        int_list("lr-milestones", o->lr_milestones, c->milestones, NN_MAX_MILESTONES, &c->nmilestones, err, errlen) ||
        int_list("topk", o->topk, c->topk, NN_MAX_TOPK, &c->ntopk, err, errlen))
        return -1;
    c->scale_world = scale;
    if (c->kind > NN_OPT_ADAMW) c->kind -= 2, c->q8 = 1;
    if (!(c->gamma > 0 && c->gamma <= 1)) { snprintf(err, errlen, "--lr-gamma: expected a number in (0, 1], got %g", c->gamma); return -1; }
    if (c->lr_step <= 0) { snprintf(err, errlen, "--lr-step: expected a positive integer, got %d", c->lr_step); return -1; }
    if (!(c->warmup_epochs >= 0 && c->warmup_epochs <= 1e6)) {
        snprintf(err, errlen, "--warmup-epochs: expected a number >= 0, got %g", c->warmup_epochs);
        return -1;
    }
    if (!(c->clip >= 0 && c->clip < 1e30)) { snprintf(err, errlen, "--clip-grad-norm: expected a number > 0, got %g", c->clip); return -1; }
    if (c->sched == NN_SCHED_MULTISTEP && !c->nmilestones) {
        snprintf(err, errlen, "--lr-schedule multistep needs --lr-milestones (e.g. 30,60,90)");
        return -1;
    }
    if (c->nmilestones && c->sched != NN_SCHED_MULTISTEP) {
        snprintf(err, errlen, "--lr-milestones: only used with --lr-schedule multistep");
        return -1;
    }
    if (c->kind != NN_OPT_SGD && c->nesterov) {
        snprintf(err, errlen, "--nesterov: only with --optimizer sgd");
        return -1;
    }
    return 0;
}

int nn_optim_config_fields(const nn_optim_cfg *c, const char **names, int64_t *v)
{
    static const char *const n[] = {"optimizer", "lr_schedule", "lr_step", "lr_gamma (1e-9)", "lr_milestones (hash)",
                                    "warmup_epochs (1e-9)", "lr_scale", "no_decay_bn_bias", "accum_steps",
                                    "clip_grad_norm (1e-9)", "sync_bn", "grad_compress", "topk (hash)",
                                    "weight_decay (1e-12)", "nesterov"};
    int64_t mh = 0, th = 0;
    for (int i = 0; i < c->nmilestones; i++) mh = mh * 1000003 + c->milestones[i];
    for (int i = 0; i < c->ntopk; i++) th = th * 1000003 + c->topk[i];
    int64_t x[] = {c->kind, c->sched, c->lr_step, (int64_t)llround(c->gamma * 1e9), mh,
                   (int64_t)llround(c->warmup_epochs * 1e9), c->scale_world, c->no_decay, c->accum,
                   (int64_t)llround(c->clip * 1e9), c->sync_bn, c->compress, th,
                   (int64_t)llround(c->weight_decay * 1e12), c->nesterov};
    int k = (int)(sizeof x / sizeof x[0]);
    for (int i = 0; i < k; i++) { names[i] = n[i]; v[i] = x[i]; }
    return k;
}

void nn_optim_shard(nn_optim *o, const nn_span *seg, int n)
{
    o->seg = seg;
    o->nseg = n;
    o->nstate = 0;
    for (int i = 0; i < n; i++) o->nstate += seg[i].hi - seg[i].lo;
}

void nn_optim_plan(nn_optim *o, rt_arena *a, size_t nparams)
{
    size_t n = o->nseg ? o->nstate : nparams;
    o->n = nparams;
    if (o->c.q8) { /* a scale per block of each run: at most n / K_Q8_BLOCK + one per run */
        o->nscale = n / K_Q8_BLOCK + 3 * NN_MAX_PARAMS + 2;
        o->m8 = rt_arena_alloc(a, n, RT_MEM_OPTIM, "Adam exp_avg (8-bit)");
        o->v8 = rt_arena_alloc(a, n, RT_MEM_OPTIM, "Adam exp_avg_sq (8-bit)");
        o->sm = rt_arena_alloc(a, 2 * o->nscale, RT_MEM_OPTIM, "8-bit state scales");
        o->sv = o->sm ? o->sm + o->nscale : NULL;
        o->m = o->v = NULL;
        return;
    }
    o->m = rt_arena_alloc(a, n * sizeof(float), RT_MEM_OPTIM, o->c.kind == NN_OPT_SGD ? "momentum" : "Adam exp_avg");
    o->v = o->c.kind == NN_OPT_SGD ? NULL : rt_arena_alloc(a, n * sizeof(float), RT_MEM_OPTIM, "Adam exp_avg_sq");
}

void nn_optim_reset(nn_optim *o, int world, long steps_per_epoch)
{
    size_t n = o->nseg ? o->nstate : o->n;
    if (o->m) memset(o->m, 0, n * sizeof(float));
    if (o->v) memset(o->v, 0, n * sizeof(float));
    if (o->m8) memset(o->m8, 0, n), memset(o->v8, 0, n), memset(o->sm, 0, 2 * o->nscale); /* code 0 is 0 */
    o->t = 0;
    o->base_lr = o->c.lr * (o->c.scale_world ? world : 1);
    o->lr = o->base_lr;
    o->steps_per_epoch = steps_per_epoch > 0 ? steps_per_epoch : 1;
}

double nn_optim_lr(const nn_optim *o, int epoch, uint64_t step)
{
    const nn_optim_cfg *c = &o->c;
    int e = epoch - 1; /* PyTorch's scheduler.last_epoch */
    double lr = o->base_lr;
    switch (c->sched) {
    case NN_SCHED_STEP: lr *= pow(c->gamma, e / c->lr_step); break;
    case NN_SCHED_MULTISTEP: {
        int k = 0;
        while (k < c->nmilestones && c->milestones[k] <= e) k++;
        lr *= pow(c->gamma, k);
        break;
    }
    case NN_SCHED_COSINE: /* CosineAnnealingLR(T_max = epochs, eta_min = 0), closed form */
        lr *= (1 + cos(M_PI * e / (c->epochs > 0 ? c->epochs : 1))) / 2;
        break;
    case NN_SCHED_COSINE_STEP: { /* the same curve stepped every optimizer step (timm's t_in_epochs=False): the
                                  * rate reaches 0 at the end of the run, so its final accuracy is not a
                                  * snapshot of a high-rate walk */
        double total = (double)(c->epochs > 0 ? c->epochs : 1) * (double)o->steps_per_epoch;
        lr *= (1 + cos(M_PI * fmin((double)step / total, 1.0))) / 2;
        break;
    }
    default: break;
    }
    double ws = c->warmup_epochs * (double)o->steps_per_epoch;
    if (ws > 0 && (double)step < ws) lr *= ((double)step + 1) / ws; /* linear, per step, reaching lr at its end */
    return lr;
}

float nn_optim_clip_coef(nn_optim *o, double norm, double max)
{
    o->grad_norm = norm;
    return (float)(max / (norm + 1e-6));
}

void nn_optim_clip(nn_optim *o, nn_graph *g, double norm, double max)
{
    float coef = nn_optim_clip_coef(o, norm, max);
    if (coef >= 1.0f) return;
    if (!o->nseg) k_scale_inplace(g->nparams, coef, g->grads);
    for (int i = 0; i < o->nseg; i++) k_scale_inplace(o->seg[i].hi - o->seg[i].lo, coef, g->grads + o->seg[i].lo);
}

/* This rank's floats in runs that share their decay setting, cut to its segments
 * (ZeRO-1), ascending: [lo, hi) with the state of float lo at index at. Every
 * element's update is the same arithmetic wherever its run starts, so the sharded
 * step gives the unsharded bits (fp32 state; 8-bit blocks start at each run). */
typedef struct run_ctx {
    double lr;
    size_t blk;           /* 8-bit: the next run's first block */
    int slot;             /* state export / import: 0 m, 1 v */
    float *x;             /* its fp32 values, back to back as the state */
} run_ctx;
typedef void (*run_fn)(nn_optim *o, nn_graph *g, size_t lo, size_t hi, size_t at, int decay, run_ctx *r);

static void each_seg(nn_optim *o, nn_graph *g, size_t lo, size_t hi, int decay, run_fn f, run_ctx *r)
{
    if (!o->nseg) {
        if (hi > lo) f(o, g, lo, hi, lo, decay, r);
        return;
    }
    size_t at = 0;
    for (int i = 0; i < o->nseg; at += o->seg[i].hi - o->seg[i].lo, i++) {
        size_t a = lo > o->seg[i].lo ? lo : o->seg[i].lo, b = hi < o->seg[i].hi ? hi : o->seg[i].hi;
        if (b > a) f(o, g, a, b, at + (a - o->seg[i].lo), decay, r);
    }
}

void nn_optim_decay_runs(const nn_optim *o, const nn_graph *g, void (*f)(void *ctx, size_t lo, size_t hi, int decay),
                         void *ctx)
{
    if (!o->c.no_decay) {
        f(ctx, 0, g->nparams, 1);
        return;
    }
    for (int i = 0; i < g->np;) {
        int j = i + 1, d = !g->p[i].no_decay;
        while (j < g->np && (!g->p[j].no_decay) == d) j++;
        size_t lo = i ? g->p[i].offset : 0, hi = j < g->np ? g->p[j].offset : g->nparams;
        f(ctx, lo, hi, d);
        i = j;
    }
}

typedef struct seg_ctx { nn_optim *o; nn_graph *g; run_fn f; run_ctx *r; } seg_ctx;
static void seg_run(void *ctx, size_t lo, size_t hi, int decay)
{
    seg_ctx *s = ctx;
    each_seg(s->o, s->g, lo, hi, decay, s->f, s->r);
}

static void each_run(nn_optim *o, nn_graph *g, run_fn f, run_ctx *r)
{
    seg_ctx s = {o, g, f, r};
    nn_optim_decay_runs(o, g, seg_run, &s);
}

k_adam_cfg nn_optim_adam_cfg(const nn_optim *o, double lr, int decay)
{
    const nn_optim_cfg *c = &o->c;
    double t = (double)(o->t + 1), wd = decay ? c->weight_decay : 0.0;
    k_adam_cfg a = {.beta1 = (float)c->beta1, .beta2 = (float)c->beta2, .eps = (float)c->eps,
                    .weight_decay = (float)wd, .decoupled = c->kind == NN_OPT_ADAMW,
                    .step_size = (float)(lr / (1 - pow(c->beta1, t))),
                    .bc2_sqrt = (float)sqrt(1 - pow(c->beta2, t)),
                    .decay_mul = c->kind == NN_OPT_ADAMW ? (float)(1 - lr * wd) : 1.0f};
    return a;
}

static void update_run(nn_optim *o, nn_graph *g, size_t lo, size_t hi, size_t at, int decay, run_ctx *r)
{
    const nn_optim_cfg *c = &o->c;
    size_t n = hi - lo;
    double wd = decay ? c->weight_decay : 0.0, lr = r->lr;
    if (c->kind == NN_OPT_SGD) {
        k_sgd_cfg s = {.lr = (float)lr, .momentum = (float)c->momentum, .weight_decay = (float)wd,
                       .nesterov = c->nesterov};
        k_sgd_step(n, &s, o->t == 0, g->params + lo, g->grads + lo, o->m + at);
        return;
    }
    k_adam_cfg a = nn_optim_adam_cfg(o, lr, decay);
    if (!c->q8) {
        k_adam_step(n, &a, g->params + lo, g->grads + lo, o->m + at, o->v + at);
        return;
    }
    /* the stream of step t, element at + i: reproducible on any thread count and resume */
    k_adam8_step(n, &a, g->params + lo, g->grads + lo, o->m8 + at, o->v8 + at, o->sm + r->blk, o->sv + r->blk,
                 (uint32_t)at, (uint32_t)o->t + 1);
    r->blk += (n + K_Q8_BLOCK - 1) / K_Q8_BLOCK;
}

void nn_optim_step(nn_optim *o, nn_graph *g, double lr)
{
    o->lr = lr;
    run_ctx r = {.lr = lr};
    each_run(o, g, update_run, &r);
    o->t++;
}

static void export_run(nn_optim *o, nn_graph *g, size_t lo, size_t hi, size_t at, int decay, run_ctx *r)
{
    (void)g, (void)decay;
    size_t n = hi - lo;
    int8_t *s = (r->slot ? o->sv : o->sm) + r->blk;
    k_q8_decode(n, (r->slot ? o->v8 : o->m8) + at, s, r->slot, r->x + at);
    r->blk += (n + K_Q8_BLOCK - 1) / K_Q8_BLOCK;
}

static void import_run(nn_optim *o, nn_graph *g, size_t lo, size_t hi, size_t at, int decay, run_ctx *r)
{
    (void)g, (void)decay;
    size_t n = hi - lo;
    int8_t *s = (r->slot ? o->sv : o->sm) + r->blk;
    k_q8_encode(n, r->x + at, (r->slot ? o->v8 : o->m8) + at, s, r->slot, (uint32_t)at, (uint32_t)o->t);
    r->blk += (n + K_Q8_BLOCK - 1) / K_Q8_BLOCK;
}

size_t nn_optim_nstate(const nn_optim *o) { return o->nseg ? o->nstate : o->n; }

void nn_optim_get_state(nn_optim *o, nn_graph *g, int slot, float *x)
{
    run_ctx r = {.slot = slot, .x = x};
    if (o->c.q8) each_run(o, g, export_run, &r);
    else memcpy(x, slot ? o->v : o->m, nn_optim_nstate(o) * sizeof(float));
}

void nn_optim_set_state(nn_optim *o, nn_graph *g, int slot, const float *x)
{
    run_ctx r = {.slot = slot, .x = (float *)x};
    float *dst = slot ? o->v : o->m;
    if (o->c.q8) each_run(o, g, import_run, &r);
    else if (dst != x) memcpy(dst, x, nn_optim_nstate(o) * sizeof(float));
}

void nn_topk_count(const float *out, const int32_t *labels, int n, int classes, const int *ks, int nk, long *counts)
{
    for (int i = 0; i < n; i++) {
        const float *r = out + (size_t)i * classes;
        float v = r[labels[i]];
        int above = 0;
        for (int k = 0; k < classes; k++) above += r[k] > v;
        for (int k = 0; k < nk; k++) counts[k] += above < ks[k];
    }
}
