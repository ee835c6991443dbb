/* Checkpoints. PATH holds the parameters in the safetensors format with PyTorch's
 * state_dict names (conv1.weight, ..., fc2.bias), loadable by safetensors.torch;
 * PATH.state holds the optimizer and trainer state (epoch, step, momentum). Both are
 * written to a temporary file, fsynced and renamed; both carry a CRC-32 checked on
 * load, and they must agree on epoch and step. */
#ifndef NN_CKPT_H
#define NN_CKPT_H
#include <stddef.h>

struct nn_trainer;
struct nn_graph;
int nn_ckpt_save(struct nn_trainer *t, const char *path, int epoch, char *err, size_t errlen);
/* Restores parameters, momentum, step and the next epoch into t. */
int nn_ckpt_load(struct nn_trainer *t, const char *path, char *err, size_t errlen);
/* --init-from: parameters and buffers from a safetensors state_dict written by anyone
 * (PyTorch's safetensors.torch.save_file), checked as load_state_dict(strict=True)
 * checks: every tensor present with the model's dtype and shape. */
int nn_ckpt_init_from(struct nn_graph *g, const char *path, char *err, size_t errlen);
#endif
