/* ddprt-bench internals: options (bench_main.c parses them) and the runner
 * (bench_run.c). */
#ifndef TP_BENCH_H
#define TP_BENCH_H
#include "transport/tp.h"
#include <stddef.h>
#include <stdint.h>

enum { B_ALLREDUCE, B_BROADCAST, B_REDUCE_SCATTER, B_ALLGATHER, B_NCOLL };

typedef struct bench_opts {
    int coll;
    size_t min_bytes, max_bytes;
    int factor, iters, warmup;
    int dtype, op, root, check, algo;
    uint64_t byte_budget;       /* per size: iterations shrink above budget / size */
    const char *init_method;
    const char *backend;        /* tcp, verbs, auto (bench_tcp: one process per rank) */
    int rank, world;            /* -1: from the environment */
    double timeout_s;
    size_t arena_bytes;         /* comm scratch; 0 = the default */
    int registered;             /* buffers from tp_mem_alloc (-R 1) */
    const char *coll_name, *type_name;
} bench_opts;

int bench_tcp(const bench_opts *o);
int bench_loopback(const bench_opts *o);
#endif
