/* batchnorm2d (PyTorch BatchNorm2d): training normalises with the batch statistics
 * (biased variance) and updates running_mean / running_var (unbiased) with momentum
 * fa[1] and num_batches_tracked; evaluation uses the running statistics. The saved
 * state between forward and backward is the mean and 1/sqrt(var + eps) per channel. */
#include "nn/ops/ops.h"
#include <math.h>
#include <stdint.h>

static int bn_infer(nn_graph *g, nn_node *n, char *err, size_t errlen)
{
    NN_NEED_FLOAT(0);
    nn_shape x = nn_in(g, n, 0)->out;
    n->out = x;
    int c = x.c, one = 1;
    nn_param_add(g, n, "weight", 1, &c, NN_INIT_ONES, 0, 1);
    nn_param_add(g, n, "bias", 1, &c, NN_INIT_ZEROS, 0, 1);
    nn_buf_add(g, n, "running_mean", RT_F32, 1, &c, NN_INIT_ZEROS);
    nn_buf_add(g, n, "running_var", RT_F32, 1, &c, NN_INIT_ONES);
    nn_buf_add(g, n, "num_batches_tracked", RT_I64, 0, &one, NN_INIT_ZEROS);
    /* mean, invstd; the device op also keeps the batch variance apart (nn/ops/cuda.c). */
    n->aux_fixed = 3 * (size_t)c * sizeof(float);
    return 0;
}

static void bn_fwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    int c = n->out.c, hw = n->out.h * n->out.w;
    float *mean = n->aux, *invstd = mean + c, eps = n->fa[0], mom = n->fa[1];
    float *rm = nn_buf_data(g, n->b0), *rv = nn_buf_data(g, n->b0 + 1);
    if (r->train) {
        k_bn_stats(r->n, c, hw, nn_x(g, n, 0), mean, invstd);
        double m = (double)r->n * hw, unbias = m > 1 ? m / (m - 1) : 1.0;
        for (int k = 0; k < c; k++) {
            rm[k] = (1 - mom) * rm[k] + mom * mean[k];
            rv[k] = (float)((1 - mom) * rv[k] + mom * invstd[k] * unbias);
            invstd[k] = 1.0f / sqrtf(invstd[k] + eps);
        }
        ++*(int64_t *)nn_buf_data(g, n->b0 + 2);
    } else {
        for (int k = 0; k < c; k++) {
            mean[k] = rm[k];
            invstd[k] = 1.0f / sqrtf(rv[k] + eps);
        }
    }
    k_bn_fwd(r->n, c, hw, nn_x(g, n, 0), mean, invstd, nn_pw(g, n, 0), nn_pw(g, n, 1), n->y);
}

static void bn_bwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    int c = n->out.c, hw = n->out.h * n->out.w;
    const float *x = nn_x(g, n, 0), *mean = n->aux, *invstd = mean + c;
    float *dg = nn_pg(g, n, 0), *db = nn_pg(g, n, 1), *dx = nn_dx(g, n, 0);
    k_bn_bwd_sums(r->n, c, hw, x, mean, invstd, n->dy, dg, db);
    if (dx) k_bn_bwd_dx(r->n, c, hw, x, mean, invstd, nn_pw(g, n, 0), dg, db, (double)r->n * hw, n->dy, dx);
}

const nn_op nn_op_batchnorm2d = {"batchnorm2d", NN_BWD_INPUT, bn_infer, NULL, bn_fwd, bn_bwd,
                                   NN_CUDA(nn_cu_bn_fwd, nn_cu_bn_bwd, NULL)};
