/* Failures: a rank that aborts, a rank that never joins, argument errors. Every
 * other rank must get an error naming the rank and the op, and must not hang; after
 * a failure every later call fails at once with the same message. */
#include "test/t.h"
#include "test/tp_harness.h"
#include <stdlib.h>

typedef struct {
    int victim;           /* the rank that aborts / never joins */
    int use_async;
    int aborted;          /* set (atomically) once the victim has aborted */
    int rc[TPT_MAXW], rc2[TPT_MAXW];
    char msg[TPT_MAXW][400], msg2[TPT_MAXW][400];
} fail_arg;

static void fail_rank(tp_comm *c, void *arg)
{
    fail_arg *a = arg;
    int r = tp_rank(c);
    if (r == a->victim) {
        if (a->aborted >= 0) { /* abort mode; in deadline mode the victim never calls */
            tp_abort(c, "test: rank gives up");
            __atomic_store_n(&a->aborted, 1, __ATOMIC_SEQ_CST);
        }
        return;
    }
    /* Abort mode: start after the abort, so which error each rank sees is fixed. */
    while (!__atomic_load_n(&a->aborted, __ATOMIC_SEQ_CST)) port_sleep_ns(1000000);
    size_t n = 1000;
    float *x = malloc(n * 4);
    tpt_fill(RT_F32, TP_SUM, r, x, 0, n);
    if (a->use_async) {
        tp_handle h[3];
        int rc[3];
        for (int k = 0; k < 3; k++) rc[k] = tp_iallreduce(c, x, x, n, RT_F32, TP_SUM, &h[k]);
        for (int k = 0; k < 3; k++) if (!rc[k]) rc[k] = tp_wait(c, &h[k]);
        a->rc[r] = rc[0];
        a->rc2[r] = rc[1] && rc[2] == rc[1] ? rc[1] : 0;
    } else {
        a->rc[r] = tp_allreduce(c, x, x, n, RT_F32, TP_SUM);
        snprintf(a->msg[r], sizeof a->msg[r], "%s", tp_errmsg(c));
        a->rc2[r] = tp_barrier(c); /* fails fast with the same message */
    }
    snprintf(a->msg2[r], sizeof a->msg2[r], "%s", tp_errmsg(c));
    free(x);
}

static void run_fail(fail_arg *a, int world, double timeout)
{
    tp_comm_opts o = {.timeout_s = timeout, .algo = TP_ALGO_RING};
    tpt_world w;
    CHECK(tpt_open(&w, world, &o) == 0);
    tpt_run(&w, fail_rank, a);
    tpt_close(&w);
}

TEST(tp_abort_fails_every_rank_naming_it)
{
    fail_arg a = {.victim = 2};
    run_fail(&a, 4, 60); /* the deadline is far: errors must come from the closed peer */
    for (int r = 0; r < 4; r++) {
        if (r == 2) continue;
        CHECKF(a.rc[r] == TP_ECLOSED, "rank %d: rc %d: %s", r, a.rc[r], a.msg[r]);
        CHECKF(strstr(a.msg[r], "allreduce #1 (3.9 KiB): "), "rank %d: %s", r, a.msg[r]);
        CHECKF(a.rc2[r] == a.rc[r] && !strcmp(a.msg[r], a.msg2[r]), "rank %d later: %d %s", r,
               a.rc2[r], a.msg2[r]);
    }
    /* The ring neighbours talk to rank 2 directly. */
    CHECKF(strstr(a.msg[1], "rank 2 closed the connection"), "rank 1: %s", a.msg[1]);
    CHECKF(strstr(a.msg[3], "rank 2 closed the connection"), "rank 3: %s", a.msg[3]);
}

TEST(tp_abort_fails_queued_async_ops)
{
    fail_arg a = {.victim = 0, .use_async = 1};
    run_fail(&a, 3, 60);
    for (int r = 1; r < 3; r++) {
        CHECKF(a.rc[r] < 0 && a.rc2[r] == a.rc[r], "rank %d: %d %d", r, a.rc[r], a.rc2[r]);
        CHECKF(strstr(a.msg2[r], "allreduce #1 ") && strstr(a.msg2[r], "closed the connection"),
               "rank %d: %s", r, a.msg2[r]);
    }
}

TEST(tp_deadline_names_missing_rank)
{
    fail_arg a = {.victim = 3, .aborted = -1}; /* rank 3 never joins */
    run_fail(&a, 4, 1.0);
    for (int r = 0; r < 3; r++) {
        CHECKF(a.rc[r] < 0, "rank %d did not fail", r);
        CHECKF(a.rc2[r] == a.rc[r] && !strcmp(a.msg[r], a.msg2[r]), "rank %d later: %s", r, a.msg2[r]);
    }
    /* Rank 0 receives from rank 3 in the ring; its only missing message is rank 3's. */
    CHECK_EQ(a.rc[0], TP_ETIMEOUT);
    CHECKF(strstr(a.msg[0], "allreduce #1 (3.9 KiB): timed out after 1 s waiting for rank 3"), "rank 0: %s",
           a.msg[0]);
}

static void args_rank(tp_comm *c, void *arg)
{
    int *bad = arg;
    float x = 1;
    tp_handle h;
    if (tp_allreduce(c, &x, &x, 1, (rt_dtype)99, TP_SUM) != TP_EINVAL) __atomic_add_fetch(bad, 1, __ATOMIC_SEQ_CST);
    if (tp_allreduce(c, &x, &x, 1, RT_F32, (tp_op)42) != TP_EINVAL) __atomic_add_fetch(bad, 1, __ATOMIC_SEQ_CST);
    if (tp_broadcast(c, &x, 1, RT_F32, tp_world(c)) != TP_EINVAL) __atomic_add_fetch(bad, 1, __ATOMIC_SEQ_CST);
    if (tp_iallreduce(c, &x, &x, 1, RT_F32, (tp_op)-1, &h) != TP_EINVAL || tp_test(c, &h) != TP_EINVAL) __atomic_add_fetch(bad, 1, __ATOMIC_SEQ_CST);
    /* Argument errors do not fail the comm. */
    if (tp_allreduce(c, &x, &x, 1, RT_F32, TP_SUM) || x != 2 || tp_errmsg(c)[0]) __atomic_add_fetch(bad, 1, __ATOMIC_SEQ_CST);
}

TEST(tp_bad_arguments_rejected)
{
    int bad = 0;
    tpt_world w;
    CHECK(tpt_open(&w, 2, NULL) == 0);
    tpt_run(&w, args_rank, &bad);
    tpt_close(&w);
    CHECK_EQ(bad, 0);
    char err[200];
    tp_comm *c;
    tp_backend *b[1];
    CHECK(tp_loopback_create(1, b) == 0);
    tp_comm_opts o = {.arena_bytes = 100};
    CHECK(tp_comm_create(&c, b[0], &o, err, sizeof err) == TP_EINVAL);
    CHECKF(strstr(err, "arena_bytes"), "%s", err);
    b[0]->ops->destroy(b[0]);
}
