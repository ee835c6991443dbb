/* layernorm (nn.LayerNorm over the last axis, w): per row, (x - mean) * rstd * weight
 * + bias; mean and rstd kept per row for backward (aux). Cheap: backward may re-run it
 * (NN_RECOMPUTE), and its dx may overwrite dy. */
#include "nn/ops/op_def.h"
#include "kernels/k_tfm.h"

typedef struct ln_attr { float eps; } ln_attr;
NN_ATTR_ACCESS(ln_attr)
static const nn_attr ln_attrs[] = {NN_FLOAT(ln_attr, eps, "eps", 1e-5), {NULL}};

static int ln_infer(nn_graph *g, nn_node *n, char *err, size_t errlen)
{
    NN_NEED_FLOAT(0);
    if (!(ln_attr_of(n).eps > 0)) NN_BAD("eps=%g must be above 0", (double)ln_attr_of(n).eps);
    n->out = nn_in(g, n, 0)->out;
    int w = n->out.w;
    nn_param_add(g, n, "weight", 1, &w, NN_INIT_ONES, 0, 1);
    nn_param_add(g, n, "bias", 1, &w, NN_INIT_ZEROS, 0, 1);
    n->aux_per_sample = 2 * (size_t)n->out.c * n->out.h * sizeof(float);
    return 0;
}

static int ln_rows(const nn_node *n, const nn_run *r) { return r->n * n->out.c * n->out.h; }

static void ln_fwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    int rows = ln_rows(n, r);
    float *mean = n->aux, *rstd = mean + rows;
    k_layernorm_fwd(rows, n->out.w, nn_x(g, n, 0), nn_pw(g, n, 0), nn_pw(g, n, 1), ln_attr_of(n).eps, n->y, mean,
                    rstd);
}

static void ln_bwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    int rows = ln_rows(n, r);
    const float *mean = n->aux, *rstd = mean + rows;
    k_layernorm_bwd(rows, n->out.w, nn_x(g, n, 0), nn_pw(g, n, 0), mean, rstd, n->dy, nn_dx(g, n, 0), nn_pg(g, n, 0),
                    nn_pg(g, n, 1));
}

#if DDPRT_CUDA
static int ln_fwd_cuda(nn_graph *g, nn_node *n, const nn_run *r)
{
    int rows = ln_rows(n, r);
    float *mean = n->aux, *rstd = mean + rows;
    /* y in 16 bits where the plan keeps it so (its readers: the Conv1Ds); x, the residual, stays fp32 */
    return k_cuda_layernorm_fwd_t(rows, n->out.w, nn_x(g, n, 0), nn_pw(g, n, 0), nn_pw(g, n, 1), ln_attr_of(n).eps,
                                  n->y, nn_cuda_yt(g, n), mean, rstd, r->stream);
}

static int ln_bwd_cuda(nn_graph *g, nn_node *n, const nn_run *r)
{
    int rows = ln_rows(n, r);
    const float *mean = n->aux, *rstd = mean + rows;
    return k_cuda_layernorm_bwd(rows, n->out.w, nn_x(g, n, 0), nn_pw(g, n, 0), mean, rstd, n->dy, nn_dx(g, n, 0),
                                nn_pg(g, n, 0), nn_pg(g, n, 1), r->stream);
}
#endif

const nn_op nn_op_layernorm = {
    .kind = "layernorm", .flags = NN_BWD_INPUT | NN_RECOMPUTE | NN_BWD_INPLACE | NN_OUT16, .attrs = ln_attrs,
    .attr_size = sizeof(ln_attr), .infer = ln_infer, .fwd = ln_fwd, .bwd = ln_bwd,
    NN_CUDA_ONLY(.fwd_cuda = ln_fwd_cuda, .bwd_cuda = ln_bwd_cuda)};

int nn_layernorm(nn_graph *g, const char *name, int x)
{
    ln_attr a = {1e-5f};
    return nn_add(g, &nn_op_layernorm, name, &x, 1, &a, sizeof a);
}
