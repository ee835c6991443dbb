/* Virtual shards (--invariant K): the global batch is cut into K fixed shards, each
 * the batch one rank of a K-rank job would take (--batch-size samples, DistributedSampler
 * with world K); a rank of a W-rank job runs its K/W consecutive shards one after the
 * other as micro-batches. Everything reduced (gradients, loss, BatchNorm statistics,
 * test sums) is combined over one fixed tree over the K shards: its lower levels inside
 * a rank (nn_fold, here), its upper levels across ranks (tp_tree_allreduce, whose
 * header proves the per-element order). So the bits depend on K and the tree, never on
 * W, the thread count, the transport or the bucket size.
 *
 * The tree: mixed radix, level 0 first ("8" = 2x2x2: pairs of neighbouring shards,
 * then pairs of pairs, ...; "12:2x2x3"). Ranks own whole subtrees: W must be K divided
 * by the product of the first few radices (for 2x2x2: 8, 4, 2, 1; for 12:3x2x2: 12, 4,
 * 2, 1; for 12:2x2x3: 12, 6, 3, 1). Without radices, K's prime factors largest first,
 * so that the power-of-two world sizes dividing K are always among them. */
#ifndef NN_VSHARD_H
#define NN_VSHARD_H
#include "rt/tensor.h"
#include "transport/tp.h"
#include <stddef.h>

typedef struct nn_vtree {
    int K, nlev, radix[TP_TREE_MAX_LEVELS]; /* product of the radices = K */
    char spec[96];                          /* "8 (2x2x2)" for messages */
} nn_vtree;

/* "K" or "K:r0xr1x..." (radices 2..8). 0, or -1 with a one-line error. */
int nn_vtree_parse(const char *s, nn_vtree *t, char *err, size_t errlen);
/* Levels of t inside a rank when W ranks share it (K / W shards each); -1 when W is
 * not a supported world size (err names the supported ones). */
int nn_vtree_split(const nn_vtree *t, int W, char *err, size_t errlen);

/* The fold of a rank's m = product of radix[0..nlev) shards over the tree's lower
 * levels: shards arrive in order i = 0..m-1; at level l the operands are folded in
 * order, ((y0 + y1) + y2) + ..., with tp_reduce (the arithmetic the tree collective
 * uses). acc: one buffer of n elements per level (nlev of them). */
/* A row-sparse stretch of the buffers (an embedding table's gradient: a micro-batch
 * touches a few hundred of its rows): rows x len elements from off. nz marks the rows of
 * the pushed shard that may be nonzero (the others are +0), acc_nz the same for each
 * level's buffer; the fold copies and adds only rows marked on either side. Rows that
 * are +0 on both sides would give +0: so the result is the dense fold's, bit for bit. */
typedef struct nn_fold_rows {
    size_t off, rows, len;
    const unsigned char *nz;
    unsigned char *acc_nz[TP_TREE_MAX_LEVELS];
} nn_fold_rows;

typedef struct nn_fold {
    int nlev, radix[TP_TREE_MAX_LEVELS];
    rt_dtype dt;
    size_t n;                       /* elements per buffer */
    void *acc[TP_TREE_MAX_LEVELS];  /* whole-buffer pushes move them instead of copying */
    nn_fold_rows *sp;               /* nsp stretches in increasing off, not overlapping */
    int nsp;
} nn_fold;

/* Elements [off, off + cnt) of shard i (src: its own n-element buffer, read at off).
 * When shard i completes the rank's subtree (i = m - 1), its value for the slice goes
 * to out (at off; out may be src) and 1 returns; else 0. Slices of one shard may come
 * in any order and sizes; every element must come once per shard. With row-sparse
 * stretches, out must be src (its unmarked rows are the +0 the result needs). */
int nn_fold_push(nn_fold *f, int i, const void *src, size_t off, size_t cnt, void *out);
int nn_fold_shards(const nn_fold *f); /* m */
#endif
