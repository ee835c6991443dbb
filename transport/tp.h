/* Collectives (the NCCL / Gloo part of ddprt): a communicator over one backend
 * (transport/tp_backend.h) and the blocking + asynchronous collectives on it.
 *
 * Semantics every rank relies on:
 *  - All ranks issue the same collectives in the same order (as DDP's buckets).
 *  - Ops run in issue order; an async op and a later blocking op never overtake.
 *  - Every op has a deadline (opts.timeout_s). On any error the comm is failed: the
 *    call returns a negative TP_E* code, tp_errmsg() names the op, its sequence
 *    number, its size and the peer ("allreduce #12 (64 MiB): rank 2 closed the
 *    connection"), the backend closes its connections so the other ranks fail too,
 *    and every later call fails at once with the same code and message.
 *  - Results are bitwise identical on every rank (each element is reduced once, by
 *    one rank, in one order, then copied; recursive doubling orders operands by rank).
 *  - Memory: all scratch comes from the comm's arena, sized at creation; no call
 *    allocates.
 *
 * dtypes: F32 F64 F16 BF16 I32 I64 U8. F16/BF16 are reduced in f32 and rounded to
 * nearest-even after every pairwise step. Integer SUM/PROD wrap around (two's
 * complement). AVG = SUM, then divided by the world size: floats by true division,
 * integers by C integer division (truncates toward zero: AVG of {-3, 0} over 2 = -1).
 */
#ifndef TP_H
#define TP_H
#include "rt/tensor.h"
#include "transport/tp_backend.h"
#include <stddef.h>
#include <stdint.h>

typedef enum { TP_SUM, TP_PROD, TP_MIN, TP_MAX, TP_AVG, TP_NOPS } tp_op;
extern const char *const tp_op_names[TP_NOPS];

/* The kinds of op a comm runs, as the flight recorder, the stall reports and the
 * errors name them. Inline: the files that name ops call nothing for it. */
typedef enum { TP_K_ALLREDUCE, TP_K_BROADCAST, TP_K_REDUCE_SCATTER, TP_K_ALLGATHER, TP_K_BARRIER,
               TP_K_TREE, TP_K_SEND, TP_K_RECV, TP_NKINDS } tp_kind;
static inline const char *tp_kind_name(int kind)
{
    static const char *const names[TP_NKINDS] = {"allreduce", "broadcast", "reduce_scatter", "allgather",
                                                  "barrier", "tree", "send", "recv"};
    return kind >= 0 && kind < TP_NKINDS ? names[kind] : "?";
}

/* Allreduce algorithm. AUTO: recursive doubling below TP_AUTO_RD_MAX_BYTES, else
 * hierarchical when the ranks sit on more than one host with more than one rank on each
 * (the same number on every host), else ring. HIER: hierarchical for every size (ring
 * where the hosts do not allow it). DDPRT_ALGO=ring|rd|hier|auto overrides
 * opts.algo = TP_ALGO_DEFAULT. */
typedef enum { TP_ALGO_DEFAULT = -1, TP_ALGO_AUTO = 0, TP_ALGO_RING, TP_ALGO_RD, TP_ALGO_HIER } tp_algo;
/* The auto switch point (bytes per rank's buffer). Tune by measurement per backend. */
#define TP_AUTO_RD_MAX_BYTES (512 * 1024) /* tcp, 2 and 4 procs: ring = rd at 512 KiB */
/* Default scratch arena: 2 * TP_PIPE_DEPTH chunk slots + one recursive-doubling
 * buffer, each arena / (2 * depth + 1) bytes (about 227 KiB at the default). */
#define TP_DEFAULT_ARENA_BYTES (2u << 20)
#define TP_PIPE_DEPTH 4    /* ring chunks in flight per direction */

typedef struct tp_comm_opts {
    double timeout_s;   /* per op; <= 0: DDPRT_TIMEOUT, else 300 s */
    int algo;           /* tp_algo; TP_ALGO_DEFAULT = DDPRT_ALGO, else AUTO */
    size_t arena_bytes; /* scratch arena; 0 = TP_DEFAULT_ARENA_BYTES; min 4608. It sets
                           the chunk size, which is part of the wire protocol: every
                           rank must use the same value (and the same algo). */
    const uint64_t *host_ids; /* NULL: learned (port_host_id of every rank: machine and
                           network namespace); else world entries, copied, equal on
                           every rank: a fake topology for tests */
} tp_comm_opts;

typedef struct tp_comm tp_comm;

/* Async op handle: owned by the caller, valid until tp_wait (or tp_test != 0)
 * returns; may be reused afterwards. The fields are private. */
typedef struct tp_handle {
    int kind, dt, op, root, state, rc;
    int div;                     /* a tree allreduce's divisor (tp_itree_allreduce_div) */
    const void *send;
    void *recv;
    size_t count;
    uint64_t seq;                /* the first of the op's sequence numbers */
    struct tp_staging *stage;    /* device buffer through pinned staging (tp_staged.h) */
    struct tp_handle *next;
} tp_handle;

/* Takes the backend (destroyed with the comm; on failure it stays the caller's).
 * o may be NULL. 0, or a negative code with a one-line message in err. Starts the
 * communication thread. */
int tp_comm_create(tp_comm **out, tp_backend *b, const tp_comm_opts *o, char *err, size_t errlen);
/* Waits for ops in flight (each bounded by its deadline), stops the thread, frees. */
void tp_comm_destroy(tp_comm *c);
int tp_rank(const tp_comm *c);
int tp_world(const tp_comm *c);
size_t tp_comm_arena_bytes(const tp_comm *c);
/* "" while healthy; else the one line of the first failure. */
const char *tp_errmsg(const tp_comm *c);
/* Fails this rank's comm on purpose (naming why); the peers see it as a closed
 * connection to this rank. */
void tp_abort(tp_comm *c, const char *why);

/* Memory that the other ranks of this host can map (a memfd): an allreduce whose send
 * and recv lie in it on every rank reads the peers' buffers in place instead of
 * copying through the shared segment (single copy, as NCCL's registered buffers).
 * Plain memory where that cannot be (no memfd, every slot taken), so always usable.
 * Page aligned. NULL only when out of memory. Not while ops that use it are in
 * flight: free with tp_mem_free before destroying the comm. */
void *tp_mem_alloc(tp_comm *c, size_t bytes);
void tp_mem_free(tp_comm *c, void *p);

/* Blocking collectives. count is in elements of dt. */
int tp_allreduce(tp_comm *c, const void *send, void *recv, size_t count, rt_dtype dt, tp_op op);
int tp_broadcast(tp_comm *c, void *buf, size_t count, rt_dtype dt, int root);
/* send holds world * recvcount elements; rank r's recv gets the reduction of
 * block r = elements [r * recvcount, (r + 1) * recvcount). */
int tp_reduce_scatter(tp_comm *c, const void *send, void *recv, size_t recvcount, rt_dtype dt, tp_op op);
/* recv gets world * sendcount elements, rank order. send may be recv's own block. */
int tp_allgather(tp_comm *c, const void *send, void *recv, size_t sendcount, rt_dtype dt);
int tp_barrier(tp_comm *c);
/* Point to point, matched in order per pair (bytes must agree on both sides). */
int tp_send(tp_comm *c, const void *buf, size_t bytes, int peer);
int tp_recv(tp_comm *c, void *buf, size_t bytes, int peer);

/* Asynchronous forms: queued behind earlier async ops and run by the comm thread in
 * issue order. Buffers must stay untouched until the op completes. 0, or an error
 * (invalid arguments, or the comm already failed; the handle is then complete). */
int tp_iallreduce(tp_comm *c, const void *send, void *recv, size_t count, rt_dtype dt, tp_op op,
                  tp_handle *h);
int tp_ibroadcast(tp_comm *c, void *buf, size_t count, rt_dtype dt, int root, tp_handle *h);
int tp_ireduce_scatter(tp_comm *c, const void *send, void *recv, size_t recvcount, rt_dtype dt,
                       tp_op op, tp_handle *h);
int tp_iallgather(tp_comm *c, const void *send, void *recv, size_t sendcount, rt_dtype dt, tp_handle *h);
/* Tree collectives (world-size-invariant training, nn/invariant.c; proof of the order
 * in transport/tp_tree.c). The ranks are the leaves of a fixed mixed-radix tree:
 * radix[0] consecutive ranks are combined first, then radix[1] of those groups, and
 * so on (product = world). Within a group operands are folded in rank order,
 * ((x0 + x1) + x2) + ..., so every element of the result is that one expression,
 * bitwise the same on every rank, for any count, chunking or transport. A world of one
 * needs no tree. tp_set_tree: at start-up, before any tree op; radices 2..8, at most
 * TP_TREE_MAX_LEVELS; 0 or TP_EINVAL. */
#define TP_TREE_MAX_LEVELS 16
int tp_set_tree(tp_comm *c, const int *radix, int nlev);
/* In place; op SUM, PROD, MIN or MAX (no AVG: the caller divides by what it means). */
int tp_tree_allreduce(tp_comm *c, void *buf, size_t count, rt_dtype dt, tp_op op);
int tp_itree_allreduce(tp_comm *c, void *buf, size_t count, rt_dtype dt, tp_op op, tp_handle *h);
/* The tree's sum, every element then divided by div (true division, as AVG's) by the
 * rank that computed it, on its part only: the bits of a division after the op, half of
 * that pass's memory traffic (the --invariant mean over K virtual shards). */
int tp_itree_allreduce_div(tp_comm *c, void *buf, size_t count, rt_dtype dt, int div, tp_handle *h);
/* The two halves (ZeRO: reduce-scatter per bucket, the optimizer on the own block,
 * then allgather): after tp_tree_reduce_scatter this rank's block of buf
 * (tp_tree_block) holds the tree's result, the rest is scratch; tp_tree_allgather
 * fills every block from its owner. */
int tp_tree_reduce_scatter(tp_comm *c, void *buf, size_t count, rt_dtype dt, tp_op op);
int tp_tree_allgather(tp_comm *c, void *buf, size_t count, rt_dtype dt);
/* The block [*off, *off + *cnt) of count elements that `rank` owns after the
 * reduce-scatter under this tree (world = product of the radices). */
void tp_tree_block(size_t count, const int *radix, int nlev, int rank, size_t *off, size_t *cnt);

/* The op's result: 0 or a negative code (tp_errmsg says why). */
int tp_wait(tp_comm *c, tp_handle *h);
/* 1 complete and ok, 0 still running, < 0 failed. Never blocks. */
int tp_test(tp_comm *c, tp_handle *h);
#endif
