/* The copy protocol: the collectives through the shared segment's buffers (tp_shm.h). Every op is cut
 * into steps of at most TP_SHM_STEP bytes per rank's buffer, so that copies and
 * reduces of a step stay in cache and the next step's copies overlap the peers' work.
 *
 * allreduce, small (<= TP_SHM_SMALL bytes): each rank copies its vector into its
 *   buffer, and after one round every rank reduces all of them, in rank order (the
 *   same operands in the same order: bitwise equal results everywhere).
 * allreduce, large: per step each rank copies the others' shares of its input into
 *   its buffer, reduces its own share (its own input plus the others' copies, rank
 *   order) into its buffer, and copies every share of the step before out (the last
 *   step's after a round of its own).
 * reduce_scatter: as the large allreduce without the copy out of others' shares.
 * broadcast: the root copies in, the others copy out. allgather: all copy in, all
 * copy everything out. barrier: one round. A tree allreduce (TP_K_TREE) is the
 * allreduce with tp_tree_fold for the rank-order chain (tp_shm_reduce). */
#include "transport/tp_shm.h"
#include "transport/tp_reduce.h"
#include <stddef.h>
#include <string.h>

typedef struct shm_op {
    tp_comm *c;
    tp_shm *s;
    tp_shm_bufhdr d; /* the op's descriptor, written into every step's buffer header */
    int me, n;
    int div; /* tp_op_div */
} shm_op;

/* This rank's buffer for step st: free to fill, as nobody reads it any more (tp_shm.h:
 * every reader of step st - NB was done with it before it posted ready for step
 * st - NB + 2 = st - 1, which this rank waited for). */
static unsigned char *begin(shm_op *x, uint64_t st) { return tp_shm_data(tp_shm_buf(x->s, x->me, st)); }

static int publish(shm_op *x, uint64_t st) { return tp_shm_publish(x->c, st, &x->d); }

/* memcpy that accepts NULL with 0 bytes (count 0 ops). */
static void cpy(void *d, const void *s, size_t n)
{
    if (n) memcpy(d, s, n);
}

static unsigned char *peer(shm_op *x, int q, uint64_t st) { return tp_shm_data(tp_shm_buf(x->s, q, st)); }

static int allreduce_small(shm_op *x, const unsigned char *send, unsigned char *recv, size_t count, rt_dtype dt,
                           tp_op op)
{
    size_t bytes = count * rt_dtype_size(dt);
    uint64_t st = x->s->step++;
    unsigned char *buf = begin(x, st);
    int rc;
    /* A few bytes travel in the header's line itself: one cache miss per peer less. */
    int inl = bytes <= sizeof tp_shm_buf(x->s, 0, 0)->pad;
    cpy(inl ? tp_shm_buf(x->s, x->me, st)->pad : (char *)buf, send, bytes);
    if ((rc = publish(x, st))) return rc;
    const void *in[TP_SHM_MAX_WORLD];
    for (int q = 0; q < x->n; q++) in[q] = inl ? (void *)tp_shm_buf(x->s, q, st)->pad : (void *)peer(x, q, st);
    tp_shm_reduce(x->c, x->d.kind, recv, in, count, dt, op);
    if (count) tp_avg_finish(recv, count, dt, x->div);
    return 0;
}

/* Allreduce: every rank's reduced share of step st (cnt elements at base) into recv. */
static void copy_out(shm_op *x, unsigned char *recv, size_t base, size_t cnt, size_t es, uint64_t st)
{
    for (int q = 0; q < x->n; q++) {
        size_t o = tp_shm_cut(cnt, x->n, q, es) * es;
        cpy(recv + base * es + o, peer(x, q, st) + o, tp_shm_cut(cnt, x->n, q + 1, es) * es - o);
    }
}

/* Allreduce (all = 1) or reduce_scatter (all = 0; block r of send is rank r's, count
 * elements each) in steps. Allreduce steps cover TP_SHM_STEP bytes of the vector, cut
 * into n shares; reduce_scatter steps cover TP_SHM_STEP / n bytes of every block.
 * Allreduce copies a step's results out in the next step, after its ready round (every
 * rank reduced its share before it posted ready for the next step): one round per
 * step; only the last step has a round of its own (`red`). */
static int reduce_steps(shm_op *x, const unsigned char *send, unsigned char *recv, size_t count, rt_dtype dt,
                        tp_op op, int all)
{
    size_t es = rt_dtype_size(dt), reg = TP_SHM_STEP / (size_t)x->n / 64 * 64;
    size_t per = all ? TP_SHM_STEP / es : reg / es; /* elements per step */
    size_t nsteps = count ? (count + per - 1) / per : 1;
    size_t pbase = 0, pcnt = 0; /* the previous step's, whose results are still to copy out */
    uint64_t st = 0;
    int n = x->n, me = x->me, rc;
    const void *in[TP_SHM_MAX_WORLD];
    for (size_t k = 0; k < nsteps; k++) {
        st = x->s->step++;
        size_t base = k * per, cnt = count - base < per ? count - base : per;
        unsigned char *buf = begin(x, st);
        /* Where share q lives in a buffer, and where it comes from in send. */
#define S_OFF(q) (all ? tp_shm_cut(cnt, n, q, es) * es : (size_t)(q) * reg)
#define S_LEN(q) (all ? (tp_shm_cut(cnt, n, (q) + 1, es) - tp_shm_cut(cnt, n, q, es)) * es : cnt * es)
#define S_SRC(q) (all ? send + (base + tp_shm_cut(cnt, n, q, es)) * es : send + ((size_t)(q) * count + base) * es)
        if (all) { /* the others' shares are contiguous on both sides of mine */
            cpy(buf, send + base * es, S_OFF(me));
            cpy(buf + S_OFF(me + 1), S_SRC(me + 1), cnt * es - S_OFF(me + 1));
        } else {
            for (int q = 0; q < n; q++)
                if (q != me) cpy(buf + S_OFF(q), S_SRC(q), S_LEN(q));
        }
        if ((rc = publish(x, st))) return rc;
        size_t m = S_LEN(me) / es;
        unsigned char *dst = buf + S_OFF(me);
        for (int q = 0; q < n; q++) in[q] = q == me ? S_SRC(me) : peer(x, q, st) + S_OFF(me);
        tp_shm_reduce(x->c, x->d.kind, dst, in, m, dt, op);
        if (m) tp_avg_finish(dst, m, dt, x->div);
        if (!all) cpy(recv + base * es, dst, m * es);
        else if (k) copy_out(x, recv, pbase, pcnt, es, st - 1);
        pbase = base, pcnt = cnt;
#undef S_OFF
#undef S_LEN
#undef S_SRC
    }
    if (!all) return 0;
    tp_shm_post(x->s, me, &x->s->seg->ctl[me].red, st + 1);
    if ((rc = tp_shm_wait_ctl(x->c, offsetof(tp_shm_ctl, red), st + 1))) return rc;
    copy_out(x, recv, pbase, pcnt, es, st);
    return 0;
}

/* broadcast (root >= 0: the root copies send in, the others copy it out to recv) and
 * allgather (root < 0: every rank copies in, and copies every rank's block out). */
static int gather(shm_op *x, const unsigned char *send, unsigned char *recv, size_t bytes, int root)
{
    size_t nsteps = bytes ? (bytes + TP_SHM_STEP - 1) / TP_SHM_STEP : 1;
    for (size_t k = 0; k < nsteps; k++) {
        uint64_t st = x->s->step++;
        size_t off = k * TP_SHM_STEP, len = bytes - off < TP_SHM_STEP ? bytes - off : TP_SHM_STEP;
        unsigned char *mine = begin(x, st);
        int rc;
        if (root < 0 || x->me == root) cpy(mine, send + off, len);
        if ((rc = publish(x, st))) return rc;
        if (root >= 0) {
            if (x->me != root) cpy(recv + off, peer(x, root, st), len);
        } else {
            for (int q = 0; q < x->n; q++) cpy(recv + (size_t)q * bytes + off, peer(x, q, st), len);
        }
    }
    return 0;
}

int tp_shm_copy_run(tp_comm *c, tp_handle *h, const tp_shm_bufhdr *d)
{
    size_t es = rt_dtype_size((rt_dtype)h->dt);
    shm_op x = {.c = c, .s = c->shm, .d = *d, .me = c->rank, .n = c->world, .div = tp_op_div(h, c->world)};
    switch (h->kind) {
    case TP_K_ALLREDUCE:
    case TP_K_TREE:
        if (h->count * es <= TP_SHM_SMALL)
            return allreduce_small(&x, h->send, h->recv, h->count, (rt_dtype)h->dt, (tp_op)h->op);
        return reduce_steps(&x, h->send, h->recv, h->count, (rt_dtype)h->dt, (tp_op)h->op, 1);
    case TP_K_REDUCE_SCATTER:
        return reduce_steps(&x, h->send, h->recv, h->count, (rt_dtype)h->dt, (tp_op)h->op, 0);
    case TP_K_BROADCAST: return gather(&x, h->recv, h->recv, h->count * es, h->root);
    case TP_K_ALLGATHER: return gather(&x, h->send, h->recv, h->count * es, -1);
    case TP_K_BARRIER: {
        uint64_t st = x.s->step++;
        return publish(&x, st);
    }
    default: return TP_EINVAL;
    }
}
