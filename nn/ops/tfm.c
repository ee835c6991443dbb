/* Transformer ops (GPT-2). Activations are [T rows, C] per sample, shape {T, 1, C}.
 *   tok_pos_embed  token ids -> wte[id] + wpe[t]; ia: vocab, C, n_ctx, tied (a
 *                  classifier reads wte and writes its gradient first: added to)
 *   layernorm      ia: -; fa[0] eps; weight, bias; keeps mean, rstd per row
 *   conv1d_hf      Hugging Face's Conv1D (weight [in, out]); ia: out, fa[0] init std
 *   gelu           tanh form
 *   attention      causal self-attention on [T, 3C] (q, k, v); ia: heads, stored; keeps
 *                  lse per row, or (stored = 1, the comparison point) the probabilities
 *   lm_loss        the classifier tied to the embedding node ia[0] (its first
 *                  parameter, wte) with softmax cross-entropy on the next tokens of
 *                  the input window (input 1): output [1] per sample = its mean token
 *                  loss; backward scales by g->lm_scale / T (nn_backward sets it)
 * A language-model input is a window of T + 1 tokens (g->lm): inputs [0, T), targets
 * [1, T]. */
#include "nn/ops/ops.h"
#include "kernels/k_tfm.h"
#include <math.h>
#include <stdint.h>
#include <string.h>

/* ---- tok_pos_embed */
static int emb_infer(nn_graph *g, nn_node *n, char *err, size_t errlen)
{
    nn_shape x = nn_in(g, n, 0)->out;
    if (!x.tokens || x.c != 1 || x.h != 1) NN_BAD("needs token ids as input (token shards or --data synthetic)");
    int vocab = n->ia[0], dim = n->ia[1], ctx = n->ia[2], T = x.w - g->lm;
    if (vocab <= 1 || dim <= 0 || ctx <= 0) NN_BAD("bad vocabulary %d / width %d / context %d", vocab, dim, ctx);
    if (T < 1 || T > ctx) NN_BAD("a sequence of %d tokens, the model's context is %d (--seq-len)", T, ctx);
    n->out = (nn_shape){T, 1, dim, 0};
    int we[2] = {vocab, dim}, wp[2] = {ctx, dim};
    int a = nn_param_add(g, n, "wte.weight", 2, we, NN_INIT_NORMAL, 0, 0);
    int b = nn_param_add(g, n, "wpe.weight", 2, wp, NN_INIT_NORMAL, 0, 0);
    g->p[a].init_std = 0.02f;
    g->p[b].init_std = 0.01f;
    return 0;
}

static void emb_fwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    const nn_node *x = nn_in(g, n, 0);
    k_tok_pos_embed_fwd(r->n, n->out.c, n->out.w, (const int32_t *)(const void *)x->y, x->out.w, nn_pw(g, n, 0),
                        nn_pw(g, n, 1), n->y);
}

static void emb_bwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    const nn_node *x = nn_in(g, n, 0);
    k_tok_pos_embed_bwd(r->n, n->out.c, n->out.w, n->ia[0], (const int32_t *)(const void *)x->y, x->out.w, n->dy,
                        nn_pg(g, n, 0), nn_pg(g, n, 1), n->ia[3]);
    /* positions past T (wpe has n_ctx rows) get a zero gradient: backward overwrites */
    memset(nn_pg(g, n, 1) + (size_t)n->out.c * n->out.w, 0, sizeof(float) * (size_t)(n->ia[2] - n->out.c) * n->out.w);
}

const nn_op nn_op_tok_pos_embed = {"tok_pos_embed", NN_BWD_INPUT, emb_infer, NULL, emb_fwd, emb_bwd,
                                   NN_CUDA(NULL, NULL, NULL)};

/* ---- layernorm */
static int ln_infer(nn_graph *g, nn_node *n, char *err, size_t errlen)
{
    NN_NEED_FLOAT(0);
    n->out = nn_in(g, n, 0)->out;
    int w = n->out.w;
    nn_param_add(g, n, "weight", 1, &w, NN_INIT_ONES, 0, 1);
    nn_param_add(g, n, "bias", 1, &w, NN_INIT_ZEROS, 0, 1);
    n->aux_per_sample = 2 * (size_t)n->out.c * sizeof(float);
    return 0;
}

static void ln_fwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    int rows = r->n * n->out.c;
    float *mean = n->aux, *rstd = mean + rows;
    k_layernorm_fwd(rows, n->out.w, nn_x(g, n, 0), nn_pw(g, n, 0), nn_pw(g, n, 1), n->fa[0], n->y, mean, rstd);
}

static void ln_bwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    int rows = r->n * n->out.c;
    const float *mean = n->aux, *rstd = mean + rows;
    k_layernorm_bwd(rows, n->out.w, nn_x(g, n, 0), nn_pw(g, n, 0), mean, rstd, n->dy, nn_dx(g, n, 0), nn_pg(g, n, 0),
                    nn_pg(g, n, 1));
}

const nn_op nn_op_layernorm = {"layernorm", NN_BWD_INPUT | NN_RECOMPUTE | NN_BWD_INPLACE, ln_infer, NULL, ln_fwd, ln_bwd, NN_CUDA(NULL, NULL, NULL)};

/* ---- conv1d_hf */
static int c1_infer(nn_graph *g, nn_node *n, char *err, size_t errlen)
{
    NN_NEED_FLOAT(0);
    nn_shape x = nn_in(g, n, 0)->out;
    if (n->ia[0] <= 0) NN_BAD("bad width %d", n->ia[0]);
    n->out = (nn_shape){x.c, 1, n->ia[0], 0};
    int ws[2] = {x.w, n->ia[0]};
    int a = nn_param_add(g, n, "weight", 2, ws, NN_INIT_NORMAL, 0, 0);
    nn_param_add(g, n, "bias", 1, &n->ia[0], NN_INIT_ZEROS, 0, 1);
    g->p[a].init_std = n->fa[0] > 0 ? n->fa[0] : 0.02f;
    return 0;
}

static void c1_fwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    k_conv1d_hf_fwd(r->n * n->out.c, nn_in(g, n, 0)->out.w, n->out.w, nn_x(g, n, 0), nn_pw(g, n, 0), nn_pw(g, n, 1),
                    n->y);
}

static void c1_bwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    k_conv1d_hf_bwd(r->n * n->out.c, nn_in(g, n, 0)->out.w, n->out.w, nn_x(g, n, 0), nn_pw(g, n, 0), n->dy,
                    nn_dx(g, n, 0), nn_pg(g, n, 0), nn_pg(g, n, 1), r->ws);
}

static size_t c1_ws(const nn_graph *g, const nn_node *n, int max_batch)
{
    (void)max_batch;
    return k_conv1d_hf_workspace(nn_in(g, n, 0)->out.w, n->out.w);
}

const nn_op nn_op_conv1d_hf = {"conv1d_hf", NN_BWD_INPUT, c1_infer, c1_ws, c1_fwd, c1_bwd, NN_CUDA(NULL, NULL, NULL)};

/* ---- gelu */
static int gelu_infer(nn_graph *g, nn_node *n, char *err, size_t errlen)
{
    NN_NEED_FLOAT(0);
    n->out = nn_in(g, n, 0)->out;
    return 0;
}

static void gelu_fwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    k_gelu_fwd((size_t)r->n * nn_shape_numel(n->out), nn_x(g, n, 0), n->y);
}

static void gelu_bwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    float *dx = nn_dx(g, n, 0);
    if (dx) k_gelu_bwd((size_t)r->n * nn_shape_numel(n->out), nn_x(g, n, 0), n->dy, dx);
}

const nn_op nn_op_gelu = {"gelu", NN_BWD_INPUT | NN_RECOMPUTE | NN_BWD_INPLACE, gelu_infer, NULL, gelu_fwd, gelu_bwd,
                          NN_CUDA(NULL, NULL, NULL)};

/* ---- attention */
static int at_infer(nn_graph *g, nn_node *n, char *err, size_t errlen)
{
    NN_NEED_FLOAT(0);
    nn_shape x = nn_in(g, n, 0)->out;
    int h = n->ia[0];
    if (h <= 0 || x.w % (3 * h)) NN_BAD("input width %d is not 3 x heads (%d) x head size", x.w, h);
    if (x.w / (3 * h) > K_ATTN_MAX_HD) NN_BAD("head size %d above %d", x.w / (3 * h), K_ATTN_MAX_HD);
    if (n->ia[1] && x.c > K_ATTN_STORED_MAX_T) NN_BAD("stored attention takes T <= %d", K_ATTN_STORED_MAX_T);
    n->out = (nn_shape){x.c, 1, x.w / 3, 0};
    n->aux_per_sample = (size_t)h * x.c * (n->ia[1] ? (size_t)x.c : 1) * sizeof(float);
    return 0;
}

static void at_fwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    int h = n->ia[0];
    if (n->ia[1]) k_attention_stored_fwd(r->n, n->out.c, h, n->out.w / h, nn_x(g, n, 0), n->y, n->aux);
    else k_attention_fwd(r->n, n->out.c, h, n->out.w / h, nn_x(g, n, 0), n->y, n->aux);
}

static void at_bwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    int h = n->ia[0];
    float *dx = nn_dx(g, n, 0);
    if (dx && n->ia[1]) k_attention_stored_bwd(r->n, n->out.c, h, n->out.w / h, nn_x(g, n, 0), n->aux, n->dy, dx);
    else if (dx) k_attention_bwd(r->n, n->out.c, h, n->out.w / h, nn_x(g, n, 0), n->y, n->aux, n->dy, dx);
}

const nn_op nn_op_attention = {"attention", NN_BWD_INPUT | NN_BWD_OUTPUT, at_infer, NULL, at_fwd, at_bwd,
                               NN_CUDA(NULL, NULL, NULL)};

/* ---- lm_loss: inputs x [T, C] and the token window (node 0) */
static const nn_node *lm_emb(const nn_graph *g, const nn_node *n) { return &g->nodes[n->ia[0]]; }

static int lm_infer(nn_graph *g, nn_node *n, char *err, size_t errlen)
{
    NN_NEED_FLOAT(0);
    nn_shape x = nn_in(g, n, 0)->out, t = nn_in(g, n, 1)->out;
    const nn_node *e = n->ia[0] > 0 && n->ia[0] < (int)(n - g->nodes) ? lm_emb(g, n) : NULL;
    if (!e || e->op != &nn_op_tok_pos_embed) NN_BAD("ia[0] must name the tok_pos_embed node whose wte it reads");
    if (!g->lm || !t.tokens || t.w != x.c + 1) NN_BAD("needs the language-model window of %d tokens as input 1", x.c + 1);
    if (x.w != e->out.w) NN_BAD("width %d, the embedding's is %d", x.w, e->out.w);
    n->out = (nn_shape){1, 1, 1, 0};
    /* targets, row losses, and dx when forward makes the gradients too (g->lm_fuse) */
    n->aux_per_sample = (size_t)x.c * (sizeof(int32_t) + sizeof(float) + sizeof(float) * (size_t)x.w);
    return 0;
}

static size_t lm_ws(const nn_graph *g, const nn_node *n, int max_batch)
{
    const nn_node *x = nn_in(g, n, 0);
    return k_classifier_workspace(max_batch * x->out.c, x->out.w, lm_emb(g, n)->ia[0]);
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
    return k_classifier_fwd_bwd(rows, x->out.w, e->ia[0], x->y, g->params + g->p[e->p0].offset, tg, scale, lr, dx, dw,
                                0, r->ws);
}

/* Forward of a training step that backward will follow (g->lm_fuse, set by the
 * trainer): the gradients come out of the same logits (three passes over the
 * vocabulary instead of four); dx waits in aux, dW in wte's gradient, which nothing
 * else writes before this node's backward. */
static float *lm_dx_saved(const nn_node *n, int rows)
{
    return (float *)(void *)((int32_t *)n->aux + 2L * rows);
}

static void lm_fwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    int T = nn_in(g, n, 0)->out.c;
    n->ia[2] = r->train && g->lm_fuse && !r->recompute;
    if (n->ia[2])
        lm_run(g, n, r, g->lm_scale / (float)T, lm_dx_saved(n, r->n * T),
               g->grads + g->p[lm_emb(g, n)->p0].offset);
    else lm_run(g, n, r, 0.0f, NULL, NULL);
    const float *lr = (const float *)(const void *)((int32_t *)n->aux + (long)r->n * T);
    for (int b = 0; b < r->n; b++) {
        double s = 0;
        for (int t = 0; t < T; t++) s += lr[(long)b * T + t];
        n->y[b] = (float)(s / T);
    }
}

/* dW goes to wte's gradient first in backward (this node is the last reader); the
 * embedding node adds its own (ia[3] set by nn_lm_loss). */
static void lm_bwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    const nn_node *e = lm_emb(g, n);
    int T = nn_in(g, n, 0)->out.c;
    float *dx = nn_dx(g, n, 0);
    if (n->ia[2]) { /* made by the forward */
        if (dx) memcpy(dx, lm_dx_saved(n, r->n * T), sizeof(float) * (size_t)r->n * T * n->ia[3]);
        n->ia[2] = 0;
        return;
    }
    lm_run(g, n, r, g->lm_scale / (float)T, dx, g->grads + g->p[e->p0].offset);
}

const nn_op nn_op_lm_loss = {"lm_loss", NN_BWD_INPUT, lm_infer, lm_ws, lm_fwd, lm_bwd, NN_CUDA(NULL, NULL, NULL)};

/* ---- builders */
int nn_layernorm(nn_graph *g, const char *name, int x)
{
    float eps = 1e-5f;
    return nn_add(g, "layernorm", name, &x, 1, NULL, 0, &eps, 1);
}

int nn_conv1d_hf(nn_graph *g, const char *name, int x, int out, float init_std)
{
    return nn_add(g, "conv1d_hf", name, &x, 1, &out, 1, &init_std, 1);
}

int nn_gelu(nn_graph *g, int x) { return nn_add(g, "gelu", NULL, &x, 1, NULL, 0, NULL, 0); }
int nn_attention(nn_graph *g, int x, int heads, int stored)
{
    int ia[2] = {heads, stored};
    return nn_add(g, "attention", NULL, &x, 1, ia, 2, NULL, 0);
}

int nn_tok_pos_embed(nn_graph *g, const char *name, int x, int vocab, int dim, int ctx)
{
    int ia[4] = {vocab, dim, ctx, 0};
    return nn_add(g, "tok_pos_embed", name, &x, 1, ia, 4, NULL, 0);
}

int nn_lm_loss(nn_graph *g, const char *name, int x, int emb)
{
    int in[2] = {x, emb > 0 && emb < g->nn ? g->nodes[emb].in[0] : 0}; /* the window the embedding reads */
    if (emb > 0 && emb < g->nn) g->nodes[emb].ia[3] = 1; /* the embedding adds to wte's gradient */
    int ia[4] = {emb, 0, 0, g->nodes[x].out.w}; /* ia[2]: forward made the gradients; ia[3]: C */
    return nn_add(g, "lm_loss", name, in, 2, ia, 4, NULL, 0);
}
