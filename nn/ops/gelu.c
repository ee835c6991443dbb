/* gelu (nn.GELU(approximate="tanh"), GPT-2's gelu_new): elementwise; backward reads
 * the input, so the planner keeps x; cheap enough to re-run (NN_RECOMPUTE), and dx may
 * overwrite dy. Its math is kernels/k_math.h's, on the CPU and the device. */
#include "nn/ops/op_def.h"
#include "kernels/k_tfm.h"

static void gelu_fwd(nn_graph *g, nn_node *n, const nn_run *r) { k_gelu_fwd(nn_out_numel(n, r), nn_x(g, n, 0), n->y); }
static void gelu_bwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    float *dx = nn_dx(g, n, 0);
    if (dx) k_gelu_bwd(nn_out_numel(n, r), nn_x(g, n, 0), n->dy, dx);
}

/* The device's: x and y of their planned types (16 bits under --amp-activations 16). */
#if DDPRT_CUDA
static int gelu_fwd_cuda(nn_graph *g, nn_node *n, const nn_run *r)
{
    return k_cuda_gelu_fwd_t(nn_out_numel(n, r), nn_x(g, n, 0), nn_cuda_xt(g, n, 0), n->y, nn_cuda_yt(g, n), r->stream);
}
static int gelu_bwd_cuda(nn_graph *g, nn_node *n, const nn_run *r)
{
    float *dx = nn_dx(g, n, 0);
    return dx ? k_cuda_gelu_bwd_t(nn_out_numel(n, r), nn_x(g, n, 0), nn_cuda_xt(g, n, 0), n->dy, dx, r->stream) : 0;
}
#endif

const nn_op nn_op_gelu = {.kind = "gelu", .flags = NN_BWD_INPUT | NN_RECOMPUTE | NN_BWD_INPLACE | NN_IN16 | NN_OUT16,
                          NN_UNARY_FNS(gelu)};

int nn_gelu(nn_graph *g, int x) { return nn_add(g, &nn_op_gelu, NULL, &x, 1, NULL, 0); }
