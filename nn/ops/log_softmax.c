/* log_softmax over a vector. As the graph's output (NN_LOG_PROBS) the loss fuses NLL
 * into its backward; lsm_bwd runs only where another node reads it. */
#include "nn/ops/op_def.h"
#include <math.h>

static int lsm_infer(nn_graph *g, nn_node *n, char *err, size_t errlen)
{
    NN_NEED_FLOAT(0);
    nn_shape x = nn_in(g, n, 0)->out;
    if (x.h != 1 || x.w != 1) NN_BAD("needs a vector input, got %dx%dx%d", x.c, x.h, x.w);
    n->out = x;
    return 0;
}

static void lsm_fwd(nn_graph *g, nn_node *n, const nn_run *r) { k_log_softmax_fwd(r->n, n->out.c, nn_x(g, n, 0), n->y); }

static void lsm_bwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    float *dx = nn_dx(g, n, 0);
    int c = n->out.c;
    if (!dx) return;
    for (int s = 0; s < r->n; s++) {
        const float *y = n->y + (size_t)s * c, *dy = n->dy + (size_t)s * c;
        double sum = 0;
        for (int k = 0; k < c; k++) sum += dy[k];
        for (int k = 0; k < c; k++) dx[(size_t)s * c + k] = dy[k] - expf(y[k]) * (float)sum;
    }
}

#if DDPRT_CUDA
static int lsm_fwd_cuda(nn_graph *g, nn_node *n, const nn_run *r)
{
    return k_cuda_log_softmax_fwd(r->n, n->out.c, nn_x(g, n, 0), n->y, r->stream);
}

static int lsm_bwd_cuda(nn_graph *g, nn_node *n, const nn_run *r)
{
    float *dx = nn_dx(g, n, 0);
    return dx ? k_cuda_log_softmax_bwd(r->n, n->out.c, n->y, n->dy, dx, r->stream) : 0;
}
#endif

const nn_op nn_op_log_softmax = {.kind = "log_softmax", .flags = NN_BWD_OUTPUT | NN_LOG_PROBS, .infer = lsm_infer,
                                 .fwd = lsm_fwd, .bwd = lsm_bwd,
                                 NN_CUDA_ONLY(.fwd_cuda = lsm_fwd_cuda, .bwd_cuda = lsm_bwd_cuda)};

int nn_log_softmax(nn_graph *g, int x) { return nn_add(g, &nn_op_log_softmax, NULL, &x, 1, NULL, 0); }
