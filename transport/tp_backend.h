/* The backend interface (a small vtable, as ggml_backend / gloo's transport): ordered,
 * non-blocking point-to-point messages between ranks. Algorithms (ring, recursive
 * doubling, ...) are written once on top of it; loopback, tcp and verbs implement it.
 *
 * Rules every backend keeps:
 *  - Messages between a pair of ranks are matched in posting order, per direction;
 *    a recv of len bytes matches a send of exactly len bytes.
 *  - isend/irecv never block and never allocate; the caller owns the tp_req.
 *  - waitall progresses all posted requests (not only the ones it waits for) and
 *    returns by the deadline: 0, or TP_ETIMEOUT / TP_ECLOSED / TP_EIO with b->err
 *    naming the peer rank ("rank 2 closed the connection"). On TP_ETIMEOUT write
 *    "timed out waiting for rank 3": the communicator knows the timeout and makes it
 *    "allreduce #7 (64 MiB): timed out after 30 s waiting for rank 3" (an err that
 *    already says " after " is kept as it is).
 *  - After an error the backend is failed: it closes its connections (so the failure
 *    travels to every other rank within seconds) and fails every later call.
 *  - One thread at a time calls a backend (the communicator serialises).
 *  - The communicator never posts zero-length messages, and keeps at most
 *    2 * TP_PIPE_DEPTH (tp.h) requests in flight.
 */
#ifndef TP_BACKEND_H
#define TP_BACKEND_H
#include "rt/rdzv.h"
#include <stddef.h>
#include <stdint.h>

enum { TP_OK = 0, TP_EIO = -1, TP_ETIMEOUT = -2, TP_ECLOSED = -3, TP_EINVAL = -4 };
enum { TP_REQ_SEND = 1, TP_REQ_RECV = 2 };

typedef struct tp_req {
    int kind, peer;
    void *buf;
    size_t len, done;       /* bytes moved so far */
    int state;              /* 0 pending, 1 complete, < 0 error code */
    int lane;               /* tcp: the socket of the peer's set it travels on */
    struct tp_req *next;    /* backend's per-peer queue link */
} tp_req;

typedef struct tp_backend tp_backend;
typedef struct tp_backend_ops {
    const char *name; /* "loopback", "tcp", "verbs" */
    int (*isend)(tp_backend *b, int peer, const void *buf, size_t len, tp_req *req);
    int (*irecv)(tp_backend *b, int peer, void *buf, size_t len, tp_req *req);
    int (*waitall)(tp_backend *b, tp_req **reqs, int n, int64_t deadline_ns);
    /* Progress without blocking: 1 when req is complete, 0 pending, < 0 error. */
    int (*test)(tp_backend *b, tp_req *req);
    /* Optional (may be NULL): register a buffer once at start-up so later transfers
     * from/to it need no copy (verbs: ibv_reg_mr). */
    int (*register_mem)(tp_backend *b, void *buf, size_t len);
    /* Fails the backend on purpose (another rank reported an error); wakes waiters. */
    void (*abort)(tp_backend *b, const char *why);
    void (*destroy)(tp_backend *b);
    /* Optional (may be NULL): a descriptor that reports peer's death as a hang-up
     * (POLLRDHUP), or -1. Shared memory (tp_transport.h) needs it: its waits look there,
     * then irecv names the peer as the backend would. */
    int (*peer_fd)(tp_backend *b, int peer);
} tp_backend_ops;

struct tp_backend {
    const tp_backend_ops *ops;
    int rank, world;
    int failed;             /* sticky error code once failed */
    char err[256];          /* one line: what failed, which peer */
    struct tp_watch *watch; /* stall watch (tp_backend_create adds it; the comm owns it) */
};

/* How a backend meets its peers: an allgather over the rendezvous (tp_bootstrap_rdzv)
 * or a test's in-process fake. */
typedef struct tp_bootstrap {
    void *ctx;
    int rank, world, local_rank;
    uint64_t token_hash;    /* peers present it on connect; 0 = no token */
    double timeout_s;
    int (*allgather)(void *ctx, const void *mine, size_t len, void *all, char *err, size_t errlen);
    /* This rank's IPv4 address on the route to the rendezvous ("" = unknown): the
     * address a backend publishes, so that peers on other hosts can dial it. */
    char self_ip[48];
} tp_bootstrap;

/* bs over the rendezvous r (rt/rdzv.h), which must outlive the backends made with it. */
void tp_bootstrap_rdzv(tp_bootstrap *bs, rt_rdzv *r);

/* Loopback: world ranks as threads in one process; out[r] is rank r's backend. */
int tp_loopback_create(int world, tp_backend **out);
/* TCP: connects to the peers through the bootstrap; 0 or -1 with err. */
int tp_tcp_create(const tp_bootstrap *bs, tp_backend **out, char *err, size_t errlen);
/* RDMA verbs (RC queue pairs; DDPRT_IB_HCA, DDPRT_IB_GID_INDEX): 0 or -1 with err. In a
 * build without libibverbs it always fails, saying so. */
int tp_verbs_create(const tp_bootstrap *bs, tp_backend **out, char *err, size_t errlen);
/* 1 when an RDMA device with an active port can be used (desc: "rxe0 port 1 (RoCE, GID
 * index 1)"), else 0 (desc: why not). For --backend auto. */
int tp_verbs_available(char *desc, size_t len);
/* By name: "tcp", "verbs", or "auto"/NULL (verbs when every rank has an active RDMA
 * port, else tcp; rank 0 logs which). 0 or -1 with err. */
int tp_backend_create(const tp_bootstrap *bs, const char *name, tp_backend **out, char *err, size_t errlen);
#endif
