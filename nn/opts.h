/* ddprt-train's flags: the seed script's (mnsit.py) names and defaults, plus ours. */
#ifndef NN_OPTS_H
#define NN_OPTS_H
#include <stddef.h>
#include <stdint.h>

typedef struct nn_opts {
    int batch_size, test_batch_size, epochs;
    double lr, momentum, weight_decay;
    int nesterov, no_cuda, seed, log_interval, threads, mem_report, drop_last;
    const char *data, *model, *device;
    /* distributed */
    const char *init_method, *backend;
    int rank, world_size;
    double bucket_mb;
    int check_sync;
    const char *metrics, *plot, *save, *resume;
    int max_steps; /* stop after this many training steps (tests, benchmarks); 0 = all */
    int save_every; /* --save-every N: also a checkpoint every N optimizer steps inside an epoch */
    /* models */
    const char *model_file, *init_from, *nan_check;
    int num_classes, embed_dim, no_eval, keep, recompute_macs, init_non_strict;
    /* data (nn/data/dataset.h) */
    const char *dataset, *augment, *bad_sample;
    int image_size, workers, seq_len, min_freq, max_vocab;
    /* optimizers, schedules and DDP training features (nn/optim.h parses them) */
    const char *optimizer, *lr_schedule, *lr_milestones, *lr_scale, *grad_compress, *topk;
    int lr_step, no_decay_bn_bias, accum_steps, sync_bn;
    double lr_gamma, warmup_epochs, clip_grad_norm;
    double loss_scale; /* --amp fp16: the initial loss scale (2^16) */
    const char *amp; /* mixed precision: NULL/"none", "bf16" (CPU), "fp16" (CUDA only) */
    const char *amp_act; /* --amp-activations: NULL (16), "16" or "32" (the device's --amp only) */
    const char *channels_last; /* --channels-last: NULL (auto), "auto", "on" or "off" (the device's --amp only) */
    const char *conv_algo; /* k_conv_set_algo's name; NULL: DDPRT_CONV or auto */
    const char *matmul_precision; /* k_set_matmul_precision's name; NULL: highest */
    const char *invariant; /* --invariant K[:radices]: world-size-invariant training (nn/vshard.h) */
    /* language models (token windows) */
    int eval_every, eval_batches, sample_every, sample_len, top_k, generate;
    int zero;        /* ZeRO stage: 0 or 1 (optimizer state sharded across ranks) */
    double temperature;
    const char *tokenizer;
} nn_opts;

void nn_opts_default(nn_opts *o);
/* Parses argv into o. Returns 0, 1 when --help was printed, or -1 after printing a
 * one-line error with a hint (unknown flag: the closest known one). */
int nn_opts_parse(nn_opts *o, int argc, char **argv);
void nn_opts_usage(void);
/* The (name, value) pairs of every flag that changes what the ranks do together (all
 * flags but the per-rank ones: --rank, --data, --save, --resume, --metrics, --plot,
 * --threads, --log-interval, --mem-report, --init-method), for the start-up agreement.
 * Values: integers and flags as is, doubles as their IEEE bits, strings as a 64-bit
 * FNV-1a hash (unset: 0). Names are the flag names without "--". Returns the number of
 * pairs, or -1 when max is too small. Walks the flag table: a new flag is covered. */
int nn_opts_agreement(const nn_opts *o, const char **names, int64_t *vals, int max);
/* Every flag's name and whether it is per-rank (tests; help tools). Returns the count. */
int nn_opts_flags(const char **names, int *per_rank, int max);
/* 0 when the directories of --metrics, --plot and --save exist and are writable; else
 * -1 with "--plot /nodir/m.svg: cannot write into /nodir: No such file or directory". */
int nn_opts_check_paths(const nn_opts *o, char *err, size_t errlen);
#endif
