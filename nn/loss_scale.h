/* Dynamic loss scaling for --amp fp16, with PyTorch GradScaler's semantics: the loss
 * gradient is multiplied by `scale` (initially --loss-scale, 2^16), so that small
 * gradients survive f16 operands; after the allreduce the gradients are checked: any
 * inf or NaN (on any rank: the sum carries it to every rank) skips the optimizer step
 * on every rank and halves the scale; otherwise they are divided by the scale before
 * clipping and the update, and after 2000 such steps in a row the scale doubles. The
 * scale and the count are part of a checkpoint. */
#ifndef NN_LOSS_SCALE_H
#define NN_LOSS_SCALE_H
#include <stdint.h>

#define NN_SCALER_GROWTH_INTERVAL 2000
typedef struct nn_scaler {
    double scale;  /* 0: no scaling (not --amp fp16) */
    uint64_t good; /* steps with finite gradients since the scale last changed */
} nn_scaler;

/* GradScaler.update after a step whose gradients were (not) all finite: returns finite
 * (1: the step is taken). The scale stays a finite positive power of two times the
 * initial one. */
int nn_scaler_update(nn_scaler *s, int finite);
#endif
