/* embedding (nn.Embedding): token ids [len] -> [dim, 1, len] (channels first, as the
 * conv1d that follows reads it). Weight ~ N(0, 1) as PyTorch. The vocabulary is the
 * data set's (a cfg file cannot set it: ids past it would read outside the table). */
#include "nn/ops/op_def.h"
#include <stdint.h>

typedef struct emb_attr { int vocab, dim; } emb_attr;
NN_ATTR_ACCESS(emb_attr)
static const nn_attr emb_attrs[] = {NN_DATA_INT(emb_attr, vocab, "vocab"), NN_INT(emb_attr, dim, "dim", 128), {NULL}};

static int emb_infer(nn_graph *g, nn_node *n, char *err, size_t errlen)
{
    nn_shape x = nn_in(g, n, 0)->out;
    if (!x.tokens || x.c != 1 || x.h != 1) NN_BAD("needs token ids as input (a text data set)");
    emb_attr a = emb_attr_of(n);
    if (a.vocab <= 1 || a.dim <= 0) NN_BAD("bad vocabulary %d / dimension %d", a.vocab, a.dim);
    n->out = (nn_shape){a.dim, 1, x.w, 0};
    int ws[2] = {a.vocab, a.dim};
    int p = nn_param_add(g, n, "weight", 2, ws, NN_INIT_NORMAL, 0, 0);
    if (p >= 0) g->p[p].sparse_rows = 1; /* the rows of this batch's ids only */
    return 0;
}

static void emb_fwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    k_embedding_fwd(r->n, n->out.w, n->out.c, (const int32_t *)nn_x(g, n, 0), nn_pw(g, n, 0), n->y);
}

static void emb_bwd(nn_graph *g, nn_node *n, const nn_run *r)
{
    const int32_t *ids = (const int32_t *)nn_x(g, n, 0);
    nn_param *p = &g->p[n->p0];
    int vocab = emb_attr_of(n).vocab, dim = n->out.c;
    float *dt = nn_pg(g, n, 0);
    if (!p->rows_nz) {
        k_embedding_bwd(r->n, n->out.w, dim, vocab, ids, n->dy, dt);
        return;
    }
    /* Row marks (--invariant's fold): the table is zeroed where marked only, when the
     * marks are known to cover it (the micro-batches of a step before the reduction). */
    unsigned char *nz = p->rows_nz;
    if (p->rows_known) {
        for (int v = 0; v < vocab; v++)
            if (nz[v]) memset(dt + (size_t)v * dim, 0, sizeof(float) * (size_t)dim);
        k_embedding_bwd_add(r->n, n->out.w, dim, vocab, ids, n->dy, dt);
    } else {
        k_embedding_bwd(r->n, n->out.w, dim, vocab, ids, n->dy, dt);
    }
    /* ops overwrite their gradients; the STASH / FINAL modes then add earlier micro-batches'
     * (nn/exec.c's merge_grads), so their rows stay marked */
    if (g->grad_mode == NN_GRAD_SET || g->grad_mode == NN_GRAD_STASH_FIRST) memset(nz, 0, (size_t)vocab);
    for (long i = 0, len = (long)r->n * n->out.w; i < len; i++) nz[ids[i]] = 1;
    p->rows_known = 1;
}

#if DDPRT_CUDA
static int emb_fwd_cuda(nn_graph *g, nn_node *n, const nn_run *r)
{
    return k_cuda_embedding_fwd(r->n, n->out.w, n->out.c, (const int32_t *)nn_x(g, n, 0), nn_pw(g, n, 0), n->y,
                                r->stream);
}

static int emb_bwd_cuda(nn_graph *g, nn_node *n, const nn_run *r)
{
    return k_cuda_embedding_bwd(r->n, n->out.w, n->out.c, emb_attr_of(n).vocab, (const int32_t *)nn_x(g, n, 0),
                                n->dy, nn_pg(g, n, 0), r->stream);
}
#endif

const nn_op nn_op_embedding = {
    .kind = "embedding", .flags = NN_BWD_INPUT, .attrs = emb_attrs, .attr_size = sizeof(emb_attr),
    .infer = emb_infer, .fwd = emb_fwd, .bwd = emb_bwd,
    NN_CUDA_ONLY(.fwd_cuda = emb_fwd_cuda, .bwd_cuda = emb_bwd_cuda)};

int nn_embedding(nn_graph *g, const char *name, int x, int vocab, int dim)
{
    emb_attr a = {vocab, dim};
    return nn_add(g, &nn_op_embedding, name, &x, 1, &a, sizeof a);
}
