/* ddprt-train: the seed article's mnsit.py as a C program. */
#include "kernels/k.h"
#include "nn/train.h"
#include "ports/posix/port.h"
#include "rt/log.h"
#include <stdio.h>

int main(int argc, char **argv)
{
    nn_opts o;
    nn_trainer t;
    char err[1024];
    rt_log_init();
    setvbuf(stdout, NULL, _IOLBF, 0); /* lines reach launchers and pipes as printed */
    nn_opts_default(&o);
    int rc = nn_opts_parse(&o, argc, argv);
    if (rc) return rc > 0 ? 0 : 2;
    k_set_threads(o.threads ? o.threads : port_ncpus());
    if (nn_trainer_setup(&t, &o, err, sizeof err)) rt_fatal("%s", err);
    rt_info("training %s on %s: %d train / %d test samples, %d thread(s), %s kernels", o.model, t.data_dir,
            t.train.n, t.test.n, k_threads(), k_isa());
    rc = nn_trainer_run(&t);
    nn_trainer_free(&t);
    return rc;
}
