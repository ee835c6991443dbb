/* The planner's two halves (nn/plan.c: what lives when; nn/plan_mem.c: where it goes
 * and the carving). Internal to nn/: the graph's interface is nn_graph_finish and
 * nn_graph_carve (nn/graph.h). */
#ifndef NN_PLAN_H
#define NN_PLAN_H
#include "nn/graph.h"

/* One buffer of a step: its bytes, its place (set by the placement) and the first
 * and last time it is alive on the step's timeline (nn/plan.c's header comment). */
enum { NN_PL_Y, NN_PL_DY, NN_PL_AUX, NN_PL_ACC, NN_PL_YB, NN_PL_WSF, NN_PL_WSB, NN_PL_WSR };
typedef struct nn_plan_item { size_t size, off; int t0, t1, node, kind; } nn_plan_item;

/* The items of one plan (rc: with the memory savers) and, in roots[0..2N), the node
 * whose buffer each node's gradient (roots[i]) and re-made output (roots[N+i], -1:
 * not recomputed) share. Sets the nodes' fusion and recompute fields as it goes.
 * Returns the item count (arrays malloc'd: start-up only), or -1 with err. */
int nn_plan_items(nn_graph *g, int rc, nn_plan_item **items, int **roots, char *err, size_t errlen);
/* A node's workspace bytes for the graph's max_batch (host or device op's). */
size_t nn_plan_node_ws(const nn_graph *g, const nn_node *n);
#endif
