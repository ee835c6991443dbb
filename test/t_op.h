/* The per-op harness (as ggml's test-backend-ops): an op built as a tiny graph on
 * sources the test fills with random values, its forward read back for a naive
 * reference, and its backward checked against central finite differences of
 * L = sum(ry * y) for inputs and parameters. Every op kind needs a test named op_KIND
 * (test/test_graph.c checks); docs/adding-an-op.md shows one. */
#ifndef T_OP_H
#define T_OP_H
#include "nn/ops/ops.h"
#include "rt/arena.h"

typedef struct t_op {
    nn_graph g;
    nn_node nodes[NN_MAX_NODES];
    nn_param p[64];
    nn_buf b[64];
    rt_arena a;
    int src[NN_MAX_IN], nsrc, op;
    float *ry; /* random weights of the scalar L = sum ry * y */
    int batch;
} t_op;

/* A bare graph (no classifier head) for batches of `batch`. */
void t_op_begin(t_op *h, int batch);
/* A source node: a value with a gradient (float shapes), filled by t_op_finish with
 * uniform values in [-1, 1) (token shapes: ids in [0, 7)). */
int t_op_source(t_op *h, nn_shape s);
/* Plans the graph with node `op` as the checked one, initialises the parameters
 * (perturbed so BN's 1/0 matter) and fills the sources. */
void t_op_finish(t_op *h, int op);
/* Training forward; returns L. */
double t_op_objective(t_op *h);
/* The op's backward against central differences (step eps; 1e-2 for t_op_check_grads)
 * on 12 elements of each source and 8 of each parameter, within tol. */
void t_op_check_grads_eps(t_op *h, double tol, float eps);
void t_op_check_grads(t_op *h, double tol);
void t_op_done(t_op *h);
/* The usual sequence in three calls: t_op_begin with one source of shape s (returned);
 * t_op_finish(h, op) and t_op_objective (returns op); t_op_check_grads and t_op_done. */
int t_op_begin1(t_op *h, int batch, nn_shape s);
int t_op_run(t_op *h, int op);
void t_op_end(t_op *h, double tol);
/* Element [s, c, y, x] of a node's output. */
float t_op_at(const nn_node *n, int s, int c, int y, int x);
/* Uniform in [-1, 1) from the harness's generator. */
float t_op_rand(void);
#endif
