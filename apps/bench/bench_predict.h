/* Alpha-beta cost model of ddprt's allreduce algorithms and of a DDP training step
 * (ddprt-bench --predict / --fit; formulas in bench_predict.c). Times in seconds,
 * sizes in bytes, bandwidths in bytes/s. */
#ifndef TP_BENCH_PREDICT_H
#define TP_BENCH_PREDICT_H
#include <stddef.h>
#include <stdio.h>

typedef struct bp_link {
    double alpha; /* seconds per message (per step of an algorithm) */
    double bw;    /* bytes/s one rank can push through the link, busbw terms */
} bp_link;

/* Flat ring over n ranks: 2(n-1) steps of S/n bytes. */
double bp_ring(int n, double bytes, bp_link l);
/* Recursive doubling (MPICH fold for non-powers of two): log2(p) exchanges of S
 * bytes, plus 2 more (fold in, hand back) when n is not a power of two p. */
double bp_rd(int n, double bytes, bp_link l);
/* tp_hier.c on hosts x local ranks: intra reduce-scatter, one inter-host ring per
 * local index (the local rings share the host's NIC), intra allgather, pipelined over
 * bp_hier_segs(bytes) segments (the in-host lane and the network lane overlap). */
double bp_hier(int hosts, int local, double bytes, bp_link intra, bp_link inter);
#define BP_HIER_SEG_BYTES (4.0 * 1048576) /* tp_hier.c's TP_HIER_SEG_BYTES, MAX_SEGS */
#define BP_HIER_MAX_SEGS 64
int bp_hier_segs(double bytes);
/* Flat ring over hosts x local ranks: every step crosses a host boundary, so it runs
 * at the inter-host link's alpha and bandwidth. */
double bp_ring2(int hosts, int local, double bytes, bp_link intra, bp_link inter);

/* Least squares fit of time = ka * alpha + kb * bytes / bw over measured rows
 * (ka, kb from the algorithm at world n: ring 2(n-1), 2(n-1)/n), each row weighted
 * by 1/time^2 so small and large sizes count alike in relative error.
 * Alpha is kept >= 0 (rows whose best line has a negative intercept get alpha 0
 * and the best bandwidth alone). 0 on success, -1 if the rows cannot determine
 * both or give no positive bandwidth. */
int bp_fit(int n, int rd, const double *bytes, const double *secs, int nrows, bp_link *out);

/* One DDP step: compute (forward + backward, per GPU) plus the part of the gradient
 * allreduce not hidden by backward. Buckets of bucket_bytes (the last one smaller);
 * backward = bwd_frac of compute, and every bucket but the last is allreduced while
 * backward runs; the last bucket's allreduce is always exposed. */
typedef struct bp_step {
    double compute;      /* s */
    double grad_bytes;
    double bucket_bytes; /* DDP's bucket_cap_mb, 25 MiB */
    double bwd_frac;     /* 2/3 */
} bp_step;
typedef double (*bp_allreduce_fn)(double bytes, const void *ctx);
double bp_step_time(const bp_step *s, bp_allreduce_fn ar, const void *ctx);

/* ddprt-bench --predict / --fit: the flags (bench_args.c parses them). */
typedef struct bp_opts {
    int predict;
    const char *fit, *measured, *algo;
    int world, per_node, factor, gpus[2];
    double alpha_us, beta_gbs, intra_alpha_us, intra_gbs; /* intra < 0: as between hosts */
    double step_ms, grad_mb, bucket_mb, bwd_frac;
    double lo_bytes, hi_bytes;                            /* hi < 0: not given */
} bp_opts;
int bench_predict_parse(int argc, char **argv, bp_opts *p, char *err, size_t errlen);
void bench_predict_usage(FILE *f);
/* Runs the parsed model: 0, or non-zero after printing why. */
int bench_predict_run(const bp_opts *o);
#endif
