/* A model graph with the storage nn_graph points into and the arena it is planned in,
 * for the tests that build zoo or cfg models. */
#ifndef T_GRAPH_H
#define T_GRAPH_H
#include "nn/graph.h"
#include "rt/arena.h"

typedef struct mg {
    nn_graph g;
    nn_node nodes[NN_MAX_NODES];
    nn_param p[NN_MAX_PARAMS];
    nn_buf b[NN_MAX_BUFS];
    rt_arena a;
} mg;
#endif
