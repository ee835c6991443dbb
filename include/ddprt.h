/* ddprt.h: the stable C API of libddprt (libddprt.so.0, pkg-config ddprt).
 *
 * A communicator over the same rendezvous sources as ddprt-train (torchrun's variables,
 * ddprt-launch, Slurm, Open MPI, MPICH/PMI, tcp://HOST:PORT, file:///path) with the
 * collectives of PyTorch's torch.distributed and Horovod: allreduce, broadcast,
 * allgather(v), reduce_scatter, barrier, blocking and asynchronous.
 *
 * Rules:
 *  - Every call returns DDPRT_OK (0) or a negative DDPRT_E* code; ddprt_last_error()
 *    then holds one line saying what failed and, for a peer's failure, which rank
 *    ("allreduce #12 (64 MiB): rank 2 closed the connection").
 *  - A failed communicator stays failed: every later call fails at once with the same
 *    line. The peers see the failure too (their connections close), so no rank hangs.
 *  - Every blocking wait has a deadline (ddprt_opts.timeout_s).
 *  - Nothing calls exit() or prints unless asked (ddprt_opts.log_level, DDPRT_LOG).
 *  - All ranks issue the same collectives in the same order. Results are bitwise equal
 *    on every rank; sums are taken in rank order.
 *  - Threads: any thread may issue ops and any thread may wait for them (an op issued
 *    by one thread and waited for by another is the intended use: a progress thread).
 *    Ops run in issue order, one at a time.
 *  - Buffers are the caller's and must stay untouched while an op on them runs.
 *  - Argument order, every call: the communicator, send, recv, counts, dtype, op or
 *    root, and last the request of an asynchronous call (NCCL's order).
 *
 * Versions: DDPRT_API_VERSION is the API this header declares; ddprt_api_version()
 * the one the loaded library implements (a caller or binding that mirrors the API by
 * hand, as the Python package does, compares the two and refuses a mismatch).
 * Binaries built against an older API keep running on a newer libddprt.so.0: a call
 * whose signature or meaning changed keeps its old form under its old symbol version
 * (api/api.map: ddprt_test@DDPRT_0, ddprt_allgatherv@DDPRT_0), and a rebuild gets
 * the new one (the compiler flags each changed call: its argument types differ). So
 * the good names stay the only names: no deprecated aliases to carry in this header.
 *   API 1 -> 2: ddprt_allgatherv(c, send, sendcount, recv, ...) became
 *   ddprt_allgatherv(c, send, recv, sendcount, ...); ddprt_test(req) (0 running,
 *   1 done, < 0 failed) became ddprt_test(&req, &done); ddprt_api_version() added.
 *
 * dtypes: f32 f64 f16 bf16 i32 i64 u8. f16/bf16 are reduced in f32, rounded to
 * nearest-even after each pairwise step. Integer SUM/PROD wrap around. AVG = SUM
 * divided by the world size (floats: true division; integers: C division). */
#ifndef DDPRT_H
#define DDPRT_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define DDPRT_API __attribute__((visibility("default")))
#else
#define DDPRT_API
#endif

#define DDPRT_API_VERSION 3 /* bumped with every change a caller can see (3: ddprt_alltoallv) */

typedef enum ddprt_dtype {
    DDPRT_FLOAT32 = 0, DDPRT_FLOAT64 = 1, DDPRT_FLOAT16 = 2, DDPRT_BFLOAT16 = 3,
    DDPRT_INT32 = 4, DDPRT_INT64 = 5, DDPRT_UINT8 = 6
} ddprt_dtype;

typedef enum ddprt_op { DDPRT_SUM = 0, DDPRT_PROD = 1, DDPRT_MIN = 2, DDPRT_MAX = 3, DDPRT_AVG = 4 } ddprt_op;

enum {
    DDPRT_OK = 0,
    DDPRT_EIO = -1,      /* a transport error (a peer's closed connection is ECLOSED) */
    DDPRT_ETIMEOUT = -2, /* a deadline passed; the line names the rank waited for */
    DDPRT_ECLOSED = -3,  /* a peer closed its connections (it died or failed) */
    DDPRT_EINVAL = -4,   /* bad argument: nothing was sent */
    DDPRT_ENOMEM = -5,
    DDPRT_EBUSY = -6     /* every request slot is in use (ddprt_opts.max_requests) */
};

typedef struct ddprt_comm ddprt_comm;
typedef struct ddprt_request ddprt_request;

/* Fill with ddprt_opts_default, then change fields: `size` lets later versions add
 * fields at the end without breaking callers built against this one. */
typedef struct ddprt_opts {
    size_t size;             /* sizeof(ddprt_opts), set by ddprt_opts_default */
    const char *init_method; /* "tcp://HOST:PORT", "file:///path", "env://"; NULL or "":
                                the environment (torchrun, ddprt-launch, Slurm, mpirun) */
    int rank, world_size;    /* -1: from the environment */
    int local_rank;          /* -1: from the environment, else learned from host names */
    double timeout_s;        /* per op; <= 0: DDPRT_TIMEOUT, else 300 s */
    const char *backend;     /* "tcp", "verbs", "auto" (NULL) */
    const char *token;       /* job token peers must present; NULL: DDPRT_JOB_TOKEN,
                                the Slurm / Open MPI job id, or none */
    int port_offset;         /* ddprt meets on the rendezvous port + port_offset
                                (default 2), so that torch.distributed's store, which
                                takes the port itself, and ddprt share one
                                MASTER_ADDR/MASTER_PORT (ddprt-launch's control port
                                is the port + 1). 0: the port as given. */
    int log_level;           /* -1 (default): silent unless DDPRT_LOG is set;
                                0 error, 1 warn, 2 info, 3 debug on stderr */
    int max_requests;        /* async ops in flight at once; 0: 1024 */
} ddprt_opts;

DDPRT_API void ddprt_opts_default(ddprt_opts *o);

/* Meets the other ranks and connects to them (the first call of a job). opts may be
 * NULL (defaults). 0 and *out, or a code (*out NULL, ddprt_last_error says why). */
DDPRT_API int ddprt_init(ddprt_comm **out, const ddprt_opts *opts);
/* Waits for the ops in flight (each bounded by its deadline) and closes the connections
 * (once the last ddprt_mem_alloc block is freed). c stays a valid handle: every later
 * call with it fails with DDPRT_EINVAL ("the communicator was finalized"), a second
 * finalize included; a request issued before finalize completes with DDPRT_ECLOSED at
 * its ddprt_wait/ddprt_test, which releases it. */
DDPRT_API void ddprt_finalize(ddprt_comm *c);
/* Fails the communicator on purpose; the peers' next (or current) op fails naming
 * this rank. */
DDPRT_API void ddprt_abort(ddprt_comm *c, const char *why);

/* These four with a NULL or finalized c: DDPRT_EINVAL ("ddprt_rank: the communicator
 * is NULL"). */
DDPRT_API int ddprt_rank(const ddprt_comm *c);
DDPRT_API int ddprt_size(const ddprt_comm *c);
DDPRT_API int ddprt_local_rank(const ddprt_comm *c);
DDPRT_API int ddprt_local_size(const ddprt_comm *c); /* ranks on this host */
/* The calling thread's last error line ("" when none yet). Valid until this thread's
 * next ddprt call. */
DDPRT_API const char *ddprt_last_error(void);
/* The communicator's first failure ("" while healthy). */
DDPRT_API const char *ddprt_comm_error(const ddprt_comm *c);
DDPRT_API const char *ddprt_version(void); /* the library's release, "0.1.0" */
DDPRT_API int ddprt_api_version(void);     /* the library's DDPRT_API_VERSION */
DDPRT_API size_t ddprt_dtype_size(ddprt_dtype dt); /* 0 for an unknown dtype */

/* Memory the other ranks of this host can map: an allreduce whose send and recv lie
 * in it on every rank reads the peers' buffers in place (single copy). Plain memory
 * where that cannot be (no memfd; more than 8 blocks alive in this comm), so always
 * usable; NULL only when out of memory (or c is NULL or finalized). Page aligned. Free
 * with ddprt_mem_free while no op uses it. A block outlives ddprt_finalize (arrays
 * over it stay valid) until ddprt_mem_free(c, p), which takes a finalized c. */
DDPRT_API void *ddprt_mem_alloc(ddprt_comm *c, size_t bytes);
DDPRT_API void ddprt_mem_free(ddprt_comm *c, void *p);

/* Blocking collectives; count is in elements of dt. send == recv is allowed (in place);
 * with count 0 the buffers may be NULL. */
DDPRT_API int ddprt_allreduce(ddprt_comm *c, const void *send, void *recv, size_t count, ddprt_dtype dt, ddprt_op op);
DDPRT_API int ddprt_broadcast(ddprt_comm *c, void *buf, size_t count, ddprt_dtype dt, int root);
/* recv: size * sendcount elements in rank order; send may be recv's own block. */
DDPRT_API int ddprt_allgather(ddprt_comm *c, const void *send, void *recv, size_t sendcount, ddprt_dtype dt);
/* Rank r gives recvcounts[r] elements (sendcount must equal recvcounts[rank]); they land
 * at recv + displs[r] elements (displs NULL: packed in rank order). */
DDPRT_API int ddprt_allgatherv(ddprt_comm *c, const void *send, void *recv, size_t sendcount,
                               const size_t *recvcounts, const size_t *displs, ddprt_dtype dt);
/* send: size * recvcount elements; rank r's recv gets the reduction of block r. */
DDPRT_API int ddprt_reduce_scatter(ddprt_comm *c, const void *send, void *recv, size_t recvcount, ddprt_dtype dt,
                                   ddprt_op op);
/* Rank r's block q (sendcounts[q] elements at send + sdispls[q]) lands in rank q's
 * recv at rdispls[r]; displs NULL: packed in rank order. Counts must agree pairwise
 * (rank r's sendcounts[q] == rank q's recvcounts[r]): exchange them first (allgather). */
DDPRT_API int ddprt_alltoallv(ddprt_comm *c, const void *send, const size_t *sendcounts, const size_t *sdispls,
                              void *recv, const size_t *recvcounts, const size_t *rdispls, ddprt_dtype dt);
DDPRT_API int ddprt_barrier(ddprt_comm *c);

/* Asynchronous forms: *req is set (NULL on failure). Complete each request exactly once:
 * with ddprt_wait, or with ddprt_test until it reports done. */
DDPRT_API int ddprt_iallreduce(ddprt_comm *c, const void *send, void *recv, size_t count, ddprt_dtype dt,
                               ddprt_op op, ddprt_request **req);
DDPRT_API int ddprt_ibroadcast(ddprt_comm *c, void *buf, size_t count, ddprt_dtype dt, int root,
                               ddprt_request **req);
DDPRT_API int ddprt_iallgather(ddprt_comm *c, const void *send, void *recv, size_t sendcount, ddprt_dtype dt,
                               ddprt_request **req);
DDPRT_API int ddprt_ireduce_scatter(ddprt_comm *c, const void *send, void *recv, size_t recvcount,
                                    ddprt_dtype dt, ddprt_op op, ddprt_request **req);
/* Blocks until the op is done (bounded by its deadline) and releases req: 0 or a code. */
DDPRT_API int ddprt_wait(ddprt_request *req);
/* Never blocks (MPI_Test). The return value is only the error: 0 (running, or done
 * and ok) or a code. *done = 1 exactly when the op has finished, ok or failed: then
 * the request is released and *req set to NULL. *done = 0: still running, *req stays
 * valid. A NULL or released request, or done NULL: DDPRT_EINVAL with *done = 0 where
 * done is given, nothing released.
 *     int done = 0, rc = 0;
 *     while (!(rc = ddprt_test(&req, &done)) && !done) compute_a_little();  */
DDPRT_API int ddprt_test(ddprt_request **req, int *done);

#ifdef __cplusplus
}
#endif
#endif
