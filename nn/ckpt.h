/* Checkpoints: two safetensors files written as one save (nn/stio.h: atomic, the
 * previous save kept until the new one is complete, --keep N generations):
 *   PATH        the model's state_dict as PyTorch names it (parameters and buffers, no
 *               other tensor), so Net().load_state_dict(load_file(PATH), strict=True)
 *               takes it as it is; metadata: model, epoch, step.
 *   PATH.state  the optimizer state as "optim.<block>.<param name>" tensors (PyTorch's
 *               momentum_buffer, exp_avg, exp_avg_sq), the optimizer's name and its own
 *               step, and the same epoch and step; inside an epoch (--save-every) also
 *               epoch_steps, the steps of the next epoch taken.
 * Every value read back is checked before it is used: the header CRC of both files,
 * the two files' common save id, the epoch, steps and optimizer in their ranges. The
 * checkpoint code sees the graph and the optimizer state, not the trainer. */
#ifndef NN_CKPT_H
#define NN_CKPT_H
#include <stddef.h>
#include <stdint.h>

struct nn_graph;
#define NN_CKPT_MAX_BLOCKS 4
#define NN_CKPT_STATE_SUFFIX ".state"
#define NN_CKPT_MAX_EPOCH 100000000

typedef struct nn_ckpt_state {
    int epoch;                 /* the epochs completed (1..; 0 inside the first one) */
    uint64_t epoch_steps;      /* --save-every: optimizer steps of the next epoch already taken
                                * (the sampler's position; 0: an epoch's end, not written) */
    uint64_t step;             /* optimizer steps taken */
    const char *optimizer;     /* "sgd", "adam", "adamw": what wrote the blocks */
    uint64_t optimizer_step;   /* the optimizer's own step count (<= step) */
    double loss_scale;         /* --amp fp16: the loss scaler (nn/loss_scale.h); 0: none (not written) */
    uint64_t scale_good;       /* its steps since the scale last changed */
    int nblocks;               /* optimizer state: blocks laid out as the parameters */
    const char *block_names[NN_CKPT_MAX_BLOCKS]; /* "momentum", "exp_avg", ... */
    float *blocks[NN_CKPT_MAX_BLOCKS];
} nn_ckpt_state;

int nn_ckpt_save(const char *path, struct nn_graph *g, const nn_ckpt_state *s, int keep, char *err, size_t errlen);
/* Restores parameters, buffers and s's blocks; fills s->epoch, s->step and
 * s->optimizer_step. s->optimizer must name the optimizer the run uses: a checkpoint of
 * another is one line saying both. The tensors must be exactly the model's (names,
 * dtypes, shapes: one line naming the tensor and both shapes) and the optimizer's. */
int nn_ckpt_load(const char *path, struct nn_graph *g, nn_ckpt_state *s, char *err, size_t errlen);
/* --init-from: parameters and buffers from a safetensors state_dict written by anyone
 * (PyTorch's safetensors.torch.save_file). strict: as load_state_dict(strict=True),
 * every tensor of the model present and no other (a missing or unexpected one is one
 * line naming it); otherwise (strict=False) the tensors whose names match are loaded
 * and *skipped says how many of the model's were not found and how many of the file's
 * were not used. Shapes and dtypes must match either way. */
int nn_ckpt_init_from(struct nn_graph *g, const char *path, int strict, int skipped[2], char *err, size_t errlen);
/* 0 when the graph's tensors can be saved (names unique and short enough): checked
 * before step 1, not at the first save an epoch later. */
int nn_ckpt_check_names(const struct nn_graph *g, char *err, size_t errlen);
#endif
