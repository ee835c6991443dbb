/* ddprt-bench: nccl-tests style collective benchmark.
 *
 *   ddprt-bench allreduce -b 4 -e 256M -f 2 -n 20 -w 5 -d float -o sum [--algo ring|rd|hier|auto]
 *                         [--backend tcp|verbs|auto|loopback] [--init-method URL] [--check 0|1]
 *   ddprt-bench allreduce --device cuda -b 1K -e 256M -f 4   (device buffers: cuda_ipc vs the
 *                         pinned staging vs the D2D copy, bench_device.c)
 *   ddprt-bench --predict ... | --fit FILE ...   (the cost model: bench_predict.c)
 *
 * One process per rank (started by ddprt-launch, Slurm, mpirun, or by hand with
 * --init-method/--rank/--world-size) over tcp; or one process with --world-size
 * threads over the loopback backend. Rank 0 prints one row per size:
 * size count type op time algbw busbw #wrong, where busbw follows nccl-tests
 * (allreduce: algbw * 2(n-1)/n; reduce_scatter, allgather: algbw * (n-1)/n;
 * broadcast: algbw), time is the slowest rank's mean, and #wrong counts elements of
 * a separate checked run (inputs are small integers, so the exact result is known). */
#include "apps/bench/bench.h"
#include "apps/bench/bench_predict.h"
#include "rt/log.h"
#include "rt/rdzv.h"
#include "rt/version.h"
#include "transport/tp_reduce.h"
#include "rt/args.h"
#include "rt/env.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    char err[512];
    rt_log_init();
    if (rt_env_check(err, sizeof err)) {
        fprintf(stderr, "ddprt-bench: error: %s\n", err);
        return 2;
    }
    /* The cost model has no communicator and its own flags. */
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
        if (!strcmp(argv[i], "--predict") || !strcmp(argv[i], "--fit") || !strncmp(argv[i], "--fit=", 6)) {
            bp_opts p;
            int rc = bench_predict_parse(argc, argv, &p, err, sizeof err);
            if (rc == RT_ARGS_HELP) bench_predict_usage(stdout);
            if (rc == RT_ARGS_VERSION) printf("ddprt-bench (ddprt) %s\n", DDPRT_VERSION);
            if (rc == RT_ARGS_ERROR) fprintf(stderr, "ddprt-bench: error: %s\n", err);
            return rc == RT_ARGS_OK ? bench_predict_run(&p) : rc == RT_ARGS_ERROR ? 2 : 0;
        }
    bench_opts o;
    int rc = bench_parse(argc, argv, &o, err, sizeof err);
    if (rc == RT_ARGS_HELP) bench_usage(stdout);
    if (rc == RT_ARGS_VERSION) printf("ddprt-bench (ddprt) %s\n", DDPRT_VERSION);
    if (rc == RT_ARGS_ERROR) fprintf(stderr, "ddprt-bench: error: %s\n", err);
    if (rc) return rc == RT_ARGS_ERROR ? 2 : 0;
    if (!strcmp(o.backend, "loopback")) return bench_loopback(&o);
    return bench_tcp(&o);
}
