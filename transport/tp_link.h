/* A peer pair's point-to-point ops (internal to transport/): the algorithms (ring,
 * tree, hierarchical, recursive doubling, chain, send/recv) move every message to or
 * from peer p through the ops of the transport chosen for that pair (tp_transport.h),
 * as NCCL's proxies run each peer's connection through its transport's send/recv. A new
 * transport (issue 42: CUDA IPC) is one more table entry with its own tp_link.
 *
 * The rules are the backend's (tp_backend.h): ordered per pair and direction, a recv of
 * len bytes matches a send of len, isend/irecv never block nor allocate, waitall keeps
 * the deadline and names the peer, an error fails the comm. */
#ifndef TP_LINK_H
#define TP_LINK_H
#include "transport/tp_backend.h"

typedef struct tp_comm tp_comm;
typedef struct tp_link {
    const char *name;
    int (*isend)(tp_comm *c, int peer, const void *buf, size_t len, tp_req *req);
    int (*irecv)(tp_comm *c, int peer, void *buf, size_t len, tp_req *req);
    /* Progress without blocking: 1 req is complete, 0 pending, < 0 error. */
    int (*test)(tp_comm *c, tp_req *req);
    /* All n requests (every one of this link) by deadline: 0 or a code. */
    int (*waitall)(tp_comm *c, tp_req **r, int n, int64_t deadline_ns);
    /* Optional (NULL: the link progresses in its own calls, as the backends do): moves
     * what it can of every posted request; how many are pending, or < 0. A wait on
     * another link calls it while it has some. */
    int (*progress)(tp_comm *c);
    /* Optional: the slow path of a wait on another link (between its naps): 0, or why
     * req cannot complete (its peer died: named in the backend's err). */
    int (*check)(tp_comm *c, tp_req *req);
} tp_link;

/* The comm's backend (tcp, verbs, loopback): what every pair used before. */
extern const tp_link tp_link_net;

/* The link of the pair (me, peer): the net backend's until the comm has connected. */
const tp_link *tp_link_of(const tp_comm *c, int peer);
static inline int tp_link_isend(tp_comm *c, int peer, const void *buf, size_t len, tp_req *req)
{
    return tp_link_of(c, peer)->isend(c, peer, buf, len, req);
}
static inline int tp_link_irecv(tp_comm *c, int peer, void *buf, size_t len, tp_req *req)
{
    return tp_link_of(c, peer)->irecv(c, peer, buf, len, req);
}
static inline int tp_link_test(tp_comm *c, tp_req *req) { return tp_link_of(c, req->peer)->test(c, req); }
/* Requests of several links, or of one while another has some pending: each link's waitall when they share one, else progress by
 * test until done or the deadline (then the pending link's waitall names the peer). */
int tp_link_waitall(tp_comm *c, tp_req **r, int n, int64_t deadline_ns);
/* Peer q's socket hung up (a shared-memory wait saw it): the backend reads what is left
 * (an abort frame with the reason, or the close) and names the rank in b->err as it
 * does without shm. Its error, or 0 when a byte arrived where none was due. */
int tp_backend_read_hangup(tp_backend *b, int q);
#endif
