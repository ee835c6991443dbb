/* Optimizers (torch.optim.SGD / Adam / AdamW), learning-rate schedules (StepLR,
 * MultiStepLR, CosineAnnealingLR, per-step linear warmup, Goyal et al.'s linear
 * scaling), gradient clipping (clip_grad_norm_) and the parsed settings of the
 * training features of issue 11 (accumulation, SyncBatchNorm, compression, top-k).
 * State (momentum or Adam's moments and step count) is planned in the arena at
 * start-up and saved in the checkpoint's state file (nn/ckpt.c). */
#ifndef NN_OPTIM_H
#define NN_OPTIM_H
#include "nn/graph.h"
#include "nn/shard.h"
#include "nn/opts.h"
#include "kernels/k_optim.h"
#include <stdint.h>

enum { NN_OPT_SGD, NN_OPT_ADAM, NN_OPT_ADAMW };
enum { NN_SCHED_NONE, NN_SCHED_STEP, NN_SCHED_MULTISTEP, NN_SCHED_COSINE, NN_SCHED_COSINE_STEP };
enum { NN_COMPRESS_NONE, NN_COMPRESS_FP16, NN_COMPRESS_BF16 };
#define NN_MAX_MILESTONES 16
#define NN_MAX_TOPK 4

typedef struct nn_optim_cfg {
    int kind, sched, scale_world, no_decay, accum, sync_bn, compress;
    int lr_step, milestones[NN_MAX_MILESTONES], nmilestones, epochs;
    double lr, momentum, weight_decay, gamma, warmup_epochs, clip;
    double beta1, beta2, eps;
    int nesterov;
    int q8;                /* --optimizer adam8bit / adamw8bit: the moments in 8 bits (k_optim.h) */
    int topk[NN_MAX_TOPK], ntopk;
} nn_optim_cfg;

typedef struct nn_optim {
    nn_optim_cfg c;
    double base_lr;        /* --lr, times the world size under --lr-scale world */
    double lr;             /* the learning rate of the last step */
    double grad_norm;      /* the total norm of the last clipped step */
    float *m, *v;          /* SGD: m = momentum; Adam: m, v = exp_avg, exp_avg_sq (NULL with q8) */
    uint8_t *m8, *v8;      /* q8: their codes, and a scale per block (of each run: nn/optim.c) */
    int8_t *sm, *sv;
    size_t nscale;
    size_t n;
    /* ZeRO-1: the floats whose state this rank keeps (nn/shard.h), ascending, their
     * state back to back in m and v (nstate floats); nseg 0: every float's. */
    const nn_span *seg;
    int nseg;
    size_t nstate;
    uint64_t t;            /* optimizer steps taken (Adam's bias correction; SGD's first step) */
    long steps_per_epoch;  /* optimizer steps (for the warmup length) */
} nn_optim;

/* Flags to settings; -1 with a one-line error naming the flag. */
int nn_optim_parse(const nn_opts *o, nn_optim_cfg *c, char *err, size_t errlen);
/* Names and values of the settings for nn_ddp_check_config; returns how many
 * (at most 16). */
int nn_optim_config_fields(const nn_optim_cfg *c, const char **names, int64_t *vals);
/* ZeRO-1 (--zero 1): this rank keeps the state of the n segments only (kept by the
 * caller; nn_shard_segments) and updates only those parameters; the trainer
 * all-gathers the rest. Before nn_optim_plan. */
void nn_optim_shard(nn_optim *o, const nn_span *seg, int n);
/* Adam's settings for step o->t + 1 at lr, with or without weight decay (a run of
 * parameters: nn_optim_decay_runs); the CPU update and the GPU's (nn/graph_cuda.c) share it. */
k_adam_cfg nn_optim_adam_cfg(const nn_optim *o, double lr, int decay);
/* f(ctx, lo, hi, decay) over the graph's parameter floats [0, nparams) in runs of the
 * same weight-decay setting (--no-decay-bn-bias: biases and BatchNorm / LayerNorm
 * parameters take none), in order. */
void nn_optim_decay_runs(const nn_optim *o, const nn_graph *g, void (*f)(void *ctx, size_t lo, size_t hi, int decay),
                         void *ctx);
/* Carves the state (run on the planning arena, then on the real one). */
void nn_optim_plan(nn_optim *o, rt_arena *a, size_t nparams);
/* Zeroes the state; base_lr from the world size. */
void nn_optim_reset(nn_optim *o, int world, long steps_per_epoch);
/* The learning rate of optimizer step `step` (0-based, global) in epoch (1-based). */
double nn_optim_lr(const nn_optim *o, int epoch, uint64_t step);
/* clip_grad_norm_'s scaling, given the global L2 norm of the gradients: scales this
 * rank's (the segments', or all) when it exceeds max. */
void nn_optim_clip(nn_optim *o, nn_graph *g, double norm, double max);
/* Its factor (the gradients scale when it is below 1); records the norm as it does. */
float nn_optim_clip_coef(nn_optim *o, double norm, double max);
/* One update of every parameter with learning rate lr (weight decay skipped on
 * no_decay parameters under --no-decay-bn-bias). */
void nn_optim_step(nn_optim *o, nn_graph *g, double lr);
/* The state as fp32 (slot 0: m, 1: v), back to back as the segments (all floats when
 * not sharded: nn_optim_nstate of them): read out, or set (8-bit: decoded / encoded;
 * decode + encode is exact). For checkpoints. */
size_t nn_optim_nstate(const nn_optim *o);
void nn_optim_get_state(nn_optim *o, nn_graph *g, int slot, float *x);
void nn_optim_set_state(nn_optim *o, nn_graph *g, int slot, const float *x);
/* Number of float arrays of state (1 for SGD, 2 for Adam/AdamW). */
static inline int nn_optim_slots(const nn_optim *o) { return o->c.kind == NN_OPT_SGD ? 1 : 2; }
const char *nn_optim_name(int kind);
/* Counts, per k of --topk, the rows whose label is among the k largest outputs
 * (ties: classes scoring strictly higher than the label are counted). */
void nn_topk_count(const float *out, const int32_t *labels, int n, int classes, const int *ks, int nk,
                   long *counts);
#endif
