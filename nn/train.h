/* The epochs loop (nn/train.c): a trainer set up by nn/train_setup.h runs here. */
#ifndef NN_TRAIN_H
#define NN_TRAIN_H
#include "nn/trainer.h"

/* The epochs loop with the seed's log lines; returns the process exit status: 0,
 * NN_EXIT_RESTART_POINT, or 1 after a bad sample (its line printed and passed to the
 * other ranks). */
int nn_trainer_run(nn_trainer *t);
#endif
