/* The meeting over TCP: rank 0 listens, every other rank connects (retrying until the
 * deadline, so any start order works) and sends a hello. Rank 0 serves all connections
 * from one poll loop with a per-connection hello deadline, so a stranger, a port
 * scanner or a half-sent header cannot block the real ranks; whoever is refused gets
 * one clear line and the job keeps waiting for the real rank. */
#include "rt/rdzv_int.h"
#include "rt/env.h"
#include "ports/posix/port.h"
#include "ports/posix/port_sock.h"
#include "rt/log.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_PENDING 64 /* not-yet-identified connections served at once */

typedef struct {
    int fd;
    int64_t deadline;
    size_t got;
    rt_rdzv_hdr h;
    char peer[64];
    uint8_t buf[RT_RDZV_HDR + RT_RDZV_MAX_HELLO];
} pending;

static void send_text(int fd, int type, uint32_t code, const char *text)
{
    uint8_t b[RT_RDZV_HDR + 4 + RT_RDZV_MAX_TEXT];
    size_t n = rt_rdzv_put_text(b + RT_RDZV_HDR, sizeof b - RT_RDZV_HDR, code, text);
    rt_rdzv_put_hdr(b, type, (uint32_t)n, 0);
    /* Best effort with a short deadline: the receiver may be gone already. */
    port_sock_write_full(fd, b, RT_RDZV_HDR + n, port_now_ns() + 1000000000LL);
}

static void drop(pending *p) { port_sock_close(p->fd); p->fd = -1; p->got = 0; }

static void refuse(pending *p, const rt_rdzv_hello *h, const char *why, const char *tell)
{
    if (h)
        rt_warn("rank 0: refused a connection from %s (host %s, pid %u, claims rank %d of %d): %s",
                p->peer, h->host, h->pid, h->rank, h->world, why);
    else
        rt_warn("rank 0: refused a connection from %s: %s", p->peer, why);
    if (tell) send_text(p->fd, RZ_REJECT, RZ_REJ_FATAL, tell);
    drop(p);
}

/* A complete hello arrived on p: admit it as its rank or refuse it. */
static void admit(rt_rdzv *r, pending *p, rt_rdzv_hello *hello, int *joined)
{
    rt_rdzv_hello h;
    const char *why;
    char msg[RT_RDZV_MAX_TEXT];
    if (rt_rdzv_parse_hello(p->buf + RT_RDZV_HDR, p->h.len, &h, &why)) { refuse(p, NULL, why, NULL); return; }
    if (!r->token_hash != !h.token_hash) {
        /* One side has a token, the other none: this job's rank, misconfigured (another
         * job has its own token). Waiting cannot help either side. */
        snprintf(msg, sizeof msg, "job token set on rank %d only (rank %d, pid %u on %.100s, has %s): set "
                 "DDPRT_JOB_TOKEN on every rank or on none", r->token_hash ? 0 : h.rank, h.rank, h.pid, h.host,
                 r->token_hash ? "none" : "one, rank 0 none");
        send_text(p->fd, RZ_REJECT, RZ_REJ_FATAL, msg);
        drop(p);
        snprintf(r->err, sizeof r->err, "rank 0: %.480s", msg);
        r->failed = 1;
        return;
    }
    if (r->token_hash && h.token_hash != r->token_hash) {
        refuse(p, &h, "wrong job token (a process of another job? this job keeps waiting for its own ranks)",
               "wrong job token: this is another job's rendezvous (check DDPRT_JOB_TOKEN and MASTER_PORT)");
        return;
    }
    if (h.gen != r->gen) {
        /* file://: the client read a stale file; it re-reads and tries again. */
        rt_debug("rank 0: connection from %s used a stale rendezvous file generation", p->peer);
        send_text(p->fd, RZ_REJECT, RZ_REJ_RETRY, "stale rendezvous file (generation differs)");
        drop(p);
        return;
    }
    if (h.world != r->world || h.rank >= r->world) {
        if (h.world != r->world)
            snprintf(msg, sizeof msg, "world size %d does not match rank 0's world size %d", h.world, r->world);
        else
            snprintf(msg, sizeof msg, "rank %d is out of range for world size %d", h.rank, r->world);
        if (r->token_hash && h.token_hash == r->token_hash) {
            /* This job's own token: a rank of this job started with another world (launchers
             * that disagree on --nproc-per-node or --nnodes). Waiting cannot help. */
            send_text(p->fd, RZ_REJECT, RZ_REJ_FATAL, msg);
            drop(p);
            snprintf(r->err, sizeof r->err, "rank 0: rank %d (pid %u on %.100s): %.*s (do the launchers agree on "
                     "--nproc-per-node and --nnodes?)", h.rank, h.pid, h.host, (int)(sizeof r->err - 260), msg);
            r->failed = 1;
            return;
        }
        /* No token, or another's: perhaps a stranger, so the job waits on; its timeout
         * line names this. */
        snprintf(r->refused, sizeof r->refused, "rank %d (pid %u on %.60s) with world size %d", h.rank, h.pid, h.host,
                 h.world);
        refuse(p, &h, msg, msg);
        return;
    }
    if (h.rank == 0 || r->fds[h.rank] >= 0) {
        snprintf(msg, sizeof msg, "rank %d is already taken by %s", h.rank, r->peer[h.rank]);
        refuse(p, &h, msg, msg);
        return;
    }
    r->fds[h.rank] = p->fd;
    hello[h.rank] = h;
    snprintf(r->peer[h.rank], sizeof r->peer[0], "%.64s on host %.160s, pid %u", p->peer, h.host, h.pid);
    rt_debug("rank 0: rank %d joined from %s", h.rank, r->peer[h.rank]);
    p->fd = -1;
    p->got = 0;
    (*joined)++;
}

/* Bytes arrived on a pending connection: collect header + hello without blocking. */
static void feed(rt_rdzv *r, pending *p, rt_rdzv_hello *hello, int *joined)
{
    size_t need = p->got < RT_RDZV_HDR ? RT_RDZV_HDR : RT_RDZV_HDR + p->h.len;
    long k = port_sock_read_some(p->fd, p->buf + p->got, need - p->got);
    if (k == 0) return;
    if (k < 0) {
        if (p->got) rt_warn("rank 0: connection from %s closed after %zu bytes of a hello", p->peer, p->got);
        else rt_debug("rank 0: connection from %s closed without a word", p->peer); /* port probe */
        drop(p);
        return;
    }
    p->got += (size_t)k;
    if (p->got == RT_RDZV_HDR) {
        const char *why;
        if (rt_rdzv_parse_hdr(p->buf, p->got, &p->h, &why)) { refuse(p, NULL, why, NULL); return; }
        if (p->h.type != RZ_HELLO) { refuse(p, NULL, "expected a hello", NULL); return; }
    }
    if (p->got >= RT_RDZV_HDR && p->got == RT_RDZV_HDR + p->h.len) admit(r, p, hello, joined);
}

/* Everyone is here: compare configuration hashes, then welcome (or refuse) them all. */
static int finish_meeting(rt_rdzv *r, rt_rdzv_hello *hello, char *err, size_t errlen)
{
    char msg[300] = ""; /* the list of differing ranks; leaves room in the line below */
    size_t n = 0;
    int bad = 0;
    for (int q = 1; q < r->world && r->config_hash; q++)
        if (hello[q].config_hash != r->config_hash && n < sizeof msg - 80) {
            n += (size_t)snprintf(msg + n, sizeof msg - n, "%srank %d (%016llx)", bad++ ? ", " : "", q,
                                  (unsigned long long)hello[q].config_hash);
        }
    if (bad) {
        char line[RT_RDZV_MAX_TEXT];
        snprintf(line, sizeof line, "configuration mismatch: %s differ%s from rank 0 (%016llx); all ranks must run "
                 "the same model and flags", msg, bad == 1 ? "s" : "", (unsigned long long)r->config_hash);
        for (int q = 1; q < r->world; q++) send_text(r->fds[q], RZ_REJECT, RZ_REJ_FATAL, line);
        snprintf(err, errlen, "rank 0: %s", line);
        return -1;
    }
    for (int q = 0; q < r->world; q++) {
        int lr = hello[q].local_rank;
        /* No launcher told this rank its local rank: count earlier ranks on its host. */
        if (lr < 0) {
            lr = 0;
            for (int s = 0; s < q; s++) lr += hello[s].host_id == hello[q].host_id;
        }
        if (q == 0) { r->local_rank = lr; continue; }
        uint8_t b[RT_RDZV_HDR + 8];
        rt_rdzv_put_hdr(b, RZ_WELCOME, (uint32_t)rt_rdzv_put_welcome(b + RT_RDZV_HDR, 8, r->world, lr), 0);
        if (port_sock_write_full(r->fds[q], b, sizeof b, port_now_ns() + (int64_t)(r->timeout_s * 1e9))) {
            snprintf(err, errlen, "rank 0: rank %d (%s) left before the rendezvous completed", q, r->peer[q]);
            return -1;
        }
    }
    return 0;
}

static void hello_of_self(const rt_rdzv *r, rt_rdzv_hello *h)
{
    memset(h, 0, sizeof *h);
    h->rank = r->rank;
    h->world = r->world;
    h->local_rank = r->local_rank;
    h->pid = (uint32_t)getpid();
    h->token_hash = r->token_hash;
    h->config_hash = r->config_hash;
    h->gen = r->gen;
    h->host_id = port_host_id();
    port_sock_hostname(h->host, sizeof h->host);
    for (char *c = h->host; *c; c++)
        if (*c < 0x21 || *c > 0x7e) *c = '?';
}

int rt_rdzv_serve_meeting(rt_rdzv *r, char *err, size_t errlen)
{
    int W = r->world, joined = 1, rc = -1, nf = 1 + MAX_PENDING + W;
    rt_rdzv_hello *hello = calloc((size_t)W, sizeof *hello);
    pending *pend = calloc(MAX_PENDING, sizeof *pend);
    int *fds = malloc(sizeof *fds * (size_t)nf), *ready = malloc(sizeof *ready * (size_t)nf);
    if (!hello || !pend || !fds || !ready) { snprintf(err, errlen, "rank 0: out of memory"); goto out; }
    for (int i = 0; i < MAX_PENDING; i++) pend[i].fd = -1;
    hello_of_self(r, &hello[0]);
    int64_t hello_ns = rt_rdzv_hello_timeout_ns(r), deadline = port_now_ns() + (int64_t)(r->timeout_s * 1e9);
    rt_debug("rank 0: waiting for %d ranks at %s", W - 1, r->where);
    while (joined < W) {
        int64_t now = port_now_ns(), wake = deadline;
        if (now >= deadline) {
            char missing[160] = "";
            size_t n = 0;
            for (int q = 1; q < W && n < sizeof missing - 16; q++)
                if (r->fds[q] < 0) n += (size_t)snprintf(missing + n, sizeof missing - n, "%s%d", n ? "," : "", q);
            char line[RT_RDZV_MAX_TEXT];
            int k = snprintf(line, sizeof line, "rendezvous at %.200s timed out after %g s: rank%s %s of %d did not "
                             "join", r->where, r->timeout_s, strchr(missing, ',') ? "s" : "", missing, W);
            if (r->refused[0] && k > 0 && (size_t)k < sizeof line)
                snprintf(line + k, sizeof line - (size_t)k, "; refused meanwhile: %s (do the launchers agree on "
                         "--nproc-per-node and --nnodes?)", r->refused);
            for (int q = 1; q < W; q++)
                if (r->fds[q] >= 0) send_text(r->fds[q], RZ_REJECT, RZ_REJ_FATAL, line);
            snprintf(err, errlen, "rank 0: %s", line);
            goto out;
        }
        fds[0] = r->lfd;
        for (int i = 0; i < MAX_PENDING; i++) {
            if (pend[i].fd >= 0 && now >= pend[i].deadline) {
                rt_warn("rank 0: dropped a connection from %s: sent only %zu of %zu hello bytes in %g s "
                        "(stalled or not a ddprt rank)", pend[i].peer, pend[i].got,
                        pend[i].got < RT_RDZV_HDR ? (size_t)RT_RDZV_HDR : RT_RDZV_HDR + pend[i].h.len,
                        (double)hello_ns * 1e-9);
                drop(&pend[i]);
            }
            fds[1 + i] = pend[i].fd;
            if (pend[i].fd >= 0 && pend[i].deadline < wake) wake = pend[i].deadline;
        }
        /* Joined ranks are watched too: one that dies now frees its slot for a restart. */
        for (int q = 0; q < W; q++) fds[1 + MAX_PENDING + q] = r->fds[q];
        int k = port_sock_poll_readable(fds, nf, ready, wake);
        if (k < 0) { snprintf(err, errlen, "rank 0: poll failed: %s", strerror(errno)); goto out; }
        if (k == 0) continue;
        if (ready[0]) {
            char peer[64] = "?";
            int fd = port_sock_accept(r->lfd, port_now_ns() + 10000000, peer, sizeof peer);
            int slot = -1;
            for (int i = 0; i < MAX_PENDING && slot < 0 && fd >= 0; i++)
                if (pend[i].fd < 0) slot = i;
            if (fd >= 0 && slot < 0) {
                rt_warn("rank 0: too many unidentified connections; refused %s", peer);
                port_sock_close(fd);
            } else if (fd >= 0) {
                pend[slot].fd = fd;
                pend[slot].got = 0;
                pend[slot].deadline = port_now_ns() + hello_ns;
                snprintf(pend[slot].peer, sizeof pend[slot].peer, "%s", peer);
                port_sock_tune(fd, 0);
            }
        }
        for (int i = 0; i < MAX_PENDING; i++)
            if (ready[1 + i] && pend[i].fd >= 0) feed(r, &pend[i], hello, &joined);
        if (r->failed) {
            for (int q = 1; q < W; q++)
                if (r->fds[q] >= 0) send_text(r->fds[q], RZ_REJECT, RZ_REJ_FATAL, r->err + 8);
            snprintf(err, errlen, "%s", r->err);
            goto out;
        }
        for (int q = 1; q < W; q++) {
            if (!ready[1 + MAX_PENDING + q] || r->fds[q] < 0 || fds[1 + MAX_PENDING + q] != r->fds[q]) continue;
            uint8_t junk;
            if (port_sock_read_some(r->fds[q], &junk, 1) == 0) continue;
            rt_warn("rank 0: rank %d (%s) left before the rendezvous completed; waiting for it to come back", q,
                    r->peer[q]);
            port_sock_close(r->fds[q]);
            r->fds[q] = -1;
            joined--;
        }
    }
    rc = finish_meeting(r, hello, err, errlen);
    /* Our address as the remote ranks reached it; loopback only if all are local. */
    for (int q = 1; q < W && !rc; q++) {
        char ip[48];
        int lo = 1;
        if (port_sock_local_ip(r->fds[q], ip, sizeof ip, &lo) == 0 && (!r->self_ip[0] || !lo)) {
            snprintf(r->self_ip, sizeof r->self_ip, "%s", ip);
            if (!lo) break;
        }
    }
out:
    for (int i = 0; pend && i < MAX_PENDING; i++)
        if (pend[i].fd >= 0) port_sock_close(pend[i].fd);
    if (rc || rt_rdzv_door_open(r)) {
        port_sock_close(r->lfd);
        r->lfd = -1;
    }
    free(hello);
    free(pend);
    free(fds);
    free(ready);
    return rc;
}

int rt_rdzv_try_join(rt_rdzv *r, const char *host, int port, int64_t deadline_ns, char *last, size_t lastlen,
                     char *err, size_t errlen)
{
    char e[256];
    int64_t now = port_now_ns(), cdl = now + 5000000000LL < deadline_ns ? now + 5000000000LL : deadline_ns;
    int fd = port_sock_connect(host, port, cdl, e, sizeof e);
    if (fd < 0) {
        /* An attempt cut short by the overall deadline says nothing new: keep the
         * previous reason ("Connection refused"), which is the useful one. */
        if (!(errno == ETIMEDOUT && cdl == deadline_ns && strcmp(last, "no attempt")))
            snprintf(last, lastlen, "%s", strerror(errno));
        return 1;
    }
    port_sock_tune(fd, 0);
    rt_rdzv_hello h;
    hello_of_self(r, &h);
    uint8_t b[RT_RDZV_HDR + 4 + RT_RDZV_MAX_TEXT + RT_RDZV_MAX_HELLO];
    size_t n = rt_rdzv_put_hello(b + RT_RDZV_HDR, RT_RDZV_MAX_HELLO, &h);
    rt_rdzv_put_hdr(b, RZ_HELLO, (uint32_t)n, 0);
    int rc = port_sock_write_full(fd, b, RT_RDZV_HDR + n, deadline_ns);
    rt_rdzv_hdr hd;
    const char *why = NULL;
    /* Joined, waiting for the others: rank 0 knows who is missing, so its deadline
     * (which started no later than ours could reach it) passes first and its answer
     * names them; we wait a little past ours for that answer. */
    int64_t answer_dl = deadline_ns + 2000000000LL;
    if (!rc) rc = port_sock_read_full(fd, b, RT_RDZV_HDR, answer_dl);
    if (rc) {
        /* Rank 0 gone or restarting, or the deadline passed while we waited for the
         * others: the caller decides whether there is time for another try. */
        snprintf(last, lastlen, "%s", rc == PORT_TIMEOUT ? "connected, but the other ranks did not all arrive"
                                                          : "rank 0 closed the connection");
        port_sock_close(fd);
        return 1;
    }
    if (rt_rdzv_parse_hdr(b, RT_RDZV_HDR, &hd, &why) || (hd.type != RZ_WELCOME && hd.type != RZ_REJECT)) {
        snprintf(err, errlen, "rank %d: %s is not a ddprt rendezvous (%s)", r->rank, r->where,
                 why ? why : "unexpected message");
        port_sock_close(fd);
        return -1;
    }
    if (port_sock_read_full(fd, b, hd.len, answer_dl)) {
        snprintf(last, lastlen, "rank 0 closed the connection mid-answer");
        port_sock_close(fd);
        return 1;
    }
    if (hd.type == RZ_REJECT) {
        uint32_t code = 0;
        char text[RT_RDZV_MAX_TEXT + 1];
        port_sock_close(fd);
        if (rt_rdzv_parse_text(b, hd.len, &code, text, sizeof text, &why)) snprintf(text, sizeof text, "%s", why);
        if (code == RZ_REJ_RETRY) { snprintf(last, lastlen, "%s", text); return 1; }
        snprintf(err, errlen, "rank %d: rendezvous at %s refused this process: %s", r->rank, r->where, text);
        return -1;
    }
    int32_t world, lr;
    if (rt_rdzv_parse_welcome(b, hd.len, &world, &lr, &why) || world != r->world) {
        snprintf(err, errlen, "rank %d: bad welcome from %s: %s", r->rank, r->where, why ? why : "world differs");
        port_sock_close(fd);
        return -1;
    }
    if (r->local_rank < 0) r->local_rank = lr;
    r->master = fd;
    if (port_sock_local_ip(fd, r->self_ip, sizeof r->self_ip, NULL)) r->self_ip[0] = 0;
    return 0;
}

int rt_rdzv_backoff(const rt_rdzv *r, int64_t deadline_ns, int64_t *backoff, int64_t cap_ns, const char *via,
                    const char *last, char *err, size_t errlen)
{
    int64_t left = deadline_ns - port_now_ns();
    if (left <= 0) {
        snprintf(err, errlen, "rank %d: no rendezvous %s %s after %g s: %s", r->rank, via, r->where, r->timeout_s, last);
        return -1;
    }
    port_sleep_ns(*backoff < left ? *backoff : left);
    *backoff = *backoff * 2 > cap_ns ? cap_ns : *backoff * 2;
    return 0;
}

int rt_rdzv_open_tcp(rt_rdzv *r, const rt_rdzv_plan *p, char *err, size_t errlen)
{
    char e[256];
    int64_t deadline = port_now_ns() + (int64_t)(r->timeout_s * 1e9), backoff = 20000000;
    /* A name that does not resolve will not start to: one line now, not after the whole
     * timeout, on every rank (rank 0 listens on all interfaces, but its peers use the
     * name). Only a temporary DNS failure is retried, for a short grace. */
    int64_t grace = port_now_ns() + 3000000000LL;
    if (p->host[0] && port_sock_resolve_check(p->host, grace < deadline ? grace : deadline, e, sizeof e)) {
        snprintf(err, errlen, "rank %d: rendezvous %s: %s", r->rank, r->where, e);
        return -1;
    }
    if (r->rank == 0) {
        r->lfd = port_sock_listen(NULL, p->port, r->world + MAX_PENDING, e, sizeof e);
        if (r->lfd < 0) {
            snprintf(err, errlen, "rank 0: %s%s", e,
                     errno == EADDRINUSE ? " (another job on this port? set MASTER_PORT)" : "");
            return -1;
        }
        return rt_rdzv_serve_meeting(r, err, errlen);
    }
    char last[RT_RDZV_MAX_TEXT + 64] = "no attempt";
    for (;;) {
        int rc = rt_rdzv_try_join(r, p->host, p->port, deadline, last, sizeof last, err, errlen);
        if (rc <= 0) return rc;
        if (rt_rdzv_backoff(r, deadline, &backoff, 1000000000LL, "with", last, err, errlen)) return -1;
    }
}
