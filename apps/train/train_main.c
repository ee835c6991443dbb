/* ddprt-train: the seed article's mnsit.py (with DistributedDataParallel) as a C
 * program. One process per rank: --init-method tcp://HOST:PORT --rank R
 * --world-size N, or the environment of ddprt-launch / torchrun / Slurm / mpirun. */
#include "nn/train.h"
#include "nn/train_setup.h"
#include "rt/env.h"
#include "rt/log.h"
#include "rt/version.h"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void on_signal(int sig)
{
    /* Only async-signal-safe calls: one line, then exit; the peers see the closed
     * connections and stop with an error naming this rank. */
    static const char msg[] = "ddprt: interrupted; stopping this rank\n";
    if (write(2, msg, sizeof msg - 1) < 0) {}
    _exit(128 + sig);
}

int main(int argc, char **argv)
{
    nn_opts o;
    nn_trainer t;
    nn_ddp *ddp;
    char err[1024];
    static char metrics_path[1024];
    if (rt_version_arg(argc, argv)) return 0;
    rt_log_init();
    setvbuf(stdout, NULL, _IOLBF, 0); /* lines reach launchers and pipes as printed */
    nn_opts_default(&o);
    int rc = nn_opts_parse(&o, argc, argv);
    if (rc) return rc > 0 ? 0 : 2;
    if (rt_env_check(err, sizeof err)) {
        rt_error("%s", err);
        return 2;
    }
    if (o.plot && !o.metrics) {
        snprintf(metrics_path, sizeof metrics_path, "%s.csv", o.plot);
        o.metrics = metrics_path;
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    if (nn_ddp_connect(&ddp, &o, err, sizeof err)) rt_fatal("%s", err);
    /* Rank 0 writes the files: a missing directory is an error now, not after an epoch. */
    if (nn_ddp_rank(ddp) == 0 && nn_opts_check_paths(&o, err, sizeof err)) {
        nn_ddp_close(ddp, 1);
        rt_fatal("%s", err);
    }
    if (nn_trainer_setup(&t, &o, ddp, err, sizeof err)) {
        nn_ddp_close(ddp, 1);
        rt_fatal("%s", err);
    }
    rc = nn_trainer_run(&t);
    nn_trainer_free(&t);
    nn_ddp_close(ddp, rc != 0 && rc != NN_EXIT_RESTART_POINT);
    return rc;
}
