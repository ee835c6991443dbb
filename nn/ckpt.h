/* Checkpoints: one safetensors file (nn/stio.h: atomic as a whole, the previous one
 * kept until the new one is complete, --keep N generations) holding the parameters and
 * buffers under PyTorch's state_dict names, the optimizer state as tensors
 * "optim.<block>.<param name>", and the epoch and step in the metadata. The checkpoint
 * code sees the graph and the optimizer state, not the trainer. */
#ifndef NN_CKPT_H
#define NN_CKPT_H
#include <stddef.h>
#include <stdint.h>

struct nn_graph;
#define NN_CKPT_MAX_BLOCKS 4

typedef struct nn_ckpt_state {
    int epoch;                 /* the epoch completed */
    uint64_t step;             /* optimizer steps taken */
    int nblocks;               /* optimizer state: blocks laid out as the parameters */
    const char *block_names[NN_CKPT_MAX_BLOCKS]; /* "momentum", "exp_avg", ... */
    float *blocks[NN_CKPT_MAX_BLOCKS];
    int nscalars;              /* integer metadata (e.g. an optimizer's own step) */
    const char *scalar_names[8];
    int64_t scalars[8];
} nn_ckpt_state;

int nn_ckpt_save(const char *path, struct nn_graph *g, const nn_ckpt_state *s, int keep, char *err, size_t errlen);
/* Restores parameters, buffers and s's blocks and scalars; fills s->epoch and s->step.
 * Names, dtypes and shapes are checked (one line naming the tensor and both shapes). */
int nn_ckpt_load(const char *path, struct nn_graph *g, nn_ckpt_state *s, char *err, size_t errlen);
/* One integer of a checkpoint's metadata (checked before loading: the optimizer). */
int nn_ckpt_meta_int(const char *path, const char *key, int64_t *out, char *err, size_t errlen);
/* --init-from: parameters and buffers from a safetensors state_dict written by anyone
 * (PyTorch's safetensors.torch.save_file), checked as load_state_dict(strict=True)
 * checks: every tensor present with the model's dtype and shape. */
int nn_ckpt_init_from(struct nn_graph *g, const char *path, char *err, size_t errlen);
#endif
