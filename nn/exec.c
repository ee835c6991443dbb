/* Running a graph on the CPU: initialisation, forward, loss, backward. */
#include "nn/graph.h"
#include "kernels/k.h"
#include "rt/log.h"
#include <math.h>
#include <string.h>

static float normal(uint64_t seed, uint64_t i)
{
    /* Box-Muller on two counter-based uniforms: reproducible for any thread count. */
    float u1 = k_rand_uniform(seed, 2 * i), u2 = k_rand_uniform(seed, 2 * i + 1);
    if (u1 < 1e-12f) u1 = 1e-12f;
    return sqrtf(-2.0f * logf(u1)) * cosf(6.28318530718f * u2);
}

void nn_graph_init(nn_graph *g, uint64_t seed)
{
    memset(g->params, 0, g->nparams * sizeof(float));
    for (int i = 0; i < g->np; i++) {
        const nn_param *p = &g->p[i];
        float *w = g->params + p->offset;
        switch (p->init) {
        case NN_INIT_KAIMING_UNIFORM:
            k_init_uniform(p->numel, 1.0f / sqrtf((float)p->fan), seed, p->offset, w);
            break;
        case NN_INIT_KAIMING_NORMAL_OUT:
        case NN_INIT_NORMAL: {
            float sd = p->init == NN_INIT_NORMAL ? (p->init_std > 0 ? p->init_std : 1.0f) : sqrtf(2.0f / (float)p->fan);
            for (size_t k = 0; k < p->numel; k++) w[k] = sd * normal(seed ^ 0x5bd1e995u, p->offset + k);
            break;
        }
        case NN_INIT_ONES:
            for (size_t k = 0; k < p->numel; k++) w[k] = 1.0f;
            break;
        default:
            break;
        }
    }
    if (g->bufs) memset(g->bufs, 0, g->buf_bytes);
    for (int i = 0; i < g->nb; i++)
        if (g->b[i].init == NN_INIT_ONES && g->b[i].dtype == RT_F32) {
            float *v = nn_buf_data(g, i);
            for (size_t k = 0; k < g->b[i].numel; k++) v[k] = 1.0f;
        }
}

static void forward(nn_graph *g, const void *x, int n, int train, uint64_t seed, uint64_t step, int last)
{
    if (n > g->max_batch) rt_fatal("model %s: batch %d exceeds the planned %d", g->model, n, g->max_batch);
    g->nodes[0].y = (float *)x;
    nn_run r = {.n = n, .train = train, .seed = seed, .step = step, .ws = g->ws};
    for (int i = 1; i <= last; i++) {
        nn_node *nd = &g->nodes[i];
        if (nd->np && g->on_param_need) g->on_param_need(g->on_param_ctx, nd->p0 + nd->np);
        if (nd->storage != i || nd->folded) continue; /* a view: same bytes as its input; a relu
                                                        * and max_time the conv below does */
        if (nd->recompute) nd->y = nd->y_fwd; /* backward moved it to y_bwd */
        r.ws = nd->ws_fwd;
        nd->op->fwd(g, nd, &r);
    }
}

const float *nn_forward(nn_graph *g, const void *x, int n, int train, uint64_t seed, uint64_t step)
{
    forward(g, x, n, train, seed, step, g->nn - 1);
    return g->nodes[g->out].y;
}

void nn_forward_to(nn_graph *g, const void *x, int n, int last) { forward(g, x, n, 0, 0, 0, last); }

double nn_loss(nn_graph *g, const int32_t *labels, int n, long *correct)
{
    const nn_node *o = &g->nodes[g->out];
    if (g->lm) { /* the graph's own loss: each sample's mean over its tokens */
        double s = 0;
        for (int i = 0; i < n; i++) s += o->y[i];
        (void)labels;
        if (correct) *correct = 0;
        return s;
    }
    if (g->out_is_logp) return k_nll_loss_sum(n, g->num_classes, o->y, labels, correct);
    return k_cross_entropy_fwd(n, g->num_classes, o->y, labels, g->logp, correct);
}

float *nn_dx(nn_graph *g, const nn_node *n, int i)
{
    nn_node *v = &g->nodes[n->in[i]];
    if (!v->needs_grad) return NULL;
    return v->dy_first == (int)(n - g->nodes) ? v->dy : n->acc;
}

/* After a node's backward: gradients it wrote to the accumulation scratch are added
 * to the input's gradient (a value with several consumers, e.g. a residual input). */
static void accumulate(nn_graph *g, const nn_node *n, int n_batch)
{
    if (n->acc_defer) return; /* the rectifier it reads adds acc in its backward (nn/plan.c) */
    for (int k = 0; k < n->nin; k++) {
        nn_node *v = &g->nodes[n->in[k]];
        if (v->needs_grad && v->dy_first != (int)(n - g->nodes))
            k_add((size_t)n_batch * nn_shape_numel(v->out), v->dy, n->acc, v->dy);
    }
}

void nn_backward(nn_graph *g, const int32_t *labels, int n, int n_total)
{
    nn_node *o = &g->nodes[g->out];
    int last = g->out;
    float scale = 1.0f / (float)n_total;
    if (g->lm) { /* lm_loss makes its own gradient */
        g->lm_scale = scale;
        nn_backward_from(g, last, n);
        return;
    }
    if (g->out_is_logp) {
        /* NLL(log_softmax) fused: the gradient w.r.t. the log_softmax input. */
        float *dx = nn_dx(g, o, 0);
        if (dx) k_log_softmax_nll_bwd(n, g->num_classes, o->y, labels, scale, dx);
        if (dx) accumulate(g, o, n);
        last--;
    } else if (o->dy) {
        k_log_softmax_nll_bwd(n, g->num_classes, g->logp, labels, scale, o->dy);
    }
    nn_backward_from(g, last, n);
}

/* --accum-steps: a node's parameter gradients are final for this micro-batch. */
static void merge_grads(nn_graph *g, const nn_node *nd)
{
    size_t len, lo = nn_node_params(g, nd, &len);
    float *gr = g->grads + lo, *s = g->grad_sum + lo;
    if (g->grad_mode == NN_GRAD_STASH_FIRST) memcpy(s, gr, len * sizeof(float));
    else if (g->grad_mode == NN_GRAD_STASH) k_add(len, s, gr, s);
    else k_add(len, gr, s, gr);
}

/* The outputs the planner drops after the forward, re-run (nn/plan.c) before the
 * backward of node i reads them; batchnorm uses its saved batch statistics. */
static void recompute(nn_graph *g, int i, const nn_run *r)
{
    nn_run rr = *r;
    rr.recompute = 1;
    for (int k = g->nodes[i].rc_head; k >= 0; k = g->nodes[k].rc_next) {
        nn_node *v = &g->nodes[k];
        v->y = v->y_bwd;
        rr.ws = v->ws_rc;
        v->op->fwd(g, v, &rr);
    }
}

void nn_backward_from(nn_graph *g, int last, int n)
{
    nn_run r = {.n = n, .train = 1, .ws = g->ws};
    for (int i = g->nn - 1; i > last; i--) recompute(g, i, &r); /* planned for a backward from the output */
    for (int i = last; i >= 1; i--) {
        nn_node *nd = &g->nodes[i];
        if (!nd->needs_grad) continue;
        if (nd->storage == i && !nd->folded) { /* folded: the conv below does it */
            recompute(g, i, &r);
            r.ws = nd->ws_bwd;
            nd->op->bwd(g, nd, &r);
            accumulate(g, nd, n);
        }
        if (nd->np && g->grad_mode != NN_GRAD_SET) merge_grads(g, nd);
        if (nd->np && g->on_grad_ready && g->grad_mode != NN_GRAD_STASH_FIRST && g->grad_mode != NN_GRAD_STASH)
            g->on_grad_ready(g->on_grad_ctx, nd->p0);
    }
}
