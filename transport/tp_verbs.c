/* RDMA verbs backend, data path (protocol: transport/tp_verbs_int.h). Driven from
 * waitall/test by one thread:
 *  - sends are cut into slot-sized segments and written (RDMA WRITE WITH IMMEDIATE)
 *    into the receiver's slots while we hold credits; a segment is copied into a send
 *    staging slot first, unless the whole message lies in memory given to
 *    register_mem (comm scratch), which the HCA reads directly (zero copy);
 *  - a staged send is complete once its last segment is posted (its bytes are in
 *    our staging, as TCP's are in the socket buffer); a zero-copy one when the HCA
 *    reports its last write done;
 *  - arrived segments wait in their slot until a recv is posted, then are copied out
 *    in order, and the slots go back to the sender as credits;
 *  - completions: busy-poll the CQ for spin_ns after the last progress, then arm the
 *    CQ and sleep in poll() on the completion channel (plus the async event fd and
 *    the side channel), at most 100 ms at a time, until the deadline;
 *  - failure (tp_verbs_fail.c): as TCP. Every queued request fails, the root cause
 *    goes to every rank over the side channel (an abort frame, then close), the QPs
 *    go to the error state. A peer that dies is seen as its side-channel socket
 *    closing, or as a transport retry exceeded on a write to it. */
#include "transport/tp_verbs_int.h"
#include "rt/env.h"
#include "ports/posix/port.h"
#include "rt/log.h"
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- posting ------------------------------------------------------------------------ */

static void maybe_inject_qperr(verbs_backend *v)
{
    if (!v->fault_qperr_after || ++v->posts != v->fault_qperr_after) return;
    int j = (v->b.rank + 1) % v->b.world;
    rt_warn("verbs: test fault: forcing the queue pair to rank %d into the error state", j);
    ibv_modify_qp(v->peers[j].qp, &(struct ibv_qp_attr){.qp_state = IBV_QPS_ERR}, IBV_QP_STATE);
}

static int post_write(verbs_backend *v, int j, int kind, unsigned k, void *src, uint32_t lkey, size_t len,
                      uint32_t imm)
{
    tp_verbs_peer *p = &v->peers[j];
    maybe_inject_qperr(v);
    struct ibv_sge sge = {.addr = (uint64_t)(uintptr_t)src, .length = (uint32_t)len, .lkey = lkey};
    struct ibv_send_wr wr = {.wr_id = TP_WRID(j, kind, k), .sg_list = len ? &sge : NULL, .num_sge = len ? 1 : 0,
                             .opcode = IBV_WR_RDMA_WRITE_WITH_IMM, .send_flags = IBV_SEND_SIGNALED,
                             .imm_data = htonl(imm)}, *bad = NULL;
    wr.wr.rdma.remote_addr = p->raddr + (uint64_t)k * v->slot;
    wr.wr.rdma.rkey = p->rkey;
    int rc = ibv_post_send(p->qp, &wr, &bad);
    if (rc)
        return tp_verbs_failf(v, TP_EIO, "posting an %s from rank %d to rank %d failed: %s (queue pair state %s)",
                     kind == TP_WR_DATA ? "RDMA write" : "credit write", v->b.rank, j, strerror(rc),
                     tp_verbs_qp_state(p->qp));
    p->sq_out++;
    return 0;
}

/* lkey of a register_mem region holding [buf, buf + len), else 0. */
static uint32_t zc_lkey(const verbs_backend *v, const void *buf, size_t len)
{
    const unsigned char *b = buf;
    for (int i = 0; i < v->nmrs; i++) {
        const unsigned char *base = v->mrs[i].base;
        if (b >= base && b + len <= base + v->mrs[i].len) return v->mrs[i].mr->lkey;
    }
    return 0;
}

/* Posts as many segments of the queued sends to peer j as credits allow. */
static int progress_send(verbs_backend *v, int j)
{
    tp_verbs_peer *p = &v->peers[j];
    int moved = 0;
    while (p->sq) {
        tp_req *r = p->sq;
        uint32_t zl = p->head_zc ? zc_lkey(v, r->buf, r->len) : 0;
        for (;;) {
            unsigned k = p->snext % TP_VERBS_NSLOT;
            /* One send WR stays free for handing back credits. */
            if (!p->credits || p->sbusy[k] || p->sq_out >= TP_VERBS_SQ - 1) return moved;
            size_t seg = r->len - r->done < v->slot ? r->len - r->done : v->slot;
            int last = r->done + seg == r->len;
            unsigned char *src = (unsigned char *)r->buf + r->done;
            uint32_t lkey = zl;
            if (!zl) {
                unsigned char *st = v->arena + (size_t)j * v->stride + (TP_VERBS_NSLOT + k) * v->slot;
                memcpy(st, src, seg);
                src = st;
                lkey = v->arena_mr->lkey;
            }
            int rc = post_write(v, j, TP_WR_DATA, k, src, lkey, seg, (uint32_t)seg | (last ? TP_IMM_LAST : 0));
            if (rc) return rc;
            p->credits--;
            p->snext++;
            p->sbusy[k] = 1;
            r->done += seg;
            moved = 1;
            if (!last) continue;
            if (zl) { p->zc_req[k] = r; p->zc_pending++; } /* complete at its CQE */
            else r->state = 1;
            break;
        }
        p->sq = r->next;
        if (!p->sq) p->sq_tail = NULL;
        r->next = NULL;
        if (p->sq) {
            p->sq_since = port_now_ns();
            p->head_zc = zc_lkey(v, p->sq->buf, p->sq->len) != 0;
        }
    }
    return moved;
}

/* Copies arrived segments into the posted recvs, in order; owes the slots back. */
static int drain_recv(verbs_backend *v, int j)
{
    tp_verbs_peer *p = &v->peers[j];
    int moved = 0;
    while (p->rq && p->rconsumed != p->rarrived) {
        tp_req *r = p->rq;
        unsigned k = p->rconsumed % TP_VERBS_NSLOT;
        uint32_t imm = p->rimm[k];
        size_t seg = imm & TP_IMM_LEN;
        int last = (imm & TP_IMM_LAST) != 0;
        if (r->done + seg > r->len || (last && r->done + seg != r->len))
            return tp_verbs_failf(v, TP_EIO, "protocol error: rank %d sent a message of %s%zu bytes, the posted recv "
                         "expects %zu", j, last ? "" : "more than ", r->done + seg, r->len);
        memcpy((unsigned char *)r->buf + r->done, v->arena + (size_t)j * v->stride + k * v->slot, seg);
        r->done += seg;
        p->rconsumed++;
        p->credit_owed++;
        moved = 1;
        if (!last) continue;
        r->state = 1;
        p->rq = r->next;
        if (!p->rq) p->rq_tail = NULL;
        r->next = NULL;
        if (p->rq) p->rq_since = port_now_ns();
    }
    /* Credits go back in batches of half the slots: one write per message would
     * double the completions (and wake-ups) of a latency-bound exchange. Safe: a
     * sender without credits means every slot is owed or still unread. */
    if (p->credit_owed >= TP_VERBS_NSLOT / 2 && p->sq_out < TP_VERBS_SQ) {
        int rc = post_write(v, j, TP_WR_CREDIT, 0, NULL, 0, 0, TP_IMM_CREDIT | (uint32_t)p->credit_owed);
        if (rc) return rc;
        p->credit_owed = 0;
        moved = 1;
    }
    return moved;
}

/* Empties the CQ. 1 = something completed, 0 = nothing, < 0 = failed. */
static int poll_cq(verbs_backend *v)
{
    struct ibv_wc wc[32];
    int moved = 0, n;
    while ((n = ibv_poll_cq(v->cq, 32, wc)) > 0) {
        moved = 1;
        for (int i = 0; i < n; i++) {
            int j = (int)(wc[i].wr_id >> 32), kind = (int)(wc[i].wr_id >> 16 & 0xffff);
            unsigned k = (unsigned)(wc[i].wr_id & 0xffff);
            tp_verbs_peer *p = &v->peers[j];
            if (wc[i].status != IBV_WC_SUCCESS) {
                int rc = tp_verbs_on_bad_wc(v, &wc[i]);
                if (rc) return rc;
                continue;
            }
            if (kind == TP_WR_CREDIT) { p->sq_out--; continue; }
            if (kind == TP_WR_DATA) {
                p->sq_out--;
                p->sbusy[k] = 0;
                if (p->zc_req[k]) { p->zc_req[k]->state = 1; p->zc_req[k] = NULL; p->zc_pending--; }
                continue;
            }
            uint32_t imm = ntohl(wc[i].imm_data);
            if (!(wc[i].wc_flags & IBV_WC_WITH_IMM))
                return tp_verbs_failf(v, TP_EIO, "protocol error: rank %d sent a message without an immediate", j);
            if (imm & TP_IMM_CREDIT) {
                p->credits += (int)(imm & TP_IMM_LEN);
            } else {
                if (p->rarrived - p->rconsumed >= TP_VERBS_NSLOT)
                    return tp_verbs_failf(v, TP_EIO, "protocol error: rank %d wrote into a slot it held no credit for", j);
                p->rimm[p->rarrived % TP_VERBS_NSLOT] = imm;
                p->rarrived++;
            }
            if (tp_verbs_post_recv(v, j))
                return tp_verbs_failf(v, TP_EIO, "cannot post a receive for rank %d (queue pair state %s)", j,
                             tp_verbs_qp_state(p->qp));
        }
    }
    if (n < 0) return tp_verbs_failf(v, TP_EIO, "polling the completion queue of %s failed", v->dev_name);
    return moved;
}

static int progress_all(verbs_backend *v)
{
    int moved = poll_cq(v);
    if (moved < 0) return moved;
    for (int j = 0; j < v->b.world; j++) {
        tp_verbs_peer *p = &v->peers[j];
        if (j == v->b.rank) continue;
        int r = drain_recv(v, j);
        if (r < 0) return r;
        moved |= r;
        if (p->sq) {
            if ((r = progress_send(v, j)) < 0) return r;
            moved |= r;
        }
        if (p->dead && tp_verbs_has_work(p)) return tp_verbs_fail_with(v, TP_EIO, p->dead_why, NULL);
    }
    return moved;
}

/* ---- blocking ----------------------------------------------------------------------- */

static const char *async_name(enum ibv_event_type t)
{
    switch (t) {
    case IBV_EVENT_QP_FATAL: return "QP fatal error";
    case IBV_EVENT_QP_REQ_ERR: return "QP invalid request";
    case IBV_EVENT_QP_ACCESS_ERR: return "QP access error";
    case IBV_EVENT_PORT_ERR: return "port went down";
    case IBV_EVENT_DEVICE_FATAL: return "device fatal error";
    case IBV_EVENT_CQ_ERR: return "CQ overrun";
    default: return NULL;
    }
}

/* Reads the async events; a fatal one fails the backend, naming the peer's QP. */
static int drain_async(verbs_backend *v)
{
    struct ibv_async_event ev;
    while (!ibv_get_async_event(v->ctx, &ev)) {
        const char *name = async_name(ev.event_type);
        int peer = -1;
        for (int j = 0; name && j < v->b.world; j++)
            if (v->peers[j].qp && v->peers[j].qp == ev.element.qp) peer = j;
        ibv_ack_async_event(&ev);
        if (!name) continue;
        if (peer >= 0) return tp_verbs_failf(v, TP_EIO, "queue pair from rank %d to rank %d: %s", v->b.rank, peer, name);
        return tp_verbs_failf(v, TP_EIO, "%s: %s", v->dev_name, name);
    }
    return 0;
}

/* Sleeps until a completion, an async event, side-channel news, 100 ms or the
 * deadline. The CQ is armed first and polled once more before sleeping (an event
 * for a completion that arrived before arming would never come). */
static int block_once(verbs_backend *v, int64_t deadline)
{
    if (!v->armed) {
        if (ibv_req_notify_cq(v->cq, 0)) return tp_verbs_failf(v, TP_EIO, "cannot arm the completion queue");
        v->armed = 1;
        return 0;
    }
    int np = 0;
    v->pfds[np] = (struct pollfd){v->ch->fd, POLLIN, 0};
    v->pfd_peer[np++] = -1;
    v->pfds[np] = (struct pollfd){v->ctx->async_fd, POLLIN, 0};
    v->pfd_peer[np++] = -1;
    for (int j = 0; j < v->b.world; j++)
        if (tp_verbs_side_fd(v, j) >= 0 && !v->peers[j].closed_at) {
            v->pfds[np] = (struct pollfd){tp_verbs_side_fd(v, j), POLLIN | POLLRDHUP, 0};
            v->pfd_peer[np++] = j;
        }
    int64_t left = deadline - port_now_ns();
    int ms = left <= 0 ? 0 : (int)(left / 1000000) + 1;
    if (ms > TP_VERBS_SIDE_CHECK_NS / 1000000) ms = TP_VERBS_SIDE_CHECK_NS / 1000000;
    int r = poll(v->pfds, (nfds_t)np, ms);
    if (r < 0 && errno != EINTR) return tp_verbs_failf(v, TP_EIO, "poll: %s", strerror(errno));
    if (r <= 0) return tp_verbs_check_side(v);
    if (v->pfds[0].revents) {
        struct ibv_cq *cq;
        void *cctx;
        if (!ibv_get_cq_event(v->ch, &cq, &cctx)) {
            ibv_ack_cq_events(cq, 1);
            v->armed = 0;
        }
    }
    if (v->pfds[1].revents && drain_async(v)) return v->b.failed;
    for (int q = 2; q < np; q++)
        if (v->pfds[q].revents) return tp_verbs_check_side(v);
    return 0;
}

static int fail_timeout(verbs_backend *v, tp_req **reqs, int n)
{
    int64_t now = port_now_ns();
    for (int i = 0; i < n; i++) {
        tp_req *r = reqs[i];
        if (r->state != 0) continue;
        tp_verbs_peer *p = &v->peers[r->peer];
        int64_t since = r->kind == TP_REQ_RECV ? p->rq_since : p->sq_since;
        return tp_verbs_failf(v, TP_ETIMEOUT, "timed out after %.0f s waiting for rank %d (%s of %zu bytes)",
                     (double)(now - since) / 1e9, r->peer, r->kind == TP_REQ_RECV ? "recv" : "send", r->len);
    }
    return tp_verbs_failf(v, TP_ETIMEOUT, "timed out");
}

static int verbs_waitall(tp_backend *b, tp_req **reqs, int n, int64_t deadline_ns)
{
    verbs_backend *v = (verbs_backend *)b;
    if (b->failed) return b->failed;
    int64_t spin_until = port_now_ns() + v->spin_ns;
    for (int i = 0;;) {
        int moved = progress_all(v);
        if (moved < 0) return moved;
        while (i < n && reqs[i]->state == 1) i++;
        if (i == n) return 0;
        if (reqs[i]->state < 0) return reqs[i]->state;
        int64_t now = port_now_ns();
        if (moved) spin_until = now + v->spin_ns;
        if (now >= deadline_ns) return fail_timeout(v, reqs, n);
        if (now >= v->next_side_check) {
            int r = tp_verbs_check_side(v);
            if (r < 0) return r;
        }
        if (now < spin_until) { port_cpu_relax(); continue; }
        int r = block_once(v, deadline_ns);
        if (r < 0) return r;
    }
}

static int verbs_test(tp_backend *b, tp_req *req)
{
    verbs_backend *v = (verbs_backend *)b;
    if (b->failed) return b->failed;
    int r = progress_all(v);
    if (r < 0) return r;
    return req->state;
}

static int post(verbs_backend *v, int kind, int peer, void *buf, size_t len, tp_req *r)
{
    if (v->b.failed) return v->b.failed;
    if (peer < 0 || peer >= v->b.world || peer == v->b.rank || (!buf && len)) return TP_EINVAL;
    *r = (tp_req){.kind = kind, .peer = peer, .buf = buf, .len = len};
    tp_verbs_peer *p = &v->peers[peer];
    tp_req **q = kind == TP_REQ_SEND ? &p->sq : &p->rq, **tail = kind == TP_REQ_SEND ? &p->sq_tail : &p->rq_tail;
    if (*tail) (*tail)->next = r;
    else *q = r;
    *tail = r;
    if (*q == r) {
        if (kind == TP_REQ_SEND) {
            p->sq_since = port_now_ns();
            p->head_zc = zc_lkey(v, buf, len) != 0;
        } else {
            p->rq_since = port_now_ns();
        }
    }
    return 0;
}

static int verbs_isend(tp_backend *b, int peer, const void *buf, size_t len, tp_req *req)
{
    return post((verbs_backend *)b, TP_REQ_SEND, peer, (void *)buf, len, req);
}

static int verbs_irecv(tp_backend *b, int peer, void *buf, size_t len, tp_req *req)
{
    return post((verbs_backend *)b, TP_REQ_RECV, peer, buf, len, req);
}

/* Registers a buffer once (the comm's scratch): sends from it skip the staging copy. */
static int verbs_register_mem(tp_backend *b, void *buf, size_t len)
{
    verbs_backend *v = (verbs_backend *)b;
    if (v->nmrs == (int)(sizeof v->mrs / sizeof v->mrs[0])) return 0; /* no zero copy, still fine */
    struct ibv_mr *mr = ibv_reg_mr(v->pd, buf, len, IBV_ACCESS_LOCAL_WRITE);
    if (!mr) {
        snprintf(b->err, sizeof b->err, "ibv_reg_mr of %zu bytes failed: %s (ulimit -l?)", len, strerror(errno));
        return TP_EIO;
    }
    v->mrs[v->nmrs++] = (tp_verbs_mr){buf, len, mr};
    return 0;
}

static void verbs_abort(tp_backend *b, const char *why)
{
    tp_verbs_fail_with((verbs_backend *)b, TP_EIO, why && *why ? why : "aborted", NULL);
}

static void verbs_destroy(tp_backend *b)
{
    verbs_backend *v = (verbs_backend *)b;
    if (!v) return;
    tp_verbs_close(v);
    free(v->peers);
    free(v->pfds);
    free(v->pfd_peer);
    free(v);
}

const tp_backend_ops tp_verbs_ops = {
    .name = "verbs",
    .isend = verbs_isend,
    .irecv = verbs_irecv,
    .waitall = verbs_waitall,
    .test = verbs_test,
    .register_mem = verbs_register_mem,
    .abort = verbs_abort,
    .destroy = verbs_destroy,
};

int tp_verbs_create(const tp_bootstrap *bs, tp_backend **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!bs || bs->world < 1 || bs->rank < 0 || bs->rank >= bs->world || !bs->allgather) {
        snprintf(err, errlen, "verbs: bad bootstrap (rank/world/allgather)");
        return -1;
    }
    verbs_backend *v = calloc(1, sizeof *v);
    if (!v) { snprintf(err, errlen, "verbs: out of memory"); return -1; }
    v->b.ops = &tp_verbs_ops;
    v->b.rank = bs->rank;
    v->b.world = bs->world;
    v->timeout_s = bs->timeout_s > 0 ? bs->timeout_s : 300;
    v->spin_ns = (int64_t)rt_env_number(RT_ENV_VERBS_SPIN_US) * 1000;
    v->peers = calloc((size_t)bs->world, sizeof *v->peers);
    v->pfds = calloc((size_t)bs->world + 2, sizeof *v->pfds);
    v->pfd_peer = calloc((size_t)bs->world + 2, sizeof *v->pfd_peer);
    if (!v->peers || !v->pfds || !v->pfd_peer) {
        snprintf(err, errlen, "verbs: out of memory");
        verbs_destroy(&v->b);
        return -1;
    }
    if (tp_verbs_open(v, bs, err, errlen)) {
        verbs_destroy(&v->b);
        return -1;
    }
    *out = &v->b;
    return 0;
}
