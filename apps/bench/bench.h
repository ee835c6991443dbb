/* ddprt-bench internals: options (bench_args.c parses them) and the runner
 * (bench_run.c). */
#ifndef TP_BENCH_H
#define TP_BENCH_H
#include "transport/tp.h"
#include <stdio.h>
#include <stddef.h>
#include <stdint.h>

enum { B_ALLREDUCE, B_BROADCAST, B_REDUCE_SCATTER, B_ALLGATHER, B_NCOLL };

typedef struct bench_opts {
    int coll;
    size_t min_bytes, max_bytes;
    int factor, iters, warmup;
    int dtype, op, root, check, algo;
    size_t byte_budget;         /* per size: iterations shrink above budget / size */
    const char *init_method;
    const char *backend;        /* tcp, verbs, auto (bench_tcp: one process per rank) */
    int rank, world;            /* -1: from the environment */
    double timeout_s;
    size_t arena_bytes;         /* comm scratch; 0 = the default */
    int registered;             /* buffers from tp_mem_alloc (-R 1) */
    const char *coll_name, *type_name;
    int predict;                /* --predict / --fit: the cost model's run (bench_predict.c) */
    const char *fit;
    const char *device;         /* cpu (host buffers) or cuda (bench_device.c) */
} bench_opts;

extern const char *const bench_coll_names[B_NCOLL];
extern const char *const bench_type_names[RT_NDTYPE];
void bench_defaults(bench_opts *o);
/* argv as given to ddprt-bench: RT_ARGS_OK with o filled, RT_ARGS_HELP, RT_ARGS_VERSION
 * or RT_ARGS_ERROR with one line in err. */
int bench_parse(int argc, char **argv, bench_opts *o, char *err, size_t errlen);
void bench_usage(FILE *f);

int bench_tcp(const bench_opts *o);
int bench_loopback(const bench_opts *o);
/* --device cuda (bench_device.c): the device allreduce's table on c, IPC vs staged vs
 * the device copy; local_rank picks the GPU (-1: unknown). 0 or 1. */
int bench_device(tp_comm *c, const bench_opts *o, const char *backend, int local_rank);
#endif
