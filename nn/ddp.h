/* Data-parallel training (PyTorch DDP semantics) over a tp_comm:
 *  - parameters broadcast from rank 0 at start, each rank keeps its optimizer;
 *  - gradients averaged in buckets (contiguous slices of the flat gradient block, in
 *    reverse parameter order); a bucket's allreduce starts from the backward hook as
 *    soon as its last gradient is final and overlaps the rest of backward;
 *  - the same buckets in the same order on every rank, so it cannot hang on order;
 *  - one launch path for host and device gradients: the hook launches a bucket as an
 *    async op on the comm (tp_iallreduce, or tp_iallreduce_device through pinned
 *    staging); the comm's thread runs it; nn_ddp_finish_grads waits for the handles;
 *  - helpers for the agreement steps around training (status, configuration, sync). */
#ifndef NN_DDP_H
#define NN_DDP_H
#include "nn/graph.h"
#include "nn/opts.h"
#include "nn/vshard.h"
#include "rt/rdzv.h"
#include "transport/tp.h"

#define NN_DDP_MAX_FIELDS NN_MAX_PARAMS /* fields nn_ddp_check_config / check_sync compare */

/* The group: opaque (nn/ddp.c); the trainer, the GPU step and the tests go through
 * the functions below. */
typedef struct nn_ddp nn_ddp;
struct tp_staging;

/* What an epoch's DDP line reports; counters since connect. */
typedef struct nn_ddp_stats {
    uint64_t rounds, launches;   /* gradient allreduce rounds (optimizer steps) and buckets */
    uint64_t wire_bytes;         /* gradient bytes handed to the allreduce, per rank */
    uint64_t sync_calls;         /* SyncBatchNorm allreduces */
    uint64_t zero_rs, zero_ag;   /* --zero 1: reduce-scatters (buckets) and parameter allgathers */
    double wait_s;               /* time spent waiting for buckets after backward */
    int last_from_hook;          /* buckets of the last round launched while backward ran */
    int nbuckets;
    rt_dtype wire;               /* RT_F32, or RT_F16 / RT_BF16 under --grad-compress */
    size_t reg_bytes;            /* gradients in tp_mem_alloc memory (0: the arena) */
    size_t dev_wire_bytes;       /* --grad-compress --device cuda: the 16-bit buckets' device buffer */
} nn_ddp_stats;

/* Rendezvous (--init-method / env / Slurm / MPI) and the transport. A world of one
 * needs no transport (nn_ddp_comm is NULL). 0 with *out set, or -1 with a one-line
 * error (*out then NULL; nothing to close). */
int nn_ddp_connect(nn_ddp **out, const nn_opts *o, char *err, size_t errlen);
/* A group over a comm the caller owns (tests: loopback worlds); NULL out of memory.
 * nn_ddp_close leaves the comm alone. */
nn_ddp *nn_ddp_wrap(tp_comm *c);
int nn_ddp_rank(const nn_ddp *d);
int nn_ddp_world(const nn_ddp *d);
int nn_ddp_local_rank(const nn_ddp *d);  /* this rank's index on its host (its GPU) */
int nn_ddp_local_world(const nn_ddp *d); /* ranks on this host */
tp_comm *nn_ddp_comm(const nn_ddp *d);   /* NULL for a world of one */
nn_ddp_stats nn_ddp_get_stats(const nn_ddp *d);
/* Every rank reports ok/!ok with its message; when any failed, err gets
 * "rank R: <its message>" (the first failed rank) on every rank and -1 returns. */
int nn_ddp_agree(nn_ddp *d, int ok, const char *msg, char *err, size_t errlen);
/* Compares named int64 fields across ranks; err names the first field and rank that
 * differ from rank 0 ("batch_size is 32 on rank 1 but 64 on rank 0"). */
int nn_ddp_check_config(nn_ddp *d, const char *const *names, const int64_t *vals, int n,
                        char *err, size_t errlen);
/* Compares n lines of text across ranks (line(ctx, i, buf, len) writes line i): the
 * counts, then hashes, then the first line that differs as each side has it: err is
 * "<what> differs between ranks: rank R has '<its line>', rank 0 has '<its line>'". The model
 * check at start-up: one line per node (nn_node_describe). */
typedef void (*nn_ddp_line_fn)(void *ctx, int i, char *buf, size_t len);
int nn_ddp_check_lines(nn_ddp *d, const char *what, int n, nn_ddp_line_fn line, void *ctx, char *err, size_t errlen);
/* Sets m's grads_alloc (before nn_graph_finish) so that the gradients, which the
 * buckets allreduce in place, live in tp_mem_alloc memory: ranks of one host then
 * reduce them reading each other's in place. No-op with one rank. */
void nn_ddp_place_grads(nn_ddp *d, nn_graph *m);
/* Buckets of about bucket_mb MiB and the backward hook. m is the reference (host)
 * graph: parameters, buffers, --check-sync. */
void nn_ddp_attach(nn_ddp *d, nn_graph *m, double bucket_mb);
/* The gradients and buffers live in the device graph dev (a copy of m's layout) and
 * go through the staging (tp_staged.h): the same buckets, hook and launch path as on
 * the host, with tp_iallreduce_device for tp_iallreduce. Before or after attach. */
void nn_ddp_set_device(nn_ddp *d, nn_graph *dev, struct tp_staging *st);
/* --device cuda (nn/ddp_cuda.c): the pinned bytes the device graph plans for the
 * staging (0 without a comm), then the wiring: the device graph's buckets through a
 * staging on its stream (nn_ddp_set_device) and the step's hooks (nn_cuda_set_dp). c
 * NULL unwires (before nn_cuda_close). wire: RT_F32, or --grad-compress's RT_F16 /
 * RT_BF16: then a device buffer of 16-bit buckets is allocated here (start-up, once)
 * and is what CUDA IPC registers, as only it is reduced (nn_ddp_set_compress must name
 * the same wire). 0, or -1 with a one-line error. */
struct nn_cuda;
size_t nn_ddp_cuda_stage_bytes(const nn_ddp *d);
int nn_ddp_use_cuda(nn_ddp *d, struct nn_cuda *c, rt_dtype wire, char *err, size_t errlen);
/* --grad-compress: buckets go through the allreduce as RT_F16 or RT_BF16 (Horovod's
 * Compression.fp16: converted before, back to f32 after; the transport sums in f32,
 * rounding after every step, and averages in 16 bits). On the device the conversions
 * are kernels on the compute stream around the same 16-bit allreduce (staged or
 * cuda_ipc), so the reduced gradients are the host path's bits for the same f32
 * gradients. Allocates the 16-bit scratch once (start-up). 0, or -1 out of memory
 * (or a wire other than nn_ddp_use_cuda's). */
int nn_ddp_set_compress(nn_ddp *d, rt_dtype wire);
/* --invariant (nn/vshard.h): after attach and set_compress. This rank holds
 * K / W consecutive virtual shards, folded over the tree's `nlocal` lower levels; the
 * upper levels are the tree collective across ranks; the result is divided by K. A
 * world of one needs no comm. max_sums: the longest nn_ddp_tree_sum_f64. 0, or -1
 * (err: out of memory, or the comm refused the tree). */
int nn_ddp_set_tree(nn_ddp *d, const nn_vtree *t, int nlocal, int max_sums, char *err, size_t errlen);
/* Local shard i (0..m-1) runs its micro-batches next: only the last one's buckets go
 * out from the hook. */
void nn_ddp_begin_shard(nn_ddp *d, int i);
/* After a shard's last backward, before the next shard (not after the last one):
 * its gradients into the fold. */
void nn_ddp_end_shard(nn_ddp *d);
/* n values per local shard (vals: m rows, `stride` apart, shard order) summed over the
 * tree into out on every rank (f64). 0, or a transport error. */
int nn_ddp_tree_sum_f64(nn_ddp *d, const double *vals, int stride, int n, double *out);
/* DDPRT_COMPRESS_CHECK: prints (rank 0) and resets the epoch's comparison; no-op
 * without it. */
void nn_ddp_compress_report(nn_ddp *d, int epoch);
/* --sync-bn: sets the graph's sync_sum hook to an f64 allreduce over the group. */
void nn_ddp_enable_sync_bn(nn_ddp *d);
/* Parameters and buffers from rank 0 (start-up). */
int nn_ddp_broadcast_params(nn_ddp *d);
/* Buffers (BatchNorm running statistics) from rank 0, before each forward, as DDP's
 * broadcast_buffers=True: every rank then evaluates with the same statistics. On the
 * device graph's buffers after nn_ddp_set_device. */
int nn_ddp_sync_buffers(nn_ddp *d);
/* --zero 1 (after attach): buckets reduce-scatter into the ranks' parts and all-reduce
 * their tails (nn/shard.h, blocks of blk floats) where they would all-reduce (plain f32 gradients; under
 * --grad-compress and --invariant they still all-reduce); nn_ddp_zero_gather starts
 * the parameters' allgather after the step, and the graph's forward waits for each
 * bucket before its first node (nn_ddp_zero_wait: buckets holding parameters below
 * end_param; INT_MAX: all). 0, or a transport code. */
void nn_ddp_set_zero(nn_ddp *d, size_t blk);
int nn_ddp_zero_gather(nn_ddp *d, float *params);
int nn_ddp_zero_wait(nn_ddp *d, int end_param);
/* Waits for every bucket (launching any the hook did not); grads are then averaged
 * (under --zero 1: the rank's parts and the tails only). */
int nn_ddp_finish_grads(nn_ddp *d);
/* Checks all ranks hold bit-identical parameters; err names rank and parameter. */
int nn_ddp_check_sync(nn_ddp *d, uint64_t step, char *err, size_t errlen);
int nn_ddp_sum_f64(nn_ddp *d, double *v, int n);
const char *nn_ddp_errmsg(const nn_ddp *d);
/* Frees d (NULL is fine); failed: abort the comm first so the peers stop at once. */
void nn_ddp_close(nn_ddp *d, int failed);
/* This rank stops for `why`: the other ranks get the reason with their error instead
 * of only "rank N closed the connection". */
void nn_ddp_fail(nn_ddp *d, const char *why);
#endif
