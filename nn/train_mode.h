/* The trainer's modes: what a classifier, a language model and --invariant training do
 * differently, behind one small interface that the epochs loop (nn/train.c) calls
 * down. Every hook but train_epoch and evaluate may be NULL. ZeRO-1 is no loop mode:
 * it changes where the optimizer state lives, under the step (nn/train_zero.c), and
 * combines with the classifier and language-model modes. */
#ifndef NN_TRAIN_MODE_H
#define NN_TRAIN_MODE_H
#include <stdint.h>

struct nn_trainer;
struct nn_metrics;

/* An evaluation's sums over all ranks (a language model: its mean loss, count 1). */
typedef struct nn_eval_result {
    double loss;
    long correct, count;
} nn_eval_result;

typedef struct nn_train_mode {
    const char *name;
    /* Before anything runs (a language model: its tokenizer; --generate samples here and
     * returns 1: the run ends). */
    int (*start)(struct nn_trainer *t);
    /* Before the first epoch and after the last (a language model's samples). */
    void (*begin)(struct nn_trainer *t);
    void (*end)(struct nn_trainer *t);
    /* One training epoch: its wall time, or -1 when a bad sample stopped it
     * (nn_loader_error). */
    double (*train_epoch)(struct nn_trainer *t, int epoch, struct nn_metrics *mx);
    /* Inside the generic epoch (nn_trainer_epoch), after each optimizer step: the
     * seconds spent, which are not training time. */
    double (*after_step)(struct nn_trainer *t, int epoch, struct nn_metrics *mx);
    /* The epoch's evaluation, its lines printed on rank 0 as the seed script does; -1
     * when a bad sample stopped it. */
    int (*evaluate)(struct nn_trainer *t, nn_eval_result *r);
} nn_train_mode;

/* The modes: nn_mode_classifier (nn/train_epoch.h), nn_mode_lm (nn/lm.h),
 * nn_mode_invariant (nn/train_inv.h). */
#endif
