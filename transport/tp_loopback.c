/* Loopback backend: world ranks as threads of one process (the CPU-only test bed,
 * as gloo's in-process tests). Per ordered pair (src, dst) there is a queue of
 * unmatched sends and a queue of unmatched recvs; a post matches the head of the
 * opposite queue and copies at once, so nothing is buffered or allocated.
 * One mutex guards the whole world (ranks here are few and copies are the only
 * long work); each rank sleeps on its own condition variable.
 * A failed rank "closes its connections": its queued requests are withdrawn and its
 * peers' pending requests with it fail with "rank N closed the connection". */
#include "ports/posix/port.h"
#include "transport/tp_backend.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { tp_req *head, *tail; } lb_queue;
typedef struct lb_world lb_world;

typedef struct {
    tp_backend b;
    lb_world *w;
    int closed;
    int cascade;      /* closed because a peer closed (not the root cause) */
    port_cond cv;
} lb_rank;

struct lb_world {
    int world, refs;
    port_mutex mu;
    lb_queue *sends;  /* [src * world + dst]: sends from src not yet matched */
    lb_queue *recvs;  /* [dst * world + src]: recvs at dst not yet matched */
    lb_rank *rank;
};

static void q_push(lb_queue *q, tp_req *r)
{
    r->next = NULL;
    if (q->tail) q->tail->next = r; else q->head = r;
    q->tail = r;
}

static tp_req *q_pop(lb_queue *q)
{
    tp_req *r = q->head;
    if (r && !(q->head = r->next)) q->tail = NULL;
    return r;
}

/* Completes a matched pair (under mu): copy, mark, wake both owners. */
static void deliver(lb_world *w, tp_req *s, int src, tp_req *r, int dst)
{
    if (s->len != r->len) {
        /* A protocol bug (the peers disagree on a size): fail both sides loudly. */
        s->state = r->state = TP_EIO;
    } else {
        if (s->len) memcpy(r->buf, s->buf, s->len);
        s->done = r->done = s->len;
        s->state = r->state = 1;
    }
    port_cond_broadcast(&w->rank[src].cv);
    port_cond_broadcast(&w->rank[dst].cv);
}

static void fail_locked(lb_rank *me, int code, const char *msg)
{
    lb_world *w = me->w;
    if (!me->b.failed) {
        me->b.failed = code;
        snprintf(me->b.err, sizeof me->b.err, "%s", msg);
    }
    if (me->closed) return;
    me->closed = 1;
    /* Withdraw everything this rank had queued, so no peer copies into or out of
     * buffers its owner is about to reuse; then wake everyone to notice. */
    int r = me->b.rank;
    for (int p = 0; p < w->world; p++) {
        w->sends[r * w->world + p] = (lb_queue){0};
        w->recvs[r * w->world + p] = (lb_queue){0};
    }
    for (int p = 0; p < w->world; p++) port_cond_broadcast(&w->rank[p].cv);
}

static int post(tp_backend *b, int kind, int peer, void *buf, size_t len, tp_req *req)
{
    lb_rank *me = (lb_rank *)b;
    lb_world *w = me->w;
    int r = b->rank, n = w->world;
    if (peer < 0 || peer >= n || peer == r) return TP_EINVAL;
    *req = (tp_req){.kind = kind, .peer = peer, .buf = buf, .len = len};
    port_mutex_lock(&w->mu);
    int rc = b->failed;
    if (rc) {
        req->state = rc;
    } else if (w->rank[peer].closed) {
        req->state = TP_ECLOSED; /* reported by waitall, naming the peer */
    } else if (kind == TP_REQ_SEND) {
        tp_req *m = q_pop(&w->recvs[peer * n + r]);
        if (m) deliver(w, req, r, m, peer); else q_push(&w->sends[r * n + peer], req);
    } else {
        tp_req *m = q_pop(&w->sends[peer * n + r]);
        if (m) deliver(w, m, peer, req, r); else q_push(&w->recvs[r * n + peer], req);
    }
    port_mutex_unlock(&w->mu);
    return rc;
}

static int lb_isend(tp_backend *b, int peer, const void *buf, size_t len, tp_req *req)
{
    return post(b, TP_REQ_SEND, peer, (void *)buf, len, req);
}

static int lb_irecv(tp_backend *b, int peer, void *buf, size_t len, tp_req *req)
{
    return post(b, TP_REQ_RECV, peer, buf, len, req);
}

static int lb_waitall(tp_backend *b, tp_req **reqs, int n, int64_t deadline_ns)
{
    lb_rank *me = (lb_rank *)b;
    lb_world *w = me->w;
    char msg[160];
    port_mutex_lock(&w->mu);
    for (;;) {
        /* Name the root cause: a size mismatch first, then a peer that closed on its
         * own (abort, timeout) before one that closed because its own peer did. */
        int pending = -1;
        for (int pass = 0; pass < 3 && !b->failed; pass++)
            for (int i = 0; i < n && !b->failed; i++) {
                tp_req *q = reqs[i];
                lb_rank *peer = &w->rank[q->peer];
                if (q->state == 1) continue;
                if (q->state == TP_EIO) {
                    snprintf(msg, sizeof msg, "message size mismatch with rank %d (%zu bytes here)",
                             q->peer, q->len);
                    fail_locked(me, TP_EIO, msg);
                } else if (pass > 0 && (q->state < 0 || peer->closed) && (pass == 2 || !peer->cascade)) {
                    snprintf(msg, sizeof msg, "rank %d closed the connection", q->peer);
                    fail_locked(me, TP_ECLOSED, msg);
                    me->cascade = 1;
                } else if (pass == 2 && pending < 0) {
                    pending = i;
                }
            }
        if (b->failed || pending < 0) break;
        if (port_now_ns() >= deadline_ns) {
            snprintf(msg, sizeof msg, "timed out waiting for rank %d", reqs[pending]->peer);
            fail_locked(me, TP_ETIMEOUT, msg);
            break;
        }
        port_cond_wait_until(&me->cv, &w->mu, deadline_ns);
    }
    int rc = b->failed;
    port_mutex_unlock(&w->mu);
    return rc;
}

static int lb_test(tp_backend *b, tp_req *req)
{
    lb_rank *me = (lb_rank *)b;
    port_mutex_lock(&me->w->mu);
    int st = b->failed ? b->failed : req->state;
    if (!st && me->w->rank[req->peer].closed) st = TP_ECLOSED;
    port_mutex_unlock(&me->w->mu);
    return st;
}

static void lb_abort(tp_backend *b, const char *why)
{
    lb_rank *me = (lb_rank *)b;
    port_mutex_lock(&me->w->mu);
    fail_locked(me, TP_EIO, why && *why ? why : "aborted");
    port_mutex_unlock(&me->w->mu);
}

static void lb_destroy(tp_backend *b)
{
    lb_rank *me = (lb_rank *)b;
    lb_world *w = me->w;
    port_mutex_lock(&w->mu);
    if (!me->closed) fail_locked(me, TP_ECLOSED, "backend destroyed");
    int last = --w->refs == 0;
    port_mutex_unlock(&w->mu);
    if (!last) return;
    for (int r = 0; r < w->world; r++) pthread_cond_destroy(&w->rank[r].cv);
    pthread_mutex_destroy(&w->mu);
    free(w->sends);
    free(w->recvs);
    free(w->rank);
    free(w);
}

static const tp_backend_ops lb_ops = {
    .name = "loopback", .isend = lb_isend, .irecv = lb_irecv, .waitall = lb_waitall,
    .test = lb_test, .register_mem = NULL, .abort = lb_abort, .destroy = lb_destroy,
};

int tp_loopback_create(int world, tp_backend **out)
{
    if (world < 1) return TP_EINVAL;
    lb_world *w = calloc(1, sizeof *w);
    if (!w) return TP_EIO;
    w->world = w->refs = world;
    w->sends = calloc((size_t)world * world, sizeof *w->sends);
    w->recvs = calloc((size_t)world * world, sizeof *w->recvs);
    w->rank = calloc((size_t)world, sizeof *w->rank);
    if (!w->sends || !w->recvs || !w->rank) {
        free(w->sends); free(w->recvs); free(w->rank); free(w);
        return TP_EIO;
    }
    port_mutex_init(&w->mu);
    for (int r = 0; r < world; r++) {
        lb_rank *k = &w->rank[r];
        k->b.ops = &lb_ops;
        k->b.rank = r;
        k->b.world = world;
        k->w = w;
        port_cond_init(&k->cv);
        out[r] = &k->b;
    }
    return 0;
}
