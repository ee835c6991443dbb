/* Collectives on device buffers through pinned host staging (the path NCCL takes when
 * GPUDirect is not available, and Horovod's "host staging").
 *
 * The buffer is cut into chunks of the staging slot size and pipelined through
 * nslots pinned slots:
 *
 *   chunk i:    D2H copy into slot i % nslots      (device copy queue 1)
 *   chunk i-1:  host collective on its slot         (the comm thread, tp_i* ops)
 *   chunk i-k:  H2D copy from its slot back         (device copy queue 2)
 *
 * so the two copy engines and the network work on different chunks at once. Every
 * rank cuts the same chunks and issues them in the same order, so the host ops match
 * across ranks; results are the host path's for the same chunks (tp_allreduce on each
 * chunk), and bitwise identical on every rank.
 *
 * The device side is a small vtable (tp_dev_ops): ports/cuda streams and events in
 * production (tp_dev_cuda below), a memcpy-backed fake in the CPU tests, so the
 * scheduling itself is tested without a GPU. Staging is carved once at start-up
 * (pinned arena); no call allocates. */
#ifndef TP_STAGED_H
#define TP_STAGED_H
#include "ports/cuda/port_cuda.h"
#include "transport/tp.h"

#define TP_STAGE_MAX_SLOTS 8
#define TP_STAGE_DEFAULT_SLOTS 4
#define TP_STAGE_DEFAULT_CHUNK (1u << 20) /* bytes per slot */

/* Asynchronous device copies in two FIFO queues (D2H and H2D), each copy tagged with
 * the staging slot it reads or fills; every function returns 0 or -1 (errmsg says
 * why). */
typedef struct tp_dev_ops {
    int (*d2h)(void *ctx, int slot, void *host, const void *dev, size_t bytes);
    int (*h2d)(void *ctx, int slot, void *dev, const void *host, size_t bytes);
    /* Block the host until the last copy tagged `slot` in that queue has finished. */
    int (*wait_d2h)(void *ctx, int slot);
    int (*wait_h2d)(void *ctx, int slot);
    /* begin: the copies that follow see the producer's work issued so far (the
     * gradients are computed). end: the consumer's later work sees the last H2D. */
    int (*begin)(void *ctx);
    int (*end)(void *ctx);
    const char *(*errmsg)(void *ctx);
} tp_dev_ops;

typedef struct tp_staging {
    const tp_dev_ops *ops;
    void *ctx;
    unsigned char *host;      /* pinned: nslots * chunk bytes */
    size_t chunk;             /* bytes per slot (a multiple of 8) */
    int nslots;
    int h2d_pending[TP_STAGE_MAX_SLOTS]; /* an H2D may still be reading the slot */
    tp_handle h[TP_STAGE_MAX_SLOTS];
    int h_pending[TP_STAGE_MAX_SLOTS];
    char err[256];
} tp_staging;

/* Bytes of pinned memory for nslots slots of chunk bytes (plan it in the pinned arena). */
size_t tp_staging_bytes(size_t chunk, int nslots);
/* pinned holds tp_staging_bytes(chunk, nslots). nslots in [2, TP_STAGE_MAX_SLOTS]
 * (3 or more overlap all three stages). 0, or -1 for bad arguments. */
int tp_staging_init(tp_staging *st, const tp_dev_ops *ops, void *ctx, void *pinned, size_t chunk, int nslots);

/* Blocking for the host (it returns when the host part is done); the device sees
 * the result in order after dev_ops->end. 0, or a negative TP_E* code with the reason
 * in tp_staging_errmsg (the comm's message for a network failure). */
int tp_allreduce_device(tp_comm *c, void *dev, size_t count, rt_dtype dt, tp_op op, tp_staging *st);
int tp_broadcast_device(tp_comm *c, void *dev, size_t count, rt_dtype dt, int root, tp_staging *st);
const char *tp_staging_errmsg(const tp_staging *st);

/* The CUDA device side: two copy streams ordered after / before the compute stream
 * with events. Works on ports/nocuda too (every call then fails with its message). */
typedef struct tp_dev_cuda {
    port_stream compute, d2h_s, h2d_s;
    port_event begin_ev, end_ev, d2h_ev[TP_STAGE_MAX_SLOTS], h2d_ev[TP_STAGE_MAX_SLOTS];
    int nslots;
} tp_dev_cuda;
extern const tp_dev_ops tp_dev_cuda_ops;
int tp_dev_cuda_init(tp_dev_cuda *d, port_stream compute, int nslots);
void tp_dev_cuda_destroy(tp_dev_cuda *d);
#endif
