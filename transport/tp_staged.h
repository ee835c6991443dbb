/* Collectives on device buffers through pinned host staging (the path NCCL takes when
 * GPUDirect is not available, and Horovod's "host staging").
 *
 * A device op is one entry in the comm's issue order, like a host op: the async forms
 * queue it behind earlier ops and the comm thread runs it (tp_wait / tp_test as for
 * any handle); the blocking forms run it in order too. Whoever runs it cuts the
 * buffer into chunks of the staging slot size and pipelines them through nslots
 * pinned slots:
 *
 *   chunk i+L:  D2H copy into its slot            (device copy queue 1, L = nslots-2)
 *   chunk i:    host collective on its slot        (inline, on the thread running the op)
 *   chunk i-1:  H2D copy from its slot back        (device copy queue 2)
 *
 * so the two copy engines and the network work on different chunks at once. Each
 * chunk is one collective with its own sequence number (reserved at issue, so the
 * numbering is the same on every rank whatever else runs meanwhile), deadline and
 * trace entry; results are the host path's for the same chunks (tp_allreduce on each
 * chunk), bitwise identical on every rank. A device copy failure fails the comm with
 * the staging's message (tp_staging_errmsg keeps it too), so the peers stop.
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
 * why). bind (may be NULL) runs first in the thread that runs an op: a GPU runtime's
 * current device is per thread. */
typedef struct tp_dev_ops {
    int (*bind)(void *ctx);
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

typedef struct tp_ipc tp_ipc;
typedef struct tp_staging {
    const tp_dev_ops *ops;
    tp_ipc *ipc;              /* cuda_ipc path (tp_staging_ipc), NULL: the staged path */
    uint64_t ipc_ops;         /* device allreduces that took it (a query for tests and logs) */
    void *ctx;
    unsigned char *host;      /* pinned: nslots * chunk bytes */
    size_t chunk;             /* bytes per slot (a multiple of 8) */
    int nslots;
    int h2d_pending[TP_STAGE_MAX_SLOTS]; /* an H2D may still be reading the slot */
    int d2h_pending[TP_STAGE_MAX_SLOTS]; /* a D2H may still be filling the slot */
    char err[256];
} tp_staging;

/* Bytes of pinned memory for nslots slots of chunk bytes (plan it in the pinned arena). */
size_t tp_staging_bytes(size_t chunk, int nslots);
/* pinned holds tp_staging_bytes(chunk, nslots). nslots in [2, TP_STAGE_MAX_SLOTS]
 * (3 or more overlap all three stages). 0, or -1 for bad arguments. */
int tp_staging_init(tp_staging *st, const tp_dev_ops *ops, void *ctx, void *pinned, size_t chunk, int nslots);

/* One staging serves one comm: its ops run one at a time in issue order. The device
 * sees an op's result in order after dev_ops->end, which runs before the op's handle
 * completes. 0, or a negative TP_E* code with the reason in tp_staging_errmsg (the
 * comm's message for a network failure). Blocking forms return when the host part is
 * done. */
int tp_allreduce_device(tp_comm *c, void *dev, size_t count, rt_dtype dt, tp_op op, tp_staging *st);
int tp_broadcast_device(tp_comm *c, void *dev, size_t count, rt_dtype dt, int root, tp_staging *st);
/* Asynchronous forms (tp_iallreduce's rules: the buffer stays untouched until the
 * handle completes); the same collectives, bits and deadlines. */
int tp_iallreduce_device(tp_comm *c, void *dev, size_t count, rt_dtype dt, tp_op op, tp_staging *st,
                         tp_handle *h);
int tp_ibroadcast_device(tp_comm *c, void *dev, size_t count, rt_dtype dt, int root, tp_staging *st,
                         tp_handle *h);
const char *tp_staging_errmsg(const tp_staging *st);

/* CUDA IPC between the ranks of one host (transport/tp_ipc.c, tp_ipc_hier.c;
 * docs/transports.md). Collective, once per comm at set-up, after tp_staging_init:
 * `region` is this rank's device allocation (port_dev_malloc's base, `bytes` long) that
 * every later device buffer of st lies in, `device` its GPU, `compute` the stream that
 * produces and consumes the buffers. The device plan is chosen here
 * (tp_transport_device_plan; rank 0 logs it):
 *  - cuda_ipc: every rank on one host, the devices reach each other, DDPRT_P2P not 0
 *    anywhere. fp32 / f16 / bf16 allreduces run over IPC, bitwise equal to the host path
 *    (its shared-memory chain: rank order); broadcasts too (the peers copy the root's).
 *  - hierarchical (cuda_ipc inside each host, staged across): several hosts with the
 *    same number (> 1) of ranks each, every pair of a host as above, st on the CUDA
 *    staging. Allreduces as tp_hier, bitwise (its segments and ring orders);
 *    broadcasts stay staged.
 * The handles are exchanged and the host's peers' regions and events opened once
 * (closed at tp_comm_destroy). Every rank must pass buffers of its region (at any
 * offset). Otherwise, and for other ops, the staging's path. 0 (any path), or a TP_E*
 * code. */
int tp_staging_ipc(tp_comm *c, tp_staging *st, int device, void *region, size_t bytes, port_stream compute);
const char *tp_staging_path(const tp_staging *st); /* "cuda_ipc", "cuda_ipc+staged" or "staged" */

/* The CUDA device side: two copy streams ordered after / before the compute stream
 * with events. Works on ports/nocuda too (every call then fails with its message). */
typedef struct tp_dev_cuda {
    port_stream compute, d2h_s, h2d_s;
    port_event begin_ev, end_ev, d2h_ev[TP_STAGE_MAX_SLOTS], h2d_ev[TP_STAGE_MAX_SLOTS];
    int nslots, device;
} tp_dev_cuda;
extern const tp_dev_ops tp_dev_cuda_ops;
/* device: the GPU whose compute stream this is (made current in the comm thread). */
int tp_dev_cuda_init(tp_dev_cuda *d, int device, port_stream compute, int nslots);
void tp_dev_cuda_destroy(tp_dev_cuda *d);
#endif
