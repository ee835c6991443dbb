/* Tree collectives: an allreduce whose every element is one fixed expression over the
 * ranks, whatever the chunking, the transport or the element's position.
 *
 * The tree. Levels t = 0..L-1 with radices f_t (product = world), strides
 * s_t = f_0 * ... * f_{t-1}. Rank r's digit at level t is d_t(r) = (r / s_t) % f_t.
 * A level-t group is the f_t ranks that differ only in digit t; within it operands are
 * folded in digit order: F(y_0, ..., y_{f-1}) = ((y_0 + y_1) + y_2) + ... The value
 * of a group at level t+1 is F over its level-t groups' values, and the result is the
 * value of the one group at the top. For radix 2 this is the binary tree that pairs
 * ranks 2i and 2i+1 first ("recursive doubling with fixed pairing").
 *
 * The algorithm (a mixed-radix recursive halving, then the same in reverse):
 *  reduce-scatter, t = 0..L-1: every rank holds a segment S_t (S_0 = all elements);
 *    the group's members hold the same S_t (they agree on every digit below t, which
 *    is all that chose it). S_t is cut into f_t parts; member k receives part k of
 *    every other member and folds the f_t operands in digit order; S_{t+1} = its part.
 *  allgather, t = L-1..0: every member sends its part of S_t to the others.
 * Claim: after the reduce-scatter, an element e of rank r's final segment equals the
 * tree's value for e. Induction on t: when level t starts, element e of S_t on every
 * member holds the value, for e, of the member's own level-t subtree (the ranks that
 * share its digits from t on; t = 0: the rank's own input). The owner of e's part
 * computes F over the members in digit order from exactly those values, which is the
 * definition of the level-(t+1) group's value. At t = L the subtree is every rank.
 * The allgather only copies. F is computed by tp_reduce, elementwise, the same
 * function on every rank; which rank computes an element, how it is cut into pieces
 * and which backend carried the operands do not enter, so the bits depend on the
 * inputs and the tree only. The trainer (nn/invariant.c) folds the virtual shards
 * inside a rank with the same F over the lower levels of the same tree.
 *
 * Costs: per rank, the reduce-scatter sends (f_t - 1) / f_t of S_t at level t, as does
 * the allgather: 2 (world - 1) / world of the vector in all, as a ring allreduce. The
 * first level pairs neighbouring ranks (on one host under ddprt-launch), where the
 * biggest parts go. Pieces of the comm's chunk size go through its scratch slots; the
 * allgather copies straight into place. */
#include "transport/tp_comm_int.h"
#include "transport/tp_reduce.h"
#include <string.h>

int tp_set_tree(tp_comm *c, const int *radix, int nlev)
{
    long prod = 1;
    if (nlev < 0 || nlev > TP_TREE_MAX_LEVELS) return TP_EINVAL;
    for (int i = 0; i < nlev; i++) {
        if (radix[i] < 2 || radix[i] > 2 * TP_PIPE_DEPTH) return TP_EINVAL;
        prod *= radix[i];
    }
    if (prod != c->world || (nlev == 0 && c->world != 1)) return TP_EINVAL;
    port_mutex_lock(&c->mu);
    memcpy(c->tree, radix, sizeof *radix * (size_t)nlev);
    c->ntree = nlev ? nlev : -1; /* -1: set, a world of one */
    port_mutex_unlock(&c->mu);
    return 0;
}

/* Part k of f of the segment [lo, lo + len). */
static void part(size_t lo, size_t len, int f, int k, size_t *off, size_t *cnt)
{
    *off = lo + len * (size_t)k / (size_t)f;
    *cnt = lo + len * (size_t)(k + 1) / (size_t)f - *off;
}

void tp_tree_block(size_t count, const int *radix, int nlev, int rank, size_t *off, size_t *cnt)
{
    size_t lo = 0, len = count;
    for (int t = 0, s = 1; t < nlev; s *= radix[t], t++) part(lo, len, radix[t], (rank / s) % radix[t], &lo, &len);
    *off = lo, *cnt = len;
}

typedef struct level {
    int f, d, stride;
    size_t lo, len; /* S_t */
} level;

static int member(tp_comm *c, const level *L, int k) { return c->rank + (k - L->d) * L->stride; }

/* Level t of the reduce-scatter, piece by piece: one piece of the own part from every
 * other member (into the scratch slots), then the fold in digit order. */
static int rs_level(tp_comm *c, const level *L, unsigned char *buf, rt_dtype dt, tp_op op, int div)
{
    size_t es = rt_dtype_size(dt), per = c->chunk / es, off[2 * TP_PIPE_DEPTH], cnt[2 * TP_PIPE_DEPTH];
    for (int k = 0; k < L->f; k++) part(L->lo, L->len, L->f, k, &off[k], &cnt[k]);
    size_t mine = cnt[L->d], most = 0;
    for (int k = 0; k < L->f; k++) most = cnt[k] > most ? cnt[k] : most;
    for (size_t p = 0; p < most; p += per) {
        const unsigned char *x[2 * TP_PIPE_DEPTH];
        size_t n = mine > p ? (mine - p < per ? mine - p : per) : 0;
        unsigned char *own = buf + (off[L->d] + p) * es;
        for (int q = 1; q < L->f; q++) {
            int to = (L->d + q) % L->f, from = (L->d - q + L->f) % L->f;
            size_t sn = cnt[to] > p ? (cnt[to] - p < per ? cnt[to] - p : per) : 0;
            /* from's operand in slot `from` (the own digit's slot holds the own copy) */
            int rc = tp_xfer(c, buf + (off[to] + p) * es, sn * es, member(c, L, to), c->slot[from], n * es,
                             member(c, L, from));
            if (rc) return rc;
            x[from] = c->slot[from];
        }
        if (!n) continue;
        /* The own operand is overwritten by the first step unless it is y_0 or y_1. */
        if (L->d >= 2) memcpy(c->slot[L->d], own, n * es), x[L->d] = c->slot[L->d];
        else x[L->d] = own;
        tp_reduce(own, x[0], x[1], n, dt, op);
        for (int k = 2; k < L->f; k++) tp_reduce(own, own, x[k], n, dt, op);
        tp_avg_finish(own, n, dt, div); /* div > 1 at the last level only: the finished sum */
    }
    return 0;
}

/* Level t of the allgather: the own part of S_t to every other member, theirs into place. */
static int ag_level(tp_comm *c, const level *L, unsigned char *buf, rt_dtype dt)
{
    size_t es = rt_dtype_size(dt), off[2 * TP_PIPE_DEPTH], cnt[2 * TP_PIPE_DEPTH];
    for (int k = 0; k < L->f; k++) part(L->lo, L->len, L->f, k, &off[k], &cnt[k]);
    for (int q = 1; q < L->f; q++) {
        int to = (L->d + q) % L->f, from = (L->d - q + L->f) % L->f;
        int rc = tp_xfer(c, buf + off[L->d] * es, cnt[L->d] * es, member(c, L, to), buf + off[from] * es,
                         cnt[from] * es, member(c, L, from));
        if (rc) return rc;
    }
    return 0;
}

int tp_tree_run(tp_comm *c, const tp_handle *h)
{
    level lv[TP_TREE_MAX_LEVELS];
    size_t lo = 0, len = h->count;
    int n = c->ntree > 0 ? c->ntree : 0, rc = 0;
    for (int t = 0, s = 1; t < n; s *= c->tree[t], t++) {
        lv[t] = (level){c->tree[t], (c->rank / s) % c->tree[t], s, lo, len};
        part(lo, len, lv[t].f, lv[t].d, &lo, &len);
    }
    int div = tp_op_div(h, c->world);
    for (int t = 0; (h->root & TP_TREE_RS) && t < n && !rc; t++)
        rc = rs_level(c, &lv[t], h->recv, h->dt, h->op, t == n - 1 ? div : 1);
    if (!n && (h->root & TP_TREE_RS)) tp_avg_finish(h->recv, h->count, h->dt, div); /* a world of one */
    for (int t = n - 1; (h->root & TP_TREE_AG) && t >= 0 && !rc; t--) rc = ag_level(c, &lv[t], h->recv, h->dt);
    return rc;
}

/* The tree over n = product of radices operands at once (the shared-memory path,
 * which sees every rank's buffer): F level by level, in blocks small enough for
 * per-level accumulators on the stack. dst may alias an operand: a block is written
 * after all of its operands were read. */
#define FOLD_BLK 256
void tp_tree_fold(const int *radix, int nlev, void *dst, const void *const *in, size_t m, rt_dtype dt, tp_op op)
{
    size_t es = rt_dtype_size(dt);
    int n = 1;
    for (int l = 0; l < nlev; l++) n *= radix[l];
    for (size_t b = 0; b < m; b += FOLD_BLK) {
        size_t k = m - b < FOLD_BLK ? m - b : FOLD_BLK;
        _Alignas(64) unsigned char acc[TP_TREE_MAX_LEVELS][FOLD_BLK * 8];
        const unsigned char *val = NULL;
        for (int q = 0; q < n; q++) {
            val = (const unsigned char *)in[q] + b * es;
            for (int l = 0, s = 1; l < nlev; s *= radix[l], l++) {
                int d = (q / s) % radix[l];
                if (d == 0) { /* first operand of its group at this level */
                    memcpy(acc[l], val, k * es);
                    break;
                }
                tp_reduce(acc[l], acc[l], val, k, dt, op);
                if (d < radix[l] - 1) break;
                val = acc[l]; /* group complete: its value goes up */
            }
        }
        memmove((unsigned char *)dst + b * es, val, k * es);
    }
}
