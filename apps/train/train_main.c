/* ddprt-train: the seed article's mnsit.py (with DistributedDataParallel) as a C
 * program. One process per rank: --init-method tcp://HOST:PORT --rank R
 * --world-size N, or the environment of ddprt-launch / torchrun / Slurm / mpirun. */
#include "kernels/k.h"
#include "nn/train.h"
#include "ports/posix/port.h"
#include "rt/env.h"
#include "rt/log.h"
#include "rt/version.h"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    int ncpu = port_ncpus() / nn_ddp_local_world(ddp);
    k_set_threads(o.threads ? o.threads : ncpu > 0 ? ncpu : 1);
    if (o.conv_algo) k_conv_set_algo(o.conv_algo); /* FC checked the name */
    k_set_matmul_precision(o.matmul_precision);
    if (o.matmul_precision && !strcmp(o.matmul_precision, "high") && !k_f32_matmul_high() && (!o.amp || !strcmp(o.amp, "none")))
        rt_info("--matmul-precision high: no AMX-BF16 here (CPU or DDPRT_ISA), the fp32 products stay at highest");
    if (nn_trainer_setup(&t, &o, ddp, err, sizeof err)) {
        nn_ddp_close(ddp, 1);
        rt_fatal("%s", err);
    }
    t.restart_file = rt_env_str(RT_ENV_ELASTIC); /* ddprt-launch --nnodes MIN:MAX */
    rt_info("training %s on %s: %d train / %d test samples, %d rank(s), %d thread(s) per rank, %s kernels%s",
            o.model_file ? o.model_file : o.model, t.data_dir, t.train.n, t.test.n, nn_ddp_world(ddp), k_threads(), k_isa(),
            t.g.amp == NN_AMP_BF16 ? ", amp bf16" : k_f32_matmul_high() ? ", fp32 matmuls in bf16x3 (AMX)" : "");
    rc = nn_trainer_run(&t);
    nn_trainer_free(&t);
    nn_ddp_close(ddp, rc != 0 && rc != NN_EXIT_RESTART_POINT);
    return rc;
}
