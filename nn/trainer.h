/* The trainer: plans all memory, loads the data, and runs the seed script's loop
 * (train epochs, "Train Epoch" / "Test set" lines, timing). */
#ifndef NN_TRAINER_H
#define NN_TRAINER_H
#include "nn/ckpt.h"
#include "nn/data/dataset.h"
#include "nn/data/loader.h"
#include "nn/ddp.h"
#include "nn/graph.h"
#include "nn/models/models.h"
#include "nn/opts.h"
#include "nn/optim.h"
#include "nn/sampler.h"
#include "nn/settings.h"
#include "nn/train_inv.h"
#include "nn/train_mode.h"

/* Language models (nn/lm.c): validation windows, sampling state. */
typedef struct nn_lm {
    int32_t *win;          /* eval_chunk windows (validation) or one (generation) */
    float *logits;         /* one row of the vocabulary */
    struct nn_bpe *bpe;    /* decoding for printed samples (NULL: bytes, or ids) */
    uint64_t draws;        /* random numbers used so far (the sampling stream) */
} nn_lm;

typedef struct nn_trainer {
    nn_opts o;
    nn_settings set;       /* threads, ISA, conv algorithm, matmul precision, device (nn/settings.h) */
    const nn_train_mode *mode; /* classifier, language model or --invariant (nn/train_mode.h) */
    char data_dir[512];
    rt_arena host, data;   /* the model and optimizer; the data and its loader */
    nn_dataset train, test;
    nn_sampler sampler;
    nn_loader loader;
    nn_graph g;            /* the model (nn/graph.h) */
    nn_node *nodes;        /* the graph's tables, allocated once at start-up */
    nn_param *pmeta;
    nn_buf *bmeta;
    nn_model_cfg mc;
    float *momentum;       /* optimizer state, one per parameter (= opt.m) */
    k_sgd_cfg sgd;         /* --device cuda's SGD (the CPU uses opt) */
    nn_optim opt;          /* optimizer, schedule, clipping (nn/optim.h) */
    int epoch;             /* the epoch being trained (the schedule's) */
    int micro;             /* micro-batches accumulated toward the next step */
    long topk_correct[NN_MAX_TOPK]; /* last evaluation, all ranks (--topk) */
    int eval_chunk;        /* evaluation runs in chunks of this many samples */
    int rank, world;
    nn_ddp *ddp;           /* the data-parallel group (comm NULL for one rank) */
    int test_first, test_count; /* this rank's contiguous shard of the test set */
    int start_epoch;       /* 1, or the epoch after a resumed checkpoint */
    uint64_t step;         /* optimizer steps taken (also the dropout RNG counter) */
    uint64_t epoch_step0;  /* step at the start of the current epoch */
    int epoch_step;        /* optimizer steps taken in the epoch being trained */
    int skip_steps;        /* the resumed epoch's steps a mid-epoch checkpoint had done */
    int stop;              /* stopped at a restart point inside an epoch */
    double compute_s, data_s, comm_s; /* per-epoch split of a step's time */
    long epoch_samples;    /* samples trained in the last epoch, all ranks */
    double last_loss;      /* of the last micro-batch (the NaN guard names it) */
    double peak_rss_mib;
    struct nn_cuda *cuda;  /* --device cuda: the GPU step (nn/graph_cuda.h); NULL on the CPU */
    nn_inv inv;            /* --invariant (nn/train_inv.h) */
    /* Elastic launcher (DDPRT_ELASTIC): a file that exists when the job should stop at
     * its next restart point (a node waits to join); NULL: not elastic. */
    const char *restart_file;
    nn_lm lm;              /* token windows (g.lm) */
    /* The gradient buckets (nn/shard.h: the norm's blocks, ZeRO-1's parts), this
     * rank's ZeRO-1 segments (opt.seg) and, sharded with clipping, the norm's block
     * sums. */
    nn_bucket_span bk[NN_MAX_PARAMS];
    int nbk;
    size_t blk;
    nn_span zseg[2 * NN_MAX_PARAMS];
    double *norm_part;
    size_t nnorm;
} nn_trainer;

/* nn_trainer_run's status after stopping at a restart point (EX_TEMPFAIL): the
 * launchers start the next round with the new membership, resuming. */
#define NN_EXIT_RESTART_POINT 75

/* The files, bottom up: train_zero.c (ZeRO-1's state) < train_step.c (the step,
 * checkpoints) < train_epoch.c (the classifier mode), lm.c, train_inv.c (the other
 * modes) < train.c (the epochs loop) and train_setup.c (set-up, which picks the mode). */

/* Everything up to the first step (nn/train_setup.c): data located and validated,
 * memory planned and carved, data loaded, parameters initialised or resumed, every
 * flag that depends on them checked. 0, or -1 with a one-line error. */
int nn_trainer_setup(nn_trainer *t, const nn_opts *o, nn_ddp *ddp, char *err, size_t errlen);
/* One micro-batch; the optimizer steps after --accum-steps of them (after each one
 * by default). Returns the batch's mean loss. Allocates nothing. */
double nn_trainer_step(nn_trainer *t, const void *x, const int32_t *y, int n);
/* Steps on a partial accumulation (an epoch's last micro-batches); no-op if none. */
void nn_trainer_flush(nn_trainer *t);
/* Loss sum and correct count over this rank's share of the test set; -1 when a bad
 * sample stopped it (nn_loader_error says which). */
int nn_trainer_eval(nn_trainer *t, double *loss_sum, long *correct, long *count);
/* The epochs loop with the seed's log lines; returns the process exit status: 0,
 * NN_EXIT_RESTART_POINT, or 1 after a bad sample (its line printed and passed to the
 * other ranks). */
int nn_trainer_run(nn_trainer *t);
void nn_trainer_free(nn_trainer *t);
/* For nn/train_inv.c: stops the job when loss or a gradient is not finite (--nan-check);
 * clipping, schedule and the optimizer on the averaged gradients; the seed's log line. */
void nn_trainer_nan_guard(nn_trainer *t, double loss);
void nn_trainer_update(nn_trainer *t);
void nn_trainer_log_line(nn_trainer *t, int epoch, long done, double pct, double loss, double rate, double eta);
/* The generic epoch (nn/train_epoch.c: the classifier's and the language model's): its
 * wall time, or -1 when a bad sample stopped it. */
double nn_trainer_epoch(nn_trainer *t, int epoch, struct nn_metrics *mx);
/* A classifier evaluation's sums (loss, correct, count, top-k counts) into r and
 * t->topk_correct, and rank 0's "Test set" and "Acc@k" lines. */
void nn_trainer_report_eval(nn_trainer *t, const double *sums, nn_eval_result *r);
/* Rank 0 writes the checkpoint after `epoch` epochs and epoch_steps steps of the next
 * (--save; every rank takes part under ZeRO-1). */
void nn_trainer_save(nn_trainer *t, int epoch, int epoch_steps);
/* An elastic launcher's stop request, agreed by all ranks at a checkpoint: 1 stops. */
int nn_trainer_restart_point(nn_trainer *t, int epoch, int epoch_steps);
/* After an optimizer step inside epoch `epoch` (more: steps remain in it): --save-every's
 * checkpoint and, under an elastic launcher, a restart point. 1: stop here (t->stop). */
int nn_trainer_step_done(nn_trainer *t, int epoch, int more);
double nn_peak_rss_mib(void);
/* What a checkpoint of the trainer holds besides the graph (nn/ckpt.h): the optimizer
 * state and the position after `epoch`. */
nn_ckpt_state nn_trainer_ckpt_state(nn_trainer *t, int epoch);
/* The L2 norm of the gradients (clip_grad_norm_'s), summed in nn/shard.h's blocks: the
 * same bits with and without --zero 1 (nn/train_zero.c). */
double nn_trainer_grad_norm(nn_trainer *t);
/* --zero 1 (nn/train_zero.c): the buckets and this rank's segments, set in the
 * optimizer (at carve time, before its state is planned; no segments: not sharded);
 * whether this rank's optimizer holds a shard only; the first parameter (index; np:
 * the padding) with a non-finite averaged gradient on any rank, -1 if none; the parameters' allgather after the step, and the wait for it
 * before anything but the forward reads the parameters; the whole optimizer state in
 * fp32 gathered into full[] (malloc'd) for a checkpoint, and a checkpoint's whole
 * state read into this rank's shard (both also for the 8-bit state, unsharded). */
void nn_zero_plan(nn_trainer *t, rt_arena *a);
int nn_zero_sharded(const nn_trainer *t);
int nn_zero_first_nonfinite(nn_trainer *t);
void nn_zero_gather_params(nn_trainer *t);
void nn_zero_params_ready(nn_trainer *t);
void nn_zero_full_state(nn_trainer *t, float **full);
int nn_zero_load(nn_trainer *t, const char *path, nn_ckpt_state *st, char *err, size_t errlen);
#endif
