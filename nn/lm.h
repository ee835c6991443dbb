/* Language-model pieces of the trainer (token windows, g->lm): validation loss over a
 * bounded number of windows without the loader (so it can run mid-epoch), and text
 * generation as llm.c prints it (temperature, top-k), from the last LayerNorm's output
 * and the tied embedding. Buffers are planned in the data arena (nn_lm_plan). */
#ifndef NN_LM_H
#define NN_LM_H
#include "nn/data/bpe.h"
#include "nn/trainer.h"

void nn_lm_plan(nn_lm *l, rt_arena *a, const nn_trainer *t);
/* The model's vocabulary: the rows of its (tied) token embedding. */
int nn_lm_vocab(const nn_graph *g);
/* The tokenizer for printing: --tokenizer, else the data directory's encoder.json. */
void nn_lm_open_tokenizer(nn_lm *l, const nn_trainer *t);
/* Mean token loss over this rank's share of the first --eval-batches chunks of the
 * validation windows, summed over ranks (every rank calls it at the same step). */
double nn_lm_eval(nn_trainer *t, nn_lm *l);
/* Generates n tokens after <|endoftext|> (or a newline for byte vocabularies) and
 * prints them as text on stdout, prefixed by `label`. */
void nn_lm_sample(nn_trainer *t, nn_lm *l, int n, const char *label);
/* The language-model mode (nn/train_mode.h). */
extern const nn_train_mode nn_mode_lm;
#endif
