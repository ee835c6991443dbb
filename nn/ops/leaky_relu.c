/* leaky_relu (nn.LeakyReLU): y = x > 0 ? x : negative_slope * x. Backward reads the
 * input (any slope, negative too), so the planner keeps x, or re-makes it when x is a
 * recomputed node's; the op itself is cheap enough to be re-run (NN_RECOMPUTE) and
 * its dx may overwrite dy (NN_BWD_INPLACE). docs/adding-an-op.md walks through it. */
#include "nn/ops/op_def.h"

typedef struct leaky_attr { float slope; } leaky_attr;
NN_ATTR_ACCESS(leaky_attr)
static const nn_attr leaky_attrs[] = {NN_FLOAT(leaky_attr, slope, "negative_slope", 0.01), {NULL}};

static void leaky_fwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    k_leaky_relu_fwd(nn_out_numel(n, r), leaky_attr_of(n).slope, nn_x(g, n, 0), n->y);
}

static void leaky_bwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    float *dx = nn_dx(g, n, 0);
    if (dx) k_leaky_relu_bwd(nn_out_numel(n, r), leaky_attr_of(n).slope, nn_x(g, n, 0), n->dy, dx);
}

#if DDPRT_CUDA
static int leaky_fwd_cuda(nn_graph *g, nn_node *n, const nn_run *r)
{
    return k_cuda_leaky_relu_fwd(nn_out_numel(n, r), leaky_attr_of(n).slope, nn_x(g, n, 0), n->y, r->stream);
}

static int leaky_bwd_cuda(nn_graph *g, nn_node *n, const nn_run *r)
{
    float *dx = nn_dx(g, n, 0);
    return dx ? k_cuda_leaky_relu_bwd(nn_out_numel(n, r), leaky_attr_of(n).slope, nn_x(g, n, 0), n->dy, dx, r->stream)
              : 0;
}
#endif

const nn_op nn_op_leaky_relu = {
    .kind = "leaky_relu", .flags = NN_BWD_INPUT | NN_RECOMPUTE | NN_BWD_INPLACE, .attrs = leaky_attrs,
    .attr_size = sizeof(leaky_attr), .infer = nn_infer_same, .fwd = leaky_fwd, .bwd = leaky_bwd,
    NN_CUDA_ONLY(.fwd_cuda = leaky_fwd_cuda, .bwd_cuda = leaky_bwd_cuda)};
