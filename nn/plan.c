/* Lifetime-based planning of activations, activation gradients and saved state, as
 * TensorFlow Lite Micro's greedy planner: every buffer has a size and a first and
 * last use on the step's timeline; nn/plan_mem.c places them largest first at the
 * lowest offset where they overlap nothing that is alive at the same time.
 *
 * Timeline of a training step over N nodes: forward of node i at 2i, the loss at 2N,
 * backward of node i at 2N+2+2(N-1-i). An output lives from its forward to the last
 * forward that reads it, or to the backward of a node that needs it (a conv needs
 * its input, a relu its output). A gradient lives from the first backward that writes
 * it (the last consumer) to its own node's backward. Evaluation runs inside the same
 * plan (its lifetimes are a subset).
 *
 * nn_plan_items runs named passes in order: consumers (readers, gradients needed,
 * views), fusions (the sparse max over time), recompute (which outputs backward
 * re-makes), lifetimes, reruns (when the re-made outputs live), inplace (gradients
 * over gradients), half (16-bit device activations), accumulation, items, scratch
 * (workspaces, accumulation buffers).
 * Passes match op properties (nn_op.flags, nn_op.macs), never op names.
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
#include "nn/plan.h"
#include <stdio.h>
#include <stdlib.h>

typedef nn_plan_item item;

/* Planning scratch, per node; times as in the header comment. */
typedef struct pl {
    nn_graph *g;
    int N, rc;
    int *ncons;        /* readers of each value */
    int *y0, *y1;      /* output lifetime per storage root */
    int *d0, *d1;      /* gradient first write / last read */
    int *dyroot;       /* whose gradient buffer a gradient shares (in place) */
    int *yb0, *yb1, *ybroot; /* re-made outputs: lifetime, and whose buffer */
    int *mat, *tail;   /* re-made yet; the last re-run scheduled before node i's backward */
    int *g0, *g1;      /* gradient lifetimes gathered on their root */
    size_t acc;        /* the largest value accumulated into */
    item *it;
    int ni;
    char *err;
    size_t errlen;
} pl;

static int fw(int i) { return 2 * i; }
static int loss_t(const pl *P) { return 2 * P->N; }
static int bw(const pl *P, int i) { return 2 * P->N + 2 + 2 * (P->N - 1 - i); }
static unsigned flags(const nn_node *n) { return n->op->flags; }
static size_t r64(size_t b) { return (b + 63) & ~(size_t)63; }

size_t nn_plan_node_ws(const nn_graph *g, const nn_node *n)
{
    size_t (*wf)(const nn_graph *, const nn_node *, int) = g->on_device ? n->op->workspace_cuda : n->op->workspace;
    return wf ? wf(g, n, g->max_batch) : 0;
}

static int fail(pl *P, int i, const char *what)
{
    snprintf(P->err, P->errlen, "model %s: node %d (%s) %s", P->g->model, i, P->g->nodes[i].op->kind, what);
    return -1;
}

/* consumers: readers per value, which values need a gradient, who writes each
 * gradient first in backward (the last reader), and views (NN_ALIAS nodes share their
 * input's buffer when nothing else reads it). */
static int pass_consumers(pl *P)
{
    nn_graph *g = P->g;
    for (int i = 1; i < P->N; i++) {
        nn_node *n = &g->nodes[i];
        n->dy_first = -1;
        n->needs_grad = n->np > 0 || n->grad_source;
        for (int k = 0; k < n->nin; k++) {
            for (int l = 0; l < k; l++)
                if (n->in[l] == n->in[k]) {
                    char what[64];
                    snprintf(what, sizeof what, "takes node %d twice", n->in[k]);
                    return fail(P, i, what);
                }
            P->ncons[n->in[k]]++;
            g->nodes[n->in[k]].dy_first = i; /* increasing i: ends as the last consumer */
            if (g->nodes[n->in[k]].needs_grad) n->needs_grad = 1;
        }
    }
    g->nodes[0].needs_grad = 0;
    g->nodes[0].storage = 0;
    for (int i = 0; i < P->N; i++) {
        nn_node *n = &g->nodes[i];
        n->recompute = 0;
        n->rc_head = n->rc_next = -1;
        n->y_bwd = NULL;
        P->tail[i] = -1;
        P->dyroot[i] = P->ybroot[i] = i;
        P->yb0[i] = 1 << 30;
        P->yb1[i] = -1;
    }
    for (int i = 1; i < P->N; i++) {
        nn_node *n = &g->nodes[i];
        n->storage = i;
        if ((flags(n) & NN_ALIAS) && n->in[0] != 0 && P->ncons[n->in[0]] == 1) n->storage = g->nodes[n->in[0]].storage;
    }
    return 0;
}

/* fusions: the sparse backward through max over time. An NN_FUSES_RECT_MAX node
 * (conv) -> NN_RECTIFIER -> NN_MAX_OVER_LEN, each read only by the next, the conv's
 * output one row high: the conv's backward (nn/ops/conv.c) then reads the max's dy,
 * output and argmax; the other two do nothing in backward and the conv's and the
 * rectifier's dy are never made. In forward the conv writes the max's output and
 * argmax itself (k_conv2d_fwd_maxt): neither the conv's nor the rectifier's output is
 * made either. fp32 CPU graphs only (the device and bf16 paths keep the dense chain). */
static void pass_fuse_relu(pl *P);

static void pass_fusions(pl *P)
{
    nn_graph *g = P->g;
    int *ncons = P->ncons;
    for (int i = 0; i < P->N; i++) g->nodes[i].maxt_from = g->nodes[i].folded = 0;
    pass_fuse_relu(P);
    if (g->no_sparse || g->on_device || g->amp != NN_AMP_NONE) return;
    for (int i = 1; i < P->N; i++) {
        nn_node *m = &g->nodes[i], *r = &g->nodes[m->in[0]], *c = &g->nodes[r->in[0]];
        if (!(flags(m) & NN_MAX_OVER_LEN) || !m->needs_grad || m->storage != i) continue;
        if (!(flags(r) & NN_RECTIFIER) || ncons[m->in[0]] != 1 || r->grad_source || r->storage != m->in[0] ||
            r->fuse_from)
            continue;
        if (!(flags(c) & NN_FUSES_RECT_MAX) || ncons[r->in[0]] != 1 || c->grad_source || c->storage != r->in[0] ||
            c->out.h != 1)
            continue;
        c->maxt_from = i;
        m->folded = NN_FOLD_MAXT;
        r->folded = NN_FOLD_RELU;
    }
}

/* BN or add -> ReLU (nn_node.fuse_from): an NN_RECTIFIER whose input is an
 * NN_FUSES_RELU node that nothing else reads computes that node's output and its own
 * in one pass; the node's output is never made. Saves a write and a read of the
 * tensor in forward (and in each re-run); after a BN the backward is one too (BN's
 * sums and dx mask ReLU's dy themselves: no ReLU backward pass, no BN dy). CPU and
 * device graphs. Runs before the sparse fusion, which skips them. */
static void pass_fuse_relu(pl *P)
{
    nn_graph *g = P->g;
    for (int i = 0; i < P->N; i++) g->nodes[i].fuse_from = g->nodes[i].fused_into = 0;
    if (g->no_fuse) return;
    for (int i = 1; i < P->N; i++) {
        nn_node *r = &g->nodes[i];
        int p = r->in[0];
        nn_node *u = &g->nodes[p];
        if (!(flags(r) & NN_RECTIFIER) || r->storage != i || r->nin != 1 || p == 0) continue;
        if (!(flags(u) & NN_FUSES_RELU) || P->ncons[p] != 1 || u->storage != p || u->grad_source || p == g->out)
            continue;
        r->fuse_from = p;
        u->fused_into = i;
        /* BN -> add -> ReLU: the add's first input, a BN read by nothing else, is
         * applied in the same pass too (its backward stays its own). */
        int q = u->in[0];
        nn_node *bn = &g->nodes[q];
        if (!(flags(u) & NN_RECT_MASK_SOURCE) && q != 0 && (flags(bn) & NN_RECT_MASK_SOURCE) &&
            (flags(bn) & NN_FUSES_RELU) && P->ncons[q] == 1 && bn->storage == q && !bn->grad_source && q != g->out)
            bn->fused_into = i;
    }
}

/* The values node n's fwd reads: its inputs, or with fuse_from those of the fused
 * node (a BN fused into it through an add: that BN's input). Returns how many. */
static int fwd_reads(const nn_graph *g, const nn_node *n, int *v)
{
    int self = (int)(n - g->nodes), k = 0;
    const nn_node *src = n->fuse_from ? &g->nodes[n->fuse_from] : n;
    for (int j = 0; j < src->nin; j++) {
        const nn_node *in = &g->nodes[src->in[j]];
        int x = n->fuse_from && in->fused_into == self && src->in[j] != n->fuse_from ? in->in[0] : src->in[j];
        v[k++] = g->nodes[x].storage;
    }
    return k;
}

/* recompute: cheap nodes (NN_RECOMPUTE, or at most g->recompute_macs multiply-adds per
 * output) with one reader and no view of them; a rectifier after a recomputed
 * NN_RECT_MASK_SOURCE takes its mask from that node's input. */
static void pass_recompute(pl *P)
{
    nn_graph *g = P->g;
    for (int i = 1; P->rc && i < P->N; i++) {
        nn_node *n = &g->nodes[i];
        int cheap = (flags(n) & NN_RECOMPUTE) || (n->op->macs && n->op->macs(n) <= g->recompute_macs);
        n->recompute = cheap && n->storage == i && i != g->out && P->ncons[i] == 1 && !n->folded && !n->maxt_from &&
                       !n->fused_into;
    }
    for (int i = 1; i < P->N; i++)
        if (g->nodes[i].storage != i) g->nodes[g->nodes[i].storage].recompute = 0;
    for (int i = 1; i < P->N; i++) {
        nn_node *n = &g->nodes[i], *u = &g->nodes[n->in[0]];
        n->mask_from_bn = n->recompute && !n->fuse_from && (flags(n) & NN_RECTIFIER) && u->recompute &&
                          (flags(u) & NN_RECT_MASK_SOURCE) && P->ncons[n->in[0]] == 1;
    }
}

/* lifetimes: outputs and gradients per storage root. */
static void pass_lifetimes(pl *P)
{
    nn_graph *g = P->g;
    int N = P->N, *y0 = P->y0, *y1 = P->y1, *d0 = P->d0, *d1 = P->d1;
    for (int i = 0; i < N; i++) { y0[i] = fw(i); y1[i] = fw(i); d0[i] = 1 << 30; d1[i] = -1; }
    for (int i = 1; i < N; i++) {
        nn_node *n = &g->nodes[i];
        int s = n->storage;
        if (flags(n) & NN_BWD_OUTPUT && !n->recompute && !n->folded && !nn_relu_bwd_fused(g->nodes, n) &&
            y1[s] < bw(P, i))
            y1[s] = bw(P, i);
        if (n->fuse_from) { /* what the fused fwd reads */
            int v[NN_MAX_IN], nv = fwd_reads(g, n, v);
            for (int k = 0; k < nv; k++)
                if (y1[v[k]] < fw(i)) y1[v[k]] = fw(i);
        }
        if (flags(n) & NN_SOURCE) y1[s] = 4 * N + 8; /* extra inputs (tests) live throughout */
        if (i == g->out) {
            int t = g->out_is_logp ? bw(P, i) : loss_t(P);
            if (y1[s] < t) y1[s] = t;
            if (!g->out_is_logp && n->needs_grad && d0[s] > loss_t(P)) d0[s] = loss_t(P);
        }
        for (int k = 0; k < n->nin; k++) {
            int v = g->nodes[n->in[k]].storage;
            int t = (flags(n) & NN_BWD_INPUT) && !g->nodes[v].recompute ? bw(P, i) : fw(i);
            if (y1[v] < t) y1[v] = t;
            if (g->nodes[n->in[k]].needs_grad && d0[v] > bw(P, i)) d0[v] = bw(P, i);
        }
        if (n->needs_grad && d1[s] < bw(P, s)) d1[s] = bw(P, s);
    }
    for (int i = 1; i < N; i++) { /* sparse: the max's output, dy (and argmax, in
                                   * pass_items) live to the conv's backward; no dy below */
        int m = g->nodes[i].maxt_from;
        if (!m) continue;
        y0[m] = fw(i); /* the conv's forward writes the max's output */
        if (y1[m] < bw(P, i)) y1[m] = bw(P, i);
        if (d1[m] < bw(P, i)) d1[m] = bw(P, i);
        d1[i] = d1[g->nodes[m].in[0]] = -1;
    }
    for (int i = 1; i < N; i++) { /* BN -> ReLU: ReLU's dy lives to BN's backward; no BN dy */
        nn_node *n = &g->nodes[i];
        if (!nn_relu_bwd_fused(g->nodes, n) || !n->needs_grad) continue;
        if (d1[i] < bw(P, n->fuse_from)) d1[i] = bw(P, n->fuse_from);
        d1[n->fuse_from] = -1;
    }
}

static void use(pl *P, int v, int t, int at);

/* Node v's fwd re-runs just before the backward of node `at`. */
static void materialize(pl *P, int v, int at)
{
    nn_graph *g = P->g;
    nn_node *n = &g->nodes[v];
    int tm = bw(P, at) - 1;
    int rd[NN_MAX_IN], nrd = fwd_reads(g, n, rd);
    P->mat[v] = 1;
    for (int k = 0; k < nrd; k++) use(P, rd[k], tm, at);
    n->rc_next = -1;
    if (P->tail[at] < 0) g->nodes[at].rc_head = v;
    else g->nodes[P->tail[at]].rc_next = v;
    P->tail[at] = v;
    /* Over its input when that input is read by nothing else, here or later. */
    int u = g->nodes[n->in[0]].storage;
    const nn_node *un = &g->nodes[u];
    P->ybroot[v] = v;
    if ((flags(n) & NN_FWD_INPLACE) && !(flags(n) & NN_BWD_INPUT) && !n->fuse_from && un->recompute && P->ncons[u] == 1 &&
        !(flags(un) & NN_BWD_OUTPUT) && nn_shape_numel(un->out) == nn_shape_numel(n->out))
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

/* reruns: the backward in the executor's order, which recomputed values it reads and
 * when; each is re-made before the first backward that reads it. */
static void pass_reruns(pl *P)
{
    nn_graph *g = P->g;
    for (int i = P->N - 1; P->rc && i >= 1; i--) {
        nn_node *n = &g->nodes[i];
        if (!n->needs_grad || n->storage != i || n->folded || nn_relu_bwd_fused(g->nodes, n)) continue;
        if (flags(n) & NN_BWD_INPUT)
            for (int k = 0; k < n->nin; k++) use(P, g->nodes[n->in[k]].storage, bw(P, i), i);
        if (n->mask_from_bn) use(P, g->nodes[g->nodes[n->in[0]].in[0]].storage, bw(P, i), i);
        else if (flags(n) & NN_BWD_OUTPUT) use(P, i, bw(P, i), i);
    }
}

/* A gradient sharing root r with node i's that is still read after i's backward
 * (a sibling through an NN_BWD_IDENTITY node): i must not write over r then. */
static int read_later(const pl *P, int r, int i)
{
    for (int m = 1; m < P->N; m++)
        if (m != i && P->dyroot[m] == r && P->d1[m] > bw(P, i)) return 1;
    return 0;
}

/* Nothing but the identity node and the value's own backward writes its gradient:
 * no other reader, or one whose accumulation the rectifier's backward takes
 * (pass_defer). */
static int only_own_writes(const pl *P, int v)
{
    const nn_graph *g = P->g;
    if (P->ncons[v] == 1) return 1;
    return P->ncons[v] == 2 && g->nodes[v].acc_from && g->nodes[g->nodes[v].acc_from].acc_defer;
}

/* inplace: input 0's dy is the node's dy when the node writes it first, unless a
 * sibling sharing that buffer is read later. An NN_BWD_IDENTITY node (the add) hands
 * its dy to its other inputs too, when only they write them (the add, then their own
 * backward): a residual block's gradient is then never copied. */
static void pass_inplace(pl *P)
{
    nn_graph *g = P->g;
    for (int i = P->N - 1; P->rc && i >= 1; i--) {
        nn_node *n = &g->nodes[i];
        if (!(flags(n) & (NN_BWD_INPLACE | NN_BWD_IDENTITY)) || n->storage != i || !n->needs_grad || n->folded)
            continue;
        int ident = (flags(n) & NN_BWD_IDENTITY) != 0;
        if (!ident && read_later(P, P->dyroot[i], i)) continue;
        for (int k = 0; k < (ident ? n->nin : 1); k++) {
            int v = n->in[k];
            nn_node *vn = &g->nodes[v];
            if (v != 0 && vn->needs_grad && vn->storage == v && vn->dy_first == i &&
                nn_shape_numel(vn->out) == nn_shape_numel(n->out) && (k == 0 || (only_own_writes(P, v) &&
                P->ncons[n->in[0]] == 1)))
                P->dyroot[v] = P->dyroot[i];
        }
    }
}

/* accumulation: values read by a consumer other than the first writer accumulate
 * through an accumulation buffer (at most one such input per node). When that value
 * is a rectifier's output and the consumer comes right after it (a residual block's
 * first conv), the rectifier's backward, next in line, adds the buffer in its own
 * pass (acc_defer / acc_from; the same sum, then the same mask). */
static void pass_defer(pl *P)
{
    nn_graph *g = P->g;
    for (int i = 0; i < P->N; i++) g->nodes[i].acc_defer = g->nodes[i].acc_from = 0;
    for (int i = 1; i < P->N; i++) {
        nn_node *n = &g->nodes[i];
        for (int k = 0; k < n->nin; k++) {
            nn_node *v = &g->nodes[n->in[k]];
            if (v->needs_grad && v->dy_first != i && n->in[k] == i - 1 && n->storage == i && !n->folded &&
                (flags(v) & NN_RECTIFIER) && v->storage == i - 1 && !v->folded && !v->mask_from_bn &&
                !nn_relu_bwd_fused(g->nodes, v) && !g->no_fuse && !g->on_device) {
                n->acc_defer = 1;
                v->acc_from = i;
            }
        }
    }
}

/* half: device graphs under --amp with g->act16 keep an output in --amp's 16-bit type
 * (nn_node.y16) when its op writes it so (NN_OUT16), every reader's op reads it so
 * (NN_IN16), and nothing else sees the buffer: no view or in-place node on it, not the
 * graph's output or a wanted gradient. The readers that multiply it (conv, linear)
 * round their operands to that type anyway: the same bits; the others (BN, ReLU, add,
 * pools) read the rounded value, as under PyTorch's autocast. An add's output is 16-bit
 * only when both inputs are (NN_OUT16_ALL_IN: autocast's type promotion), so GPT's
 * residual stream, fed by the fp32 embedding, stays fp32. Gradients stay fp32. */
static int half_ok(const nn_graph *g, const nn_node *n, unsigned flag)
{
    return (flags(n) & flag) && (!n->op->half_ok || n->op->half_ok(g, n));
}

static void pass_half(pl *P)
{
    nn_graph *g = P->g;
    for (int i = 0; i < P->N; i++) g->nodes[i].y16 = 0;
    if (!g->on_device || g->amp == NN_AMP_NONE || !g->act16) return;
    for (int i = 1; i < P->N; i++) {
        nn_node *n = &g->nodes[i];
        if (!half_ok(g, n, NN_OUT16) || n->storage != i || i == g->out || n->grad_source || !P->ncons[i] ||
            n->fused_into)
            continue;
        int ok = 1;
        for (int k = 0; k < n->nin && (flags(n) & NN_OUT16_ALL_IN); k++) ok &= g->nodes[n->in[k]].y16;
        for (int j = i + 1; j < P->N && ok; j++) {
            const nn_node *c = &g->nodes[j];
            if (c->storage == i) ok = 0;
            for (int k = 0; k < c->nin && ok; k++)
                if (c->in[k] == i && !half_ok(g, c, NN_IN16)) ok = 0;
        }
        n->y16 = ok;
    }
}

/* nhwc: device graphs with g->channels_last keep an output channels last (nn_node.nhwc,
 * its gradient too) where its op can write it so (nhwc_out: a conv by its K; BN, ReLU,
 * add and max pool when their inputs are NHWC) and every reader's op reads it so
 * (nhwc_in: conv by its C, those four, the global average pool); nothing else sees the
 * buffer (no view of it, not the graph's output or a wanted gradient). From every
 * candidate, demoted until no rule is broken: a tensor an op cannot read NHWC stays
 * NCHW, and the ops that follow their inputs' layout follow it, so the graph needs no
 * conversions (the data's NCHW images go to the stem conv, which writes NHWC; the global
 * average pool's [n, c] is the same in both layouts). */
static int nhwc_cand(const pl *P, const nn_node *n, int i)
{
    const nn_graph *g = P->g;
    if (!n->op->nhwc_out || n->storage != i || i == g->out || n->grad_source || !P->ncons[i] || n->maxt_from ||
        n->folded)
        return 0;
    for (int j = i + 1; j < P->N; j++)
        if (g->nodes[j].storage == i) return 0; /* a view of it */
    return 1;
}

/* Whether node i, planned NHWC, still may be: its op writes it so from its inputs'
 * layouts, every reader reads it so (the ops that follow their inputs: when their own
 * output stays NHWC). */
static int nhwc_holds(const pl *P, int i)
{
    const nn_graph *g = P->g;
    const nn_node *n = &g->nodes[i];
    if (!n->op->nhwc_out(g, n)) return 0;
    for (int j = i + 1; j < P->N; j++) {
        const nn_node *c = &g->nodes[j];
        for (int k = 0; k < c->nin; k++)
            if (c->in[k] == i && (!c->op->nhwc_in || !c->op->nhwc_in(g, c))) return 0;
    }
    return 1;
}

static void pass_nhwc(pl *P)
{
    nn_graph *g = P->g;
    for (int i = 0; i < P->N; i++) g->nodes[i].nhwc = 0;
    if (!g->on_device || g->amp == NN_AMP_NONE || !g->channels_last) return;
    for (int i = 1; i < P->N; i++) g->nodes[i].nhwc = nhwc_cand(P, &g->nodes[i], i);
    for (int changed = 1; changed;) { /* only ever demotes: ends */
        changed = 0;
        for (int i = 1; i < P->N; i++)
            if (g->nodes[i].nhwc && !nhwc_holds(P, i)) g->nodes[i].nhwc = 0, changed = 1;
    }
}

static int pass_accumulation(pl *P)
{
    nn_graph *g = P->g;
    for (int i = 1; i < P->N; i++) {
        nn_node *n = &g->nodes[i];
        int uses = 0;
        for (int k = 0; k < n->nin; k++) {
            nn_node *v = &g->nodes[n->in[k]];
            if (v->needs_grad && v->dy_first != i) {
                uses++;
                if (nn_shape_numel(v->out) > P->acc) P->acc = nn_shape_numel(v->out);
            }
        }
        if (uses > 1) {
            char what[96];
            snprintf(what, sizeof what, "has %d inputs that other nodes also read; at most one is supported", uses);
            return fail(P, i, what);
        }
    }
    return 0;
}

/* items: outputs, gradients (lifetimes gathered on their root), re-made outputs and
 * saved state. */
static void pass_items(pl *P)
{
    nn_graph *g = P->g;
    int N = P->N, *g0 = P->g0, *g1 = P->g1;
    size_t B = (size_t)g->max_batch;
    for (int i = 0; i < N; i++) { g0[i] = 1 << 30; g1[i] = -1; }
    for (int i = 1; i < N; i++) {
        nn_node *n = &g->nodes[i];
        if (n->storage != i || !n->needs_grad || P->d1[i] < 0) continue;
        int r = P->dyroot[i], t0 = P->d0[i] < P->d1[i] ? P->d0[i] : P->d1[i];
        if (g0[r] > t0) g0[r] = t0;
        if (g1[r] < P->d1[i]) g1[r] = P->d1[i];
    }
    for (int i = 1; i < N; i++) {
        nn_node *n = &g->nodes[i];
        size_t bytes = r64(B * nn_shape_numel(n->out) * sizeof(float));
        if (n->storage == i) {
            if ((!n->folded || n->folded == NN_FOLD_MAXT) && !n->fused_into)
                P->it[P->ni++] = (item){n->y16 ? r64(B * nn_shape_numel(n->out) * 2) : bytes, 0, P->y0[i], P->y1[i], i,
                                        NN_PL_Y};
            if (g1[i] >= 0) P->it[P->ni++] = (item){bytes, 0, g0[i], g1[i], i, NN_PL_DY};
            if (P->mat[i] && P->ybroot[i] == i) P->it[P->ni++] = (item){bytes, 0, P->yb0[i], P->yb1[i], i, NN_PL_YB};
        }
        size_t ab = n->aux_per_sample * B + n->aux_fixed;
        int a1 = P->yb1[i] > bw(P, i) ? P->yb1[i] : bw(P, i);
        int a0 = fw(i);
        for (int k = 1; k < i; k++) /* a max the conv k writes in forward, reads in backward */
            if (g->nodes[k].maxt_from == i) {
                a0 = fw(k);
                if (a1 < bw(P, k)) a1 = bw(P, k);
            }
        if (ab) P->it[P->ni++] = (item){r64(ab), 0, a0, a1, i, NN_PL_AUX};
    }
}

/* scratch: with the savers each node's workspace at the times it runs (forward,
 * backward, one for the re-runs before a backward, which go one after another) and
 * one accumulation buffer per reading backward; without them one accumulation buffer
 * for the whole backward (the workspace is then one shared block, nn/plan_mem.c). */
static void pass_scratch(pl *P)
{
    nn_graph *g = P->g;
    size_t B = (size_t)g->max_batch;
    for (int i = 1; P->rc && i < P->N; i++) {
        nn_node *n = &g->nodes[i];
        size_t w = nn_plan_node_ws(g, n);
        if (!w || n->storage != i) continue;
        P->it[P->ni++] = (item){r64(w), 0, fw(i), fw(i), i, NN_PL_WSF};
        if (n->needs_grad) P->it[P->ni++] = (item){r64(w), 0, bw(P, i), bw(P, i), i, NN_PL_WSB};
    }
    for (int i = 1; P->rc && i < P->N; i++) {
        size_t w = 0;
        for (int k = g->nodes[i].rc_head; k >= 0; k = g->nodes[k].rc_next)
            if (nn_plan_node_ws(g, &g->nodes[k]) > w) w = nn_plan_node_ws(g, &g->nodes[k]);
        if (w) P->it[P->ni++] = (item){r64(w), 0, bw(P, i) - 1, bw(P, i) - 1, i, NN_PL_WSR};
    }
    if (P->acc && !P->rc)
        P->it[P->ni++] = (item){r64(P->acc * B * sizeof(float)), 0, bw(P, P->N - 1), bw(P, 1), 0, NN_PL_ACC};
    for (int i = 1; P->acc && P->rc && i < P->N; i++) {
        nn_node *n = &g->nodes[i];
        for (int k = 0; k < n->nin; k++) {
            nn_node *v = &g->nodes[n->in[k]];
            if (v->needs_grad && v->dy_first != i) /* deferred: to the rectifier's backward */
                P->it[P->ni++] = (item){r64(B * nn_shape_numel(v->out) * sizeof(float)), 0, bw(P, i),
                                        n->acc_defer ? bw(P, n->in[k]) : bw(P, i), i, NN_PL_ACC};
        }
    }
}

int nn_plan_items(nn_graph *g, int rc, item **items, int **roots, char *err, size_t errlen)
{
    int N = g->nn;
    pl P = {.g = g, .N = N, .rc = rc, .err = err, .errlen = errlen};
    int **arrs[] = {&P.ncons, &P.y0, &P.y1, &P.d0, &P.d1, &P.dyroot, &P.yb0,
                    &P.yb1,   &P.ybroot, &P.mat, &P.tail, &P.g0, &P.g1};
    for (size_t k = 0; k < sizeof arrs / sizeof *arrs; k++) *arrs[k] = calloc((size_t)N, sizeof(int)); /* start-up only */
    P.it = malloc(sizeof *P.it * (size_t)(8 * N + 2));
    int rcode = pass_consumers(&P);
    if (!rcode) {
        pass_fusions(&P);
        pass_recompute(&P);
        pass_lifetimes(&P);
        pass_reruns(&P);
        pass_defer(&P);
        pass_inplace(&P);
        pass_half(&P);
        pass_nhwc(&P);
        rcode = pass_accumulation(&P);
    }
    if (!rcode) {
        pass_items(&P);
        pass_scratch(&P);
        /* Members of a root take its buffer after placement (nn/plan_mem.c). */
        int *rt = malloc(sizeof(int) * 2 * (size_t)N);
        for (int i = 0; i < N; i++) {
            rt[i] = P.dyroot[i];
            rt[N + i] = P.mat[i] ? P.ybroot[i] : -1;
        }
        *roots = rt;
        *items = P.it;
    } else {
        free(P.it);
    }
    for (size_t k = 0; k < sizeof arrs / sizeof *arrs; k++) free(*arrs[k]);
    return rcode ? -1 : P.ni;
}
