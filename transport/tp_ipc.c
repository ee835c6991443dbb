/* The cuda_ipc device path (tp_staged.h: tp_staging_ipc): set-up, and the allreduce
 * between the ranks of one host (the hierarchical one across hosts and the broadcast:
 * tp_ipc_hier.c). Set up once: every rank exports its device region (one allocation)
 * and interprocess events; every rank opens those of its host's ranks (cached with the
 * comm, closed at tp_comm_destroy). An allreduce of a buffer in the region then takes
 * three host ops of the comm (its sequence numbers, deadline, trace and dead-peer naming):
 *
 *   compute: record `ready`                      (the producer's work is issued before)
 *   B1  allgather of the buffers' offsets        (every rank's `ready` record is issued)
 *   rs stream: wait every rank's `ready`; per chunk k the kernel reduces this rank's
 *       shard of chunk k over every rank's buffer, rank order 0..L-1, in place; record rs[k]
 *   B2  barrier                                  (every rank's rs records are issued)
 *   ag stream: per chunk k wait every rank's rs[k], copy the other shards of chunk k
 *       from their owners (AG of chunk k overlaps RS of chunk k+1); record `ag`
 *   host: wait for `ag` by the deadline, naming a dead peer (its socket hung up)
 *   B3  barrier                                  (nobody reads a peer's buffer any more)
 *
 * A record is issued before the barrier after which peers wait on it, and re-recorded
 * only after the next op's first barrier, so every cudaStreamWaitEvent sees the record
 * it means (CUDA waits for the latest record issued). The shard sums are the host
 * shared-memory path's (tp_shm_chain: rank order, then the average's division): the
 * same bits (fp16 / bf16 too: in f32, rounded after every step, as tp_reduce). */
#include "transport/tp_ipc_int.h"
#include "transport/tp_shm.h"
#include "transport/tp_transport.h"
#include "ports/posix/port_sock.h"
#include "rt/env.h"
#include "rt/log.h"
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if DDPRT_CUDA
#define IPC_BUILT 1
#else
#define IPC_BUILT 0 /* no kernels: the device plan never takes cuda_ipc */
#endif

/* What a rank exports. */
typedef struct ipc_hs {
    int64_t ok;
    uint64_t bytes;
    char mem[PORT_IPC_HANDLE_BYTES], ready[PORT_IPC_HANDLE_BYTES], rs[TP_IPC_NCH][PORT_IPC_HANDLE_BYTES];
    char err[192];
} ipc_hs;

void tp_ipc_free(tp_comm *c)
{
    tp_ipc *x = c->ipc;
    if (!x) return;
    for (int q = 0; q < x->n; q++) {
        port_event_destroy(x->ready[q]);
        for (int k = 0; k < TP_IPC_NCH; k++) port_event_destroy(x->rs[q][k]);
        if (q != x->me && x->peer[q]) (void)port_ipc_close(x->peer[q], "closing a peer's device region");
    }
    port_event_destroy(x->ag);
    port_event_destroy(x->rsl);
    port_stream_destroy(x->rs_s);
    port_stream_destroy(x->ag_s);
    free(x->offs);
    free(x);
    c->ipc = NULL;
}

/* Creates this rank's events and streams and fills its export; 0 or -1 (port's line). */
static int ipc_export(tp_ipc *x, void *region, ipc_hs *h)
{
    if (port_stream_create(&x->rs_s, "cuda_ipc reduce stream") || port_stream_create(&x->ag_s, "cuda_ipc copy stream") ||
        port_event_create(&x->ag, 0, "cuda_ipc event") || port_event_create(&x->rsl, 0, "cuda_ipc event") ||
        port_event_create_ipc(&x->ready[x->me], "cuda_ipc event") ||
        port_ipc_event_get(h->ready, x->ready[x->me], "cuda_ipc event handle") ||
        port_ipc_get(h->mem, region, "cuda_ipc device region"))
        return -1;
    for (int k = 0; k < TP_IPC_NCH; k++)
        if (port_event_create_ipc(&x->rs[x->me][k], "cuda_ipc event") ||
            port_ipc_event_get(h->rs[k], x->rs[x->me][k], "cuda_ipc event handle"))
            return -1;
    return 0;
}

/* Opens the local peers' exports (all: every rank's, by comm rank). */
static int ipc_import(tp_ipc *x, const ipc_hs *all)
{
    for (int i = 0; i < x->n; i++) {
        const ipc_hs *a = &all[x->rank[i]];
        x->bytes[i] = (size_t)a->bytes;
        if (i == x->me) continue;
        if (port_ipc_open((void **)&x->peer[i], a->mem, "a peer's device region") ||
            port_ipc_event_open(&x->ready[i], a->ready, "a peer's cuda_ipc event"))
            return -1;
        for (int k = 0; k < TP_IPC_NCH; k++)
            if (port_ipc_event_open(&x->rs[i][k], a->rs[k], "a peer's cuda_ipc event")) return -1;
    }
    return 0;
}

/* Every rank's ok (an allgather): the first rank that failed, or -1. */
static int first_failed(tp_comm *c, int ok, int *rc)
{
    uint8_t mine = (uint8_t)ok, *all = calloc((size_t)c->world, 1);
    int bad = -1;
    if (!all) { *rc = TP_EIO; return -1; }
    if (!(*rc = tp_allgather(c, &mine, all, 1, RT_U8)))
        for (int q = 0; q < c->world && bad < 0; q++)
            if (!all[q]) bad = q;
    free(all);
    return bad;
}

/* Exchanges the handles and opens the local peers'; 0 with c->ipc set, 1 when some rank
 * could not (logged: the staging stays), or a comm code. hier: the local ranks are
 * c->local (tp_hier's groups), else the whole comm. */
static int ipc_open_all(tp_comm *c, int hier, int device, void *region, size_t bytes, port_stream compute)
{
    int w = c->world, rc;
    tp_ipc *x = calloc(1, sizeof *x);
    ipc_hs *all = calloc((size_t)w, sizeof *all), mine = {0};
    int64_t *offs = calloc((size_t)w, sizeof *offs);
    if (!x || !all || !offs) { free(x), free(all), free(offs); return TP_EIO; }
    *x = (tp_ipc){.n = hier ? c->nlocal : w, .me = hier ? c->lidx : c->rank, .device = device, .hier = hier,
                  .nhosts = hier ? c->nhosts : 1, .offs = offs, .base = region, .compute = compute};
    for (int i = 0; i < x->n; i++) x->rank[i] = hier ? c->local[i] : i;
    x->peer[x->me] = region;
    c->ipc = x;
    mine.bytes = bytes;
    mine.ok = port_cuda_use_device(device) == 0 && ipc_export(x, region, &mine) == 0;
    if (!mine.ok) snprintf(mine.err, sizeof mine.err, "%s", port_cuda_errmsg());
    if ((rc = tp_allgather(c, &mine, all, sizeof mine, RT_U8))) goto out;
    int bad = -1;
    for (int q = 0; q < w && bad < 0; q++)
        if (!all[q].ok) bad = q;
    const char *why = bad >= 0 ? all[bad].err : "";
    if (bad < 0) {
        int ok = ipc_import(x, all) == 0;
        if ((bad = first_failed(c, ok, &rc)) >= 0) why = "cannot open the peers' handles";
        if (rc) goto out;
    }
    if (bad >= 0) {
        if (c->rank == 0) rt_info("comm: device collectives take the pinned staging (rank %d: %s)", bad, why);
        port_cuda_clear_error(); /* the staging still works: this was a capability probe */
        rc = 1;
    }
out:
    if (rc) tp_ipc_free(c);
    free(all);
    return rc;
}

int tp_staging_ipc(tp_comm *c, tp_staging *st, int device, void *region, size_t bytes, port_stream compute)
{
    st->ipc = NULL;
    if (c->world < 2 || !region) return 0;
    tp_ipc_free(c); /* one region per comm: a new registration replaces the old (on every rank alike) */
    int w = c->world, me = c->rank, rc;
    struct { int64_t host, p2p; char bus[32]; } mine = {0}, *info_all = calloc((size_t)w, sizeof mine);
    uint8_t *reach = calloc((size_t)w * (size_t)w, 1), *row = calloc((size_t)w, 1);
    tp_peer_info *info = calloc((size_t)w, sizeof *info);
    uint64_t *ids = calloc((size_t)w, sizeof *ids);
    if (!info_all || !reach || !row || !info || !ids) { rc = TP_EIO; goto out; }
    /* The fake topology's ids (or those tp_hier derived groups from), as the host paths. */
    mine.host = (int64_t)(c->topo == -1 || c->topo == 2 ? c->host_ids[me] : port_host_id());
    mine.p2p = rt_env_flag(RT_ENV_P2P, 1);
    if (!IPC_BUILT || port_cuda_bus_id(device, mine.bus, sizeof mine.bus)) mine.bus[0] = 0, port_cuda_clear_error();
    if ((rc = tp_allgather(c, &mine, info_all, sizeof mine, RT_U8))) goto out;
    for (int q = 0; q < w; q++) {
        int how = 0;
        if (q == me) how = mine.bus[0] ? 2 : 0;
        else if (mine.bus[0] && info_all[q].host == mine.host && port_cuda_reach(device, info_all[q].bus, &how))
            how = 0, port_cuda_clear_error();
        row[q] = (uint8_t)how;
        info[q] = (tp_peer_info){.host = (uint64_t)info_all[q].host, .shm_ok = 1, .p2p_ok = (int)info_all[q].p2p};
        ids[q] = (uint64_t)info_all[q].host;
    }
    if ((rc = tp_allgather(c, row, reach, (size_t)w, RT_U8))) goto out;
    tp_hier_set_hosts(c, ids); /* the host ring's groups, which the hierarchical device path shares */
    tp_peers p = {.world = w, .info = info, .net = c->b->ops->name, .reach = reach};
    tp_peers_init(&p);
    char why[160];
    int plan = tp_transport_device_plan(&p, me, why, sizeof why);
    int n = plan == 2 ? c->nlocal : w;
    if (plan == 2 && (c->topo != 2 || st->ops != &tp_dev_cuda_ops)) {
        if (me == 0) rt_info("comm: device collectives take the pinned staging (hierarchical cuda_ipc: %s)",
                             c->topo != 2 ? "the host groups disagree" : "not the CUDA staging");
        plan = 0;
    }
    if (plan && n > TP_IPC_MAX) {
        if (me == 0) rt_info("comm: device collectives take the pinned staging (cuda_ipc: %d ranks %s, at most %d)", n,
                             plan == 2 ? "per host" : "", TP_IPC_MAX);
        plan = 0;
    }
    if (plan && (rc = ipc_open_all(c, plan == 2, device, region, bytes, compute)) == 0) st->ipc = c->ipc;
    if (rc == 1) rc = 0;
out:
    free(info_all), free(reach), free(row), free(info), free(ids);
    return rc;
}

const char *tp_staging_path(const tp_staging *st)
{
    return !st->ipc ? "staged" : st->ipc->hier ? "cuda_ipc+staged" : "cuda_ipc";
}

/* Whether h runs over IPC: an f32 / f16 / bf16 allreduce, or a broadcast on one host, of
 * a buffer in this rank's region (every rank must pass buffers of its region, as DDP's
 * buckets are: the sequence numbers depend on it). */
int tp_ipc_takes(const tp_handle *h)
{
    const tp_staging *st = h->stage;
    const tp_ipc *x = st ? st->ipc : NULL;
    if (!x || !h->count) return 0;
    if (h->kind == TP_K_ALLREDUCE ? tp_ipc_dt(h->dt) < 0 : h->kind != TP_K_BROADCAST || x->hier) return 0;
    const unsigned char *b = h->recv;
    return b >= x->base && (size_t)(b - x->base) <= x->bytes[x->me] &&
           h->count <= (x->bytes[x->me] - (size_t)(b - x->base)) / rt_dtype_size((rt_dtype)h->dt);
}

int tp_ipc_dev_fail(tp_comm *c, const tp_handle *h, tp_staging *st, int k, const char *what)
{
    if (!st->err[0])
        snprintf(st->err, sizeof st->err, "cuda_ipc %s: %s", what, port_cuda_errmsg());
    tp_handle s = *h;
    s.seq = h->seq + (uint64_t)k;
    tp_fail_op(c, &s, TP_EIO, st->err);
    return TP_EIO;
}

int tp_ipc_host_op(tp_comm *c, const tp_handle *h, int k, int kind, const void *send, void *recv)
{
    tp_handle s = *h;
    s.stage = NULL, s.next = NULL;
    s.kind = kind, s.send = send, s.recv = recv, s.count = kind == TP_K_ALLGATHER, s.dt = RT_I64, s.op = TP_SUM;
    s.root = 0;
    s.seq = h->seq + (uint64_t)k;
    return tp_run_op(c, &s);
}

static int hung_up(tp_comm *c, int q)
{
    int fd = q == c->rank ? -1 : c->b->ops->peer_fd(c->b, q);
    struct pollfd f = {.fd = fd, .events = POLLRDHUP};
    return fd >= 0 && poll(&f, 1, 0) > 0 && (f.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* A peer whose socket hung up (it died), or -1. The host's ranks first: the device
 * work waited on is theirs. A rank of another host that hung up may be one that gave up
 * because a local rank died (its close can overtake the dead one's on a loaded host):
 * the local ranks get a short grace to show theirs, so the dead one is named. */
static int dead_peer(tp_comm *c)
{
    const tp_ipc *x = c->ipc;
    if (!c->b->ops->peer_fd) return -1;
    for (int i = 0; i < x->n; i++)
        if (hung_up(c, x->rank[i])) return x->rank[i];
    for (int q = 0; q < c->world; q++) {
        if (!hung_up(c, q)) continue;
        for (int k = 0; x->hier && k < 100; k++) { /* 100 x 1 ms */
            for (int i = 0; i < x->n; i++)
                if (hung_up(c, x->rank[i])) return x->rank[i];
            struct timespec ts = {0, 1000000};
            nanosleep(&ts, NULL);
        }
        return q;
    }
    return -1;
}

/* Fails the op (its last host part's number) with why: published in the shared segment
 * first when there is one, so that the others name the rank that saw it, not this one
 * (whose sockets close next). */
static int wait_fail(tp_comm *c, const tp_handle *h, tp_staging *st, int last, int code, const char *why)
{
    snprintf(st->err, sizeof st->err, "%s", why);
    if (c->shm) tp_shm_fail(c, code, "%s", why);
    tp_handle s = *h;
    s.seq = h->seq + (uint64_t)last;
    tp_fail_op(c, &s, code, why);
    return code;
}

int tp_ipc_wait_device(tp_comm *c, const tp_handle *h, tp_staging *st, int last)
{
    return tp_ipc_wait_event(c, h, st, c->ipc->ag, last);
}

/* A peer's failure, published or seen, fails the op (its rc), else 0. A rank that saw a
 * death publishes who died before it exits, so a hang-up is read only after looking
 * for that again: the first to see the dead rank names it for all. */
static int peer_failed(tp_comm *c, const tp_handle *h, tp_staging *st, int last)
{
    int rc, dead;
    char why[160];
    if (c->shm && (rc = tp_shm_others_failed(c))) return wait_fail(c, h, st, last, rc, c->b->err);
    if ((dead = dead_peer(c)) < 0) return 0;
    if (c->shm && (rc = tp_shm_others_failed(c))) return wait_fail(c, h, st, last, rc, c->b->err);
    snprintf(why, sizeof why, "rank %d closed the connection (this rank waited for its device buffers, cuda_ipc)",
             dead);
    return wait_fail(c, h, st, last, TP_ECLOSED, why);
}

int tp_ipc_wait_event(tp_comm *c, const tp_handle *h, tp_staging *st, port_event e, int last)
{
    int64_t deadline = port_now_ns() + (int64_t)(c->timeout_s * 1e9);
    for (int i = 0;; i++) {
        int q = port_event_query(e), rc;
        if (q == 1) return 0;
        if ((rc = tp_failed(c)) || (rc = peer_failed(c, h, st, last))) return rc;
        if (q < 0) {
            /* A wait on a dead process's event can fail before its rank's socket shows
             * the hang-up (the executor says the process exited): name it if it does. */
            for (int k = 0; k < 200; k++) {
                struct timespec ms = {0, 1000000};
                nanosleep(&ms, NULL);
                if ((rc = peer_failed(c, h, st, last))) return rc;
            }
            return tp_ipc_dev_fail(c, h, st, last, "device wait");
        }
        if (port_now_ns() >= deadline)
            return wait_fail(c, h, st, last, TP_ETIMEOUT,
                             "timed out waiting for the local ranks' device work (cuda_ipc)");
        struct timespec ts = {0, i < 100 ? 20000 : 500000};
        nanosleep(&ts, NULL);
    }
}

int tp_ipc_begin(tp_comm *c, tp_handle *h, size_t count, size_t es, int64_t *off)
{
    tp_staging *st = h->stage;
    tp_ipc *x = c->ipc;
    int rc;
    st->err[0] = 0;
    *off = (unsigned char *)h->recv - x->base;
    if (port_cuda_use_device(x->device)) return tp_ipc_dev_fail(c, h, st, 0, "selecting the device");
    if (port_event_record(x->ready[x->me], x->compute)) return tp_ipc_dev_fail(c, h, st, 0, "ordering after compute");
    if ((rc = tp_ipc_host_op(c, h, 0, TP_K_ALLGATHER, off, x->offs))) return rc;
    for (int i = 0; i < x->n; i++) {
        int64_t o = x->offs[x->rank[i]];
        if (o < 0 || (size_t)o + count * es > x->bytes[i]) {
            snprintf(st->err, sizeof st->err, "cuda_ipc: rank %d's buffer is not inside its registered region",
                     x->rank[i]);
            tp_handle s = *h;
            tp_fail_op(c, &s, TP_EINVAL, st->err);
            return TP_EINVAL;
        }
    }
    return 0;
}

int tp_ipc_run(tp_comm *c, tp_handle *h)
{
    tp_staging *st = h->stage;
    tp_ipc *x = c->ipc;
    int rc = tp_failed(c);
    if (rc) return rc;
    if (h->kind == TP_K_BROADCAST) return tp_ipc_bcast_run(c, h);
    if (x->hier) return tp_ipc_hier_run(c, h);
    int n = x->n, me = x->me;
    size_t es = rt_dtype_size((rt_dtype)h->dt);
    int64_t off, offs[TP_IPC_MAX];
    if ((rc = tp_ipc_begin(c, h, h->count, es, &off))) return rc;
    for (int q = 0; q < n; q++) offs[q] = x->offs[x->rank[q]];
    /* Chunks of the staging's size, at most TP_IPC_NCH of them. */
    size_t per = st->chunk / es, nch = (h->count + per - 1) / per;
    if (nch > TP_IPC_NCH) nch = TP_IPC_NCH, per = (h->count + nch - 1) / nch, nch = (h->count + per - 1) / per;
    int op = h->op == TP_AVG ? TP_SUM : h->op, div = tp_op_div(h, n);
    for (int q = 0; q < n; q++)
        if (port_stream_wait_event(x->rs_s, x->ready[q]))
            return tp_ipc_dev_fail(c, h, st, 0, "waiting for a peer's input");
    for (size_t k = 0; k < nch; k++) {
        size_t c0 = k * per, cn = h->count - c0 < per ? h->count - c0 : per, so, sn;
        tp_ring_block(cn, n, me, &so, &sn);
        const void *src[TP_IPC_MAX];
        for (int q = 0; q < n; q++) src[q] = x->peer[q] + offs[q] + (c0 + so) * es;
#if DDPRT_CUDA
        if (k_cuda_ipc_reduce(tp_ipc_dt(h->dt), src, n, x->base + off + (c0 + so) * es, sn, op, div, x->rs_s))
            return tp_ipc_dev_fail(c, h, st, 0, "reduce");
#else
        (void)src, (void)op, (void)div;
#endif
        if (port_event_record(x->rs[me][k], x->rs_s)) return tp_ipc_dev_fail(c, h, st, 0, "reduce event");
    }
    if ((rc = tp_ipc_host_op(c, h, 1, TP_K_BARRIER, NULL, NULL))) return rc;
    for (size_t k = 0; k < nch; k++) {
        size_t c0 = k * per, cn = h->count - c0 < per ? h->count - c0 : per;
        for (int q = 0; q < n; q++)
            if (port_stream_wait_event(x->ag_s, x->rs[q][k]))
                return tp_ipc_dev_fail(c, h, st, 1, "waiting for a peer's shard");
        for (int q = 0; q < n; q++) {
            size_t so, sn;
            tp_ring_block(cn, n, q, &so, &sn);
            if (q != me && sn &&
                port_memcpy_d2d(x->base + off + (c0 + so) * es, x->peer[q] + offs[q] + (c0 + so) * es, sn * es, x->ag_s,
                                "cuda_ipc allgather copy"))
                return tp_ipc_dev_fail(c, h, st, 1, "allgather");
        }
    }
    if (port_event_record(x->ag, x->ag_s)) return tp_ipc_dev_fail(c, h, st, 1, "allgather event");
    if ((rc = tp_ipc_wait_device(c, h, st, 2)) || (rc = tp_ipc_host_op(c, h, 2, TP_K_BARRIER, NULL, NULL))) return rc;
    st->ipc_ops++;
    return 0;
}
