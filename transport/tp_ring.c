/* Ring algorithms (bandwidth-optimal for large messages): allreduce = reduce-scatter
 * then allgather, plus the public reduce-scatter and allgather, and a pipelined
 * chain broadcast.
 *
 * Blocks: the vector is cut into world blocks. Allreduce splits count unevenly:
 * block b has count / world elements, plus one when b < count % world (so blocks
 * differ by at most one element and may be empty). Reduce-scatter and allgather use
 * equal blocks (NCCL's API). Rank r ends the reduce-scatter owning block r: in step s
 * it sends block r-s-1 to the right and receives block r-s-2 from the left.
 *
 * Pipelining: each block is cut into columns of at most one chunk (c->chunk bytes;
 * mid-size blocks into TP_PIPE_DEPTH columns of at least 16 KiB). A "unit"
 * is one (step, column) pair: a send to the right and a receive from the left posted
 * together (full duplex). Up to TP_PIPE_DEPTH units are in flight, so the reduction
 * of unit u overlaps the transfer of the units after it. Unit (s, col) sends what
 * unit (s-1, col) received, so the lookahead stays below the column count. */
#include "transport/tp_comm_int.h"
#include "transport/tp_reduce.h"
#include <string.h>

/* Smallest ring column: below this, per-message overhead outweighs the overlap. */
#define TP_MIN_CHUNK_BYTES (16 * 1024)

typedef tp_ring_pass ring_pass;

static int mod(int a, int n) { return ((a % n) + n) % n; }

static void block(const ring_pass *p, int b, size_t *off, size_t *cnt)
{
    if (p->bc) { *off = (size_t)b * p->bc; *cnt = p->bc; return; }
    size_t n = (size_t)p->n, q = p->count / n, rem = p->count % n, ub = (size_t)b;
    *off = ub * q + (ub < rem ? ub : rem);
    *cnt = q + (ub < rem);
}

/* Element range of column col of block b: [*off, *off + *cnt). */
static void column(const ring_pass *p, int b, int col, size_t *off, size_t *cnt)
{
    size_t bo, bn, co = (size_t)col * p->ce;
    block(p, b, &bo, &bn);
    *off = bo + co;
    *cnt = co < bn ? (bn - co < p->ce ? bn - co : p->ce) : 0;
}

static int post_unit(ring_pass *p, int u, int has[2])
{
    tp_comm *c = p->c;
    int s = u / p->ncols, col = u % p->ncols, k = u % p->depth, rc = 0;
    const void *sb;
    void *rb;
    size_t ls, lr;
    p->plan(p, s, col, u, &sb, &rb, &ls, &lr);
    ls *= p->es; /* plan speaks elements, the backend bytes */
    lr *= p->es;
    int left = p->left, right = p->right;
    /* Zero-length pieces (empty blocks, short last columns) are skipped on both
     * sides: both ends compute the same length. */
    has[0] = lr > 0;
    has[1] = ls > 0;
    if (has[0]) rc = tp_link_irecv(c, left, rb, lr, &p->req[2 * k]);
    if (!rc && has[1]) rc = tp_link_isend(c, right, sb, ls, &p->req[2 * k + 1]);
    return rc;
}

/* Posts the first units (the lookahead). */
static int ring_begin(ring_pass *p)
{
    int look = p->ncols - 1 < p->depth - 1 ? p->ncols - 1 : p->depth - 1, rc = 0;
    p->total = p->nsteps * p->ncols;
    p->u = p->posted = 0;
    for (; p->posted < p->total && p->posted <= look && !rc; p->posted++)
        rc = post_unit(p, p->posted, p->has[p->posted % p->depth]);
    return rc;
}

int tp_ring_advance(tp_ring_pass *p, int block)
{
    tp_comm *c = p->c;
    if (p->u >= p->total) return 2;
    int u = p->u, k = u % p->depth, n = 0, rc = 0;
    tp_req *w[2];
    if (p->has[k][0]) w[n++] = &p->req[2 * k];
    if (p->has[k][1]) w[n++] = &p->req[2 * k + 1];
    if (block && n && (rc = tp_waitreqs(c, w, n))) return rc;
    for (int i = 0; i < n && !block; i++)
        if ((rc = tp_link_test(c, w[i])) <= 0) return rc;
    if (p->done) p->done(p, u / p->ncols, u % p->ncols, u);
    if (p->posted < p->total) {
        if ((rc = post_unit(p, p->posted, p->has[p->posted % p->depth]))) return rc;
        p->posted++;
    }
    return ++p->u >= p->total ? 2 : 1;
}

static int ring_run(ring_pass *p)
{
    int rc = ring_begin(p);
    while (rc == 0 || rc == 1) rc = tp_ring_advance(p, 1);
    return rc < 0 ? rc : 0;
}

static void pass_init(ring_pass *p, tp_comm *c, const tp_group *g, const void *send, void *recv,
                      size_t count, size_t bc, rt_dtype dt, tp_op op)
{
    memset(p, 0, sizeof *p);
    p->c = c;
    p->slot = c->slot;
    p->req = c->req;
    p->depth = TP_PIPE_DEPTH;
    p->n = g ? g->n : c->world;
    p->me = g ? g->me : c->rank;
    p->left = g ? g->ranks[mod(g->me - 1, g->n)] : mod(c->rank - 1, c->world);
    p->right = g ? g->ranks[mod(g->me + 1, g->n)] : mod(c->rank + 1, c->world);
    p->es = rt_dtype_size(dt);
    p->ce = c->chunk / p->es;
    p->count = count;
    p->bc = bc;
    p->send = send;
    p->recv = recv;
    p->dt = dt;
    p->op = op;
    p->nsteps = p->n - 1;
    size_t off, biggest;
    block(p, 0, &off, &biggest); /* block 0 is never smaller than another */
    /* A block that fits one chunk would leave nothing to overlap: cut mid-size
     * blocks into TP_PIPE_DEPTH columns, but no smaller than TP_MIN_CHUNK_BYTES
     * (per-message costs). Depends only on values equal on every rank. */
    size_t want = (biggest + TP_PIPE_DEPTH - 1) / TP_PIPE_DEPTH, floor = TP_MIN_CHUNK_BYTES / p->es;
    if (want < floor) want = floor;
    if (want < p->ce) p->ce = want;
    p->ncols = (int)((biggest + p->ce - 1) / p->ce);
}

/* ---- allreduce ------------------------------------------------------------ */

/* Reduce-scatter half: partials live in recv; the left's piece lands in a slot. */
static void ar_rs_plan(ring_pass *p, int s, int col, int u, const void **sb, void **rb, size_t *ls,
                       size_t *lr)
{
    size_t so, ro;
    int r = p->me, n = p->n;
    column(p, mod(r - s - 1, n), col, &so, ls);
    column(p, mod(r - s - 2, n), col, &ro, lr);
    *sb = (s == 0 ? p->send : p->recv) + so * p->es;
    *rb = p->slot[u % p->depth];
}

static void ar_rs_done(ring_pass *p, int s, int col, int u)
{
    size_t o, cnt;
    int r = p->me, n = p->n;
    column(p, mod(r - s - 2, n), col, &o, &cnt);
    if (!cnt) return;
    unsigned char *dst = p->recv + o * p->es;
    /* Left's partial first, then ours: every element is reduced in ring order once. */
    tp_reduce(dst, p->slot[u % p->depth], p->send + o * p->es, cnt, p->dt, p->op);
    if (s == n - 2 && p->op == TP_AVG) tp_avg_finish(dst, cnt, p->dt, n);
}

/* Allgather half (also the public allgather): receive straight into place. */
static void ag_plan(ring_pass *p, int s, int col, int u, const void **sb, void **rb, size_t *ls,
                    size_t *lr)
{
    size_t so, ro;
    int r = p->me, n = p->n;
    (void)u;
    column(p, mod(r - s, n), col, &so, ls);
    column(p, mod(r - s - 1, n), col, &ro, lr);
    *sb = p->recv + so * p->es;
    *rb = p->recv + ro * p->es;
}

void tp_ring_block(size_t count, int n, int b, size_t *off, size_t *cnt)
{
    ring_pass p;
    memset(&p, 0, sizeof p);
    p.count = count;
    p.n = n;
    block(&p, b, off, cnt);
}

int tp_ring_half_begin(tp_ring_pass *p, tp_comm *c, const tp_group *g, int lane, int ag, const void *send,
                       void *recv, size_t count, rt_dtype dt, tp_op op)
{
    pass_init(p, c, g, send, recv, count, 0, dt, op);
    if (lane >= 0) { /* two passes at once: half the depth each (2 D requests in all) */
        p->depth = TP_PIPE_DEPTH / 2;
        p->slot = c->slot + lane * p->depth;
        p->req = c->req + lane * 2 * p->depth;
    }
    p->plan = ag ? ag_plan : ar_rs_plan;
    p->done = ag ? NULL : ar_rs_done;
    if (!ag && send != recv && count && p->n == 1) memcpy(recv, send, count * p->es);
    if (p->n == 1 || count == 0) {
        p->total = p->u = 0;
        return 0;
    }
    return ring_begin(p);
}

static int half_run(tp_comm *c, const tp_group *g, int ag, const void *send, void *recv, size_t count,
                    rt_dtype dt, tp_op op)
{
    ring_pass p;
    int rc = tp_ring_half_begin(&p, c, g, -1, ag, send, recv, count, dt, op);
    while (rc == 0 || rc == 1) rc = tp_ring_advance(&p, 1);
    return rc < 0 ? rc : 0;
}

int tp_ring_rs_half(tp_comm *c, const tp_group *g, const void *send, void *recv, size_t count, rt_dtype dt,
                    tp_op op)
{
    return half_run(c, g, 0, send, recv, count, dt, op);
}

int tp_ring_ag_half(tp_comm *c, const tp_group *g, void *recv, size_t count, rt_dtype dt)
{
    return half_run(c, g, 1, recv, recv, count, dt, TP_SUM);
}

int tp_ring_allreduce_g(tp_comm *c, const tp_group *g, const void *send, void *recv, size_t count, rt_dtype dt,
                        tp_op op)
{
    int rc = tp_ring_rs_half(c, g, send, recv, count, dt, op);
    return rc ? rc : tp_ring_ag_half(c, g, recv, count, dt);
}

int tp_ring_allreduce(tp_comm *c, const void *send, void *recv, size_t count, rt_dtype dt, tp_op op)
{
    return tp_ring_allreduce_g(c, NULL, send, recv, count, dt, op);
}

/* ---- reduce-scatter ------------------------------------------------------- */

/* recv holds only block r, so partials travel through slots: a pass handles G <=
 * TP_PIPE_DEPTH columns; unit (s, c) receives into slot (s & 1) * G + c and the next
 * step sends that slot on. A slot is refilled only after its send completed. */
static void rs_plan(ring_pass *p, int s, int col, int u, const void **sb, void **rb, size_t *ls,
                    size_t *lr)
{
    size_t so, ro;
    int r = p->me, n = p->n, g = p->ncols;
    (void)u;
    column(p, mod(r - s - 1, n), p->col0 + col, &so, ls);
    column(p, mod(r - s - 2, n), p->col0 + col, &ro, lr);
    *sb = s == 0 ? (const void *)(p->send + so * p->es) : p->slot[((s - 1) & 1) * g + col];
    *rb = p->slot[(s & 1) * g + col];
}

static void rs_done(ring_pass *p, int s, int col, int u)
{
    size_t o, cnt;
    int r = p->me, n = p->n;
    unsigned char *sl = p->slot[(s & 1) * p->ncols + col];
    (void)u;
    column(p, mod(r - s - 2, n), p->col0 + col, &o, &cnt);
    if (!cnt) return;
    if (s < n - 2) {
        tp_reduce(sl, sl, p->send + o * p->es, cnt, p->dt, p->op);
        return;
    }
    unsigned char *dst = p->recv + (o - (size_t)r * p->bc) * p->es; /* block r -> recv */
    tp_reduce(dst, sl, p->send + o * p->es, cnt, p->dt, p->op);
    if (p->op == TP_AVG) tp_avg_finish(dst, cnt, p->dt, n);
}

int tp_ring_reduce_scatter(tp_comm *c, const void *send, void *recv, size_t rcount, rt_dtype dt, tp_op op)
{
    size_t es = rt_dtype_size(dt);
    if (rcount == 0) return 0;
    if (c->world == 1) {
        if (send != recv) memmove(recv, send, rcount * es);
        return 0;
    }
    ring_pass p;
    pass_init(&p, c, NULL, send, recv, rcount * (size_t)c->world, rcount, dt, op);
    p.plan = rs_plan;
    p.done = rs_done;
    int total = p.ncols, rc = 0;
    for (int c0 = 0; c0 < total && !rc; c0 += TP_PIPE_DEPTH) {
        p.col0 = c0;
        p.ncols = total - c0 < TP_PIPE_DEPTH ? total - c0 : TP_PIPE_DEPTH;
        rc = ring_run(&p);
    }
    return rc;
}

/* ---- allgather ------------------------------------------------------------ */

int tp_ring_allgather(tp_comm *c, const void *send, void *recv, size_t scount, rt_dtype dt)
{
    size_t es = rt_dtype_size(dt), bytes = scount * es;
    unsigned char *mine = (unsigned char *)recv + (size_t)c->rank * bytes;
    if (scount == 0) return 0;
    if ((const unsigned char *)send != mine) memmove(mine, send, bytes);
    if (c->world == 1) return 0;
    ring_pass p;
    pass_init(&p, c, NULL, send, recv, scount * (size_t)c->world, scount, dt, TP_SUM);
    p.plan = ag_plan;
    return ring_run(&p);
}

/* ---- broadcast: a pipelined chain root -> root+1 -> ... ------------------- */

int tp_chain_broadcast(tp_comm *c, void *buf, size_t bytes, int root)
{
    int n = c->world, vr = mod(c->rank - root, n), rc = 0;
    int left = mod(c->rank - 1, n), right = mod(c->rank + 1, n);
    int from_left = vr > 0, to_right = vr < n - 1, D = TP_PIPE_DEPTH;
    size_t ch = c->chunk;
    long nch = (long)((bytes + ch - 1) / ch), posted = 0;
    unsigned char *p = buf;
    tp_req *rq = c->req, *sq = c->req + D;
#define LEN(j) ((size_t)(j) * ch + ch <= bytes ? ch : bytes - (size_t)(j) * ch)
    if (n == 1 || bytes == 0) return 0;
    /* Receives run D chunks ahead; chunk j goes right as soon as it has arrived. */
    for (; from_left && posted < nch && posted < D && !rc; posted++)
        rc = tp_link_irecv(c, left, p + posted * ch, LEN(posted), &rq[posted % D]);
    for (long j = 0; j < nch && !rc; j++) {
        tp_req *w = &rq[j % D];
        if (from_left) {
            if ((rc = tp_waitreqs(c, &w, 1))) break;
            if (posted < nch) {
                rc = tp_link_irecv(c, left, p + posted * ch, LEN(posted), &rq[posted % D]);
                posted++;
            }
        }
        if (to_right && !rc) {
            w = &sq[j % D];
            if (j >= D && (rc = tp_waitreqs(c, &w, 1))) break; /* send j - D frees the req */
            rc = tp_link_isend(c, right, p + j * ch, LEN(j), w);
        }
    }
    for (long j = nch - D > 0 ? nch - D : 0; to_right && j < nch && !rc; j++) {
        tp_req *w = &sq[j % D];
        rc = tp_waitreqs(c, &w, 1);
    }
#undef LEN
    return rc;
}
