/* The cuda_ipc device allreduce between the ranks of one host (tp_staged.h:
 * tp_staging_ipc). Set up once: every rank exports its device region (one allocation)
 * and interprocess events; every rank opens the others' (cached with the comm, closed
 * at tp_comm_destroy). An allreduce of a buffer in the region then takes three host
 * ops of the comm (its sequence numbers, deadline, trace and dead-peer naming):
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
#include "transport/tp_comm_int.h"
#include "transport/tp_shm.h"
#include "transport/tp_staged.h"
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
#include "kernels/cuda/k_cuda.h"
#define TP_IPC_MAX K_CUDA_IPC_MAX
#define IPC_BUILT 1
#else
#define TP_IPC_MAX 8
#define IPC_BUILT 0 /* no kernels: the device plan never takes cuda_ipc */
#endif

#define TP_IPC_NCH 8 /* chunks in flight per op (events rs[k]); large ops take larger chunks */

struct tp_ipc {
    int n, me, device;
    unsigned char *base;              /* this rank's region */
    size_t bytes[TP_IPC_MAX];         /* every rank's region size */
    unsigned char *peer[TP_IPC_MAX];  /* every rank's region here (peer[me] = base) */
    port_event ready[TP_IPC_MAX], rs[TP_IPC_MAX][TP_IPC_NCH]; /* [me]: own; others opened */
    port_event ag;                    /* local: this rank's op is done on the device */
    port_stream compute, rs_s, ag_s;
};

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
    port_stream_destroy(x->rs_s);
    port_stream_destroy(x->ag_s);
    free(x);
    c->ipc = NULL;
}

/* Creates this rank's events and streams and fills its export; 0 or -1 (port's line). */
static int ipc_export(tp_ipc *x, void *region, ipc_hs *h)
{
    if (port_stream_create(&x->rs_s, "cuda_ipc reduce stream") || port_stream_create(&x->ag_s, "cuda_ipc copy stream") ||
        port_event_create(&x->ag, 0, "cuda_ipc event") || port_event_create_ipc(&x->ready[x->me], "cuda_ipc event") ||
        port_ipc_event_get(h->ready, x->ready[x->me], "cuda_ipc event handle") ||
        port_ipc_get(h->mem, region, "cuda_ipc device region"))
        return -1;
    for (int k = 0; k < TP_IPC_NCH; k++)
        if (port_event_create_ipc(&x->rs[x->me][k], "cuda_ipc event") ||
            port_ipc_event_get(h->rs[k], x->rs[x->me][k], "cuda_ipc event handle"))
            return -1;
    return 0;
}

static int ipc_import(tp_ipc *x, const ipc_hs *all)
{
    for (int q = 0; q < x->n; q++) {
        x->bytes[q] = (size_t)all[q].bytes;
        if (q == x->me) continue;
        if (port_ipc_open((void **)&x->peer[q], all[q].mem, "a peer's device region") ||
            port_ipc_event_open(&x->ready[q], all[q].ready, "a peer's cuda_ipc event"))
            return -1;
        for (int k = 0; k < TP_IPC_NCH; k++)
            if (port_ipc_event_open(&x->rs[q][k], all[q].rs[k], "a peer's cuda_ipc event")) return -1;
    }
    return 0;
}

/* Every rank's ok (an allgather): the first rank that failed, or -1. */
static int first_failed(tp_comm *c, int ok, int *rc)
{
    uint8_t mine = (uint8_t)ok, all[TP_IPC_MAX];
    if ((*rc = tp_allgather(c, &mine, all, 1, RT_U8))) return -1;
    for (int q = 0; q < c->world; q++)
        if (!all[q]) return q;
    return -1;
}

/* Exchanges the handles and opens the peers'; 0 with c->ipc set, 1 when some rank
 * could not (logged: the staging stays), or a comm code. */
static int ipc_open_all(tp_comm *c, int device, void *region, size_t bytes, port_stream compute)
{
    int w = c->world, rc;
    tp_ipc *x = calloc(1, sizeof *x);
    ipc_hs *all = calloc((size_t)w, sizeof *all), mine = {0};
    if (!x || !all) { free(x), free(all); return TP_EIO; }
    *x = (tp_ipc){.n = w, .me = c->rank, .device = device, .base = region, .compute = compute};
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
    if (!info_all || !reach || !row || !info) { rc = TP_EIO; goto out; }
    mine.host = (int64_t)(c->host_ids && c->topo == -1 ? c->host_ids[me] : port_host_id());
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
    }
    if ((rc = tp_allgather(c, row, reach, (size_t)w, RT_U8))) goto out;
    tp_peers p = {.world = w, .info = info, .net = c->b->ops->name, .reach = reach};
    tp_peers_init(&p);
    char why[160];
    int ipc = tp_transport_device_plan(&p, me, why, sizeof why);
    if (ipc && w > TP_IPC_MAX) {
        if (me == 0) rt_info("comm: device collectives take the pinned staging (cuda_ipc: %d ranks, at most %d)", w,
                             TP_IPC_MAX);
        ipc = 0;
    }
    if (ipc && (rc = ipc_open_all(c, device, region, bytes, compute)) == 0) st->ipc = c->ipc;
    if (rc == 1) rc = 0;
out:
    free(info_all), free(reach), free(row), free(info);
    return rc;
}

const char *tp_staging_path(const tp_staging *st) { return st->ipc ? "cuda_ipc" : "staged"; }

/* The kernel's dtype code (0 f32, 1 f16, 2 bf16), or -1: not on this path. */
static int ipc_dt(int dt) { return dt == RT_F32 ? 0 : dt == RT_F16 ? 1 : dt == RT_BF16 ? 2 : -1; }

/* Whether h runs over IPC: an f32 / f16 / bf16 allreduce in this rank's region (every
 * rank must pass buffers of its region, as DDP's buckets are: the sequence numbers
 * depend on it). */
int tp_ipc_takes(const tp_handle *h)
{
    const tp_staging *st = h->stage;
    const tp_ipc *x = st ? st->ipc : NULL;
    if (!x || h->kind != TP_K_ALLREDUCE || ipc_dt(h->dt) < 0 || !h->count) return 0;
    const unsigned char *b = h->recv;
    return b >= x->base && (size_t)(b - x->base) <= x->bytes[x->me] &&
           h->count <= (x->bytes[x->me] - (size_t)(b - x->base)) / rt_dtype_size((rt_dtype)h->dt);
}

/* The op's host part k (its sequence number seq + k) failed on the device side. */
static int dev_fail(tp_comm *c, const tp_handle *h, tp_staging *st, int k, const char *what)
{
    if (!st->err[0])
        snprintf(st->err, sizeof st->err, "cuda_ipc %s: %s", what, port_cuda_errmsg());
    tp_handle s = *h;
    s.seq = h->seq + (uint64_t)k;
    tp_fail_op(c, &s, TP_EIO, st->err);
    return TP_EIO;
}

static int host_op(tp_comm *c, const tp_handle *h, int k, int kind, const void *send, void *recv)
{
    tp_handle s = *h;
    s.stage = NULL, s.next = NULL;
    s.kind = kind, s.send = send, s.recv = recv, s.count = kind == TP_K_ALLGATHER, s.dt = RT_I64, s.op = TP_SUM;
    s.seq = h->seq + (uint64_t)k;
    return tp_run_op(c, &s);
}

/* A peer whose socket hung up (it died), or -1. */
static int dead_peer(tp_comm *c)
{
    for (int q = 0; c->b->ops->peer_fd && q < c->world; q++) {
        int fd = q == c->rank ? -1 : c->b->ops->peer_fd(c->b, q);
        struct pollfd f = {.fd = fd, .events = POLLRDHUP};
        if (fd >= 0 && poll(&f, 1, 0) > 0 && (f.revents & (POLLRDHUP | POLLHUP | POLLERR))) return q;
    }
    return -1;
}

/* Fails the op (its last host part's number) with why: published in the shared segment
 * first when there is one, so that the others name the rank that saw it, not this one
 * (whose sockets close next). */
static int wait_fail(tp_comm *c, const tp_handle *h, tp_staging *st, int code, const char *why)
{
    snprintf(st->err, sizeof st->err, "%s", why);
    if (c->shm) tp_shm_fail(c, code, "%s", why);
    tp_handle s = *h;
    s.seq = h->seq + 2;
    tp_fail_op(c, &s, code, why);
    return code;
}

/* The host waits for this rank's device part by the comm's deadline; a dead peer (its
 * device work never comes) is named at once. */
static int wait_device(tp_comm *c, const tp_handle *h, tp_staging *st)
{
    tp_ipc *x = c->ipc;
    int64_t deadline = port_now_ns() + (int64_t)(c->timeout_s * 1e9);
    char why[160];
    for (int i = 0;; i++) {
        int q = port_event_query(x->ag), rc, dead;
        if (q == 1) return 0;
        if ((rc = tp_failed(c))) return rc;
        if (c->shm && (rc = tp_shm_others_failed(c))) return wait_fail(c, h, st, rc, c->b->err);
        if ((dead = dead_peer(c)) >= 0) {
            snprintf(why, sizeof why, "rank %d closed the connection (this rank waited for its device buffers, "
                     "cuda_ipc)", dead);
            return wait_fail(c, h, st, TP_ECLOSED, why);
        }
        if (q < 0) return dev_fail(c, h, st, 2, "device wait");
        if (port_now_ns() >= deadline)
            return wait_fail(c, h, st, TP_ETIMEOUT, "timed out waiting for the local ranks' device work (cuda_ipc)");
        struct timespec ts = {0, i < 100 ? 20000 : 500000};
        nanosleep(&ts, NULL);
    }
}

int tp_ipc_run(tp_comm *c, tp_handle *h)
{
    tp_staging *st = h->stage;
    tp_ipc *x = c->ipc;
    int n = x->n, me = x->me, rc = tp_failed(c);
    if (rc) return rc;
    st->err[0] = 0;
    int64_t off = (unsigned char *)h->recv - x->base, offs[TP_IPC_MAX];
    if (port_cuda_use_device(x->device)) return dev_fail(c, h, st, 0, "selecting the device");
    if (port_event_record(x->ready[me], x->compute)) return dev_fail(c, h, st, 0, "ordering after compute");
    if ((rc = host_op(c, h, 0, TP_K_ALLGATHER, &off, offs))) return rc;
    size_t es = rt_dtype_size((rt_dtype)h->dt);
    for (int q = 0; q < n; q++)
        if (offs[q] < 0 || (size_t)offs[q] + h->count * es > x->bytes[q]) {
            snprintf(st->err, sizeof st->err, "cuda_ipc: rank %d's buffer is not inside its registered region", q);
            tp_handle s = *h;
            tp_fail_op(c, &s, TP_EINVAL, st->err);
            return TP_EINVAL;
        }
    /* Chunks of the staging's size, at most TP_IPC_NCH of them. */
    size_t per = st->chunk / es, nch = (h->count + per - 1) / per;
    if (nch > TP_IPC_NCH) nch = TP_IPC_NCH, per = (h->count + nch - 1) / nch, nch = (h->count + per - 1) / per;
    int op = h->op == TP_AVG ? TP_SUM : h->op, div = tp_op_div(h, n);
    for (int q = 0; q < n; q++)
        if (port_stream_wait_event(x->rs_s, x->ready[q])) return dev_fail(c, h, st, 0, "waiting for a peer's input");
    for (size_t k = 0; k < nch; k++) {
        size_t c0 = k * per, cn = h->count - c0 < per ? h->count - c0 : per, so, sn;
        tp_ring_block(cn, n, me, &so, &sn);
        const void *src[TP_IPC_MAX];
        for (int q = 0; q < n; q++) src[q] = x->peer[q] + offs[q] + (c0 + so) * es;
#if DDPRT_CUDA
        if (k_cuda_ipc_reduce(ipc_dt(h->dt), src, n, x->base + off + (c0 + so) * es, sn, op, div, x->rs_s))
            return dev_fail(c, h, st, 0, "reduce");
#else
        (void)src, (void)op, (void)div;
#endif
        if (port_event_record(x->rs[me][k], x->rs_s)) return dev_fail(c, h, st, 0, "reduce event");
    }
    if ((rc = host_op(c, h, 1, TP_K_BARRIER, NULL, NULL))) return rc;
    for (size_t k = 0; k < nch; k++) {
        size_t c0 = k * per, cn = h->count - c0 < per ? h->count - c0 : per;
        for (int q = 0; q < n; q++)
            if (port_stream_wait_event(x->ag_s, x->rs[q][k])) return dev_fail(c, h, st, 1, "waiting for a peer's shard");
        for (int q = 0; q < n; q++) {
            size_t so, sn;
            tp_ring_block(cn, n, q, &so, &sn);
            if (q != me && sn &&
                port_memcpy_d2d(x->base + off + (c0 + so) * es, x->peer[q] + offs[q] + (c0 + so) * es, sn * es, x->ag_s,
                                "cuda_ipc allgather copy"))
                return dev_fail(c, h, st, 1, "allgather");
        }
    }
    if (port_event_record(x->ag, x->ag_s)) return dev_fail(c, h, st, 1, "allgather event");
    if ((rc = wait_device(c, h, st)) || (rc = host_op(c, h, 2, TP_K_BARRIER, NULL, NULL))) return rc;
    st->ipc_ops++;
    return 0;
}
