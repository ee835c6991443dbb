/* The gradient norm and --zero 1's sharded optimizer state (nn/train_zero.c). */
#ifndef NN_TRAIN_ZERO_H
#define NN_TRAIN_ZERO_H
#include "nn/trainer.h"

/* The L2 norm of the gradients (clip_grad_norm_'s), summed in nn/shard.h's blocks: the
 * same bits with and without --zero 1 (nn/train_zero.c). */
double nn_trainer_grad_norm(nn_trainer *t);
/* --zero 1 (nn/train_zero.c): the buckets and this rank's segments, set in the
 * optimizer (at carve time, before its state is planned; no segments: not sharded);
 * whether this rank's optimizer holds a shard only; the first parameter (index; np:
 * the padding) with a non-finite averaged gradient on any rank, -1 if none; the parameters' allgather after the step, and the wait for it
 * before anything but the forward reads the parameters; the whole optimizer state in
 * fp32 gathered into full[] (malloc'd) for a checkpoint, and a checkpoint's whole
 * state read into this rank's shard (both also for the 8-bit state, unsharded). */
void nn_zero_plan(nn_trainer *t, rt_arena *a);
int nn_zero_sharded(const nn_trainer *t);
int nn_zero_first_nonfinite(nn_trainer *t);
void nn_zero_gather_params(nn_trainer *t);
void nn_zero_params_ready(nn_trainer *t);
void nn_zero_full_state(nn_trainer *t, float **full);
int nn_zero_load(nn_trainer *t, const char *path, nn_ckpt_state *st, char *err, size_t errlen);
#endif
