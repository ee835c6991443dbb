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

const nn_op nn_op_gelu = {.kind = "gelu", .flags = NN_BWD_INPUT | NN_RECOMPUTE | NN_BWD_INPLACE | NN_HOST_ONLY,
                          .infer = nn_infer_same, .fwd = gelu_fwd, .bwd = gelu_bwd};

int nn_gelu(nn_graph *g, int x) { return nn_add(g, &nn_op_gelu, NULL, &x, 1, NULL, 0); }
