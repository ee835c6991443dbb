/* One rank of a stall-report test job (test/test_stall.c): small allreduces in a loop.
 * usage: t-stall_rank INIT RANK WORLD [key=value...]
 * keys: iters=N (default 100000)  sleep_ms=MS between ops (default 5)
 *       late=R at=K secs=S: rank R spends S s outside any collective before op K
 *       odd=R at=K: rank R issues a broadcast instead of the allreduce at op K
 *       ag=1 at=K: every rank r allgathers 4 + 2r floats instead of the allreduce at op K
 * Prints "ready" after the rendezvous, "done" at the end; on an error "ERR <line>" on
 * stderr and exit 3. DDPRT_TIMEOUT / DDPRT_STALL_WARN come from the environment. */
#include "rt/log.h"
#include "rt/rdzv.h"
#include "transport/tp.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 4) { fprintf(stderr, "usage: t-stall_rank INIT RANK WORLD [key=value...]\n"); return 2; }
    rt_log_init();
    setvbuf(stdout, NULL, _IOLBF, 0);
    int iters = 100000, sleep_ms = 5, late = -1, at = -1, odd = -1, ag = 0;
    double secs = 0;
    for (int i = 4; i < argc; i++) {
        char *v = strchr(argv[i], '=');
        if (!v) continue;
        *v++ = 0;
        if (!strcmp(argv[i], "iters")) iters = atoi(v);
        else if (!strcmp(argv[i], "sleep_ms")) sleep_ms = atoi(v);
        else if (!strcmp(argv[i], "late")) late = atoi(v);
        else if (!strcmp(argv[i], "at")) at = atoi(v);
        else if (!strcmp(argv[i], "secs")) secs = atof(v);
        else if (!strcmp(argv[i], "odd")) odd = atoi(v);
        else if (!strcmp(argv[i], "ag")) ag = atoi(v);
    }
    rt_rdzv_opts o = {argv[1], atoi(argv[2]), atoi(argv[3]), -1, 30, NULL, 0};
    char err[512];
    rt_rdzv *r;
    tp_bootstrap bs;
    tp_backend *b;
    tp_comm *c;
    if (rt_rdzv_open(&r, &o, err, sizeof err)) { fprintf(stderr, "ERR %s\n", err); return 3; }
    rt_log_set_rank(rt_rdzv_rank(r));
    tp_bootstrap_rdzv(&bs, r);
    if (tp_backend_create(&bs, "tcp", &b, err, sizeof err) || tp_comm_create(&c, b, NULL, err, sizeof err)) {
        fprintf(stderr, "ERR %s\n", err);
        return 3;
    }
    int me = rt_rdzv_rank(r);
    float v[256];
    printf("ready\n");
    for (int k = 0; k < iters; k++) {
        for (int i = 0; i < 256; i++) v[i] = (float)(me + i + k);
        if (k == at && me == late) usleep((useconds_t)(secs * 1e6));
        int rc = k == at && me == odd ? tp_broadcast(c, v, 256, RT_F32, 0)
                 : k == at && ag       ? tp_allgather(c, v, v + 64, 4 + 2 * (size_t)me, RT_F32)
                                       : tp_allreduce(c, v, v, 256, RT_F32, TP_SUM);
        if (rc) {
            fprintf(stderr, "ERR %s\n", tp_errmsg(c));
            fflush(stderr);
            _exit(3); /* no orderly close: it would wait for the stalled rank */
        }
        if (sleep_ms) usleep((useconds_t)sleep_ms * 1000);
    }
    tp_comm_destroy(c);
    rt_rdzv_close(r);
    printf("done\n");
    return 0;
}
