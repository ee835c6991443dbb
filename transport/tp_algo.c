/* Latency-optimal algorithms for small messages: recursive-doubling allreduce,
 * binomial-tree broadcast, dissemination barrier; and the message helpers. */
#include "transport/tp_comm_int.h"
#include "transport/tp_reduce.h"
#include <string.h>

int tp_waitreqs(tp_comm *c, tp_req **r, int n)
{
    /* For the stall watch: the peer this rank waits on, i.e. receives from (state is
     * not read here: a loopback peer's thread may be writing it). */
    int peer = n ? r[0]->peer : -1;
    for (int i = 0; i < n; i++)
        if (r[i]->kind == TP_REQ_RECV) { peer = r[i]->peer; break; }
    __atomic_store_n(&c->p_wait_peer, peer, __ATOMIC_RELAXED);
    int rc = tp_link_waitall(c, r, n, c->deadline);
    __atomic_store_n(&c->p_wait_peer, -1, __ATOMIC_RELAXED);
    return rc;
}

int tp_xfer(tp_comm *c, const void *sbuf, size_t slen, int to, void *rbuf, size_t rlen, int from)
{
    tp_req *w[2];
    int n = 0, rc = 0;
    /* Receive posted first: a peer's send can then complete at once. */
    if (rlen) {
        rc = tp_link_irecv(c, from, rbuf, rlen, &c->req[0]);
        w[n++] = &c->req[0];
    }
    if (slen && !rc) {
        rc = tp_link_isend(c, to, sbuf, slen, &c->req[1]);
        w[n++] = &c->req[1];
    }
    return rc ? rc : n ? tp_waitreqs(c, w, n) : 0;
}

/* Recursive doubling on one piece that fits the scratch buffer. Non-power-of-two
 * worlds (MPICH's scheme): of the first 2 * rem ranks, each even rank hands its
 * vector to the odd rank above and waits for the result; the remaining p ranks (a
 * power of two) exchange with partner vr ^ mask for log2(p) rounds. Operands are
 * always combined lower rank first, so both partners compute identical bits. */
static int rd_piece(tp_comm *c, unsigned char *buf, size_t m, rt_dtype dt, tp_op op)
{
    int n = c->world, r = c->rank, p = 1, rc;
    size_t bytes = m * rt_dtype_size(dt);
    unsigned char *tmp = c->rdbuf;
    while (p * 2 <= n) p *= 2;
    int rem = n - p, vr;
    if (r < 2 * rem) {
        if (r % 2 == 0) {
            if ((rc = tp_xfer(c, buf, bytes, r + 1, NULL, 0, -1))) return rc;
            return tp_xfer(c, NULL, 0, -1, buf, bytes, r + 1);
        }
        if ((rc = tp_xfer(c, NULL, 0, -1, tmp, bytes, r - 1))) return rc;
        tp_reduce(buf, tmp, buf, m, dt, op);
        vr = r / 2;
    } else {
        vr = r - rem;
    }
    for (int mask = 1; mask < p; mask <<= 1) {
        int vp = vr ^ mask, peer = vp < rem ? vp * 2 + 1 : vp + rem;
        if ((rc = tp_xfer(c, buf, bytes, peer, tmp, bytes, peer))) return rc;
        if (peer < r) tp_reduce(buf, tmp, buf, m, dt, op);
        else tp_reduce(buf, buf, tmp, m, dt, op);
    }
    if (r < 2 * rem) return tp_xfer(c, buf, bytes, r - 1, NULL, 0, -1);
    return 0;
}

int tp_rd_allreduce(tp_comm *c, const void *send, void *recv, size_t count, rt_dtype dt, tp_op op)
{
    size_t es = rt_dtype_size(dt), piece = c->chunk / es;
    unsigned char *buf = recv;
    if (count == 0) return 0;
    if (send != recv) memcpy(recv, send, count * es);
    if (c->world == 1) return 0;
    /* Forced rd on a big vector: independent pieces, each as big as the scratch. */
    for (size_t off = 0; off < count; off += piece) {
        size_t m = count - off < piece ? count - off : piece;
        int rc = rd_piece(c, buf + off * es, m, dt, op);
        if (rc) return rc;
    }
    if (op == TP_AVG) tp_avg_finish(recv, count, dt, c->world);
    return 0;
}

/* Binomial tree: log2(world) rounds; in virtual ranks (root = 0) rank v receives from
 * v minus its lowest set bit, then sends to v + 2^k for the lower bits k. */
int tp_tree_broadcast(tp_comm *c, void *buf, size_t bytes, int root)
{
    int n = c->world, vr = (c->rank - root + n) % n, mask = 1, rc;
    if (n == 1 || bytes == 0) return 0;
    for (; mask < n; mask <<= 1)
        if (vr & mask) {
            if ((rc = tp_xfer(c, NULL, 0, -1, buf, bytes, (vr - mask + root) % n))) return rc;
            break;
        }
    for (mask >>= 1; mask > 0; mask >>= 1)
        if (vr + mask < n && (rc = tp_xfer(c, buf, bytes, (vr + mask + root) % n, NULL, 0, -1)))
            return rc;
    return 0;
}

/* Dissemination: in round k every rank signals rank + 2^k and hears from rank - 2^k;
 * after ceil(log2 world) rounds everyone has (transitively) heard from everyone. */
int tp_dissemination_barrier(tp_comm *c)
{
    int n = c->world, r = c->rank, rc;
    unsigned char out = 1, in = 0;
    for (int k = 1; k < n; k <<= 1)
        if ((rc = tp_xfer(c, &out, 1, (r + k) % n, &in, 1, (r - k + n) % n))) return rc;
    return 0;
}
