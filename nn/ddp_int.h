/* nn_ddp's insides, shared by nn/ddp.c (group, buckets, launch path) and nn/ddp_tree.c
 * (--invariant: the fold over virtual shards and the tree collective). Not an API. */
#ifndef NN_DDP_INT_H
#define NN_DDP_INT_H
#include "nn/ddp.h"
#include "nn/vshard.h"
#include "nn/shard.h"
#include "transport/tp_staged.h"

typedef struct nn_bucket {
    int first_param, last_param; /* inclusive, in model order */
    size_t off, count;           /* floats in the gradient block */
    int launched;
    tp_handle h;
    /* --zero 1 (nn/ddp_zero.c): each rank's part (0: the bucket is all tail, one
     * allreduce in h); the tail's allreduce in h2 (tail set); the parameters'
     * allgather after the step in hg (ag set until waited for). */
    size_t q;
    int tail, ag;
    tp_handle h2, hg;
} nn_bucket;

struct nn_ddp {
    rt_rdzv *rz;
    tp_comm *comm;
    int own_comm;                /* 0: nn_ddp_wrap's, the caller's to destroy */
    int rank, world, local_rank, local_world;
    nn_graph *m;                 /* the reference (host) graph */
    nn_graph *dev;               /* the device graph after nn_ddp_set_device, else NULL */
    tp_staging *st;              /* its staging */
    tp_staging cuda_st;          /* nn_ddp_use_cuda's staging and device ops (nn/ddp_cuda.c) */
    tp_dev_cuda cuda_dc;
    int have_dc;
    nn_bucket b[NN_MAX_PARAMS];
    int nbuckets;
    int from_hook;               /* buckets the hook launched this round */
    void *scratch;               /* world-sized buffer for the agreement steps */
    rt_dtype wire;               /* RT_F32, or RT_F16 / RT_BF16 under --grad-compress */
    uint16_t *half;              /* [nparams] 16-bit copies of the buckets (compression) */
    /* DDPRT_COMPRESS_CHECK=1 with --grad-compress: every step also averages the f32
     * gradients (cref, a second allreduce) and measures what the 16 bits changed. */
    float *cref;
    float *cgot;                 /* --device cuda: the unpacked gradients, downloaded for the check */
    void *dwire;                 /* --device cuda: the 16-bit buckets on the device (nparams) */
    double cerr2, cref2;         /* sums of (compressed - f32)^2 and f32^2 */
    uint64_t czero, cnz;         /* elements the 16 bits made 0 / f32 elements not 0 */
    void *reg;                   /* the gradients, in memory the host's ranks read in place */
    nn_ddp_stats s;
    /* --invariant (nn/ddp_tree.c): m shards per rank folded over the tree's local
     * levels; only the last shard's buckets go out, as tree ops; averaged over K. */
    int tree, K, shard;
    nn_fold fold, sums;          /* the gradients (wire dtype); f64 sums (max_sums each) */
    int max_sums;
    int zero;                    /* --zero 1: buckets reduce-scatter (nn/ddp_zero.c) */
};

/* ddp_tree.c's part of the launch path and of nn_ddp_finish_grads. */
void nn_ddp_tree_launch(nn_ddp *d, nn_bucket *bk);
int nn_ddp_tree_finish(nn_ddp *d);
void nn_ddp_tree_free(nn_ddp *d);
/* ddp_cuda.c's part under --grad-compress: a bucket's f32 gradients into the device's
 * 16-bit buffer (on the compute stream; returns where they are), the reduced ones back,
 * and DDPRT_COMPRESS_CHECK's comparison (before any bucket is unpacked; unpacks them). */
void *nn_ddp_cuda_pack(nn_ddp *d, const nn_bucket *bk);
int nn_ddp_cuda_unpack(nn_ddp *d, const nn_bucket *bk); /* 0, or TP_EIO (the comm failed) */
int nn_ddp_cuda_check(nn_ddp *d);
/* DDPRT_COMPRESS_CHECK's sums over n reduced gradients `got` against the f32 average `ref`. */
void nn_ddp_compress_measure(nn_ddp *d, const float *got, const float *ref, size_t n);
/* ddp_zero.c's part of the launch path. */
void nn_ddp_zero_launch(nn_ddp *d, nn_bucket *bk);

#endif
