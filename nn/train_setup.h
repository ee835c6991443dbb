/* Setting the trainer up, and freeing it (nn/train_setup.c). */
#ifndef NN_TRAIN_SETUP_H
#define NN_TRAIN_SETUP_H
#include "nn/trainer.h"

/* Everything up to the first step (nn/train_setup.c): data located and validated,
 * memory planned and carved, data loaded, parameters initialised or resumed, every
 * flag that depends on them checked. 0, or -1 with a one-line error. */
int nn_trainer_setup(nn_trainer *t, const nn_opts *o, nn_ddp *ddp, char *err, size_t errlen);
void nn_trainer_free(nn_trainer *t);
#endif
