/* Pinned host staging for device buffers: the chunk pipeline (see tp_staged.h). */
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

enum { K_ALLREDUCE, K_BROADCAST };

typedef struct stage_op {
    tp_comm *c;
    tp_staging *st;
    unsigned char *dev;
    size_t count, esz, per; /* elements, element size, elements per chunk */
    size_t nchunks;
    rt_dtype dt;
    int kind, op, root, rank;
} stage_op;

static void dev_fail(stage_op *o, const char *stage, size_t chunk)
{
    if (!o->st->err[0])
        snprintf(o->st->err, sizeof o->st->err, "%s of device %s, chunk %zu/%zu: %s", stage,
                 o->kind == K_ALLREDUCE ? "allreduce" : "broadcast", chunk + 1, o->nchunks,
                 o->st->ops->errmsg(o->st->ctx));
}

static size_t chunk_elems(const stage_op *o, size_t i)
{
    size_t left = o->count - i * o->per;
    return left < o->per ? left : o->per;
}

static unsigned char *slot_of(const stage_op *o, size_t i)
{
    return o->st->host + (i % (size_t)o->st->nslots) * o->st->chunk;
}

/* Stage A: chunk i from the device into its slot, once the slot's previous H2D is
 * done reading it. A broadcast's receivers have nothing to send: no copy. */
static int fetch(stage_op *o, size_t i)
{
    tp_staging *st = o->st;
    int s = (int)(i % (size_t)st->nslots);
    if (st->h2d_pending[s]) {
        if (st->ops->wait_h2d(st->ctx, s)) { dev_fail(o, "H2D wait", i - (size_t)st->nslots); return TP_EIO; }
        st->h2d_pending[s] = 0;
    }
    if (o->kind == K_BROADCAST && o->rank != o->root) return 0;
    if (st->ops->d2h(st->ctx, s, slot_of(o, i), o->dev + i * o->per * o->esz, chunk_elems(o, i) * o->esz)) {
        dev_fail(o, "D2H copy", i);
        return TP_EIO;
    }
    return 0;
}

/* Stage B: chunk i's bytes are in the slot: queue its host collective. */
static int launch(stage_op *o, size_t i)
{
    tp_staging *st = o->st;
    int s = (int)(i % (size_t)st->nslots), rc;
    if (!(o->kind == K_BROADCAST && o->rank != o->root) && st->ops->wait_d2h(st->ctx, s)) {
        dev_fail(o, "D2H wait", i);
        return TP_EIO;
    }
    void *buf = slot_of(o, i);
    if (o->kind == K_ALLREDUCE) rc = tp_iallreduce(o->c, buf, buf, chunk_elems(o, i), o->dt, (tp_op)o->op, &st->h[s]);
    else rc = tp_ibroadcast(o->c, buf, chunk_elems(o, i), o->dt, o->root, &st->h[s]);
    if (rc) return rc; /* the handle is complete; the comm has the message */
    st->h_pending[s] = 1;
    return 0;
}

/* Stage C: chunk i's collective is done: copy the slot back to the device. The root
 * of a broadcast already holds the data. */
static int land(stage_op *o, size_t i)
{
    tp_staging *st = o->st;
    int s = (int)(i % (size_t)st->nslots);
    st->h_pending[s] = 0;
    int rc = tp_wait(o->c, &st->h[s]);
    if (rc) return rc;
    if (o->kind == K_BROADCAST && o->rank == o->root) return 0;
    if (st->ops->h2d(st->ctx, s, o->dev + i * o->per * o->esz, slot_of(o, i), chunk_elems(o, i) * o->esz)) {
        dev_fail(o, "H2D copy", i);
        return TP_EIO;
    }
    st->h2d_pending[s] = 1;
    return 0;
}

static int run(stage_op *o)
{
    tp_staging *st = o->st;
    int D = st->nslots, rc = 0;
    if (!o->count) return 0;
    o->per = st->chunk / o->esz;
    o->nchunks = (o->count + o->per - 1) / o->per;
    if (st->ops->begin(st->ctx)) {
        dev_fail(o, "ordering after compute", 0);
        return TP_EIO;
    }
    /* Iteration i: fetch chunk i, launch chunk i-1, land chunk i-(D-1). Chunk i reuses
     * the slot of chunk i-D, landed in iteration i-1, so the slot is free (after the
     * wait in fetch) and D-1 chunks are between the copy engines and the network. */
    for (size_t i = 0; i < o->nchunks + (size_t)D - 1 && !rc; i++) {
        if (i < o->nchunks) rc = fetch(o, i);
        if (!rc && i >= 1 && i - 1 < o->nchunks) rc = launch(o, i - 1);
        if (!rc && i >= (size_t)D - 1 && i - (D - 1) < o->nchunks) rc = land(o, i - (D - 1));
    }
    if (rc) {
        /* Drain: the comm thread and the copy queues must be done with the slots
         * before the caller may reuse them. A failed comm finishes its queued ops at
         * once; the first error is the one reported. */
        for (int s = 0; s < D; s++) {
            if (st->h_pending[s]) (void)tp_wait(o->c, &st->h[s]);
            st->h_pending[s] = 0;
            (void)st->ops->wait_d2h(st->ctx, s);
            (void)st->ops->wait_h2d(st->ctx, s);
            st->h2d_pending[s] = 0;
        }
        if (!st->err[0]) snprintf(st->err, sizeof st->err, "%s", tp_errmsg(o->c));
        return rc;
    }
    if (st->ops->end(st->ctx)) {
        dev_fail(o, "ordering before compute", o->nchunks - 1);
        return TP_EIO;
    }
    return 0;
}

int tp_allreduce_device(tp_comm *c, void *dev, size_t count, rt_dtype dt, tp_op op, tp_staging *st)
{
    stage_op o = {.c = c, .st = st, .dev = dev, .count = count, .esz = rt_dtype_size(dt), .dt = dt,
                  .kind = K_ALLREDUCE, .op = op, .rank = tp_rank(c)};
    st->err[0] = 0;
    if (dt >= RT_NDTYPE || (int)op < 0 || op >= TP_NOPS || (!dev && count)) {
        snprintf(st->err, sizeof st->err, "device allreduce: invalid arguments");
        return TP_EINVAL;
    }
    return run(&o);
}

int tp_broadcast_device(tp_comm *c, void *dev, size_t count, rt_dtype dt, int root, tp_staging *st)
{
    stage_op o = {.c = c, .st = st, .dev = dev, .count = count, .esz = rt_dtype_size(dt), .dt = dt,
                  .kind = K_BROADCAST, .root = root, .rank = tp_rank(c)};
    st->err[0] = 0;
    if (dt >= RT_NDTYPE || root < 0 || root >= tp_world(c) || (!dev && count)) {
        snprintf(st->err, sizeof st->err, "device broadcast: invalid arguments");
        return TP_EINVAL;
    }
    return run(&o);
}
