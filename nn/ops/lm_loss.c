/* lm_loss: GPT-2's classifier tied to the token embedding, with softmax cross-entropy
 * fused and chunked (kernels/k_tfm.h: never B x T x V logits). Inputs: x [T, 1, C] and
 * the language-model window of T + 1 token ids (g->lm; the targets are ids 1..T).
 * The weight is the tok_pos_embed node's wte (attribute `embedding`: its index; -1,
 * the default, is the nearest one before this node): one parameter read by two nodes.
 * Output [1] per sample: its mean token loss. Backward scales by g->lm_scale / T
 * (nn_backward sets it) and writes wte's gradient first; the embedding, later in
 * backward, adds its own (its `tied`, set by this op's shape rule). */
#include "nn/ops/op_def.h"
#include "kernels/k_tfm.h"
#include <stdint.h>

extern const nn_op nn_op_tok_pos_embed;

typedef struct lm_attr {
    int emb;
    int fused; /* derived: this step's forward made the gradients too (g->lm_fuse) */
} lm_attr;
NN_ATTR_ACCESS(lm_attr)
static const nn_attr lm_attrs[] = {NN_INT(lm_attr, emb, "embedding", -1), {NULL}};

int nn_lm_loss_embedding(const nn_node *n) { return lm_attr_of(n).emb; }
static const nn_node *lm_emb(const nn_graph *g, const nn_node *n) { return &g->nodes[lm_attr_of(n).emb]; }

static int lm_infer(nn_graph *g, nn_node *n, char *err, size_t errlen)
{
    NN_NEED_FLOAT(0);
    nn_shape x = nn_in(g, n, 0)->out, t = nn_in(g, n, 1)->out;
    lm_attr a = lm_attr_of(n);
    int self = (int)(n - g->nodes);
    if (a.emb < 0)
        for (int i = self - 1; i > 0 && a.emb < 0; i--)
            if (g->nodes[i].op == &nn_op_tok_pos_embed) a.emb = i;
    if (a.emb <= 0 || a.emb >= self || g->nodes[a.emb].op != &nn_op_tok_pos_embed)
        NN_BAD("embedding=%d: no tok_pos_embed node there whose wte it could read", a.emb);
    lm_attr_set(n, &a);
    nn_tok_pos_embed_tie(g, a.emb);
    const nn_node *e = lm_emb(g, n);
    if (!g->lm || !t.tokens || t.w != x.c + 1) NN_BAD("needs the language-model window of %d tokens as input 1", x.c + 1);
    if (x.h != 1 || x.w != e->out.w) NN_BAD("width %d, the embedding's is %d", x.w, e->out.w);
    n->out = (nn_shape){1, 1, 1, 0};
    /* targets, row losses, and dx when forward makes the gradients too (g->lm_fuse) */
    n->aux_per_sample = (size_t)x.c * (sizeof(int32_t) + sizeof(float) + sizeof(float) * (size_t)x.w);
    return 0;
}

static size_t lm_ws(const nn_graph *g, const nn_node *n, int max_batch)
{
    const nn_node *x = nn_in(g, n, 0);
    return k_classifier_workspace(max_batch * x->out.c, x->out.w, nn_tok_pos_embed_vocab(lm_emb(g, n)));
}

/* targets (the window shifted by one) into aux, then the forward or fused backward */
static double lm_run(nn_graph *g, nn_node *n, const nn_run *r, float scale, float *dx, float *dw)
{
    const nn_node *x = nn_in(g, n, 0), *tok = nn_in(g, n, 1), *e = lm_emb(g, n);
    int T = x->out.c, rows = r->n * T;
    int32_t *tg = n->aux;
    float *lr = (float *)(void *)(tg + rows);
    const int32_t *ids = (const int32_t *)(const void *)tok->y;
    for (int b = 0; b < r->n; b++) memcpy(tg + (long)b * T, ids + (long)b * (T + 1) + 1, sizeof(int32_t) * (size_t)T);
    return k_classifier_fwd_bwd(rows, x->out.w, nn_tok_pos_embed_vocab(e), x->y, nn_pw(g, e, 0), tg, scale, lr, dx,
                                dw, 0, r->ws);
}

/* Forward of a training step that backward will follow (g->lm_fuse, set by the
 * trainer): the gradients come out of the same logits (three passes over the
 * vocabulary instead of four); dx waits in aux, dW in wte's gradient, which nothing
 * else writes before this node's backward. */
static float *lm_dx_saved(const nn_node *n, int rows) { return (float *)(void *)((int32_t *)n->aux + 2L * rows); }

static void lm_fwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    int T = nn_in(g, n, 0)->out.c;
    lm_attr a = lm_attr_of(n);
    a.fused = r->train && g->lm_fuse && !r->recompute;
    lm_attr_set(n, &a);
    if (a.fused) lm_run(g, n, r, g->lm_scale / (float)T, lm_dx_saved(n, r->n * T), nn_pg(g, lm_emb(g, n), 0));
    else lm_run(g, n, r, 0.0f, NULL, NULL);
    const float *lr = (const float *)(const void *)((int32_t *)n->aux + (long)r->n * T);
    for (int b = 0; b < r->n; b++) {
        double s = 0;
        for (int t = 0; t < T; t++) s += lr[(long)b * T + t];
        n->y[b] = (float)(s / T);
    }
}

static void lm_bwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    const nn_node *x = nn_in(g, n, 0);
    int T = x->out.c;
    float *dx = nn_dx(g, n, 0);
    lm_attr a = lm_attr_of(n);
    if (a.fused) { /* made by the forward */
        if (dx) memcpy(dx, lm_dx_saved(n, r->n * T), sizeof(float) * (size_t)r->n * T * x->out.w);
        a.fused = 0;
        lm_attr_set(n, &a);
        return;
    }
    lm_run(g, n, r, g->lm_scale / (float)T, dx, nn_pg(g, lm_emb(g, n), 0));
}

#if DDPRT_CUDA
/* On the device the forward makes the loss only and backward runs the classifier
 * again (no fused step: four passes over the vocabulary instead of three). */
static int lm_run_cuda(nn_graph *g, nn_node *n, const nn_run *r, float scale, float *dx, float *dw)
{
    const nn_node *x = nn_in(g, n, 0), *tok = nn_in(g, n, 1), *e = lm_emb(g, n);
    int T = x->out.c, rows = r->n * T;
    int32_t *tg = n->aux;
    float *lr = (float *)(void *)(tg + rows);
    return k_cuda_lm_targets(r->n, T, (const int32_t *)(const void *)tok->y, tg, r->stream) ||
           k_cuda_classifier_fwd_bwd(rows, x->out.w, nn_tok_pos_embed_vocab(e), x->y, nn_pw(g, e, 0), tg, scale, lr,
                                     dx, dw, 0, r->ws, r->stream);
}

static int lm_fwd_cuda(nn_graph *g, nn_node *n, const nn_run *r)
{
    int T = nn_in(g, n, 0)->out.c;
    const float *lr = (const float *)(const void *)((int32_t *)n->aux + (long)r->n * T);
    return lm_run_cuda(g, n, r, 0.0f, NULL, NULL) || k_cuda_row_means(r->n, T, lr, n->y, r->stream);
}

static int lm_bwd_cuda(nn_graph *g, nn_node *n, const nn_run *r)
{
    int T = nn_in(g, n, 0)->out.c;
    return lm_run_cuda(g, n, r, g->lm_scale / (float)T, nn_dx(g, n, 0), nn_pg(g, lm_emb(g, n), 0));
}

static size_t lm_ws_cuda(const nn_graph *g, const nn_node *n, int max_batch)
{
    const nn_node *x = nn_in(g, n, 0);
    return k_cuda_classifier_workspace(max_batch * x->out.c, x->out.w, nn_tok_pos_embed_vocab(lm_emb(g, n)));
}
#endif

const nn_op nn_op_lm_loss = {
    .kind = "lm_loss", .flags = NN_BWD_INPUT, .min_in = 2, .max_in = 2, .attrs = lm_attrs,
    .attr_size = sizeof(lm_attr), .infer = lm_infer, .workspace = lm_ws, .fwd = lm_fwd, .bwd = lm_bwd,
    NN_CUDA_ONLY(.fwd_cuda = lm_fwd_cuda, .bwd_cuda = lm_bwd_cuda, .workspace_cuda = lm_ws_cuda)};

int nn_lm_loss(nn_graph *g, const char *name, int x, int emb)
{
    int ok = emb > 0 && emb < g->nn;
    int in[2] = {x, ok ? g->nodes[emb].in[0] : 0}; /* the window the embedding reads */
    lm_attr a = {emb, 0};
    return nn_add(g, &nn_op_lm_loss, name, in, 2, &a, sizeof a);
}
