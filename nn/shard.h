/* Gradient buckets and ZeRO-1's shards of them: pure layout, computed alike on every
 * rank from the graph and --bucket-mb, so the ranks agree without talking.
 *
 * A bucket is a run of whole parameters, in reverse order of use (the last layer's
 * gradients are final first). Under --zero 1 rank r of W owns part r of every bucket:
 * q floats from the bucket's start + r q, q a multiple of the block; the W parts
 * are one reduce-scatter during backward. What is left at the bucket's end (under W
 * blocks and a partial one) is the tail: all-reduced, and updated by every rank.
 *
 * The gradient norm is summed in blocks (nn_shard_block floats) from each bucket's
 * start: a part holds whole blocks, so each block's sum of squares is computed by one
 * rank with the same instructions as without sharding, and the total is the same sum
 * in the same order on any world size, sharded or not. */
#ifndef NN_SHARD_H
#define NN_SHARD_H
#include "nn/graph.h"

typedef struct nn_span {
    size_t lo, hi; /* floats [lo, hi) of the parameter (or gradient) block */
} nn_span;

typedef struct nn_bucket_span {
    int first_param, last_param; /* inclusive, in model order */
    nn_span f;                   /* its floats, the padding between its parameters included */
} nn_bucket_span;

/* The buckets of g for bucket_mb MiB, in launch order; how many (<= NN_MAX_PARAMS). */
int nn_buckets(const nn_graph *g, double bucket_mb, nn_bucket_span *bk);
/* The block of a model of nparams floats: a power of two from 64 to 8192 floats, about
 * nparams / 8192 (a small model still shards; GPT-2's norm is 15k block sums). */
size_t nn_shard_block(size_t nparams);
/* Floats of each rank's part of a bucket of count floats (0: the bucket is all tail). */
size_t nn_shard_q(size_t count, int world, size_t blk);
/* Rank's spans of state: its part of every bucket and every tail, ascending; how
 * many (<= 2 nbk). */
int nn_shard_segments(const nn_bucket_span *bk, int nbk, int rank, int world, size_t blk, nn_span *seg);
/* Norm blocks over all buckets, in the fixed order. */
size_t nn_norm_nblocks(const nn_bucket_span *bk, int nbk, size_t blk);
/* Sum of squares of the parameters' gradients in [lo, hi) (padding skipped). */
double nn_grad_sumsq(const nn_graph *g, size_t lo, size_t hi);
#endif
