/* gelu (nn.GELU(approximate="tanh"), GPT-2's gelu_new): elementwise; backward reads
 * the input, so the planner keeps x; cheap enough to re-run (NN_RECOMPUTE), and dx may
 * overwrite dy. */
#include "nn/ops/op_def.h"
#include "kernels/k_tfm.h"

static void gelu_fwd(nn_graph *g, nn_node *n, const nn_run *r) { k_gelu_fwd(nn_out_numel(n, r), nn_x(g, n, 0), n->y); }

static void gelu_bwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    float *dx = nn_dx(g, n, 0);
    if (dx) k_gelu_bwd(nn_out_numel(n, r), nn_x(g, n, 0), n->dy, dx);
}

#if DDPRT_CUDA
static int gelu_fwd_cuda(nn_graph *g, nn_node *n, const nn_run *r)
{
    return k_cuda_gelu_fwd(nn_out_numel(n, r), nn_x(g, n, 0), n->y, r->stream);
}

static int gelu_bwd_cuda(nn_graph *g, nn_node *n, const nn_run *r)
{
    float *dx = nn_dx(g, n, 0);
    return dx ? k_cuda_gelu_bwd(nn_out_numel(n, r), nn_x(g, n, 0), n->dy, dx, r->stream) : 0;
}
#endif

const nn_op nn_op_gelu = {.kind = "gelu", .flags = NN_BWD_INPUT | NN_RECOMPUTE | NN_BWD_INPLACE,
                          .infer = nn_infer_same, .fwd = gelu_fwd, .bwd = gelu_bwd,
                          NN_CUDA_ONLY(.fwd_cuda = gelu_fwd_cuda, .bwd_cuda = gelu_bwd_cuda)};

int nn_gelu(nn_graph *g, int x) { return nn_add(g, &nn_op_gelu, NULL, &x, 1, NULL, 0); }
