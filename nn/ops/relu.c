/* relu: y = max(x, 0). The planner may fold it into a conv -> relu -> max over time
 * (NN_RECTIFIER), run it in place, have its backward take the mask from a
 * recomputed BatchNorm's input instead of its own output (mask_from_bn), or fuse it
 * with the BN or add before it (fuse_from: one pass for both). */
#include "nn/ops/op_def.h"

static void relu_fwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    if (n->fuse_from) { /* the node before made no output: its op and relu in one pass */
        const nn_node *p = &g->nodes[n->fuse_from];
        const float *mean = p->aux;
        if (p->op->flags & NN_RECT_MASK_SOURCE) /* BN: aux = mean, invstd (its fwd ran first) */
            k_bn_relu_fwd(r->n, n->out.c, n->out.h * n->out.w, nn_x(g, p, 0), mean, mean + n->out.c, nn_pw(g, p, 0),
                          nn_pw(g, p, 1), n->y);
        else if (g->nodes[p->in[0]].fused_into == (int)(n - g->nodes)) { /* BN -> add: that BN too */
            const nn_node *b = nn_in(g, p, 0);
            mean = b->aux;
            k_bn_add_relu_fwd(r->n, n->out.c, n->out.h * n->out.w, nn_x(g, b, 0), mean, mean + n->out.c,
                              nn_pw(g, b, 0), nn_pw(g, b, 1), nn_x(g, p, 1), n->y);
        } else /* the residual add */
            k_add_relu(nn_out_numel(n, r), nn_x(g, p, 0), nn_x(g, p, 1), n->y);
        return;
    }
    k_relu_fwd(nn_out_numel(n, r), nn_x(g, n, 0), n->y);
}

static void relu_bwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    float *dx = nn_dx(g, n, 0);
    if (!dx || nn_relu_bwd_fused(g->nodes, n)) return; /* fused: BN's backward masks dy */
    if (n->mask_from_bn) { /* the planner dropped both outputs: the mask from BN's input */
        const nn_node *b = nn_in(g, n, 0);
        const float *mean = b->aux;
        k_bn_relu_bwd(r->n, n->out.c, n->out.h * n->out.w, nn_x(g, b, 0), mean, mean + n->out.c, nn_pw(g, b, 0),
                      nn_pw(g, b, 1), n->dy, dx);
        return;
    }
    if (n->acc_from) /* dy + the residual's gradient the next node left in its acc, then the mask */
        k_relu_bwd_add(nn_out_numel(n, r), n->y, n->dy, g->nodes[n->acc_from].acc, dx);
    else
        k_relu_bwd(nn_out_numel(n, r), n->y, n->dy, dx);
}

/* The device half: the same fusions with the device's kernels, x and y of their planned
 * types (16 bits under --amp-activations 16). The recompute savers (mask_from_bn) and
 * the deferred residual add (acc_from) are the CPU's only. */
#if DDPRT_CUDA
static int relu_fwd_cuda(nn_graph *g, nn_node *n, const nn_run *r)
{
    if (n->fuse_from) { /* as relu_fwd: the node before made no output */
        const nn_node *p = &g->nodes[n->fuse_from];
        int c = n->out.c, hw = n->out.h * n->out.w, yt = nn_cuda_yt(g, n), nb = r->n;
        if (n->nhwc) nb *= hw, hw = 1; /* channels last: BN's channel is i % c */
        const float *mean = p->aux;
        if (p->op->flags & NN_RECT_MASK_SOURCE) /* BN */
            return k_cuda_bn_relu_fwd_t(nb, c, hw, nn_x(g, p, 0), nn_cuda_xt(g, p, 0), mean, mean + c, nn_pw(g, p, 0),
                                        nn_pw(g, p, 1), NULL, 0, n->y, yt, r->stream);
        if (g->nodes[p->in[0]].fused_into == (int)(n - g->nodes)) { /* BN -> add: that BN too */
            const nn_node *b = nn_in(g, p, 0);
            mean = b->aux;
            return k_cuda_bn_relu_fwd_t(nb, c, hw, nn_x(g, b, 0), nn_cuda_xt(g, b, 0), mean, mean + c, nn_pw(g, b, 0),
                                        nn_pw(g, b, 1), nn_x(g, p, 1), nn_cuda_xt(g, p, 1), n->y, yt, r->stream);
        }
        return k_cuda_add_relu_t(nn_out_numel(n, r), nn_x(g, p, 0), nn_cuda_xt(g, p, 0), nn_x(g, p, 1),
                                 nn_cuda_xt(g, p, 1), n->y, yt, r->stream);
    }
    return k_cuda_relu_fwd_t(nn_out_numel(n, r), nn_x(g, n, 0), nn_cuda_xt(g, n, 0), n->y, nn_cuda_yt(g, n), r->stream);
}
static int relu_bwd_cuda(nn_graph *g, nn_node *n, const nn_run *r)
{
    float *dx = nn_dx(g, n, 0);
    if (nn_relu_bwd_fused(g->nodes, n)) return 0; /* fused: BN's backward masks dy */
    return dx ? k_cuda_relu_bwd_t(nn_out_numel(n, r), n->y, nn_cuda_yt(g, n), n->dy, dx, r->stream) : 0;
}
#endif

const nn_op nn_op_relu = {
    .kind = "relu",
    .flags = NN_BWD_OUTPUT | NN_RECOMPUTE | NN_FWD_INPLACE | NN_BWD_INPLACE | NN_RECTIFIER | NN_IN16 | NN_OUT16,
    .infer = nn_infer_same, .fwd = relu_fwd, .bwd = relu_bwd,
    NN_CUDA_ONLY(.fwd_cuda = relu_fwd_cuda, .bwd_cuda = relu_bwd_cuda, .nhwc_in = nn_nhwc_follow_in,
                 .nhwc_out = nn_nhwc_follow_out)};

int nn_relu(nn_graph *g, int x) { return nn_add(g, &nn_op_relu, NULL, &x, 1, NULL, 0); }
