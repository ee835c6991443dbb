/* One rank of a verbs collectives test job (test/test_verbs.c), started through the
 * real rendezvous; runs inside the Soft-RoCE VM (make test-verbs).
 * usage: t-verbs_coll MODE INIT RANK WORLD [key=value...]
 *   MODE matrix: allreduce sum/max (f32, i32, bf16; algo= or auto),
 *        reduce_scatter, broadcast, allgather, barrier over sizes 0, 1, 7, 1 KiB+3,
 *        64 Ki+5 elements, then point to point between ranks 0 and 1 with a receiver
 *        that comes late (messages of 1 byte .. 1 MiB+3: more than all the slots, so
 *        the sender must wait for credits); checks every element; prints
 *        "rank R of W ok (N checks)".
 *   MODE loop: allreduce of len= bytes (default 1 MiB) in a loop, until it fails (a
 *        fault injected with DDPRT_VERBS_TEST_FAULT, or rank victim= SIGKILLs itself
 *        after iters= iterations, printing "killed at T"); prints "failed at T: MSG"
 *        and exits 3. Exits 4 if nothing failed within max= iterations (default 200).
 * keys: timeout=S, len=, victim=, iters=, max=, algo=ring|rd. */
#include "test/progs/coll_matrix.h"
#include <unistd.h>

/* Rank 0 sends a burst while rank 1 is not listening yet (it sleeps first): the
 * sender runs out of credits and must wait; nothing may be overwritten. */
static void late_receiver(unsigned char *s, unsigned char *r)
{
    static const size_t lens[] = {1, 65535, 65536, 65537, (1 << 20) + 3, 5, 300000};
    size_t nl = sizeof lens / sizeof *lens;
    if (rank_ > 1) return;
    for (size_t m = 0; m < nl; m++) {
        size_t len = lens[m];
        if (rank_ == 0) {
            for (size_t i = 0; i < len; i++) s[i] = (unsigned char)(i * 13 + m * 7 + 1);
            if (tp_send(comm, s, len, 1)) die("send");
        } else {
            if (m == 0) usleep(300000);
            memset(r, 0, len);
            if (tp_recv(comm, r, len, 0)) die("recv");
            for (size_t i = 0; i < len; i++) check("p2p", i, r[i], (unsigned char)(i * 13 + m * 7 + 1));
            checks++;
        }
    }
}

static void matrix(void)
{
    static const size_t sizes[] = {0, 1, 7, 1024 + 3, (64 << 10) + 5};
    static const coll_style st = {0};
    size_t maxn = ((64 << 10) + 5) * (size_t)world_;
    unsigned char *s = malloc(maxn * 4 + (2 << 20)), *r = malloc(maxn * 4 + (2 << 20));
    /* The auto algorithm covers both: recursive doubling for the small sizes, the
     * ring (pipelined, several slots per column) for 64 Ki+5 elements. */
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) coll_sizes(&st, sizes[k], s, r, (int)k);
    late_receiver(s, r);
    if (tp_barrier(comm)) die("barrier");
    free(s), free(r);
}

int main(int argc, char **argv)
{
    coll_args a;
    if (coll_args_parse(&a, argc, argv, "t-verbs_coll", 1u << 20)) return 2;
    rt_log_init();
    tp_bootstrap bs;
    rt_rdzv *rz = coll_join(&a.o, &bs);
    if (!rz) return 3;
    char err[512];
    tp_backend *b;
    tp_comm_opts co = {.timeout_s = a.o.timeout_s, .algo = a.algo};
    if (tp_verbs_create(&bs, &b, err, sizeof err) || tp_comm_create(&comm, b, &co, err, sizeof err)) {
        printf("failed at %.6f: %s\n", port_now_s(), err);
        fprintf(stderr, "ERR %s\n", err);
        return 3;
    }
    int rc = 0;
    if (!strcmp(argv[1], "loop")) rc = coll_loop(a.len, a.victim, a.iters, a.max);
    else matrix();
    return coll_leave(rz, rc);
}
