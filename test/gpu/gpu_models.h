/* Shared by the device suite's model tests: a model built and initialised for a test. */
#ifndef TEST_GPU_MODELS_H
#define TEST_GPU_MODELS_H
#include "nn/graph.h"

typedef struct gm_model {
    nn_graph g;
    rt_arena a;
    float *mom;
} gm_model;

/* Zoo model `name` for batches up to B, initialised with seed 42, zero momentum. */
int gm_build(gm_model *m, const char *name, nn_shape in, int classes, int vocab, int B);
/* A .cfg model (3x8x8 inputs, 10 classes) with the trainer's --amp bf16 settings
 * (16-bit channels-last activations, the weights' blocks), three SGD steps of batch 2 on
 * the device: the losses in l, the channels-last outputs and the wgmma decision in
 * *nhwc, *wgmma. 0, or -1 with a FAIL line. */
int gm_train_amp16(const char *path, double l[3], int *nhwc, int *wgmma);
void gm_drop(gm_model *m);
double gm_relerr(const float *a, const float *b, size_t n);
/* Every parameter tensor of dv (grads or params, same layout) within tol of cv. */
int gm_cmp_params(const char *name, const char *what, const nn_graph *c, const float *cv, const float *dv,
                   double tol);
/* Buffers of c against dv (f32 to 1e-5, others bit for bit). */
int gm_cmp_bufs(const char *name, const nn_graph *c, const unsigned char *dv);
/* Tolerance factor on the CPU's (the device's conv and linear kernels add in other
 * orders than the CPU's). */
extern double gm_slack;
/* A host copy of device memory (malloc'd; NaN bytes when the copy fails). */
void *gm_down(const void *dev, size_t bytes);
/* The single-device steps (lenet, resnet20, textcnn) and DDP (gpu_ddp.c); FAIL lines
 * on stdout; returns the number of failed models. */
int gm_graph_train(int *cases);
int gm_graph_ddp(int *cases);
/* A batch of B samples (floats, or ids below vocab for token inputs) and labels. */
void gm_fill(float *x, int32_t *y, int B, nn_shape in, int classes, int vocab, unsigned seed);
#endif
