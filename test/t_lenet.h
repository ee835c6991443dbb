/* The hand-written LeNet (the graph's reference and the CUDA step's layout): the seed
 * script's Net as explicit forward and backward passes (llm.c style). Parameters and gradients each live in one flat
 * block in state_dict order, so DDP can allreduce slices of it as buckets. */
#ifndef NN_LENET_H
#define NN_LENET_H
#include "kernels/k.h"
#include "rt/arena.h"
#include <stddef.h>
#include <stdint.h>

typedef struct nn_lenet_param {
    const char *name;   /* PyTorch state_dict name: "conv1.weight" */
    int ndim, shape[4];
    size_t offset, numel;
    float bound;        /* init: U(-bound, bound), bound = 1/sqrt(fan_in) */
} nn_lenet_param;

#define NN_LENET_MAX_PARAMS 16

/* Called during backward when the gradients of params [first, NN end) are final,
 * i.e. in reverse order of use: the hook DDP uses to start bucket allreduces. */
typedef void (*nn_lenet_grad_fn)(void *ctx, int first_param);

typedef struct nn_lenet {
    const char *name;
    int max_batch;
    nn_lenet_param p[NN_LENET_MAX_PARAMS];
    int np;
    size_t nparams;
    float *params, *grads;
    /* LeNet layers */
    k_conv_shape conv1, conv2;
    void *ws;
    float *c1, *p1, *c2, *d2, *p2, *f1, *d3, *f2, *lp;
    int32_t *p1i, *p2i;
    uint8_t *m2, *m3;
    float *ga, *gb;     /* ping-pong buffers for activation gradients */
    float drop2d_p, drop_p;
    nn_lenet_grad_fn on_grad_ready;
    void *on_grad_ctx;
} nn_lenet;

/* Carves everything for batches up to max_batch from the arena (planning: sizes only). */
int nn_lenet_build(nn_lenet *m, rt_arena *a, int max_batch);
/* PyTorch's default init (kaiming-uniform a=sqrt(5), bias U(+-1/sqrt(fan_in))), seeded. */
void nn_lenet_init(nn_lenet *m, uint64_t seed);
/* Forward of n <= max_batch samples x[n,1,28,28]; returns log-probabilities [n,10].
 * train: dropout on, its masks drawn from (seed, step). */
const float *nn_lenet_forward(nn_lenet *m, const float *x, int n, int train, uint64_t seed, uint64_t step);
/* Backward of mean NLL over n_total samples (n here; n_total for scale), filling grads. */
void nn_lenet_backward(nn_lenet *m, const float *x, const int32_t *labels, int n, int n_total);
const nn_lenet_param *nn_lenet_find(const nn_lenet *m, const char *name);
#endif
