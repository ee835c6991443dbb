/* --invariant's state in the trainer (nn/trainer.h): the shards' tree and this rank's
 * plans (nn/train_inv.c fills it). */
#ifndef NN_TRAIN_INV_STATE_H
#define NN_TRAIN_INV_STATE_H
#include "nn/vshard.h"
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
#endif
