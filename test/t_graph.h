/* A model graph with the storage nn_graph points into and the arena it is planned in,
 * for the tests that build zoo or cfg models. */
#ifndef T_GRAPH_H
#define T_GRAPH_H
#include "nn/graph.h"
#include "nn/models/models.h"
#include "rt/arena.h"

typedef struct mg {
    nn_graph g;
    nn_node nodes[NN_MAX_NODES];
    nn_param p[NN_MAX_PARAMS];
    nn_buf b[NN_MAX_BUFS];
    rt_arena a;
} mg;

/* Builds model c into m and plans it for batch in m's own arena (a sizing pass first).
 * macs: the recomputation threshold (< 0: no recomputation at all); no_fuse: keep BN,
 * ReLU and add as separate passes. Returns 0 or -1 with err set. */
int t_graph_build(mg *m, const nn_model_cfg *c, int batch, int macs, int no_fuse, char *err, size_t errlen);
/* Trains built graphs m (on th_m threads) and r (th_r) side by side from the same
 * parameters: 3 SGD steps on fixed inputs, then an evaluation forward. Every loss,
 * gradient, buffer (running statistics; num_batches_tracked = steps) and the evaluation
 * output must be bitwise equal; what names the comparison in failures. */
void t_graph_same_training(mg *m, int th_m, mg *r, int th_r, const nn_model_cfg *c, int batch, const char *what);
#endif
