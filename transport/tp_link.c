/* Per-pair point-to-point ops (tp_link.h): the net backend's link, the pair's lookup
 * and the wait over requests of several links. */
#include "transport/tp_link.h"
#include "transport/tp_comm_int.h"
#include "transport/tp_transport.h"
#include "ports/posix/port.h"
#include <time.h>

static int net_isend(tp_comm *c, int peer, const void *buf, size_t len, tp_req *req)
{
    return c->b->ops->isend(c->b, peer, buf, len, req);
}
static int net_irecv(tp_comm *c, int peer, void *buf, size_t len, tp_req *req)
{
    return c->b->ops->irecv(c->b, peer, buf, len, req);
}
static int net_test(tp_comm *c, tp_req *req) { return c->b->ops->test(c->b, req); }
static int net_waitall(tp_comm *c, tp_req **r, int n, int64_t deadline_ns)
{
    return c->b->ops->waitall(c->b, r, n, deadline_ns);
}
const tp_link tp_link_net = {"net", net_isend, net_irecv, net_test, net_waitall, NULL, NULL};

const tp_link *tp_link_of(const tp_comm *c, int peer) { return c->link ? c->link[peer] : &tp_link_net; }

/* Progresses the links that have a progress op (other than skip); how many requests
 * they hold pending, or < 0. */
static int others(tp_comm *c, const tp_link *skip)
{
    int pending = 0;
    for (int t = 0; t < TP_NTRANSPORTS; t++) {
        const tp_link *o = tp_transports[t].link;
        int rc = o && o != skip && o->progress ? o->progress(c) : 0;
        if (rc < 0) return rc;
        pending += rc;
    }
    return pending;
}

/* Spin this long between tests before sleeping: as the backends' default spins. */
#define MIXED_SPIN_NS 50000
#define MIXED_NAP_NS 20000

int tp_link_waitall(tp_comm *c, tp_req **r, int n, int64_t deadline_ns)
{
    const tp_link *l = n ? tp_link_of(c, r[0]->peer) : &tp_link_net;
    int mixed = 0;
    for (int i = 1; i < n; i++) mixed |= tp_link_of(c, r[i]->peer) != l;
    if (!mixed && (mixed = others(c, l)) <= 0) return mixed < 0 ? mixed : n ? l->waitall(c, r, n, deadline_ns) : 0;
    /* A ring whose left and right neighbours sit behind different transports (a host
     * boundary), or a link whose posted requests move only when called: neither
     * link's wait can see the other's progress. */
    int64_t idle = port_now_ns();
    for (int left = n;;) {
        int pending = -1, rc, was = left;
        left = 0;
        if ((rc = others(c, NULL)) < 0) return rc;
        for (int i = 0; i < n; i++) {
            if ((rc = tp_link_test(c, r[i])) < 0) return rc;
            if (!rc && pending < 0) pending = i;
            left += !rc;
        }
        if (pending < 0) return 0;
        int64_t now = port_now_ns();
        if (left < was) idle = now;
        if (now >= deadline_ns) /* the link of a pending request names its peer */
            return tp_link_of(c, r[pending]->peer)->waitall(c, &r[pending], 1, deadline_ns);
        if (now - idle < MIXED_SPIN_NS) { port_cpu_relax(); continue; }
        for (int i = 0; i < n; i++) { /* a dead peer is named now, not at the deadline */
            const tp_link *o = tp_link_of(c, r[i]->peer);
            if (o->check && (rc = o->check(c, r[i]))) return rc;
        }
        struct timespec ts = {0, MIXED_NAP_NS};
        nanosleep(&ts, NULL);
    }
}

int tp_backend_read_hangup(tp_backend *b, int q)
{
    unsigned char x;
    tp_req r, *rp = &r;
    int rc = b->ops->irecv(b, q, &x, 1, &r);
    return rc ? rc : b->ops->waitall(b, &rp, 1, port_now_ns() + 2000000000LL);
}
