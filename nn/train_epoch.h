/* The generic epoch and the classifier's evaluation (nn/train_epoch.c). */
#ifndef NN_TRAIN_EPOCH_H
#define NN_TRAIN_EPOCH_H
#include "nn/trainer.h"

/* Loss sum and correct count over this rank's share of the test set; -1 when a bad
 * sample stopped it (nn_loader_error says which). */
int nn_trainer_eval(nn_trainer *t, double *loss_sum, long *correct, long *count);
/* The generic epoch (nn/train_epoch.c: the classifier's and the language model's): its
 * wall time, or -1 when a bad sample stopped it. */
double nn_trainer_epoch(nn_trainer *t, int epoch, struct nn_metrics *mx);
/* A classifier evaluation's sums (loss, correct, count, top-k counts) into r and
 * t->topk_correct, and rank 0's "Test set" and "Acc@k" lines. */
void nn_trainer_report_eval(nn_trainer *t, const double *sums, nn_eval_result *r);
/* The classifier mode (nn/train_mode.h). */
extern const nn_train_mode nn_mode_classifier;
#endif
