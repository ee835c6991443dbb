/* The shm transport's point-to-point link (tp_link.h): a byte ring per direction of a
 * same-host pair, for the pairs of a comm that spans hosts as well as for a one-host
 * comm's send/recv and forced algorithms.
 *
 * Each rank makes an inbox (a memfd, mapped by its same-host peers through
 * /proc/PID/fd, as tp_shm_map.c's registered blocks: no name to clean up) holding a
 * futex bell and one ring per same-host peer. A pair's messages are a byte stream, as
 * on a socket: messages match in order with equal lengths (tp_backend.h), so no
 * framing is needed. The sender copies into the ring and advances head, the receiver
 * copies out and advances tail; whoever moves rings the other's bell when it sleeps.
 * Waits spin, then sleep on the own bell 1 ms at a time, looking between sleeps at the
 * peers' sockets (the net backend's peer_fd: a dead peer's close shows as a hang-up and
 * the backend names it), the backend's failed flag and the deadline. */
#include "transport/tp_link_shm.h"
#include "transport/tp_comm_int.h"
#include "rt/log.h"
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define RING_BYTES (1u << 20) /* per direction of a pair: 4 ring chunks of 256 KiB */
#define SPIN_NS 50000         /* longest spin: as the shm segment's and tcp's default */
#define SPIN_MIN_NS 2000
#define SLEEP_NS 1000000      /* futex sleep between looks at sockets and deadline */

typedef struct ring {
    _Alignas(64) uint64_t head; /* bytes written, by the sender */
    _Alignas(64) uint64_t tail; /* bytes read, by the receiver */
    _Alignas(64) unsigned char data[RING_BYTES];
} ring;

typedef struct inbox {
    _Alignas(64) uint32_t bell; /* bumped on every move toward this rank */
    _Alignas(64) uint32_t sleepers;
    ring in[]; /* [nlocal]: slot i receives from my i-th same-host peer */
} inbox;

typedef struct pair {
    ring *in, *out;          /* in: mine from it; out: mine to it (in its inbox) */
    inbox *them;             /* its inbox (its bell), mapped here */
    size_t them_bytes;
    tp_req *sq, *sq_tail, *rq, *rq_tail;
} pair;

struct tp_link_shm {
    int fd;                  /* my inbox's memfd */
    inbox *me;
    size_t bytes;
    pair *p;                 /* [world]; them NULL: not an shm pair */
    int pending;             /* requests queued on every pair */
    int64_t spin;            /* adapts as tcp's: doubles when the peer delivered during
                                it, halves when it ran out (a peer on our core cannot) */
    struct pollfd *pfd;      /* [world]: the net backend's sockets, for hang-ups */
};

static size_t inbox_bytes(int nlocal) { return sizeof(inbox) + (size_t)nlocal * sizeof(ring); }

/* Same-host peers of rank r (its inbox's slots). */
static int nlocal(const tp_peer_info *info, int world, int r)
{
    int k = 0;
    for (int x = 0; x < world; x++) k += x != r && info[x].host == info[r].host;
    return k;
}

/* Slot of peer q in rank r's inbox: q's index among r's same-host peers. */
static int slot(const tp_peer_info *info, int r, int q)
{
    int k = 0;
    for (int x = 0; x < q; x++) k += x != r && info[x].host == info[r].host;
    return k;
}

void tp_link_shm_open(tp_comm *c, int64_t *pid_fd)
{
    tp_link_shm *s = calloc(1, sizeof *s);
    pid_fd[0] = getpid();
    pid_fd[1] = -1;
    if (!s) return;
    s->fd = memfd_create("ddprt-p2p", MFD_CLOEXEC);
    pid_fd[1] = s->fd;
    c->lshm = s;
}

static void *map_inbox(const char *path, size_t bytes)
{
    int fd = open(path, O_RDWR | O_CLOEXEC);
    struct stat st;
    void *p = NULL;
    if (fd >= 0 && fstat(fd, &st) == 0 && (size_t)st.st_size == bytes)
        p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (fd >= 0) close(fd);
    return p == MAP_FAILED ? NULL : p;
}

int tp_link_shm_setup(tp_comm *c, const tp_peer_info *info, const int64_t *pid_fd, const uint8_t *tp)
{
    tp_link_shm *s = c->lshm;
    int w = c->world, me = c->rank, rc;
    unsigned char ok = s && s->fd >= 0, *oks = calloc((size_t)w, 1);
    if (ok) {
        s->bytes = inbox_bytes(nlocal(info, w, me));
        s->p = calloc((size_t)w, sizeof *s->p);
        s->pfd = calloc((size_t)w, sizeof *s->pfd);
        ok = s->p && s->pfd && ftruncate(s->fd, (off_t)s->bytes) == 0;
    }
    if (ok) {
        void *p = mmap(NULL, s->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, 0);
        s->me = p == MAP_FAILED ? NULL : p;
        ok = s->me != NULL;
    }
    /* Every inbox sized before anyone maps it; then every pair mapped, or none used. */
    if (!oks) oks = &ok, ok = 0;
    if ((rc = tp_ring_allgather(c, &ok, oks, 1, RT_U8))) goto out;
    for (int q = 0; q < w; q++) ok &= oks[q];
    for (int q = 0; ok && q < w; q++) {
        if (tp[q] != TP_TRANSPORT_SHM) continue;
        char path[64];
        size_t qb = inbox_bytes(nlocal(info, w, q));
        snprintf(path, sizeof path, "/proc/%lld/fd/%lld", (long long)pid_fd[2 * q], (long long)pid_fd[2 * q + 1]);
        inbox *t = map_inbox(path, qb);
        if (!t) {
            rt_warn("comm: cannot map rank %d's shm inbox (%s): this comm's pairs use %s", q, path, c->b->ops->name);
            ok = 0;
            break;
        }
        int fd = c->b->ops->peer_fd ? c->b->ops->peer_fd(c->b, q) : -1;
        s->pfd[q] = (struct pollfd){.fd = fd, .events = POLLRDHUP};
        s->p[q] = (pair){.in = &s->me->in[slot(info, me, q)], .out = &t->in[slot(info, q, me)], .them = t,
                         .them_bytes = qb};
    }
    if ((rc = tp_ring_allgather(c, &ok, oks, 1, RT_U8))) goto out;
    for (int q = 0; q < w; q++) ok &= oks[q];
out:
    if (oks != &ok) free(oks);
    if (rc || !ok) tp_link_shm_free(c);
    return rc ? rc : ok ? 0 : 1;
}

void tp_link_shm_free(tp_comm *c)
{
    tp_link_shm *s = c->lshm;
    if (!s) return;
    for (int q = 0; s->p && q < c->world; q++)
        if (s->p[q].them) munmap(s->p[q].them, s->p[q].them_bytes);
    free(s->p);
    free(s->pfd);
    if (s->me) munmap(s->me, s->bytes);
    if (s->fd >= 0) close(s->fd);
    free(s);
    c->lshm = NULL;
}

/* ---- the link ------------------------------------------------------------- */

static void ring_bell(inbox *b)
{
    __atomic_add_fetch(&b->bell, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&b->sleepers, __ATOMIC_SEQ_CST))
        syscall(SYS_futex, &b->bell, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* Moves what fits of pair q's queues; the bytes moved. */
static size_t progress_pair(tp_link_shm *s, int q)
{
    pair *p = &s->p[q];
    size_t out = 0, in = 0;
    while (p->sq) {
        tp_req *r = p->sq;
        ring *g = p->out;
        uint64_t h = g->head, room = RING_BYTES - (h - __atomic_load_n(&g->tail, __ATOMIC_ACQUIRE));
        size_t n = r->len - r->done < room ? r->len - r->done : (size_t)room, at = (size_t)(h % RING_BYTES);
        if (!n) break;
        size_t a = n < RING_BYTES - at ? n : RING_BYTES - at;
        memcpy(g->data + at, (const unsigned char *)r->buf + r->done, a);
        memcpy(g->data, (const unsigned char *)r->buf + r->done + a, n - a);
        __atomic_store_n(&g->head, h + n, __ATOMIC_RELEASE);
        r->done += n, out += n;
        if (r->done < r->len) break;
        r->state = 1, s->pending--;
        if (!(p->sq = r->next)) p->sq_tail = NULL;
    }
    while (p->rq) {
        tp_req *r = p->rq;
        ring *g = p->in;
        uint64_t t = g->tail, avail = __atomic_load_n(&g->head, __ATOMIC_ACQUIRE) - t;
        size_t n = r->len - r->done < avail ? r->len - r->done : (size_t)avail, at = (size_t)(t % RING_BYTES);
        if (!n) break;
        size_t a = n < RING_BYTES - at ? n : RING_BYTES - at;
        memcpy((unsigned char *)r->buf + r->done, g->data + at, a);
        memcpy((unsigned char *)r->buf + r->done + a, g->data, n - a);
        __atomic_store_n(&g->tail, t + n, __ATOMIC_RELEASE);
        r->done += n, in += n;
        if (r->done < r->len) break;
        r->state = 1, s->pending--;
        if (!(p->rq = r->next)) p->rq_tail = NULL;
    }
    if (out || in) ring_bell(p->them); /* data for it, or room */
    return out + in;
}

static size_t progress_all(tp_comm *c)
{
    tp_link_shm *s = c->lshm;
    size_t moved = 0;
    for (int q = 0; s->pending && q < c->world; q++)
        if (s->p[q].sq || s->p[q].rq) moved += progress_pair(s, q);
    return moved;
}

static int post(tp_comm *c, int kind, int peer, void *buf, size_t len, tp_req *r)
{
    tp_link_shm *s = c->lshm;
    if (c->b->failed) return c->b->failed;
    if (peer < 0 || peer >= c->world || !s || !s->p[peer].them || (!buf && len)) return TP_EINVAL;
    pair *p = &s->p[peer];
    *r = (tp_req){.kind = kind, .peer = peer, .buf = buf, .len = len};
    tp_req **q = kind == TP_REQ_SEND ? &p->sq : &p->rq, **tail = kind == TP_REQ_SEND ? &p->sq_tail : &p->rq_tail;
    if (*tail) (*tail)->next = r;
    else *q = r;
    *tail = r;
    s->pending++;
    progress_pair(s, peer); /* a send that fits completes at once, as on a socket */
    return 0;
}

static int shm_isend(tp_comm *c, int peer, const void *buf, size_t len, tp_req *req)
{
    return post(c, TP_REQ_SEND, peer, (void *)buf, len, req);
}
static int shm_irecv(tp_comm *c, int peer, void *buf, size_t len, tp_req *req)
{
    return post(c, TP_REQ_RECV, peer, buf, len, req);
}
static int shm_test(tp_comm *c, tp_req *req)
{
    if (c->b->failed) return c->b->failed;
    progress_all(c);
    return req->state;
}
static int shm_progress(tp_comm *c)
{
    if (!c->lshm) return 0;
    if (c->b->failed) return c->b->failed;
    progress_all(c);
    return c->lshm->pending;
}

/* A peer whose socket hung up: the backend's error naming it (tp_backend_read_hangup). */
static int peer_gone(tp_comm *c, int q)
{
    tp_backend *b = c->b;
    int rc = tp_backend_read_hangup(b, q);
    if (!rc) { /* a byte where none was due: it is out of step all the same */
        snprintf(b->err, sizeof b->err, "rank %d closed the connection", q);
        b->ops->abort(b, b->err);
        rc = TP_ECLOSED;
    }
    return rc;
}

static int fail(tp_comm *c, int code, int q)
{
    char why[96];
    snprintf(why, sizeof why, "timed out waiting for rank %d", q);
    c->b->ops->abort(c->b, why); /* the sockets close: the peers learn it */
    snprintf(c->b->err, sizeof c->b->err, "%s", why);
    return code;
}

/* The slow path of a wait: 0 to go on, or why the wait fails. */
static int look(tp_comm *c, tp_req **r, int n, int64_t deadline)
{
    tp_link_shm *s = c->lshm;
    int bf = __atomic_load_n(&c->b->failed, __ATOMIC_RELAXED), q = -1;
    if (bf) return bf;
    for (int i = 0; i < n; i++) {
        if (r[i]->state == 1) continue;
        q = r[i]->peer;
        struct pollfd *f = &s->pfd[q];
        /* A peer that wrote all it owed may have exited meanwhile: take what is in its
         * ring before naming it. */
        if (f->fd >= 0 && poll(f, 1, 0) > 0 && f->revents && (progress_all(c), r[i]->state != 1))
            return peer_gone(c, q);
    }
    return q >= 0 && port_now_ns() >= deadline ? fail(c, TP_ETIMEOUT, q) : 0;
}

static int shm_waitall(tp_comm *c, tp_req **r, int n, int64_t deadline)
{
    tp_link_shm *s = c->lshm;
    int64_t idle = port_now_ns();
    if (!s->spin) s->spin = SPIN_NS;
    for (int i = 0, spun = 0;;) {
        if (c->b->failed) return c->b->failed;
        size_t moved = progress_all(c);
        while (i < n && r[i]->state == 1) i++;
        int64_t now = port_now_ns();
        if (moved) {
            if (spun && s->spin < SPIN_NS) s->spin *= 2;
            spun = 0, idle = now;
        }
        if (i == n) return 0;
        if (now - idle < s->spin) { spun = 1, port_cpu_relax(); continue; }
        if (spun && s->spin > SPIN_MIN_NS) s->spin /= 2;
        spun = 0;
        int rc = look(c, r, n, deadline);
        if (rc) return rc;
        __atomic_add_fetch(&s->me->sleepers, 1, __ATOMIC_SEQ_CST);
        uint32_t bell = __atomic_load_n(&s->me->bell, __ATOMIC_SEQ_CST);
        if (!progress_all(c)) {
            struct timespec ts = {0, SLEEP_NS};
            syscall(SYS_futex, &s->me->bell, FUTEX_WAIT, bell, &ts, NULL, 0);
        }
        __atomic_sub_fetch(&s->me->sleepers, 1, __ATOMIC_SEQ_CST);
    }
}

static int shm_check(tp_comm *c, tp_req *req) { return look(c, &req, 1, INT64_MAX); }

const tp_link tp_link_shm_ops = {"shm", shm_isend, shm_irecv, shm_test, shm_waitall, shm_progress, shm_check};
