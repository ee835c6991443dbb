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
 * plan (its lifetimes are a subset).
 *
 * Memory savers (off with g->no_recompute; the results are the same bits either way):
 * - Recomputation: a cheap node (NN_RECOMPUTE: batchnorm, relu, add) with a single
 *   reader keeps its output only through the forward; backward re-runs its fwd (with
 *   the saved batch statistics) into a second buffer just before the first backward
 *   that reads it. A ResNet then keeps one tensor per conv (its output, for BN's
 *   backward) plus the block outputs, instead of conv, BN-ReLU and add-ReLU outputs.
 *   The re-runs are simulated here in backward order to get their lifetimes, and
 *   recorded per node (rc_head/rc_next) for the executor.
 * - Workspace: each node's own, planned among the activations at the times it runs
 *   (forward, backward, recompute) instead of one shared block beside them.
 * - In place: a recomputed relu writes over the BN output it reads (NN_FWD_INPLACE);
 *   relu's and BN's backward write dx over dy (NN_BWD_INPLACE) when they are the
 *   input's only gradient writer. */
#include "nn/graph.h"
#include "rt/log.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { K_Y, K_DY, K_AUX, K_ACC, K_YB, K_WSF, K_WSB, K_WSR };
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

static size_t node_ws(const nn_graph *g, const nn_node *n)
{
    size_t (*wf)(const nn_graph *, const nn_node *, int) = g->on_device ? n->op->workspace_cuda : n->op->workspace;
    return wf ? wf(g, n, g->max_batch) : 0;
}

/* Planning scratch; times as in the header comment. */
typedef struct pl {
    nn_graph *g;
    int N;
    int *ncons, *y0, *y1, *d0, *d1, *dyroot, *yb0, *yb1, *ybroot, *mat, *tail;
} pl;
static int bw(const pl *P, int i) { return 2 * P->N + 2 + 2 * (P->N - 1 - i); }

static void use(pl *P, int v, int t, int at);

/* Node v's fwd re-runs just before the backward of node `at`. */
static void materialize(pl *P, int v, int at)
{
    nn_graph *g = P->g;
    nn_node *n = &g->nodes[v];
    int tm = bw(P, at) - 1;
    P->mat[v] = 1;
    for (int k = 0; k < n->nin; k++) use(P, g->nodes[n->in[k]].storage, tm, at);
    n->rc_next = -1;
    if (P->tail[at] < 0) g->nodes[at].rc_head = v;
    else g->nodes[P->tail[at]].rc_next = v;
    P->tail[at] = v;
    /* Over its input when that input is read by nothing else, here or later. */
    int u = g->nodes[n->in[0]].storage;
    const nn_node *un = &g->nodes[u];
    P->ybroot[v] = v;
    if ((n->op->flags & NN_FWD_INPLACE) && !(n->op->flags & NN_BWD_INPUT) && un->recompute && P->ncons[u] == 1 &&
        !(un->op->flags & NN_BWD_OUTPUT) && nn_shape_numel(un->out) == nn_shape_numel(n->out))
        P->ybroot[v] = P->ybroot[u];
    int r = P->ybroot[v];
    if (P->yb0[r] > tm) P->yb0[r] = tm;
    if (P->yb1[r] < tm) P->yb1[r] = tm;
}

/* Value v (a storage root) is read at time t in the backward of node `at`. */
static void use(pl *P, int v, int t, int at)
{
    if (!P->g->nodes[v].recompute) {
        if (P->y1[v] < t) P->y1[v] = t;
        return;
    }
    if (!P->mat[v]) materialize(P, v, at);
    int r = P->ybroot[v];
    if (P->yb1[r] < t) P->yb1[r] = t;
}

static void pl_free(pl *P)
{
    free(P->ncons); free(P->y0); free(P->y1); free(P->d0); free(P->d1); free(P->dyroot);
    free(P->yb0); free(P->yb1); free(P->ybroot); free(P->mat); free(P->tail);
}

/* Lifetimes and items of one plan (rc: with the memory savers); returns the item
 * count, or -1 with err. The nodes' recompute schedule is set as a side effect. */
static int plan_items(nn_graph *g, int rc, item **out, int **roots, char *err, size_t errlen)
{
    int N = g->nn;
    size_t B = (size_t)g->max_batch;
    pl P = {.g = g, .N = N};
    int **arrs[] = {&P.ncons, &P.y0, &P.y1, &P.d0, &P.d1, &P.dyroot, &P.yb0, &P.yb1, &P.ybroot, &P.mat, &P.tail};
    for (size_t k = 0; k < sizeof arrs / sizeof *arrs; k++) *arrs[k] = calloc((size_t)N, sizeof(int)); /* start-up only */
#define F(i) (2 * (i))
#define LOSS (2 * N)
#define BW(i) bw(&P, i)
    /* Consumers, gradients needed, storage (views share their input's buffer). */
    int *ncons = P.ncons, *y0 = P.y0, *y1 = P.y1, *d0 = P.d0, *d1 = P.d1;
    for (int i = 1; i < N; i++) {
        nn_node *n = &g->nodes[i];
        n->dy_first = -1;
        n->needs_grad = n->np > 0 || n->grad_source;
        for (int k = 0; k < n->nin; k++) {
            for (int l = 0; l < k; l++)
                if (n->in[l] == n->in[k]) {
                    snprintf(err, errlen, "model %s: node %d (%s) takes node %d twice", g->model, i, n->op->kind, n->in[k]);
                    pl_free(&P);
                    return -1;
                }
            ncons[n->in[k]]++;
            g->nodes[n->in[k]].dy_first = i; /* increasing i: ends as the last consumer */
            if (g->nodes[n->in[k]].needs_grad) n->needs_grad = 1;
        }
    }
    g->nodes[0].needs_grad = 0;
    g->nodes[0].storage = 0;
    for (int i = 0; i < N; i++) {
        nn_node *n = &g->nodes[i];
        n->recompute = 0;
        n->rc_head = n->rc_next = -1;
        n->y_bwd = NULL;
        P.tail[i] = -1;
        P.dyroot[i] = P.ybroot[i] = i;
        P.yb0[i] = 1 << 30;
        P.yb1[i] = -1;
    }
    for (int i = 1; i < N; i++) {
        nn_node *n = &g->nodes[i];
        n->storage = i;
        if ((n->op->flags & NN_ALIAS) && n->in[0] != 0 && ncons[n->in[0]] == 1) n->storage = g->nodes[n->in[0]].storage;
    }
    /* Sparse backward through max over time: conv -> relu -> max_time, each read only by
     * the next, the conv's output one row high. The conv's backward (nn/ops/conv.c) then
     * reads the max_time's dy, output and argmax; the relu and max_time do nothing in
     * backward and the conv's and relu's dy are never made. In forward the conv writes
     * the max_time's output and argmax itself (k_conv2d_fwd_maxt): neither the conv's
     * nor the relu's output is made either. fp32 CPU graphs only (the
     * device and bf16 paths keep the dense chain). */
    for (int i = 0; i < N; i++) g->nodes[i].maxt_from = g->nodes[i].folded = 0;
    for (int i = 1; !g->no_sparse && !g->on_device && g->amp == NN_AMP_NONE && i < N; i++) {
        nn_node *m = &g->nodes[i], *r = &g->nodes[m->in[0]], *c = &g->nodes[r->in[0]];
        if (strcmp(m->op->kind, "max_time") || !m->needs_grad || m->storage != i) continue;
        if (strcmp(r->op->kind, "relu") || ncons[m->in[0]] != 1 || r->grad_source || r->storage != m->in[0]) continue;
        if (strcmp(c->op->kind, "conv2d") || ncons[r->in[0]] != 1 || c->grad_source || c->storage != r->in[0] ||
            c->out.h != 1)
            continue;
        c->maxt_from = i;
        m->folded = NN_FOLD_MAXT;
        r->folded = NN_FOLD_RELU;
    }
    /* What is recomputed: cheap nodes with one reader and no view of them. Device
     * graphs keep everything (their executor does not recompute). */
    for (int i = 1; rc && i < N; i++) {
        nn_node *n = &g->nodes[i];
        int cheap = (n->op->flags & NN_RECOMPUTE) ||
                    (!strcmp(n->op->kind, "conv2d") && (long)n->conv.c * n->conv.r * n->conv.s <= g->recompute_macs);
        n->recompute = cheap && n->storage == i && i != g->out && ncons[i] == 1 && !n->folded && !n->maxt_from;
    }
    for (int i = 1; i < N; i++)
        if (g->nodes[i].storage != i) g->nodes[g->nodes[i].storage].recompute = 0;
    for (int i = 1; i < N; i++) {
        nn_node *n = &g->nodes[i], *u = &g->nodes[n->in[0]];
        n->mask_from_bn = n->recompute && !strcmp(n->op->kind, "relu") && u->recompute &&
                          !strcmp(u->op->kind, "batchnorm2d") && ncons[n->in[0]] == 1;
    }
    /* Lifetimes per storage root. */
    for (int i = 0; i < N; i++) { y0[i] = F(i); y1[i] = F(i); d0[i] = 1 << 30; d1[i] = -1; }
    for (int i = 1; i < N; i++) {
        nn_node *n = &g->nodes[i];
        int s = n->storage;
        if (n->op->flags & NN_BWD_OUTPUT && !n->recompute && !n->folded && y1[s] < BW(i)) y1[s] = BW(i);
        if (!strcmp(n->op->kind, "input")) y1[s] = 4 * N + 8; /* extra inputs (tests) live throughout */
        if (i == g->out) {
            int t = g->out_is_logp ? BW(i) : LOSS;
            if (y1[s] < t) y1[s] = t;
            if (!g->out_is_logp && n->needs_grad && d0[s] > LOSS) d0[s] = LOSS;
        }
        for (int k = 0; k < n->nin; k++) {
            int v = g->nodes[n->in[k]].storage;
            int t = (n->op->flags & NN_BWD_INPUT) && !g->nodes[v].recompute ? BW(i) : F(i);
            if (y1[v] < t) y1[v] = t;
            if (g->nodes[n->in[k]].needs_grad && d0[v] > BW(i)) d0[v] = BW(i);
        }
        if (n->needs_grad && d1[s] < BW(s)) d1[s] = BW(s);
    }
    for (int i = 1; i < N; i++) { /* sparse: the max_time's output, dy (and argmax, below)
                                   * live to the conv's backward; no dy below it */
        int m = g->nodes[i].maxt_from;
        if (!m) continue;
        y0[m] = F(i); /* the conv's forward writes the max_time's output */
        if (y1[m] < BW(i)) y1[m] = BW(i);
        if (d1[m] < BW(i)) d1[m] = BW(i);
        d1[i] = d1[g->nodes[m].in[0]] = -1;
    }
    /* The backward in the executor's order: which recomputed values it reads, when. */
    for (int i = N - 1; rc && i >= 1; i--) {
        nn_node *n = &g->nodes[i];
        if (!n->needs_grad || n->storage != i || n->folded) continue;
        if (n->op->flags & NN_BWD_INPUT)
            for (int k = 0; k < n->nin; k++) use(&P, g->nodes[n->in[k]].storage, BW(i), i);
        if (n->mask_from_bn) use(&P, g->nodes[g->nodes[n->in[0]].in[0]].storage, BW(i), i);
        else if (n->op->flags & NN_BWD_OUTPUT) use(&P, i, BW(i), i);
    }
    /* In-place gradients: input 0's dy is the node's dy when the node writes it first. */
    for (int i = N - 1; rc && i >= 1; i--) {
        nn_node *n = &g->nodes[i];
        if (!(n->op->flags & NN_BWD_INPLACE) || n->storage != i || !n->needs_grad || n->folded) continue;
        int v = n->in[0];
        nn_node *vn = &g->nodes[v];
        if (v != 0 && vn->needs_grad && vn->storage == v && vn->dy_first == i &&
            nn_shape_numel(vn->out) == nn_shape_numel(n->out))
            P.dyroot[v] = P.dyroot[i];
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
            pl_free(&P);
            return -1;
        }
    }
    /* Gradient lifetimes gathered on their root. */
    int *g0 = malloc(sizeof(int) * (size_t)N), *g1 = malloc(sizeof(int) * (size_t)N);
    for (int i = 0; i < N; i++) { g0[i] = 1 << 30; g1[i] = -1; }
    for (int i = 1; i < N; i++) {
        nn_node *n = &g->nodes[i];
        if (n->storage != i || !n->needs_grad || d1[i] < 0) continue;
        int r = P.dyroot[i], t0 = d0[i] < d1[i] ? d0[i] : d1[i];
        if (g0[r] > t0) g0[r] = t0;
        if (g1[r] < d1[i]) g1[r] = d1[i];
    }
    item *it = malloc(sizeof *it * (size_t)(8 * N + 2));
    int ni = 0;
    for (int i = 1; i < N; i++) {
        nn_node *n = &g->nodes[i];
        size_t bytes = r64(B * nn_shape_numel(n->out) * sizeof(float));
        if (n->storage == i) {
            if (!n->folded || n->folded == NN_FOLD_MAXT) it[ni++] = (item){bytes, 0, y0[i], y1[i], i, K_Y};
            if (g1[i] >= 0) it[ni++] = (item){bytes, 0, g0[i], g1[i], i, K_DY};
            if (P.mat[i] && P.ybroot[i] == i) it[ni++] = (item){bytes, 0, P.yb0[i], P.yb1[i], i, K_YB};
        }
        size_t ab = n->aux_per_sample * B + n->aux_fixed;
        int a1 = P.yb1[i] > BW(i) ? P.yb1[i] : BW(i);
        int a0 = F(i);
        for (int k = 1; k < i; k++) /* a max_time the conv k writes in forward, reads in backward */
            if (g->nodes[k].maxt_from == i) {
                a0 = F(k);
                if (a1 < BW(k)) a1 = BW(k);
            }
        if (ab) it[ni++] = (item){r64(ab), 0, a0, a1, i, K_AUX};
    }
    /* The accumulation scratch: one for the whole backward, or with the savers one per
     * node for its own backward (the largest one is otherwise alive throughout). */
    for (int i = 1; rc && i < N; i++) {
        nn_node *n = &g->nodes[i];
        size_t w = node_ws(g, n);
        if (!w || n->storage != i) continue;
        it[ni++] = (item){r64(w), 0, F(i), F(i), i, K_WSF};
        if (n->needs_grad) it[ni++] = (item){r64(w), 0, BW(i), BW(i), i, K_WSB};
    }
    /* The re-runs before one backward go one after another: one workspace for them. */
    for (int i = 1; rc && i < N; i++) {
        size_t w = 0;
        for (int k = g->nodes[i].rc_head; k >= 0; k = g->nodes[k].rc_next)
            if (node_ws(g, &g->nodes[k]) > w) w = node_ws(g, &g->nodes[k]);
        if (w) it[ni++] = (item){r64(w), 0, BW(i) - 1, BW(i) - 1, i, K_WSR};
    }
    if (acc && !rc) it[ni++] = (item){r64(acc * B * sizeof(float)), 0, BW(N - 1), BW(1), 0, K_ACC};
    for (int i = 1; acc && rc && i < N; i++) {
        nn_node *n = &g->nodes[i];
        for (int k = 0; k < n->nin; k++) {
            nn_node *v = &g->nodes[n->in[k]];
            if (v->needs_grad && v->dy_first != i)
                it[ni++] = (item){r64(B * nn_shape_numel(v->out) * sizeof(float)), 0, BW(i), BW(i), i, K_ACC};
        }
    }
    free(g0);
    free(g1);
    /* Members of a root take its buffer after placement (nn_plan): roots[0..N) for
     * gradients, roots[N..2N) for recomputed outputs (-1: not recomputed). */
    int *rt = malloc(sizeof(int) * 2 * (size_t)N);
    for (int i = 0; i < N; i++) {
        rt[i] = P.dyroot[i];
        rt[N + i] = P.mat[i] ? P.ybroot[i] : -1;
    }
    *roots = rt;
    pl_free(&P);
    *out = it;
    return ni;
#undef F
#undef LOSS
#undef BW
}

static size_t place_all(nn_graph *g, item *it, int ni)
{
    if (!g->no_reuse) return place(it, ni);
    size_t off = 0; /* tests: every buffer its own bytes (results must not change) */
    for (int i = 0; i < ni; i++) {
        it[i].off = off;
        off += it[i].size;
    }
    return off;
}

int nn_plan(nn_graph *g, rt_arena *a, char *err, size_t errlen)
{
    int N = g->nn;
    size_t B = (size_t)g->max_batch;
    int rc = !g->no_recompute && !g->on_device;
    item *it;
    int ni, *roots;
    if (rc) { /* the figure without the savers, for --mem-report */
        if ((ni = plan_items(g, 0, &it, &roots, err, errlen)) < 0) return -1;
        g->act_bytes_keep = place_all(g, it, ni);
        free(it);
        free(roots);
        /* auto on a small plan (LeNet, TextCNN): time matters more, keep everything */
        if (g->recompute_macs < 0 && g->act_bytes_keep <= (32u << 20)) rc = 0;
    }
    if (rc && g->recompute_macs < 0) { /* auto: the cheapest convs that halve the plan (or
                                        * bring it under 32 MiB, where time matters more) */
        long best = 0;
        for (;;) {
            long next = -1;
            for (int i = 1; i < N; i++) {
                const nn_node *n = &g->nodes[i];
                long m = (long)n->conv.c * n->conv.r * n->conv.s;
                if (!strcmp(n->op->kind, "conv2d") && m > best && (next < 0 || m < next)) next = m;
            }
            g->recompute_macs = (int)best;
            if ((ni = plan_items(g, rc, &it, &roots, err, errlen)) < 0) return -1;
            size_t peak = place_all(g, it, ni);
            free(it);
            free(roots);
            if (peak <= g->act_bytes_keep / 2 || peak <= (32u << 20) || next < 0) break;
            best = next;
        }
    }
    if ((ni = plan_items(g, rc, &it, &roots, err, errlen)) < 0) return -1;
    g->act_bytes_noreuse = 0;
    for (int i = 0; i < ni; i++)
        if (it[i].kind <= K_ACC) g->act_bytes_noreuse += it[i].size;
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
        if (it[i].kind == K_Y) n->y = p;
        else if (it[i].kind == K_DY) n->dy = p;
        else if (it[i].kind == K_AUX) n->aux = p;
        else if (it[i].kind == K_YB) n->y_bwd = p;
        else if (it[i].kind == K_WSF) n->ws_fwd = p;
        else if (it[i].kind == K_WSB) n->ws_bwd = p;
        else if (it[i].kind == K_WSR)
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
        if (!n->needs_grad || n->maxt_from || n->folded == NN_FOLD_RELU) n->dy = NULL;
        if (n->folded == NN_FOLD_RELU || n->maxt_from) n->y = NULL;
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
        size_t w = node_ws(g, &g->nodes[i]);
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
