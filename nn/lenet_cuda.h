/* The LeNet training step on a GPU (--device cuda): the same model, layout, RNG
 * streams and order of operations as nn/lenet.c + the trainer's step, on
 * kernels/cuda. Parameters, gradients, momentum and activations live in one device
 * arena (one cudaMalloc), batches and the loss come through one pinned arena (one
 * cudaHostAlloc); batches are copied on their own stream, double-buffered, so the next
 * batch's copy overlaps the current step. With more than one rank the gradients are
 * averaged by tp_allreduce_device (pinned staging) before the SGD kernel.
 *
 * The host model (nn_lenet) stays the reference copy for initialisation, broadcast,
 * checkpoints and --check-sync: nn_cuda_upload / nn_cuda_download move parameters and
 * momentum across at those points only. In a build without CUDA every entry point
 * fails with "this build has no CUDA port". */
#ifndef NN_LENET_CUDA_H
#define NN_LENET_CUDA_H
#include "kernels/k.h"
#include "nn/lenet.h"
#include "transport/tp.h"
#include <stddef.h>
#include <stdint.h>

typedef struct nn_cuda nn_cuda;

/* Checks for a GPU; NULL with a one-line reason (no CUDA in this build, no GPU). */
nn_cuda *nn_cuda_open(int device, char *err, size_t errlen);
/* Plans and carves device and pinned memory for `host`'s model and batch size;
 * comm (may be NULL) is the DDP group for gradient averaging. mem_report prints the
 * device and pinned plans. 0, or -1 with err. */
int nn_cuda_setup(nn_cuda *g, int max_batch, tp_comm *comm, int mem_report, char *err, size_t errlen);
int nn_cuda_upload(nn_cuda *g, const float *params, const float *momentum);
int nn_cuda_download(nn_cuda *g, float *params, float *momentum);
/* One optimizer step on a host batch (loss averaged over n); returns the mean loss.
 * Fatal (one line naming the kernel and shapes) on a device or network error. */
double nn_cuda_step(nn_cuda *g, const float *x, const int32_t *y, int n, const k_sgd_cfg *sgd, uint64_t seed,
                    uint64_t step);
/* Evaluation forward of n samples: the NLL sum, and the correct count in *correct. */
double nn_cuda_eval(nn_cuda *g, const float *x, const int32_t *y, int n, long *correct);
const char *nn_cuda_desc(const nn_cuda *g);
void nn_cuda_close(nn_cuda *g);
#endif
