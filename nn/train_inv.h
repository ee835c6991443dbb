/* The trainer's --invariant mode (nn/train_inv.c): K virtual shards, this rank's
 * K / W of them run one after the other as micro-batches; gradients, loss, BatchNorm
 * statistics and test sums combined over the shards' tree (nn/vshard.h). */
#ifndef NN_TRAIN_INV_H
#define NN_TRAIN_INV_H
#include "nn/train_inv_state.h"
#include "nn/train_mode.h"
#include "rt/arena.h"
#include <stdint.h>


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
/* The --invariant mode (nn/train_mode.h). */
extern const nn_train_mode nn_mode_invariant;
#endif
