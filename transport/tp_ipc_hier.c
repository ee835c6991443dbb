/* The hierarchical device allreduce (several hosts with L > 1 ranks each) and the device
 * broadcast (one host) of the cuda_ipc path; set-up and the one-host allreduce are in
 * tp_ipc.c.
 *
 * Hierarchical, in tp_hier's order so that the bits are the host's (tp_hier_allreduce
 * on the same data, any number of hosts): the vector is cut into tp_hier's segments,
 * each segment into L shards (tp_ring_block), local index i owning shard i.
 *   compute: record `ready`;  P0 allgather of the offsets (comm-wide)
 *   rs stream: wait every local rank's `ready`; per segment, the kernel reduces my shard
 *       over the local buffers in the host ring's order (members i+1, ..., L-1, 0, ..., i:
 *       the chain its reduce-scatter half builds), in place
 *   cross: my shard goes through the pinned staging (D2H, one allreduce host op per
 *       staging chunk among the ranks of my local index on every host: tp_hier's cross
 *       ring, AVG's division by the world after it, H2D), chunks pipelined as the staged
 *       path's: chunk j+S-2 copies down while chunk j is on the wire and j-1 copies up.
 *       A chunk holds column m of each of the shard's H cross-ring blocks, side by side,
 *       so the ring on the chunk cuts it into exactly those columns: every element gets
 *       the whole shard's cross-ring order, whatever the staging chunk size.
 *   h2d stream: record rs[me][0] (my shards are final);  Pb barrier (comm-wide)
 *   ag stream: wait every local rank's rs[.][0]; copy the other shards from their owners
 *   host: wait for `ag` by the deadline;  Pe barrier (nobody reads a peer's buffer now)
 * Sequence numbers: 1 + C + 2, C the cross chunks of local index 0 (the largest shard);
 * a rank with a shorter shard runs a segment's last chunk empty, so every rank counts
 * alike. The host waits for a D2H by polling, with the deadline and the dead-peer
 * check (the reduce before it waits on the local peers' events).
 *
 * Broadcast (one host): record `ready`; P0 offsets; the others copy the root's buffer
 * through the mapping once its `ready` is passed; the host waits; P1 barrier, after which
 * the root may overwrite. */
#include "transport/tp_ipc_int.h"
#include "transport/tp_reduce.h"
#include <stdio.h>
#include <string.h>

/* One cross chunk: column m of my shard of segment k. */
typedef struct xcol {
    size_t k, seg_off;      /* the segment */
    size_t so, sn;          /* my shard, in the segment */
    size_t ce, m;           /* column width and index */
} xcol;

static void seg_of(size_t count, size_t K, size_t k, size_t *o, size_t *n)
{
    *o = count * k / K;
    *n = count * (k + 1) / K - *o;
}

/* Column width: a staging chunk shared by the H blocks (at least one element). */
static size_t col_width(const tp_staging *st, size_t es, int H)
{
    size_t ce = st->chunk / es / (size_t)H;
    return ce ? ce : 1;
}

/* Columns of segment (o, n) for local index 0 (its shard, then its cross block 0, are
 * never smaller than another's). */
static size_t seg_cols(size_t n, int L, int H, size_t ce)
{
    size_t so, sn, bo, bn;
    tp_ring_block(n, L, 0, &so, &sn);
    tp_ring_block(sn, H, 0, &bo, &bn);
    return (bn + ce - 1) / ce;
}

size_t tp_ipc_nparts(const tp_handle *h)
{
    const tp_staging *st = h->stage;
    const tp_ipc *x = st->ipc;
    if (h->kind == TP_K_BROADCAST) return 2;
    if (!x->hier) return 3;
    size_t es = rt_dtype_size((rt_dtype)h->dt), K = tp_hier_nsegs(h->count, es), C = 0;
    size_t ce = col_width(st, es, x->nhosts);
    for (size_t k = 0; k < K; k++) {
        size_t o, n;
        seg_of(h->count, K, k, &o, &n);
        C += seg_cols(n, x->n, x->nhosts, ce);
    }
    return 1 + C + 2;
}

/* Piece b of column m of my shard (the column of its cross block b): [*off, *off + *cnt)
 * of the buffer; in the chunk it follows the pieces before it. */
static void piece(const xcol *q, int H, int b, size_t *off, size_t *cnt)
{
    size_t bo, bn, lo = q->m * q->ce;
    tp_ring_block(q->sn, H, b, &bo, &bn);
    *off = q->seg_off + q->so + bo + lo;
    *cnt = lo < bn ? (bn - lo < q->ce ? bn - lo : q->ce) : 0;
}

typedef struct hop {
    tp_comm *c;
    tp_handle *h;
    tp_staging *st;
    tp_ipc *x;
    tp_dev_cuda *dc;
    unsigned char *buf; /* my buffer */
    size_t es, K, ce, C;
    int H, op;
    size_t rs_segs;     /* segments reduced so far (their kernels issued) */
} hop;

/* Chunk j's column (O(segments): no table, no allocation per op). */
static xcol col_at(const hop *o, size_t j)
{
    xcol q = {.ce = o->ce};
    for (size_t k = 0; k < o->K; k++) {
        size_t go, gn, nc;
        seg_of(o->h->count, o->K, k, &go, &gn);
        if (j < (nc = seg_cols(gn, o->x->n, o->H, o->ce)) || k + 1 == o->K) {
            q.k = k, q.seg_off = go, q.m = j;
            tp_ring_block(gn, o->x->n, o->x->me, &q.so, &q.sn);
            return q;
        }
        j -= nc;
    }
    return q;
}

static unsigned char *slot_of(const hop *o, size_t j)
{
    return o->st->host + (j % (size_t)o->st->nslots) * o->st->chunk;
}

/* Segment k's reduce over the local buffers, ring order, on the rs stream; the D2H
 * stream then waits for it. */
static int reduce_seg(hop *o, size_t k)
{
    tp_ipc *x = o->x;
    size_t so, sn, go, gn;
    seg_of(o->h->count, o->K, k, &go, &gn);
    tp_ring_block(gn, x->n, x->me, &so, &sn);
    const void *src[TP_IPC_MAX];
    int64_t off = (unsigned char *)o->h->recv - x->base;
    for (int t = 0; t < x->n; t++) {
        int q = (x->me + 1 + t) % x->n;
        src[t] = x->peer[q] + x->offs[x->rank[q]] + (go + so) * o->es;
    }
#if DDPRT_CUDA
    if (sn && k_cuda_ipc_reduce(tp_ipc_dt(o->h->dt), src, x->n, x->base + off + (go + so) * o->es, sn, o->op, 1,
                                x->rs_s))
        return -1;
#else
    (void)src, (void)off, (void)sn;
#endif
    /* Recorded, then waited on at once: the wait takes this record (CUDA's rule). */
    return port_event_record(x->rsl, x->rs_s) || port_stream_wait_event(o->dc->d2h_s, x->rsl) ? -1 : 0;
}

static int fail(hop *o, size_t j, const char *what)
{
    return tp_ipc_dev_fail(o->c, o->h, o->st, (int)(1 + j), what);
}

/* Column j down into its slot (after the slot's last H2D and its segment's reduce). */
static int fetch(hop *o, size_t j)
{
    tp_staging *st = o->st;
    int s = (int)(j % (size_t)st->nslots);
    xcol q = col_at(o, j);
    if (st->h2d_pending[s]) {
        if (st->ops->wait_h2d(st->ctx, s)) return fail(o, j, "H2D wait");
        st->h2d_pending[s] = 0;
    }
    while (o->rs_segs <= q.k)
        if (reduce_seg(o, o->rs_segs++)) return fail(o, j, "reduce");
    size_t at = 0;
    for (int b = 0; b < o->H; b++) {
        size_t po, pn;
        piece(&q, o->H, b, &po, &pn);
        if (pn && st->ops->d2h(st->ctx, s, slot_of(o, j) + at * o->es, o->buf + po * o->es, pn * o->es))
            return fail(o, j, "D2H copy");
        at += pn;
    }
    st->d2h_pending[s] = at > 0;
    return 0;
}

/* Column j's cross allreduce (a host op, empty where my shard has no column j), then
 * the copy back. */
static int land(hop *o, size_t j)
{
    tp_staging *st = o->st;
    int s = (int)(j % (size_t)st->nslots), rc;
    xcol q = col_at(o, j);
    if (st->d2h_pending[s]) {
        /* The copy follows the reduce, which waits on the peers' events: polled by the
         * deadline, a dead peer named, before the staging's blocking wait. */
        if ((rc = tp_ipc_wait_event(o->c, o->h, st, o->dc->d2h_ev[s], (int)(1 + j)))) return rc;
        if (st->ops->wait_d2h(st->ctx, s)) return fail(o, j, "D2H wait");
        st->d2h_pending[s] = 0;
    }
    size_t n = 0, at = 0, po, pn;
    for (int b = 0; b < o->H; b++) piece(&q, o->H, b, &po, &pn), n += pn;
    tp_handle ch = *o->h;
    ch.stage = NULL, ch.next = NULL, ch.send = ch.recv = slot_of(o, j), ch.count = n, ch.root = TP_ROOT_CROSS;
    ch.seq = o->h->seq + 1 + j;
    if ((rc = tp_run_op(o->c, &ch))) {
        if (!st->err[0]) snprintf(st->err, sizeof st->err, "%s", tp_errmsg(o->c));
        return rc;
    }
    for (int b = 0; b < o->H; b++) {
        piece(&q, o->H, b, &po, &pn);
        if (pn && st->ops->h2d(st->ctx, s, o->buf + po * o->es, slot_of(o, j) + at * o->es, pn * o->es))
            return fail(o, j, "H2D copy");
        at += pn;
    }
    st->h2d_pending[s] = n > 0;
    return 0;
}

/* The cross chunks, pipelined through the slots as tp_staged_run's. */
static int cross(hop *o)
{
    tp_staging *st = o->st;
    size_t L = (size_t)st->nslots - 2, fetched = 0;
    int rc = 0;
    for (size_t j = 0; j < o->C && !rc; j++) {
        while (!rc && fetched < o->C && fetched <= j + L) rc = fetch(o, fetched++);
        if (!rc) rc = land(o, j);
    }
    while (!rc && o->rs_segs < o->K) /* segments without a column here: none, but be whole */
        if (reduce_seg(o, o->rs_segs++)) rc = fail(o, o->C - 1, "reduce");
    if (rc)
        for (int s = 0; s < st->nslots; s++) { /* the copy queues are done with the slots before reuse */
            if (st->d2h_pending[s]) (void)st->ops->wait_d2h(st->ctx, s);
            if (st->h2d_pending[s]) (void)st->ops->wait_h2d(st->ctx, s);
            st->d2h_pending[s] = st->h2d_pending[s] = 0;
        }
    return rc;
}

int tp_ipc_hier_run(tp_comm *c, tp_handle *h)
{
    tp_staging *st = h->stage;
    tp_ipc *x = c->ipc;
    size_t es = rt_dtype_size((rt_dtype)h->dt);
    int64_t off;
    int rc, me = x->me, last = (int)tp_ipc_nparts(h) - 1;
    if ((rc = tp_ipc_begin(c, h, h->count, es, &off))) return rc;
    hop o = {.c = c, .h = h, .st = st, .x = x, .dc = st->ctx, .buf = x->base + off, .es = es,
             .K = tp_hier_nsegs(h->count, es), .ce = col_width(st, es, x->nhosts), .C = (size_t)last - 2,
             .H = x->nhosts, .op = h->op == TP_AVG ? TP_SUM : h->op};
    for (int q = 0; q < x->n; q++)
        if (port_stream_wait_event(x->rs_s, x->ready[q]))
            return tp_ipc_dev_fail(c, h, st, 0, "waiting for a peer's input");
    if ((rc = cross(&o))) return rc;
    /* My shards are final once the last H2D and the last reduce (whose reads of the peers'
     * buffers the peers' allgather must not overtake) are done. */
    if (port_stream_wait_event(o.dc->h2d_s, x->rsl) || port_event_record(x->rs[me][0], o.dc->h2d_s))
        return tp_ipc_dev_fail(c, h, st, last - 1, "shard event");
    if ((rc = tp_ipc_host_op(c, h, last - 1, TP_K_BARRIER, NULL, NULL))) return rc;
    for (int q = 0; q < x->n; q++)
        if (port_stream_wait_event(x->ag_s, x->rs[q][0]))
            return tp_ipc_dev_fail(c, h, st, last, "waiting for a peer's shard");
    for (size_t k = 0; k < o.K; k++) {
        size_t go, gn, so, sn;
        seg_of(h->count, o.K, k, &go, &gn);
        for (int q = 0; q < x->n; q++) {
            tp_ring_block(gn, x->n, q, &so, &sn);
            if (q != me && sn &&
                port_memcpy_d2d(o.buf + (go + so) * es, x->peer[q] + x->offs[x->rank[q]] + (go + so) * es, sn * es,
                                x->ag_s, "cuda_ipc allgather copy"))
                return tp_ipc_dev_fail(c, h, st, last, "allgather");
        }
    }
    if (port_event_record(x->ag, x->ag_s)) return tp_ipc_dev_fail(c, h, st, last, "allgather event");
    if ((rc = tp_ipc_wait_device(c, h, st, last)) || (rc = tp_ipc_host_op(c, h, last, TP_K_BARRIER, NULL, NULL)))
        return rc;
    st->ipc_ops++;
    return 0;
}

int tp_ipc_bcast_run(tp_comm *c, tp_handle *h)
{
    tp_staging *st = h->stage;
    tp_ipc *x = c->ipc;
    size_t bytes = h->count * rt_dtype_size((rt_dtype)h->dt);
    int64_t off;
    int rc, root = -1;
    for (int q = 0; q < x->n; q++)
        if (x->rank[q] == h->root) root = q;
    if (root < 0) return tp_ipc_dev_fail(c, h, st, 0, "the root is not a local rank"); /* not on a one-host comm */
    if ((rc = tp_ipc_begin(c, h, h->count, rt_dtype_size((rt_dtype)h->dt), &off))) return rc;
    if (root != x->me &&
        (port_stream_wait_event(x->ag_s, x->ready[root]) ||
         port_memcpy_d2d(x->base + off, x->peer[root] + x->offs[h->root], bytes, x->ag_s, "cuda_ipc broadcast copy")))
        return tp_ipc_dev_fail(c, h, st, 1, "broadcast");
    if (port_event_record(x->ag, x->ag_s)) return tp_ipc_dev_fail(c, h, st, 1, "broadcast event");
    if ((rc = tp_ipc_wait_device(c, h, st, 1)) || (rc = tp_ipc_host_op(c, h, 1, TP_K_BARRIER, NULL, NULL))) return rc;
    st->ipc_ops++;
    return 0;
}
