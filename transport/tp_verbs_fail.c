/* RDMA verbs backend, failures: the sticky failed state, the side channel (a TCP
 * mesh that carries only abort reasons, and whose closing shows a peer that died),
 * and completions with an error status. Same semantics as tp_tcp: the first failure
 * fails every queued request, travels to every rank as an abort frame naming the
 * root cause, and then the connections close. */
#include "transport/tp_tcp_int.h"
#include "rt/env.h"
#include "transport/tp_verbs_int.h"
#include "ports/posix/port.h"
#include "rt/log.h"
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static int64_t close_grace_ns(void)
{
    /* A peer that finished its last op closes right away; the completions of what it
     * sent us may still be in our CQ (or the ACKs of what we sent it on the wire). */
    return (int64_t)rt_env_number(RT_ENV_VERBS_CLOSE_GRACE_MS) * 1000000LL;
}

int tp_verbs_side_fd(verbs_backend *v, int j)
{
    return v->side ? ((tcp_backend *)v->side)->peers[j].lane[0].fd : -1; /* lane 0: the side channel only needs one */
}

/* ---- failure ------------------------------------------------------------------------ */

static void fail_queue(tp_req **q, tp_req **tail, int code)
{
    for (tp_req *r = *q, *nx; r; r = nx) {
        nx = r->next;
        r->state = code;
        r->next = NULL;
    }
    *q = *tail = NULL;
}

/* Fails the backend once: err = shown text, root = the cause forwarded to peers. */
int tp_verbs_fail_with(verbs_backend *v, int code, const char *root, const char *shown)
{
    if (v->b.failed) return v->b.failed;
    v->b.failed = code;
    snprintf(v->b.err, sizeof v->b.err, "%s", shown ? shown : root);
    for (int j = 0; j < v->b.world; j++) {
        tp_verbs_peer *p = &v->peers[j];
        fail_queue(&p->sq, &p->sq_tail, code);
        fail_queue(&p->rq, &p->rq_tail, code);
        for (int k = 0; k < TP_VERBS_NSLOT; k++)
            if (p->zc_req[k]) p->zc_req[k]->state = code, p->zc_req[k] = NULL;
        p->zc_pending = 0;
        /* Stop the HCA from touching our memory on this rank's behalf. */
        if (p->qp) ibv_modify_qp(p->qp, &(struct ibv_qp_attr){.qp_state = IBV_QPS_ERR}, IBV_QP_STATE);
    }
    if (v->side) v->side->ops->abort(v->side, root); /* abort frames, then close */
    rt_debug("verbs: backend failed: %s", v->b.err);
    return code;
}

int tp_verbs_failf(verbs_backend *v, int code, const char *fmt, ...)
{
    char buf[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return tp_verbs_fail_with(v, code, buf, NULL);
}

int tp_verbs_has_work(const tp_verbs_peer *p) { return p->sq || p->rq || p->zc_pending; }

/* Peeks at peer j's side-channel socket: 2 = closed, 1 = abort frame (reason copied),
 * 0 = nothing. Nothing but abort frames ever travels on it. */
static int peek_side(verbs_backend *v, int j, char *why, size_t wlen)
{
    int fd = tp_verbs_side_fd(v, j);
    if (fd < 0) return v->peers[j].closed_at ? 2 : 0;
    struct { tcp_frame h; char why[240]; } m;
    ssize_t r = recv(fd, &m, sizeof m, MSG_PEEK | MSG_DONTWAIT);
    if (r == 0 || (r < 0 && errno != EAGAIN && errno != EINTR)) return 2;
    if (r < (ssize_t)sizeof(tcp_frame) || !(m.h.flags & TCP_FRAME_ABORT) || m.h.len > sizeof m.why ||
        (size_t)r < sizeof(tcp_frame) + m.h.len)
        return 0;
    snprintf(why, wlen, "%.*s", (int)m.h.len, m.why);
    return 1;
}

/* Side channel: an abort frame from any rank fails us at once with its reason; a
 * closed socket fails us only if we still have work with that rank after the grace
 * period (it may just have finished before us). */
int tp_verbs_check_side(verbs_backend *v)
{
    int64_t now = port_now_ns();
    v->next_side_check = now + TP_VERBS_SIDE_CHECK_NS;
    char why[240], shown[320];
    for (int j = 0; j < v->b.world; j++) {
        if (j == v->b.rank) continue;
        tp_verbs_peer *p = &v->peers[j];
        int k = peek_side(v, j, why, sizeof why);
        if (k == 1) {
            snprintf(shown, sizeof shown, "%s (reported by rank %d)", why, j);
            return tp_verbs_fail_with(v, TP_ECLOSED, why, shown);
        }
        if (k == 2 && !p->closed_at) p->closed_at = now;
    }
    for (int j = 0; j < v->b.world; j++) {
        tp_verbs_peer *p = &v->peers[j];
        if (!tp_verbs_has_work(p)) continue;
        if (p->dead) return tp_verbs_fail_with(v, TP_EIO, p->dead_why, NULL);
        if (p->closed_at && now - p->closed_at >= close_grace_ns())
            return tp_verbs_failf(v, TP_ECLOSED, "rank %d closed the connection", j);
    }
    return 0;
}

const char *tp_verbs_qp_state(struct ibv_qp *qp)
{
    struct ibv_qp_attr a;
    struct ibv_qp_init_attr ia;
    if (ibv_query_qp(qp, &a, IBV_QP_STATE, &ia)) return "unknown";
    switch (a.qp_state) {
    case IBV_QPS_RTS: return "RTS";
    case IBV_QPS_ERR: return "ERR";
    case IBV_QPS_SQE: return "SQE";
    case IBV_QPS_RTR: return "RTR";
    default: return "not ready";
    }
}

/* Our QP to peer j broke without a word from us: the peer usually knows why (it saw
 * a bad rkey, it failed first) and its abort frame is on the way; wait a moment for
 * it, so the root cause is reported rather than its echo. 1 = reason copied. */
static int await_root_cause(verbs_backend *v, int j, char *why, size_t wlen)
{
    int fd = tp_verbs_side_fd(v, j);
    int64_t until = port_now_ns() + 300000000LL;
    while (fd >= 0) {
        int k = peek_side(v, j, why, wlen);
        if (k) return k == 1;
        int64_t left = until - port_now_ns();
        if (left <= 0) return 0;
        struct pollfd pf = {fd, POLLIN | POLLRDHUP, 0};
        poll(&pf, 1, (int)(left / 1000000) + 1);
    }
    return 0;
}

/* A completion with an error status. A failed data write is always fatal; a failed
 * credit write or a flushed receive is fatal only while we have work with that rank
 * (a rank that finished and left makes our last credit write to it fail). Messages
 * name both ends: they are forwarded to every rank. */
int tp_verbs_on_bad_wc(verbs_backend *v, const struct ibv_wc *wc)
{
    int j = (int)(wc->wr_id >> 32), kind = (int)(wc->wr_id >> 16 & 0xffff), me = v->b.rank;
    tp_verbs_peer *p = &v->peers[j];
    const char *what = kind == TP_WR_DATA ? "RDMA write" : kind == TP_WR_CREDIT ? "credit write" : "receive";
    char why[200], root[240], shown[320];
    if (wc->status == IBV_WC_RETRY_EXC_ERR)
        snprintf(why, sizeof why, "rank %d did not answer rank %d: transport retry exceeded on an %s (did it "
                 "exit?)", j, me, what);
    else if (wc->status == IBV_WC_REM_ACCESS_ERR)
        snprintf(why, sizeof why, "%s from rank %d to rank %d failed: remote access error (rank %d published a "
                 "bad rkey or address)", what, me, j, j);
    else if (wc->status == IBV_WC_WR_FLUSH_ERR)
        snprintf(why, sizeof why, "queue pair from rank %d to rank %d is in the error state (state %s; %s "
                 "flushed)", me, j, tp_verbs_qp_state(p->qp), what);
    else
        snprintf(why, sizeof why, "%s from rank %d to rank %d failed: %s (status %d, vendor error 0x%x)", what,
                 me, j, ibv_wc_status_str(wc->status), (int)wc->status, wc->vendor_err);
    if (kind == TP_WR_DATA || tp_verbs_has_work(p)) {
        if (wc->status == IBV_WC_WR_FLUSH_ERR && !v->fault_qperr_after && await_root_cause(v, j, root, sizeof root)) {
            snprintf(shown, sizeof shown, "%s (reported by rank %d)", root, j);
            return tp_verbs_fail_with(v, TP_EIO, root, shown);
        }
        return tp_verbs_fail_with(v, TP_EIO, why, NULL);
    }
    if (!p->dead) {
        p->dead = 1;
        snprintf(p->dead_why, sizeof p->dead_why, "%s", why);
        rt_debug("verbs: link to rank %d failed while idle: %s", j, why);
    }
    if (kind == TP_WR_CREDIT) p->sq_out--;
    return 0;
}
