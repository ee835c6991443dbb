/* The trainer's --invariant mode (nn/train_inv.c): K virtual shards, this rank's
 * K / W of them run one after the other as micro-batches; gradients, loss, BatchNorm
 * statistics and test sums combined over the shards' tree (nn/vshard.h). */
#ifndef NN_TRAIN_INV_H
#define NN_TRAIN_INV_H
#include "nn/vshard.h"
#include "rt/arena.h"
#include <stdint.h>

typedef struct nn_inv {
    int on;
    nn_vtree t;
    int m, first, nlocal;      /* shards on this rank, the first one, tree levels inside it */
    int ns, nb, steps;         /* per shard and epoch: samples, micro-batches; optimizer steps */
    int32_t *shard_idx;        /* [m][ns] the local shards' samples this epoch */
    int32_t *order, *bounds;   /* the epoch's micro-batches in the order this rank runs them */
    int nbatches;
    int32_t *ebounds, *eshard; /* evaluation: chunks of the local shards' test ranges, and whose */
    int enbatches;
    double *rows, *sum;        /* [m][ne]: per shard loss and BatchNorm statistics (or test sums); reduced */
    int ne, nstats;            /* doubles per row; per forward of BatchNorm statistics */
    double loss;               /* the last step's loss: the shards' average */
} nn_inv;

struct nn_trainer;
struct nn_metrics;
/* Parses --invariant and refuses what it cannot honour (one line in err). */
int nn_inv_setup(struct nn_trainer *t, char *err, size_t errlen);
/* The plans (sampler over K shards, the epoch's order, evaluation chunks), in the data arena. */
void nn_inv_carve_data(struct nn_trainer *t, rt_arena *a);
/* The per-shard rows (once the graph is built), in the host arena. */
void nn_inv_carve_model(struct nn_trainer *t, rt_arena *a);
/* After DDP's attach and compression: the tree in nn_ddp. */
int nn_inv_attach(struct nn_trainer *t, char *err, size_t errlen);
/* One training epoch (the seed's log lines, the same bits for any world size); its
 * wall time, or -1 when a bad sample stopped it (nn_loader_error). */
double nn_inv_train_epoch(struct nn_trainer *t, int epoch, struct nn_metrics *mx);
/* The test sums (loss, correct, count, top-k), per shard then over the tree; -1 when
 * a bad sample stopped it (nn_loader_error). */
int nn_inv_eval(struct nn_trainer *t, double *sums, int nsums);
#endif
