/* TCP backend with several sockets per peer ("lanes"): a message below TCP_STRIPE_MIN
 * travels whole on lane (index mod lanes), a longer one in stripes over all lanes.
 * Lengths that disagree must still be named as a protocol error at once, whichever
 * lanes the two ends chose (a wrong lane would be waited out until the deadline). */
#include "test/t.h"
#include "test/test_tcp_fake.h"
#include "transport/tp_tcp_int.h"
#include "ports/posix/port.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t dl(double s) { return port_now_ns() + (int64_t)(s * 1e9); }

static void mismatch(const char *nsocks, int npre, size_t s, size_t r)
{
    setenv("DDPRT_TCP_NSOCKS", nsocks, 1);
    tcpf_mm = (tcpf_mismatch){npre, s, r, 20};
    tcpf_result res[2];
    char want[160];
    snprintf(want, sizeof want, "-1 protocol error: rank 0 sent a message of %zu bytes, the posted recv expects %zu",
             s, r);
    CHECK(tcpf_run(2, 30, 0, tcpf_body_mismatch, NULL, NULL, res) == 0);
    CHECKF(res[1].code == 2 && strstr(res[1].msg, want), "nsocks %s, %d before, %zu vs %zu: rank 1: %s", nsocks, npre,
           s, r, res[1].msg);
    CHECKF(res[0].code == 2 && strstr(res[0].msg, "reported by rank 1"), "rank 0: %s", res[0].msg);
    /* Named at once, not found by the 20 s deadline of a wait on the wrong lane. */
    CHECKF(res[0].exit_s < 10 && res[1].exit_s < 10, "exits after %.1f / %.1f s", res[0].exit_s, res[1].exit_s);
}

/* Both whole, on lane 1 (the second message), also when one side is small. */
TEST(tcp_lanes_whole_mismatch_on_lane_1)
{
    mismatch("2", 1, 100 << 10, 200 << 10);
    mismatch("2", 1, 1000, 100 << 10);
}

/* Striped sender, whole receiver on lane 2; and the other way round on lane 1. */
TEST(tcp_lanes_striped_vs_whole_mismatch)
{
    mismatch("3", 2, 2u << 20, 300 << 10);
    mismatch("3", 1, 300 << 10, 2u << 20);
    mismatch("8", 5, 2u << 20, 300 << 10); /* stripes on all 8 lanes, not on 2M / 512K */
}

/* Just either side of the stripe threshold, on the last lane. */
TEST(tcp_lanes_threshold_mismatch) { mismatch("4", 3, TCP_STRIPE_MIN + 4, TCP_STRIPE_MIN - 4); }

/* Many messages of mixed sizes queued at once both ways, some whole (on every lane in
 * turn), some striped: all arrive intact and in order, over real TCP. */
static int body_mixed(tp_backend *b, int rank, int world, char *msg, size_t n)
{
    (void)world;
    static const size_t sz[] = {8, TCP_STRIPE_MIN - 1, 200 << 10, TCP_STRIPE_MIN, 3, (3u << 20) + 1, 64 << 10};
    enum { N = sizeof sz / sizeof sz[0] };
    size_t total = 0, off = 0;
    for (int i = 0; i < N; i++) total += sz[i];
    char *s = malloc(total), *r = malloc(total);
    tp_req q[2 * N], *qp[2 * N];
    tcpf_fill(s, total, (unsigned)rank);
    for (int i = 0; i < N; off += sz[i], i++) {
        b->ops->irecv(b, 1 - rank, r + off, sz[i], &q[2 * i]);
        b->ops->isend(b, 1 - rank, s + off, sz[i], &q[2 * i + 1]);
        qp[2 * i] = &q[2 * i], qp[2 * i + 1] = &q[2 * i + 1];
    }
    int rc = b->ops->waitall(b, qp, 2 * N, dl(20));
    size_t bad = rc ? 0 : tcpf_check(r, total, (unsigned)(1 - rank));
    snprintf(msg, n, "rc %d bad %zu %s", rc, bad, b->err);
    free(s), free(r);
    return rc || bad ? 1 : 0;
}

TEST(tcp_lanes_mixed_sizes)
{
    setenv("DDPRT_TCP_LOCAL", "tcp", 1);
    for (const char *ns = "1\0" "2\0" "3\0" "8\0"; *ns; ns += strlen(ns) + 1) {
        setenv("DDPRT_TCP_NSOCKS", ns, 1);
        tcpf_result res[2];
        CHECK(tcpf_run(2, 30, 0, body_mixed, NULL, NULL, res) == 0);
        for (int r = 0; r < 2; r++) CHECKF(res[r].code == 0, "nsocks %s rank %d: %s", ns, r, res[r].msg);
    }
}
