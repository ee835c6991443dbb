/* One rank of a TCP collectives test job (test/test_tcp.c).
 * usage: t-tcp_coll MODE INIT RANK WORLD [key=value...]
 *   INIT "-" = from the environment (ddprt-launch, torchrun vars); RANK/WORLD -1 = env.
 *   MODE matrix: allreduce sum/max (f32, i32, bf16), broadcast, allgather,
 *        reduce_scatter, barrier over sizes 0, 1, 7, 1 KiB+3, 1 MiB+5 elements; checks
 *        every element; prints "rank R of W ok (N checks)".
 *   MODE kill: allreduce of len= bytes (default 32 MiB) in a loop; rank victim= (default
 *        world-1) SIGKILLs itself after iters= (default 3) iterations, printing
 *        "killed at T" first; the others print "failed at T: MSG" and exit 3 (T:
 *        CLOCK_MONOTONIC seconds, comparable across processes).
 * keys: token=T (job token), timeout=S, sleep_ms=MS (before the rendezvous). */
#include "test/progs/coll_matrix.h"
#include <unistd.h>

static void matrix(void)
{
    static const size_t sizes[] = {0, 1, 7, 1024 + 3, (1 << 20) + 5};
    static const coll_style st = {.poison = 1, .detail = 1, .tcp_counts = 1};
    size_t maxn = ((1 << 20) + 5) * (size_t)world_;
    char *s = malloc(maxn * 4 + 64), *r = malloc(maxn * 4 + 64);
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) coll_sizes(&st, sizes[k], s, r, (int)k);
    free(s), free(r);
}

int main(int argc, char **argv)
{
    coll_args a;
    if (coll_args_parse(&a, argc, argv, "t-tcp_coll", 32u << 20)) return 2;
    rt_log_init();
    if (a.sleep_ms) usleep((useconds_t)a.sleep_ms * 1000);
    tp_bootstrap bs;
    rt_rdzv *rz = coll_join(&a.o, &bs);
    if (!rz) return 3;
    char err[512];
    tp_backend *b;
    if (tp_tcp_create(&bs, &b, err, sizeof err) || tp_comm_create(&comm, b, NULL, err, sizeof err)) {
        fprintf(stderr, "ERR %s\n", err);
        rt_rdzv_close(rz); /* (LeakSanitizer: a setup failure must exit 3, not 1) */
        return 3;
    }
    int rc = 0;
    if (!strcmp(argv[1], "kill")) rc = coll_loop(a.len, a.victim < 0 ? world_ - 1 : a.victim, a.iters, -1);
    else matrix();
    return coll_leave(rz, rc);
}
