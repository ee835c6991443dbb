/* Training any graph on a GPU (--device cuda). The device graph is a copy of the host
 * graph's nodes, parameters and buffers planned by nn_plan into one device arena (one
 * cudaMalloc): parameters, gradients, buffers, activations, the ops' CUDA workspace,
 * momentum (or Adam's two moments) and double-buffered batches; batches and the loss
 * come through one pinned arena (one cudaHostAlloc), on their own stream, so the next
 * batch's copy overlaps the current step. The ops' CUDA halves (nn/ops/cuda.c) run through nn_forward_cuda /
 * nn_backward_cuda (nn/exec_cuda.c).
 *
 * DDP is nn_ddp's, the same code as on the host, wired by the trainer
 * (nn_ddp_use_cuda): it takes the device graph, stream and the pinned staging memory
 * planned here, and hands back the hooks the step calls (nn_cuda_dp); this file knows
 * neither DDP nor the transport. nn_ddp's backward hook launches each
 * bucket as soon as it is final (tp_iallreduce_device, run by the comm's thread while
 * backward goes on); SGD waits for the last bucket. Buffers (BatchNorm statistics)
 * are broadcast from rank 0 on the device before every training forward and
 * evaluation (nn_ddp_sync_buffers).
 *
 * The host graph stays the reference copy for initialisation, broadcast, checkpoints
 * and --check-sync: nn_cuda_upload / nn_cuda_download move parameters, buffers and
 * momentum across at those points only. Without CUDA every entry point fails with
 * "this build has no CUDA port". */
#ifndef NN_GRAPH_CUDA_H
#define NN_GRAPH_CUDA_H
#include "kernels/k.h"
#include "nn/graph.h"
#include "nn/optim.h"
#include <stddef.h>
#include <stdint.h>

#include "nn/loss_scale.h"

typedef struct nn_cuda nn_cuda;

/* Checks for a GPU (ranks beyond the GPU count share them); NULL with a one-line reason. */
nn_cuda *nn_cuda_open(int device, char *err, size_t errlen);
/* --amp fp16: the loss scaler's state (before nn_cuda_setup; again after --resume);
 * nn_cuda_scaler reads it back (0: no scaling). */
void nn_cuda_use_scaler(nn_cuda *c, const nn_scaler *s);
int nn_cuda_scaler(const nn_cuda *c, nn_scaler *s);
/* Plans and carves device and pinned memory for `host` (finished, max_batch planned),
 * with stage_bytes of pinned memory for the gradients' staging (nn_ddp_cuda_stage_bytes;
 * 0: one rank). mem_report prints the plans. */
int nn_cuda_setup(nn_cuda *c, nn_graph *host, size_t stage_bytes, int mem_report, char *err, size_t errlen);
/* Data parallelism as the device step sees it (nn_ddp_use_cuda sets it; unset: one
 * rank): rank 0's buffers before each training forward, the averaged gradients before
 * the update; each 0 or -1 with errmsg's line. */
typedef struct nn_cuda_dp {
    void *ctx;
    int (*sync_buffers)(void *ctx);
    int (*finish_grads)(void *ctx);
    const char *(*errmsg)(void *ctx);
    int rank;
} nn_cuda_dp;
void nn_cuda_set_dp(nn_cuda *c, const nn_cuda_dp *dp);
/* What the wiring needs: the device index, the compute stream, the staging memory. */
int nn_cuda_device(const nn_cuda *c);
port_stream nn_cuda_stream(const nn_cuda *c);
void *nn_cuda_stage(const nn_cuda *c);
/* The device arena (one allocation: parameters, gradients, buffers), *bytes its size:
 * what the gradient buckets' CUDA IPC registers (tp_staging_ipc). NULL before setup. */
void *nn_cuda_arena(const nn_cuda *c, size_t *bytes);
/* The trainer's optimizer settings (o: fp32 state, unsharded). Adam / AdamW instead of
 * SGD: its exp_avg_sq is planned on the device beside exp_avg (the momentum slot),
 * every nn_cuda_step runs nn_optim_adam_cfg's update over nn_optim_decay_runs at
 * sgd->lr and advances o->t, and upload / download with a momentum move o->v too.
 * --clip-grad-norm: the averaged gradients' norm (k_cuda_sumsq) scales them first, as
 * nn_optim_clip. --accum-steps: a device grad_sum (nn_cuda_step). --sync-bn: pinned
 * scratch for BatchNorm's sums, which go round the ranks through the host graph's
 * sync_sum (set by DDP before nn_cuda_upload). Before nn_cuda_setup. */
void nn_cuda_use_optim(nn_cuda *c, nn_optim *o);
/* Host graph's parameters and buffers, and momentum, to the device; gradients zeroed. */
int nn_cuda_upload(nn_cuda *c, const float *momentum);
/* Parameters and buffers into the host graph, and momentum when not NULL. */
int nn_cuda_download(nn_cuda *c, float *momentum);
/* Micro-batch `micro` of optimizer step `step` on a host batch (floats, or int32 ids
 * for token models); returns its mean loss. With --accum-steps N (nn_cuda_use_optim)
 * micro-batches 0..N-2 only stash their gradients and the update follows micro-batch
 * N-1, as on the CPU; else micro is 0 and every call updates. Fatal (one line naming
 * the kernel and shapes) on a device or network error. */
double nn_cuda_step(nn_cuda *c, const void *x, const int32_t *y, int n, const k_sgd_cfg *sgd, uint64_t seed,
                    uint64_t step, int micro);
/* An accumulation the epoch's end cut short: its sum becomes the gradient, then the
 * update (nn_trainer_flush's device half). */
void nn_cuda_flush(nn_cuda *c, const k_sgd_cfg *sgd, uint64_t step);
/* Evaluation forward of n samples: the NLL sum, and the correct count in *correct. */
double nn_cuda_eval(nn_cuda *c, const void *x, const int32_t *y, int n, long *correct);
/* The device graph (tests: its pointers are device memory). */
nn_graph *nn_cuda_graph(nn_cuda *c);
const char *nn_cuda_desc(const nn_cuda *c);
/* The tensor-core products on wgmma (1) or mma.sync (0), and why (k_cuda_wgmma_setup at open). */
int nn_cuda_wgmma(const nn_cuda *c);
const char *nn_cuda_wgmma_why(const nn_cuda *c);
/* --channels-last: the planned outputs stored channels last (nn_node.nhwc), of all
 * outputs the plan stores (*outputs). */
int nn_cuda_nhwc_outputs(const nn_cuda *c, int *outputs);
/* The same for the nodes of one op kind ("maxpool2d"): how many of its *nodes are NHWC. */
int nn_cuda_nhwc_of_kind(const nn_cuda *c, const char *kind, int *nodes);
/* conv's permutes of x or dy into its NHWC copies during the training steps so far (the
 * weights' blocks not counted): none where every conv reads and writes channels last. */
unsigned long nn_cuda_conv_permutes(const nn_cuda *c);
/* Why the last call failed: the staging's message (network, copies) or the port's. */
const char *nn_cuda_errmsg(const nn_cuda *c);
void nn_cuda_close(nn_cuda *c);
#endif
