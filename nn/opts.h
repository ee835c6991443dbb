/* ddprt-train's flags: the seed script's (mnsit.py) names and defaults, plus ours. */
#ifndef NN_OPTS_H
#define NN_OPTS_H

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
    /* models */
    const char *model_file, *init_from;
    int num_classes, embed_dim, no_eval;
    /* data (nn/data/dataset.h) */
    const char *dataset, *augment, *bad_sample;
    int image_size, workers, seq_len, min_freq, max_vocab;
    const char *amp; /* mixed precision: NULL/"none", "bf16" (CPU), "fp16" (CUDA only) */
} nn_opts;

void nn_opts_default(nn_opts *o);
/* Parses argv into o. Returns 0, 1 when --help was printed, or -1 after printing a
 * one-line error with a hint (unknown flag: the closest known one). */
int nn_opts_parse(nn_opts *o, int argc, char **argv);
void nn_opts_usage(void);
#endif
