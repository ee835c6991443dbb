/* The trainer: plans all memory, loads the data, and runs the seed script's loop
 * (train epochs, "Train Epoch" / "Test set" lines, timing). */
#ifndef NN_TRAINER_H
#define NN_TRAINER_H
#include "kernels/k.h"
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
#include "nn/train_inv_state.h"
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

/* The files, bottom up, each with its header: train_zero (ZeRO-1's state) < train_step
 * (the step, checkpoints) < train_epoch (the classifier mode), lm, train_inv (the other
 * modes) < train (the epochs loop) and train_setup (set-up, which picks the mode). This
 * header holds the trainer's state only. */
#endif
