/* dropout / dropout2d (whole channels) with probability p. Each node draws from its
 * own counter range: step * max_batch * stride + max_batch * rng_offset, the same on
 * the device, so both draw the same masks. */
#include "nn/ops/op_def.h"

typedef struct dropout_attr { float p; int two_d; } dropout_attr;
NN_ATTR_ACCESS(dropout_attr)
static const nn_attr dropout_attrs[] = {NN_FLOAT(dropout_attr, p, "p", 0.5), NN_BOOL(dropout_attr, two_d, "2d", 0),
                                        {NULL}};

static int dropout_infer(nn_graph *g, nn_node *n, char *err, size_t errlen)
{
    NN_NEED_FLOAT(0);
    dropout_attr a = dropout_attr_of(n);
    if (!(a.p >= 0 && a.p < 1)) NN_BAD("probability %g is outside [0, 1)", (double)a.p);
    n->out = nn_in(g, n, 0)->out;
    size_t per = a.two_d ? (size_t)n->out.c : nn_shape_numel(n->out);
    n->rng_per_sample = (int)per;
    n->aux_per_sample = per;
    return 0;
}

static uint64_t dropout_ctr(const nn_graph *g, const nn_node *n, const nn_run *r)
{
    uint64_t B = (uint64_t)g->max_batch;
    return r->step * B * g->rng_stride + B * n->rng_offset;
}

static void dropout_fwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    const float *x = nn_x(g, n, 0);
    dropout_attr a = dropout_attr_of(n);
    if (!r->train) {
        memcpy(n->y, x, nn_out_numel(n, r) * sizeof(float));
        return;
    }
    if (a.two_d)
        k_dropout2d_fwd(r->n, n->out.c, n->out.h * n->out.w, a.p, r->seed, dropout_ctr(g, n, r), x, n->y, n->aux);
    else
        k_dropout_fwd(nn_out_numel(n, r), a.p, r->seed, dropout_ctr(g, n, r), x, n->y, n->aux);
}

static void dropout_bwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    float *dx = nn_dx(g, n, 0);
    dropout_attr a = dropout_attr_of(n);
    if (!dx) return;
    if (a.two_d) k_dropout2d_bwd(r->n, n->out.c, n->out.h * n->out.w, a.p, n->aux, n->dy, dx);
    else k_dropout_bwd(nn_out_numel(n, r), a.p, n->aux, n->dy, dx);
}

#if DDPRT_CUDA
static int dropout_fwd_cuda(nn_graph *g, nn_node *n, const nn_run *r)
{
    const float *x = nn_x(g, n, 0);
    dropout_attr a = dropout_attr_of(n);
    if (!r->train) return port_memcpy_d2d(n->y, x, nn_out_numel(n, r) * sizeof(float), r->stream, "dropout (eval)");
    uint64_t ctr = dropout_ctr(g, n, r);
    if (a.two_d)
        return k_cuda_dropout2d_fwd(r->n, n->out.c, n->out.h * n->out.w, a.p, r->seed, ctr, x, n->y, n->aux,
                                    r->stream);
    return k_cuda_dropout_fwd(nn_out_numel(n, r), a.p, r->seed, ctr, x, n->y, n->aux, r->stream);
}

static int dropout_bwd_cuda(nn_graph *g, nn_node *n, const nn_run *r)
{
    float *dx = nn_dx(g, n, 0);
    dropout_attr a = dropout_attr_of(n);
    if (!dx) return 0;
    if (a.two_d) return k_cuda_dropout2d_bwd(r->n, n->out.c, n->out.h * n->out.w, a.p, n->aux, n->dy, dx, r->stream);
    return k_cuda_dropout_bwd(nn_out_numel(n, r), a.p, n->aux, n->dy, dx, r->stream);
}
#endif

const nn_op nn_op_dropout = {
    .kind = "dropout", .attrs = dropout_attrs, .attr_size = sizeof(dropout_attr), .infer = dropout_infer,
    .fwd = dropout_fwd, .bwd = dropout_bwd, NN_CUDA_ONLY(.fwd_cuda = dropout_fwd_cuda, .bwd_cuda = dropout_bwd_cuda)};

int nn_dropout(nn_graph *g, int x, float p, int two_d)
{
    dropout_attr a = {p, two_d};
    return nn_add(g, &nn_op_dropout, NULL, &x, 1, &a, sizeof a);
}
