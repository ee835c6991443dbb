/* Data-parallel training (PyTorch DDP semantics) over a tp_comm:
 *  - parameters broadcast from rank 0 at start, each rank keeps its optimizer;
 *  - gradients averaged in buckets (contiguous slices of the flat gradient block, in
 *    reverse parameter order); a bucket's allreduce starts from the backward hook as
 *    soon as its last gradient is final and overlaps the rest of backward;
 *  - the same buckets in the same order on every rank, so it cannot hang on order;
 *  - helpers for the agreement steps around training (status, configuration, sync). */
#ifndef NN_DDP_H
#define NN_DDP_H
#include "nn/graph.h"
#include "nn/opts.h"
#include "rt/rdzv.h"
#include "transport/tp.h"

#define NN_DDP_MAX_FIELDS NN_MAX_PARAMS /* fields nn_ddp_check_config / check_sync compare */

typedef struct nn_bucket {
    int first_param, last_param; /* inclusive, in model order */
    size_t off, count;           /* floats in the gradient block */
    int launched;
    tp_handle h;
} nn_bucket;

typedef struct nn_ddp {
    rt_rdzv *rz;
    tp_comm *comm;
    int rank, world, local_rank, local_world;
    nn_graph *m;
    nn_bucket b[NN_MAX_PARAMS];
    int nbuckets;
    double wait_s;               /* time spent waiting for buckets after backward */
    void *scratch;               /* world-sized buffer for the agreement steps */
    rt_dtype wire;               /* RT_F32, or RT_F16 / RT_BF16 under --grad-compress */
    uint16_t *half;              /* [nparams] 16-bit copies of the buckets (compression) */
    /* DDPRT_COMPRESS_CHECK=1 with --grad-compress: every step also averages the f32
     * gradients (cref, a second allreduce) and measures what the 16 bits changed. */
    float *cref;
    double cerr2, cref2;         /* sums of (compressed - f32)^2 and f32^2 */
    uint64_t czero, cnz;         /* elements the 16 bits made 0 / f32 elements not 0 */
    void *reg;                   /* the gradients, in memory the host's ranks read in place */
    size_t reg_bytes;
    uint64_t rounds, launches;   /* gradient allreduce rounds (optimizer steps) and buckets */
    uint64_t wire_bytes;         /* gradient bytes handed to the allreduce, per rank */
    uint64_t sync_calls;         /* SyncBatchNorm allreduces */
} nn_ddp;

/* Rendezvous (--init-method / env / Slurm / MPI) and the transport. A world of one
 * needs no transport: comm stays NULL. 0, or -1 with a one-line error. */
int nn_ddp_connect(nn_ddp *d, const nn_opts *o, char *err, size_t errlen);
/* Every rank reports ok/!ok with its message; when any failed, err gets
 * "rank R: <its message>" (the first failed rank) on every rank and -1 returns. */
int nn_ddp_agree(nn_ddp *d, int ok, const char *msg, char *err, size_t errlen);
/* Compares named int64 fields across ranks; err names the first field and rank that
 * differ from rank 0 ("batch_size is 32 on rank 1 but 64 on rank 0"). */
int nn_ddp_check_config(nn_ddp *d, const char *const *names, const int64_t *vals, int n,
                        char *err, size_t errlen);
/* Sets m's grads_alloc (before nn_graph_finish) so that the gradients, which the
 * buckets allreduce in place, live in tp_mem_alloc memory: ranks of one host then
 * reduce them reading each other's in place. No-op with one rank. */
void nn_ddp_place_grads(nn_ddp *d, nn_graph *m);
/* Buckets of about bucket_mb MiB and the backward hook. */
void nn_ddp_attach(nn_ddp *d, nn_graph *m, double bucket_mb);
/* --grad-compress: buckets go through the allreduce as RT_F16 or RT_BF16 (Horovod's
 * Compression.fp16: converted before, back to f32 after; the transport sums in f32).
 * Allocates the 16-bit scratch once (start-up). 0, or -1 out of memory. */
int nn_ddp_set_compress(nn_ddp *d, rt_dtype wire);
/* DDPRT_COMPRESS_CHECK: prints (rank 0) and resets the epoch's comparison; no-op
 * without it. */
void nn_ddp_compress_report(nn_ddp *d, int epoch);
/* --sync-bn: sets the graph's sync_sum hook to an f64 allreduce over the group. */
void nn_ddp_enable_sync_bn(nn_ddp *d);
/* Parameters and buffers from rank 0 (start-up). */
int nn_ddp_broadcast_params(nn_ddp *d);
/* Buffers (BatchNorm running statistics) from rank 0, before each forward, as DDP's
 * broadcast_buffers=True: every rank then evaluates with the same statistics. */
int nn_ddp_sync_buffers(nn_ddp *d);
/* Waits for every bucket (launching any the hook did not); grads are then averaged. */
int nn_ddp_finish_grads(nn_ddp *d);
/* Checks all ranks hold bit-identical parameters; err names rank and parameter. */
int nn_ddp_check_sync(nn_ddp *d, uint64_t step, char *err, size_t errlen);
int nn_ddp_sum_f64(nn_ddp *d, double *v, int n);
const char *nn_ddp_errmsg(const nn_ddp *d);
void nn_ddp_close(nn_ddp *d, int failed);
#endif
