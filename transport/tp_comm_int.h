/* Communicator internals shared by tp_comm.c (lifecycle, errors, async queue) and
 * the algorithm files (tp_ring.c, tp_algo.c). Not part of the public API. */
#ifndef TP_COMM_INT_H
#define TP_COMM_INT_H
#include "ports/posix/port.h"
#include "rt/arena.h"
#include "transport/tp.h"
#include "transport/tp_link.h"
#include "transport/tp_trace.h"

/* TP_K_TREE's phases, in the handle's root field. */
enum { TP_TREE_RS = 1, TP_TREE_AG = 2, TP_TREE_ALL = 3 };
enum { TP_H_QUEUED = 0, TP_H_RUNNING = 1, TP_H_DONE = 2 };

/* A layer between the comm and its algorithms: it runs what it can of the ops itself and
 * passes the rest (TP_PASS) to the algorithms over the backend (tp_ring.c, tp_algo.c,
 * tp_hier.c). tp_shm_layer (tp_shm.c) runs them through shared memory when every rank
 * sits on one host. The comm asks it first for every op and frees it at destroy. */
#define TP_PASS 1
typedef struct tp_layer {
    const char *name;
    int (*run)(tp_comm *c, tp_handle *h); /* 0, a TP_E* code, or TP_PASS */
    void (*free)(tp_comm *c);
} tp_layer;
extern const tp_layer tp_shm_layer;

/* A tp_mem_alloc block (tp_shm_map.c); gen 0: free slot, fd -1: plain memory. */
#define TP_MEM_MAX 8
typedef struct tp_mem_region {
    unsigned char *base;
    size_t len;
    int fd;
    uint64_t gen, ino;
} tp_mem_region;

struct tp_comm {
    tp_backend *b;
    int rank, world;
    double timeout_s;
    int algo;
    /* Scratch, carved once from the arena: 2 * TP_PIPE_DEPTH chunk slots for the
     * ring, and one buffer of the same size for recursive doubling. */
    rt_arena arena;
    unsigned char *slot[2 * TP_PIPE_DEPTH];
    unsigned char *rdbuf;
    size_t chunk;              /* bytes per slot, a multiple of 64 */
    tp_req req[4 * TP_PIPE_DEPTH];
    int64_t deadline;          /* of the op now running */

    /* Failure: sticky. failed is the code, errmsg the one line. */
    int failed;
    char errmsg[640];

    /* Issue order and the comm thread. mu guards everything below and `failed`
     * transitions. busy: some thread is driving the backend. */
    port_mutex mu;
    port_cond cv_work, cv_done;
    port_thread thread;
    int stop;
    int busy;
    uint64_t seq;              /* last sequence number handed out */
    tp_handle *qhead, *qtail;  /* async ops not yet started */

    /* Flight recorder (tp_trace.c) and progress for the stall watch (tp_watch.c):
     * written with __atomic stores by the thread that runs ops, read by the watch. */
    struct tp_trace_ent *trace;
    uint32_t ntrace;
    port_mutex trace_mu;
    int64_t mono0;             /* port_now_ns() at creation ... */
    double wall0;              /* ... and the wall clock then (for merging ranks) */
    int dumped;
    struct tp_watch *watch;
    uint64_t p_cur, p_done;    /* op running now (0 none), last op finished */
    int64_t p_cur_start, p_done_at;
    int p_wait_peer;           /* peer the backend waits on (-1 none) */
    int p2p;                   /* a send/recv was issued: sequence numbers differ per rank */
    /* Hosts (tp_hier.c): learned at the first allreduce that could use them. */
    int topo;                  /* 0 not yet known, 1 flat, 2 hierarchical */
    uint64_t *host_ids;        /* world entries: given in the opts, or the allgather's */
    int *local, *cross;        /* comm ranks of my host's ranks / of my local index on
                                  every host (host order) */
    int nlocal, lidx, nhosts, hidx;
    /* The tree collectives' levels above the ranks (tp_tree.c); ntree 0: not set. */
    int tree[TP_TREE_MAX_LEVELS], ntree;
    /* The transport of each peer (tp_transport.h; peer_tp[rank] unused), chosen at the
     * first collective (tp_connect); NULL before, and in a world of one. */
    int connected;
    uint8_t *peer_tp;
    /* Each peer's link (tp_link.h; NULL before the connect step: the net's), and the
     * shm transport's point-to-point state (tp_link_shm.c; NULL: no shm pair). */
    const tp_link **link;
    struct tp_link_shm *lshm;
    /* The layer asked first for every op (NULL: none), and the shared-memory layer's
     * state (tp_shm.c): 0 not yet decided, 1 in use, -1 sockets. */
    const tp_layer *layer;
    int shm_state;
    struct tp_shm *shm;
    tp_mem_region mem[TP_MEM_MAX]; /* under mu */
    uint64_t mem_gen;
    struct tp_ipc *ipc;        /* the cuda_ipc device path (tp_ipc.c), NULL: none */
};

/* A ring among some ranks of the comm: n members, ranks[i] is member i's comm rank,
 * me is my index. NULL stands for the whole comm. */
typedef struct tp_group { int n, me; const int *ranks; } tp_group;

/* One ring pass (tp_ring.c), resumable so that two can run at once (tp_hier.c). Lane
 * -1: the pass runs alone (depth D = TP_PIPE_DEPTH, all slots and requests); lanes 0
 * and 1: depth D/2 each on their own halves, so the two together keep at most 2 D
 * requests in flight as the backends expect. */
typedef struct tp_ring_pass tp_ring_pass;
struct tp_ring_pass {
    tp_comm *c;
    int n, me, left, right;    /* the ring: members, my index, neighbours' comm ranks */
    int nsteps, ncols, col0;   /* col0: first column of this pass (reduce-scatter groups) */
    size_t es, ce;             /* element size, elements per column */
    size_t count, bc;          /* total elements; bc > 0: equal blocks of bc */
    const unsigned char *send;
    unsigned char *recv;
    rt_dtype dt;
    tp_op op;
    unsigned char **slot;      /* this pass's chunk slots */
    tp_req *req;               /* this pass's requests */
    int depth;                 /* units in flight at most */
    int total, posted, u;      /* units: all, posted so far, next to complete */
    int has[TP_PIPE_DEPTH][2]; /* unit in flight has a recv / a send */
    /* Unit (s, col): what to send right and where to receive from the left. */
    void (*plan)(tp_ring_pass *p, int s, int col, int u, const void **sb, void **rb, size_t *len_s,
                 size_t *len_r);
    void (*done)(tp_ring_pass *p, int s, int col, int u); /* after both complete; may be NULL */
};
/* Starts the reduce-scatter half (ag 0) or the allgather half (ag 1) of a ring
 * allreduce in group g on lane -1, 0 or 1. 0 or a backend code. */
int tp_ring_half_begin(tp_ring_pass *p, tp_comm *c, const tp_group *g, int lane, int ag, const void *send,
                       void *recv, size_t count, rt_dtype dt, tp_op op);
/* Completes the next unit: block 0 only if it is done already. 2 the pass is over,
 * 1 one unit completed, 0 nothing yet (block 0), < 0 a backend code. */
int tp_ring_advance(tp_ring_pass *p, int block);

/* The connect step (tp_connect.c), collective: the transport of every peer pair, and
 * the shared-memory segment when every pair took it. 0 or a backend code. */
int tp_connect(tp_comm *c);
/* Whether h is an op at which every rank connects (a whole collective: every rank runs
 * it at the same point; point-to-point and the tree's halves are not). */
static inline int tp_connects_at(const tp_handle *h)
{
    return h->kind <= TP_K_BARRIER || (h->kind == TP_K_TREE && h->root == TP_TREE_ALL);
}

/* One host op, run by whoever drives the backend (a calling thread or the comm
 * thread); a staged op's chunks come through here too. */
int tp_run_op(tp_comm *c, tp_handle *h);
/* Issues h (its fields filled, stage set or NULL) in the comm's order and runs it:
 * blocking, or queued for the comm thread. 0, or the code it failed with. */
int tp_issue(tp_comm *c, tp_handle *h, int blocking);
/* The comm's sticky failure code (0 while healthy). */
int tp_failed(tp_comm *c);
/* Fails the comm (the first failure wins) with "kind #seq (size): why" for h, and
 * closes the backend so the peers fail too: for errors the backend did not see. */
void tp_fail_op(tp_comm *c, const tp_handle *h, int rc, const char *why);
/* Staged device ops (tp_staged.c): the number of chunks (sequence numbers) of h, and
 * the pipeline itself, run by whoever drives the backend. */
size_t tp_staged_nchunks(const tp_handle *h);
size_t tp_staged_chunk_count(const tp_handle *h, size_t i); /* elements of chunk i */
int tp_staged_run(tp_comm *c, tp_handle *h);
/* The cuda_ipc path (tp_ipc.c, tp_ipc_hier.c): whether a device op runs there, its
 * sequence numbers (tp_ipc_nparts), running it, and closing the comm's handles. */
int tp_ipc_takes(const tp_handle *h);
size_t tp_ipc_nparts(const tp_handle *h);
int tp_ipc_run(tp_comm *c, tp_handle *h);
void tp_ipc_free(tp_comm *c);

/* Waits for the n requests (by the op's deadline); 0 or a backend code. */
int tp_waitreqs(tp_comm *c, tp_req **r, int n);
/* Single message helpers; zero-length messages are skipped on both sides. */
int tp_xfer(tp_comm *c, const void *sbuf, size_t slen, int to, void *rbuf, size_t rlen, int from);

/* Algorithms. bytes sizes are per rank's vector; all return 0 or a backend code. */
int tp_ring_allreduce(tp_comm *c, const void *send, void *recv, size_t count, rt_dtype dt, tp_op op);
/* The ring allreduce's halves within a group: after rs_half member i holds the full
 * reduction of block i (tp_ring_block's uneven blocks) in recv; ag_half spreads them. */
int tp_ring_allreduce_g(tp_comm *c, const tp_group *g, const void *send, void *recv, size_t count, rt_dtype dt,
                        tp_op op);
int tp_ring_rs_half(tp_comm *c, const tp_group *g, const void *send, void *recv, size_t count, rt_dtype dt,
                    tp_op op);
int tp_ring_ag_half(tp_comm *c, const tp_group *g, void *recv, size_t count, rt_dtype dt);
void tp_ring_block(size_t count, int n, int b, size_t *off, size_t *cnt);
/* Hierarchical allreduce (tp_hier.c): inside hosts, then across, then inside again;
 * a plain ring when the hosts are not a regular grid of several ranks each. */
int tp_hier_allreduce(tp_comm *c, const void *send, void *recv, size_t count, rt_dtype dt, tp_op op);
int tp_hier_init(tp_comm *c, const tp_comm_opts *o);
/* The hierarchical device path (tp_ipc_hier.c) follows the host's order: the groups from
 * every rank's host id (ids: world entries, the fake ones where the opts gave them;
 * nothing when already known), the segments (count * k / K, k < K) of a vector, and the
 * cross-host ring allreduce of one piece (h: an allreduce with root TP_ROOT_CROSS,
 * among the ranks of this local index; AVG: the sum, then divided by the world). */
void tp_hier_set_hosts(tp_comm *c, const uint64_t *ids);
size_t tp_hier_nsegs(size_t count, size_t es);
#define TP_ROOT_CROSS (-2)
int tp_hier_cross(tp_comm *c, const tp_handle *h);
void tp_hier_free(tp_comm *c);
int tp_rd_allreduce(tp_comm *c, const void *send, void *recv, size_t count, rt_dtype dt, tp_op op);
int tp_ring_reduce_scatter(tp_comm *c, const void *send, void *recv, size_t rc, rt_dtype dt, tp_op op);
int tp_ring_allgather(tp_comm *c, const void *send, void *recv, size_t sc, rt_dtype dt);
int tp_chain_broadcast(tp_comm *c, void *buf, size_t bytes, int root);
int tp_tree_broadcast(tp_comm *c, void *buf, size_t bytes, int root);
int tp_dissemination_barrier(tp_comm *c);
int tp_tree_run(tp_comm *c, const tp_handle *h); /* TP_K_TREE (tp_tree.c) */
/* The tree (radices, product n) over the n operands in[] into dst (m elements): the
 * shared-memory path's reduce for TP_K_TREE. */
void tp_tree_fold(const int *radix, int nlev, void *dst, const void *const *in, size_t m, rt_dtype dt, tp_op op);
/* What an op's result is divided by (true division for floating types; 1: none): the
 * world for AVG, a tree allreduce's divisor (tp_itree_allreduce_div). */
static inline int tp_op_div(const tp_handle *h, int world) { return h->op == TP_AVG ? world : h->div > 1 ? h->div : 1; }
#endif
