/* tok_pos_embed (GPT-2's wte + wpe): a language-model window of T + 1 token ids (the
 * last is only a target, g->lm) -> [T, 1, dim] rows wte[id] + wpe[t]. wte N(0, 0.02),
 * wpe N(0, 0.01) as GPT-2. The vocabulary is the data set's in a cfg file. When a
 * classifier reads wte too (lm_loss, tied), that classifier writes wte's gradient
 * first in backward and this op adds its own (`tied`, set by nn_lm_loss). */
#include "nn/ops/op_def.h"
#include "kernels/k_tfm.h"
#include <stdint.h>

typedef struct tpe_attr { int vocab, dim, ctx; int tied; /* derived: see above */ } tpe_attr;
NN_ATTR_ACCESS(tpe_attr)
static const nn_attr tpe_attrs[] = {NN_DATA_INT(tpe_attr, vocab, "vocab"), NN_INT(tpe_attr, dim, "dim", NN_ATTR_REQUIRED),
                                    NN_INT(tpe_attr, ctx, "ctx", 1024), {NULL}};

static int tpe_infer(nn_graph *g, nn_node *n, char *err, size_t errlen)
{
    nn_shape x = nn_in(g, n, 0)->out;
    if (!x.tokens || x.c != 1 || x.h != 1) NN_BAD("needs token ids as input (token shards or --data synthetic)");
    tpe_attr a = tpe_attr_of(n);
    int T = x.w - g->lm;
    if (a.vocab <= 1 || a.dim <= 0 || a.ctx <= 0) NN_BAD("bad vocabulary %d / width %d / context %d", a.vocab, a.dim, a.ctx);
    if (T < 1 || T > a.ctx) NN_BAD("a sequence of %d tokens, the model's context is %d (--seq-len)", T, a.ctx);
    n->out = (nn_shape){T, 1, a.dim, 0};
    int we[2] = {a.vocab, a.dim}, wp[2] = {a.ctx, a.dim};
    int w = nn_param_add(g, n, "wte.weight", 2, we, NN_INIT_NORMAL, 0, 0);
    int p = nn_param_add(g, n, "wpe.weight", 2, wp, NN_INIT_NORMAL, 0, 0);
    if (w < 0 || p < 0) return -1;
    g->p[w].init_std = 0.02f;
    g->p[p].init_std = 0.01f;
    return 0;
}

static void tpe_fwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    const nn_node *x = nn_in(g, n, 0);
    k_tok_pos_embed_fwd(r->n, n->out.c, n->out.w, (const int32_t *)(const void *)x->y, x->out.w, nn_pw(g, n, 0),
                        nn_pw(g, n, 1), n->y);
}

static void tpe_bwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    const nn_node *x = nn_in(g, n, 0);
    tpe_attr a = tpe_attr_of(n);
    k_tok_pos_embed_bwd(r->n, n->out.c, n->out.w, a.vocab, (const int32_t *)(const void *)x->y, x->out.w, n->dy,
                        nn_pg(g, n, 0), nn_pg(g, n, 1), a.tied);
    /* positions past T (wpe has ctx rows) get a zero gradient: backward overwrites */
    memset(nn_pg(g, n, 1) + (size_t)n->out.c * n->out.w, 0, sizeof(float) * (size_t)(a.ctx - n->out.c) * n->out.w);
}

#if DDPRT_CUDA
static int tpe_fwd_cuda(nn_graph *g, nn_node *n, const nn_run *r)
{
    const nn_node *x = nn_in(g, n, 0);
    return k_cuda_tok_pos_embed_fwd(r->n, n->out.c, n->out.w, (const int32_t *)(const void *)x->y, x->out.w,
                                    nn_pw(g, n, 0), nn_pw(g, n, 1), n->y, r->stream);
}

static int tpe_bwd_cuda(nn_graph *g, nn_node *n, const nn_run *r)
{
    const nn_node *x = nn_in(g, n, 0);
    tpe_attr a = tpe_attr_of(n);
    /* wpe rows past T: zeros (the kernel writes the first T rows) */
    return k_cuda_tok_pos_embed_bwd(r->n, n->out.c, n->out.w, a.vocab, (const int32_t *)(const void *)x->y, x->out.w,
                                    n->dy, nn_pg(g, n, 0), nn_pg(g, n, 1), a.tied, r->stream) ||
           (a.ctx > n->out.c && port_memset_dev(nn_pg(g, n, 1) + (size_t)n->out.c * n->out.w, 0,
                                                sizeof(float) * (size_t)(a.ctx - n->out.c) * n->out.w, r->stream,
                                                "tok_pos_embed: wpe gradient past T"));
}
#endif

const nn_op nn_op_tok_pos_embed = {
    .kind = "tok_pos_embed", .flags = NN_BWD_INPUT, .attrs = tpe_attrs, .attr_size = sizeof(tpe_attr),
    .infer = tpe_infer, .fwd = tpe_fwd, .bwd = tpe_bwd,
    NN_CUDA_ONLY(.fwd_cuda = tpe_fwd_cuda, .bwd_cuda = tpe_bwd_cuda)};

int nn_tok_pos_embed(nn_graph *g, const char *name, int x, int vocab, int dim, int ctx)
{
    tpe_attr a = {vocab, dim, ctx, 0};
    return nn_add(g, &nn_op_tok_pos_embed, name, &x, 1, &a, sizeof a);
}

void nn_tok_pos_embed_tie(nn_graph *g, int e)
{
    tpe_attr a = tpe_attr_of(&g->nodes[e]);
    a.tied = 1;
    tpe_attr_set(&g->nodes[e], &a);
}

int nn_tok_pos_embed_vocab(const nn_node *n) { return tpe_attr_of(n).vocab; }
