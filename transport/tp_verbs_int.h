/* RDMA verbs backend internals shared by tp_verbs.c (data path) and tp_verbs_setup.c
 * (device, port, GID, queue pairs, address exchange). Only these two files (and this
 * header) include <infiniband/verbs.h>.
 *
 * Wire protocol, per ordered pair of ranks (one RC queue pair each way):
 *  - the receiver owns TP_VERBS_NSLOT slots of `slot` bytes for each peer inside its
 *    staging arena (registered once, at start-up);
 *  - a message is cut into segments of at most `slot` bytes; segment i goes by RDMA
 *    WRITE WITH IMMEDIATE into the receiver's slot (i mod NSLOT), the immediate
 *    carrying the segment length and a last-segment flag;
 *  - the sender may only write into a slot it holds a credit for (NSLOT to begin
 *    with); the receiver copies a slot out into the posted recv buffer and hands the
 *    slot back with a zero-length WRITE WITH IMMEDIATE carrying a credit count. So a
 *    slow receiver is never overwritten, and at most NSLOT data + NSLOT credit
 *    messages are ever in flight towards a rank: the receive queue (2 * NSLOT + 2)
 *    cannot run dry, so receiver-not-ready never happens by design. */
#ifndef TP_VERBS_INT_H
#define TP_VERBS_INT_H
#include "transport/tp_backend.h"
#include <infiniband/verbs.h>
#include <poll.h>
#include <stddef.h>
#include <stdint.h>

#define TP_VERBS_NSLOT 8
#define TP_VERBS_SQ (2 * TP_VERBS_NSLOT + 4)   /* data + credit writes in flight */
#define TP_VERBS_RQ (2 * TP_VERBS_NSLOT + 2)
/* The immediate (host order here; big-endian on the wire). */
#define TP_IMM_CREDIT 0x80000000u
#define TP_IMM_LAST 0x40000000u
#define TP_IMM_LEN 0x3fffffffu
/* wr_id: peer << 32 | kind << 16 | slot. */
enum { TP_WR_DATA = 1, TP_WR_CREDIT = 2, TP_WR_RECV = 3 };
#define TP_WRID(peer, kind, slot) ((uint64_t)(peer) << 32 | (uint64_t)(kind) << 16 | (uint64_t)(slot))

/* What each rank publishes through the bootstrap: its port address, its arena's
 * rkey and base, and the QP number it created for each peer (qpn[world] follows). */
typedef struct tp_verbs_addr {
    uint8_t gid[16];
    uint32_t rkey, lid, mtu, link_layer;
    uint64_t base;          /* arena address; my slots for peer j at base + j * stride */
    uint64_t stride;
    uint32_t slot, pad;
    char why[96];           /* "" = ready; else why this rank cannot use verbs */
    uint32_t qpn[];         /* flexible: world entries */
} tp_verbs_addr;

typedef struct tp_verbs_peer {
    struct ibv_qp *qp;
    uint64_t raddr;         /* peer's slots for us */
    uint32_t rkey;
    /* Send side. sq: FIFO of posted sends (head being segmented). */
    tp_req *sq, *sq_tail;
    int64_t sq_since;
    int credits;            /* slots of the peer we may write into */
    unsigned snext;         /* next remote slot (segment counter) */
    int sq_out;             /* our work requests in flight on this QP */
    uint8_t sbusy[TP_VERBS_NSLOT];     /* staging slot still being read by the HCA */
    tp_req *zc_req[TP_VERBS_NSLOT];    /* zero-copy send completed by this slot's CQE */
    int head_zc;            /* the head send goes straight from a registered buffer */
    int zc_pending;         /* zero-copy sends waiting for their last CQE */
    /* Receive side. */
    tp_req *rq, *rq_tail;
    int64_t rq_since;
    unsigned rarrived, rconsumed;      /* segment counters */
    uint32_t rimm[TP_VERBS_NSLOT];     /* immediate of each arrived, unconsumed slot */
    int credit_owed;        /* slots consumed but not yet handed back */
    /* Failure of this peer's link noticed while nothing was queued for it (a credit
     * write to a rank that already finished): reported when work for it appears. */
    int dead;
    char dead_why[200];
    int64_t closed_at;      /* side channel closed (0 = open): grace for in-flight CQEs */
} tp_verbs_peer;

typedef struct tp_verbs_mr { void *base; size_t len; struct ibv_mr *mr; } tp_verbs_mr;

typedef struct verbs_backend {
    tp_backend b;           /* first: the public part */
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_comp_channel *ch;
    struct ibv_cq *cq;
    int port, gid_index, link_layer;
    uint32_t mtu, lid;      /* active MTU (enum ibv_mtu), LID */
    uint8_t gid[16];
    char dev_name[64];
    /* Staging arena: [world][2][NSLOT] slots: for peer j, NSLOT receive slots (the
     * peer writes there) then NSLOT send staging slots. */
    unsigned char *arena;
    size_t arena_len, slot, stride;
    struct ibv_mr *arena_mr;
    tp_verbs_mr mrs[8];     /* register_mem regions (comm scratch) */
    int nmrs;
    tp_verbs_peer *peers;   /* [world] */
    /* Side channel: a TCP mesh carrying nothing but abort reasons; a peer that dies
     * closes it, which RDMA alone would only show when we next write to that peer. */
    tp_backend *side;
    double timeout_s;
    int64_t spin_ns;
    int armed;              /* CQ notification requested and not yet consumed */
    int64_t next_side_check;
    struct pollfd *pfds;    /* [world + 2] */
    int *pfd_peer;
    /* Test-only fault injection (DDPRT_VERBS_TEST_FAULT=qperr:RANK[:N]). */
    int fault_qperr_after;  /* > 0: force the QP to the right neighbour to ERR after N posts */
    long posts;
} verbs_backend;

/* tp_verbs_setup.c */
int tp_verbs_open(verbs_backend *v, const tp_bootstrap *bs, char *err, size_t errlen);
void tp_verbs_close(verbs_backend *v);
/* Look at the side channel at least this often (it is in the poll set too). */
#define TP_VERBS_SIDE_CHECK_NS 100000000LL

/* tp_verbs_fail.c: failing (the first failure wins: err = shown, root = the cause
 * forwarded to the peers; returns the code), the side channel, bad completions. */
int tp_verbs_fail_with(verbs_backend *v, int code, const char *root, const char *shown);
int tp_verbs_failf(verbs_backend *v, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int tp_verbs_has_work(const tp_verbs_peer *p);
int tp_verbs_side_fd(verbs_backend *v, int j);
/* Abort frame from any rank: fail now; a closed peer with work left: fail after a
 * grace period. 0 or the failure code. */
int tp_verbs_check_side(verbs_backend *v);
int tp_verbs_on_bad_wc(verbs_backend *v, const struct ibv_wc *wc);
const char *tp_verbs_qp_state(struct ibv_qp *qp);
/* A receive for peer's next WRITE WITH IMMEDIATE (which consumes one but places no data
 * through it): set-up posts the first ones, the data path one per completion. */
static inline int tp_verbs_post_recv(verbs_backend *v, int peer)
{
    struct ibv_recv_wr wr = {.wr_id = TP_WRID(peer, TP_WR_RECV, 0)}, *bad = NULL;
    return ibv_post_recv(v->peers[peer].qp, &wr, &bad);
}
/* tp_verbs.c */
extern const tp_backend_ops tp_verbs_ops;
#endif
