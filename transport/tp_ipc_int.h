/* The cuda_ipc device path's state and helpers, shared by tp_ipc.c (set-up, the one-host
 * allreduce) and tp_ipc_hier.c (the hierarchical allreduce, the broadcast). Internal to
 * transport/. */
#ifndef TP_IPC_INT_H
#define TP_IPC_INT_H
#include "transport/tp_comm_int.h"
#include "transport/tp_staged.h"
#if DDPRT_CUDA
#include "kernels/cuda/k_cuda.h"
#define TP_IPC_MAX K_CUDA_IPC_MAX
#else
#define TP_IPC_MAX 8
#endif

#define TP_IPC_NCH 8 /* chunks in flight per op (events rs[k]); large ops take larger chunks */

/* The IPC group is the ranks of this rank's host: n of them (all of the comm on one host;
 * c->nlocal when hier), in comm rank order; every array below is by local index. */
struct tp_ipc {
    int n, me, device;                /* local ranks, my local index, my GPU */
    int hier, nhosts;                 /* hier: several hosts, staged across (tp_ipc_hier.c) */
    int rank[TP_IPC_MAX];             /* comm rank of each local index */
    int64_t *offs;                    /* world entries: the offsets allgather's result */
    unsigned char *base;              /* this rank's region */
    size_t bytes[TP_IPC_MAX];         /* every local rank's region size */
    unsigned char *peer[TP_IPC_MAX];  /* every local rank's region here (peer[me] = base) */
    port_event ready[TP_IPC_MAX], rs[TP_IPC_MAX][TP_IPC_NCH]; /* [me]: own; others opened */
    port_event ag;                    /* local: this rank's op is done on the device */
    port_event rsl;                   /* local: the reduce stream's progress (hier: D2H after it) */
    port_stream compute, rs_s, ag_s;
};

/* The kernel's dtype code (0 f32, 1 f16, 2 bf16), or -1: not on this path. */
static inline int tp_ipc_dt(int dt) { return dt == RT_F32 ? 0 : dt == RT_F16 ? 1 : dt == RT_BF16 ? 2 : -1; }

/* Host part k of h (its sequence number h->seq + k): an I64 allgather of one element
 * (send, recv: world entries) or a barrier, comm-wide. */
int tp_ipc_host_op(tp_comm *c, const tp_handle *h, int k, int kind, const void *send, void *recv);
/* Host part k failed on the device side (what: the step; the port's message follows). */
int tp_ipc_dev_fail(tp_comm *c, const tp_handle *h, tp_staging *st, int k, const char *what);
/* The host waits for x->ag by the comm's deadline, naming a dead peer at once; a
 * failure names part `last`. */
int tp_ipc_wait_device(tp_comm *c, const tp_handle *h, tp_staging *st, int last);
/* The same for any event of this rank (device work that waits on the peers' events). */
int tp_ipc_wait_event(tp_comm *c, const tp_handle *h, tp_staging *st, port_event e, int last);
/* Records `ready` on compute and swaps the offsets (part 0); checks every local rank's
 * buffer of `count` elements of es bytes lies in its region. *off: mine. */
int tp_ipc_begin(tp_comm *c, tp_handle *h, size_t count, size_t es, int64_t *off);

/* tp_ipc_hier.c: the hierarchical allreduce and the broadcast. */
int tp_ipc_hier_run(tp_comm *c, tp_handle *h);
int tp_ipc_bcast_run(tp_comm *c, tp_handle *h);
#endif
