/* Asynchronous collectives (issue order, handles, tp_test), point to point, barrier
 * and the environment switches, over the loopback backend. */
#include "test/t.h"
#include "test/tp_harness.h"
#include <stdlib.h>

#define NOPS 6
/* Mixed sizes and dtypes, so small ops (rd) queue behind big ones (ring). */
static const size_t acount[NOPS] = {100000, 1, 4099, 70000, 0, 17};
static const rt_dtype adt[NOPS] = {RT_F32, RT_I64, RT_BF16, RT_F16, RT_F32, RT_U8};
static const tp_op aop[NOPS] = {TP_SUM, TP_MAX, TP_AVG, TP_SUM, TP_SUM, TP_PROD};

typedef struct { int fails; char first[200]; port_mutex mu; } result;

static void note(result *res, const char *what, int r, int it, int k)
{
    port_mutex_lock(&res->mu);
    if (!res->fails++) snprintf(res->first, sizeof res->first, "%s rank %d iter %d op %d", what, r, it, k);
    port_mutex_unlock(&res->mu);
}

static void async_rank(tp_comm *c, void *arg)
{
    result *res = arg;
    int r = tp_rank(c), w = tp_world(c);
    unsigned char *buf[NOPS], *bc = malloc(1000);
    tp_handle h[NOPS], hb;
    for (int k = 0; k < NOPS; k++) buf[k] = malloc(acount[k] * 8 + 8);
    for (int it = 0; it < 5; it++) { /* handles are reused every iteration */
        for (int k = 0; k < NOPS; k++) {
            tpt_fill(adt[k], aop[k], r, buf[k], 0, acount[k]);
            if (tp_iallreduce(c, buf[k], buf[k], acount[k], adt[k], aop[k], &h[k])) note(res, "issue", r, it, k);
        }
        /* A broadcast and a blocking allreduce issued behind them run after them. */
        if (r == 0) for (int i = 0; i < 1000; i++) bc[i] = (unsigned char)(i * 7 + it);
        if (tp_ibroadcast(c, bc, 1000, RT_U8, 0, &hb)) note(res, "ibroadcast", r, it, 0);
        int64_t x = r + 1, y = 0;
        if (tp_allreduce(c, &x, &y, 1, RT_I64, TP_SUM) || y != (int64_t)w * (w + 1) / 2)
            note(res, "blocking allreduce behind async", r, it, 0);
        /* In issue order: when the blocking call returned, everything before is done. */
        for (int k = 0; k < NOPS; k++)
            if (tp_test(c, &h[k]) != 1) note(res, "not done before a later op", r, it, k);
        if (tp_test(c, &hb) != 1) note(res, "broadcast not done", r, it, 0);
        for (int k = NOPS - 1; k >= 0; k--) { /* any wait order */
            if (tp_wait(c, &h[k])) note(res, tp_errmsg(c), r, it, k);
            else if (tpt_check(adt[k], aop[k], w, buf[k], 0, acount[k]) >= 0) note(res, "wrong result", r, it, k);
        }
        if (tp_wait(c, &hb)) note(res, "broadcast wait", r, it, 0);
        /* reduce-scatter then allgather (ZeRO-style), both async, in order. */
        size_t rc = 5003;
        int32_t *full = malloc(rc * (size_t)w * 4), *part = malloc(rc * 4), *back = malloc(rc * (size_t)w * 4);
        tpt_fill(RT_I32, TP_SUM, r, full, 0, rc * (size_t)w);
        tp_handle hr, hg;
        if (tp_ireduce_scatter(c, full, part, rc, RT_I32, TP_SUM, &hr) ||
            tp_iallgather(c, part, back, rc, RT_I32, &hg) || tp_wait(c, &hg) || tp_test(c, &hr) != 1 ||
            tpt_check(RT_I32, TP_SUM, w, back, 0, rc * (size_t)w) >= 0)
            note(res, "ireduce_scatter + iallgather", r, it, 0);
        free(full);
        free(part);
        free(back);
        for (int i = 0; i < 1000; i++)
            if (bc[i] != (unsigned char)(i * 7 + it)) { note(res, "broadcast data", r, it, i); break; }
        /* Polling: tp_test until done (no timing assumption; bounded by the op deadline). */
        tpt_fill(adt[0], aop[0], r, buf[0], 0, acount[0]);
        tp_iallreduce(c, buf[0], buf[0], acount[0], adt[0], aop[0], &h[0]);
        int st;
        while ((st = tp_test(c, &h[0])) == 0) port_sleep_ns(100000);
        if (st != 1 || tpt_check(adt[0], aop[0], w, buf[0], 0, acount[0]) >= 0) note(res, "tp_test path", r, it, 0);
    }
    for (int k = 0; k < NOPS; k++) free(buf[k]);
    free(bc);
}

TEST(tp_async_in_issue_order)
{
    static const int worlds[] = {1, 2, 3, 5};
    for (int i = 0; i < 4; i++) {
        result res = {0};
        port_mutex_init(&res.mu);
        tp_comm_opts o = {.timeout_s = 60};
        tpt_world w;
        CHECK(tpt_open(&w, worlds[i], &o) == 0);
        tpt_run(&w, async_rank, &res);
        tpt_close(&w);
        CHECKF(res.fails == 0, "world %d: %d failures; first: %s", worlds[i], res.fails, res.first);
    }
}

static void p2p_rank(tp_comm *c, void *arg)
{
    result *res = arg;
    int r = tp_rank(c), w = tp_world(c);
    static const size_t sizes[] = {0, 1, 100003};
    unsigned char *b = malloc(100003);
    for (int s = 0; s < 3; s++)
        for (int peer = 1; peer < w; peer++) {
            size_t n = sizes[s];
            if (r == 0) { /* rank 0 talks to each peer: send, then hear the echo + 1 */
                for (size_t i = 0; i < n; i++) b[i] = (unsigned char)(i + peer);
                if (tp_send(c, b, n, peer) || tp_recv(c, b, n, peer)) note(res, tp_errmsg(c), r, s, peer);
                for (size_t i = 0; i < n; i++)
                    if (b[i] != (unsigned char)(i + peer + 1)) { note(res, "echo data", r, s, peer); break; }
            } else if (r == peer) {
                if (tp_recv(c, b, n, 0)) note(res, tp_errmsg(c), r, s, peer);
                for (size_t i = 0; i < n; i++) b[i]++;
                if (tp_send(c, b, n, 0)) note(res, tp_errmsg(c), r, s, peer);
            }
        }
    if (tp_send(c, b, 1, r) != TP_EINVAL) note(res, "send to self accepted", r, 0, 0);
    free(b);
}

TEST(tp_send_recv)
{
    result res = {0};
    port_mutex_init(&res.mu);
    tpt_world w;
    CHECK(tpt_open(&w, 4, NULL) == 0);
    tpt_run(&w, p2p_rank, &res);
    tpt_close(&w);
    CHECKF(res.fails == 0, "%d failures; first: %s", res.fails, res.first);
}

typedef struct { result res; int arrived[20]; } barrier_arg;

static void barrier_rank(tp_comm *c, void *arg)
{
    barrier_arg *a = arg;
    for (int round = 0; round < 20; round++) {
        __atomic_add_fetch(&a->arrived[round], 1, __ATOMIC_SEQ_CST);
        if (tp_barrier(c)) note(&a->res, tp_errmsg(c), tp_rank(c), round, 0);
        /* Nobody leaves round k before everyone has entered it. */
        if (__atomic_load_n(&a->arrived[round], __ATOMIC_SEQ_CST) != tp_world(c))
            note(&a->res, "left the barrier early", tp_rank(c), round, 0);
    }
}

TEST(tp_barrier_waits_for_everyone)
{
    for (int n = 1; n <= 7; n += 2) {
        barrier_arg a = {0};
        port_mutex_init(&a.res.mu);
        tpt_world w;
        CHECK(tpt_open(&w, n, NULL) == 0);
        tpt_run(&w, barrier_rank, &a);
        tpt_close(&w);
        CHECKF(a.res.fails == 0, "world %d: %s", n, a.res.first);
    }
}

static void env_rank(tp_comm *c, void *arg)
{
    result *res = arg;
    int r = tp_rank(c), w = tp_world(c);
    size_t n = 100003;
    float *x = malloc(n * 4);
    tpt_fill(RT_F32, TP_SUM, r, x, 0, n);
    if (tp_allreduce(c, x, x, n, RT_F32, TP_SUM) || tpt_check(RT_F32, TP_SUM, w, x, 0, n) >= 0)
        note(res, "allreduce", r, 0, 0);
    free(x);
}

/* DDPRT_ISA forces a lower reduction path; DDPRT_ALGO picks the algorithm. The test
 * runs in its own process, so the environment is read fresh. */
TEST(tp_env_isa_and_algo)
{
    setenv("DDPRT_ISA", "generic", 1);
    setenv("DDPRT_ALGO", "rd", 1);
    CHECK_EQ(tp_isa_active(), TP_ISA_GENERIC);
    result res = {0};
    port_mutex_init(&res.mu);
    tpt_world w;
    tp_comm_opts o = {.algo = TP_ALGO_DEFAULT};
    CHECK(tpt_open(&w, 3, &o) == 0);
    tpt_run(&w, env_rank, &res);
    tpt_close(&w);
    CHECKF(res.fails == 0, "%s", res.first);
}
