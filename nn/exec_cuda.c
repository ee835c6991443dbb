/* Running a device graph (nn_graph.on_device): nn/exec.c's forward, loss and backward
 * with the ops' CUDA halves, the same node order, accumulation and gradient-ready hook
 * calls, so DDP's buckets overlap backward on the GPU as on the CPU. Nothing here
 * waits for the device; errors come back as -1 with port_cuda_errmsg set. */
#include "nn/graph.h"
#if DDPRT_CUDA
#include "kernels/cuda/k_cuda.h"
#include "rt/log.h"

int nn_forward_cuda(nn_graph *g, const void *x, int n, int train, uint64_t seed, uint64_t step, port_stream s)
{
    if (n > g->max_batch) rt_fatal("model %s: batch %d exceeds the planned %d", g->model, n, g->max_batch);
    g->nodes[0].y = (float *)x;
    nn_run r = {.n = n, .train = train, .seed = seed, .step = step, .ws = g->ws, .stream = s};
    for (int i = 1; i < g->nn; i++) {
        nn_node *nd = &g->nodes[i];
        if (nd->storage != i) continue;
        if (nd->op->fwd_cuda(g, nd, &r)) return -1;
    }
    return 0;
}

int nn_loss_cuda(nn_graph *g, const int32_t *labels, int n, double *sums, port_stream s)
{
    const nn_node *o = &g->nodes[g->out];
    if (g->lm) return k_cuda_sum_loss(n, o->y, sums, s); /* the graph's own loss per sample */
    const float *logp = o->y;
    if (!g->out_is_logp) {
        if (k_cuda_log_softmax_fwd(n, g->num_classes, o->y, g->logp, s)) return -1;
        logp = g->logp;
    }
    return k_cuda_nll_loss_sum(n, g->num_classes, logp, labels, sums, s);
}

static int accumulate(nn_graph *g, const nn_node *n, int n_batch, port_stream s)
{
    for (int k = 0; k < n->nin; k++) {
        nn_node *v = &g->nodes[n->in[k]];
        if (v->needs_grad && v->dy_first != (int)(n - g->nodes) &&
            k_cuda_add((size_t)n_batch * nn_shape_numel(v->out), v->dy, g->acc, v->dy, s))
            return -1;
    }
    return 0;
}

/* --accum-steps: exec.c's merge_grads on the device (the same additions). */
static int merge_grads(nn_graph *g, const nn_node *nd, port_stream s)
{
    size_t len, lo = nn_node_params(g, nd, &len);
    float *gr = g->grads + lo, *sum = g->grad_sum + lo;
    if (g->grad_mode == NN_GRAD_STASH_FIRST) return port_memcpy_d2d(sum, gr, len * sizeof(float), s, "stash gradients");
    if (g->grad_mode == NN_GRAD_STASH) return k_cuda_add(len, sum, gr, sum, s);
    return k_cuda_add(len, gr, sum, gr, s);
}

/* Needs the loss's log-probabilities (nn_loss_cuda before, for a logits output). */
int nn_backward_cuda(nn_graph *g, const int32_t *labels, int n, int n_total, port_stream s)
{
    nn_node *o = &g->nodes[g->out];
    int last = g->out;
    float scale = (g->loss_scale > 0 ? g->loss_scale : 1.0f) / (float)n_total;
    if (g->lm) { /* lm_loss makes its own gradient */
        g->lm_scale = scale;
    } else if (g->out_is_logp) {
        float *dx = nn_dx(g, o, 0);
        if (dx && (k_cuda_log_softmax_nll_bwd(n, g->num_classes, o->y, labels, scale, dx, s) ||
                   accumulate(g, o, n, s)))
            return -1;
        last--;
    } else if (o->dy && k_cuda_log_softmax_nll_bwd(n, g->num_classes, g->logp, labels, scale, o->dy, s)) {
        return -1;
    }
    nn_run r = {.n = n, .train = 1, .ws = g->ws, .stream = s};
    for (int i = last; i >= 1; i--) {
        nn_node *nd = &g->nodes[i];
        if (!nd->needs_grad) continue;
        if (nd->storage == i && (nd->op->bwd_cuda(g, nd, &r) || accumulate(g, nd, n, s))) return -1;
        if (nd->np && g->grad_mode != NN_GRAD_SET && merge_grads(g, nd, s)) return -1;
        if (nd->np && g->on_grad_ready && g->grad_mode != NN_GRAD_STASH_FIRST && g->grad_mode != NN_GRAD_STASH)
            g->on_grad_ready(g->on_grad_ctx, nd->p0);
    }
    return 0;
}
#endif
