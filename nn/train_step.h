/* The step machinery every trainer mode calls down into (nn/train_step.c). */
#ifndef NN_TRAIN_STEP_H
#define NN_TRAIN_STEP_H
#include "nn/trainer.h"

/* One micro-batch; the optimizer steps after --accum-steps of them (after each one
 * by default). Returns the batch's mean loss. Allocates nothing. */
double nn_trainer_step(nn_trainer *t, const void *x, const int32_t *y, int n);
/* Steps on a partial accumulation (an epoch's last micro-batches); no-op if none. */
void nn_trainer_flush(nn_trainer *t);
/* For nn/train_inv.c: stops the job when loss or a gradient is not finite (--nan-check);
 * clipping, schedule and the optimizer on the averaged gradients; the seed's log line. */
void nn_trainer_nan_guard(nn_trainer *t, double loss);
void nn_trainer_update(nn_trainer *t);
void nn_trainer_log_line(nn_trainer *t, int epoch, long done, double pct, double loss, double rate, double eta);
/* Rank 0 writes the checkpoint after `epoch` epochs and epoch_steps steps of the next
 * (--save; every rank takes part under ZeRO-1). */
void nn_trainer_save(nn_trainer *t, int epoch, int epoch_steps);
/* An elastic launcher's stop request, agreed by all ranks at a checkpoint: 1 stops. */
int nn_trainer_restart_point(nn_trainer *t, int epoch, int epoch_steps);
/* After an optimizer step inside epoch `epoch` (more: steps remain in it): --save-every's
 * checkpoint and, under an elastic launcher, a restart point. 1: stop here (t->stop). */
int nn_trainer_step_done(nn_trainer *t, int epoch, int more);
double nn_peak_rss_mib(void);
/* What a checkpoint of the trainer holds besides the graph (nn/ckpt.h): the optimizer
 * state and the position after `epoch`. */
nn_ckpt_state nn_trainer_ckpt_state(nn_trainer *t, int epoch);
#endif
