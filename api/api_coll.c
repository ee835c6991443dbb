/* The collectives of the C API (include/ddprt.h): arguments checked here with a line
 * that says which and why, then the communicator's op (transport/tp.h), or a local
 * copy in a one-process job. */
#include "api/api_int.h"
#include <stdint.h>
#include <string.h>

enum { NO_OP = -1, NO_ROOT = -1 };

/* 0, or EINVAL with this thread's error line. n: elements per rank (an allgather's
 * whole buffer, size * n, must fit too); root/op NO_* where the op has none. */
static int check(const ddprt_comm *c, const char *who, const void *a, const void *b, size_t n, int dt, int op,
                 int root)
{
    int rc = api_live(c, who);
    if (rc) return rc;
    if ((unsigned)dt >= 7) return api_fail(DDPRT_EINVAL, "%s: unknown dtype %d", who, dt);
    if (op != NO_OP && (unsigned)op >= 5) return api_fail(DDPRT_EINVAL, "%s: unknown op %d", who, op);
    if (root != NO_ROOT && (root < 0 || root >= c->world))
        return api_fail(DDPRT_EINVAL, "%s: root %d is not a rank of this job (size %d)", who, root, c->world);
    if (n > SIZE_MAX / 8 / (size_t)c->world)
        return api_fail(DDPRT_EINVAL, "%s: %zu elements is too many", who, n);
    if (n && (!a || !b)) return api_fail(DDPRT_EINVAL, "%s: a buffer is NULL (count %zu)", who, n);
    return 0;
}

static size_t es(ddprt_dtype dt) { return ddprt_dtype_size(dt); }

/* A count of 0 may come with NULL buffers: memcpy/memmove get a real (empty) place,
 * never NULL, which they may not be given even for 0 bytes. */
static unsigned char nothing[8];
#define NZ(p) ((p) ? (p) : (void *)nothing)

/* Blocking: the transport's code becomes this thread's line. */
static int done(const ddprt_comm *c, int rc) { return rc ? api_comm_fail(c, rc) : DDPRT_OK; }

int ddprt_allreduce(ddprt_comm *c, const void *send, void *recv, size_t count, ddprt_dtype dt, ddprt_op op)
{
    int rc = check(c, "ddprt_allreduce", send, recv, count, dt, op, NO_ROOT);
    if (rc) return rc;
    if (!c->tc) return memmove(NZ(recv), NZ(send), count * es(dt)), DDPRT_OK;
    return done(c, tp_allreduce(c->tc, NZ(send), NZ(recv), count, (rt_dtype)dt, (tp_op)op));
}

int ddprt_broadcast(ddprt_comm *c, void *buf, size_t count, ddprt_dtype dt, int root)
{
    int rc = check(c, "ddprt_broadcast", buf, buf, count, dt, NO_OP, root);
    if (rc || !c->tc) return rc;
    return done(c, tp_broadcast(c->tc, NZ(buf), count, (rt_dtype)dt, root));
}

int ddprt_allgather(ddprt_comm *c, const void *send, void *recv, size_t sendcount, ddprt_dtype dt)
{
    int rc = check(c, "ddprt_allgather", send, recv, sendcount, dt, NO_OP, NO_ROOT);
    if (rc) return rc;
    if (!c->tc) return memmove(NZ(recv), NZ(send), sendcount * es(dt)), DDPRT_OK;
    return done(c, tp_allgather(c->tc, NZ(send), NZ(recv), sendcount, (rt_dtype)dt));
}

/* One broadcast per rank's block: no scratch sized by the largest block, and every
 * block still travels once per link (chain broadcast). */
int ddprt_allgatherv(ddprt_comm *c, const void *send, void *recv, size_t sendcount, const size_t *recvcounts,
                     const size_t *displs, ddprt_dtype dt)
{
    int rc = check(c, "ddprt_allgatherv", send, recv, sendcount, dt, NO_OP, NO_ROOT);
    if (rc) return rc;
    if (!recvcounts) return api_fail(DDPRT_EINVAL, "ddprt_allgatherv: recvcounts is NULL");
    if (recvcounts[c->rank] != sendcount)
        return api_fail(DDPRT_EINVAL, "ddprt_allgatherv: rank %d sends %zu elements but recvcounts[%d] is %zu", c->rank,
                        sendcount, c->rank, recvcounts[c->rank]);
    size_t off = 0, total = 0;
    for (int r = 0; r < c->world; r++) {
        size_t at = displs ? displs[r] : off;
        if (recvcounts[r] > SIZE_MAX / 16 || at > SIZE_MAX / 16 - recvcounts[r])
            return api_fail(DDPRT_EINVAL, "ddprt_allgatherv: block %d is out of range", r);
        off += recvcounts[r];
        total = at + recvcounts[r] > total ? at + recvcounts[r] : total;
    }
    if (total && !recv) return api_fail(DDPRT_EINVAL, "ddprt_allgatherv: recv is NULL");
    unsigned char *out = recv;
    size_t e = es(dt);
    off = 0;
    for (int r = 0; r < c->world; r++) {
        size_t at = displs ? displs[r] : off;
        off += recvcounts[r];
        if (!recvcounts[r]) continue;
        if (r == c->rank) memmove(out + at * e, NZ(send), sendcount * e);
        if (c->tc && (rc = tp_broadcast(c->tc, out + at * e, recvcounts[r], (rt_dtype)dt, r))) return done(c, rc);
    }
    return DDPRT_OK;
}

/* Pairwise exchanges over the transport's ordered send/recv: every rank takes its
 * pairs in increasing (lower rank, higher rank) order and the lower rank sends first,
 * so the smallest unfinished pair is always the next one of both its ranks: no
 * deadlock even where a send waits for its receiver. Counts must agree pairwise
 * (sendcounts[q] here == recvcounts[rank] at q): the callers exchange them first. */
int ddprt_alltoallv(ddprt_comm *c, const void *send, const size_t *sendcounts, const size_t *sdispls, void *recv,
                    const size_t *recvcounts, const size_t *rdispls, ddprt_dtype dt)
{
    int rc = check(c, "ddprt_alltoallv", send, recv, 0, dt, NO_OP, NO_ROOT);
    if (rc) return rc;
    if (!sendcounts || !recvcounts) return api_fail(DDPRT_EINVAL, "ddprt_alltoallv: sendcounts or recvcounts is NULL");
    size_t e = es(dt), so = 0, ro = 0, stot = 0, rtot = 0;
    for (int q = 0; q < c->world; q++) {
        size_t sa = sdispls ? sdispls[q] : so, ra = rdispls ? rdispls[q] : ro;
        if (sendcounts[q] > SIZE_MAX / 16 / e || sa > SIZE_MAX / 16 / e - sendcounts[q] ||
            recvcounts[q] > SIZE_MAX / 16 / e || ra > SIZE_MAX / 16 / e - recvcounts[q])
            return api_fail(DDPRT_EINVAL, "ddprt_alltoallv: block %d is out of range", q);
        so += sendcounts[q], ro += recvcounts[q];
        stot = sa + sendcounts[q] > stot ? sa + sendcounts[q] : stot;
        rtot = ra + recvcounts[q] > rtot ? ra + recvcounts[q] : rtot;
    }
    if ((stot && !send) || (rtot && !recv)) return api_fail(DDPRT_EINVAL, "ddprt_alltoallv: a buffer is NULL");
    if (sendcounts[c->rank] != recvcounts[c->rank])
        return api_fail(DDPRT_EINVAL, "ddprt_alltoallv: rank %d sends itself %zu elements but expects %zu", c->rank,
                        sendcounts[c->rank], recvcounts[c->rank]);
    const unsigned char *in = send;
    unsigned char *out = recv;
    so = ro = 0;
    for (int q = 0; q < c->world; q++) {
        size_t sa = sdispls ? sdispls[q] : so, ra = rdispls ? rdispls[q] : ro;
        so += sendcounts[q], ro += recvcounts[q];
        const unsigned char *sp = in + sa * e;
        unsigned char *rp = out + ra * e;
        if (q == c->rank) {
            if (sendcounts[q]) memmove(rp, sp, sendcounts[q] * e);
            continue;
        }
        if (!c->tc) continue;
        int lower = c->rank < q;
        if (lower && sendcounts[q] && (rc = tp_send(c->tc, sp, sendcounts[q] * e, q))) return done(c, rc);
        if (recvcounts[q] && (rc = tp_recv(c->tc, rp, recvcounts[q] * e, q))) return done(c, rc);
        if (!lower && sendcounts[q] && (rc = tp_send(c->tc, sp, sendcounts[q] * e, q))) return done(c, rc);
    }
    return DDPRT_OK;
}

int ddprt_reduce_scatter(ddprt_comm *c, const void *send, void *recv, size_t recvcount, ddprt_dtype dt, ddprt_op op)
{
    int rc = check(c, "ddprt_reduce_scatter", send, recv, recvcount, dt, op, NO_ROOT);
    if (rc) return rc;
    if (!c->tc) return memmove(NZ(recv), NZ(send), recvcount * es(dt)), DDPRT_OK;
    return done(c, tp_reduce_scatter(c->tc, NZ(send), NZ(recv), recvcount, (rt_dtype)dt, (tp_op)op));
}

int ddprt_barrier(ddprt_comm *c)
{
    int rc = check(c, "ddprt_barrier", NULL, NULL, 0, DDPRT_UINT8, NO_OP, NO_ROOT);
    if (rc || !c->tc) return rc;
    return done(c, tp_barrier(c->tc));
}

/* ---- asynchronous ------------------------------------------------------------------- */

/* A request for an op issued with rc (0 queued; else it failed at issue). */
static int issued(ddprt_comm *c, ddprt_request *r, int rc, ddprt_request **out)
{
    if (rc) {
        api_req_put(r);
        return api_comm_fail(c, rc);
    }
    *out = r;
    return DDPRT_OK;
}

/* A one-process job's op: already done. */
static int local(ddprt_request *r, ddprt_request **out)
{
    r->local_rc = 0;
    *out = r;
    return DDPRT_OK;
}

#define ASYNC_BEGIN(who, a, b, n, dt, op, root)                    \
    ddprt_request *r;                                             \
    if (!out) return api_fail(DDPRT_EINVAL, "%s: req is NULL", who); \
    *out = NULL;                                                  \
    int rc = check(c, who, a, b, n, dt, op, root);                \
    if (rc) return rc;                                            \
    if (!(r = api_req_get(c))) return DDPRT_EBUSY

int ddprt_iallreduce(ddprt_comm *c, const void *send, void *recv, size_t count, ddprt_dtype dt, ddprt_op op,
                     ddprt_request **out)
{
    ASYNC_BEGIN("ddprt_iallreduce", send, recv, count, dt, op, NO_ROOT);
    if (!c->tc) return memmove(NZ(recv), NZ(send), count * es(dt)), local(r, out);
    return issued(c, r, tp_iallreduce(c->tc, NZ(send), NZ(recv), count, (rt_dtype)dt, (tp_op)op, &r->h), out);
}

int ddprt_ibroadcast(ddprt_comm *c, void *buf, size_t count, ddprt_dtype dt, int root, ddprt_request **out)
{
    ASYNC_BEGIN("ddprt_ibroadcast", buf, buf, count, dt, NO_OP, root);
    if (!c->tc) return local(r, out);
    return issued(c, r, tp_ibroadcast(c->tc, NZ(buf), count, (rt_dtype)dt, root, &r->h), out);
}

int ddprt_iallgather(ddprt_comm *c, const void *send, void *recv, size_t sendcount, ddprt_dtype dt,
                     ddprt_request **out)
{
    ASYNC_BEGIN("ddprt_iallgather", send, recv, sendcount, dt, NO_OP, NO_ROOT);
    if (!c->tc) return memmove(NZ(recv), NZ(send), sendcount * es(dt)), local(r, out);
    return issued(c, r, tp_iallgather(c->tc, NZ(send), NZ(recv), sendcount, (rt_dtype)dt, &r->h), out);
}

int ddprt_ireduce_scatter(ddprt_comm *c, const void *send, void *recv, size_t recvcount, ddprt_dtype dt,
                          ddprt_op op, ddprt_request **out)
{
    ASYNC_BEGIN("ddprt_ireduce_scatter", send, recv, recvcount, dt, op, NO_ROOT);
    if (!c->tc) return memmove(NZ(recv), NZ(send), recvcount * es(dt)), local(r, out);
    return issued(c, r, tp_ireduce_scatter(c->tc, NZ(send), NZ(recv), recvcount, (rt_dtype)dt, (tp_op)op, &r->h), out);
}
