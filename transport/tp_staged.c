/* Pinned host staging for device buffers: the chunk pipeline (see tp_staged.h). A
 * device op is a tp_handle with `stage` set; tp_comm.c issues it like any op (one
 * sequence number per chunk) and hands it to tp_staged_run in the thread that drives
 * the backend, which runs the chunks' host collectives inline.
 *
 * tp_comm.c, tp_staged.c and tp_watch.c are one module (the communicator) in three files:
 * they call each other by design. */
#include "transport/tp_comm_int.h"
#include "transport/tp_staged.h"
#include <stdio.h>
#include <string.h>

size_t tp_staging_bytes(size_t chunk, int nslots)
{
    return ((chunk + 7) & ~(size_t)7) * (size_t)nslots;
}

int tp_staging_init(tp_staging *st, const tp_dev_ops *ops, void *ctx, void *pinned, size_t chunk, int nslots)
{
    memset(st, 0, sizeof *st);
    if (!ops || !pinned || chunk < 8 || nslots < 2 || nslots > TP_STAGE_MAX_SLOTS) return -1;
    st->ops = ops;
    st->ctx = ctx;
    st->host = pinned;
    st->chunk = (chunk + 7) & ~(size_t)7;
    st->nslots = nslots;
    return 0;
}

const char *tp_staging_errmsg(const tp_staging *st) { return st->err; }

static size_t per_chunk(const tp_handle *h)
{
    return ((const tp_staging *)h->stage)->chunk / rt_dtype_size((rt_dtype)h->dt);
}

/* An op on the cuda_ipc path takes tp_ipc_nparts numbers, its whole size on the first. */
size_t tp_staged_nchunks(const tp_handle *h)
{
    return tp_ipc_takes(h) ? tp_ipc_nparts(h) : (h->count + per_chunk(h) - 1) / per_chunk(h);
}

size_t tp_staged_chunk_count(const tp_handle *h, size_t i)
{
    if (tp_ipc_takes(h)) return i ? 0 : h->count;
    size_t per = per_chunk(h), left = h->count - i * per;
    return left < per ? left : per;
}

typedef struct stage_op {
    tp_comm *c;
    const tp_handle *h;
    tp_staging *st;
    unsigned char *dev;
    size_t esz, per; /* element size, elements per chunk */
    size_t nchunks;
    int sends;       /* this rank's device holds input (not a broadcast receiver) */
    int lands;       /* this rank's device takes the result (not a broadcast root) */
} stage_op;

static size_t chunk_elems(const stage_op *o, size_t i) { return tp_staged_chunk_count(o->h, i); }

static int slot_idx(const stage_op *o, size_t i) { return (int)(i % (size_t)o->st->nslots); }
static unsigned char *slot_of(const stage_op *o, size_t i) { return o->st->host + slot_idx(o, i) * o->st->chunk; }

/* Chunk i's own handle: what its host collective and its messages are about. */
static tp_handle chunk_handle(const stage_op *o, size_t i)
{
    tp_handle s = *o->h;
    s.stage = NULL;
    s.next = NULL;
    s.send = s.recv = i < o->nchunks ? slot_of(o, i) : NULL;
    s.count = i < o->nchunks ? chunk_elems(o, i) : 0;
    s.seq = o->h->seq + i;
    return s;
}

/* A device copy failed: the staging keeps the device's message, and the comm fails
 * with it (naming the chunk's collective) so the peers stop instead of waiting. */
static int dev_fail(stage_op *o, const char *stage, size_t i)
{
    tp_staging *st = o->st;
    if (!st->err[0])
        snprintf(st->err, sizeof st->err, "%s of device %s, chunk %zu/%zu: %s", stage, tp_kind_name(o->h->kind),
                 i + 1, o->nchunks, st->ops->errmsg(st->ctx));
    tp_handle s = chunk_handle(o, i);
    tp_fail_op(o->c, &s, TP_EIO, st->err);
    return TP_EIO;
}

/* Chunk i from the device into its slot, once the slot's previous H2D is done
 * reading it. A broadcast's receivers have nothing to send: no copy. */
static int fetch(stage_op *o, size_t i)
{
    tp_staging *st = o->st;
    int s = slot_idx(o, i);
    if (st->h2d_pending[s]) {
        if (st->ops->wait_h2d(st->ctx, s)) return dev_fail(o, "H2D wait", i);
        st->h2d_pending[s] = 0;
    }
    if (!o->sends) return 0;
    if (st->ops->d2h(st->ctx, s, slot_of(o, i), o->dev + i * o->per * o->esz, chunk_elems(o, i) * o->esz))
        return dev_fail(o, "D2H copy", i);
    st->d2h_pending[s] = 1;
    return 0;
}

/* Chunk i's bytes reach its slot: its host collective, then the copy back. */
static int reduce_land(stage_op *o, size_t i)
{
    tp_staging *st = o->st;
    int s = slot_idx(o, i);
    if (st->d2h_pending[s]) {
        if (st->ops->wait_d2h(st->ctx, s)) return dev_fail(o, "D2H wait", i);
        st->d2h_pending[s] = 0;
    }
    tp_handle ch = chunk_handle(o, i);
    int rc = tp_run_op(o->c, &ch);
    if (rc) {
        if (!st->err[0]) snprintf(st->err, sizeof st->err, "%s", tp_errmsg(o->c));
        return rc;
    }
    if (!o->lands) return 0;
    if (st->ops->h2d(st->ctx, s, o->dev + i * o->per * o->esz, slot_of(o, i), chunk_elems(o, i) * o->esz))
        return dev_fail(o, "H2D copy", i);
    st->h2d_pending[s] = 1;
    return 0;
}

int tp_staged_run(tp_comm *c, tp_handle *h)
{
    tp_staging *st = h->stage;
    int bcast = h->kind == TP_K_BROADCAST, me = tp_rank(c);
    stage_op o = {.c = c, .h = h, .st = st, .dev = h->recv, .esz = rt_dtype_size((rt_dtype)h->dt),
                  .sends = !bcast || me == h->root, .lands = !bcast || me != h->root};
    if (tp_ipc_takes(h)) return tp_ipc_run(c, h);
    int rc = tp_failed(c);
    if (rc) return rc;
    st->err[0] = 0;
    if (!h->count) return 0;
    o.per = st->chunk / o.esz;
    o.nchunks = tp_staged_nchunks(h);
    if (st->ops->bind && st->ops->bind(st->ctx)) return dev_fail(&o, "selecting the device", 0);
    if (st->ops->begin(st->ctx)) return dev_fail(&o, "ordering after compute", 0);
    /* Chunk i+L is fetched while chunk i is on the network and chunk i-1 copies back.
     * Its slot is chunk i-2's (D = L + 2 slots), whose copy back was queued one whole
     * collective earlier; chunk i-1's slot is left alone until chunk i-1+D. */
    size_t L = (size_t)st->nslots - 2, fetched = 0;
    for (size_t i = 0; i < o.nchunks && !rc; i++) {
        while (!rc && fetched < o.nchunks && fetched <= i + L) rc = fetch(&o, fetched++);
        if (!rc) rc = reduce_land(&o, i);
    }
    if (!rc && st->ops->end(st->ctx)) rc = dev_fail(&o, "ordering before compute", o.nchunks - 1);
    if (rc) {
        /* Drain: the copy queues must be done with the slots before they are reused.
         * The comm is failed; the first error is the one reported. */
        for (int s = 0; s < st->nslots; s++) {
            if (st->d2h_pending[s]) (void)st->ops->wait_d2h(st->ctx, s);
            if (st->h2d_pending[s]) (void)st->ops->wait_h2d(st->ctx, s);
            st->d2h_pending[s] = st->h2d_pending[s] = 0;
        }
        if (!st->err[0]) snprintf(st->err, sizeof st->err, "%s", tp_errmsg(c));
    }
    return rc;
}

/* Arguments are checked before the op takes its place in the issue order; a bad call
 * is this caller's bug, reported on the staging, and takes no sequence numbers. */
static int device_op(tp_comm *c, tp_handle *h, tp_staging *st, int blocking)
{
    int bad = !st || !st->ops || (unsigned)h->dt >= RT_NDTYPE || (!h->recv && h->count);
    if (h->kind == TP_K_ALLREDUCE) bad |= (unsigned)h->op >= TP_NOPS;
    else bad |= h->root < 0 || h->root >= tp_world(c);
    if (bad) {
        if (st) snprintf(st->err, sizeof st->err, "device %s: invalid arguments", tp_kind_name(h->kind));
        h->state = TP_H_DONE;
        return h->rc = TP_EINVAL;
    }
    h->stage = st;
    return tp_issue(c, h, blocking);
}

#define DEV_HANDLE(k, b, n, d, o, r) \
    (tp_handle){.kind = (k), .send = (b), .recv = (b), .count = (n), .dt = (int)(d), .op = (int)(o), .root = (r)}

int tp_allreduce_device(tp_comm *c, void *dev, size_t count, rt_dtype dt, tp_op op, tp_staging *st)
{
    tp_handle h = DEV_HANDLE(TP_K_ALLREDUCE, dev, count, dt, op, 0);
    return device_op(c, &h, st, 1);
}

int tp_broadcast_device(tp_comm *c, void *dev, size_t count, rt_dtype dt, int root, tp_staging *st)
{
    tp_handle h = DEV_HANDLE(TP_K_BROADCAST, dev, count, dt, 0, root);
    return device_op(c, &h, st, 1);
}

int tp_iallreduce_device(tp_comm *c, void *dev, size_t count, rt_dtype dt, tp_op op, tp_staging *st,
                         tp_handle *h)
{
    *h = DEV_HANDLE(TP_K_ALLREDUCE, dev, count, dt, op, 0);
    return device_op(c, h, st, 0);
}

int tp_ibroadcast_device(tp_comm *c, void *dev, size_t count, rt_dtype dt, int root, tp_staging *st,
                         tp_handle *h)
{
    *h = DEV_HANDLE(TP_K_BROADCAST, dev, count, dt, 0, root);
    return device_op(c, h, st, 0);
}
