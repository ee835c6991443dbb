/* Where the planned buffers go (nn/plan.c says when each is alive): greedy placement,
 * the automatic recompute bound, and carving parameters, gradients, buffers and
 * activations from the arena. nn_graph_finish and nn_graph_carve live here, not in
 * nn/graph.c, so building a graph calls no planner (graph.c is below plan.c). */
#include "nn/plan.h"
#include "rt/log.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int by_size(const void *a, const void *b)
{
    const nn_plan_item *x = a, *y = b;
    if (x->size != y->size) return x->size < y->size ? 1 : -1;
    return x->t0 - y->t0; /* deterministic order for equal sizes */
}

static int by_off(const void *a, const void *b)
{
    const nn_plan_item *const *x = a, *const *y = b;
    return (*x)->off < (*y)->off ? -1 : (*x)->off > (*y)->off;
}

/* Places nn_plan_items (sorted largest first); returns the peak. */
static size_t place(nn_plan_item *it, int n)
{
    qsort(it, (size_t)n, sizeof *it, by_size);
    nn_plan_item **live = malloc(sizeof *live * (size_t)(n ? n : 1)); /* start-up only */
    size_t peak = 0;
    for (int i = 0; i < n; i++) {
        int k = 0;
        for (int j = 0; j < i; j++)
            if (it[j].t0 <= it[i].t1 && it[i].t0 <= it[j].t1) live[k++] = &it[j];
        qsort(live, (size_t)k, sizeof *live, by_off);
        size_t off = 0;
        for (int j = 0; j < k; j++) {
            if (live[j]->off >= off + it[i].size) break; /* the gap before it fits */
            if (live[j]->off + live[j]->size > off) off = live[j]->off + live[j]->size;
        }
        it[i].off = off;
        if (off + it[i].size > peak) peak = off + it[i].size;
    }
    free(live);
    return peak;
}


static size_t place_all(nn_graph *g, nn_plan_item *it, int ni)
{
    if (!g->no_reuse) return place(it, ni);
    size_t off = 0; /* tests: every buffer its own bytes (results must not change) */
    for (int i = 0; i < ni; i++) {
        it[i].off = off;
        off += it[i].size;
    }
    return off;
}

static int plan(nn_graph *g, rt_arena *a, char *err, size_t errlen)
{
    int N = g->nn;
    size_t B = (size_t)g->max_batch;
    int rc = !g->no_recompute && !g->on_device;
    nn_plan_item *it;
    int ni, *roots;
    if (rc) { /* the figure without the savers, for --mem-report */
        if ((ni = nn_plan_items(g, 0, &it, &roots, err, errlen)) < 0) return -1;
        g->act_bytes_keep = place_all(g, it, ni);
        free(it);
        free(roots);
        /* auto on a small plan (LeNet, TextCNN): time matters more, keep everything */
        if (g->recompute_macs < 0 && g->act_bytes_keep <= (32u << 20)) rc = 0;
    }
    if (rc && g->recompute_macs == NN_RECOMPUTE_FIT) { /* keep the convs when that fits: re-running them
                                                         * costs ResNets 7-8 % of a step */
        g->recompute_macs = 0;
        if ((ni = nn_plan_items(g, rc, &it, &roots, err, errlen)) < 0) return -1;
        size_t peak = place_all(g, it, ni);
        free(it);
        free(roots);
        if (!g->mem_budget || peak > g->mem_budget) g->recompute_macs = -1;
    }
    if (rc && g->recompute_macs < 0) { /* auto: the ops with the fewest multiply-adds that halve the plan (or
                                        * bring it under 32 MiB, where time matters more) */
        long best = 0;
        for (;;) {
            long next = -1;
            for (int i = 1; i < N; i++) {
                const nn_node *n = &g->nodes[i];
                if (!n->op->macs) continue;
                long m = n->op->macs(n);
                if (m > best && (next < 0 || m < next)) next = m;
            }
            g->recompute_macs = (int)best;
            if ((ni = nn_plan_items(g, rc, &it, &roots, err, errlen)) < 0) return -1;
            size_t peak = place_all(g, it, ni);
            free(it);
            free(roots);
            if (peak <= g->act_bytes_keep / 2 || peak <= (32u << 20) || next < 0) break;
            best = next;
        }
    }
    if ((ni = nn_plan_items(g, rc, &it, &roots, err, errlen)) < 0) return -1;
    g->act_bytes_noreuse = 0;
    for (int i = 0; i < ni; i++)
        if (it[i].kind <= NN_PL_ACC) g->act_bytes_noreuse += it[i].size;
    g->act_bytes = place_all(g, it, ni);
    if (!rc) g->act_bytes_keep = g->act_bytes;
    unsigned char *base = rt_arena_alloc(a, g->act_bytes ? g->act_bytes : 64, RT_MEM_ACTS, "activations (planned)");
    const int *dyroot = roots, *ybroot = roots + N;
    g->acc = NULL;
    for (int i = 0; i < N; i++) {
        nn_node *n = &g->nodes[i];
        n->acc = NULL;
        n->ws_fwd = n->ws_bwd = n->ws_rc = NULL;
    }
    for (int i = 0; i < ni; i++) {
        void *p = base ? base + it[i].off : NULL;
        nn_node *n = &g->nodes[it[i].node];
        if (it[i].kind == NN_PL_Y) n->y = p;
        else if (it[i].kind == NN_PL_DY) n->dy = p;
        else if (it[i].kind == NN_PL_AUX) n->aux = p;
        else if (it[i].kind == NN_PL_YB) n->y_bwd = p;
        else if (it[i].kind == NN_PL_WSF) n->ws_fwd = p;
        else if (it[i].kind == NN_PL_WSB) n->ws_bwd = p;
        else if (it[i].kind == NN_PL_WSR)
            for (int k = n->rc_head; k >= 0; k = g->nodes[k].rc_next) g->nodes[k].ws_rc = p;
        else if (it[i].node) n->acc = p;
        else g->acc = p;
    }
    for (int i = 0; g->acc && i < N; i++) g->nodes[i].acc = g->acc;
    for (int i = 1; i < N; i++) {
        nn_node *n = &g->nodes[i];
        if (n->storage != i) {
            n->y = g->nodes[n->storage].y;
            n->dy = g->nodes[n->storage].dy;
        } else if (dyroot[i] != i) {
            n->dy = g->nodes[dyroot[i]].dy;
        }
        if (ybroot[i] >= 0 && ybroot[i] != i) n->y_bwd = g->nodes[ybroot[i]].y_bwd;
        if (!n->needs_grad || n->maxt_from || n->folded == NN_FOLD_RELU ||
            (n->fused_into && g->nodes[n->fused_into].fuse_from == i && nn_relu_bwd_fused(g->nodes, &g->nodes[n->fused_into])))
            n->dy = NULL;
        if (n->folded == NN_FOLD_RELU || n->maxt_from || n->fused_into) n->y = NULL;
        n->y_fwd = n->y;
    }
    free(roots);
    free(it);
    g->logp = g->num_classes > 0 ? rt_arena_alloc(a, B * (size_t)g->num_classes * sizeof(float), RT_MEM_ACTS,
                                                  "log-probabilities")
                                 : NULL;
    size_t ws = 64;
    for (int i = 1; i < N; i++) {
        if (g->on_device && !g->nodes[i].op->fwd_cuda) {
            snprintf(err, errlen, "model %s: node %d (%s) has no CUDA implementation in this build", g->model, i,
                     g->nodes[i].op->kind);
            return -1;
        }
        size_t w = nn_plan_node_ws(g, &g->nodes[i]);
        if (w > ws) ws = w;
    }
    g->ws_bytes = ws;
    if (rc) { /* inside the activations: the no-reuse figure counts one shared workspace */
        g->act_bytes_noreuse += ws;
        g->ws = NULL;
        return 0;
    }
    g->ws = rt_arena_alloc(a, ws, RT_MEM_WORKSPACE, "workspace (shared by all nodes)");
    for (int i = 0; i < N; i++) g->nodes[i].ws_fwd = g->nodes[i].ws_bwd = g->nodes[i].ws_rc = g->ws;
    return 0;
}

int nn_graph_finish(nn_graph *g, rt_arena *a, int max_batch, char *err, size_t errlen)
{
    g->max_batch = max_batch;
    if (g->err[0]) {
        snprintf(err, errlen, "%s", g->err);
        return -1;
    }
    /* LeNet's streams used 100 counters per sample and step; keep that spacing so the
     * built-in LeNet draws the same masks as before the graph existed. */
    g->rng_stride = g->rng_total > 100 ? g->rng_total : 100;
    g->out = g->nn - 1;
    g->out_is_logp = (g->nodes[g->out].op->flags & NN_LOG_PROBS) != 0;
    nn_shape o = g->nodes[g->out].out;
    if (g->num_classes < 0 || g->lm) { /* a bare graph (the op tests), or a language model: its own loss */
    } else if (o.h != 1 || o.w != 1 || o.tokens) {
        snprintf(err, errlen, "model %s: the output must be a vector of class scores, got %dx%dx%d", g->model, o.c,
                 o.h, o.w);
        return -1;
    }
    else if (g->num_classes == 0) g->num_classes = o.c;
    else if (o.c != g->num_classes) {
        snprintf(err, errlen, "model %s: the output has %d classes, the data has %d", g->model, o.c,
                 g->num_classes);
        return -1;
    }
    /* Parameters: one flat block, each 16-float aligned (aligned kernel and bucket slices). */
    g->nparams = 0;
    for (int i = 0; i < g->np; i++) {
        g->p[i].offset = g->nparams;
        g->nparams += (g->p[i].numel + 15) & ~(size_t)15;
    }
    g->buf_bytes = 0;
    for (int i = 0; i < g->nb; i++) {
        g->b[i].offset = g->buf_bytes;
        g->buf_bytes += (g->b[i].numel * rt_dtype_size(g->b[i].dtype) + 63) & ~(size_t)63;
    }
    return nn_graph_carve(g, a, err, errlen);
}

int nn_graph_carve(nn_graph *g, rt_arena *a, char *err, size_t errlen)
{
    g->params = rt_arena_alloc(a, g->nparams * sizeof(float), RT_MEM_PARAMS, "parameters");
    if (!g->grads_alloc) {
        g->grads = rt_arena_alloc(a, g->nparams * sizeof(float), RT_MEM_GRADS, "gradients");
    } else if (!a->planning && !(g->grads = g->grads_alloc(g->grads_ctx, g->nparams * sizeof(float)))) {
        snprintf(err, errlen, "out of memory for %zu bytes of gradients", g->nparams * sizeof(float));
        return -1;
    }
    g->bufs = g->buf_bytes ? rt_arena_alloc(a, g->buf_bytes, RT_MEM_PARAMS, "buffers") : NULL;
    return plan(g, a, err, errlen);
}

