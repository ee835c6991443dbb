/* TCP backend, point to point (no collectives layer): every rank exchanges messages
 * with every other, protocol checks, failures (dead peer, silent peer, mismatch) and
 * strangers on a data port. Ranks are processes forked by test_tcp_fake.c. */
#include "test/t.h"
#include "test/test_tcp_fake.h"
#include "transport/tp_tcp_int.h"
#include "ports/posix/port.h"
#include "ports/posix/port_sock.h"
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const size_t sizes[] = {0, 1, 7, 1024 + 3, (1 << 20) + 5, 16u << 20};
#define NSIZES (sizeof sizes / sizeof sizes[0])

static int64_t dl(double s) { return port_now_ns() + (int64_t)(s * 1e9); }

/* All-to-all: every rank sends every size to every peer at once (full duplex, many
 * requests queued per peer), then checks what arrived. */
static int body_all_to_all(tp_backend *b, int rank, int world, char *msg, size_t n)
{
    size_t total = 0;
    for (size_t k = 0; k < NSIZES; k++) total += sizes[k];
    char *sbuf = malloc(total), *rbuf = malloc(total * (size_t)world);
    tp_req *reqs = calloc(2 * NSIZES * (size_t)world, sizeof *reqs);
    tp_req **rp = calloc(2 * NSIZES * (size_t)world, sizeof *rp);
    int nr = 0;
    tcpf_fill(sbuf, total, (unsigned)rank);
    for (int p = 0; p < world; p++) {
        if (p == rank) continue;
        size_t off = 0;
        for (size_t k = 0; k < NSIZES; k++) {
            b->ops->irecv(b, p, rbuf + (size_t)p * total + off, sizes[k], &reqs[nr]);
            rp[nr] = &reqs[nr], nr++;
            b->ops->isend(b, p, sbuf + off, sizes[k], &reqs[nr]);
            rp[nr] = &reqs[nr], nr++;
            off += sizes[k];
        }
    }
    int rc = b->ops->waitall(b, rp, nr, dl(20));
    size_t bad = 0;
    for (int p = 0; p < world && !rc; p++)
        if (p != rank) bad += tcpf_check(rbuf + (size_t)p * total, total, (unsigned)p);
    snprintf(msg, n, "rc %d bad %zu %s", rc, bad, b->err);
    free(sbuf), free(rbuf), free(reqs), free(rp);
    return rc || bad ? 1 : 0;
}

static void run_all_to_all(int world)
{
    tcpf_result res[4];
    CHECK(tcpf_run(world, 20, 0x1234, body_all_to_all, NULL, NULL, res) == 0);
    for (int r = 0; r < world; r++) CHECKF(res[r].code == 0, "rank %d: %d %s", r, res[r].code, res[r].msg);
}

TEST(tcp_all_to_all_2) { run_all_to_all(2); }
TEST(tcp_all_to_all_3) { run_all_to_all(3); }
TEST(tcp_all_to_all_4) { run_all_to_all(4); }

/* Several sockets per peer: striped and unstriped sizes, many requests queued per
 * peer in both directions, over unix sockets and TCP. */
TEST(tcp_all_to_all_nsocks)
{
    setenv("DDPRT_TCP_NSOCKS", "3", 1);
    run_all_to_all(2);
    run_all_to_all(4);
    setenv("DDPRT_TCP_NSOCKS", "8", 1);
    setenv("DDPRT_TCP_LOCAL", "tcp", 1);
    run_all_to_all(3);
}

TEST(tcp_bad_nsocks_is_a_clear_error)
{
    setenv("DDPRT_TCP_NSOCKS", "9", 1);
    tcpf_result res[2];
    CHECK(tcpf_run(2, 5, 0, body_all_to_all, NULL, NULL, res) == 0);
    for (int r = 0; r < 2; r++)
        CHECKF(res[r].code != 0 && strstr(res[r].msg, "DDPRT_TCP_NSOCKS=9: expected an integer from 1 to 8"),
               "rank %d: %d %s", r, res[r].code, res[r].msg);
}

/* Rank 0 sends `send` bytes, rank 1 expects `recv`: a protocol error naming rank 0 (and
 * the length) on rank 1, and rank 0 learns it from rank 1's abort frame instead of
 * waiting out its timeout. */
static void expect_mismatch(size_t send, size_t recv, tcpf_result res[2])
{
    tcpf_mm = (tcpf_mismatch){0, send, recv, 10};
    CHECK(tcpf_run(2, 10, 0, tcpf_body_mismatch, NULL, NULL, res) == 0);
    char sent[96], expects[48];
    snprintf(sent, sizeof sent, "-1 protocol error: rank 0 sent a message of %zu bytes", send);
    snprintf(expects, sizeof expects, "expects %zu", recv);
    CHECKF(res[1].code == 2 && strstr(res[1].msg, sent) && strstr(res[1].msg, expects), "rank 1: %s", res[1].msg);
    CHECKF(res[0].code == 2 && strstr(res[0].msg, "protocol error") && strstr(res[0].msg, "reported by rank 1"),
           "rank 0: %s", res[0].msg);
}

TEST(tcp_length_mismatch_is_protocol_error)
{
    tcpf_result res[2];
    expect_mismatch(10, 12, res);
    CHECK(res[0].exit_s < 8 && res[1].exit_s < 8);
}

/* Rank 2 dies (SIGKILL) while ranks exchange in a ring in a loop: the others fail with
 * TP_ECLOSED naming rank 2, within seconds. */
static int body_ring_until_death(tp_backend *b, int rank, int world, char *msg, size_t n)
{
    size_t len = 4u << 20;
    char *s = calloc(1, len), *r = calloc(1, len);
    for (int it = 0;; it++) {
        if (rank == 2 && it == 20) raise(SIGKILL);
        tp_req q[2], *qp[2] = {&q[0], &q[1]};
        b->ops->irecv(b, (rank + world - 1) % world, r, len, &q[0]);
        b->ops->isend(b, (rank + 1) % world, s, len, &q[1]);
        int rc = b->ops->waitall(b, qp, 2, dl(30));
        if (rc) {
            snprintf(msg, n, "%d %s", rc, b->err);
            free(s), free(r);
            return 4;
        }
    }
}

/* A striped message whose length differs: the error names the sender on both sides. */
TEST(tcp_nsocks_length_mismatch_is_protocol_error)
{
    setenv("DDPRT_TCP_NSOCKS", "4", 1);
    tcpf_result res[2];
    expect_mismatch(1u << 20, (1u << 20) + 64, res);
}

/* The same with 3 sockets per peer over TCP: the dead rank is still named. */
TEST(tcp_nsocks_dead_peer_fails_everyone)
{
    setenv("DDPRT_TCP_NSOCKS", "3", 1);
    setenv("DDPRT_TCP_LOCAL", "tcp", 1);
    tcpf_result res[3];
    CHECK(tcpf_run(3, 30, 7, body_ring_until_death, NULL, NULL, res) == 0);
    CHECK_EQ(res[2].code, 128 + SIGKILL);
    for (int r = 0; r < 2; r++)
        CHECKF(res[r].code == 4 && strstr(res[r].msg, "-3 rank 2 closed the connection"), "rank %d: %d '%s'", r,
               res[r].code, res[r].msg);
}

TEST(tcp_dead_peer_fails_everyone)
{
    for (int world = 3; world <= 4; world++) {
        tcpf_result res[4];
        CHECK(tcpf_run(world, 30, 7, body_ring_until_death, NULL, NULL, res) == 0);
        CHECK_EQ(res[2].code, 128 + SIGKILL);
        for (int r = 0; r < world; r++) {
            if (r == 2) continue;
            CHECKF(res[r].code == 4 && strstr(res[r].msg, "-3 rank 2 closed the connection"),
                   "world %d rank %d: %d '%s'", world, r, res[r].code, res[r].msg);
            CHECKF(res[r].exit_s - res[2].exit_s < 10, "rank %d exited %.2f s after the kill", r,
                   res[r].exit_s - res[2].exit_s);
            printf("  world %d: rank %d exited %.3f s after rank 2 was killed: %s\n", world, r,
                   res[r].exit_s - res[2].exit_s, res[r].msg);
        }
    }
}

/* Rank 1 stays silent: rank 0 times out naming rank 1; rank 1, when it finally
 * listens, gets rank 0's reason. */
static int body_silent(tp_backend *b, int rank, int world, char *msg, size_t n)
{
    (void)world;
    char buf[8];
    tp_req r, *rp = &r;
    if (rank == 1) port_sleep_ns(1500000000LL);
    b->ops->irecv(b, !rank, buf, sizeof buf, &r);
    int rc = b->ops->waitall(b, &rp, 1, dl(1));
    snprintf(msg, n, "%d %s", rc, b->err);
    return rc ? 5 : 0;
}

TEST(tcp_silent_peer_times_out)
{
    tcpf_result res[2];
    CHECK(tcpf_run(2, 10, 0, body_silent, NULL, NULL, res) == 0);
    CHECKF(res[0].code == 5 && strstr(res[0].msg, "-2 timed out after 1 s waiting for rank 1"), "%s", res[0].msg);
    CHECKF(res[1].code == 5 && strstr(res[1].msg, "timed out") && strstr(res[1].msg, "reported by rank 0"),
           "%s", res[1].msg);
}

/* Strangers on rank 1's data port while the mesh forms: one with a wrong job token,
 * one with garbage, one silent. The hook runs before any rank has the address table,
 * so all three are queued ahead of rank 0's real connection. */
typedef struct { uint32_t status; int ok; } stranger_out;

static void stranger_hook(const void *all, size_t len, int world, void *arg)
{
    (void)world;
    stranger_out *so = arg;
    const tcp_addr *a1 = (const tcp_addr *)((const char *)all + len);
    if (len != sizeof(tcp_addr)) return;
    char err[200];
    int64_t d = dl(5);
    int silent = port_sock_connect("127.0.0.1", a1->port, d, err, sizeof err);
    int junk = port_sock_connect("127.0.0.1", a1->port, d, err, sizeof err);
    int fd = port_sock_connect("127.0.0.1", a1->port, d, err, sizeof err);
    if (silent < 0 || junk < 0 || fd < 0) return;
    port_sock_write_full(junk, "GET / HTTP/1.0\r\n\r\n.............", 32, d);
    tcp_hello h = {TCP_MAGIC, TCP_VERSION, 0, 1, 2, 0, 0xbad};
    port_sock_write_full(fd, &h, sizeof h, d);
    so->ok = 1;
    /* The answer comes once rank 1 has the table; read it from a child so the
     * harness can hand the table out now. */
    int p[2];
    if (pipe(p)) return;
    if (fork() == 0) {
        tcp_reply rep = {0, 99};
        port_sock_read_full(fd, &rep, sizeof rep, dl(5));
        if (write(p[1], &rep, sizeof rep) < 0) _exit(1);
        _exit(0);
    }
    close(p[1]);
    so->status = (uint32_t)p[0]; /* read after the job ran */
    (void)silent;
}

static int body_ping(tp_backend *b, int rank, int world, char *msg, size_t n)
{
    (void)world;
    char s[100], r[100];
    tcpf_fill(s, sizeof s, (unsigned)rank);
    tp_req q[2], *qp[2] = {&q[0], &q[1]};
    b->ops->irecv(b, !rank, r, sizeof r, &q[0]);
    b->ops->isend(b, !rank, s, sizeof s, &q[1]);
    int rc = b->ops->waitall(b, qp, 2, dl(10));
    snprintf(msg, n, "%d %zu %s", rc, rc ? 0 : tcpf_check(r, sizeof r, (unsigned)!rank), b->err);
    return rc ? 1 : 0;
}

TEST(tcp_stranger_on_data_port_is_refused)
{
    tcpf_result res[2];
    stranger_out so = {0, 0};
    CHECK(tcpf_run(2, 20, 0x600d, body_ping, stranger_hook, &so, res) == 0);
    CHECK(so.ok);
    tcp_reply rep = {0, 99};
    CHECK(read((int)so.status, &rep, sizeof rep) == sizeof rep);
    CHECK_EQ(rep.magic, TCP_MAGIC);
    CHECK_EQ(rep.status, TCP_REFUSE_TOKEN);
    for (int r = 0; r < 2; r++) CHECKF(res[r].code == 0 && !strncmp(res[r].msg, "0 0", 3), "rank %d: %s", r, res[r].msg);
    CHECKF(res[1].exit_s < 5, "the silent stranger held the job up: %.2f s", res[1].exit_s);
}

static int body_never(tp_backend *b, int rank, int world, char *msg, size_t n)
{
    (void)b, (void)rank, (void)world, (void)msg, (void)n;
    return 0;
}

TEST(tcp_bad_ifname_is_a_clear_error)
{
    setenv("DDPRT_SOCKET_IFNAME", "nosuchif0", 1);
    tcpf_result res[2];
    CHECK(tcpf_run(2, 5, 0, body_never, NULL, NULL, res) == 0);
    for (int r = 0; r < 2; r++)
        CHECKF(res[r].code == 3 && strstr(res[r].msg, "DDPRT_SOCKET_IFNAME=nosuchif0"), "%s", res[r].msg);
}

TEST(tcp_ifname_lo_works)
{
    /* "^lo": the first other interface, dialled over its own address. */
    static const char *const specs[] = {"lo", "=lo", "l", "nosuch,lo", "^lo"};
    for (int k = 0; k < 5; k++) {
        setenv("DDPRT_SOCKET_IFNAME", specs[k], 1);
        tcpf_result res[2];
        CHECK(tcpf_run(2, 5, 0, body_ping, NULL, NULL, res) == 0);
        for (int r = 0; r < 2; r++) CHECKF(res[r].code == 0, "%s: %s", specs[k], res[r].msg);
    }
    setenv("DDPRT_SOCKET_IFNAME", "=l", 1); /* exact: no interface is called "l" */
    tcpf_result res[2];
    CHECK(tcpf_run(2, 5, 0, body_never, NULL, NULL, res) == 0);
    CHECKF(res[0].code == 3 && strstr(res[0].msg, "DDPRT_SOCKET_IFNAME==l"), "%s", res[0].msg);
}

/* A rank lost between the address exchange and the connects: the others fail within
 * seconds (refused connects, then hang-ups) instead of waiting out the timeout. */
TEST(tcp_rank_lost_while_mesh_forms)
{
    for (int world = 3; world <= 4; world++) {
        tcpf_die_rank = 2;
        tcpf_result res[4];
        CHECK(tcpf_run(world, 30, 0, body_never, NULL, NULL, res) == 0);
        CHECK_EQ(res[2].code, 7);
        for (int r = 0; r < world; r++) {
            if (r == 2) continue;
            CHECKF(res[r].code == 3 && (strstr(res[r].msg, "rank 2") || strstr(res[r].msg, "closed the connection")),
                   "world %d rank %d: %d %s", world, r, res[r].code, res[r].msg);
            CHECKF(res[r].exit_s < 20, "rank %d took %.1f s", r, res[r].exit_s);
            printf("  world %d: rank %d failed after %.2f s: %s\n", world, r, res[r].exit_s, res[r].msg);
        }
    }
}
