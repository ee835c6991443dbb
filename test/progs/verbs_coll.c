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
#include "ports/posix/port.h"
#include "rt/log.h"
#include "rt/rdzv.h"
#include "transport/tp.h"
#include "transport/tp_reduce.h"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int rank_, world_, checks, bad;
static tp_comm *comm;

static int64_t ival(int op, int r, size_t i)
{
    if (op == TP_MAX) return (int64_t)((i * 31 + (size_t)r * 17) % 101) - 50;
    return (int64_t)((i * 7 + (size_t)r * 13) % 17) - 8;
}

static void put(void *b, size_t i, rt_dtype dt, int64_t v)
{
    if (dt == RT_F32) ((float *)b)[i] = (float)v;
    else if (dt == RT_I32) ((int32_t *)b)[i] = (int32_t)v;
    else ((uint16_t *)b)[i] = tp_f32_to_bf16((float)v);
}

static int64_t get(const void *b, size_t i, rt_dtype dt)
{
    if (dt == RT_F32) return (int64_t)((const float *)b)[i];
    if (dt == RT_I32) return ((const int32_t *)b)[i];
    return (int64_t)tp_bf16_to_f32(((const uint16_t *)b)[i]);
}

static int64_t reduced(int op, size_t i)
{
    int64_t a = ival(op, 0, i);
    for (int q = 1; q < world_; q++) {
        int64_t v = ival(op, q, i);
        a = op == TP_MAX ? (v > a ? v : a) : a + v;
    }
    return a;
}

static void check(const char *what, size_t i, int64_t got, int64_t want)
{
    if (got != want && bad++ < 5)
        fprintf(stderr, "rank %d: %s: element %zu is %lld, want %lld\n", rank_, what, i, (long long)got,
                (long long)want);
}

static void die(const char *what)
{
    fprintf(stderr, "rank %d: %s failed: %s\n", rank_, what, tp_errmsg(comm));
    exit(3);
}

static void collectives(size_t n, unsigned char *s, unsigned char *r, int k)
{
    static const rt_dtype dts[] = {RT_F32, RT_I32, RT_BF16};
    for (size_t d = 0; d < 3; d++) {
        rt_dtype dt = dts[d];
        for (int op = 0; op < 2; op++) {
            int o = op ? TP_MAX : TP_SUM;
            for (size_t i = 0; i < n; i++) put(s, i, dt, ival(o, rank_, i));
            if (tp_allreduce(comm, s, r, n, dt, o)) die("allreduce");
            for (size_t i = 0; i < n; i++) check("allreduce", i, get(r, i, dt), reduced(o, i));
            checks++;
        }
        for (size_t i = 0; i < n * (size_t)world_; i++) put(s, i, dt, ival(TP_SUM, rank_, i));
        if (tp_reduce_scatter(comm, s, r, n, dt, TP_SUM)) die("reduce_scatter");
        for (size_t i = 0; i < n; i++) check("reduce_scatter", i, get(r, i, dt), reduced(TP_SUM, (size_t)rank_ * n + i));
        checks++;
    }
    int root = k % world_;
    for (size_t i = 0; i < n; i++) put(r, i, RT_F32, rank_ == root ? ival(TP_SUM, root, i) : -99);
    if (tp_broadcast(comm, r, n, RT_F32, root)) die("broadcast");
    for (size_t i = 0; i < n; i++) check("broadcast", i, get(r, i, RT_F32), ival(TP_SUM, root, i));
    for (size_t i = 0; i < n; i++) put(s, i, RT_I32, ival(TP_SUM, rank_, i));
    if (tp_allgather(comm, s, r, n, RT_I32)) die("allgather");
    for (size_t i = 0; i < n * (size_t)world_; i++)
        check("allgather", i, get(r, i, RT_I32), ival(TP_SUM, (int)(i / n), i % n));
    if (tp_barrier(comm)) die("barrier");
    checks += 3;
}

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
    size_t maxn = ((64 << 10) + 5) * (size_t)world_;
    unsigned char *s = malloc(maxn * 4 + (2 << 20)), *r = malloc(maxn * 4 + (2 << 20));
    /* The auto algorithm covers both: recursive doubling for the small sizes, the
     * ring (pipelined, several slots per column) for 64 Ki+5 elements. */
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) collectives(sizes[k], s, r, (int)k);
    late_receiver(s, r);
    if (tp_barrier(comm)) die("barrier");
    free(s), free(r);
}

static int loop(size_t len, int victim, int iters, int max)
{
    float *s = calloc(len / 4 + 1, 4), *r = calloc(len / 4 + 1, 4);
    for (int it = 0; it < max; it++) {
        if (rank_ == victim && it == iters) {
            printf("killed at %.6f\n", port_now_s());
            fflush(stdout);
            raise(SIGKILL);
        }
        if (tp_allreduce(comm, s, r, len / 4, RT_F32, TP_SUM)) {
            printf("failed at %.6f: %s\n", port_now_s(), tp_errmsg(comm));
            return 3;
        }
    }
    printf("no failure in %d iterations\n", max);
    return 4;
}

int main(int argc, char **argv)
{
    if (argc < 5) { fprintf(stderr, "usage: t-verbs_coll MODE INIT RANK WORLD [key=value...]\n"); return 2; }
    rt_log_init();
    rt_rdzv_opts o = {NULL, atoi(argv[3]), atoi(argv[4]), -1, 0, NULL, 0};
    if (strcmp(argv[2], "-")) o.init_method = argv[2];
    size_t len = 1u << 20;
    int victim = -1, iters = 3, max = 200, algo = TP_ALGO_DEFAULT;
    for (int i = 5; i < argc; i++) {
        char *v = strchr(argv[i], '=');
        if (!v) continue;
        *v++ = 0;
        if (!strcmp(argv[i], "timeout")) o.timeout_s = atof(v);
        else if (!strcmp(argv[i], "len")) len = (size_t)atol(v);
        else if (!strcmp(argv[i], "victim")) victim = atoi(v);
        else if (!strcmp(argv[i], "iters")) iters = atoi(v);
        else if (!strcmp(argv[i], "max")) max = atoi(v);
        else if (!strcmp(argv[i], "algo")) algo = !strcmp(v, "rd") ? TP_ALGO_RD : TP_ALGO_RING;
    }
    char err[512];
    rt_rdzv *rz;
    if (rt_rdzv_open(&rz, &o, err, sizeof err)) { fprintf(stderr, "ERR rendezvous: %s\n", err); return 3; }
    rank_ = rt_rdzv_rank(rz), world_ = rt_rdzv_world(rz);
    rt_log_set_rank(rank_);
    tp_bootstrap bs;
    rt_rdzv_bootstrap(rz, &bs);
    tp_backend *b;
    tp_comm_opts co = {.timeout_s = o.timeout_s, .algo = algo};
    if (tp_verbs_create(&bs, &b, err, sizeof err) || tp_comm_create(&comm, b, &co, err, sizeof err)) {
        printf("failed at %.6f: %s\n", port_now_s(), err);
        fprintf(stderr, "ERR %s\n", err);
        return 3;
    }
    int rc = 0;
    if (!strcmp(argv[1], "loop")) rc = loop(len, victim, iters, max);
    else matrix();
    tp_comm_destroy(comm);
    rt_rdzv_close(rz);
    if (rc) return rc;
    if (bad) { fprintf(stderr, "rank %d: %d wrong elements\n", rank_, bad); return 1; }
    printf("rank %d of %d ok (%d checks)\n", rank_, world_, checks);
    return 0;
}
