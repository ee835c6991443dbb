/* Lifetime-based planning of activations, activation gradients and saved state, as
 * TensorFlow Lite Micro's greedy planner: every buffer has a size and a first and
 * last use on the step's timeline; buffers are placed largest first at the lowest
 * offset where they overlap nothing that is alive at the same time.
 *
 * Timeline of a training step over N nodes: forward of node i at 2i, the loss at 2N,
 * backward of node i at 2N+2+2(N-1-i). An output lives from its forward to the last
 * forward that reads it, or to the backward of a node that needs it (a conv needs
 * its input, a relu its output). A gradient lives from the first backward that writes
 * it (the last consumer) to its own node's backward. Evaluation runs inside the same
 * plan (its lifetimes are a subset). */
#include "nn/graph.h"
#include "rt/log.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { K_Y, K_DY, K_AUX, K_ACC };
typedef struct item { size_t size, off; int t0, t1, node, kind; } item;

static int by_size(const void *a, const void *b)
{
    const item *x = a, *y = b;
    if (x->size != y->size) return x->size < y->size ? 1 : -1;
    return x->t0 - y->t0; /* deterministic order for equal sizes */
}

static int by_off(const void *a, const void *b)
{
    const item *const *x = a, *const *y = b;
    return (*x)->off < (*y)->off ? -1 : (*x)->off > (*y)->off;
}

/* Places items (sorted largest first); returns the peak. */
static size_t place(item *it, int n)
{
    qsort(it, (size_t)n, sizeof *it, by_size);
    item **live = malloc(sizeof *live * (size_t)(n ? n : 1)); /* start-up only */
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

static size_t r64(size_t b) { return (b + 63) & ~(size_t)63; }

int nn_plan(nn_graph *g, rt_arena *a, char *err, size_t errlen)
{
    int N = g->nn;
    size_t B = (size_t)g->max_batch;
#define F(i) (2 * (i))
#define LOSS (2 * N)
#define BW(i) (2 * N + 2 + 2 * (N - 1 - (i)))
    /* Consumers, gradients needed, storage (views share their input's buffer). */
    int *ncons = calloc((size_t)N, sizeof *ncons);
    for (int i = 1; i < N; i++) {
        nn_node *n = &g->nodes[i];
        n->dy_first = -1;
        n->needs_grad = n->np > 0 || n->grad_source;
        for (int k = 0; k < n->nin; k++) {
            for (int l = 0; l < k; l++)
                if (n->in[l] == n->in[k]) {
                    snprintf(err, errlen, "model %s: node %d (%s) takes node %d twice", g->model, i, n->op->kind, n->in[k]);
                    free(ncons);
                    return -1;
                }
            ncons[n->in[k]]++;
            g->nodes[n->in[k]].dy_first = i; /* increasing i: ends as the last consumer */
            if (g->nodes[n->in[k]].needs_grad) n->needs_grad = 1;
        }
    }
    g->nodes[0].needs_grad = 0;
    g->nodes[0].storage = 0;
    for (int i = 1; i < N; i++) {
        nn_node *n = &g->nodes[i];
        n->storage = i;
        if ((n->op->flags & NN_ALIAS) && n->in[0] != 0 && ncons[n->in[0]] == 1) n->storage = g->nodes[n->in[0]].storage;
    }
    /* Lifetimes per storage root. */
    int *y0 = malloc(sizeof(int) * (size_t)N), *y1 = malloc(sizeof(int) * (size_t)N);
    int *d0 = malloc(sizeof(int) * (size_t)N), *d1 = malloc(sizeof(int) * (size_t)N);
    for (int i = 0; i < N; i++) { y0[i] = F(i); y1[i] = F(i); d0[i] = 1 << 30; d1[i] = -1; }
    for (int i = 1; i < N; i++) {
        nn_node *n = &g->nodes[i];
        int s = n->storage;
        if (n->op->flags & NN_BWD_OUTPUT && y1[s] < BW(i)) y1[s] = BW(i);
        if (!strcmp(n->op->kind, "input")) y1[s] = 4 * N + 8; /* extra inputs (tests) live throughout */
        if (i == g->out) {
            int t = g->out_is_logp ? BW(i) : LOSS;
            if (y1[s] < t) y1[s] = t;
            if (!g->out_is_logp && n->needs_grad && d0[s] > LOSS) d0[s] = LOSS;
        }
        for (int k = 0; k < n->nin; k++) {
            int v = g->nodes[n->in[k]].storage;
            int t = (n->op->flags & NN_BWD_INPUT) ? BW(i) : F(i);
            if (y1[v] < t) y1[v] = t;
            if (g->nodes[n->in[k]].needs_grad && d0[v] > BW(i)) d0[v] = BW(i);
        }
        if (n->needs_grad && d1[s] < BW(s)) d1[s] = BW(s);
    }
    /* Values read by a consumer other than the first writer accumulate via g->acc. */
    size_t acc = 0;
    for (int i = 1; i < N; i++) {
        nn_node *n = &g->nodes[i];
        int uses = 0;
        for (int k = 0; k < n->nin; k++) {
            nn_node *v = &g->nodes[n->in[k]];
            if (v->needs_grad && v->dy_first != i) {
                uses++;
                if (nn_shape_numel(v->out) > acc) acc = nn_shape_numel(v->out);
            }
        }
        if (uses > 1) {
            snprintf(err, errlen, "model %s: node %d (%s) has %d inputs that other nodes also read; at most one is "
                     "supported", g->model, i, n->op->kind, uses);
            free(ncons); free(y0); free(y1); free(d0); free(d1);
            return -1;
        }
    }
    item *it = malloc(sizeof *it * (size_t)(3 * N + 2));
    int ni = 0;
    for (int i = 1; i < N; i++) {
        nn_node *n = &g->nodes[i];
        size_t bytes = r64(B * nn_shape_numel(n->out) * sizeof(float));
        if (n->storage == i) {
            it[ni++] = (item){bytes, 0, y0[i], y1[i], i, K_Y};
            if (n->needs_grad && d1[i] >= 0) it[ni++] = (item){bytes, 0, d0[i] < d1[i] ? d0[i] : d1[i], d1[i], i, K_DY};
        }
        size_t ab = n->aux_per_sample * B + n->aux_fixed;
        if (ab) it[ni++] = (item){r64(ab), 0, F(i), BW(i), i, K_AUX};
    }
    if (acc) it[ni++] = (item){r64(acc * B * sizeof(float)), 0, BW(N - 1), BW(1), 0, K_ACC};
    g->act_bytes_noreuse = 0;
    for (int i = 0; i < ni; i++) g->act_bytes_noreuse += it[i].size;
    if (g->no_reuse) { /* tests: every buffer its own bytes (results must not change) */
        g->act_bytes = 0;
        for (int i = 0; i < ni; i++) {
            it[i].off = g->act_bytes;
            g->act_bytes += it[i].size;
        }
    } else {
        g->act_bytes = place(it, ni);
    }
    unsigned char *base = rt_arena_alloc(a, g->act_bytes ? g->act_bytes : 64, RT_MEM_ACTS, "activations (planned)");
    g->acc = NULL;
    for (int i = 0; i < ni; i++) {
        void *p = base ? base + it[i].off : NULL;
        nn_node *n = &g->nodes[it[i].node];
        if (it[i].kind == K_Y) n->y = p;
        else if (it[i].kind == K_DY) n->dy = p;
        else if (it[i].kind == K_AUX) n->aux = p;
        else g->acc = p;
    }
    for (int i = 1; i < N; i++) {
        nn_node *n = &g->nodes[i];
        if (n->storage != i) {
            n->y = g->nodes[n->storage].y;
            n->dy = g->nodes[n->storage].dy;
        }
        if (!n->needs_grad) n->dy = NULL;
    }
    g->logp = g->num_classes > 0 ? rt_arena_alloc(a, B * (size_t)g->num_classes * sizeof(float), RT_MEM_ACTS,
                                                  "log-probabilities")
                                 : NULL;
    size_t ws = 64;
    for (int i = 1; i < N; i++) {
        const nn_op *op = g->nodes[i].op;
        size_t (*wf)(const nn_graph *, const nn_node *, int) = g->on_device ? op->workspace_cuda : op->workspace;
        if (g->on_device && !op->fwd_cuda) {
            snprintf(err, errlen, "model %s: node %d (%s) has no CUDA implementation in this build", g->model, i,
                     op->kind);
            free(ncons); free(y0); free(y1); free(d0); free(d1); free(it);
            return -1;
        }
        size_t w = wf ? wf(g, &g->nodes[i], g->max_batch) : 0;
        if (w > ws) ws = w;
    }
    g->ws_bytes = ws;
    g->ws = rt_arena_alloc(a, ws, RT_MEM_WORKSPACE, "workspace (shared by all nodes)");
    free(ncons); free(y0); free(y1); free(d0); free(d1); free(it);
    return 0;
}
