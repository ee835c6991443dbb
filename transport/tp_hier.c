/* Hierarchical allreduce (NCCL's and Horovod's two-level scheme) for several ranks on
 * each of several hosts:
 *   1. inside each host, the ring's reduce-scatter half: local rank i ends with block
 *      i of the host's sum (blocks as tp_ring_block cuts them);
 *   2. across hosts, ranks of equal local index allreduce their block with a ring of
 *      their own (one ring per local index, all at once: they share the links);
 *   3. inside each host, the ring's allgather half spreads the blocks.
 * Over a link of R bytes/s, 2 hosts x L ranks move S bytes per direction instead of
 * the flat ring's 2 (W-1)/W S (1.5 S at 2x2).
 *
 * "Host" means same machine and network namespace (port_host_id), learned with one
 * allgather at the first allreduce that may use it; a world whose hosts do not all
 * hold the same number (> 1) of ranks, or that sits on one host, keeps the flat ring.
 * Every element is still reduced once, by one rank, in one order, then copied: the
 * results are bitwise identical on every rank. AVG: SUM throughout, then one division
 * by the world size on the block owner. */
#include "transport/tp_comm_int.h"
#include "transport/tp_reduce.h"
#include "ports/posix/port.h"
#include "ports/posix/port_sock.h"
#include "rt/log.h"
#include <stdlib.h>
#include <string.h>

int tp_hier_init(tp_comm *c, const tp_comm_opts *o)
{
    size_t w = (size_t)c->world;
    c->host_ids = calloc(w, sizeof *c->host_ids);
    c->local = calloc(w, sizeof *c->local);
    c->cross = calloc(w, sizeof *c->cross);
    if (!c->host_ids || !c->local || !c->cross) return -1;
    if (o && o->host_ids) {
        memcpy(c->host_ids, o->host_ids, w * sizeof *c->host_ids);
        c->topo = -1; /* known ids, groups not yet derived */
    }
    return 0;
}

void tp_hier_free(tp_comm *c)
{
    free(c->host_ids);
    free(c->local);
    free(c->cross);
}

/* Groups from host_ids (equal on every rank, so every rank derives the same). */
static void derive(tp_comm *c)
{
    int w = c->world, me = c->rank, nh = 0, lidx = 0, nl = 0, regular = 1;
    uint64_t mine = c->host_ids[me];
    for (int r = 0; r < w; r++)
        if (c->host_ids[r] == mine) {
            if (r == me) lidx = nl;
            c->local[nl++] = r;
        }
    /* Hosts in order of their lowest rank; on each, the rank with local index lidx. */
    for (int r = 0; r < w; r++) {
        int first = 1, cnt = 0, pick = -1;
        for (int q = 0; q < w; q++)
            if (c->host_ids[q] == c->host_ids[r]) {
                if (q < r) first = 0;
                if (cnt == lidx) pick = q;
                cnt++;
            }
        if (!first) continue;
        if (cnt != nl) regular = 0;
        if (r == c->local[0]) c->hidx = nh;
        c->cross[nh++] = pick;
    }
    c->nlocal = nl;
    c->lidx = lidx;
    c->nhosts = nh;
    c->topo = regular && nh > 1 && nl > 1 ? 2 : 1;
    if (c->rank == 0)
        rt_debug("comm: %d host%s, %d rank%s on rank 0's host%s: %s allreduce for large vectors", nh,
                 nh > 1 ? "s" : "", nl, nl > 1 ? "s" : "", regular ? "" : " (not the same on every host)",
                 c->topo == 2 ? "hierarchical" : "flat ring");
}

void tp_hier_set_hosts(tp_comm *c, const uint64_t *ids)
{
    if (c->topo > 0 || c->world < 2) return; /* known already: from the same ids */
    if (c->topo == 0) memcpy(c->host_ids, ids, (size_t)c->world * sizeof *c->host_ids);
    derive(c);
}

static int learn(tp_comm *c)
{
    if (c->topo == -1) { derive(c); return 0; }
    /* Fewer than 4 ranks cannot be 2 hosts x 2: no need to ask. */
    if (c->world < 4) { c->topo = 1; return 0; }
    uint64_t id = port_host_id();
    int rc = tp_ring_allgather(c, &id, c->host_ids, 1, RT_I64);
    if (rc) return rc;
    derive(c);
    return 0;
}

/* Segments are pipelined: while segment k crosses the network, segment k+1 is
 * reduce-scattered and segment k-1 allgathered inside the host (two ring passes at
 * once, on lanes 0 and 1), so the host's own work hides behind the link. */
#define TP_HIER_SEG_BYTES (4u << 20)
#define TP_HIER_MAX_SEGS 64

size_t tp_hier_nsegs(size_t count, size_t es)
{
    size_t K = count * es / TP_HIER_SEG_BYTES;
    return K < 1 ? 1 : K > TP_HIER_MAX_SEGS ? TP_HIER_MAX_SEGS : K;
}

int tp_hier_cross(tp_comm *c, const tp_handle *h)
{
    if (c->topo != 2) return TP_EINVAL;
    tp_group across = {c->nhosts, c->hidx, c->cross};
    int rc = tp_ring_allreduce_g(c, &across, h->send, h->recv, h->count, (rt_dtype)h->dt,
                                 h->op == TP_AVG ? TP_SUM : (tp_op)h->op);
    if (!rc && h->op == TP_AVG && h->count) tp_avg_finish(h->recv, h->count, (rt_dtype)h->dt, c->world);
    return rc;
}

/* The fixed order of the in-host passes (the same on every rank of a host):
 * RS 0, RS 1, AG 0, RS 2, AG 1, ..., RS K-1, AG K-2, AG K-1. */
static void intra_stage(int i, int K, int *ag, int *seg)
{
    if (i == 0) { *ag = 0, *seg = 0; return; }
    if (i == 2 * K - 1) { *ag = 1, *seg = K - 1; return; }
    int j = i - 1;
    *ag = j & 1;
    *seg = *ag ? (j - 1) / 2 : j / 2 + 1;
}

int tp_hier_allreduce(tp_comm *c, const void *send, void *recv, size_t count, rt_dtype dt, tp_op op)
{
    int rc;
    if (c->topo <= 0 && (rc = learn(c))) return rc;
    if (c->topo != 2 || count == 0) return tp_ring_allreduce(c, send, recv, count, dt, op);
    tp_op sop = op == TP_AVG ? TP_SUM : op;
    tp_group in = {c->nlocal, c->lidx, c->local}, across = {c->nhosts, c->hidx, c->cross};
    size_t es = rt_dtype_size(dt), K = tp_hier_nsegs(count, es);
    const unsigned char *sb = send;
    unsigned char *rb = recv;
    tp_ring_pass pi, pc;
    int nst = 2 * (int)K, ii = 0, ci = 0, ion = 0, con = 0, rs_done = 0, x_done = 0, ag = 0, k;
    for (;;) {
        if (!ion && ii < nst) {
            intra_stage(ii, (int)K, &ag, &k);
            if (!ag || x_done > k) {
                size_t o = count * (size_t)k / K, n = count * (size_t)(k + 1) / K - o;
                if ((rc = tp_ring_half_begin(&pi, c, &in, 0, ag, ag ? rb + o * es : sb + o * es, rb + o * es, n,
                                             dt, sop)))
                    return rc;
                ion = 1;
            }
        }
        if (!con && ci < nst && rs_done > ci / 2) {
            size_t o = count * (size_t)(ci / 2) / K, n = count * (size_t)(ci / 2 + 1) / K - o, bo, bn;
            tp_ring_block(n, c->nlocal, c->lidx, &bo, &bn);
            unsigned char *mine = rb + (o + bo) * es;
            if ((rc = tp_ring_half_begin(&pc, c, &across, 1, ci & 1, mine, mine, bn, dt, sop))) return rc;
            con = 1;
        }
        if (!ion && !con) return ii == nst && ci == nst ? 0 : TP_EINVAL;
        int moved = 0, r;
        if (ion) { /* blocks only when it is the one pass running */
            if ((r = tp_ring_advance(&pi, !con)) < 0) return r;
            moved |= r;
            if (r == 2) {
                intra_stage(ii++, (int)K, &ag, &k);
                rs_done += !ag;
                ion = 0;
            }
        }
        if (con) {
            if ((r = tp_ring_advance(&pc, !ion)) < 0) return r;
            moved |= r;
            if (r == 2) {
                if (ci & 1) {
                    size_t o = count * (size_t)(ci / 2) / K, n = count * (size_t)(ci / 2 + 1) / K - o, bo, bn;
                    tp_ring_block(n, c->nlocal, c->lidx, &bo, &bn);
                    if (op == TP_AVG && bn) tp_avg_finish(rb + (o + bo) * es, bn, dt, c->world);
                    x_done++;
                }
                ci++;
                con = 0;
            }
        }
        if (moved) continue;
        /* Both wait on the wire. Past the deadline, a blocking wait names the peer. */
        if (port_now_ns() >= c->deadline) return (r = tp_ring_advance(ion ? &pi : &pc, 1)) < 0 ? r : TP_ETIMEOUT;
        port_sleep_ns(20000);
    }
}
