/* Communicator internals shared by tp_comm.c (lifecycle, errors, async queue) and
 * the algorithm files (tp_ring.c, tp_algo.c). Not part of the public API. */
#ifndef TP_COMM_INT_H
#define TP_COMM_INT_H
#include "ports/posix/port.h"
#include "rt/arena.h"
#include "transport/tp.h"
#include "transport/tp_watch.h"

enum { TP_K_ALLREDUCE, TP_K_BROADCAST, TP_K_REDUCE_SCATTER, TP_K_ALLGATHER, TP_K_BARRIER,
       TP_K_SEND, TP_K_RECV, TP_NKINDS };
enum { TP_H_QUEUED = 0, TP_H_RUNNING = 1, TP_H_DONE = 2 };

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
};

/* One op, run by whoever drives the backend (a calling thread or the comm thread). */
int tp_run_op(tp_comm *c, tp_handle *h);

/* Waits for the n requests (by the op's deadline); 0 or a backend code. */
int tp_waitreqs(tp_comm *c, tp_req **r, int n);
/* Single message helpers; zero-length messages are skipped on both sides. */
int tp_xfer(tp_comm *c, const void *sbuf, size_t slen, int to, void *rbuf, size_t rlen, int from);

/* Algorithms. bytes sizes are per rank's vector; all return 0 or a backend code. */
int tp_ring_allreduce(tp_comm *c, const void *send, void *recv, size_t count, rt_dtype dt, tp_op op);
int tp_rd_allreduce(tp_comm *c, const void *send, void *recv, size_t count, rt_dtype dt, tp_op op);
int tp_ring_reduce_scatter(tp_comm *c, const void *send, void *recv, size_t rc, rt_dtype dt, tp_op op);
int tp_ring_allgather(tp_comm *c, const void *send, void *recv, size_t sc, rt_dtype dt);
int tp_chain_broadcast(tp_comm *c, void *buf, size_t bytes, int root);
int tp_tree_broadcast(tp_comm *c, void *buf, size_t bytes, int root);
int tp_dissemination_barrier(tp_comm *c);
#endif
