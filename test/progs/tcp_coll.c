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

static int64_t reduced(int op, int world, size_t i)
{
    int64_t a = ival(op, 0, i);
    for (int q = 1; q < world; q++) {
        int64_t v = ival(op, q, i);
        a = op == TP_MAX ? (v > a ? v : a) : a + v;
    }
    return a;
}

static int rank_, world_, checks, bad;
static tp_comm *comm;

static void expect_eq(const char *what, size_t n, const void *buf, rt_dtype dt, int64_t (*want)(size_t, int),
                      int arg)
{
    for (size_t i = 0; i < n; i++) {
        int64_t g = get(buf, i, dt), w = want(i, arg);
        if (g != w && bad++ < 5)
            fprintf(stderr, "rank %d: %s %s n=%zu: element %zu is %lld, want %lld\n", rank_, what,
                    rt_dtype_names[dt], n, i, (long long)g, (long long)w);
    }
    checks++;
}

static int cur_op;
static int64_t want_red(size_t i, int off) { return reduced(cur_op, world_, i + (size_t)off); }
static int64_t want_of(size_t i, int q) { return ival(TP_SUM, q, i); }
static size_t ag_n;
static int64_t want_ag(size_t i, int unused) { (void)unused; return ival(TP_SUM, (int)(i / ag_n), i % ag_n); }

static void die(const char *what)
{
    fprintf(stderr, "rank %d: %s failed: %s\n", rank_, what, tp_errmsg(comm));
    exit(3);
}

static void matrix(void)
{
    static const size_t sizes[] = {0, 1, 7, 1024 + 3, (1 << 20) + 5};
    static const rt_dtype dts[] = {RT_F32, RT_I32, RT_BF16};
    size_t maxn = ((1 << 20) + 5) * (size_t)world_;
    char *s = malloc(maxn * 4 + 64), *r = malloc(maxn * 4 + 64);
    for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
        size_t n = sizes[k];
        for (size_t d = 0; d < 3; d++) {
            rt_dtype dt = dts[d];
            for (int op = 0; op < 2; op++) {
                cur_op = op ? TP_MAX : TP_SUM;
                for (size_t i = 0; i < n; i++) put(s, i, dt, ival(cur_op, rank_, i));
                memset(r, 0x5a, n * rt_dtype_size(dt) + 1);
                if (tp_allreduce(comm, s, r, n, dt, cur_op)) die("allreduce");
                expect_eq(op ? "allreduce max" : "allreduce sum", n, r, dt, want_red, 0);
            }
            /* reduce_scatter: block r of every rank's world * n vector, summed. */
            cur_op = TP_SUM;
            for (size_t i = 0; i < n * (size_t)world_; i++) put(s, i, dt, ival(TP_SUM, rank_, i));
            if (tp_reduce_scatter(comm, s, r, n, dt, TP_SUM)) die("reduce_scatter");
            expect_eq("reduce_scatter", n, r, dt, want_red, (int)((size_t)rank_ * n));
        }
        int root = (int)(k % (size_t)world_);
        for (size_t i = 0; i < n; i++) put(r, i, RT_F32, rank_ == root ? ival(TP_SUM, root, i) : -99);
        if (tp_broadcast(comm, r, n, RT_F32, root)) die("broadcast");
        expect_eq("broadcast", n, r, RT_F32, want_of, root);
        for (size_t i = 0; i < n; i++) put(s, i, RT_I32, ival(TP_SUM, rank_, i));
        ag_n = n;
        if (tp_allgather(comm, s, r, n, RT_I32)) die("allgather");
        if (n) expect_eq("allgather", n * (size_t)world_, r, RT_I32, want_ag, 0);
        if (tp_barrier(comm)) die("barrier");
    }
    free(s), free(r);
}

static int kill_loop(size_t len, int victim, int iters)
{
    float *s = calloc(len / 4 + 1, 4), *r = calloc(len / 4 + 1, 4);
    for (int it = 0;; it++) {
        if (rank_ == victim && it == iters) {
            printf("killed at %.6f\n", port_now_s());
            fflush(stdout);
            raise(SIGKILL);
        }
        if (tp_allreduce(comm, s, r, len / 4, RT_F32, TP_SUM)) {
            printf("failed at %.6f: %s\n", port_now_s(), tp_errmsg(comm));
            free(s), free(r);
            return 3;
        }
    }
}

int main(int argc, char **argv)
{
    if (argc < 5) { fprintf(stderr, "usage: t-tcp_coll MODE INIT RANK WORLD [key=value...]\n"); return 2; }
    rt_log_init();
    rt_rdzv_opts o = {NULL, atoi(argv[3]), atoi(argv[4]), -1, 0, NULL, 0};
    if (strcmp(argv[2], "-")) o.init_method = argv[2];
    size_t len = 32u << 20;
    int victim = -1, iters = 3, sleep_ms = 0;
    for (int i = 5; i < argc; i++) {
        char *v = strchr(argv[i], '=');
        if (!v) continue;
        *v++ = 0;
        if (!strcmp(argv[i], "token")) o.token = v;
        else if (!strcmp(argv[i], "timeout")) o.timeout_s = atof(v);
        else if (!strcmp(argv[i], "sleep_ms")) sleep_ms = atoi(v);
        else if (!strcmp(argv[i], "len")) len = (size_t)atol(v);
        else if (!strcmp(argv[i], "victim")) victim = atoi(v);
        else if (!strcmp(argv[i], "iters")) iters = atoi(v);
    }
    if (sleep_ms) usleep((useconds_t)sleep_ms * 1000);
    char err[512];
    rt_rdzv *rz;
    if (rt_rdzv_open(&rz, &o, err, sizeof err)) { fprintf(stderr, "ERR rendezvous: %s\n", err); return 3; }
    rank_ = rt_rdzv_rank(rz), world_ = rt_rdzv_world(rz);
    rt_log_set_rank(rank_);
    tp_bootstrap bs;
    rt_rdzv_bootstrap(rz, &bs);
    tp_backend *b;
    if (tp_tcp_create(&bs, &b, err, sizeof err) || tp_comm_create(&comm, b, NULL, err, sizeof err)) {
        fprintf(stderr, "ERR %s\n", err);
        return 3;
    }
    int rc = 0;
    if (!strcmp(argv[1], "kill")) rc = kill_loop(len, victim < 0 ? world_ - 1 : victim, iters);
    else matrix();
    tp_comm_destroy(comm);
    rt_rdzv_close(rz);
    if (rc) return rc;
    if (bad) { fprintf(stderr, "rank %d: %d wrong elements\n", rank_, bad); return 1; }
    printf("rank %d of %d ok (%d checks)\n", rank_, world_, checks);
    return 0;
}
