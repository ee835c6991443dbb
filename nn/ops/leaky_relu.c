/* leaky_relu (nn.LeakyReLU): y = x > 0 ? x : negative_slope * x. Backward reads the
 * input (any slope, negative too), so the planner keeps x, or re-makes it when x is a
 * recomputed node's; the op itself is cheap enough to be re-run (NN_RECOMPUTE) and
 * its dx may overwrite dy (NN_BWD_INPLACE). docs/adding-an-op.md walks through it. */
#include "nn/ops/op_def.h"

typedef struct leaky_attr { float slope; } leaky_attr;
NN_ATTR_ACCESS(leaky_attr)
static const nn_attr leaky_attrs[] = {NN_FLOAT(leaky_attr, slope, "negative_slope", 0.01), {NULL}};

NN_UNARY(leaky, leaky_relu, NN_X0, (leaky_attr_of(n).slope,))

const nn_op nn_op_leaky_relu = {
    .kind = "leaky_relu", .flags = NN_BWD_INPUT | NN_RECOMPUTE | NN_BWD_INPLACE, .attrs = leaky_attrs,
    .attr_size = sizeof(leaky_attr), NN_UNARY_FNS(leaky)};
