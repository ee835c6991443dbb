/* Shared by the t-cuda-emu sources: a model built and initialised for a test. */
#ifndef TEST_CUDA_EMU_H
#define TEST_CUDA_EMU_H
#include "nn/graph.h"

typedef struct emu_model {
    nn_graph g;
    rt_arena a;
    float *mom;
} emu_model;

/* Zoo model `name` for batches up to B, initialised with seed 42, zero momentum. */
int emu_build(emu_model *m, const char *name, nn_shape in, int classes, int vocab, int B);
void emu_drop(emu_model *m);
double emu_relerr(const float *a, const float *b, size_t n);
/* Every parameter tensor of dv (grads or params, same layout) within tol of cv. */
int emu_cmp_params(const char *name, const char *what, const nn_graph *c, const float *cv, const float *dv,
                   double tol);
/* Buffers of c against dv (f32 to 1e-5, others bit for bit). */
int emu_cmp_bufs(const char *name, const nn_graph *c, const unsigned char *dv);
/* Tolerance factor: 1 against the emulated device; more on a GPU, whose conv and
 * linear kernels add in other orders than the emulation's host loops. */
extern double emu_slack;
/* A host copy of device memory (malloc'd; NaN bytes when the copy fails). */
void *emu_down(const void *dev, size_t bytes);
/* The single-device steps (lenet, resnet20, textcnn) and DDP (emu_ddp.c); FAIL lines
 * on stdout; returns the number of failed models. */
int emu_graph_train(int *cases);
int emu_graph_ddp(int *cases);
/* A batch of B samples (floats, or ids below vocab for token inputs) and labels. */
void emu_fill(float *x, int32_t *y, int B, nn_shape in, int classes, int vocab, unsigned seed);
#endif
