/* TCP backend, data path. One socket per peer, or DDPRT_TCP_NSOCKS (full mesh, built
 * by tp_tcp_setup.c), non-blocking, driven from waitall/test by one thread:
 *  - per peer a FIFO of posted sends and one of posted recvs; every message is a
 *    16-byte frame header (length, sequence) followed by the payload, written with
 *    one sendmsg (header + user buffer, no staging copy); with several sockets a
 *    large message is striped, each socket carrying a header and its stripe;
 *  - a recv reads the next header and, speculatively in the same readv, the payload
 *    straight into the user buffer (one syscall for a small message); the header must
 *    announce exactly the posted length and the expected sequence, else it is a
 *    protocol error naming the peer;
 *  - waitall busy-polls (non-blocking send/recv attempts) after the last progress
 *    before it sleeps in poll(): waking an idle core costs ~100 us, a small
 *    allreduce ~5 us; the spin adapts between 5 us and spin_ns (see tcp_waitall);
 *  - any error fails the backend: every queued request fails, a best-effort abort
 *    frame carrying the root cause goes to every peer whose stream is between frames,
 *    and all sockets close, so the failure reaches every rank within milliseconds
 *    and names the rank that caused it. */
#include "transport/tp_tcp_int.h"
#include "rt/env.h"
#include "ports/posix/port.h"
#include "ports/posix/port_sock.h"
#include "rt/log.h"
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define FRAME ((size_t)sizeof(tcp_frame))
/* Shortest busy-poll before poll(): a reply to a small message arrives in ~5 us. */
#define TCP_SPIN_MIN_NS 5000

/* ---- failure --------------------------------------------------------------------- */

/* Tells a peer why we are going away, on every lane whose stream is between frames
 * (otherwise a frame header would land inside a payload) if the few bytes fit without
 * waiting. */
static void send_abort_frame(tcp_peer *p, const char *root)
{
    struct { tcp_frame h; char why[240]; } m;
    size_t n = strlen(root) < sizeof m.why ? strlen(root) : sizeof m.why;
    memcpy(m.why, root, n);
    for (int k = 0; k < p->nl; k++) {
        tcp_lane *l = &p->lane[k];
        if (l->fd < 0 || (l->scur && (l->shdr_done || l->soff))) continue;
        m.h = (tcp_frame){n, l->sseq, TCP_FRAME_ABORT};
        ssize_t w = send(l->fd, &m, FRAME + n, MSG_NOSIGNAL | MSG_DONTWAIT);
        (void)w;
    }
}

static void close_all(tcp_backend *t)
{
    for (int j = 0; j < t->b.world; j++)
        for (int k = 0; k < t->peers[j].nl; k++) {
            tcp_lane *l = &t->peers[j].lane[k];
            if (l->fd < 0) continue;
            shutdown(l->fd, SHUT_WR); /* FIN after the abort frame */
            close(l->fd);
            l->fd = -1;
        }
}

static void fail_queue(tcp_peer *p, tp_req **q, tp_req **tail, int code)
{
    for (int k = 0; k < p->nl; k++) p->lane[k].scur = p->lane[k].rcur = NULL;
    for (tp_req *r = *q, *nx; r; r = nx) {
        nx = r->next;
        r->state = code;
        r->next = NULL;
    }
    *q = *tail = NULL;
}

/* Fails the backend once: err = shown text, root = the cause forwarded to peers. */
static int fail_with(tcp_backend *t, int code, const char *root, const char *shown)
{
    if (t->b.failed) return t->b.failed;
    t->b.failed = code;
    snprintf(t->b.err, sizeof t->b.err, "%s", shown ? shown : root);
    for (int j = 0; j < t->b.world; j++) {
        tcp_peer *p = &t->peers[j];
        send_abort_frame(p, root);
        fail_queue(p, &p->sq, &p->sq_tail, code);
        fail_queue(p, &p->rq, &p->rq_tail, code);
    }
    close_all(t);
    rt_debug("tcp: backend failed: %s", t->b.err);
    return code;
}

static int failf(tcp_backend *t, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int failf(tcp_backend *t, int code, const char *fmt, ...)
{
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return fail_with(t, code, buf, NULL);
}

/* Peeks at the streams from peer q that are between frames: 2 = one closed without
 * an abort frame (it died), 1 = abort frame (reason copied), 0 = nothing to learn. */
static int peek_peer(tcp_backend *t, int q, char *why, size_t wlen)
{
    tcp_peer *p = &t->peers[q];
    int found = 0;
    for (int k = 0; k < p->nl; k++) {
        tcp_lane *l = &p->lane[k];
        if (l->fd < 0 || l->rhdr_done || (l->rcur && l->roff)) continue;
        struct { tcp_frame h; char why[240]; } m;
        ssize_t r = recv(l->fd, &m, sizeof m, MSG_PEEK | MSG_DONTWAIT);
        if (r == 0 || (r < 0 && errno == ECONNRESET)) return 2;
        if (found || r < (ssize_t)FRAME || !(m.h.flags & TCP_FRAME_ABORT) || m.h.len > sizeof m.why ||
            (size_t)r < FRAME + m.h.len)
            continue;
        snprintf(why, wlen, "%.*s", (int)m.h.len, m.why);
        found = 1;
    }
    return found;
}

/* Peer j closed on us. Before reporting, look whether another rank is the real cause:
 * a peer that died (closed between frames without a word) beats a forwarded abort
 * reason, which beats the plain "rank j closed". */
static int fail_closed(tcp_backend *t, int j)
{
    char why[240], root[240], shown[320];
    int forwarded = -1;
    for (int q = 0; q < t->b.world; q++) {
        if (q == t->b.rank) continue;
        int k = peek_peer(t, q, why, sizeof why);
        if (k == 2 && q != j) {
            snprintf(root, sizeof root, "rank %d closed the connection", q);
            return fail_with(t, TP_ECLOSED, root, NULL);
        }
        if (k == 1 && forwarded < 0) {
            forwarded = q;
            snprintf(root, sizeof root, "%.230s", why);
        }
    }
    if (forwarded >= 0) {
        snprintf(shown, sizeof shown, "%s (reported by rank %d)", root, forwarded);
        return fail_with(t, TP_ECLOSED, root, shown);
    }
    return failf(t, TP_ECLOSED, "rank %d closed the connection", j);
}

static int fail_errno(tcp_backend *t, int j, const char *what)
{
    if (errno == EPIPE || errno == ECONNRESET) return fail_closed(t, j);
    return failf(t, TP_EIO, "%s with rank %d failed: %s", what, j, strerror(errno));
}

/* ---- progress -------------------------------------------------------------------- */

/* Lane k's part of r, [*off, *off + *cnt): 0 when lane k carries none of it. A
 * message of TCP_STRIPE_MIN bytes or more is cut into one stripe per lane (all of
 * them: then a recv whose length disagrees still meets a header on every lane it
 * reads, so the mismatch is named, not waited out); a shorter one goes whole on
 * lane r->lane. */
static int lane_part(const tcp_peer *p, const tp_req *r, int k, size_t *off, size_t *cnt)
{
    size_t n = (size_t)p->nl;
    if (r->len < TCP_STRIPE_MIN || n == 1) {
        *off = 0;
        *cnt = r->len;
        return k == r->lane;
    }
    *off = r->len / n * (size_t)k;
    *cnt = (size_t)k == n - 1 ? r->len - *off : r->len / n;
    return 1;
}

/* Lane l is done with request r: on to the next; r completes when it was the last. */
static void lane_passed(tcp_peer *p, tp_req *r, tp_req **cur, tp_req **q, tp_req **tail, int64_t *since)
{
    *cur = r->next;
    if (++r->done < (size_t)p->nl) return;
    /* All lanes passed r, so all passed every older request: r is the head. */
    r->state = 1;
    *q = r->next;
    if (!*q) *tail = NULL;
    r->next = NULL;
    *since = port_now_ns();
}

/* Moves as many bytes of lane k to peer j as its socket takes. 1 progress, 0 none, < 0 failed. */
static int lane_send(tcp_backend *t, int j, int k)
{
    tcp_peer *p = &t->peers[j];
    tcp_lane *l = &p->lane[k];
    int moved = 0;
    while (l->scur) {
        tp_req *r = l->scur;
        size_t off, cnt;
        if (lane_part(p, r, k, &off, &cnt)) {
            if (!l->sbusy) {
                l->shdr = (tcp_frame){r->len, l->sseq, 0};
                l->shdr_done = l->soff = 0;
                l->sbusy = 1;
            }
            struct iovec iov[2];
            int ni = 0;
            if (l->shdr_done < FRAME)
                iov[ni++] = (struct iovec){(char *)&l->shdr + l->shdr_done, FRAME - l->shdr_done};
            if (l->soff < cnt) iov[ni++] = (struct iovec){(char *)r->buf + off + l->soff, cnt - l->soff};
            if (ni) {
                struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)ni};
                ssize_t w = sendmsg(l->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (w < 0) {
                    if (errno == EAGAIN || errno == EINTR) return moved;
                    return fail_errno(t, j, "send");
                }
                moved = 1;
                size_t h = FRAME - l->shdr_done;
                if ((size_t)w < h) { l->shdr_done += (size_t)w; return moved; }
                l->shdr_done = FRAME;
                l->soff += (size_t)w - h;
                if (l->soff < cnt) return moved; /* socket full */
            }
            l->sseq++;
            l->sbusy = 0;
            l->shdr_done = l->soff = 0;
        }
        lane_passed(p, r, &l->scur, &p->sq, &p->sq_tail, &p->sq_since);
        moved = 1;
    }
    return moved;
}

/* The abort reason's first roff bytes landed at buf + off (the speculative read). */
static int on_abort_frame(tcp_backend *t, int j, tcp_lane *l, const void *buf, size_t off)
{
    char why[241] = "";
    size_t want = l->rhdr.len < 240 ? (size_t)l->rhdr.len : 240;
    size_t have = l->roff < want ? l->roff : want;
    if (have) memcpy(why, (const char *)buf + off, have);
    if (have < want) port_sock_read_full(l->fd, why + have, want - have, port_now_ns() + 200000000LL);
    why[want] = 0;
    char shown[320];
    snprintf(shown, sizeof shown, "%s (reported by rank %d)", why[0] ? why : "aborted", j);
    return fail_with(t, TP_ECLOSED, why[0] ? why : "aborted", shown);
}

/* Reads whatever lane k of peer j has for the posted recvs, in order. 1/0/< 0 as above. */
static int lane_recv(tcp_backend *t, int j, int k)
{
    tcp_peer *p = &t->peers[j];
    tcp_lane *l = &p->lane[k];
    int moved = 0;
    while (l->rcur) {
        tp_req *r = l->rcur;
        size_t off, cnt;
        if (lane_part(p, r, k, &off, &cnt)) {
            if (l->rhdr_done < FRAME || l->roff < cnt) {
                struct iovec iov[2];
                int ni = 0;
                size_t h = FRAME - l->rhdr_done;
                if (h) iov[ni++] = (struct iovec){(char *)&l->rhdr + l->rhdr_done, h};
                /* Speculative: the stripe follows the header; a wrong length is an
                 * error anyway, so reading it into the user buffer now saves a syscall. */
                if (l->roff < cnt) iov[ni++] = (struct iovec){(char *)r->buf + off + l->roff, cnt - l->roff};
                struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)ni};
                ssize_t got = recvmsg(l->fd, &mh, MSG_DONTWAIT);
                if (got == 0) return fail_closed(t, j);
                if (got < 0) {
                    if (errno == EAGAIN || errno == EINTR) return moved;
                    return fail_errno(t, j, "recv");
                }
                moved = 1;
                if ((size_t)got < h) { l->rhdr_done += (size_t)got; return moved; }
                l->roff += (size_t)got - h;
                if (h) {
                    l->rhdr_done = FRAME;
                    if (l->rhdr.flags & TCP_FRAME_ABORT) return on_abort_frame(t, j, l, r->buf, off);
                    if (l->rhdr.len != r->len)
                        return failf(t, TP_EIO, "protocol error: rank %d sent a message of %llu bytes, "
                                     "the posted recv expects %zu (message #%u)", j,
                                     (unsigned long long)l->rhdr.len, r->len, l->rseq);
                    if (l->rhdr.seq != l->rseq)
                        return failf(t, TP_EIO, "protocol error: rank %d sent message #%u, expected #%u",
                                     j, l->rhdr.seq, l->rseq);
                }
                if (l->roff < cnt) return moved;
            }
            l->rseq++;
            l->rhdr_done = l->roff = 0;
        }
        lane_passed(p, r, &l->rcur, &p->rq, &p->rq_tail, &p->rq_since);
        moved = 1;
    }
    return moved;
}

static int progress_all(tcp_backend *t)
{
    int moved = 0;
    for (int j = 0; j < t->b.world; j++) {
        tcp_peer *p = &t->peers[j];
        /* Send first: the peer may be waiting for it, and what we expect back
         * cannot have arrived earlier than what we have not sent yet. */
        for (int k = 0; k < p->nl && p->sq; k++) {
            int r = lane_send(t, j, k);
            if (r < 0) return r;
            moved |= r;
        }
        for (int k = 0; k < p->nl && p->rq; k++) {
            int r = lane_recv(t, j, k);
            if (r < 0) return r;
            moved |= r;
        }
    }
    return moved;
}

/* Sleeps in poll() until a socket with queued work is ready or the deadline. */
static int block_once(tcp_backend *t, int64_t deadline)
{
    int np = 0;
    for (int j = 0; j < t->b.world; j++) {
        tcp_peer *p = &t->peers[j];
        for (int k = 0; k < p->nl; k++) {
            tcp_lane *l = &p->lane[k];
            short ev = (short)((l->rcur ? POLLIN : 0) | (l->scur ? POLLOUT : 0));
            if (!ev || l->fd < 0) continue;
            t->pfds[np] = (struct pollfd){l->fd, ev, 0};
            t->pfd_peer[np++] = j;
        }
    }
    int64_t left = deadline - port_now_ns();
    int ms = left <= 0 ? 0 : (int)(left / 1000000) + 1;
    if (ms > 1000) ms = 1000;
    int r = poll(t->pfds, (nfds_t)np, ms);
    if (r < 0 && errno != EINTR) return failf(t, TP_EIO, "poll: %s", strerror(errno));
    return 0;
}

static int fail_timeout(tcp_backend *t, tp_req **reqs, int n)
{
    int64_t now = port_now_ns();
    for (int i = 0; i < n; i++) {
        tp_req *r = reqs[i];
        if (r->state != 0) continue;
        tcp_peer *p = &t->peers[r->peer];
        int64_t since = r->kind == TP_REQ_RECV ? p->rq_since : p->sq_since;
        return failf(t, TP_ETIMEOUT, "timed out after %.0f s waiting for rank %d (%s of %zu bytes)",
                     (double)(now - since) / 1e9, r->peer, r->kind == TP_REQ_RECV ? "recv" : "send",
                     r->len);
    }
    return failf(t, TP_ETIMEOUT, "timed out");
}

static int tcp_waitall(tp_backend *b, tp_req **reqs, int n, int64_t deadline_ns)
{
    tcp_backend *t = (tcp_backend *)b;
    if (b->failed) return b->failed;
    int64_t idle_since = port_now_ns();
    int spun = 0;
    for (int i = 0;;) {
        int moved = progress_all(t);
        if (moved < 0) return moved;
        /* Requests complete in order per queue, so resume the scan where it stopped. */
        while (i < n && reqs[i]->state == 1) i++;
        if (i == n) return 0;
        if (reqs[i]->state < 0) return reqs[i]->state;
        int64_t now = port_now_ns();
        if (moved) {
            /* The peer delivered while we spun: it runs beside us, spinning pays. */
            if (spun && t->spin_cur < t->spin_ns) t->spin_cur = t->spin_cur * 2 < t->spin_ns ? t->spin_cur * 2 : t->spin_ns;
            spun = 0;
            idle_since = now;
        }
        if (now >= deadline_ns) return fail_timeout(t, reqs, n);
        /* Busy-poll, then sleep in poll(). Not sched_yield: under EEVDF each yield
         * pushes our deadline back, so a loop of them hands the core to whatever
         * else is runnable (a nice 19 job included) for its whole slice, measured
         * ~1 ms per yield that switched, once per 1 MiB allreduce. A sleeper, on
         * the other hand, is woken ahead of such a job. The spin adapts: it doubles
         * when the peer delivered during it and halves when it ran out (a peer that
         * shares our core cannot deliver while we spin). */
        if (now - idle_since < t->spin_cur) {
            spun = 1;
            port_cpu_relax();
            continue;
        }
        int64_t lo = t->spin_ns < TCP_SPIN_MIN_NS ? t->spin_ns : TCP_SPIN_MIN_NS;
        t->spin_cur = t->spin_cur / 2 > lo ? t->spin_cur / 2 : lo;
        int r = block_once(t, deadline_ns);
        if (r < 0) return r;
        spun = 0;
        idle_since = port_now_ns();
    }
}

static int tcp_test(tp_backend *b, tp_req *req)
{
    tcp_backend *t = (tcp_backend *)b;
    if (b->failed) return b->failed;
    int r = progress_all(t);
    if (r < 0) return r;
    return req->state;
}

static int post(tcp_backend *t, int kind, int peer, void *buf, size_t len, tp_req *r)
{
    if (t->b.failed) return t->b.failed;
    if (peer < 0 || peer >= t->b.world || peer == t->b.rank || (!buf && len)) return TP_EINVAL;
    tcp_peer *p = &t->peers[peer];
    int snd = kind == TP_REQ_SEND;
    /* An unstriped message goes on lane (its index in this direction) mod lanes: both
     * ends count alike, whatever the lengths (see lane_part). */
    uint32_t idx = snd ? p->snext++ : p->rnext++;
    *r = (tp_req){.kind = kind, .peer = peer, .buf = buf, .len = len,
                  .lane = (int)(idx % (uint32_t)(p->nl ? p->nl : 1))};
    tp_req **q = snd ? &p->sq : &p->rq, **tail = snd ? &p->sq_tail : &p->rq_tail;
    if (*tail) (*tail)->next = r;
    else *q = r;
    *tail = r;
    if (*q == r) *(snd ? &p->sq_since : &p->rq_since) = port_now_ns();
    /* Lanes that passed every queued request take this one next. */
    for (int k = 0; k < p->nl; k++) {
        tp_req **cur = snd ? &p->lane[k].scur : &p->lane[k].rcur;
        if (!*cur) *cur = r;
    }
    return 0;
}

static int tcp_isend(tp_backend *b, int peer, const void *buf, size_t len, tp_req *req)
{
    return post((tcp_backend *)b, TP_REQ_SEND, peer, (void *)buf, len, req);
}

static int tcp_irecv(tp_backend *b, int peer, void *buf, size_t len, tp_req *req)
{
    return post((tcp_backend *)b, TP_REQ_RECV, peer, buf, len, req);
}

static void tcp_abort(tp_backend *b, const char *why)
{
    fail_with((tcp_backend *)b, TP_EIO, why && *why ? why : "aborted", NULL);
}

static void tcp_destroy(tp_backend *b)
{
    tcp_backend *t = (tcp_backend *)b;
    if (!t) return;
    close_all(t);
    free(t->peers);
    free(t->pfds);
    free(t->pfd_peer);
    free(t);
}

/* Lane 0 carries the control frames (an abort's reason), so its hang-up is the peer's. */
static int tcp_peer_fd(tp_backend *b, int peer)
{
    tcp_backend *t = (tcp_backend *)b;
    return peer >= 0 && peer < b->world && peer != b->rank ? t->peers[peer].lane[0].fd : -1;
}

/* DDPRT_TCP_NSOCKS: sockets per peer, 1..TCP_MAX_NSOCKS (default TCP_DEFAULT_NSOCKS). */
int tcp_nsocks_env(int *n, char *err, size_t errlen)
{
    const char *s = rt_env_str(RT_ENV_TCP_NSOCKS);
    char *end;
    long v = s ? strtol(s, &end, 10) : TCP_DEFAULT_NSOCKS;
    if (s && (*end || v < 1 || v > TCP_MAX_NSOCKS)) {
        snprintf(err, errlen, "DDPRT_TCP_NSOCKS=%s: expected an integer from 1 to %d", s, TCP_MAX_NSOCKS);
        return -1;
    }
    *n = (int)v;
    return 0;
}

static const tp_backend_ops tcp_ops = {
    .name = "tcp",
    .isend = tcp_isend,
    .irecv = tcp_irecv,
    .waitall = tcp_waitall,
    .test = tcp_test,
    .register_mem = NULL,
    .abort = tcp_abort,
    .destroy = tcp_destroy,
    .peer_fd = tcp_peer_fd,
};

int tp_tcp_create(const tp_bootstrap *bs, tp_backend **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!bs || bs->world < 1 || bs->rank < 0 || bs->rank >= bs->world || !bs->allgather) {
        snprintf(err, errlen, "tcp: bad bootstrap (rank/world/allgather)");
        return -1;
    }
    tcp_backend *t = calloc(1, sizeof *t);
    if (!t) { snprintf(err, errlen, "tcp: out of memory"); return -1; }
    t->b.ops = &tcp_ops;
    t->b.rank = bs->rank;
    t->b.world = bs->world;
    t->timeout_s = bs->timeout_s > 0 ? bs->timeout_s : 300;
    t->spin_ns = (int64_t)rt_env_number(RT_ENV_TCP_SPIN_US) * 1000;
    t->spin_cur = t->spin_ns;
    if (tcp_nsocks_env(&t->nsocks, err, errlen)) {
        free(t);
        return -1;
    }
    size_t nfd = (size_t)bs->world * (size_t)t->nsocks;
    t->peers = calloc((size_t)bs->world, sizeof *t->peers);
    t->pfds = calloc(nfd, sizeof *t->pfds);
    t->pfd_peer = calloc(nfd, sizeof *t->pfd_peer);
    if (!t->peers || !t->pfds || !t->pfd_peer) {
        snprintf(err, errlen, "tcp: out of memory");
        tcp_destroy(&t->b);
        return -1;
    }
    for (int j = 0; j < bs->world; j++) {
        t->peers[j].nl = j == bs->rank ? 0 : t->nsocks;
        for (int k = 0; k < TCP_MAX_NSOCKS; k++) t->peers[j].lane[k].fd = -1;
    }
    if (bs->world > 1 && tcp_mesh_connect(t, bs, err, errlen)) {
        tcp_destroy(&t->b);
        return -1;
    }
    for (int j = 0; j < bs->world; j++)
        for (int k = 0; k < t->peers[j].nl; k++) port_sock_set_nonblock(t->peers[j].lane[k].fd, 1);
    *out = &t->b;
    return 0;
}
